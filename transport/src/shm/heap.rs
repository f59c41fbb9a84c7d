//! First-fit allocator for the shared heap, with coalescing. Only the owner allocates; the
//! bookkeeping is process-private.

use std::collections::{BTreeMap, HashSet};

/// Allocation granularity (a cache line).
const GRAIN: usize = 64;

/// Free space of a heap of fixed size, by offset.
pub(crate) struct HeapAlloc {
    free: BTreeMap<usize, usize>,
    /// Blocks a peer may still be copying into: never handed out again.
    quarantined: HashSet<usize>,
}

impl HeapAlloc {
    /// A heap of `len` bytes, all free.
    pub(crate) fn new(len: usize) -> Self {
        let mut free = BTreeMap::new();
        let len = len - len % GRAIN;
        if len > 0 {
            free.insert(0, len);
        }
        HeapAlloc {
            free,
            quarantined: HashSet::new(),
        }
    }

    /// Offset of `len` bytes (rounded up to the grain), or `None` if no block is large enough.
    pub(crate) fn alloc(&mut self, len: usize) -> Option<usize> {
        let len = len.max(1).checked_next_multiple_of(GRAIN)?;
        let (&off, &size) = self.free.iter().find(|(_, &s)| s >= len)?;
        self.free.remove(&off);
        if size > len {
            self.free.insert(off + len, size - len);
        }
        Some(off)
    }

    /// Keeps the block at `off` out of circulation when it is freed (a peer died, or stalled,
    /// in the middle of a direct copy into it).
    pub(crate) fn quarantine(&mut self, off: usize) {
        self.quarantined.insert(off);
    }

    /// Returns the block at `off` of `len` bytes (as passed to `alloc`).
    pub(crate) fn free(&mut self, off: usize, len: usize) {
        if self.quarantined.remove(&off) {
            return;
        }
        let Some(mut len) = len.max(1).checked_next_multiple_of(GRAIN) else {
            return;
        };
        let mut off = off;
        if let Some((&prev, &plen)) = self.free.range(..off).next_back() {
            if prev + plen == off {
                self.free.remove(&prev);
                off = prev;
                len += plen;
            }
        }
        if let Some(&nlen) = self.free.get(&(off + len)) {
            self.free.remove(&(off + len));
            len += nlen;
        }
        self.free.insert(off, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_frees_and_coalesces() {
        let mut h = HeapAlloc::new(1024);
        let a = h.alloc(100).unwrap();
        let b = h.alloc(64).unwrap();
        let c = h.alloc(1).unwrap();
        assert_eq!((a, b, c), (0, 128, 192));
        assert!(h.alloc(1024).is_none());
        h.free(b, 64);
        h.free(a, 100);
        h.free(c, 1);
        assert_eq!(h.alloc(1024), Some(0));
        assert!(h.alloc(1).is_none());
    }

    #[test]
    fn a_quarantined_block_is_never_reused() {
        let mut h = HeapAlloc::new(256);
        let a = h.alloc(128).unwrap();
        let b = h.alloc(128).unwrap();
        h.quarantine(a);
        h.free(a, 128);
        h.free(b, 128);
        assert_eq!(h.alloc(128), Some(b));
        assert!(h.alloc(1).is_none());
    }
}

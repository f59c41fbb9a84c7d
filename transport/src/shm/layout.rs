//! Where things are in a rank's segment, and the atomics that live there.
//!
//! ```text
//! [0, 4096)            control: magic, pid, doorbell (own line), sleepers (own line), closed,
//!                      the owner's threads' copy slots (from 1024)
//! [4096, +table)       region table: one 64-byte seqlocked entry per region slot
//! [.., +size*stride)   incoming rings, one per sender, each a control line + data
//! [.., +heap)          heap for regions the fabric allocates (peers store into it directly)
//! ```

use std::sync::atomic::{AtomicU32, AtomicU64};

use super::segment::Segment;

pub(crate) const MAGIC: u64 = 0x5244_434f_4c4c_5348; // "RDCOLLSH"
pub(crate) const CONTROL_BYTES: usize = 4096;
pub(crate) const ENTRY_BYTES: usize = 64;
pub(crate) const RING_CONTROL: usize = 128;
/// Where the copy slots start in the control block.
const COPY_SLOTS_OFFSET: usize = 1024;
const _: () = assert!(COPY_SLOTS_OFFSET + super::copy_slot::COPY_SLOTS * 8 <= CONTROL_BYTES);

/// Offsets inside one segment, the same for every rank of a job.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub(crate) size: usize,
    pub(crate) max_regions: usize,
    pub(crate) ring_bytes: usize,
    pub(crate) heap_bytes: usize,
}

impl Layout {
    pub(crate) fn table_offset(&self) -> usize {
        CONTROL_BYTES
    }
    pub(crate) fn rings_offset(&self) -> usize {
        (CONTROL_BYTES + self.max_regions * ENTRY_BYTES).next_multiple_of(4096)
    }
    pub(crate) fn ring_stride(&self) -> usize {
        RING_CONTROL + self.ring_bytes
    }
    /// Offset of the ring that carries `src`'s messages into this segment's owner.
    pub(crate) fn ring_offset(&self, src: usize) -> usize {
        self.rings_offset() + src * self.ring_stride()
    }
    pub(crate) fn heap_offset(&self) -> usize {
        (self.rings_offset() + self.size * self.ring_stride()).next_multiple_of(4096)
    }
    pub(crate) fn total(&self) -> usize {
        self.heap_offset() + self.heap_bytes
    }
    /// Checks that every offset of the layout is representable (sizes come from the
    /// environment), so the unchecked arithmetic above cannot overflow.
    pub(crate) fn checked_total(&self) -> Option<usize> {
        let table = self.max_regions.checked_mul(ENTRY_BYTES)?;
        let rings = CONTROL_BYTES
            .checked_add(table)?
            .checked_next_multiple_of(4096)?;
        let stride = RING_CONTROL.checked_add(self.ring_bytes)?;
        let heap = rings
            .checked_add(self.size.checked_mul(stride)?)?
            .checked_next_multiple_of(4096)?;
        heap.checked_add(self.heap_bytes)
    }
}

/// Typed views of a segment's shared words.
pub(crate) struct View<'a> {
    pub(crate) seg: &'a Segment,
    pub(crate) layout: Layout,
}

impl<'a> View<'a> {
    fn word64(&self, off: usize) -> &'a AtomicU64 {
        // `at` checks the range (it never panics: the layout fits by construction, and a
        // failure falls back to a static).
        match self.seg.at(off, 8) {
            // SAFETY: callers pass fixed offsets inside the control block or table, 8-aligned,
            // and `at` returned a pointer within the mapping, which outlives the view.
            Ok(p) => unsafe { &*(p as *const AtomicU64) },
            Err(_) => &FALLBACK64,
        }
    }
    fn word32(&self, off: usize) -> &'a AtomicU32 {
        match self.seg.at(off, 4) {
            // SAFETY: as for `word64`, 4-aligned.
            Ok(p) => unsafe { &*(p as *const AtomicU32) },
            Err(_) => &FALLBACK32,
        }
    }
    pub(crate) fn magic(&self) -> &'a AtomicU64 {
        self.word64(0)
    }
    pub(crate) fn pid(&self) -> &'a AtomicU64 {
        self.word64(8)
    }
    /// Address of this mapping in its owner's process (for the CMA probe).
    pub(crate) fn owner_base(&self) -> &'a AtomicU64 {
        self.word64(16)
    }
    pub(crate) fn doorbell(&self) -> &'a AtomicU32 {
        self.word32(64)
    }
    pub(crate) fn sleepers(&self) -> &'a AtomicU32 {
        self.word32(128)
    }
    /// Set once the owner's fabric is gone (dropped while its process lives on).
    pub(crate) fn closed(&self) -> &'a AtomicU32 {
        self.word32(192)
    }
    /// Copy slot `i` of the owner's threads: the tag of the peer region one of them copies
    /// into or out of right now, or 0 (see `copy_slot`).
    pub(crate) fn copy_slot(&self, i: usize) -> &'a AtomicU64 {
        self.word64(COPY_SLOTS_OFFSET + i * 8)
    }
    /// Field `field` of region-table entry `index`: 0 seq, 1 kind, 2 addr, 3 len, and 4 the
    /// number of peers copying directly into or out of the region right now.
    pub(crate) fn entry(&self, index: usize, field: usize) -> &'a AtomicU64 {
        self.word64(self.layout.table_offset() + index * ENTRY_BYTES + field * 8)
    }
    /// The consumer position of the ring from `src` (written by this segment's owner).
    pub(crate) fn ring_head(&self, src: usize) -> &'a AtomicU64 {
        self.word64(self.layout.ring_offset(src))
    }
    /// Set by `src` when its ring is full and it waits for space.
    pub(crate) fn ring_producer_waiting(&self, src: usize) -> &'a AtomicU32 {
        self.word32(self.layout.ring_offset(src) + 64)
    }
    /// Data area of the ring from `src`.
    pub(crate) fn ring_data(&self, src: usize) -> *mut u8 {
        self.seg
            .at(
                self.layout.ring_offset(src) + RING_CONTROL,
                self.layout.ring_bytes,
            )
            .unwrap_or(std::ptr::null_mut())
    }
}

static FALLBACK64: AtomicU64 = AtomicU64::new(0);
static FALLBACK32: AtomicU32 = AtomicU32::new(0);

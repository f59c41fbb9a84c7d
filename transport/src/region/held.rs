//! Holding a region's bytes for a copy out of them later (the tcp backend writes a payload to
//! its socket from its region when the socket takes it).

use std::sync::atomic::Ordering;

use super::Region;
use crate::error::Result;

impl Region {
    /// Holds `len` bytes at `offset` for a copy out of them later (the range checked now), as
    /// [`with_range`](Region::with_range) holds them during `f`: until the hold is dropped, a
    /// deregistration of caller memory waits, and the fabric's own memory stays allocated.
    pub(crate) fn hold(&self, offset: usize, len: usize) -> Result<Held> {
        self.check_range(offset, len)?;
        let locked = if self.inner.external {
            let alive = self.inner.alive.read_recursive();
            if !*alive {
                return Err(self.bad_key());
            }
            // Released by `Held::drop` (`force_unlock_read`).
            std::mem::forget(alive);
            true
        } else if self.inner.registered.load(Ordering::Acquire) {
            false
        } else {
            return Err(self.bad_key());
        };
        Ok(Held {
            // Not an owner's handle: the owner's last drop still deregisters caller memory,
            // and so waits for this hold (the lock above) before the caller may free it.
            region: Region {
                inner: self.inner.clone(),
                owner: false,
            },
            offset,
            len,
            locked,
        })
    }
}

/// Bytes of a region held by [`Region::hold`] for a later copy out of them.
pub(crate) struct Held {
    region: Region,
    offset: usize,
    len: usize,
    /// The hold has a read lock of caller memory's `alive` (taken in `hold`, whose guard was
    /// forgotten), released on drop.
    locked: bool,
}

impl Held {
    /// Where the held bytes start: valid for reads of [`len`](Held::len) bytes while the hold
    /// lasts (peers may write them meanwhile: copy them as raw bytes, never as a slice).
    pub(crate) fn as_ptr(&self) -> *const u8 {
        // SAFETY: `offset + len` is inside the region (checked by `hold`).
        unsafe { self.region.inner.ptr.as_ptr().add(self.offset) }
    }

    /// How many bytes are held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.locked {
            // SAFETY: `hold` took this read lock and forgot its guard; nothing else releases
            // it. The region's own drop (a deregistration, which takes the write lock) runs
            // after this body.
            unsafe { self.region.inner.alive.force_unlock_read() };
        }
    }
}

//! Nonblocking collectives whose buffers the caller keeps valid by contract (for the C API),
//! as [`RawRequest`]s: the same collective thread as `Scope::iallreduce` and friends. Their
//! status, once complete, is the empty one (source `PROC_NULL`, any tag, no bytes).

use rdcoll_collectives::reduce::op::{check, op_reducer};
use rdcoll_collectives::{CollError, Collectives, Element, Op};

use crate::nonblocking::{Buf, Job};
use crate::{Comm, Rank, RawRequest, Result};

impl Comm {
    fn start_raw(&self, job: Job) -> Result<RawRequest> {
        let engine = self.engine()?.clone();
        let pending = self.worker()?.submit(job);
        Ok(RawRequest::collective(engine, pending))
    }

    /// Starts `job` on this communicator's collectives at the level of bytes
    /// ([`Comm::byte_collectives`]), on its collective thread, in call order with its other
    /// collectives: how bindings to other languages start the nonblocking forms of any
    /// collective (the C API's `rdc_igatherv`, `rdc_ialltoallv`, ...). The job's error, if
    /// any, is the request's.
    ///
    /// # Safety
    /// Every buffer the job reads or writes must stay valid, and must not be written (those it
    /// writes: not accessed at all) by anything else, until the request has completed or was
    /// dropped (which waits).
    pub unsafe fn icollective_raw(
        &self,
        job: impl FnOnce(&Collectives) -> std::result::Result<(), CollError> + Send + 'static,
    ) -> Result<RawRequest> {
        self.start_raw(Box::new(move |c| Ok(job(c)?)))
    }

    /// Starts a barrier.
    pub fn ibarrier_raw(&self) -> Result<RawRequest> {
        self.start_raw(Box::new(|c| Ok(c.barrier()?)))
    }

    /// Starts a broadcast of `len` bytes at `ptr` from `root`.
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay valid, and must not be read or written by anything else,
    /// until the request has completed (or was dropped, which waits).
    pub unsafe fn ibcast_raw(&self, ptr: *mut u8, len: usize, root: Rank) -> Result<RawRequest> {
        // SAFETY: passed on from the caller (a zero-length buffer is never dereferenced).
        let b = Buf::of_mut(unsafe { slice_mut(ptr, len) });
        // SAFETY (the job): the caller keeps the buffer as the contract says.
        self.start_raw(Box::new(move |c| Ok(c.bcast(unsafe { b.get() }, root)?)))
    }

    /// Starts an allreduce with `op` of `count` elements at `send` into `recv` (`send` may
    /// equal `recv`: in place).
    ///
    /// # Safety
    /// Both buffers must hold `count` aligned elements and stay valid (`recv` not otherwise
    /// accessed, `send` not written) until the request has completed or was dropped.
    pub unsafe fn iallreduce_raw<T: Element>(
        &self,
        send: *const T,
        recv: *mut T,
        count: usize,
        op: Op,
    ) -> Result<RawRequest> {
        check::<T>(op)?;
        let bytes = count * std::mem::size_of::<T>();
        let in_place = std::ptr::eq(send, recv);
        // SAFETY: passed on from the caller.
        let r = Buf::of_mut(unsafe { slice_mut(recv as *mut u8, bytes) });
        // SAFETY: as above (only read).
        let s = Buf::of(unsafe { slice(send as *const u8, bytes) });
        let elem = std::mem::size_of::<T>();
        self.start_raw(Box::new(move |c| {
            // SAFETY: the caller keeps both buffers as the contract says.
            let acc = unsafe { r.get() };
            if !in_place {
                // SAFETY: `send` is the caller's, valid and unwritten until the request ends.
                let send = unsafe { s.get_ref() };
                acc.copy_from_slice(send);
            }
            Ok(c.allreduce(acc, elem, &op_reducer::<T>(op))?)
        }))
    }
}

/// `len` bytes at `ptr`, read only (none for a zero length, whatever `ptr` is).
///
/// # Safety
/// A non-zero `len` needs `ptr` valid for `len` bytes for the returned lifetime.
unsafe fn slice<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: as the function's contract says.
    unsafe { std::slice::from_raw_parts(ptr, len) }
}

/// `len` bytes at `ptr` (none for a zero length, whatever `ptr` is).
///
/// # Safety
/// A non-zero `len` needs `ptr` valid for `len` bytes for the returned lifetime.
unsafe fn slice_mut<'a>(ptr: *mut u8, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: as the function's contract says.
    unsafe { std::slice::from_raw_parts_mut(ptr, len) }
}

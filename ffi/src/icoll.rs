//! Nonblocking collectives: `rdc_ibarrier`, `rdc_ibcast`, `rdc_iallreduce` return a request
//! that `rdc_wait` / `rdc_test` (and the `waitall` / `waitany` forms) complete like a
//! point-to-point one; its status is the empty one (source `RDC_PROC_NULL`, tag
//! `RDC_ANY_TAG`, count 0). They progress while the caller computes (on the communicator's
//! collective thread). Every rank starts a communicator's collectives in the same order.

use std::ffi::{c_int, c_void};

use rdcoll::{Comm, Element, Op, RawRequest};

use crate::p2p::{byte_len, dt_size, store};
use crate::*;

/// Runs `start` with the communicator and stores its request in `*req`.
fn start(
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
    start: impl FnOnce(&Comm) -> Result<RawRequest, c_int>,
) -> c_int {
    guard(|| {
        if req.is_null() {
            return RDC_ERR_NULL;
        }
        finish((|| {
            let c = comm_of(comm)?;
            let r = start(&c)?;
            store(req, r)
        })())
    })
}

/// Starts a barrier on `comm`; `*req` names it.
#[no_mangle]
pub extern "C" fn rdc_ibarrier(comm: *const rdc_comm, req: *mut *mut rdc_request) -> c_int {
    start(comm, req, |c| c.ibarrier_raw().map_err(|e| code_of(&e)))
}

/// Starts a broadcast of `count` elements of `dt` at `buf` from `root`; `buf` must stay valid
/// and untouched until the request completes.
#[no_mangle]
pub extern "C" fn rdc_ibcast(
    buf: *mut c_void,
    count: i64,
    dt: c_int,
    root: c_int,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    start(comm, req, |c| {
        let len = byte_len(count, dt)?;
        if buf.is_null() && len > 0 {
            return Err(RDC_ERR_NULL);
        }
        let root = u32::try_from(root)
            .ok()
            .filter(|&r| (r as usize) < c.size())
            .ok_or(RDC_ERR_RANK)?;
        // SAFETY: the caller keeps `buf` valid and untouched until the request completes (the
        // API's contract); a dropped request waits first.
        unsafe { c.ibcast_raw(buf as *mut u8, len, root) }.map_err(|e| code_of(&e))
    })
}

/// Starts an allreduce of `count` elements of `dt` with `op` (a predefined one) from
/// `sendbuf` (or `RDC_IN_PLACE`) into `recvbuf`; both must stay valid (and `recvbuf`
/// untouched) until the request completes, and be aligned for `dt`.
#[no_mangle]
pub extern "C" fn rdc_iallreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: c_int,
    op: c_int,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    start(comm, req, |c| {
        let len = byte_len(count, dt)?;
        let size = dt_size(dt)?;
        let op = Op::ALL
            .get(usize::try_from(op).map_err(|_| RDC_ERR_OP)?)
            .copied()
            .ok_or(RDC_ERR_OP)?;
        let send = if sendbuf == RDC_IN_PLACE {
            recvbuf as *const c_void
        } else {
            sendbuf
        };
        if len > 0 && (send.is_null() || recvbuf.is_null()) {
            return Err(RDC_ERR_NULL);
        }
        let (s, r) = (send as usize, recvbuf as usize);
        if len > 0 && s != r && s < r + len && r < s + len {
            return Err(RDC_ERR_ARG);
        }
        if len > 0 && (s % size != 0 || r % size != 0) {
            return Err(RDC_ERR_ARG);
        }
        let n = len / size;
        // SAFETY (every arm): the caller keeps both buffers as the API's contract says; they
        // are aligned for `dt` (checked above).
        unsafe {
            match dt {
                0 | 5 => start_allreduce::<u8>(c, send, recvbuf, n, op),
                1 => start_allreduce::<i8>(c, send, recvbuf, n, op),
                2 => start_allreduce::<i16>(c, send, recvbuf, n, op),
                3 => start_allreduce::<i32>(c, send, recvbuf, n, op),
                4 => start_allreduce::<i64>(c, send, recvbuf, n, op),
                6 => start_allreduce::<u16>(c, send, recvbuf, n, op),
                7 => start_allreduce::<u32>(c, send, recvbuf, n, op),
                8 => start_allreduce::<u64>(c, send, recvbuf, n, op),
                9 => start_allreduce::<f32>(c, send, recvbuf, n, op),
                10 => start_allreduce::<f64>(c, send, recvbuf, n, op),
                _ => Err(RDC_ERR_DATATYPE),
            }
        }
    })
}

/// # Safety
/// As `Comm::iallreduce_raw`.
unsafe fn start_allreduce<T: Element>(
    c: &Comm,
    send: *const c_void,
    recv: *mut c_void,
    n: usize,
    op: Op,
) -> Result<RawRequest, c_int> {
    if T::FLOAT && op.integers_only() {
        return Err(RDC_ERR_OP);
    }
    // SAFETY: passed on from the caller.
    unsafe { c.iallreduce_raw(send as *const T, recv as *mut T, n, op) }.map_err(|e| code_of(&e))
}

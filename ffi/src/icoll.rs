//! Nonblocking collectives: `rdc_ibarrier`, `rdc_ibcast` (and the others of `iblocks`) return
//! a request that `rdc_wait` / `rdc_test` (and the `waitall` / `waitany` forms) complete like a
//! point-to-point one; its status is the empty one (source `RDC_PROC_NULL`, tag
//! `RDC_ANY_TAG`, count 0). They progress while the caller computes (on the communicator's
//! collective thread). Every rank starts a communicator's collectives in the same order.

use std::ffi::{c_int, c_void};

use rdcoll::{Comm, RawRequest};

use crate::block_jobs::checked_nonblocking;
use crate::p2p::byte_len;
use crate::requests::store;
use crate::*;

/// Runs `start` with the communicator and stores its request in `*req`.
pub(crate) fn start(
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
    dt: DatatypeArg,
    root: c_int,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    start(comm, req, |c| {
        let (len, root) = checked_nonblocking(
            c,
            (|| {
                let len = byte_len(count, dt)?;
                if buf.is_null() && len > 0 {
                    return Err(RDC_ERR_NULL);
                }
                Ok((len, crate::block_jobs::root_of(c, root)?))
            })(),
        )?;
        // SAFETY: the caller keeps `buf` valid and untouched until the request completes (the
        // API's contract); a dropped request waits first.
        unsafe { c.ibcast_raw(buf as *mut u8, len, root) }.map_err(|e| code_of(&e))
    })
}

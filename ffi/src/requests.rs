//! Requests of nonblocking operations: storing them as handles, waiting for and testing one,
//! and cancelling a receive (sets of them: `request_sets`).

use std::ffi::c_int;

use crate::p2p::{code, put_status};
use crate::*;

pub(crate) fn store(req: *mut *mut rdc_request, r: rdcoll::RawRequest) -> Result<(), c_int> {
    let h = running(|_, requests, _| Ok(requests.insert(r)))?;
    // SAFETY: `req` is non-NULL (checked by the callers) and points to a writable handle.
    unsafe { *req = h as *mut rdc_request };
    Ok(())
}

/// The handle `req` points to (a NULL pointer is an error).
fn handle(req: *mut *mut rdc_request) -> Result<usize, c_int> {
    if req.is_null() {
        return Err(RDC_ERR_REQUEST);
    }
    // SAFETY: `req` is non-NULL and points to a handle (the API's contract).
    Ok(unsafe { *req } as usize)
}

/// The request `*req` names, taken out of the table (NULL, finished or unknown: an error).
fn take(req: *mut *mut rdc_request) -> Result<rdcoll::RawRequest, c_int> {
    let h = handle(req)?;
    running(|_, requests, _| requests.take(h).ok_or(RDC_ERR_REQUEST))
}

/// Waits for `*req`, fills `status` (may be NULL) and sets `*req` to NULL. Returns the
/// operation's result.
#[no_mangle]
pub extern "C" fn rdc_wait(req: *mut *mut rdc_request, status: *mut rdc_status) -> c_int {
    guard(|| {
        let r = match take(req) {
            Ok(r) => r,
            Err(code) => return code,
        };
        let res = r.wait();
        // SAFETY: `take` checked that `req` is a non-NULL handle pointer.
        unsafe { *req = std::ptr::null_mut() };
        put_status(status, &res);
        code(&res)
    })
}

/// Sets `*flag` to 1 if `*req` has completed (then fills `status`, sets `*req` to NULL and
/// returns the operation's result), else to 0. An error with `*flag` 0 leaves the request in
/// flight: `*req` stays valid and its buffer in use.
#[no_mangle]
pub extern "C" fn rdc_test(
    req: *mut *mut rdc_request,
    flag: *mut c_int,
    status: *mut rdc_status,
) -> c_int {
    guard(|| {
        if flag.is_null() {
            return RDC_ERR_NULL;
        }
        let h = match handle(req) {
            Ok(h) => h,
            Err(code) => return code,
        };
        // Testing never blocks, so it may hold the table's lock; a finished request leaves
        // the table at once.
        // A request an error left in flight stays in the table (its handle valid): dropping
        // it here would wait for it under the lock.
        let res = running(|_, requests, _| {
            let r = requests.get_mut(h).ok_or(RDC_ERR_REQUEST)?;
            let res = r.test();
            let finished = r.is_finished();
            if finished {
                requests.take(h);
            }
            Ok((res, finished))
        });
        match res {
            Err(code) => code,
            Ok((Ok(None), _)) => {
                // SAFETY: `flag` is non-NULL and points to a writable int.
                unsafe { *flag = 0 };
                RDC_SUCCESS
            }
            Ok((Err(e), false)) => {
                // SAFETY: as above.
                unsafe { *flag = 0 };
                code(&Err(e))
            }
            Ok((done, _)) => {
                let res = done.map(|s| s.expect("Some: the None case is above"));
                // SAFETY: as above; `handle` checked that `req` is non-NULL.
                unsafe {
                    *flag = 1;
                    *req = std::ptr::null_mut();
                }
                put_status(status, &res);
                code(&res)
            }
        }
    })
}

/// Cancels `*req` if it is a receive that has not matched yet (its status then says
/// `cancelled`); it must still be completed with `rdc_wait` or `rdc_test`.
#[no_mangle]
pub extern "C" fn rdc_cancel(req: *mut *mut rdc_request) -> c_int {
    guard(|| {
        let h = match handle(req) {
            Ok(h) => h,
            Err(code) => return code,
        };
        let res = running(|_, requests, _| {
            let r = requests.get_mut(h).ok_or(RDC_ERR_REQUEST)?;
            r.cancel().map_err(|e| code_of(&e))
        });
        finish(res.map(|_| ()))
    })
}

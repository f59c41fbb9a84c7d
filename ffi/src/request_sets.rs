//! Testing and waiting on sets of requests as MPI does: all of them (`rdc_waitall`,
//! `rdc_testall`: all or none), any one (`rdc_waitany`, `rdc_testany`), and every one that has
//! finished (`rdc_waitsome`, `rdc_testsome`).

use std::ffi::c_int;

use crate::requests::{rdc_test, rdc_wait};
use crate::*;

/// The number of entries of a request array of `count` at `reqs` (an error for a negative
/// count, or a NULL array of some), and how many of them are live (not NULL).
fn entries(count: c_int, reqs: *mut *mut rdc_request) -> Result<(usize, usize), c_int> {
    let n = usize::try_from(count).map_err(|_| RDC_ERR_COUNT)?;
    if reqs.is_null() && n > 0 {
        return Err(RDC_ERR_NULL);
    }
    Ok((n, live_slots(reqs, n).count()))
}

/// The live (not NULL) entries among the `n` of `reqs`: each position and its slot.
fn live_slots(
    reqs: *mut *mut rdc_request,
    n: usize,
) -> impl Iterator<Item = (usize, *mut *mut rdc_request)> {
    (0..n).filter_map(move |i| {
        // SAFETY: `reqs` holds `n` handles (the API's contract).
        let slot = unsafe { reqs.add(i) };
        // SAFETY: as above.
        let live = !unsafe { *slot }.is_null();
        live.then_some((i, slot))
    })
}

/// Status `k` of `statuses`, or NULL where no statuses are wanted.
fn status_at(statuses: *mut rdc_status, k: usize) -> *mut rdc_status {
    if statuses.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: `statuses`, when given, has room for one per request (the API's contract).
    unsafe { statuses.add(k) }
}

/// Waits for all `count` requests of `reqs` (NULL entries are skipped); fills `statuses` (may
/// be NULL, else `count` of them) and sets every entry to NULL. Returns the first error.
#[no_mangle]
pub extern "C" fn rdc_waitall(
    count: c_int,
    reqs: *mut *mut rdc_request,
    statuses: *mut rdc_status,
) -> c_int {
    guard(|| {
        let n = match entries(count, reqs) {
            Ok((n, _)) => n,
            Err(code) => return code,
        };
        let mut first = RDC_SUCCESS;
        for (i, slot) in live_slots(reqs, n) {
            let c = rdc_wait(slot, status_at(statuses, i));
            if first == RDC_SUCCESS {
                first = c;
            }
        }
        first
    })
}

/// Waits until one of the `count` requests of `reqs` completes (NULL entries are skipped);
/// sets `*index` to it, fills `status`, sets that entry to NULL and returns its result.
#[no_mangle]
pub extern "C" fn rdc_waitany(
    count: c_int,
    reqs: *mut *mut rdc_request,
    index: *mut c_int,
    status: *mut rdc_status,
) -> c_int {
    guard(|| {
        let (n, live) = match entries(count, reqs) {
            Ok(e) => e,
            Err(code) => return code,
        };
        if index.is_null() {
            return RDC_ERR_NULL;
        }
        if live == 0 {
            return RDC_ERR_REQUEST;
        }
        wait_looking(reqs, n, || {
            let (i, _, code) = test_any(reqs, n, status)?;
            // SAFETY: `index` is non-NULL and points to a writable int.
            unsafe { *index = i as c_int };
            Some(code)
        })
    })
}

/// The backing off of the first live request among `n` of `reqs` (`None` if none is known).
fn first_idler(reqs: *mut *mut rdc_request, n: usize) -> Option<rdcoll::RawIdler> {
    running(|_, requests, _| {
        Ok((0..n).find_map(|i| {
            // SAFETY: `reqs` holds `n` handles (the API's contract).
            let h = unsafe { *reqs.add(i) } as usize;
            requests.get(h).map(|r| r.idler())
        }))
    })
    .ok()
    .flatten()
}

/// Completes one of the `count` requests of `reqs` that has finished, if any (NULL entries are
/// skipped): sets `*index` to it and `*flag` to 1, fills `status` (may be NULL), sets that
/// entry to NULL and returns its result. If none has finished, sets `*flag` to 0 and `*index`
/// to -1. No live request at all is `RDC_ERR_REQUEST`, as for `rdc_waitany`.
#[no_mangle]
pub extern "C" fn rdc_testany(
    count: c_int,
    reqs: *mut *mut rdc_request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut rdc_status,
) -> c_int {
    guard(|| {
        let (n, live) = match entries(count, reqs) {
            Ok(e) => e,
            Err(code) => return code,
        };
        if index.is_null() || flag.is_null() {
            return RDC_ERR_NULL;
        }
        if live == 0 {
            return RDC_ERR_REQUEST;
        }
        // SAFETY: `index` and `flag` are non-NULL and point to writable ints.
        unsafe { (*index, *flag) = (-1, 0) };
        match test_any(reqs, n, status) {
            Some((i, true, code)) => {
                // SAFETY: as above.
                unsafe { (*index, *flag) = (i as c_int, 1) };
                code
            }
            Some((_, false, code)) => code,
            None => RDC_SUCCESS,
        }
    })
}

/// One look at the `n` requests of `reqs` for one that has finished: the first found is
/// completed (its status in `status`, may be NULL), and its position, `true` and its result
/// are returned; a progress pass that fails on one ends the look with its position, `false`
/// and the error. `None`: none has finished.
fn test_any(
    reqs: *mut *mut rdc_request,
    n: usize,
    status: *mut rdc_status,
) -> Option<(usize, bool, c_int)> {
    live_slots(reqs, n).find_map(|(i, slot)| {
        let mut flag = 0;
        let code = rdc_test(slot, &mut flag, status);
        (flag == 1 || code != RDC_SUCCESS).then_some((i, flag == 1, code))
    })
}

/// Sets `*flag` to 1 if every one of the `count` requests of `reqs` has finished (NULL entries
/// are skipped), and then completes them all as `rdc_waitall` does (fills `statuses`, may be
/// NULL, else `count` of them; sets every entry to NULL; returns the first error). Else sets
/// `*flag` to 0 and leaves every request and status as it was, as MPI's `MPI_Testall` does.
#[no_mangle]
pub extern "C" fn rdc_testall(
    count: c_int,
    reqs: *mut *mut rdc_request,
    flag: *mut c_int,
    statuses: *mut rdc_status,
) -> c_int {
    guard(|| {
        let n = match entries(count, reqs) {
            Ok((n, _)) => n,
            Err(code) => return code,
        };
        if flag.is_null() {
            return RDC_ERR_NULL;
        }
        // SAFETY: `flag` is non-NULL and points to a writable int.
        unsafe { *flag = 0 };
        for (_, slot) in live_slots(reqs, n) {
            // SAFETY: `slot` is one of `reqs`' live entries.
            let h = unsafe { *slot } as usize;
            // Without delivering a finished request's result: it waits for the others.
            let done = running(|_, requests, _| {
                let r = requests.get_mut(h).ok_or(RDC_ERR_REQUEST)?;
                r.is_done().map_err(|e| code_of(&e))
            });
            match done {
                Ok(true) => {}
                Ok(false) => return RDC_SUCCESS,
                Err(code) => return code,
            }
        }
        // SAFETY: as above.
        unsafe { *flag = 1 };
        // Every request has finished: each wait returns its kept result at once.
        rdc_waitall(count, reqs, statuses)
    })
}

/// Completes every one of the `count` requests of `reqs` that has finished (NULL entries are
/// skipped): `*outcount` of them, their positions in `indices` and their statuses in
/// `statuses` (may be NULL, else room for `count`), in that order; each one completed is set
/// to NULL. Returns the first error among them. No live request at all is `RDC_ERR_REQUEST`.
#[no_mangle]
pub extern "C" fn rdc_testsome(
    count: c_int,
    reqs: *mut *mut rdc_request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut rdc_status,
) -> c_int {
    guard(|| {
        let n = match some_args(count, reqs, outcount, indices) {
            Ok(n) => n,
            Err(code) => return code,
        };
        let (done, code) = test_some(reqs, n, indices, statuses);
        // SAFETY: `some_args` checked that `outcount` is non-NULL; it points to a writable int.
        unsafe { *outcount = done as c_int };
        code
    })
}

/// Waits until at least one of the `count` requests of `reqs` has finished (NULL entries are
/// skipped), then completes every one that has, as `rdc_testsome` does.
#[no_mangle]
pub extern "C" fn rdc_waitsome(
    count: c_int,
    reqs: *mut *mut rdc_request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut rdc_status,
) -> c_int {
    guard(|| {
        let n = match some_args(count, reqs, outcount, indices) {
            Ok(n) => n,
            Err(code) => return code,
        };
        wait_looking(reqs, n, || {
            let (done, code) = test_some(reqs, n, indices, statuses);
            (done > 0 || code != RDC_SUCCESS).then(|| {
                // SAFETY: `some_args` checked that `outcount` is non-NULL.
                unsafe { *outcount = done as c_int };
                code
            })
        })
    })
}

/// Checks the arguments of `rdc_testsome` / `rdc_waitsome`: the number of entries, if some
/// are live and the outputs are there.
fn some_args(
    count: c_int,
    reqs: *mut *mut rdc_request,
    outcount: *mut c_int,
    indices: *mut c_int,
) -> Result<usize, c_int> {
    let (n, live) = entries(count, reqs)?;
    if outcount.is_null() || indices.is_null() {
        return Err(RDC_ERR_NULL);
    }
    if live == 0 {
        return Err(RDC_ERR_REQUEST);
    }
    Ok(n)
}

/// Looks at the `n` requests of `reqs` with `look` until it has an answer, backing off
/// between looks as a single wait does (spin, yield, then sleep on the first live request's
/// engine), so that a rank waiting here leaves its core to the others.
fn wait_looking(
    reqs: *mut *mut rdc_request,
    n: usize,
    mut look: impl FnMut() -> Option<c_int>,
) -> c_int {
    let mut idler: Option<rdcoll::RawIdler> = None;
    loop {
        if let Some(code) = look() {
            return code;
        }
        if idler.is_none() {
            idler = first_idler(reqs, n);
        }
        match idler.as_mut() {
            Some(idler) => idler.idle(),
            None => std::thread::yield_now(),
        }
    }
}

/// One look at the `n` requests of `reqs`: completes those that have finished, writing their
/// positions to `indices` and their statuses to `statuses` (when given) in that order. How
/// many, and the first error (of a finished request, or of a progress pass, which ends the
/// look).
fn test_some(
    reqs: *mut *mut rdc_request,
    n: usize,
    indices: *mut c_int,
    statuses: *mut rdc_status,
) -> (usize, c_int) {
    let (mut done, mut first) = (0usize, RDC_SUCCESS);
    for (i, slot) in live_slots(reqs, n) {
        let mut flag = 0;
        let c = rdc_test(slot, &mut flag, status_at(statuses, done));
        if flag == 1 {
            // SAFETY: `indices` has room for `n` ints (the API's contract).
            unsafe { *indices.add(done) = i as c_int };
            done += 1;
            if first == RDC_SUCCESS {
                first = c;
            }
        } else if c != RDC_SUCCESS {
            // A progress pass failed; the request is still in flight.
            return (done, if first == RDC_SUCCESS { c } else { first });
        }
    }
    (done, first)
}

//! The nonblocking block collectives and reduce: `rdc_igather`, `rdc_igatherv`,
//! `rdc_iscatter`, `rdc_iscatterv`, `rdc_iallgather`, `rdc_iallgatherv`, `rdc_ialltoall`,
//! `rdc_ialltoallv`, `rdc_ireduce_scatter_block`, `rdc_ireduce_scatter`, `rdc_iscan`,
//! `rdc_iexscan`, `rdc_ireduce`. Each takes the arguments of its blocking form (checked the
//! same way, `block_jobs`) and a request, completed by `rdc_wait` / `rdc_test` like the other
//! nonblocking collectives (`icoll`): every buffer and count array the call reads must stay
//! valid, and every buffer it writes untouched, until then. They progress while the caller
//! computes, on the communicator's collective thread; every rank starts a communicator's
//! collectives in the same order.

use std::ffi::{c_int, c_void};

use rdcoll::Comm;

use crate::block_jobs::*;
use crate::icoll::start;
use crate::*;

/// Starts the collective `plan` checks the arguments of and stores its request in `*req`.
fn start_job(
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
    plan: impl FnOnce(&Comm) -> Result<Job, c_int>,
) -> c_int {
    start(comm, req, |c| {
        let job = checked_nonblocking(c, plan(c))?;
        // SAFETY: the job touches only the caller's buffers, which the API's contract keeps
        // valid (and those written untouched) until the request completes; a dropped request
        // waits first.
        unsafe { c.icollective_raw(job) }.map_err(|e| code_of(&e))
    })
}

/// Starts `rdc_gather`'s collective; `*req` names it.
#[no_mangle]
pub extern "C" fn rdc_igather(
    sendbuf: *const c_void,
    sendcount: i64,
    recvbuf: *mut c_void,
    dt: DatatypeArg,
    root: c_int,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    start_job(comm, req, |c| {
        gather_job(c, sendbuf, sendcount, recvbuf, dt, root)
    })
}

/// Starts `rdc_gatherv`'s collective; `*req` names it.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn rdc_igatherv(
    sendbuf: *const c_void,
    sendcount: i64,
    recvbuf: *mut c_void,
    recvcounts: *const i64,
    displs: *const i64,
    dt: DatatypeArg,
    root: c_int,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    start_job(comm, req, |c| {
        gatherv_job(c, sendbuf, sendcount, recvbuf, recvcounts, displs, dt, root)
    })
}

/// Starts `rdc_scatter`'s collective; `*req` names it.
#[no_mangle]
pub extern "C" fn rdc_iscatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: i64,
    dt: DatatypeArg,
    root: c_int,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    start_job(comm, req, |c| {
        scatter_job(c, sendbuf, recvbuf, recvcount, dt, root)
    })
}

/// Starts `rdc_scatterv`'s collective; `*req` names it.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn rdc_iscatterv(
    sendbuf: *const c_void,
    sendcounts: *const i64,
    displs: *const i64,
    recvbuf: *mut c_void,
    recvcount: i64,
    dt: DatatypeArg,
    root: c_int,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    start_job(comm, req, |c| {
        scatterv_job(c, sendbuf, sendcounts, displs, recvbuf, recvcount, dt, root)
    })
}

/// Starts `rdc_allgather`'s collective; `*req` names it.
#[no_mangle]
pub extern "C" fn rdc_iallgather(
    sendbuf: *const c_void,
    count: i64,
    recvbuf: *mut c_void,
    dt: DatatypeArg,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    start_job(comm, req, |c| allgather_job(c, sendbuf, count, recvbuf, dt))
}

/// Starts `rdc_allgatherv`'s collective; `*req` names it.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn rdc_iallgatherv(
    sendbuf: *const c_void,
    sendcount: i64,
    recvbuf: *mut c_void,
    recvcounts: *const i64,
    displs: *const i64,
    dt: DatatypeArg,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    start_job(comm, req, |c| {
        allgatherv_job(c, sendbuf, sendcount, recvbuf, recvcounts, displs, dt)
    })
}

/// Starts `rdc_alltoall`'s collective; `*req` names it.
#[no_mangle]
pub extern "C" fn rdc_ialltoall(
    sendbuf: *const c_void,
    count: i64,
    recvbuf: *mut c_void,
    dt: DatatypeArg,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    start_job(comm, req, |c| alltoall_job(c, sendbuf, count, recvbuf, dt))
}

/// Starts `rdc_alltoallv`'s collective; `*req` names it.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn rdc_ialltoallv(
    sendbuf: *const c_void,
    sendcounts: *const i64,
    sdispls: *const i64,
    recvbuf: *mut c_void,
    recvcounts: *const i64,
    rdispls: *const i64,
    dt: DatatypeArg,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    start_job(comm, req, |c| {
        alltoallv_job(
            c, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dt,
        )
    })
}

/// Starts `rdc_reduce_scatter_block`'s collective; `*req` names it.
#[no_mangle]
pub extern "C" fn rdc_ireduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: i64,
    dt: DatatypeArg,
    op: OpArg,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    let op = op.0;
    start_job(comm, req, |c| {
        reduce_scatter_block_job(c, sendbuf, recvbuf, recvcount, dt, op)
    })
}

/// Starts `rdc_reduce_scatter`'s collective; `*req` names it.
#[no_mangle]
pub extern "C" fn rdc_ireduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const i64,
    dt: DatatypeArg,
    op: OpArg,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    let op = op.0;
    start_job(comm, req, |c| {
        reduce_scatter_job(c, sendbuf, recvbuf, recvcounts, dt, op)
    })
}

/// Starts `rdc_scan`'s collective; `*req` names it.
#[no_mangle]
pub extern "C" fn rdc_iscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: DatatypeArg,
    op: OpArg,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    let op = op.0;
    start_job(comm, req, |_| {
        prefix_job(sendbuf, recvbuf, count, dt, op, true)
    })
}

/// Starts `rdc_exscan`'s collective; `*req` names it.
#[no_mangle]
pub extern "C" fn rdc_iexscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: DatatypeArg,
    op: OpArg,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    let op = op.0;
    start_job(comm, req, |_| {
        prefix_job(sendbuf, recvbuf, count, dt, op, false)
    })
}

/// Starts `rdc_reduce`'s collective (`op` predefined or made by `rdc_op_create`,
/// `RDC_IN_PLACE` as there); `*req` names it.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn rdc_ireduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: DatatypeArg,
    op: OpArg,
    root: c_int,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    let op = op.0;
    start_job(comm, req, |c| {
        reduction_job(c, sendbuf, recvbuf, count, dt, op, Some(root))
    })
}

/// Starts `rdc_allreduce`'s collective (`op` predefined or made by `rdc_op_create`,
/// `RDC_IN_PLACE` as there); `*req` names it.
#[no_mangle]
pub extern "C" fn rdc_iallreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: DatatypeArg,
    op: OpArg,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    let op = op.0;
    start_job(comm, req, |c| {
        reduction_job(c, sendbuf, recvbuf, count, dt, op, None)
    })
}

//! Communicator splits and the block collectives: gather(v), scatter(v), allgather(v),
//! alltoall(v), reduce_scatter(_block), scan, exscan (their arguments are checked in
//! `block_jobs`, shared with the nonblocking forms). Counts and displacements are in
//! elements of the call's datatype, as in MPI.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use rdcoll::Comm;

use crate::block_jobs::*;
use crate::*;

/// The colour of a rank that joins no communicator of `rdc_comm_split`.
pub const RDC_UNDEFINED: c_int = -1;

/// Hands `comm` to the caller as a new handle in `*newcomm` (NULL for `None`).
fn hand_out(comm: Option<Comm>, newcomm: *mut *mut rdc_comm) -> Result<(), c_int> {
    let h = match comm {
        Some(c) => running(|comms, _, _| Ok(comms.insert(Arc::new(c))))?,
        None => 0,
    };
    // SAFETY: checked non-NULL by the callers; points to a writable handle (the contract).
    unsafe { *newcomm = h as *mut rdc_comm };
    Ok(())
}

/// Splits `comm`: ranks that pass the same `color` (>= 0) form a new communicator, ranked by
/// `key` (ties by their rank in `comm`), returned in `*newcomm`; a rank that passes
/// `RDC_UNDEFINED` gets NULL. Collective over `comm`. Free the result with `rdc_comm_free`.
#[no_mangle]
pub extern "C" fn rdc_comm_split(
    comm: *const rdc_comm,
    color: c_int,
    key: c_int,
    newcomm: *mut *mut rdc_comm,
) -> c_int {
    guard(|| {
        if newcomm.is_null() {
            return RDC_ERR_NULL;
        }
        finish((|| {
            let color = match color {
                RDC_UNDEFINED => None,
                c => Some(u32::try_from(c).map_err(|_| RDC_ERR_ARG)?),
            };
            let c = comm_of(comm)?;
            let split = c.split(color, key).map_err(|e| code_of(&e))?;
            hand_out(split, newcomm)
        })())
    })
}

/// The communicator of the `n` ranks of `comm` listed in `ranks` (in the new communicator's
/// order) in `*newcomm`; NULL on ranks not listed. Collective over `comm`: every rank passes
/// the same list (`RDC_ERR_MISMATCH` otherwise).
#[no_mangle]
pub extern "C" fn rdc_comm_create_from_ranks(
    comm: *const rdc_comm,
    n: c_int,
    ranks: *const c_int,
    newcomm: *mut *mut rdc_comm,
) -> c_int {
    guard(|| {
        if newcomm.is_null() {
            return RDC_ERR_NULL;
        }
        finish((|| {
            let list = non_negative(ranks, n).map_err(|e| match e {
                RDC_ERR_COUNT if n >= 0 => RDC_ERR_RANK,
                e => e,
            })?;
            let list = list
                .into_iter()
                .map(|r| u32::try_from(r).map_err(|_| RDC_ERR_RANK))
                .collect::<Result<Vec<_>, _>>()?;
            let c = comm_of(comm)?;
            if list.iter().any(|&r| r as usize >= c.size() as usize) {
                return Err(RDC_ERR_RANK);
            }
            let sub = c.subset(&list).map_err(|e| code_of(&e))?;
            hand_out(sub, newcomm)
        })())
    })
}

/// Runs the collective `plan` checks the arguments of, on the communicator behind `comm`, and
/// turns its result into a return code.
fn call(comm: *const rdc_comm, plan: impl FnOnce(&Comm) -> Result<Job, c_int>) -> c_int {
    guard(|| {
        finish((|| {
            let c = comm_of(comm)?;
            let job = checked(&c, plan(&c))?;
            job(bytes_level(&c)?).map_err(|e| code_of(&e.into()))
        })())
    })
}

/// Gathers `sendcount` elements of `dt` from every rank into `root`'s `recvbuf`, rank `r`'s
/// at element `r * sendcount` (`recvbuf` is used at the root only).
#[no_mangle]
pub extern "C" fn rdc_gather(
    sendbuf: *const c_void,
    sendcount: i64,
    recvbuf: *mut c_void,
    dt: DatatypeArg,
    root: c_int,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    call(comm, |c| {
        gather_job(c, sendbuf, sendcount, recvbuf, dt, root)
    })
}

/// Gathers `sendcount` elements from every rank into `root`'s `recvbuf`: rank `r`'s
/// `recvcounts[r]` elements at element `displs[r]` (NULL `displs`: one after another).
/// `recvcounts`, `displs` and `recvbuf` are used at the root only.
#[no_mangle]
pub extern "C" fn rdc_gatherv(
    sendbuf: *const c_void,
    sendcount: i64,
    recvbuf: *mut c_void,
    recvcounts: *const i64,
    displs: *const i64,
    dt: DatatypeArg,
    root: c_int,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    call(comm, |c| {
        gatherv_job(c, sendbuf, sendcount, recvbuf, recvcounts, displs, dt, root)
    })
}

/// Scatters `root`'s `sendbuf` (`size * recvcount` elements) to every rank's `recvbuf`
/// (`recvcount` elements), block `r` to rank `r`.
#[no_mangle]
pub extern "C" fn rdc_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: i64,
    dt: DatatypeArg,
    root: c_int,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    call(comm, |c| {
        scatter_job(c, sendbuf, recvbuf, recvcount, dt, root)
    })
}

/// Scatters `root`'s `sendbuf`: `sendcounts[r]` elements at element `displs[r]` (NULL:
/// one after another) to rank `r`'s `recvbuf`, which holds `recvcount` elements.
#[no_mangle]
pub extern "C" fn rdc_scatterv(
    sendbuf: *const c_void,
    sendcounts: *const i64,
    displs: *const i64,
    recvbuf: *mut c_void,
    recvcount: i64,
    dt: DatatypeArg,
    root: c_int,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    call(comm, |c| {
        scatterv_job(c, sendbuf, sendcounts, displs, recvbuf, recvcount, dt, root)
    })
}

/// Gathers `count` elements from every rank into every rank's `recvbuf`, rank `r`'s at
/// element `r * count`.
#[no_mangle]
pub extern "C" fn rdc_allgather(
    sendbuf: *const c_void,
    count: i64,
    recvbuf: *mut c_void,
    dt: DatatypeArg,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    call(comm, |c| allgather_job(c, sendbuf, count, recvbuf, dt))
}

/// Gathers rank `r`'s `sendcount` elements into every rank's `recvbuf` at element
/// `displs[r]` (NULL: one after another); `recvcounts[r]` must be rank `r`'s `sendcount`.
#[no_mangle]
pub extern "C" fn rdc_allgatherv(
    sendbuf: *const c_void,
    sendcount: i64,
    recvbuf: *mut c_void,
    recvcounts: *const i64,
    displs: *const i64,
    dt: DatatypeArg,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    call(comm, |c| {
        allgatherv_job(c, sendbuf, sendcount, recvbuf, recvcounts, displs, dt)
    })
}

/// Sends block `j` (`count` elements at element `j * count`) of `sendbuf` to rank `j`, and
/// receives rank `i`'s block for this rank at element `i * count` of `recvbuf`.
#[no_mangle]
pub extern "C" fn rdc_alltoall(
    sendbuf: *const c_void,
    count: i64,
    recvbuf: *mut c_void,
    dt: DatatypeArg,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    call(comm, |c| alltoall_job(c, sendbuf, count, recvbuf, dt))
}

/// Sends `sendcounts[j]` elements at element `sdispls[j]` of `sendbuf` to rank `j` and
/// receives `recvcounts[i]` elements from rank `i` at element `rdispls[i]` of `recvbuf`
/// (NULL displacements: blocks one after another).
#[no_mangle]
pub extern "C" fn rdc_alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const i64,
    sdispls: *const i64,
    recvbuf: *mut c_void,
    recvcounts: *const i64,
    rdispls: *const i64,
    dt: DatatypeArg,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    call(comm, |c| {
        alltoallv_job(
            c, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dt,
        )
    })
}

/// Combines every rank's `sendbuf` (`size * recvcount` elements) element-wise with `op` and
/// leaves block `r` of the result (`recvcount` elements) in rank `r`'s `recvbuf`, combined in
/// rank order.
#[no_mangle]
pub extern "C" fn rdc_reduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: i64,
    dt: DatatypeArg,
    op: OpArg,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    let op = op.0;
    call(comm, |c| {
        reduce_scatter_block_job(c, sendbuf, recvbuf, recvcount, dt, op)
    })
}

/// As `rdc_reduce_scatter_block` with block `r` of `recvcounts[r]` elements (one after
/// another; the same `recvcounts` on every rank).
#[no_mangle]
pub extern "C" fn rdc_reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const i64,
    dt: DatatypeArg,
    op: OpArg,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    let op = op.0;
    call(comm, |c| {
        reduce_scatter_job(c, sendbuf, recvbuf, recvcounts, dt, op)
    })
}

/// Rank `r`'s `recvbuf` becomes the element-wise combination with `op` of ranks `0..=r`'s
/// `sendbuf` (`count` elements), in rank order.
#[no_mangle]
pub extern "C" fn rdc_scan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: DatatypeArg,
    op: OpArg,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    let op = op.0;
    call(comm, |_| prefix_job(sendbuf, recvbuf, count, dt, op, true))
}

/// Rank `r > 0`'s `recvbuf` becomes the combination of ranks `0..r`'s `sendbuf`; rank 0's
/// is not touched.
#[no_mangle]
pub extern "C" fn rdc_exscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: DatatypeArg,
    op: OpArg,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    let op = op.0;
    call(comm, |_| prefix_job(sendbuf, recvbuf, count, dt, op, false))
}

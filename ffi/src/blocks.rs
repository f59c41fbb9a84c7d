//! Communicator splits and the block collectives: gather(v), scatter(v), allgather(v),
//! alltoall(v), reduce_scatter(_block), scan, exscan. Counts and displacements are in
//! elements of the call's datatype, as in MPI.

use std::ffi::{c_int, c_void};
use std::ops::Range;
use std::sync::Arc;

use rdcoll::reduce::op::{op_reducer, Reducer};
use rdcoll::{Comm, Element, Op};

use crate::p2p::{byte_len, bytes, bytes_mut, dt_size};
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
            if list.iter().any(|&r| r as usize >= c.size()) {
                return Err(RDC_ERR_RANK);
            }
            let sub = c.subset(&list).map_err(|e| code_of(&e))?;
            hand_out(sub, newcomm)
        })())
    })
}

/// `n` non-negative integers at `p` (NULL only when `n` is 0).
fn non_negative<T: Copy + TryInto<i64>>(p: *const T, n: c_int) -> Result<Vec<i64>, c_int> {
    let n = usize::try_from(n).map_err(|_| RDC_ERR_COUNT)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(RDC_ERR_NULL);
    }
    // SAFETY: the caller vouches for `n` readable values at `p` (the API's contract).
    let v = unsafe { std::slice::from_raw_parts(p, n) };
    v.iter()
        .map(|&x| x.try_into().ok().filter(|&x| x >= 0).ok_or(RDC_ERR_COUNT))
        .collect()
}

/// Blocks of `counts[r]` elements of `dt` at `displs[r]` (packed when `displs` is NULL) for
/// every rank of `c`; the bytes they span.
fn parts(
    c: &Comm,
    counts_at: *const i64,
    displs_at: *const i64,
    dt: c_int,
) -> Result<(Vec<Range<usize>>, usize), c_int> {
    let n = c_int::try_from(c.size()).map_err(|_| RDC_ERR_COMM)?;
    let counts = non_negative(counts_at, n)?;
    let displs = if displs_at.is_null() {
        None
    } else {
        Some(non_negative(displs_at, n)?)
    };
    let mut out = Vec::with_capacity(counts.len());
    let (mut packed, mut span) = (0usize, 0usize);
    for (r, &count) in counts.iter().enumerate() {
        let len = byte_len(count, dt)?;
        let start = match &displs {
            Some(d) => byte_len(d[r], dt)?,
            None => packed,
        };
        let end = start.checked_add(len).ok_or(RDC_ERR_COUNT)?;
        packed = end;
        span = span.max(end);
        out.push(start..end);
    }
    Ok((out, span))
}

/// Every rank's block of `count` elements: rank `r`'s at element `r * count`.
fn even(c: &Comm, count: i64, dt: c_int) -> Result<(Vec<Range<usize>>, usize), c_int> {
    let len = byte_len(count, dt)?;
    let n = c.size();
    let span = len.checked_mul(n).ok_or(RDC_ERR_COUNT)?;
    Ok(((0..n).map(|r| r * len..(r + 1) * len).collect(), span))
}

/// The arguments only the root reads (`at_root`: its blocks and buffer; nothing elsewhere).
/// When they are wrong the root still takes part, through `refuse` (a call the collective
/// refuses, so that it answers the other ranks and drains what they sent), and then returns
/// the argument's error code.
fn root_part<B: Default>(
    c: &Comm,
    root: u32,
    at_root: impl FnOnce() -> Result<(Vec<Range<usize>>, B), c_int>,
    refuse: impl FnOnce(&rdcoll::Collectives) -> Result<(), rdcoll::CollError>,
) -> Result<(Vec<Range<usize>>, B), c_int> {
    if c.rank() != root {
        return Ok((Vec::new(), B::default()));
    }
    at_root().inspect_err(|_| {
        if let Ok(coll) = bytes_level(c) {
            let _ = refuse(coll);
        }
    })
}

fn root_of(c: &Comm, root: c_int) -> Result<u32, c_int> {
    u32::try_from(root)
        .ok()
        .filter(|&r| (r as usize) < c.size())
        .ok_or(RDC_ERR_RANK)
}

/// Runs `f` with the communicator behind `comm` and turns its result into a return code.
fn call(
    comm: *const rdc_comm,
    f: impl FnOnce(&Comm) -> Result<Result<(), rdcoll::Error>, c_int>,
) -> c_int {
    guard(|| {
        finish((|| {
            let c = comm_of(comm)?;
            f(&c)?.map_err(|e| code_of(&e))
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
    dt: c_int,
    root: c_int,
    comm: *const rdc_comm,
) -> c_int {
    call(comm, |c| {
        let root = root_of(c, root)?;
        let send = send_slice(sendbuf, sendcount, dt)?;
        let at_root = || {
            let (parts, span) = even(c, sendcount, dt)?;
            // SAFETY: the root's receive buffer of `size * sendcount` elements (the contract).
            Ok((parts, unsafe { bytes_mut(recvbuf, span)? }))
        };
        let (parts, recv) = root_part(c, root, at_root, |c| c.gatherv(send, &mut [], &[], root))?;
        Ok(bytes_level(c)?
            .gatherv(send, recv, &parts, root)
            .map_err(Into::into))
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
    dt: c_int,
    root: c_int,
    comm: *const rdc_comm,
) -> c_int {
    call(comm, |c| {
        let root = root_of(c, root)?;
        let send = send_slice(sendbuf, sendcount, dt)?;
        let at_root = || {
            let (parts, span) = parts(c, recvcounts, displs, dt)?;
            // SAFETY: the root's receive buffer spanning every block (the contract).
            Ok((parts, unsafe { bytes_mut(recvbuf, span)? }))
        };
        let (parts, recv) = root_part(c, root, at_root, |c| c.gatherv(send, &mut [], &[], root))?;
        Ok(bytes_level(c)?
            .gatherv(send, recv, &parts, root)
            .map_err(Into::into))
    })
}

/// Scatters `root`'s `sendbuf` (`size * recvcount` elements) to every rank's `recvbuf`
/// (`recvcount` elements), block `r` to rank `r`.
#[no_mangle]
pub extern "C" fn rdc_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: i64,
    dt: c_int,
    root: c_int,
    comm: *const rdc_comm,
) -> c_int {
    call(comm, |c| {
        let root = root_of(c, root)?;
        let recv = recv_slice(recvbuf, recvcount, dt)?;
        let at_root = || {
            let (parts, span) = even(c, recvcount, dt)?;
            // SAFETY: the root's send buffer of `size * recvcount` elements (the contract).
            Ok((parts, unsafe { bytes(sendbuf, span)? }))
        };
        let refuse = |c: &rdcoll::Collectives| c.scatterv(&[], &[], &mut [], root);
        let (parts, send) = root_part(c, root, at_root, refuse)?;
        Ok(bytes_level(c)?
            .scatterv(send, &parts, recv, root)
            .map_err(Into::into))
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
    dt: c_int,
    root: c_int,
    comm: *const rdc_comm,
) -> c_int {
    call(comm, |c| {
        let root = root_of(c, root)?;
        let recv = recv_slice(recvbuf, recvcount, dt)?;
        let at_root = || {
            let (parts, span) = parts(c, sendcounts, displs, dt)?;
            // SAFETY: the root's send buffer spanning every block (the contract).
            Ok((parts, unsafe { bytes(sendbuf, span)? }))
        };
        let refuse = |c: &rdcoll::Collectives| c.scatterv(&[], &[], &mut [], root);
        let (parts, send) = root_part(c, root, at_root, refuse)?;
        Ok(bytes_level(c)?
            .scatterv(send, &parts, recv, root)
            .map_err(Into::into))
    })
}

/// Gathers `count` elements from every rank into every rank's `recvbuf`, rank `r`'s at
/// element `r * count`.
#[no_mangle]
pub extern "C" fn rdc_allgather(
    sendbuf: *const c_void,
    count: i64,
    recvbuf: *mut c_void,
    dt: c_int,
    comm: *const rdc_comm,
) -> c_int {
    call(comm, |c| {
        let send = send_slice(sendbuf, count, dt)?;
        let (parts, span) = even(c, count, dt)?;
        // SAFETY: the receive buffer of `size * count` elements (the contract).
        let recv = unsafe { bytes_mut(recvbuf, span)? };
        Ok(bytes_level(c)?
            .allgatherv(send, recv, &parts)
            .map_err(Into::into))
    })
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
    dt: c_int,
    comm: *const rdc_comm,
) -> c_int {
    call(comm, |c| {
        let send = send_slice(sendbuf, sendcount, dt)?;
        let (parts, span) = parts(c, recvcounts, displs, dt)?;
        // SAFETY: the receive buffer spanning every block (the contract).
        let recv = unsafe { bytes_mut(recvbuf, span)? };
        Ok(bytes_level(c)?
            .allgatherv(send, recv, &parts)
            .map_err(Into::into))
    })
}

/// Sends block `j` (`count` elements at element `j * count`) of `sendbuf` to rank `j`, and
/// receives rank `i`'s block for this rank at element `i * count` of `recvbuf`.
#[no_mangle]
pub extern "C" fn rdc_alltoall(
    sendbuf: *const c_void,
    count: i64,
    recvbuf: *mut c_void,
    dt: c_int,
    comm: *const rdc_comm,
) -> c_int {
    call(comm, |c| {
        let (parts, span) = even(c, count, dt)?;
        // SAFETY: send and receive buffers of `size * count` elements (the contract).
        let send = unsafe { bytes(sendbuf, span)? };
        // SAFETY: as above.
        let recv = unsafe { bytes_mut(recvbuf, span)? };
        refuse_overlap(send, recv)?;
        Ok(bytes_level(c)?
            .alltoallv(send, &parts, recv, &parts)
            .map_err(Into::into))
    })
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
    dt: c_int,
    comm: *const rdc_comm,
) -> c_int {
    call(comm, |c| {
        let (send_parts, send_span) = parts(c, sendcounts, sdispls, dt)?;
        let (recv_parts, recv_span) = parts(c, recvcounts, rdispls, dt)?;
        // SAFETY: the send buffer spanning every send block (the contract).
        let send = unsafe { bytes(sendbuf, send_span)? };
        // SAFETY: the receive buffer spanning every receive block (the contract).
        let recv = unsafe { bytes_mut(recvbuf, recv_span)? };
        refuse_overlap(send, recv)?;
        Ok(bytes_level(c)?
            .alltoallv(send, &send_parts, recv, &recv_parts)
            .map_err(Into::into))
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
    dt: c_int,
    op: c_int,
    comm: *const rdc_comm,
) -> c_int {
    call(comm, |c| {
        let (_, span) = even(c, recvcount, dt)?;
        let (elem, f) = reducer_for(dt, op)?;
        // SAFETY: the send buffer of `size * recvcount` elements (the contract).
        let send = unsafe { bytes(sendbuf, span)? };
        let recv = aligned_recv(recvbuf, byte_len(recvcount, dt)?, elem)?;
        refuse_overlap(send, recv)?;
        Ok(bytes_level(c)?
            .reduce_scatter_block(send, recv, elem, &*f)
            .map_err(Into::into))
    })
}

/// As `rdc_reduce_scatter_block` with block `r` of `recvcounts[r]` elements (one after
/// another; the same `recvcounts` on every rank).
#[no_mangle]
pub extern "C" fn rdc_reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const i64,
    dt: c_int,
    op: c_int,
    comm: *const rdc_comm,
) -> c_int {
    call(comm, |c| {
        let (parts, span) = parts(c, recvcounts, std::ptr::null(), dt)?;
        reduce_scatter_parts(c, sendbuf, span, &parts, recvbuf, dt, op)
    })
}

fn reduce_scatter_parts(
    c: &Comm,
    sendbuf: *const c_void,
    span: usize,
    parts: &[Range<usize>],
    recvbuf: *mut c_void,
    dt: c_int,
    op: c_int,
) -> Result<Result<(), rdcoll::Error>, c_int> {
    let (elem, f) = reducer_for(dt, op)?;
    // SAFETY: the send buffer spanning every block (the contract).
    let send = unsafe { bytes(sendbuf, span)? };
    let mine = parts.get(c.rank() as usize).map_or(0, |p| p.len());
    let recv = aligned_recv(recvbuf, mine, elem)?;
    refuse_overlap(send, recv)?;
    Ok(bytes_level(c)?
        .reduce_scatter(send, parts, recv, elem, &*f)
        .map_err(Into::into))
}

/// Rank `r`'s `recvbuf` becomes the element-wise combination with `op` of ranks `0..=r`'s
/// `sendbuf` (`count` elements), in rank order.
#[no_mangle]
pub extern "C" fn rdc_scan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: c_int,
    op: c_int,
    comm: *const rdc_comm,
) -> c_int {
    prefix(sendbuf, recvbuf, count, dt, op, comm, true)
}

/// Rank `r > 0`'s `recvbuf` becomes the combination of ranks `0..r`'s `sendbuf`; rank 0's
/// is not touched.
#[no_mangle]
pub extern "C" fn rdc_exscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: c_int,
    op: c_int,
    comm: *const rdc_comm,
) -> c_int {
    prefix(sendbuf, recvbuf, count, dt, op, comm, false)
}

fn prefix(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: c_int,
    op: c_int,
    comm: *const rdc_comm,
    inclusive: bool,
) -> c_int {
    call(comm, |c| {
        let (elem, f) = reducer_for(dt, op)?;
        let send = send_slice(sendbuf, count, dt)?;
        let recv = aligned_recv(recvbuf, send.len(), elem)?;
        refuse_overlap(send, recv)?;
        let b = bytes_level(c)?;
        Ok(match inclusive {
            true => b.scan(send, recv, elem, &*f),
            false => b.exscan(send, recv, elem, &*f),
        }
        .map_err(Into::into))
    })
}

fn bytes_level(c: &Comm) -> Result<&rdcoll::Collectives, c_int> {
    c.byte_collectives().map_err(|e| code_of(&e))
}

fn send_slice<'a>(buf: *const c_void, count: i64, dt: c_int) -> Result<&'a [u8], c_int> {
    let len = byte_len(count, dt)?;
    // SAFETY: the caller's buffer of `count` elements (the API's contract).
    unsafe { bytes(buf, len) }
}

fn recv_slice<'a>(buf: *mut c_void, count: i64, dt: c_int) -> Result<&'a mut [u8], c_int> {
    let len = byte_len(count, dt)?;
    // SAFETY: the caller's buffer of `count` elements (the API's contract).
    unsafe { bytes_mut(buf, len) }
}

/// `len` bytes at `buf`, aligned for `elem`-byte elements (a reduction's result is combined
/// in place).
fn aligned_recv<'a>(buf: *mut c_void, len: usize, elem: usize) -> Result<&'a mut [u8], c_int> {
    if len > 0 && !(buf as usize).is_multiple_of(elem) {
        return Err(RDC_ERR_ARG);
    }
    // SAFETY: the caller's buffer of `len` bytes (the API's contract).
    unsafe { bytes_mut(buf, len) }
}

/// Send and receive buffers that overlap cannot be read and written at once.
fn refuse_overlap(send: &[u8], recv: &[u8]) -> Result<(), c_int> {
    if send.is_empty() || recv.is_empty() {
        return Ok(());
    }
    let (s, r) = (send.as_ptr() as usize, recv.as_ptr() as usize);
    if s < r + recv.len() && r < s + send.len() {
        return Err(RDC_ERR_ARG);
    }
    Ok(())
}

/// The element size and byte-level reducer of predefined `op` on datatype `dt`.
fn reducer_for(dt: c_int, op: c_int) -> Result<(usize, Box<Reducer<'static>>), c_int> {
    if let Some(f) = crate::ops::user_reducer(op, dt) {
        return Ok((dt_size(dt)?, f?));
    }
    let op = Op::ALL
        .get(usize::try_from(op).map_err(|_| RDC_ERR_OP)?)
        .copied()
        .ok_or(RDC_ERR_OP)?;
    fn boxed<T: Element>(op: Op) -> Result<Box<Reducer<'static>>, c_int> {
        if T::FLOAT && op.integers_only() {
            return Err(RDC_ERR_OP);
        }
        Ok(Box::new(op_reducer::<T>(op)))
    }
    let f = match dt {
        0 | 5 => boxed::<u8>(op)?,
        1 => boxed::<i8>(op)?,
        2 => boxed::<i16>(op)?,
        3 => boxed::<i32>(op)?,
        4 => boxed::<i64>(op)?,
        6 => boxed::<u16>(op)?,
        7 => boxed::<u32>(op)?,
        8 => boxed::<u64>(op)?,
        9 => boxed::<f32>(op)?,
        10 => boxed::<f64>(op)?,
        _ => return Err(RDC_ERR_DATATYPE),
    };
    Ok((dt_size(dt)?, f))
}

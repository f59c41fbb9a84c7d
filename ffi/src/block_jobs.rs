//! The arguments of the C block collectives and reductions checked once, for the blocking call
//! and its nonblocking form alike: each `*_job` function checks what a call was given and
//! returns the collective to run on the communicator's byte-level collectives as a [`Job`]
//! (run at once by the blocking call, on the collective thread by the `rdc_i*` one).
//! Counts and displacements are in elements of the call's datatype, as in MPI.

use std::ffi::{c_int, c_void};
use std::ops::Range;

use rdcoll::reduce::op::op_reducer;
use rdcoll::{CollError, Collectives, Comm, Complex32, Complex64, Element, Op};

use crate::p2p::{byte_len, bytes, bytes_mut, dt_size};
use crate::*;

/// A checked collective call, to run on the communicator's byte-level collectives.
pub(crate) type Job = Box<dyn FnOnce(&Collectives) -> Result<(), CollError> + Send>;

/// A byte-level reduction a job can take to another thread.
pub(crate) type SendReducer = Box<dyn Fn(&mut [u8], &[u8]) + Send + Sync>;

/// A caller's buffer held by address: the C API's contract keeps it valid (and a receive
/// buffer untouched by anything else) until the blocking call returns or the nonblocking
/// call's request completes, and a job runs within that time.
#[derive(Clone, Copy)]
pub(crate) struct CBuf {
    addr: usize,
    len: usize,
}

impl CBuf {
    fn of(b: &[u8]) -> CBuf {
        CBuf {
            addr: b.as_ptr() as usize,
            len: b.len(),
        }
    }

    /// The bytes, to read.
    ///
    /// # Safety
    /// Within the call (or request) the buffer was given for, as the type's contract says.
    unsafe fn get<'a>(self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: a live caller's buffer of `len` bytes (the caller's contract).
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }

    /// The bytes, to write.
    ///
    /// # Safety
    /// As [`get`](CBuf::get), and nothing else reads or writes them meanwhile.
    unsafe fn get_mut<'a>(self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // A live caller's buffer of `len` bytes that only this job touches (the
        // caller's contract).
        // SAFETY: as just said.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

/// `n` non-negative integers at `p` (NULL only when `n` is 0).
pub(crate) fn non_negative<T: Copy + TryInto<i64>>(
    p: *const T,
    n: c_int,
) -> Result<Vec<i64>, c_int> {
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
    let n = c.size() as usize;
    let span = len.checked_mul(n).ok_or(RDC_ERR_COUNT)?;
    Ok(((0..n).map(|r| r * len..(r + 1) * len).collect(), span))
}

/// The arguments only the root reads (`at_root`: its blocks and buffer; nothing elsewhere).
/// When they are wrong the root still takes part, through `refuse` (a call the collective
/// refuses, so that it answers the other ranks and drains what they sent), and then returns
/// the argument's error code.
fn root_part(
    c: &Comm,
    root: u32,
    at_root: impl FnOnce() -> Result<(Vec<Range<usize>>, CBuf), c_int>,
    refuse: impl FnOnce(&Collectives) -> Result<(), CollError>,
) -> Result<(Vec<Range<usize>>, CBuf), c_int> {
    if c.rank() != root {
        return Ok((Vec::new(), CBuf { addr: 0, len: 0 }));
    }
    at_root().inspect_err(|_| {
        if let Ok(coll) = bytes_level(c) {
            let _ = refuse(coll);
        }
    })
}

pub(crate) fn root_of(c: &Comm, root: c_int) -> Result<u32, c_int> {
    u32::try_from(root)
        .ok()
        .filter(|&r| r < c.size())
        .ok_or(RDC_ERR_RANK)
}

pub(crate) fn bytes_level(c: &Comm) -> Result<&Collectives, c_int> {
    c.byte_collectives().map_err(|e| code_of(&e))
}

/// `r`, the C API's own check of a blocking collective's arguments on `c`: when it failed and
/// the ranks compare their calls (`RDCOLL_CHECK_COLLECTIVES`), this rank still takes part in
/// the comparison, as having refused, so that the others get `RDC_ERR_MISMATCH` instead of
/// waiting for it (as the Rust API's own checks do).
pub(crate) fn checked<T>(c: &Comm, r: Result<T, c_int>) -> Result<T, c_int> {
    if r.is_err() {
        if let Ok(coll) = c.byte_collectives() {
            coll.refuse_call();
        }
    }
    r
}

/// `r`, the C API's own check of a nonblocking collective's arguments on `c`: as [`checked`],
/// with the refusal queued behind the nonblocking collectives started before.
pub(crate) fn checked_nonblocking<T>(c: &Comm, r: Result<T, c_int>) -> Result<T, c_int> {
    if r.is_err() {
        c.refuse_nonblocking_collective();
    }
    r
}

/// `count` elements of `dt` at `buf`, to read.
fn send_buf(buf: *const c_void, count: i64, dt: c_int) -> Result<CBuf, c_int> {
    let len = byte_len(count, dt)?;
    // SAFETY: the caller's buffer of `count` elements (the API's contract).
    unsafe { bytes(buf, len) }.map(CBuf::of)
}

/// `len` bytes at `buf`, to read.
fn read_buf(buf: *const c_void, len: usize) -> Result<CBuf, c_int> {
    // SAFETY: the caller's buffer of `len` bytes (the API's contract).
    unsafe { bytes(buf, len) }.map(CBuf::of)
}

/// `len` bytes at `buf`, to write.
fn write_buf(buf: *mut c_void, len: usize) -> Result<CBuf, c_int> {
    // SAFETY: the caller's buffer of `len` bytes (the API's contract).
    unsafe { bytes_mut(buf, len) }.map(|b| CBuf::of(b))
}

/// `len` bytes at `buf`, aligned for `elem`-byte elements (a reduction's result is combined
/// in place).
fn aligned_write_buf(buf: *mut c_void, len: usize, elem: usize) -> Result<CBuf, c_int> {
    if len > 0 && !(buf as usize).is_multiple_of(elem) {
        return Err(RDC_ERR_ARG);
    }
    write_buf(buf, len)
}

/// Send and receive buffers that overlap cannot be read and written at once.
fn refuse_overlap(send: CBuf, recv: CBuf) -> Result<(), c_int> {
    if send.len == 0 || recv.len == 0 {
        return Ok(());
    }
    let (s, r) = (send.addr, recv.addr);
    if s < r + recv.len && r < s + send.len {
        return Err(RDC_ERR_ARG);
    }
    Ok(())
}

/// The predefined reduction `op` names.
pub(crate) fn op_of(op: c_int) -> Result<Op, c_int> {
    Op::ALL
        .get(usize::try_from(op).map_err(|_| RDC_ERR_OP)?)
        .copied()
        .ok_or(RDC_ERR_OP)
}

/// The element size and byte-level reducer of `op` (predefined, or made by `rdc_op_create`)
/// on datatype `dt`.
pub(crate) fn reducer_for(dt: c_int, op: c_int) -> Result<(usize, SendReducer), c_int> {
    if let Some(f) = crate::ops::user_reducer(op, dt) {
        return Ok((dt_size(dt)?, f?));
    }
    let op = op_of(op)?;
    fn boxed<T: Element>(op: Op) -> Result<SendReducer, c_int> {
        if !op.applies_to::<T>() {
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
        11 => boxed::<Complex32>(op)?,
        12 => boxed::<Complex64>(op)?,
        _ => return Err(RDC_ERR_DATATYPE),
    };
    Ok((dt_size(dt)?, f))
}

/// `rdc_gather`: `sendcount` elements from every rank into `root`'s `recvbuf`, rank `r`'s at
/// element `r * sendcount`.
pub(crate) fn gather_job(
    c: &Comm,
    sendbuf: *const c_void,
    sendcount: i64,
    recvbuf: *mut c_void,
    dt: c_int,
    root: c_int,
) -> Result<Job, c_int> {
    let root = root_of(c, root)?;
    let send = send_buf(sendbuf, sendcount, dt)?;
    let at_root = || {
        let (parts, span) = even(c, sendcount, dt)?;
        Ok((parts, write_buf(recvbuf, span)?))
    };
    // SAFETY (the refusal): the send buffer is the caller's, live during this call.
    let refuse = |c: &Collectives| c.gatherv(unsafe { send.get() }, &mut [], &[], root);
    let (parts, recv) = root_part(c, root, at_root, refuse)?;
    Ok(gatherv_run(send, recv, parts, root))
}

/// `rdc_gatherv`: rank `r`'s `recvcounts[r]` elements at element `displs[r]` of `root`'s
/// `recvbuf`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gatherv_job(
    c: &Comm,
    sendbuf: *const c_void,
    sendcount: i64,
    recvbuf: *mut c_void,
    recvcounts: *const i64,
    displs: *const i64,
    dt: c_int,
    root: c_int,
) -> Result<Job, c_int> {
    let root = root_of(c, root)?;
    let send = send_buf(sendbuf, sendcount, dt)?;
    let at_root = || {
        let (parts, span) = parts(c, recvcounts, displs, dt)?;
        Ok((parts, write_buf(recvbuf, span)?))
    };
    // SAFETY (the refusal): the send buffer is the caller's, live during this call.
    let refuse = |c: &Collectives| c.gatherv(unsafe { send.get() }, &mut [], &[], root);
    let (parts, recv) = root_part(c, root, at_root, refuse)?;
    Ok(gatherv_run(send, recv, parts, root))
}

fn gatherv_run(send: CBuf, recv: CBuf, parts: Vec<Range<usize>>, root: u32) -> Job {
    // SAFETY: the caller's buffers, live until the call or request ends (`CBuf`).
    Box::new(move |c| unsafe { c.gatherv(send.get(), recv.get_mut(), &parts, root) })
}

/// `rdc_scatter`: `root`'s block `r` (`recvcount` elements) to rank `r`'s `recvbuf`.
pub(crate) fn scatter_job(
    c: &Comm,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: i64,
    dt: c_int,
    root: c_int,
) -> Result<Job, c_int> {
    let root = root_of(c, root)?;
    let recv = write_buf(recvbuf, byte_len(recvcount, dt)?)?;
    let at_root = || {
        let (parts, span) = even(c, recvcount, dt)?;
        Ok((parts, read_buf(sendbuf, span)?))
    };
    let refuse = |c: &Collectives| c.scatterv(&[], &[], &mut [], root);
    let (parts, send) = root_part(c, root, at_root, refuse)?;
    Ok(scatterv_run(send, parts, recv, root))
}

/// `rdc_scatterv`: `root`'s `sendcounts[r]` elements at element `displs[r]` to rank `r`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scatterv_job(
    c: &Comm,
    sendbuf: *const c_void,
    sendcounts: *const i64,
    displs: *const i64,
    recvbuf: *mut c_void,
    recvcount: i64,
    dt: c_int,
    root: c_int,
) -> Result<Job, c_int> {
    let root = root_of(c, root)?;
    let recv = write_buf(recvbuf, byte_len(recvcount, dt)?)?;
    let at_root = || {
        let (parts, span) = parts(c, sendcounts, displs, dt)?;
        Ok((parts, read_buf(sendbuf, span)?))
    };
    let refuse = |c: &Collectives| c.scatterv(&[], &[], &mut [], root);
    let (parts, send) = root_part(c, root, at_root, refuse)?;
    Ok(scatterv_run(send, parts, recv, root))
}

fn scatterv_run(send: CBuf, parts: Vec<Range<usize>>, recv: CBuf, root: u32) -> Job {
    // SAFETY: the caller's buffers, live until the call or request ends (`CBuf`).
    Box::new(move |c| unsafe { c.scatterv(send.get(), &parts, recv.get_mut(), root) })
}

/// `rdc_allgather`: every rank's `count` elements into every rank's `recvbuf`.
pub(crate) fn allgather_job(
    c: &Comm,
    sendbuf: *const c_void,
    count: i64,
    recvbuf: *mut c_void,
    dt: c_int,
) -> Result<Job, c_int> {
    let send = send_buf(sendbuf, count, dt)?;
    let (parts, span) = even(c, count, dt)?;
    let recv = write_buf(recvbuf, span)?;
    Ok(allgatherv_run(send, recv, parts))
}

/// `rdc_allgatherv`: rank `r`'s block at element `displs[r]` of every rank's `recvbuf`.
pub(crate) fn allgatherv_job(
    c: &Comm,
    sendbuf: *const c_void,
    sendcount: i64,
    recvbuf: *mut c_void,
    recvcounts: *const i64,
    displs: *const i64,
    dt: c_int,
) -> Result<Job, c_int> {
    let send = send_buf(sendbuf, sendcount, dt)?;
    let (parts, span) = parts(c, recvcounts, displs, dt)?;
    let recv = write_buf(recvbuf, span)?;
    Ok(allgatherv_run(send, recv, parts))
}

fn allgatherv_run(send: CBuf, recv: CBuf, parts: Vec<Range<usize>>) -> Job {
    // SAFETY: the caller's buffers, live until the call or request ends (`CBuf`).
    Box::new(move |c| unsafe { c.allgatherv(send.get(), recv.get_mut(), &parts) })
}

/// `rdc_alltoall`: block `j` of `count` elements to rank `j`.
pub(crate) fn alltoall_job(
    c: &Comm,
    sendbuf: *const c_void,
    count: i64,
    recvbuf: *mut c_void,
    dt: c_int,
) -> Result<Job, c_int> {
    let (parts, span) = even(c, count, dt)?;
    let send = read_buf(sendbuf, span)?;
    let recv = write_buf(recvbuf, span)?;
    refuse_overlap(send, recv)?;
    Ok(alltoallv_run(send, parts.clone(), recv, parts))
}

/// `rdc_alltoallv`: `sendcounts[j]` elements at `sdispls[j]` to rank `j`, rank `i`'s
/// `recvcounts[i]` at `rdispls[i]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn alltoallv_job(
    c: &Comm,
    sendbuf: *const c_void,
    sendcounts: *const i64,
    sdispls: *const i64,
    recvbuf: *mut c_void,
    recvcounts: *const i64,
    rdispls: *const i64,
    dt: c_int,
) -> Result<Job, c_int> {
    let (send_parts, send_span) = parts(c, sendcounts, sdispls, dt)?;
    let (recv_parts, recv_span) = parts(c, recvcounts, rdispls, dt)?;
    let send = read_buf(sendbuf, send_span)?;
    let recv = write_buf(recvbuf, recv_span)?;
    refuse_overlap(send, recv)?;
    Ok(alltoallv_run(send, send_parts, recv, recv_parts))
}

fn alltoallv_run(
    send: CBuf,
    send_parts: Vec<Range<usize>>,
    recv: CBuf,
    recv_parts: Vec<Range<usize>>,
) -> Job {
    // SAFETY: the caller's buffers, live until the call or request ends (`CBuf`).
    Box::new(move |c| unsafe { c.alltoallv(send.get(), &send_parts, recv.get_mut(), &recv_parts) })
}

/// `rdc_reduce_scatter_block`: block `r` (`recvcount` elements) of the combination of every
/// rank's `sendbuf` into rank `r`'s `recvbuf`.
pub(crate) fn reduce_scatter_block_job(
    c: &Comm,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: i64,
    dt: c_int,
    op: c_int,
) -> Result<Job, c_int> {
    let (_, span) = even(c, recvcount, dt)?;
    let (elem, f) = reducer_for(dt, op)?;
    let send = read_buf(sendbuf, span)?;
    let recv = aligned_write_buf(recvbuf, byte_len(recvcount, dt)?, elem)?;
    refuse_overlap(send, recv)?;
    // SAFETY: the caller's buffers, live until the call or request ends (`CBuf`).
    Ok(Box::new(move |c| unsafe {
        c.reduce_scatter_block(send.get(), recv.get_mut(), elem, &*f)
    }))
}

/// `rdc_reduce_scatter`: as `rdc_reduce_scatter_block` with block `r` of `recvcounts[r]`
/// elements (one after another).
pub(crate) fn reduce_scatter_job(
    c: &Comm,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const i64,
    dt: c_int,
    op: c_int,
) -> Result<Job, c_int> {
    let (parts, span) = parts(c, recvcounts, std::ptr::null(), dt)?;
    let (elem, f) = reducer_for(dt, op)?;
    let send = read_buf(sendbuf, span)?;
    let mine = parts.get(c.rank() as usize).map_or(0, |p| p.len());
    let recv = aligned_write_buf(recvbuf, mine, elem)?;
    refuse_overlap(send, recv)?;
    // SAFETY: the caller's buffers, live until the call or request ends (`CBuf`).
    Ok(Box::new(move |c| unsafe {
        c.reduce_scatter(send.get(), &parts, recv.get_mut(), elem, &*f)
    }))
}

/// `rdc_scan` (`inclusive`) or `rdc_exscan`.
pub(crate) fn prefix_job(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: c_int,
    op: c_int,
    inclusive: bool,
) -> Result<Job, c_int> {
    let (elem, f) = reducer_for(dt, op)?;
    let send = send_buf(sendbuf, count, dt)?;
    let recv = aligned_write_buf(recvbuf, send.len, elem)?;
    refuse_overlap(send, recv)?;
    // SAFETY: the caller's buffers, live until the call or request ends (`CBuf`).
    Ok(Box::new(move |c| unsafe {
        match inclusive {
            true => c.scan(send.get(), recv.get_mut(), elem, &*f),
            false => c.exscan(send.get(), recv.get_mut(), elem, &*f),
        }
    }))
}

/// `rdc_iallreduce` (`root` `None`) or `rdc_ireduce`, at the level of bytes: the
/// contribution (`sendbuf`, or `RDC_IN_PLACE` for the receive buffer's) is combined in the
/// receive buffer where the result goes (every rank for an allreduce, the root for a reduce);
/// elsewhere it is only read. Any copy is the job's (a long vector's is time the caller would
/// not compute): only this rank's own segment of a long one, or a short one whole.
pub(crate) fn reduction_job(
    c: &Comm,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: c_int,
    op: c_int,
    root: Option<c_int>,
) -> Result<Job, c_int> {
    let len = byte_len(count, dt)?;
    let (elem, f) = reducer_for(dt, op)?;
    // A predefined operation reads its buffers as elements; one of the caller's gets them as
    // pointers, in place, whatever their alignment.
    let align = if crate::ops::is_user_op(op) { 1 } else { elem };
    let root = root.map(|r| root_of(c, r)).transpose()?;
    let at_root = root.is_none_or(|r| r == c.rank());
    let in_place = sendbuf == RDC_IN_PLACE || (at_root && std::ptr::eq(sendbuf, recvbuf));
    let recv = if at_root {
        aligned_write_buf(recvbuf, len, align)?
    } else {
        CBuf { addr: 0, len: 0 }
    };
    // In place, a non-root's contribution is in its receive buffer (MPI_IN_PLACE at a
    // non-root of MPI_Reduce is erroneous; rdcoll reads the buffer it was given).
    let send = match (in_place, at_root) {
        (true, true) => None,
        (true, false) => Some(recvbuf as *const c_void),
        (false, _) => Some(sendbuf),
    };
    // Aligned as the blocking call requires (it reads the elements where they are).
    let send = send
        .map(|s| match len > 0 && !(s as usize).is_multiple_of(align) {
            true => Err(RDC_ERR_ARG),
            false => read_buf(s, len),
        })
        .transpose()?;
    if let Some(s) = send {
        refuse_overlap(s, recv)?;
    }
    Ok(Box::new(move |c| match (send, at_root) {
        // In place at a receiving rank: its receive buffer is its contribution.
        (None, _) => {
            // SAFETY: the caller's receive buffer, live and only the job's until it ends.
            let acc = unsafe { recv.get_mut() };
            match root {
                None => c.allreduce(acc, elem, &*f),
                Some(root) => c.reduce(acc, elem, &*f, root),
            }
        }
        // The caller's send and receive buffers, live until the job ends, not overlapping
        // (checked above); the receive buffer is only the job's meanwhile.
        // SAFETY: as just said.
        (Some(s), true) => unsafe { c.reduce_apart(s.get(), recv.get_mut(), elem, &*f, root) },
        // A rank that receives nothing: its contribution is only read (the reduction copies
        // a small one, aligned as the reducer needs).
        (Some(s), false) => {
            let root = root.expect("only a reduce has ranks that receive nothing");
            // SAFETY: the caller's send buffer, live until the job ends.
            let send = unsafe { s.get() };
            c.reduce_from(send, (elem, align.next_power_of_two()), &*f, root)
        }
    }))
}

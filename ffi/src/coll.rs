//! Collectives: broadcast, allreduce, reduce, barrier.

use std::ffi::{c_int, c_void};

use rdcoll::{Comm, Complex32, Complex64, Element, Op};

use crate::block_jobs::{bytes_level, checked, op_of, reduction_job, root_of};
use crate::p2p::{byte_len, bytes_mut};
use crate::*;

/// Where a reduction's contribution comes from.
#[derive(Clone, Copy)]
enum Contribution {
    /// Its own buffer of `count` elements.
    Separate(*const c_void),
    /// The receive buffer (`RDC_IN_PLACE`, or the same address as the receive buffer).
    InPlace,
}

/// Reads the send-buffer argument of a reduction whose receive buffer is `recv` (`len`
/// bytes; unused when `recv_used` is false). Overlapping but different buffers are refused:
/// they could not be read and written at once.
fn contribution(
    send: *const c_void,
    recv: *mut c_void,
    len: usize,
    recv_used: bool,
) -> Result<Contribution, c_int> {
    if send == RDC_IN_PLACE {
        return Ok(Contribution::InPlace);
    }
    if len == 0 {
        return Ok(Contribution::Separate(send));
    }
    if send.is_null() {
        return Err(RDC_ERR_NULL);
    }
    if recv_used && !recv.is_null() {
        let (s, r) = (send as usize, recv as usize);
        if s == r {
            return Ok(Contribution::InPlace);
        }
        if s < r.saturating_add(len) && r < s.saturating_add(len) {
            return Err(RDC_ERR_ARG);
        }
    }
    Ok(Contribution::Separate(send))
}

/// `count` elements of `T` at `ptr` (NULL or anything only when `count` is 0).
///
/// # Safety
/// A non-NULL `ptr` with `count > 0` must be valid for reads of `count` `T`s.
unsafe fn elems<'a, T>(ptr: *const c_void, count: usize) -> Result<&'a [T], c_int> {
    if count == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(RDC_ERR_NULL);
    }
    if !(ptr as *const T).is_aligned() {
        return Err(RDC_ERR_ARG);
    }
    // SAFETY: non-NULL, aligned, and the caller vouches for `count` readable elements.
    Ok(unsafe { std::slice::from_raw_parts(ptr as *const T, count) })
}

/// `count` elements of `T` at `ptr`, writable.
///
/// # Safety
/// A non-NULL `ptr` with `count > 0` must be valid for reads and writes of `count` `T`s and
/// not otherwise accessed for the returned lifetime.
unsafe fn elems_mut<'a, T>(ptr: *mut c_void, count: usize) -> Result<&'a mut [T], c_int> {
    if count == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(RDC_ERR_NULL);
    }
    if !(ptr as *const T).is_aligned() {
        return Err(RDC_ERR_ARG);
    }
    // SAFETY: non-NULL, aligned, and the caller vouches for `count` writable elements.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr as *mut T, count) })
}

/// What a reduction is asked to do, arguments already checked but for the buffers.
#[derive(Clone, Copy)]
struct Reduction {
    send: Contribution,
    recv: *mut c_void,
    count: usize,
    op: Op,
    /// `None` for an allreduce.
    root: Option<u32>,
}

/// A reduction's buffers as elements.
enum Buffers<'a, T> {
    /// The receive buffer holds the contribution and takes the result.
    InPlace(&'a mut [T]),
    /// The contribution, and where the result goes.
    Separate(&'a [T], &'a mut [T]),
}

impl Reduction {
    /// Runs the reduction on elements of `T`.
    ///
    /// # Safety
    /// The buffers must be as the C API documents them for `count` elements of `T`.
    unsafe fn run<T: Element>(self, comm: &Comm) -> Result<(), c_int> {
        let code = |e: rdcoll::Error| code_of(&e);
        let at_root = self.root.is_none_or(|r| r == comm.rank());
        // SAFETY: passed on from the caller.
        let buffers = checked(comm, unsafe { self.buffers::<T>(at_root) })?;
        match (buffers, self.root) {
            (Buffers::InPlace(buf), None) => comm.allreduce_in_place(buf, self.op).map_err(code),
            (Buffers::InPlace(buf), Some(root)) => {
                comm.reduce_in_place(buf, self.op, root).map_err(code)
            }
            (Buffers::Separate(send, recv), None) => {
                comm.allreduce(send, recv, self.op).map_err(code)
            }
            (Buffers::Separate(send, recv), Some(root)) => {
                comm.reduce(send, recv, self.op, root).map_err(code)
            }
        }
    }

    /// The buffers as slices of `T` (the receive buffer empty where it is not used), or the
    /// error of an operation `T` does not support or of a misaligned buffer.
    ///
    /// # Safety
    /// As [`run`](Reduction::run).
    unsafe fn buffers<'a, T: Element>(&self, at_root: bool) -> Result<Buffers<'a, T>, c_int> {
        if !self.op.applies_to::<T>() {
            return Err(RDC_ERR_OP);
        }
        match self.send {
            // SAFETY: the caller's receive buffer of `count` elements (at a non-root rank the
            // contribution is read from it).
            Contribution::InPlace => Ok(Buffers::InPlace(unsafe {
                elems_mut::<T>(self.recv, self.count)?
            })),
            Contribution::Separate(send) => {
                // SAFETY: the caller's send buffer, checked not to overlap the receive one.
                let send = unsafe { elems::<T>(send, self.count)? };
                let recv = if at_root {
                    // SAFETY: the caller's receive buffer of `count` elements.
                    unsafe { elems_mut::<T>(self.recv, self.count)? }
                } else {
                    &mut []
                };
                Ok(Buffers::Separate(send, recv))
            }
        }
    }

    /// Runs the reduction on the element type `dt` names (`RDC_BYTE` as `uint8_t`).
    ///
    /// # Safety
    /// As [`run`](Reduction::run).
    unsafe fn run_as(self, dt: c_int, comm: &Comm) -> Result<(), c_int> {
        // SAFETY (every arm): passed on from the caller.
        unsafe {
            match dt {
                0 | 5 => self.run::<u8>(comm),
                1 => self.run::<i8>(comm),
                2 => self.run::<i16>(comm),
                3 => self.run::<i32>(comm),
                4 => self.run::<i64>(comm),
                6 => self.run::<u16>(comm),
                7 => self.run::<u32>(comm),
                8 => self.run::<u64>(comm),
                9 => self.run::<f32>(comm),
                10 => self.run::<f64>(comm),
                11 => self.run::<Complex32>(comm),
                12 => self.run::<Complex64>(comm),
                _ => Err(RDC_ERR_DATATYPE),
            }
        }
    }
}

/// Checks the arguments every reduction has and runs it.
#[allow(clippy::too_many_arguments)]
fn reduction(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: c_int,
    op: c_int,
    root: Option<c_int>,
    comm: *const rdc_comm,
) -> c_int {
    guard(|| {
        finish((|| {
            let c = comm_of(comm)?;
            if crate::ops::is_user_op(op) {
                // An operation of the caller's runs on bytes, as the nonblocking form does.
                let job = checked(&c, reduction_job(&c, sendbuf, recvbuf, count, dt, op, root))?;
                return job(bytes_level(&c)?).map_err(|e| code_of(&e.into()));
            }
            let r = checked(
                &c,
                (|| {
                    let len = byte_len(count, dt)?;
                    let op = op_of(op)?;
                    let root = root.map(|r| root_of(&c, r)).transpose()?;
                    let recv_used = root.is_none_or(|r| r == c.rank());
                    let send = contribution(sendbuf, recvbuf, len, recv_used)?;
                    if recv_used && recvbuf.is_null() && len > 0 {
                        return Err(RDC_ERR_NULL);
                    }
                    Ok(Reduction {
                        send,
                        recv: recvbuf,
                        count: len / crate::p2p::dt_size(dt)?,
                        op,
                        root,
                    })
                })(),
            )?;
            // SAFETY: the buffers are the caller's, as the API documents them.
            unsafe { r.run_as(dt, &c) }
        })())
    })
}

/// Broadcasts `count` elements of `dt` at `buf` from `root`: afterwards every rank's `buf`
/// holds the root's. Every rank passes the same `count`, `dt` and `root`: where they differ,
/// `RDC_ERR_MISMATCH` (on every rank with `RDCOLL_CHECK_COLLECTIVES=1`; see it).
#[no_mangle]
pub extern "C" fn rdc_bcast(
    buf: *mut c_void,
    count: i64,
    dt: DatatypeArg,
    root: c_int,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    guard(|| {
        finish((|| {
            let c = comm_of(comm)?;
            let (data, root) = checked(
                &c,
                {
                    // SAFETY: the caller's buffer of `count` elements (the API's contract).
                    byte_len(count, dt).and_then(|len| unsafe { bytes_mut(buf, len) })
                }
                .and_then(|data| Ok((data, root_of(&c, root)?))),
            )?;
            c.bcast(data, root).map_err(|e| code_of(&e))
        })())
    })
}

/// Broadcasts `count` elements of `dt` at `buf` from `root` by a receiver-initiated multicast
/// across clusters (`RDCOLL_CLUSTER`, else hosts), whatever the size: `how` is
/// `RDC_MULTICAST_ROBBER` (ranks of a cluster share the work of pulling each piece into it,
/// and idle ones steal work from busy ones) or `RDC_MULTICAST_MOB` (fixed shares); another
/// value is `RDC_ERR_ARG`. Arguments otherwise as for `rdc_bcast`.
#[no_mangle]
pub extern "C" fn rdc_multicast(
    buf: *mut c_void,
    count: i64,
    dt: DatatypeArg,
    root: c_int,
    how: c_int,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    guard(|| {
        finish((|| {
            let c = comm_of(comm)?;
            let (data, root, how) = checked(
                &c,
                (|| {
                    let how = match how {
                        RDC_MULTICAST_ROBBER => rdcoll::Multicast::Robber,
                        RDC_MULTICAST_MOB => rdcoll::Multicast::Mob,
                        _ => return Err(RDC_ERR_ARG),
                    };
                    let len = byte_len(count, dt)?;
                    // SAFETY: the caller's buffer of `count` elements (the API's contract).
                    let data = unsafe { bytes_mut(buf, len)? };
                    Ok((data, root_of(&c, root)?, how))
                })(),
            )?;
            c.multicast(data, root, how).map_err(|e| code_of(&e))
        })())
    })
}

/// Combines every rank's `count` elements of `dt` at `sendbuf` element-wise with `op` and
/// leaves the result in every rank's `recvbuf`. `sendbuf` may be `RDC_IN_PLACE` (then
/// `recvbuf` holds this rank's contribution); otherwise the buffers must not overlap
/// (`RDC_ERR_ARG`), and both must be aligned for `dt`. The combination order is fixed, so
/// floating-point results are the same bit for bit on every rank and every run.
/// Logical and bitwise operations on `RDC_FLOAT`/`RDC_DOUBLE`, and any but `RDC_SUM` and
/// `RDC_PROD` on the complex types, are `RDC_ERR_OP`.
#[no_mangle]
pub extern "C" fn rdc_allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: DatatypeArg,
    op: OpArg,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    let op = op.0;
    reduction(sendbuf, recvbuf, count, dt, op, None, comm)
}

/// As `rdc_allreduce`, but only `root` receives the result; `recvbuf` is not touched (and
/// may be NULL) elsewhere. With `sendbuf == RDC_IN_PLACE` the contribution is read from
/// `recvbuf` on every rank.
#[no_mangle]
pub extern "C" fn rdc_reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: DatatypeArg,
    op: OpArg,
    root: c_int,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    let op = op.0;
    reduction(sendbuf, recvbuf, count, dt, op, Some(root), comm)
}

/// Returns once every rank of `comm` has called it.
#[no_mangle]
pub extern "C" fn rdc_barrier(comm: *const rdc_comm) -> c_int {
    guard(|| finish(comm_of(comm).and_then(|c| c.barrier().map_err(|e| code_of(&e)))))
}

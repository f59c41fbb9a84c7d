//! Point-to-point: blocking and nonblocking sends and receives, probes, requests.

use std::ffi::{c_int, c_void};

use rdcoll::{Comm, Source, Status, Tag};

use crate::*;

/// Bytes of one element of datatype `dt`.
pub(crate) fn dt_size(dt: c_int) -> Result<usize, c_int> {
    Ok(match dt {
        0 | 1 | 5 => 1,
        2 | 6 => 2,
        3 | 7 | 9 => 4,
        4 | 8 | 10 | 11 => 8,
        12 => 16,
        _ => return Err(RDC_ERR_DATATYPE),
    })
}

/// Bytes of `count` elements of `dt`, checked.
pub(crate) fn byte_len(count: i64, dt: c_int) -> Result<usize, c_int> {
    let size = dt_size(dt)?;
    let count = usize::try_from(count).map_err(|_| RDC_ERR_COUNT)?;
    let bytes = count.checked_mul(size).ok_or(RDC_ERR_COUNT)?;
    if bytes > isize::MAX as usize {
        return Err(RDC_ERR_COUNT);
    }
    Ok(bytes)
}

/// Bytes of `count` elements of `dt` at `buf`, which may be NULL only for zero bytes (for
/// buffers handed on as pointers, not slices).
fn pointer_len(buf: *const c_void, count: i64, dt: c_int) -> Result<usize, c_int> {
    let len = byte_len(count, dt)?;
    if buf.is_null() && len > 0 {
        return Err(RDC_ERR_NULL);
    }
    Ok(len)
}

/// `len` bytes at `ptr` as a slice (NULL only for zero bytes).
///
/// # Safety
/// A non-NULL `ptr` must be valid for reads of `len` bytes for the returned lifetime.
pub(crate) unsafe fn bytes<'a>(ptr: *const c_void, len: usize) -> Result<&'a [u8], c_int> {
    match (ptr.is_null(), len) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(RDC_ERR_NULL),
        // SAFETY: the caller vouches for `len` readable bytes at `ptr`.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }),
    }
}

/// `len` bytes at `ptr` as a mutable slice (NULL only for zero bytes).
///
/// # Safety
/// A non-NULL `ptr` must be valid for reads and writes of `len` bytes, and not otherwise
/// accessed, for the returned lifetime.
pub(crate) unsafe fn bytes_mut<'a>(ptr: *mut c_void, len: usize) -> Result<&'a mut [u8], c_int> {
    match (ptr.is_null(), len) {
        (_, 0) => Ok(&mut []),
        (true, _) => Err(RDC_ERR_NULL),
        // SAFETY: the caller vouches for `len` writable bytes at `ptr`.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) }),
    }
}

fn dest_rank(comm: &Comm, r: c_int) -> Result<u32, c_int> {
    if r == RDC_PROC_NULL {
        return Ok(rdcoll::PROC_NULL);
    }
    u32::try_from(r)
        .ok()
        .filter(|&r| r < comm.size())
        .ok_or(RDC_ERR_RANK)
}

fn source_rank(comm: &Comm, r: c_int) -> Result<Source, c_int> {
    if r == RDC_ANY_SOURCE {
        return Ok(Source::Any);
    }
    dest_rank(comm, r).map(Source::Rank)
}

fn send_tag(t: c_int) -> Result<u32, c_int> {
    u32::try_from(t).map_err(|_| RDC_ERR_TAG)
}

fn recv_tag(t: c_int) -> Result<Tag, c_int> {
    if t == RDC_ANY_TAG {
        return Ok(Tag::Any);
    }
    send_tag(t).map(Tag::Value)
}

/// Writes `st` (when given) for a completed operation's result.
pub(crate) fn put_status(st: *mut rdc_status, r: &Result<Status, rdcoll::Error>) {
    if st.is_null() {
        return;
    }
    let s = match r {
        Ok(s) => rdc_status {
            source: if s.source == rdcoll::PROC_NULL {
                RDC_PROC_NULL
            } else {
                s.source as c_int
            },
            tag: s.tag as c_int,
            error: RDC_SUCCESS,
            count: s.len,
            cancelled: s.cancelled as c_int,
        },
        Err(rdcoll::Error::Truncated {
            sender, tag, len, ..
        }) => rdc_status {
            source: *sender as c_int,
            tag: *tag as c_int,
            error: RDC_ERR_TRUNCATE,
            count: *len,
            cancelled: 0,
        },
        Err(e) => rdc_status {
            source: -1,
            tag: -1,
            error: code_of(e),
            count: 0,
            cancelled: 0,
        },
    };
    // SAFETY: `st` is non-NULL and points to a writable status (the API's contract).
    unsafe { *st = s };
}

pub(crate) fn code(r: &Result<Status, rdcoll::Error>) -> c_int {
    match r {
        Ok(_) => RDC_SUCCESS,
        Err(e) => code_of(e),
    }
}

/// Sends `count` elements of `dt` at `buf` to `dest` with `tag` (>= 0); returns when `buf`
/// may be reused.
#[no_mangle]
pub extern "C" fn rdc_send(
    buf: *const c_void,
    count: i64,
    dt: DatatypeArg,
    dest: c_int,
    tag: c_int,
    comm: *const rdc_comm,
) -> c_int {
    let dt = dt.0;
    guard(|| {
        finish((|| {
            let len = byte_len(count, dt)?;
            // SAFETY: the caller's buffer of `count` elements (the API's contract).
            let data = unsafe { bytes(buf, len)? };
            let c = comm_of(comm)?;
            let (dest, tag) = (dest_rank(&c, dest)?, send_tag(tag)?);
            c.send(data, dest, tag).map_err(|e| code_of(&e))
        })())
    })
}

/// Receives at most `count` elements of `dt` into `buf` from `source` (or `RDC_ANY_SOURCE`)
/// with `tag` (or `RDC_ANY_TAG`); `status` (may be NULL) tells the sender, tag and length. A
/// longer message is consumed, nothing past `buf` is written, and `RDC_ERR_TRUNCATE` is
/// returned with its true length in the status.
#[no_mangle]
pub extern "C" fn rdc_recv(
    buf: *mut c_void,
    count: i64,
    dt: DatatypeArg,
    source: c_int,
    tag: c_int,
    comm: *const rdc_comm,
    status: *mut rdc_status,
) -> c_int {
    let dt = dt.0;
    guard(|| {
        let r = (|| {
            let len = byte_len(count, dt)?;
            // SAFETY: the caller's buffer of `count` elements (the API's contract).
            let data = unsafe { bytes_mut(buf, len)? };
            let c = comm_of(comm)?;
            let (source, tag) = (source_rank(&c, source)?, recv_tag(tag)?);
            Ok(c.recv(data, source, tag))
        })();
        match r {
            Ok(res) => {
                put_status(status, &res);
                code(&res)
            }
            Err(e) => e,
        }
    })
}

/// Starts a send; `*req` names it until `rdc_wait`/`rdc_test` completes it. `buf` must stay
/// valid and unchanged until then.
#[no_mangle]
pub extern "C" fn rdc_isend(
    buf: *const c_void,
    count: i64,
    dt: DatatypeArg,
    dest: c_int,
    tag: c_int,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    guard(|| {
        if req.is_null() {
            return RDC_ERR_NULL;
        }
        finish((|| {
            let len = pointer_len(buf, count, dt)?;
            let c = comm_of(comm)?;
            let (dest, tag) = (dest_rank(&c, dest)?, send_tag(tag)?);
            // SAFETY: the caller keeps `buf` valid and unchanged until the request completes
            // (the API's contract); a dropped request waits first.
            let r = unsafe { c.isend_raw(buf as *const u8, len, dest, tag) }
                .map_err(|e| code_of(&e))?;
            store(req, r)
        })())
    })
}

/// Posts a receive; `*req` names it until `rdc_wait`/`rdc_test` completes it. `buf` must stay
/// valid and untouched until then.
#[no_mangle]
pub extern "C" fn rdc_irecv(
    buf: *mut c_void,
    count: i64,
    dt: DatatypeArg,
    source: c_int,
    tag: c_int,
    comm: *const rdc_comm,
    req: *mut *mut rdc_request,
) -> c_int {
    let dt = dt.0;
    guard(|| {
        if req.is_null() {
            return RDC_ERR_NULL;
        }
        finish((|| {
            let len = pointer_len(buf, count, dt)?;
            let c = comm_of(comm)?;
            let (source, tag) = (source_rank(&c, source)?, recv_tag(tag)?);
            // SAFETY: the caller keeps `buf` valid and untouched until the request completes
            // (the API's contract); a dropped request waits first.
            let r = unsafe { c.irecv_raw(buf as *mut u8, len, source, tag) }
                .map_err(|e| code_of(&e))?;
            store(req, r)
        })())
    })
}

fn probe_status(st: *mut rdc_status, s: Status) {
    put_status(st, &Ok(s));
}

/// Waits for a message from `source` with `tag` (wildcards allowed) and fills `status`
/// without receiving it.
#[no_mangle]
pub extern "C" fn rdc_probe(
    source: c_int,
    tag: c_int,
    comm: *const rdc_comm,
    status: *mut rdc_status,
) -> c_int {
    guard(|| {
        finish((|| {
            let c = comm_of(comm)?;
            let (source, tag) = (source_rank(&c, source)?, recv_tag(tag)?);
            let s = c.probe(source, tag).map_err(|e| code_of(&e))?;
            probe_status(status, s);
            Ok(())
        })())
    })
}

/// Sets `*flag` to 1 and fills `status` if a message from `source` with `tag` has arrived,
/// else sets `*flag` to 0.
#[no_mangle]
pub extern "C" fn rdc_iprobe(
    source: c_int,
    tag: c_int,
    comm: *const rdc_comm,
    flag: *mut c_int,
    status: *mut rdc_status,
) -> c_int {
    guard(|| {
        if flag.is_null() {
            return RDC_ERR_NULL;
        }
        finish((|| {
            let c = comm_of(comm)?;
            let (source, tag) = (source_rank(&c, source)?, recv_tag(tag)?);
            let got = c.iprobe(source, tag).map_err(|e| code_of(&e))?;
            // SAFETY: `flag` is non-NULL and points to a writable int.
            unsafe { *flag = got.is_some() as c_int };
            if let Some(s) = got {
                probe_status(status, s);
            }
            Ok(())
        })())
    })
}

/// Sets `*count` to the length of the message `status` describes in elements of `datatype`
/// (as `MPI_Get_count`): `RDC_ERR_ARG` if it is not a whole number of them.
#[no_mangle]
pub extern "C" fn rdc_get_count(
    status: *const rdc_status,
    datatype: DatatypeArg,
    count: *mut i64,
) -> c_int {
    let datatype = datatype.0;
    guard(|| {
        if status.is_null() || count.is_null() {
            return RDC_ERR_NULL;
        }
        let size = match dt_size(datatype) {
            Ok(s) => s,
            Err(e) => return e,
        };
        // SAFETY: `status` is non-NULL and points to a status (the API's contract).
        let bytes = unsafe { (*status).count };
        if size == 0 || bytes % size != 0 {
            return RDC_ERR_ARG;
        }
        // SAFETY: `count` is non-NULL and writable (the API's contract).
        unsafe { *count = (bytes / size) as i64 };
        RDC_SUCCESS
    })
}

/// Sends `sendcount` elements to `dest` and receives at most `recvcount` from `source`, both
/// at once (a ring exchange cannot deadlock). The buffers must not overlap (`RDC_ERR_ARG`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn rdc_sendrecv(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: DatatypeArg,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: DatatypeArg,
    source: c_int,
    recvtag: c_int,
    comm: *const rdc_comm,
    status: *mut rdc_status,
) -> c_int {
    let (sendtype, recvtype) = (sendtype.0, recvtype.0);
    guard(|| {
        let r = (|| {
            let (slen, rlen) = (
                byte_len(sendcount, sendtype)?,
                byte_len(recvcount, recvtype)?,
            );
            let c = comm_of(comm)?;
            let (dest, stag) = (dest_rank(&c, dest)?, send_tag(sendtag)?);
            let (source, rtag) = (source_rank(&c, source)?, recv_tag(recvtag)?);
            // Both at once: the bytes being sent would be overwritten while in flight.
            let (s, r) = (sendbuf as usize, recvbuf as usize);
            let both = slen > 0 && rlen > 0 && !sendbuf.is_null() && !recvbuf.is_null();
            if both && s < r.saturating_add(rlen) && r < s.saturating_add(slen) {
                return Err(RDC_ERR_ARG);
            }
            // SAFETY: the caller's buffers (the API's contract), checked not to overlap.
            let (out, inbox) = unsafe { (bytes(sendbuf, slen)?, bytes_mut(recvbuf, rlen)?) };
            Ok(c.sendrecv(out, dest, stag, inbox, source, rtag))
        })();
        match r {
            Ok(res) => {
                put_status(status, &res);
                code(&res)
            }
            Err(e) => e,
        }
    })
}

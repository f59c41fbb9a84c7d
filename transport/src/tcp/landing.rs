//! Landing a long payload in place: once the head of a put or get-data frame of at least
//! [`LAND_MIN`] bytes of data has been read, the rest of its data is read from the socket
//! straight into the memory it is for, instead of into the peer's read buffer and copied from
//! there (which also moved each partial frame to the buffer's start).

use std::os::fd::AsRawFd;

use super::frames::{self, PutEnd, PutTarget};
use super::wire::Frame;
use super::Shared;
use crate::types::Rank;

/// Frames with this much data or more land in place.
pub(super) const LAND_MIN: usize = 64 << 10;

/// A payload being read into place, across as many reads as the socket needs.
pub(crate) struct Landing {
    to: To,
    /// Its bytes, and how many have landed.
    len: usize,
    got: usize,
}

/// Where a landing payload goes. Each read into place holds the memory as any copy does
/// (`Region::with_range`), nothing in between: a landing that the connection's end leaves
/// unfinished holds nothing.
enum To {
    /// Get data at `chunk_off` for this rank's operation `op` (written only while the
    /// operation is pending, under the pending table's lock, so a failed operation's buffer
    /// is never written after its caller had it back).
    Get { op: u64, chunk_off: u64 },
    /// A put's chunk, at `at` in its target's region.
    Put {
        target: PutTarget,
        at: usize,
        end: PutEnd,
        flag: Option<u8>,
    },
    /// Bytes nobody waits for any more (their get ended meanwhile): read and dropped.
    Discard,
}

/// Starts landing the frame whose beginning is `buf` (all that has been read of it) if it is
/// a put or get-data frame with at least [`LAND_MIN`] bytes of data and a place for them: the
/// data read so far is copied there, and the landing goes on with [`go_on`]. `None`: the frame
/// is read whole as any other (also when its place is wrong, so that the usual handling
/// answers or reports it).
pub(super) fn start(sh: &Shared, from: Rank, buf: &[u8]) -> Result<Option<Landing>, String> {
    let Some((head, head_len, len)) = super::wire::decode_head(buf)? else {
        return Ok(None);
    };
    if len < LAND_MIN {
        return Ok(None);
    }
    let read = &buf[head_len..];
    let to = match head {
        Frame::GetData {
            op,
            chunk_off,
            status: super::wire::ST_OK,
            ..
        } => {
            let pending = sh.pending.lock();
            let Some(p) = pending.get(&op) else {
                return Ok(None);
            };
            let (dst, at) = p.get_data_place(from, chunk_off, len)?;
            if dst.write(at, read).is_err() {
                return Ok(None);
            }
            To::Get { op, chunk_off }
        }
        Frame::Put {
            op,
            key,
            base,
            total,
            chunk_off,
            imm,
            flag,
            ..
        } => {
            let Some(end) = chunk_off.checked_add(len as u64).filter(|&e| e <= total) else {
                return Ok(None);
            };
            let Ok(target) = frames::put_target(sh, key, base, total, flag.is_some()) else {
                return Ok(None);
            };
            let at = target.base + chunk_off as usize;
            frames::sink_pace(sh, len);
            if target.region.write(at, read).is_err() {
                return Ok(None);
            }
            let end = PutEnd {
                op,
                imm,
                flagged: flag.is_some(),
                last: end == total,
            };
            To::Put {
                target,
                at,
                end,
                flag,
            }
        }
        _ => return Ok(None),
    };
    Ok(Some(Landing {
        to,
        len,
        got: read.len(),
    }))
}

/// Reads more of `landing` from `socket` (`scratch` takes bytes nobody wants); whether it
/// has all of its bytes (then finished), and how many were read. An error if the connection
/// ended.
pub(super) fn go_on(
    sh: &Shared,
    from: Rank,
    landing: &mut Landing,
    socket: &impl AsRawFd,
    scratch: &mut [u8],
) -> Result<(bool, usize), String> {
    let fd = socket.as_raw_fd();
    let mut read = 0;
    while landing.got < landing.len {
        let (got, want) = (landing.got, landing.len - landing.got);
        let n = match &landing.to {
            To::Get { op, chunk_off } => {
                let pending = sh.pending.lock();
                let place = pending
                    .get(op)
                    .map(|p| p.get_data_place(from, chunk_off + got as u64, want))
                    .transpose()?;
                let read_into = |(dst, at): (&crate::Region, usize)| {
                    dst.with_range(at, want, |to| {
                        // SAFETY: `with_range` checked `at..at + want` inside the region and
                        // holds it alive while the closure runs.
                        unsafe { recv_raw(fd, to, want) }
                    })
                };
                match place.map(read_into) {
                    Some(Ok(n)) => n,
                    // The get ended (its peer failed) or its memory went: the rest is nobody's.
                    _ => {
                        drop(pending);
                        landing.to = To::Discard;
                        continue;
                    }
                }
            }
            To::Put { target, at, .. } => {
                let read = target.region.with_range(at + got, want, |to| {
                    // SAFETY: `with_range` checked the range inside the region and holds it
                    // alive while the closure runs.
                    unsafe { recv_raw(fd, to, want) }
                });
                match read {
                    Ok(n) => n,
                    Err(e) => {
                        // Deregistered meanwhile: the initiator hears why; the rest is dropped.
                        if let To::Put { end, .. } = std::mem::replace(&mut landing.to, To::Discard)
                        {
                            frames::put_done(sh, from, end, Err(e));
                        }
                        continue;
                    }
                }
            }
            To::Discard => {
                let n = want.min(scratch.len());
                // SAFETY: `scratch` is valid for writes of `n <= scratch.len()` bytes.
                unsafe { recv_raw(fd, scratch.as_mut_ptr(), n) }
            }
        };
        match n {
            Ok(0) => return Err("connection closed".into()),
            Ok(n) => {
                landing.got += n;
                read += n;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok((false, read)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok((true, read))
}

/// Ends a landing that has all of its bytes as the frame's handling would have.
pub(super) fn finish(sh: &Shared, from: Rank, landing: Landing) {
    match landing.to {
        To::Get { op, .. } => {
            let mut pending = sh.pending.lock();
            let done = pending
                .get_mut(&op)
                .is_some_and(|p| p.count_get_data(landing.len));
            drop(pending);
            if done {
                sh.complete(op, |_| Ok(()));
            }
        }
        To::Put {
            target, end, flag, ..
        } => {
            let result = match (flag, end.last) {
                (Some(v), true) => target.region.store_flag(target.base + target.total, v),
                _ => Ok(()),
            }
            .map(|()| target.region.len());
            frames::put_done(sh, from, end, result);
        }
        To::Discard => {}
    }
}

/// One `recv` of at most `len` bytes into `to`. The kernel writes them as raw bytes, so peers
/// writing the same memory make no Rust reference alias it.
///
/// # Safety
/// `to` must be valid for writes of `len` bytes for the duration of the call.
unsafe fn recv_raw(fd: i32, to: *mut u8, len: usize) -> std::io::Result<usize> {
    // SAFETY: `to` is valid for writes of `len` bytes (the caller's promise).
    let n = unsafe { libc::recv(fd, to.cast(), len, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

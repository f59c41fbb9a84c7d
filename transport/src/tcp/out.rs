//! What a rank has queued for one peer's socket: whole frames, or a frame's head with its
//! payload still in a region (a put's or a served get's bytes), written from there when the
//! socket takes them, so a large transfer is not first copied into a frame of its own.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;

use super::wire::{self, Frame};
use crate::error::Result;
use crate::region::{Held, Region};

/// Payloads of this many bytes or more are written from their region; shorter ones are copied
/// into their frame (less than holding the region costs).
const HELD_MIN: usize = 16 << 10;

/// The frame `head` (a put or get-data frame without data) carrying the `n` bytes of `src` at
/// `offset`: held in `src` until written when long, else copied now.
pub(crate) fn data_frame(
    head: &Frame<'_>,
    src: &Region,
    offset: usize,
    n: usize,
) -> Result<OutFrame> {
    if n < HELD_MIN {
        return src.with_range(offset, n, |p| {
            // SAFETY: `p` is valid for `n` bytes (range checked, region held alive).
            OutFrame::Bytes(unsafe { wire::encode_with_raw_data(head, p, n) })
        });
    }
    Ok(OutFrame::Held {
        head: wire::encode_head(head, n),
        payload: src.hold(offset, n)?,
    })
}

/// One frame waiting for the socket.
pub(crate) enum OutFrame {
    /// All of its bytes.
    Bytes(Vec<u8>),
    /// Its head (the header and fixed fields, the length counting the payload) and its
    /// payload, held in its region until written.
    Held { head: Vec<u8>, payload: Held },
}

impl OutFrame {
    fn len(&self) -> usize {
        match self {
            OutFrame::Bytes(v) => v.len(),
            OutFrame::Held { head, payload } => head.len() + payload.len(),
        }
    }
}

/// The frames queued for one peer, and how much of the first one is written.
#[derive(Default)]
pub(crate) struct OutQueue {
    frames: VecDeque<OutFrame>,
    offset: usize,
}

impl OutQueue {
    /// Bytes queued and not yet written to the socket.
    pub(crate) fn unsent_bytes(&self) -> usize {
        self.frames.iter().map(OutFrame::len).sum::<usize>() - self.offset
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Queues `frame`; whether it is the only one (with older frames queued, the socket is
    /// full and its writable edge drains the queue).
    pub(crate) fn push(&mut self, frame: OutFrame) -> bool {
        self.frames.push_back(frame);
        self.frames.len() == 1
    }

    /// Drops everything queued (the peer failed), releasing the held payloads.
    pub(crate) fn clear(&mut self) {
        self.frames.clear();
        self.offset = 0;
    }

    /// Writes queued frames to `socket` until it would block.
    pub(crate) fn flush(&mut self, socket: &impl AsRawFd) -> Result<(), String> {
        while let Some(front) = self.frames.front() {
            let written = write_part(socket.as_raw_fd(), front, self.offset);
            match written {
                Ok(0) => return Err("connection closed".into()),
                Ok(n) => {
                    self.offset += n;
                    if self.offset == front.len() {
                        self.frames.pop_front();
                        self.offset = 0;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }
}

/// Most parts a message is written from directly (more are copied into one frame first).
const DIRECT_PARTS: usize = 7;

/// Writes the frame made of `head` and `parts` to `socket` now, as far as the socket takes it
/// (nothing queued before it: the caller checked); the bytes it did not take, copied into a
/// frame to queue. A short message thus costs no allocation and no copy of its own.
pub(crate) fn write_now(
    socket: &impl AsRawFd,
    head: &[u8],
    parts: &[&[u8]],
) -> Result<Option<Vec<u8>>, String> {
    let total = head.len() + parts.iter().map(|p| p.len()).sum::<usize>();
    let written = if parts.len() > DIRECT_PARTS {
        0
    } else {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; DIRECT_PARTS + 1];
        for (v, p) in iov
            .iter_mut()
            .zip(std::iter::once(head).chain(parts.iter().copied()))
        {
            *v = libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            };
        }
        send_some(socket.as_raw_fd(), &iov[..parts.len() + 1], total)?
    };
    if written == total {
        return Ok(None);
    }
    let mut rest = Vec::with_capacity(total - written);
    let mut skip = written;
    for p in std::iter::once(head).chain(parts.iter().copied()) {
        let from = skip.min(p.len());
        rest.extend_from_slice(&p[from..]);
        skip -= from;
    }
    Ok(Some(rest))
}

/// [`write_now`] for a frame whose payload is `len` bytes of region memory at `payload` (peers
/// may write it meanwhile: it is sent and copied as raw bytes, never seen as a slice), written
/// only if `socket` is given (nothing is queued before the frame); what is not written, copied
/// into a frame to queue.
///
/// # Safety
/// `payload` must be valid for reads of `len` bytes for the duration of the call.
pub(crate) unsafe fn write_raw_now(
    socket: Option<&impl AsRawFd>,
    head: &[u8],
    payload: *const u8,
    len: usize,
) -> Result<Option<Vec<u8>>, String> {
    let total = head.len() + len;
    let mut written = 0;
    if let Some(socket) = socket {
        let iov = [
            libc::iovec {
                iov_base: head.as_ptr() as *mut libc::c_void,
                iov_len: head.len(),
            },
            libc::iovec {
                iov_base: payload as *mut libc::c_void,
                iov_len: len,
            },
        ];
        // The head is a live slice; the payload is valid for `len` bytes (the caller's promise).
        written = send_some(socket.as_raw_fd(), &iov, total)?;
    }
    if written == total {
        return Ok(None);
    }
    let mut rest = Vec::with_capacity(total - written);
    let from_head = written.min(head.len());
    rest.extend_from_slice(&head[from_head..]);
    let from = written - from_head;
    // SAFETY: `from <= len` (`written <= total`), and `payload` is valid for reads of `len`
    // bytes (the caller's promise); `rest` has room for the `len - from` bytes reserved above.
    unsafe {
        std::ptr::copy_nonoverlapping(
            payload.add(from),
            rest.as_mut_ptr().add(rest.len()),
            len - from,
        );
        rest.set_len(rest.len() + len - from);
    }
    Ok(Some(rest))
}

/// One `sendmsg` of the `total` bytes `iov` names (again if interrupted): how many the socket
/// took, 0 if it is full; a closed or broken connection is an error.
fn send_some(fd: i32, iov: &[libc::iovec], total: usize) -> Result<usize, String> {
    loop {
        match send_iov(fd, iov) {
            Ok(0) if total > 0 => return Err("connection closed".into()),
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// One `sendmsg` of what is left of `frame` from `offset`.
fn write_part(fd: i32, frame: &OutFrame, offset: usize) -> std::io::Result<usize> {
    let mut parts = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 2];
    let mut count = 0;
    let mut add = |base: *const u8, len: usize| {
        if len > 0 {
            parts[count] = libc::iovec {
                iov_base: base as *mut libc::c_void,
                iov_len: len,
            };
            count += 1;
        }
    };
    match frame {
        OutFrame::Bytes(v) => add(v[offset..].as_ptr(), v.len() - offset),
        OutFrame::Held { head, payload } => {
            if offset < head.len() {
                add(head[offset..].as_ptr(), head.len() - offset);
                add(payload.as_ptr(), payload.len());
            } else {
                let from = offset - head.len();
                // SAFETY: `from < payload.len()` (the frame is not all written), so the
                // pointer stays inside the held bytes.
                add(unsafe { payload.as_ptr().add(from) }, payload.len() - from);
            }
        }
    }
    // The frame's own vector, or its payload held in its region by `Held` (which the kernel
    // reads as raw bytes, so peers writing it meanwhile make no Rust reference alias it).
    send_iov(fd, &parts[..count])
}

/// One `sendmsg` of the bytes `iov` names (with `MSG_NOSIGNAL`: a closed connection is an
/// error, never a SIGPIPE that would end a C program). Every iovec must name bytes valid for
/// reads while the call runs: the callers build them from live slices or held payloads.
fn send_iov(fd: i32, iov: &[libc::iovec]) -> std::io::Result<usize> {
    // SAFETY: zeroed is a valid empty `msghdr` (null name and control, no iovecs).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: `msg` names `iov.len()` iovecs whose bytes are valid for reads during the call
    // (the callers' promise above); the kernel only reads them.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    /// What the socket did not take comes back, exactly the bytes after those it took.
    #[test]
    fn a_message_written_now_leaves_exactly_the_rest() {
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let head = [9u8, 8, 7];
        let parts: Vec<Vec<u8>> = (0..3u8)
            .map(|i| (0..(400_000 + i as usize)).map(|j| (j as u8) ^ i).collect())
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let whole: Vec<u8> = head.iter().copied().chain(parts.concat()).collect();
        let rest = write_now(&a, &head, &refs)
            .unwrap()
            .expect("more than a socket holds");
        assert!(!rest.is_empty() && rest.len() < whole.len());
        drop(a);
        let mut taken = Vec::new();
        b.read_to_end(&mut taken).unwrap();
        assert_eq!(taken.len() + rest.len(), whole.len());
        assert_eq!([taken, rest].concat(), whole);
        // A short message goes whole.
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(write_now(&a, &head, &[&[1, 2, 3][..]]).unwrap(), None);
        // Region bytes behind a head: the same, and all of it when there is no socket to try.
        let payload: Vec<u8> = (0..900_000u32).map(|j| (j % 251) as u8).collect();
        let whole: Vec<u8> = head
            .iter()
            .copied()
            .chain(payload.iter().copied())
            .collect();
        let (c, mut d) = UnixStream::pair().unwrap();
        c.set_nonblocking(true).unwrap();
        // SAFETY: `payload` is valid for its length during the calls.
        let rest = unsafe { write_raw_now(Some(&c), &head, payload.as_ptr(), payload.len()) };
        let rest = rest.unwrap().expect("more than a socket holds");
        drop(c);
        let mut taken = Vec::new();
        d.read_to_end(&mut taken).unwrap();
        assert_eq!([taken, rest].concat(), whole);
        // SAFETY: as above.
        let queued = unsafe { write_raw_now(None::<&UnixStream>, &head, payload.as_ptr(), 9) };
        assert_eq!(queued.unwrap().unwrap(), whole[..head.len() + 9]);
        // More parts than are written directly: nothing written, all of it to queue.
        let many = [&[5u8][..]; DIRECT_PARTS + 1];
        let rest = write_now(&a, &head, &many).unwrap().expect("queued whole");
        assert_eq!(rest, [&head[..], &[5u8; DIRECT_PARTS + 1][..]].concat());
    }
}

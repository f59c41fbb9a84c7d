//! A rank's writes to its peers' sockets: frames queued behind one another, a message written
//! at once when nothing waits before it, and the polling host thread's flush.

use std::sync::atomic::Ordering;

use super::out::{self, OutFrame, OutQueue};
use super::{wire, Shared};
use crate::error::{Result, TransportError};
use crate::region::Region;
use crate::types::Rank;

impl Shared {
    /// Writes, on the polling host thread, what is queued for `peer` and the socket now takes:
    /// a long transfer goes on as soon as the socket has room rather than once the I/O thread
    /// has woken up to its writable edge. Skipped while another thread writes to the peer.
    pub(super) fn write_now(&self, peer: Rank) {
        let p = &self.peers[peer as usize];
        if !p.queued.load(Ordering::Relaxed) {
            return;
        }
        let broken = match p.out.try_lock() {
            Some(mut out) => {
                let flushed = self.flush_locked(peer, &mut out);
                p.queued.store(!out.is_empty(), Ordering::Relaxed);
                flushed.err()
            }
            None => None,
        };
        if let Some(why) = broken {
            self.fail_peer(peer, &why);
        }
    }

    /// Queues a frame for `dest` and writes what the socket takes now.
    pub(crate) fn enqueue(&self, dest: Rank, frame: Vec<u8>) -> Result<()> {
        self.enqueue_frame(dest, OutFrame::Bytes(frame))
    }

    /// Sends the message made of `parts` to `dest`: written to the socket at once when nothing
    /// is queued before it (no frame of its own), else queued as a frame.
    pub(super) fn send_message(&self, dest: Rank, parts: &[&[u8]]) -> Result<()> {
        self.with_queue(dest, |out| {
            let stream = self.peers[dest as usize].stream.as_ref();
            let Some(stream) = stream.filter(|_| out.is_empty()) else {
                return self.queue(dest, out, OutFrame::Bytes(wire::message_frame(parts)));
            };
            let len = parts.iter().map(|p| p.len()).sum();
            match out::write_now(stream, &wire::message_head(len), parts)? {
                None => Ok(()),
                // Written in part: the socket is full, its writable edge drains the rest.
                Some(rest) if rest.len() < wire::HEADER + len => {
                    out.push(OutFrame::Bytes(rest));
                    Ok(())
                }
                // Not written (too many parts to write directly): as any frame.
                Some(rest) => self.queue(dest, out, OutFrame::Bytes(rest)),
            }
        })
    }

    /// Sends the frame of `head` and `len` bytes of `src` at `offset` to `dest` now: written
    /// to the socket when nothing is queued before it, else copied into a frame and queued;
    /// either way the caller may reuse `src` on return (a put done at once).
    pub(super) fn send_now(
        &self,
        dest: Rank,
        head: &[u8],
        src: &Region,
        offset: usize,
        len: usize,
    ) -> Result<()> {
        let mut unreadable = None;
        self.with_queue(dest, |out| {
            let stream = self.peers[dest as usize].stream.as_ref();
            let stream = stream.filter(|_| out.is_empty());
            // SAFETY: `with_range` checked the range and holds the region alive while the
            // closure runs, so `p` is valid for reads of `len` bytes during the call.
            let rest = src.with_range(offset, len, |p| unsafe {
                out::write_raw_now(stream, head, p, len)
            });
            match rest {
                Err(e) => {
                    unreadable = Some(e);
                    Ok(())
                }
                Ok(rest) => match rest? {
                    None => Ok(()),
                    // Written in part: the socket is full, its writable edge drains the rest.
                    Some(rest) if stream.is_some() && rest.len() < head.len() + len => {
                        out.push(OutFrame::Bytes(rest));
                        Ok(())
                    }
                    Some(frame) => self.queue(dest, out, OutFrame::Bytes(frame)),
                },
            }
        })?;
        unreadable.map_or(Ok(()), Err)
    }

    /// [`enqueue`](Shared::enqueue) for any [`OutFrame`].
    pub(crate) fn enqueue_frame(&self, dest: Rank, frame: OutFrame) -> Result<()> {
        self.with_queue(dest, |out| self.queue(dest, out, frame))
    }

    /// Queues `frame` behind `out`'s frames, writing it at once if it is the only one (with
    /// older frames queued, the socket is full and its writable edge drains the queue).
    fn queue(
        &self,
        dest: Rank,
        out: &mut OutQueue,
        frame: OutFrame,
    ) -> std::result::Result<(), String> {
        if out.push(frame) {
            self.flush_locked(dest, out)
        } else {
            Ok(())
        }
    }

    /// Runs `f` on `dest`'s queue under its lock, unless the peer failed: looked at again
    /// under the lock, as `fail_peer` clears the queue and a frame queued after that would keep
    /// its held payload (and a deregistration waiting on it) for ever. A failure of `f` clears
    /// the queue and fails the peer.
    fn with_queue(
        &self,
        dest: Rank,
        f: impl FnOnce(&mut OutQueue) -> std::result::Result<(), String>,
    ) -> Result<()> {
        let peer = &self.peers[dest as usize];
        let broken = {
            let mut out = peer.out.lock();
            if peer.failed.load(Ordering::Acquire) {
                return Err(TransportError::PeerFailed(dest));
            }
            let broken = f(&mut out).inspect_err(|_| out.clear()).err();
            if !out.is_empty() {
                peer.queued.store(true, Ordering::Relaxed);
            }
            broken
        };
        if let Some(why) = broken {
            self.fail_peer(dest, &why);
            return Err(TransportError::PeerFailed(dest));
        }
        Ok(())
    }

    /// Writes queued frames until the socket would block. Caller holds the queue's lock.
    pub(crate) fn flush_locked(
        &self,
        dest: Rank,
        out: &mut OutQueue,
    ) -> std::result::Result<(), String> {
        let Some(stream) = self.peers[dest as usize].stream.as_ref() else {
            return Err("no connection".into());
        };
        out.flush(stream)
    }
}

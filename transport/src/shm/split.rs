//! Split puts: a large put into memory a peer registered is copied by both processes at once.
//!
//! A pull put (`K_PUT_PULL`) leaves all of the copy to the target, while the initiator's core
//! waits. When every rank has a core of its own, a put of [`SPLIT_MIN`] bytes or more is split
//! instead: the initiator sends `K_PUT_SPLIT`, so the target pulls the first part with
//! `process_vm_readv`, and meanwhile writes the rest into the target's memory with
//! `process_vm_writev`, announced to the owner like any direct copy (`Inner::direct_copy`), so
//! the owner cannot withdraw and reuse that memory in the middle. Then it sends `K_PUSHED`. The
//! target completes the put (flag, immediate, `K_DONE`) once it has both parts; if the
//! initiator could not write its part, the target pulls that too. Rings are FIFO per pair, so
//! `K_PUSHED` always arrives after the `K_PUT_SPLIT` it belongs to.

use std::sync::atomic::Ordering;

use super::pull::{self, outcome, PullPut};
use super::records::*;
use super::service::done;
use super::table::Entry;
use super::{push, Inner, PutTail};
use crate::error::{Result, TransportError};
use crate::region::Region;
use crate::types::{Event, OpId, Rank, RemoteAddr};

/// Smallest put that is split. 32 KiB rather than 64: a 64 KiB rendezvous (its 63 KiB get)
/// went from 9.33 to 8.6 us and 64 KiB bandwidth from 8.8 to 9.8-10.9 GB/s (below this the
/// initiator writes the put alone, `push`).
pub(super) const SPLIT_MIN: usize = 32 << 10;
/// Most bytes the initiator writes of one put: its progress does nothing else meanwhile.
const PUSH_MAX: usize = 2 << 20;

/// What the target keeps of a split put between pulling its part and the initiator's
/// `K_PUSHED`: the put and how much of it it pulled, or why that failed (reported only once
/// the initiator's write has ended, so that no `K_DONE` lets the initiator retry while that
/// write may still land).
pub(super) enum PulledPart {
    Pulled { put: PullPut, pulled: usize },
    Failed { status: u64, region_len: u64 },
}

/// How many of `len` bytes the target pulls: the first half, page aligned, and all but
/// [`PUSH_MAX`] of a longer put.
fn pulled_part(len: usize) -> usize {
    let half = (len / 2) & !4095;
    half.max(len.saturating_sub(PUSH_MAX))
}

impl Inner {
    /// Whether a put of `len` bytes into a peer's registered memory is split.
    pub(super) fn splits_put(&self, len: usize) -> bool {
        self.split_puts && len >= SPLIT_MIN
    }

    /// `Fabric::direct_get_max`: below the split puts' threshold a get (one
    /// `process_vm_readv`) is as fast as a put; from it a put copies in both processes.
    pub(super) fn direct_get_max(&self) -> usize {
        if self.split_puts {
            SPLIT_MIN - 1
        } else {
            usize::MAX
        }
    }
}

/// The initiator's side: asks the target to pull the first part, writes the rest itself into
/// the memory entry `e` describes, and reports it. An error only if the request could not be
/// sent (the put is then abandoned by the caller).
pub(super) fn put_split(
    inner: &Inner,
    op: OpId,
    (src, src_offset): (&Region, usize),
    len: usize,
    dst: RemoteAddr,
    e: &Entry,
    tail: PutTail,
) -> Result<()> {
    let pulled = pulled_part(len);
    let words = pull::request_words(op, (src, src_offset), len, dst, tail);
    let request = [&header(words)[..], &header([pulled as u64])[..]];
    inner.send_record(dst.rank, K_PUT_SPLIT, &request)?;
    let pid = inner.pids[dst.rank as usize];
    let rest = len - pulled;
    // `entry_for` checked `dst.offset .. + len` against the entry; `direct_copy` holds it.
    let pushed = inner.direct_copy(dst.rank, dst.key, e, || {
        src.with_range(src_offset + pulled, rest, |s| {
            push::write_remote(inner, pid, e.addr + dst.offset + pulled, s, rest)
        })?
        .map_err(|errno| TransportError::Io {
            context: "process_vm_writev".into(),
            message: std::io::Error::from_raw_os_error(errno).to_string(),
        })
    });
    let status = if pushed.is_ok() { ST_OK } else { ST_BAD_KEY };
    // If this fails the peer has failed, and so has the put (`fail_peer`).
    let _ = inner.send_record(dst.rank, K_PUSHED, &[&header([op.0, status])]);
    Ok(())
}

/// The target's side of `K_PUT_SPLIT` from `src`: pulls the first part and waits for
/// `K_PUSHED`, which completes the put or reports why it failed.
pub(super) fn on_split(inner: &Inner, src: Rank, payload: &[u8]) -> Option<Event> {
    let (words, rest) = parse::<7>(payload)?;
    let ([pulled], _) = parse::<1>(rest)?;
    let (op, part) = match PullPut::parse(words) {
        Ok(put) if pulled <= put.len => {
            let pulled = pulled as usize;
            let part = match outcome(&put.pull_head(inner, src, pulled)) {
                (ST_OK, _) => PulledPart::Pulled { put, pulled },
                (status, region_len) => PulledPart::Failed { status, region_len },
            };
            (put.op, part)
        }
        Ok(PullPut { op, .. }) | Err(op) => {
            let bad = PulledPart::Failed {
                status: ST_BAD_KEY,
                region_len: 0,
            };
            (op, bad)
        }
    };
    let mut halves = inner.halves.lock();
    // `fail_peer` sets `failed` and then forgets the peer's halves under this lock: nothing
    // is added for a failed peer after that.
    if !inner.failed[src as usize].load(Ordering::Acquire) {
        halves.insert((src, op), part);
    }
    None
}

/// The target's side of `K_PUSHED` from `src`: completes the put whose first part it pulled,
/// pulling the rest too if the initiator could not write it.
pub(super) fn on_pushed(inner: &Inner, src: Rank, payload: &[u8]) -> Option<Event> {
    let ([op, status], _) = parse::<2>(payload)?;
    match inner.halves.lock().remove(&(src, op))? {
        PulledPart::Pulled { put, pulled } => {
            let from = if status == ST_OK {
                put.len as usize
            } else {
                pulled
            };
            put.finish(inner, src, from)
        }
        PulledPart::Failed { status, region_len } => {
            done(inner, src, op, status, region_len);
            None
        }
    }
}

/// Forgets the half-done split puts from a failed peer: their second part will not come.
pub(super) fn forget_peer(inner: &Inner, rank: Rank) {
    inner.halves.lock().retain(|&(src, _), _| src != rank);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_pulls_half_a_put_and_all_but_push_max_of_a_long_one() {
        assert_eq!(pulled_part(SPLIT_MIN), SPLIT_MIN / 2);
        assert_eq!(pulled_part(512 << 10), 256 << 10);
        // Page aligned, the rest to the initiator.
        assert_eq!(pulled_part((512 << 10) + 100), 256 << 10);
        assert_eq!(pulled_part(4 << 20), 2 << 20);
        assert_eq!(pulled_part(64 << 20), (64 << 20) - PUSH_MAX);
        for len in [SPLIT_MIN, 300_001, 1 << 20, 5 << 20, 100 << 20] {
            let p = pulled_part(len);
            assert!(
                p <= len && len - p <= PUSH_MAX && p.is_multiple_of(4096),
                "{len}"
            );
        }
    }
}

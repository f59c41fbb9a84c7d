//! shm puts and gets: direct copies into and out of a peer's heap, `process_vm_readv` for
//! memory a peer registered, and requests the target serves (pull puts, bounce transfers).

use std::sync::atomic::Ordering;

use super::records::*;
use super::table::{Entry, KIND_HEAP};
use super::{os, pull, push, service, split, Inner, Pending, PendingKind, PutTail};
use crate::error::{Result, TransportError};
use crate::region::Region;
use crate::types::{Event, OpId, PutStatus, RemoteAddr};

/// One-sided write of `len` bytes of `src` at `src_offset` to `dst`, followed by `tail` (see
/// `Fabric::put` and `Fabric::put_flag`): a direct copy into a peer's heap (then the
/// immediate's record, or the flag byte stored with release ordering and a wake-up), or, for
/// other memory, a request the target serves, which stores the flag once the data is in.
pub(super) fn put(
    inner: &Inner,
    src: &Region,
    src_offset: usize,
    len: usize,
    dst: RemoteAddr,
    tail: PutTail,
) -> Result<OpId> {
    match put_now(inner, src, src_offset, len, dst, tail, false)? {
        PutStatus::Pending(op) => Ok(op),
        PutStatus::Done => unreachable!("put_now always reports when asked to"),
    }
}

/// [`put`], or with `now` a put that, when it is a direct copy, returns `Done` (or its
/// failure) instead of raising a completion event (see `Fabric::put_now`).
pub(super) fn put_now(
    inner: &Inner,
    src: &Region,
    src_offset: usize,
    len: usize,
    dst: RemoteAddr,
    tail: PutTail,
    now: bool,
) -> Result<PutStatus> {
    src.check_range(src_offset, len)?;
    inner.check_peer(dst.rank)?;
    if dst.rank == inner.rank {
        let result = match tail {
            PutTail::Flag(v) => inner.table.put_flag_from(src, src_offset, len, dst, v),
            _ => inner.table.put_from(src, src_offset, len, dst),
        };
        match (&result, tail) {
            (Ok(()), PutTail::Imm(imm)) => inner.push_local(Event::Immediate {
                src: inner.rank,
                imm,
            }),
            // Another thread of ours may sleep waiting for exactly this byte.
            (Ok(()), PutTail::Flag(_)) => inner.ring_doorbell(inner.rank),
            _ => {}
        }
        return settled(inner, result, now);
    }
    let span = len.saturating_add(tail.extra());
    let e = match inner.entry_for(dst.rank, dst.key, dst.offset, span) {
        Ok(e) => e,
        Err(err) => return settled(inner, Err(err), now),
    };
    if e.kind == KIND_HEAP {
        let result = src
            .with_range(src_offset, len, |s| {
                // SAFETY: `s` is inside our live source region for `len` bytes.
                unsafe { store_into_heap(inner, &e, dst, [(s, len), (s, 0)], tail) }
            })
            .and_then(|stored| stored);
        let result = match (result, tail) {
            (Ok(()), PutTail::Imm(imm)) => {
                inner.send_record(dst.rank, K_IMM, &[&imm.to_le_bytes()])
            }
            (Ok(()), PutTail::Flag(_)) => {
                // The peer may be asleep waiting for exactly this byte.
                inner.ring_doorbell(dst.rank);
                Ok(())
            }
            (result, _) => result,
        };
        return settled(inner, result, now);
    }
    let cma = inner.cma_ok[dst.rank as usize].load(Ordering::Acquire);
    if cma && push::pushes(inner, dst.rank, len, tail) {
        if let Some(result) = push::put_pushed(inner, (src, src_offset), len, dst, &e, tail) {
            return settled(inner, result, now);
        }
    }
    // An operation the target serves: it has an id even when asked for `now`.
    let op = inner.new_op();
    let kind = PendingKind::Put {
        src: src.clone(),
        src_off: src_offset,
        tail,
    };
    inner.add_pending(
        op,
        Pending {
            peer: dst.rank,
            key: dst.key,
            offset: dst.offset,
            len,
            kind,
        },
    )?;
    let sent = if cma && inner.splits_put(len) {
        split::put_split(inner, op, (src, src_offset), len, dst, &e, tail)
    } else if cma {
        let words = pull::request_words(op, (src, src_offset), len, dst, tail);
        inner.send_record(dst.rank, K_PUT_PULL, &[&header(words)])
    } else {
        service::send_put_chunks(inner, op.0, dst, src, src_offset, len, tail)
    };
    match sent {
        Ok(()) => Ok(PutStatus::Pending(op)),
        Err(e) => inner.abandon(op, e).map(PutStatus::Pending),
    }
}

/// The outcome of a put that finished in the call (a direct copy, or refused before anything
/// was sent): returned as is when asked for `now`, else raised as its completion event.
fn settled(inner: &Inner, result: Result<()>, now: bool) -> Result<PutStatus> {
    if now {
        return result.map(|()| PutStatus::Done);
    }
    let op = inner.new_op();
    inner.push_local(Event::Completed { op, result });
    Ok(PutStatus::Pending(op))
}

/// Stores the two `parts` (pointer and length each; the second may be empty) one after the
/// other, then the flag of `tail` if it has one (release: after the data), straight into the
/// peer heap block that entry `e` describes, announced to its owner (see
/// `Inner::direct_copy`).
///
/// # Safety
/// Each part's pointer must be valid for reads of its length, none of them in the
/// destination range.
unsafe fn store_into_heap(
    inner: &Inner,
    e: &Entry,
    dst: RemoteAddr,
    parts: [(*const u8, usize); 2],
    tail: PutTail,
) -> Result<()> {
    let [(s0, n0), (s1, n1)] = parts;
    let len = n0 + n1;
    let span = len.saturating_add(tail.extra());
    inner.direct_copy(dst.rank, dst.key, e, || {
        let d = inner.heap_ptr(dst.rank, e.addr + dst.offset, span)?;
        // SAFETY: `d` is inside the peer's heap block for `span` bytes (validated entry and
        // range, held by `direct_copy`), the parts valid for their lengths (the caller's
        // promise), which add up to `len`; `AtomicU8` has the layout of `u8`.
        unsafe {
            std::ptr::copy_nonoverlapping(s0, d, n0);
            if n1 > 0 {
                std::ptr::copy_nonoverlapping(s1, d.add(n0), n1);
            }
            if let PutTail::Flag(v) = tail {
                // Release: the data is visible before the flag. The caller's `ring_doorbell`
                // orders it before the look at the peer's sleepers.
                (*(d.add(len) as *const std::sync::atomic::AtomicU8)).store(v, Ordering::Release);
            }
        }
        Ok(())
    })
}

/// Writes caller bytes, the concatenation of `parts`, to `dst` as a direct store into a
/// peer's heap, the flag after them, done on return (see `Fabric::store_now`); `Ok(false)`
/// when `dst` is not in a peer's heap.
pub(super) fn store_now(
    inner: &Inner,
    parts: &[&[u8]],
    dst: RemoteAddr,
    flag: Option<u8>,
) -> Result<bool> {
    inner.check_peer(dst.rank)?;
    if dst.rank == inner.rank {
        return Ok(false);
    }
    let joined: Vec<u8>;
    let (first, second): (&[u8], &[u8]) = match parts {
        [] => (&[], &[]),
        [a] => (a, &[]),
        [a, b] => (a, b),
        more => {
            joined = more.concat();
            (&joined, &[])
        }
    };
    let tail = flag.map_or(PutTail::None, PutTail::Flag);
    let len = first.len() + second.len();
    let e = inner.entry_for(
        dst.rank,
        dst.key,
        dst.offset,
        len.saturating_add(tail.extra()),
    )?;
    if e.kind != KIND_HEAP {
        return Ok(false);
    }
    let raw = [
        (first.as_ptr(), first.len()),
        (second.as_ptr(), second.len()),
    ];
    // SAFETY: the parts are live shared slices; the destination is in a peer's heap, which
    // safe code cannot borrow, so they do not overlap it.
    unsafe { store_into_heap(inner, &e, dst, raw, tail) }?;
    if flag.is_some() {
        // The peer may be asleep waiting for exactly this byte.
        inner.ring_doorbell(dst.rank);
    }
    Ok(true)
}

/// Reads `dst.len()` bytes at `src`, a peer's memory, into `dst` at once (see
/// `Fabric::load_now`); `Ok(false)` for this rank's own memory or where only the peer could
/// serve the read.
pub(super) fn load_now(inner: &Inner, dst: &mut [u8], src: RemoteAddr) -> Result<bool> {
    inner.check_peer(src.rank)?;
    if src.rank == inner.rank {
        return Ok(false);
    }
    let len = dst.len();
    let e = inner.entry_for(src.rank, src.key, src.offset, len)?;
    // SAFETY: `dst` is an exclusive caller buffer of `len` bytes, so not the peer's memory.
    match unsafe { read_now(inner, &e, src, dst.as_mut_ptr(), len) } {
        Some(result) => result.map(|()| true),
        None => Ok(false),
    }
}

/// Copies `len` bytes at `src` (described by entry `e`) to `d` at once where this process can
/// reach them: a load from a peer's heap block, or `process_vm_readv` of other memory. `None`
/// where the kernel refuses cross-memory attach (nothing copied: the peer must serve it).
///
/// # Safety
/// `d` must be valid for writes of `len` bytes and not inside the source range.
unsafe fn read_now(
    inner: &Inner,
    e: &Entry,
    src: RemoteAddr,
    d: *mut u8,
    len: usize,
) -> Option<Result<()>> {
    let stale = || TransportError::BadKey {
        rank: src.rank,
        key: src.key.0,
    };
    if e.kind == KIND_HEAP {
        return Some(inner.direct_copy(src.rank, src.key, e, || {
            let s = inner.heap_ptr(src.rank, e.addr + src.offset, len)?;
            // SAFETY: `s` is inside the peer's heap block (validated entry and range, held by
            // `direct_copy`), `d` valid for `len` bytes outside it (the caller's promise).
            unsafe { std::ptr::copy_nonoverlapping(s, d, len) };
            Ok(())
        }));
    }
    if !inner.cma_ok[src.rank as usize].load(Ordering::Acquire) {
        return None;
    }
    let pid = inner.pids[src.rank as usize];
    match os::read_remote(pid, e.addr + src.offset, d, len) {
        // A region deregistered during the copy may have yielded garbage: refuse it.
        Ok(()) if inner.still_valid(src.rank, src.key, e) => Some(Ok(())),
        Ok(()) => Some(Err(stale())),
        Err(errno) if errno == libc::EPERM || errno == libc::ENOSYS => {
            inner.cma_ok[src.rank as usize].store(false, Ordering::Release);
            None
        }
        Err(errno) => {
            let gone =
                errno == libc::ESRCH || inner.failed[src.rank as usize].load(Ordering::Acquire);
            Some(if gone || !os::process_alive(pid) {
                inner.fail_peer(src.rank);
                Err(TransportError::PeerFailed(src.rank))
            } else {
                Err(stale())
            })
        }
    }
}

/// One-sided read of `len` bytes at `src` into `dst` at `dst_offset` (see `Fabric::get`).
pub(super) fn get(
    inner: &Inner,
    dst: &Region,
    dst_offset: usize,
    len: usize,
    src: RemoteAddr,
) -> Result<OpId> {
    dst.check_range(dst_offset, len)?;
    inner.check_peer(src.rank)?;
    let op = inner.new_op();
    if src.rank == inner.rank {
        let result = inner.table.get_into(dst, dst_offset, len, src);
        inner.push_local(Event::Completed { op, result });
        return Ok(op);
    }
    let e = match inner.entry_for(src.rank, src.key, src.offset, len) {
        Ok(e) => e,
        Err(err) => {
            inner.push_local(Event::Completed {
                op,
                result: Err(err),
            });
            return Ok(op);
        }
    };
    let read = dst.with_range(dst_offset, len, |d| {
        // SAFETY: `d` is inside our live destination region for `len` bytes, which safe code
        // cannot have handed to a peer as the source.
        unsafe { read_now(inner, &e, src, d, len) }
    })?;
    if let Some(result) = read {
        inner.push_local(Event::Completed { op, result });
        return Ok(op);
    }
    let kind = PendingKind::Get {
        dst: dst.clone(),
        dst_off: dst_offset,
        received: 0,
    };
    inner.add_pending(
        op,
        Pending {
            peer: src.rank,
            key: src.key,
            offset: src.offset,
            len,
            kind,
        },
    )?;
    let request = header([op.0, src.key.0, src.offset as u64, len as u64]);
    match inner.send_record(src.rank, K_GET_REQ, &[&request]) {
        Ok(()) => Ok(op),
        Err(e) => inner.abandon(op, e),
    }
}

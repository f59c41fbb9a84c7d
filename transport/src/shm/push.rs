//! Puts into memory a peer registered, below the split size: the initiator writes all of it
//! with `process_vm_writev` itself and completes at once, where the target would otherwise
//! pull it (a request to the target, its `process_vm_readv`, a `K_DONE` back: a round trip
//! per put). A rendezvous on shm serves each get as such a put, so a 16 KiB message went
//! through two of those round trips.
//!
//! The write is announced in the writer's copy slot (`Inner::direct_copy`), so the owner
//! cannot withdraw the memory in the middle, and a region withdrawn before it is `BadKey` as
//! the target would report. An immediate follows in the ring after the data is in. Flags stay
//! with the target (it stores them with release order after the data and wakes its sleepers),
//! and a failed write leaves the whole put to the target's pull, which rewrites every byte and
//! reports what is wrong; a dead peer fails the put at once, and a peer the kernel refuses
//! cross-memory writes to is not written again. A thread without a copy slot leaves its puts
//! to the target too (`Inner::direct_copy`).
//!
//! Puts into the same range are not ordered with each other (as `Fabric` documents): a pushed
//! put can land before an earlier pulled or split one that the target serves later.

use std::sync::atomic::Ordering;

use super::records::*;
use super::table::Entry;
use super::{os, split, Inner, PutTail};
use crate::error::{Result, TransportError};
use crate::region::Region;
use crate::types::{Rank, RemoteAddr};

/// Whether a put of `len` bytes with `tail` into `peer`'s registered memory is written by the
/// initiator alone (CMA allowed, checked by the caller).
pub(super) fn pushes(inner: &Inner, peer: Rank, len: usize, tail: PutTail) -> bool {
    !inner.splits_put(len)
        && len < split::SPLIT_MIN
        && !matches!(tail, PutTail::Flag(_))
        && !inner.push_refused[peer as usize].load(Ordering::Acquire)
}

/// Writes the put described by `e` (checked for `dst` by `entry_for`): `Some` with its
/// result once written (or refused because the region was withdrawn), `None` when the write
/// failed and the target should pull the put instead.
pub(super) fn put_pushed(
    inner: &Inner,
    (src, src_offset): (&Region, usize),
    len: usize,
    dst: RemoteAddr,
    e: &Entry,
    tail: PutTail,
) -> Option<Result<()>> {
    let pid = inner.pids[dst.rank as usize];
    let mut errno = None;
    let copied = inner.direct_copy(dst.rank, dst.key, e, || {
        let written = src.with_range(src_offset, len, |s| {
            write_remote(inner, pid, e.addr + dst.offset, s, len)
        })?;
        errno = written.err();
        Ok(())
    });
    match (errno, copied) {
        (None, Ok(())) => {}
        // The region was withdrawn: the put fails as the target would report it.
        (None, Err(e @ TransportError::BadKey { .. })) => return Some(Err(e)),
        // No copy slot for this thread: the target pulls the put.
        (None, Err(_)) => return None,
        (Some(errno), _) => return written_off(inner, dst.rank, pid, errno),
    }
    Some(match tail {
        PutTail::Imm(imm) => inner.send_record(dst.rank, K_IMM, &[&imm.to_le_bytes()]),
        _ => Ok(()),
    })
}

/// `os::write_remote` of `len` bytes at `local` to `remote` in process `pid`; with
/// `RDCOLL_SHM_FAIL_PUSHES` (testing) it writes half and then fails, as a refused call might.
/// Both the whole pushes here and the initiator's part of a split put write through it.
pub(super) fn write_remote(
    inner: &Inner,
    pid: i32,
    remote: usize,
    local: *const u8,
    len: usize,
) -> std::result::Result<(), i32> {
    if inner.fail_pushes {
        os::write_remote(pid, remote, local, len / 2)?;
        return Err(libc::EPERM);
    }
    os::write_remote(pid, remote, local, len)
}

/// After `process_vm_writev` failed with `errno`: a peer that is gone fails the put now; a
/// kernel that refuses cross-memory writes to it is not asked again (its puts are pulled);
/// anything else leaves this put to the target's pull, which reports what is wrong.
fn written_off(inner: &Inner, peer: Rank, pid: i32, errno: i32) -> Option<Result<()>> {
    if errno == libc::EPERM || errno == libc::ENOSYS {
        if !inner.fail_pushes {
            inner.push_refused[peer as usize].store(true, Ordering::Release);
        }
        return None;
    }
    if errno == libc::ESRCH || !os::process_alive(pid) {
        inner.fail_peer(peer);
        return Some(Err(TransportError::PeerFailed(peer)));
    }
    None
}

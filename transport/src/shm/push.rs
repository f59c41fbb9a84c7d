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
//! and any failure of the write itself leaves the whole put to the target's pull, which
//! reports what is wrong (a dead peer fails the put there too).

use super::records::*;
use super::table::Entry;
use super::{os, split, Inner, PutTail};
use crate::error::Result;
use crate::region::Region;
use crate::types::RemoteAddr;

/// Whether a put of `len` bytes with `tail` into a peer's registered memory is written by the
/// initiator alone (CMA allowed, checked by the caller).
pub(super) fn pushes(inner: &Inner, len: usize, tail: PutTail) -> bool {
    !inner.splits_put(len) && len < split::SPLIT_MIN && !matches!(tail, PutTail::Flag(_))
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
    let mut write_failed = false;
    let copied = inner.direct_copy(dst.rank, dst.key, e, || {
        let written = src.with_range(src_offset, len, |s| {
            os::write_remote(pid, e.addr + dst.offset, s, len)
        })?;
        write_failed = written.is_err() || inner.fail_pushes;
        Ok(())
    });
    if write_failed {
        return None;
    }
    Some(copied.and_then(|()| match tail {
        PutTail::Imm(imm) => inner.send_record(dst.rank, K_IMM, &[&imm.to_le_bytes()]),
        _ => Ok(()),
    }))
}

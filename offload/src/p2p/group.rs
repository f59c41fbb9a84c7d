//! Groups of nonblocking requests, for callers that must wait for whatever a group still has
//! in flight (`rdcoll::Scope` waits for the requests its closure left behind). The engine
//! records each grouped request under the lock it holds anyway to start it, and forgets it
//! when its result is collected, so a group costs its requests no lock or atomic
//! instruction of their own: a lock per request in the caller's own set was one more
//! locked instruction on the message path, and each waits for the previous message's store
//! to reach the peer.
//!
//! Eager sends start complete ([`Started::Done`]): their data is copied out by the time the
//! call returns, so there is nothing to record, wait for or remove.

use std::sync::atomic::{AtomicU64, Ordering};

use rdcoll_transport::Rank;

use super::{Context, Engine, Fetch, ReqId, Source, Status, TagSel};
use crate::error::Result;

/// A set of requests that [`Engine::wait_group`] can wait for together. Each
/// [`Group::new`] is distinct from every other in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Group(u64);

impl Group {
    /// A group no other `Group::new` in this process returns.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Group {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Group(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// How a nonblocking send started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// Complete already (a message of at most the eager limit was copied out): its status.
    Done(Status),
    /// In flight (a rendezvous, until the receiver has fetched it).
    Pending(ReqId),
}

impl Engine {
    /// Starts sending `len` bytes at `ptr` to `dest` with `tag` in `context`, recording the
    /// request in `group` if it is still in flight when this returns.
    ///
    /// # Safety
    /// As for [`Engine::isend`].
    pub unsafe fn isend_in(
        &self,
        group: Group,
        ptr: *const u8,
        len: usize,
        dest: Rank,
        tag: u32,
        context: Context,
    ) -> Result<Started> {
        // SAFETY: passed on from the caller.
        let started = unsafe { self.isend_started(ptr, len, dest, tag, context)? };
        if let Started::Pending(id) = started {
            self.inner.lock().reqs.set_group(id.0, group.0);
        }
        Ok(started)
    }

    /// Starts sending `len` bytes at `ptr` to `dest` with `tag` in `context`: complete at once
    /// if it fits the eager limit and `dest` has eager credit for it (no request to track),
    /// else a request in flight; also a request for a message of 16 KiB or more
    /// (`send::BACKLOG_RENDEZVOUS_MIN`) while the channel to `dest` is backed up
    /// (`Fabric::backlogged`, where `Fabric::rendezvous_past_backlog`: shm).
    ///
    /// # Safety
    /// As for [`Engine::isend`].
    pub unsafe fn isend_started(
        &self,
        ptr: *const u8,
        len: usize,
        dest: Rank,
        tag: u32,
        context: Context,
    ) -> Result<Started> {
        if dest == super::PROC_NULL {
            return Ok(Started::Done(self.sent_status(tag, 0)));
        }
        if self.diverts_from_backlog(len, dest) {
            // Earlier messages wait in this rank's own queue for room in the channel: an
            // eager copy would queue behind them (a second copy later), so the receive pulls
            // this one from the caller's buffer instead.
            let announce = Some(self.announce_rendezvous());
            // SAFETY: passed on from the caller.
            match unsafe { self.isend_as(ptr, len, dest, tag, context, announce) } {
                Ok(id) => return Ok(Started::Pending(id)),
                // Out of rendezvous nonces or registrations: eagerly, as it would have gone.
                Err(e) if super::send::is_exhaustion(&e) => {}
                Err(e) => return Err(e),
            }
        }
        if len <= self.cfg.eager_limit {
            // SAFETY: the caller keeps the buffer valid for the call, which copies it out.
            let data = unsafe { super::send::slice_or_empty(ptr, len) };
            if self.send_credited(data, dest, tag, context)? {
                return Ok(Started::Done(self.sent_status(tag, len)));
            }
            // No eager credit: a request, the data pulled from the buffer when received.
        }
        // SAFETY: passed on from the caller.
        Ok(Started::Pending(unsafe {
            self.isend(ptr, len, dest, tag, context)?
        }))
    }

    /// Posts a receive (see [`Engine::irecv`]) recorded in `group` until its result is
    /// collected; a rendezvous's rest is fetched as `fetch` says.
    ///
    /// # Safety
    /// As for [`Engine::irecv`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn irecv_in(
        &self,
        group: Group,
        ptr: *mut u8,
        len: usize,
        source: Source,
        tag: TagSel,
        context: Context,
        fetch: Fetch,
    ) -> Result<ReqId> {
        let mut inner = self.inner.lock();
        // SAFETY: passed on from the caller.
        let id = unsafe { self.irecv_locked(&mut inner, (ptr, len), source, tag, context, fetch)? };
        inner.reqs.set_group(id.0, group.0);
        Ok(id)
    }

    /// Whether request `id` is still the engine's (in flight, or its result not collected):
    /// after an error from `test`, which a failed progress pass can return while the request
    /// is still in flight (`wait` never does).
    pub fn is_pending(&self, id: ReqId) -> bool {
        self.inner.lock().reqs.contains(id.0)
    }

    /// Waits for every request of `group` whose result was not collected yet, oldest first;
    /// their ids and results.
    pub fn wait_group(&self, group: Group) -> Vec<(ReqId, Result<Status>)> {
        let left = self.inner.lock().reqs.of_group(group.0);
        left.into_iter()
            .map(|id| (ReqId(id), self.wait(ReqId(id))))
            .collect()
    }
}

//! Nonblocking requests whose buffers the caller keeps valid by contract instead of by
//! borrow: for the C API (`rdcoll-ffi`) and other callers that manage memory themselves. Rust
//! code should prefer [`Comm::scope`], which the compiler checks.

use std::sync::Arc;

use rdcoll_offload::p2p::{Backoff, Engine, Members, ReqId, Source, Started, TagSel};

use crate::{Comm, Rank, Result, Status};

/// A nonblocking send or receive started with [`Comm::isend_raw`] or [`Comm::irecv_raw`].
/// Dropping it unfinished waits for it (a buffer must never be written after its request is
/// gone).
pub struct RawRequest {
    state: RawState,
    engine: Arc<Engine>,
    /// The communicator's ranks, for the status (`None`: the job's own numbering).
    members: Option<Arc<Members>>,
}

/// Where a [`RawRequest`] is.
enum RawState {
    /// In flight as the engine's request.
    InFlight(ReqId),
    /// Complete when it started (a short send), or found complete by
    /// [`is_done`](RawRequest::is_done): result not delivered yet.
    Complete(Status),
    /// Found ended by an error by [`is_done`](RawRequest::is_done), not delivered yet.
    Failed(crate::Error),
    /// Its result was delivered.
    Delivered,
    /// A nonblocking collective on the communicator's collective thread.
    Collective(Arc<crate::nonblocking::Pending>),
}

impl Comm {
    /// Starts sending `len` bytes at `ptr` to `dest` with `tag`.
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay valid and unmodified until the request has completed
    /// (`wait` or `test` returned its result, or it was dropped).
    pub unsafe fn isend_raw(
        &self,
        ptr: *const u8,
        len: usize,
        dest: Rank,
        tag: u32,
    ) -> Result<RawRequest> {
        let engine = self.engine()?.clone();
        let dest = self.to_fabric(dest)?;
        // SAFETY: passed on from the caller.
        let state = match unsafe { engine.isend_started(ptr, len, dest, tag, self.context())? } {
            Started::Done(status) => RawState::Complete(self.status_from_fabric(status)),
            Started::Pending(id) => RawState::InFlight(id),
        };
        Ok(RawRequest {
            state,
            engine,
            members: self.members.clone(),
        })
    }

    /// Posts a receive of at most `len` bytes into `ptr` from `source` with `tag`.
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay valid, and must not be read or written by anything else,
    /// until the request has completed (`wait` or `test` returned its result, or it was
    /// dropped).
    pub unsafe fn irecv_raw(
        &self,
        ptr: *mut u8,
        len: usize,
        source: impl Into<Source>,
        tag: impl Into<TagSel>,
    ) -> Result<RawRequest> {
        let engine = self.engine()?.clone();
        let source = self.source_to_fabric(source.into())?;
        // SAFETY: passed on from the caller.
        let id = unsafe { engine.irecv(ptr, len, source, tag.into(), self.context())? };
        Ok(RawRequest {
            state: RawState::InFlight(id),
            engine,
            members: self.members.clone(),
        })
    }
}

impl RawRequest {
    /// Waits for the request and returns its status. It returns only once the transfer can no
    /// longer touch the buffer: an error of the engine's own progress while the request is
    /// still in flight is logged and the wait goes on.
    pub fn wait(mut self) -> Result<Status> {
        match std::mem::replace(&mut self.state, RawState::Delivered) {
            RawState::InFlight(id) => match self.engine.wait(id) {
                Ok(st) => Ok(self.translated(st)),
                Err(e) => Err(self.translated_error(e)),
            },
            RawState::Complete(status) => Ok(status),
            RawState::Failed(e) => Err(e),
            RawState::Delivered => Err(already_completed()),
            RawState::Collective(p) => p.wait().map(|()| Status::from_proc_null()),
        }
    }

    /// The status if the request has completed (it is then finished: later calls are
    /// errors).
    pub fn test(&mut self) -> Result<Option<Status>> {
        let id = match std::mem::replace(&mut self.state, RawState::Delivered) {
            RawState::InFlight(id) => id,
            RawState::Complete(status) => return Ok(Some(status)),
            RawState::Failed(e) => return Err(e),
            RawState::Delivered => return Err(already_completed()),
            RawState::Collective(p) if p.is_done() => {
                return p.wait().map(|()| Some(Status::from_proc_null()))
            }
            RawState::Collective(p) => {
                self.state = RawState::Collective(p);
                return Ok(None);
            }
        };
        match self.engine.test(id) {
            Ok(None) => {
                self.state = RawState::InFlight(id);
                Ok(None)
            }
            Ok(Some(status)) => Ok(Some(self.translated(status))),
            Err(e) => Err(self.failed(id, e)),
        }
    }

    fn translated(&self, st: Status) -> Status {
        crate::communicator::status_in(self.members.as_deref(), st)
    }

    fn translated_error(&self, e: rdcoll_offload::OffloadError) -> crate::Error {
        crate::communicator::error_in(self.members.as_deref(), e)
    }

    /// After an error from `test`: a request still in flight (a progress pass failed, not the
    /// request) stays so ([`is_finished`](RawRequest::is_finished) says no, and dropping it
    /// waits for it); its buffer is never left to the caller while the transfer may still
    /// write it.
    fn failed(&mut self, id: ReqId, e: rdcoll_offload::OffloadError) -> crate::Error {
        if self.engine.is_pending(id) {
            self.state = RawState::InFlight(id);
        }
        self.translated_error(e)
    }

    /// Cancels a receive that has not matched yet; returns whether it was cancelled (its
    /// status then says so).
    pub fn cancel(&mut self) -> Result<bool> {
        match self.state {
            RawState::InFlight(id) => Ok(self.engine.cancel(id)?),
            RawState::Complete(_)
            | RawState::Failed(_)
            | RawState::Delivered
            | RawState::Collective(_) => Ok(false),
        }
    }

    /// Whether the request has already delivered its result.
    pub fn is_finished(&self) -> bool {
        matches!(self.state, RawState::Delivered)
    }

    /// Whether the request has completed, without delivering its result: a finished one keeps
    /// it for the next [`test`](RawRequest::test) or [`wait`](RawRequest::wait), which
    /// return it at once (MPI's `testall`, which completes requests only once all have). An
    /// error of a progress pass that leaves the request in flight is returned, the request
    /// still in flight.
    pub fn is_done(&mut self) -> Result<bool> {
        if self.is_finished() {
            return Ok(true);
        }
        match self.test() {
            Ok(None) => Ok(false),
            Ok(Some(status)) => {
                self.state = RawState::Complete(status);
                Ok(true)
            }
            // A progress pass failed: the request is still in flight.
            Err(e) if !self.is_finished() => Err(e),
            Err(e) => {
                self.state = RawState::Failed(e);
                Ok(true)
            }
        }
    }

    /// What a wait on several requests (MPI's `waitany`) does between two looks at them,
    /// holding none of them: see [`RawIdler`].
    pub fn idler(&self) -> RawIdler {
        RawIdler {
            engine: self.engine.clone(),
            backoff: Backoff::default(),
        }
    }
}

/// The backing off of a wait on several raw requests, as one request's wait backs off: it
/// spins briefly, then yields, then sleeps until its engine sees activity (at most a
/// millisecond at a time), so that a rank waiting on many requests leaves its core to the
/// others (more ranks than cores must stay usable).
pub struct RawIdler {
    engine: Arc<Engine>,
    backoff: Backoff,
}

impl RawIdler {
    /// One step of backing off; call it after each look that found nothing finished.
    pub fn idle(&mut self) {
        self.engine.idle(&mut self.backoff);
    }
}

fn already_completed() -> crate::Error {
    crate::Error::InvalidArgument("the request has already completed".into())
}

impl Drop for RawRequest {
    fn drop(&mut self) {
        let result = match &self.state {
            RawState::InFlight(id) => self.engine.wait(*id).map(drop).map_err(Into::into),
            RawState::Collective(p) => p.wait(),
            _ => Ok(()),
        };
        if let Err(e) = result {
            tracing::warn!("a request dropped unfinished failed: {e}");
        }
    }
}

impl RawRequest {
    /// A request for a nonblocking collective already handed to the collective thread.
    pub(crate) fn collective(
        engine: Arc<Engine>,
        pending: Arc<crate::nonblocking::Pending>,
    ) -> RawRequest {
        RawRequest {
            state: RawState::Collective(pending),
            engine,
            members: None,
        }
    }
}

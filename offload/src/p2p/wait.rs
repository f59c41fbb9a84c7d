//! Waiting for a request: progress passes with back-off, or, for a receive that is the only
//! one posted, the fast receive (`fast`).

use super::{invalid, Backoff, Engine, ReqId, Status};
use crate::error::{OffloadError, Result};

impl Engine {
    /// Waits for request `id` and returns its result: spins on progress briefly, then yields,
    /// then sleeps on the fabric, so that more ranks than cores stay usable. It returns only
    /// once the request is no longer the engine's (its result, or an error that ended it), so
    /// a buffer lent to it is free again whatever it returns. A receive whose one possible
    /// sender waits behind its own unreceived messages is withdrawn with
    /// [`OffloadError::SenderBlocked`].
    ///
    /// A receive that is the only one posted and has not matched waits as a blocking
    /// receive with nothing posted does (`fast`): a lone `irecv` then `wait` costs what a
    /// `recv` does. A short send that found no eager credit tells its receiver, the first
    /// time it is waited for, that its sender now waits (`notice_sender_waits`).
    pub fn wait(&self, id: ReqId) -> Result<Status> {
        {
            let mut inner = self.inner.lock();
            // Often done already (a window of requests waited for one by one): no progress
            // pass for it, which would poll the fabric and drain events once per request.
            if let Some(s) = self.test_locked(&mut inner, id)? {
                return Ok(s);
            }
            self.notice_sender_waits(&mut inner, id);
            if let Some(done) = self.wait_alone(inner, id) {
                return done;
            }
        }
        self.wait_looking(id, &|| false)?
            .ok_or_else(|| invalid(format!("the wait for {id:?} ended without it")))
    }

    /// [`wait`](Engine::wait) by progress passes only, never by the fast path: for a receive
    /// that the fast path gave back (which would give it back again).
    pub(super) fn wait_posted(&self, id: ReqId) -> Result<Status> {
        self.wait_unless(id, &|| false)?
            .ok_or_else(|| invalid(format!("the wait for {id:?} ended without it")))
    }

    /// [`wait`](Engine::wait), unless `instead()` turns true first (it is asked at every look,
    /// so it must be cheap): then `None`, the request still in flight. A wake-up of the
    /// fabric (a peer's flagged write, for one) makes it look again.
    pub fn wait_unless(&self, id: ReqId, instead: &dyn Fn() -> bool) -> Result<Option<Status>> {
        // Often done already (a window of requests waited for one by one): no progress
        // pass for it, which would poll the fabric and drain events once per request.
        if let Some(s) = self.test_locked(&mut self.inner.lock(), id)? {
            return Ok(Some(s));
        }
        self.wait_looking(id, instead)
    }

    /// [`wait_unless`](Engine::wait_unless) once a first look found `id` in flight.
    fn wait_looking(&self, id: ReqId, instead: &dyn Fn() -> bool) -> Result<Option<Status>> {
        let mut backoff = Backoff::default();
        let mut looks = 0u32;
        loop {
            match self.test(id) {
                Ok(Some(s)) => return Ok(Some(s)),
                Ok(None) if instead() => return Ok(None),
                Ok(None) => {}
                // A failed progress pass leaves the request in flight, its buffer still lent
                // to the NI: the wait goes on (the request ends with its message or with its
                // peer's failure). Callers rely on this for their buffers' safety.
                Err(e) if self.is_pending(id) => log_progress_failure(&e),
                Err(e) => return Err(e),
            }
            looks = looks.wrapping_add(1);
            if looks.is_multiple_of(64) {
                if let Some(e) = self.withdraw_if_sender_blocked(id) {
                    return Err(e);
                }
            }
            self.idle(&mut backoff);
        }
    }
}

/// Logs a progress pass that failed while a wait goes on (out of line: cold).
#[cold]
#[inline(never)]
fn log_progress_failure(e: &OffloadError) {
    tracing::error!("progress failed while waiting for a request in flight: {e}");
}

//! Nonblocking point-to-point: a [`Scope`] lends buffers to requests, and waits for every
//! request still in flight when it ends, so no buffer can be freed or touched while a transfer
//! uses it (even if a request is leaked with `mem::forget`).
//!
//! A buffer lent to a request cannot be touched while the scope lasts:
//!
//! ```compile_fail
//! rdcoll::local::run(2, |comm| {
//!     let mut buf = vec![0u8; 4];
//!     comm.scope(|s| {
//!         let r = s.irecv(&mut buf, 0, 0).unwrap();
//!         buf[0] = 1; // error: `buf` is mutably borrowed by the request
//!         r.wait().unwrap();
//!     });
//! });
//! ```
//!
//! nor freed before the scope ends:
//!
//! ```compile_fail
//! rdcoll::local::run(2, |comm| {
//!     comm.scope(|s| {
//!         let buf = vec![0u8; 4];
//!         let r = s.isend(&buf, 0, 0).unwrap(); // error: `buf` does not live long enough
//!         drop(buf);
//!         r.wait().unwrap();
//!     });
//! });
//! ```

use std::marker::PhantomData;

use bytemuck::Pod;
use rdcoll_offload::p2p::{Fetch, Group, ReqId, Source, Started, TagSel};

use crate::{Comm, Rank, Result, Status};

/// Where nonblocking requests live; made by [`Comm::scope`].
pub struct Scope<'scope, 'env: 'scope> {
    comm: &'env Comm,
    /// The engine records this scope's requests in flight under it (no lock of our own on the
    /// message path).
    group: Group,
    /// Its nonblocking collectives (waited for when it ends, as its requests are).
    collectives: std::sync::Mutex<Vec<std::sync::Arc<crate::nonblocking::Pending>>>,
    _scope: PhantomData<&'scope mut &'scope ()>,
}

/// A nonblocking send or receive, borrowing its buffer for the scope it was started in.
#[must_use = "a request must be waited for (or it is waited for when its scope ends)"]
pub struct Request<'scope> {
    state: State,
    comm: &'scope Comm,
}

/// Where a [`Request`] is.
enum State {
    /// In flight as the engine's request.
    InFlight(ReqId),
    /// Complete: at once for a short send, or since `test` returned the status.
    Complete(Status),
}

impl Comm {
    /// Runs `f` with a [`Scope`] for nonblocking requests, then waits for any request still in
    /// flight (also when `f` panics) before the borrowed buffers are released.
    ///
    /// ```
    /// rdcoll::local::run(2, |comm| {
    ///     let peer = 1 - comm.rank();
    ///     let out = [comm.rank() as u64; 4];
    ///     let mut inbox = [0u64; 4];
    ///     comm.scope(|s| {
    ///         let r = s.irecv(&mut inbox, peer, 7).unwrap();
    ///         let w = s.isend(&out, peer, 7).unwrap();
    ///         w.wait().unwrap();
    ///         r.wait().unwrap();
    ///     });
    ///     assert_eq!(inbox, [peer as u64; 4]);
    /// })
    /// .unwrap();
    /// ```
    pub fn scope<'env, R, F>(&'env self, f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
    {
        let scope = Scope {
            comm: self,
            group: Group::new(),
            collectives: std::sync::Mutex::new(Vec::new()),
            _scope: PhantomData,
        };
        struct WaitOnExit<'a, 'b>(&'a Scope<'a, 'b>);
        impl Drop for WaitOnExit<'_, '_> {
            fn drop(&mut self) {
                self.0.wait_leftovers();
            }
        }
        let guard = WaitOnExit(&scope);
        let r = f(guard.0);
        drop(guard);
        r
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// The communicator this scope's requests use.
    pub(crate) fn comm(&self) -> &'env Comm {
        self.comm
    }

    /// Records a nonblocking collective, to wait for it when the scope ends.
    pub(crate) fn note_collective(&self, pending: std::sync::Arc<crate::nonblocking::Pending>) {
        let mut c = self.collectives.lock().unwrap_or_else(|p| p.into_inner());
        c.retain(|p| std::sync::Arc::strong_count(p) > 1);
        c.push(pending);
    }

    /// Starts sending `data` to `dest` with `tag`; `data` stays borrowed until the scope ends.
    pub fn isend<T: Pod>(
        &'scope self,
        data: &'scope [T],
        dest: Rank,
        tag: u32,
    ) -> Result<Request<'scope>> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let dest = self.comm.to_fabric(dest)?;
        let engine = self.comm.engine()?;
        // SAFETY: `data` is borrowed immutably for 'scope, and the scope waits for this
        // request before 'scope ends, so the buffer stays valid and unmodified while in flight.
        let started = unsafe {
            engine.isend_in(
                self.group,
                bytes.as_ptr(),
                bytes.len(),
                dest,
                tag,
                self.comm.context(),
            )?
        };
        let state = match started {
            Started::Done(status) => State::Complete(self.comm.status_from_fabric(status)),
            Started::Pending(id) => State::InFlight(id),
        };
        Ok(Request {
            state,
            comm: self.comm,
        })
    }

    /// Posts a receive into `buf` for a message from `source` with `tag`; `buf` stays
    /// borrowed until the scope ends.
    pub fn irecv<T: Pod>(
        &'scope self,
        buf: &'scope mut [T],
        source: impl Into<Source>,
        tag: impl Into<TagSel>,
    ) -> Result<Request<'scope>> {
        self.irecv_fetching(buf, source, tag, Fetch::Fabric)
    }

    /// [`irecv`](Scope::irecv), fetching a rendezvous's rest as `fetch` says.
    pub(crate) fn irecv_fetching<T: Pod>(
        &'scope self,
        buf: &'scope mut [T],
        source: impl Into<Source>,
        tag: impl Into<TagSel>,
        fetch: Fetch,
    ) -> Result<Request<'scope>> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let source = self.comm.source_to_fabric(source.into())?;
        let engine = self.comm.engine()?;
        // SAFETY: `buf` is borrowed mutably for 'scope, and the scope waits for this request
        // before 'scope ends, so nothing else touches the buffer while the message lands.
        let id = unsafe {
            engine.irecv_in(
                self.group,
                bytes.as_mut_ptr(),
                bytes.len(),
                source,
                tag.into(),
                self.comm.context(),
                fetch,
            )?
        };
        Ok(Request {
            state: State::InFlight(id),
            comm: self.comm,
        })
    }

    /// Waits for requests that were never waited for (leaked or dropped). Their errors can
    /// no longer reach anyone, so they are logged.
    fn wait_leftovers(&self) {
        let collectives =
            std::mem::take(&mut *self.collectives.lock().unwrap_or_else(|p| p.into_inner()));
        for pending in collectives {
            if let Err(e) = pending.wait() {
                tracing::warn!("a collective that was never waited for failed: {e}");
            }
        }
        let Ok(engine) = self.comm.engine() else {
            return;
        };
        for (_, result) in engine.wait_group(self.group) {
            if let Err(e) = result {
                tracing::warn!("a request that was never waited for failed: {e}");
            }
        }
    }
}

impl Request<'_> {
    /// Waits for the request to complete and returns its status.
    pub fn wait(self) -> Result<Status> {
        match self.state {
            State::Complete(s) => Ok(s),
            State::InFlight(id) => match self.comm.engine()?.wait(id) {
                Ok(st) => Ok(self.comm.status_from_fabric(st)),
                Err(e) => Err(self.comm.error_from_fabric(e)),
            },
        }
    }

    /// Whether the request has completed; once it has, every later call returns the same
    /// status.
    pub fn test(&mut self) -> Result<Option<Status>> {
        let id = match self.state {
            State::Complete(s) => return Ok(Some(s)),
            State::InFlight(id) => id,
        };
        let status = match self.comm.engine()?.test(id) {
            Ok(st) => st.map(|st| self.comm.status_from_fabric(st)),
            Err(e) => return Err(self.comm.error_from_fabric(e)),
        };
        if let Some(s) = status {
            self.state = State::Complete(s);
        }
        Ok(status)
    }

    /// Cancels a receive that has not matched yet; returns whether it was cancelled (then
    /// `wait` returns a status with `cancelled` set). Sends are never cancelled.
    pub fn cancel(&mut self) -> Result<bool> {
        match self.state {
            State::InFlight(id) => Ok(self.comm.engine()?.cancel(id)?),
            State::Complete(_) => Ok(false),
        }
    }
}

/// Waits for all `requests`; returns their statuses in order, or the first error (after all
/// have completed).
pub fn wait_all(requests: Vec<Request<'_>>) -> Result<Vec<Status>> {
    let mut out = Vec::with_capacity(requests.len());
    let mut first_err = None;
    for r in requests {
        match r.wait() {
            Ok(s) => out.push(s),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Whether all `requests` have completed (each completed one keeps its status).
pub fn test_all(requests: &mut [Request<'_>]) -> Result<bool> {
    let mut all = true;
    for r in requests.iter_mut() {
        all &= r.test()?.is_some();
    }
    Ok(all)
}

/// Waits until one of `requests` completes, removes it and returns its index and status.
/// `requests` must not be empty.
pub fn wait_any(requests: &mut Vec<Request<'_>>) -> Result<(usize, Status)> {
    if requests.is_empty() {
        return Err(crate::Error::InvalidArgument(
            "wait_any needs at least one request".into(),
        ));
    }
    let mut backoff = rdcoll_offload::p2p::Backoff::default();
    loop {
        for i in 0..requests.len() {
            match requests[i].test() {
                Ok(Some(s)) => {
                    drop(requests.remove(i));
                    return Ok((i, s));
                }
                Ok(None) => {}
                Err(e) => {
                    drop(requests.remove(i));
                    return Err(e);
                }
            }
        }
        requests[0].comm.engine()?.idle(&mut backoff);
    }
}

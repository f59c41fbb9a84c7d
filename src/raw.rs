//! Nonblocking requests whose buffers the caller keeps valid by contract instead of by
//! borrow: for the C API (`rdcoll-ffi`) and other callers that manage memory themselves. Rust
//! code should prefer [`Comm::scope`], which the compiler checks.

use std::sync::Arc;

use rdcoll_offload::p2p::{Engine, ReqId, Source, TagSel};

use crate::{Comm, Rank, Result, Status};

/// A nonblocking send or receive started with [`Comm::isend_raw`] or [`Comm::irecv_raw`].
/// Dropping it unfinished waits for it (a buffer must never be written after its request is
/// gone).
pub struct RawRequest {
    id: Option<ReqId>,
    engine: Arc<Engine>,
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
        // SAFETY: passed on from the caller.
        let id = unsafe { engine.isend(ptr, len, dest, tag, self.context())? };
        Ok(RawRequest {
            id: Some(id),
            engine,
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
        // SAFETY: passed on from the caller.
        let id = unsafe { engine.irecv(ptr, len, source.into(), tag.into(), self.context())? };
        Ok(RawRequest {
            id: Some(id),
            engine,
        })
    }
}

impl RawRequest {
    /// Waits for the request and returns its status.
    pub fn wait(mut self) -> Result<Status> {
        match self.id.take() {
            Some(id) => Ok(self.engine.wait(id)?),
            None => Err(crate::Error::InvalidArgument(
                "the request has already completed".into(),
            )),
        }
    }

    /// The status if the request has completed (it is then finished: later calls are
    /// errors).
    pub fn test(&mut self) -> Result<Option<Status>> {
        let Some(id) = self.id else {
            return Err(crate::Error::InvalidArgument(
                "the request has already completed".into(),
            ));
        };
        match self.engine.test(id) {
            Ok(Some(s)) => {
                self.id = None;
                Ok(Some(s))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.id = None;
                Err(e.into())
            }
        }
    }

    /// Cancels a receive that has not matched yet; returns whether it was cancelled (its
    /// status then says so).
    pub fn cancel(&mut self) -> Result<bool> {
        match self.id {
            Some(id) => Ok(self.engine.cancel(id)?),
            None => Ok(false),
        }
    }

    /// Whether the request has already delivered its result.
    pub fn is_finished(&self) -> bool {
        self.id.is_none()
    }
}

impl Drop for RawRequest {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            if let Err(e) = self.engine.wait(id) {
                tracing::warn!("a request dropped unfinished failed: {e}");
            }
        }
    }
}

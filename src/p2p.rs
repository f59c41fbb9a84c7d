//! Blocking point-to-point messaging on a [`Comm`]: send, receive, probe, sendrecv.

use bytemuck::Pod;
use rdcoll_offload::p2p::{Engine, Fetch, ReqId, Source, Started, TagSel};

use crate::{Comm, Rank, Result, Status};

impl Comm {
    /// Sends `data` to `dest` with `tag`; returns when `data` may be reused (at once for short
    /// messages, once the receiver has fetched it for long ones, and for short ones too while
    /// `dest` has not received enough of this rank's earlier messages: `RDCOLL_UNEXPECTED_MAX`).
    pub fn send<T: Pod>(&self, data: &[T], dest: Rank, tag: u32) -> Result<()> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let dest = self.to_fabric(dest)?;
        Ok(self.engine()?.send_from(bytes, dest, tag, self.context())?)
    }

    /// Receives into `buf` the first message from `source` with `tag` (either may be a
    /// wildcard: [`Source::Any`], [`Tag::Any`](crate::Tag::Any)). A message longer than `buf`
    /// is consumed and reported as [`Error::Truncated`](crate::Error::Truncated) with its true
    /// length; nothing past `buf` is written. If the sender waits in a send of a message this
    /// receive does not match, behind its own unreceived messages (`RDCOLL_UNEXPECTED_MAX`),
    /// the receive fails at once with [`OffloadError::SenderBlocked`](crate::OffloadError)
    /// instead of waiting for ever; nothing is lost.
    pub fn recv<T: Pod>(
        &self,
        buf: &mut [T],
        source: impl Into<Source>,
        tag: impl Into<TagSel>,
    ) -> Result<Status> {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let engine = self.engine()?;
        let source = self.source_to_fabric(source.into())?;
        match engine.recv_into(bytes, source, tag.into(), self.context()) {
            Ok(st) => Ok(self.status_from_fabric(st)),
            Err(e) => Err(self.error_from_fabric(e)),
        }
    }

    /// Receives a message of a length not known in advance: waits for one from `source` with
    /// `tag` (as [`probe`](Comm::probe)), then receives exactly that message into a vector of
    /// its length. A message that is not a whole number of `T`s is an error, and stays queued.
    pub fn recv_vec<T: Pod>(
        &self,
        source: impl Into<Source>,
        tag: impl Into<TagSel>,
    ) -> Result<(Vec<T>, Status)> {
        let st = self.probe(source, tag)?;
        let mut out = vec![T::zeroed(); st.count::<T>()?];
        // The probed message: the oldest from its sender with its tag (non-overtaking).
        let got = self.recv(&mut out, st.source, st.tag)?;
        Ok((out, got))
    }

    /// Sends `data` to `dest` and receives into `buf` from `source`, both at once (so a ring
    /// exchange cannot deadlock).
    ///
    /// The send starts first. A short message with eager credit has then been copied out (it
    /// is on its way), and the receive is a blocking one, which polls for its message
    /// itself; otherwise (a long message, a short one without credit, or one of 16 KiB or
    /// more while the shm ring to `dest` is backed up, each read from `data` in place) the
    /// receive is posted and both are waited for.
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<T: Pod, U: Pod>(
        &self,
        data: &[T],
        dest: Rank,
        send_tag: u32,
        buf: &mut [U],
        source: impl Into<Source>,
        recv_tag: impl Into<TagSel>,
    ) -> Result<Status> {
        let (source, recv_tag) = (source.into(), recv_tag.into());
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let engine = self.engine()?;
        let to = self.to_fabric(dest)?;
        // A send that completes at once has copied `data` out; one that does not reads it in
        // place and is waited for before this call returns, also if it unwinds (`PendingSend`).
        // SAFETY: `data` is borrowed for the whole call, which outlasts the send as said.
        let started = unsafe {
            engine.isend_started(bytes.as_ptr(), bytes.len(), to, send_tag, self.context())
        };
        let pending = match started.map_err(|e| self.error_from_fabric(e))? {
            Started::Done(_) => return self.recv(buf, source, recv_tag),
            Started::Pending(id) => PendingSend {
                engine,
                id: Some(id),
            },
        };
        // The sender is normally in a sendrecv too, its core busy with its own receive.
        let got = self.scope(|s| s.irecv_fetching(buf, source, recv_tag, Fetch::Read)?.wait());
        let sent = pending.wait().map_err(|e| self.error_from_fabric(e));
        let got = got?;
        sent?;
        Ok(got)
    }

    /// Waits for a message from `source` with `tag` and returns its envelope; the message
    /// stays queued for a receive.
    pub fn probe(&self, source: impl Into<Source>, tag: impl Into<TagSel>) -> Result<Status> {
        let source = self.source_to_fabric(source.into())?;
        let st = self.engine()?.probe(source, tag.into(), self.context())?;
        Ok(self.status_from_fabric(st))
    }

    /// The envelope of a message from `source` with `tag`, if one has arrived.
    pub fn iprobe(
        &self,
        source: impl Into<Source>,
        tag: impl Into<TagSel>,
    ) -> Result<Option<Status>> {
        let source = self.source_to_fabric(source.into())?;
        let st = self.engine()?.iprobe(source, tag.into(), self.context())?;
        Ok(st.map(|st| self.status_from_fabric(st)))
    }

    /// Changes this rank's rendezvous settings from now on, as `RDCOLL_RNDV_CHUNK` (bytes per
    /// get of the messages this rank sends, a multiple of 1 KiB) and `RDCOLL_RNDV_CREDITS`
    /// (gets in flight per message this rank receives) would have set them. Messages already
    /// started keep their settings; communicators duplicated from this one share them. For
    /// tuning, and for comparing two settings within one run.
    pub fn set_rendezvous(&self, chunk: usize, credits: usize) -> Result<()> {
        Ok(self.engine()?.set_rendezvous(chunk, credits)?)
    }

    /// This rank's rendezvous settings in force: bytes per get, gets in flight per message.
    pub fn rendezvous(&self) -> Result<(usize, usize)> {
        let c = self.engine()?.config();
        Ok((c.rndv_chunk, c.rndv_credits))
    }
}

/// A send in flight that [`Comm::sendrecv`] waits for: its buffer is lent to it until then,
/// also when the call unwinds (then waited for on drop, its result dropped).
struct PendingSend<'a> {
    engine: &'a Engine,
    id: Option<ReqId>,
}

impl PendingSend<'_> {
    fn wait(mut self) -> rdcoll_offload::Result<rdcoll_offload::p2p::Status> {
        let id = self.id.take().expect("waited for once");
        self.engine.wait(id)
    }
}

impl Drop for PendingSend<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let _ = self.engine.wait(id);
        }
    }
}

//! Blocking point-to-point messaging on a [`Comm`]: send, receive, probe, sendrecv.

use bytemuck::Pod;
use rdcoll_offload::p2p::{Fetch, Source, Started, TagSel};

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
    /// A short message with eager credit is sent first (it is on its way when the call
    /// returns) and the receive is then a blocking one, which polls for its message itself; a
    /// long one is started, the receive posted, and both waited for.
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
        // SAFETY: `data` is borrowed for the whole call: a short send has copied it out when
        // this returns, a long one is waited for below before this call returns.
        let started = unsafe {
            engine.isend_started(bytes.as_ptr(), bytes.len(), to, send_tag, self.context())
        };
        let id = match started.map_err(|e| self.error_from_fabric(e))? {
            Started::Done(_) => return self.recv(buf, source, recv_tag),
            Started::Pending(id) => id,
        };
        // The sender is normally in a sendrecv too, its core busy with its own receive.
        let got = self.scope(|s| s.irecv_fetching(buf, source, recv_tag, Fetch::Read)?.wait());
        // Waited for whatever the receive did: the send's buffer is lent until then.
        let sent = engine.wait(id).map_err(|e| self.error_from_fabric(e));
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

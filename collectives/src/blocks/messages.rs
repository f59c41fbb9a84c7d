//! Point-to-point messages on a communicator's collective context, for the collectives that
//! move whole blocks between pairs of ranks (gather, scatter, allgather, alltoall,
//! reduce_scatter, scan). A [`Batch`] posts its receives and sends, then waits for every one
//! of them before the buffers it borrowed are free again; a failed transfer does not stop the
//! others (a rank that gave up on its part would leave a peer's send waiting for ever), so
//! every rank completes what it can and the first error is reported afterwards.

use std::ops::Range;

use rdcoll_offload::p2p::{Context, Fetch, Group, ReqId, Source, Started, Status, TagSel};
use rdcoll_offload::OffloadError;
use rdcoll_transport::Rank;

use crate::error::{CollError, Result};
use crate::progress::Waiter;

/// The tags of the block collectives (on the collectives' own context; distinct from the
/// set-up exchange's).
pub(crate) mod tag {
    pub(crate) const GATHER: u32 = 0xC011_0101;
    pub(crate) const SCATTER: u32 = 0xC011_0102;
    pub(crate) const ALLGATHER: u32 = 0xC011_0103;
    pub(crate) const REDUCE_SCATTER: u32 = 0xC011_0105;
    pub(crate) const SCAN: u32 = 0xC011_0106;
    /// alltoallv's blocks that go by message, by the pair exchange's slot set (alternate
    /// operations, alternate tags).
    pub(crate) const ALLTOALLV: [u32; 2] = [0xC011_0107, 0xC011_0108];
}

/// A receive in flight: from whom, and the length it must bring.
struct Posted {
    id: ReqId,
    peer: Rank,
    len: usize,
}

/// Transfers that borrow buffers for `'b` and are all waited for before it ends.
pub(crate) struct Batch<'b> {
    w: &'b Waiter,
    context: Context,
    group: Group,
    recvs: Vec<Posted>,
    sends: Vec<(ReqId, Rank)>,
    /// How its receives fetch a rendezvous's rest.
    fetch: Fetch,
    /// The first error met (a receive that could not be posted, a send that failed to start).
    failed: Option<CollError>,
    _bufs: std::marker::PhantomData<&'b mut [u8]>,
}

impl<'b> Batch<'b> {
    /// A batch whose peers send to this rank while it sends to them (or to others): its
    /// receives read long messages themselves ([`Fetch::Read`]).
    pub(crate) fn new(w: &'b Waiter, context: Context) -> Batch<'b> {
        Batch {
            w,
            context,
            group: Group::new(),
            recvs: Vec::new(),
            sends: Vec::new(),
            fetch: Fetch::Read,
            failed: None,
            _bufs: std::marker::PhantomData,
        }
    }

    /// A batch whose senders have nothing else to do while this rank receives (a gather's
    /// root): they help move long messages where the fabric can ([`Fetch::Fabric`]).
    pub(crate) fn from_idle_senders(w: &'b Waiter, context: Context) -> Batch<'b> {
        let mut batch = Batch::new(w, context);
        batch.fetch = Fetch::Fabric;
        batch
    }

    /// Receives exactly `buf.len()` bytes from communicator rank `from` into `buf`.
    pub(crate) fn recv(&mut self, buf: &'b mut [u8], from: Rank, tag: u32) {
        let engine = self.w.engine();
        let source = Source::Rank(self.w.fabric_rank(from));
        // SAFETY: `buf` is borrowed for 'b, and the batch waits for this request (finish or
        // drop) before 'b ends, so nothing else touches it while the message lands.
        let posted = unsafe {
            engine.irecv_in(
                self.group,
                buf.as_mut_ptr(),
                buf.len(),
                source,
                TagSel::Value(tag),
                self.context,
                self.fetch,
            )
        };
        match posted {
            Ok(id) => self.recvs.push(Posted {
                id,
                peer: from,
                len: buf.len(),
            }),
            Err(e) => self.fail(e.into()),
        }
    }

    /// Sends `data` to communicator rank `to`.
    pub(crate) fn send(&mut self, data: &'b [u8], to: Rank, tag: u32) {
        let engine = self.w.engine();
        // SAFETY: `data` is borrowed for 'b, and the batch waits for this request before 'b
        // ends, so it stays valid and unmodified while the receiver fetches it.
        let started = unsafe {
            engine.isend_in(
                self.group,
                data.as_ptr(),
                data.len(),
                self.w.fabric_rank(to),
                tag,
                self.context,
            )
        };
        match started {
            Ok(Started::Done(_)) => {}
            Ok(Started::Pending(id)) => self.sends.push((id, to)),
            Err(e) => self.fail(e.into()),
        }
    }

    /// Waits for the receive posted from `from`, unless `instead()` turns true first: then
    /// the receive is withdrawn (its message will not come) and the answer is `None`. A
    /// receive that completes is the batch's no more: its result is returned (a length other
    /// than the block's is a `Mismatch`).
    pub(crate) fn wait_recv_or(
        &mut self,
        from: Rank,
        instead: &dyn Fn() -> bool,
    ) -> Option<Result<()>> {
        let i = self.recvs.iter().position(|p| p.peer == from)?;
        let engine = self.w.engine();
        match engine.wait_unless(self.recvs[i].id, instead) {
            Ok(Some(st)) => Some(received(&self.recvs.swap_remove(i), Ok(st))),
            Ok(None) => {
                let p = self.recvs.swap_remove(i);
                // Withdrawn: cancelled, or (had it matched after all) complete.
                if let Err(e) = engine.cancel(p.id).and_then(|_| engine.wait(p.id)) {
                    tracing::debug!("a withdrawn receive from rank {from} ended in: {e}");
                }
                None
            }
            Err(e) => Some(received(&self.recvs.swap_remove(i), Err(e))),
        }
    }

    fn fail(&mut self, e: CollError) {
        self.failed.get_or_insert(e);
    }

    /// Waits for every transfer; the first error, if any (a receive that brought another
    /// length than expected is a `Mismatch`).
    pub(crate) fn finish(mut self) -> Result<()> {
        let engine = self.w.engine();
        let recvs = std::mem::take(&mut self.recvs);
        for p in recvs {
            if let Err(e) = received(&p, engine.wait(p.id)) {
                self.fail(e);
            }
        }
        let sends = std::mem::take(&mut self.sends);
        for (id, _) in sends {
            if let Err(e) = engine.wait(id) {
                self.fail(e.into());
            }
        }
        match self.failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// What a completed receive `p` gives: a length other than the block's is a `Mismatch`.
fn received(p: &Posted, got: std::result::Result<Status, OffloadError>) -> Result<()> {
    match got {
        Ok(st) if st.len == p.len => Ok(()),
        Ok(st) => Err(CollError::Mismatch(format!(
            "rank {} sent {} bytes where {} were expected",
            p.peer, st.len, p.len
        ))),
        Err(OffloadError::Truncated { len, .. }) => Err(CollError::Mismatch(format!(
            "rank {} sent {len} bytes where {} were expected",
            p.peer, p.len
        ))),
        Err(e) => Err(e.into()),
    }
}

impl Drop for Batch<'_> {
    /// A batch dropped unfinished (its caller failed before `finish`) still may not leave a
    /// transfer into or out of its buffers: its receives are cancelled and everything it
    /// started is waited for.
    fn drop(&mut self) {
        // Finished (or nothing started): every request it made has been waited for.
        if self.recvs.is_empty() && self.sends.is_empty() {
            return;
        }
        let engine = self.w.engine();
        for p in &self.recvs {
            let _ = engine.cancel(p.id);
        }
        for (_, result) in engine.wait_group(self.group) {
            if let Err(e) = result {
                tracing::debug!("a collective's transfer failed: {e}");
            }
        }
    }
}

/// Takes part in a collective this rank cannot do (its arguments are wrong) so that no peer
/// waits for it and nothing is left queued for the next one: an empty message to each rank of
/// `send_to` (where a block was expected, the peer gets a `Mismatch`), and the message of each
/// rank of `recv_from` received and dropped. Returns `why`.
pub(crate) fn refuse(
    w: &Waiter,
    context: Context,
    tag: u32,
    send_to: impl Iterator<Item = Rank>,
    recv_from: impl Iterator<Item = Rank>,
    why: CollError,
) -> CollError {
    let engine = w.engine();
    for r in send_to {
        if let Err(e) = engine.send_from(&[], w.fabric_rank(r), tag, context) {
            tracing::debug!("could not tell rank {r} that this rank's part failed: {e}");
        }
    }
    for r in recv_from {
        let _ = drop_message(w, context, tag, r);
    }
    why
}

/// Receives and drops rank `from`'s next message on `tag` (a block this rank cannot take);
/// its length.
pub(crate) fn drop_message(w: &Waiter, context: Context, tag: u32, from: Rank) -> Option<usize> {
    let engine = w.engine();
    let source = Source::Rank(w.fabric_rank(from));
    let dropped = engine
        .probe(source, TagSel::Value(tag), context)
        .and_then(|st| {
            let mut scratch = vec![0u8; st.len];
            engine.recv_into(&mut scratch, source, TagSel::Value(tag), context)
        });
    match dropped {
        Ok(st) => Some(st.len),
        Err(e) => {
            tracing::debug!("rank {from}'s block for a collective this rank refused was lost: {e}");
            None
        }
    }
}

/// Splits `buf` into the disjoint blocks `parts` (one per rank, in rank order): an error if
/// one runs past the buffer or two overlap.
pub(crate) fn carve<'a>(buf: &'a mut [u8], parts: &[Range<usize>]) -> Result<Vec<&'a mut [u8]>> {
    let len = buf.len();
    // Blocks in rank order (the common layout): split as they come, nothing to sort.
    let mut end = 0usize;
    let in_order = parts.iter().all(|p| {
        let fits = end <= p.start && p.start <= p.end && p.end <= len;
        end = p.end;
        fits
    });
    if in_order {
        let mut rest = buf;
        let mut at = 0usize;
        return Ok(parts
            .iter()
            .map(|p| {
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(p.start - at);
                let (block, tail) = tail.split_at_mut(p.end - p.start);
                rest = tail;
                at = p.end;
                block
            })
            .collect());
    }
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&r| (parts[r].start, parts[r].end));
    let mut out: Vec<Option<&'a mut [u8]>> = (0..parts.len()).map(|_| None).collect();
    let mut rest = buf;
    let mut at = 0usize;
    for r in order {
        let p = &parts[r];
        if p.start > p.end || p.end > len {
            return Err(CollError::InvalidArgument(format!(
                "rank {r}'s block {}..{} is outside the {len}-byte buffer",
                p.start, p.end
            )));
        }
        if p.start < at && p.start != p.end {
            return Err(CollError::InvalidArgument(format!(
                "rank {r}'s block {}..{} overlaps another block of the receive buffer",
                p.start, p.end
            )));
        }
        if p.start == p.end {
            out[r] = Some(&mut []);
            continue;
        }
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(p.start - at);
        let (block, tail) = tail.split_at_mut(p.end - p.start);
        out[r] = Some(block);
        rest = tail;
        at = p.end;
    }
    Ok(out.into_iter().map(|b| b.unwrap_or_default()).collect())
}

/// The block `part` of `buf` (blocks of a send buffer may overlap).
pub(crate) fn block<'a>(buf: &'a [u8], part: &Range<usize>, r: usize) -> Result<&'a [u8]> {
    buf.get(part.clone()).ok_or_else(|| {
        CollError::InvalidArgument(format!(
            "rank {r}'s block {}..{} is outside the {}-byte buffer",
            part.start,
            part.end,
            buf.len()
        ))
    })
}

/// Checks that there is one block per rank.
pub(crate) fn one_per_rank(parts: &[Range<usize>], n: usize, what: &str) -> Result<()> {
    if parts.len() != n {
        return Err(CollError::InvalidArgument(format!(
            "{what} names {} blocks for {n} ranks",
            parts.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_carved_in_rank_order_and_checked() {
        let mut buf: Vec<u8> = (0..10).collect();
        let parts = [6..10, 0..2, 2..2, 2..6];
        let got = carve(&mut buf, &parts).unwrap();
        assert_eq!(got[0], &[6, 7, 8, 9]);
        assert_eq!(got[1], &[0, 1]);
        assert!(got[2].is_empty());
        assert_eq!(got[3], &[2, 3, 4, 5]);
        assert!(carve(&mut buf, &[0..4, 3..5]).is_err());
        let past_the_end = [0..4, 4..11];
        assert!(carve(&mut buf, &past_the_end).is_err());
        assert!(carve(&mut buf, &[5..5, 5..5, 0..10]).is_ok());
        assert!(block(&buf, &(8..11), 0).is_err());
    }
}

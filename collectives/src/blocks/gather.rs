//! Gather and scatter: every rank's block to the root, the root's blocks to every rank. The
//! root posts one receive (or send) per rank and waits for all of them: one message per rank,
//! the fewest bytes any algorithm moves through the root, which is where the time goes.

use std::ops::Range;

use rdcoll_transport::Rank;

use super::{block, carve, one_per_rank, others, refuse, tag, Batch};
use crate::agreement::{Call, CallKind};
use crate::error::{CollError, Result};
use crate::Collectives;

impl Collectives {
    /// Gathers every rank's `send` (the same length everywhere) into the root's `recv`, rank
    /// by rank. Small blocks go through the reduction slots: every other rank writes its block
    /// into its slot at the root (once the root has taken its previous one) and returns;
    /// larger ones as [`gatherv`](Collectives::gatherv).
    pub fn gather(&self, send: &[u8], recv: &mut [u8], root: Rank) -> Result<()> {
        self.agree(|| Call::new(CallKind::Gather).root(root).bytes(send.len()))?;
        self.check_root(root)?;
        let (me, n) = (self.waiter.rank(), self.waiter.size());
        let block = send.len();
        if self.usable().is_ok() && self.exchange_fits(std::iter::once(block)) {
            if me != root {
                return self.slots_gather(send, None, root);
            }
            if recv.len() != n * block {
                // Taken part in anyway, so that nobody waits and the slots stay in step.
                let mut scratch = vec![0u8; n * block];
                let _ = self.slots_gather(send, Some(&mut scratch), root);
                return Err(CollError::InvalidArgument(format!(
                    "the root's receive buffer has {} bytes, not {n} blocks of {block}",
                    recv.len()
                )));
            }
            return self.slots_gather(send, Some(recv), root);
        }
        let parts = if me == root {
            super::even_parts(n, block)
        } else {
            Vec::new()
        };
        self.gatherv_unchecked(send, recv, &parts, root)
    }

    /// Scatters the root's `send` (`size` blocks of `recv.len()` bytes, the same length
    /// everywhere) to every rank's `recv`. Small blocks go through the reduction slots (the
    /// root writes each rank's block into its slot there, once it has taken the previous
    /// one); larger ones as [`scatterv`](Collectives::scatterv).
    pub fn scatter(&self, send: &[u8], recv: &mut [u8], root: Rank) -> Result<()> {
        self.agree(|| Call::new(CallKind::Scatter).root(root).bytes(recv.len()))?;
        self.check_root(root)?;
        let (me, n) = (self.waiter.rank(), self.waiter.size());
        let block = recv.len();
        if self.usable().is_ok() && self.exchange_fits(std::iter::once(block)) {
            if me != root {
                return self.slots_scatter(None, recv, root);
            }
            // A send buffer of another length still takes part (see DegreeKSlots::scatter).
            return self.slots_scatter(Some(send), recv, root);
        }
        self.scatterv_unchecked(send, &super::even_parts(n, block), recv, root)
    }

    /// Gathers every rank's `send` into the root's `recv`: rank `r`'s bytes land in
    /// `recv[parts[r]]` (the root alone passes `recv` and `parts`; blocks must not overlap).
    /// A rank whose `send` is not as long as its block is an error at the root
    /// (`Mismatch`), after every transfer has completed.
    pub fn gatherv(
        &self,
        send: &[u8],
        recv: &mut [u8],
        parts: &[Range<usize>],
        root: Rank,
    ) -> Result<()> {
        self.agree(|| {
            let call = Call::new(CallKind::Gatherv).root(root).bytes(send.len());
            match self.waiter.rank() == root {
                true => call.counts(parts),
                false => call,
            }
        })?;
        self.gatherv_unchecked(send, recv, parts, root)
    }

    fn gatherv_unchecked(
        &self,
        send: &[u8],
        recv: &mut [u8],
        parts: &[Range<usize>],
        root: Rank,
    ) -> Result<()> {
        self.check_root(root)?;
        let w = &self.waiter;
        let (me, n) = (w.rank(), w.size());
        if me != root {
            self.usable()?;
            let mut batch = Batch::new(w, self.context);
            batch.send(send, root, tag::GATHER);
            return batch.finish();
        }
        let checked = self
            .usable()
            .and_then(|()| one_per_rank(parts, n, "gatherv"))
            .and_then(|()| carve(recv, parts));
        let blocks = match checked {
            Ok(b) => b,
            Err(e) => {
                let from = others(me, n);
                return Err(refuse(
                    w,
                    self.context,
                    tag::GATHER,
                    None.into_iter(),
                    from,
                    e,
                ));
            }
        };
        let mut batch = Batch::from_idle_senders(w, self.context);
        let mut own = None;
        for (r, b) in blocks.into_iter().enumerate() {
            if r as Rank == me {
                own = Some(b);
            } else {
                batch.recv(b, r as Rank, tag::GATHER);
            }
        }
        let copied = copy_own(own.unwrap_or_default(), send);
        batch.finish().and(copied)
    }

    /// Scatters the root's `send` (rank `r`'s block is `send[parts[r]]`; blocks may overlap)
    /// into every rank's `recv`, which must be as long as its block.
    pub fn scatterv(
        &self,
        send: &[u8],
        parts: &[Range<usize>],
        recv: &mut [u8],
        root: Rank,
    ) -> Result<()> {
        self.agree(|| {
            let call = Call::new(CallKind::Scatterv).root(root).bytes(recv.len());
            match self.waiter.rank() == root {
                true => call.counts(parts),
                false => call,
            }
        })?;
        self.scatterv_unchecked(send, parts, recv, root)
    }

    fn scatterv_unchecked(
        &self,
        send: &[u8],
        parts: &[Range<usize>],
        recv: &mut [u8],
        root: Rank,
    ) -> Result<()> {
        self.check_root(root)?;
        let w = &self.waiter;
        let (me, n) = (w.rank(), w.size());
        if me != root {
            self.usable()?;
            let mut batch = Batch::new(w, self.context);
            batch.recv(recv, root, tag::SCATTER);
            return batch.finish();
        }
        let checked = self
            .usable()
            .and_then(|()| one_per_rank(parts, n, "scatterv"))
            .and_then(|()| (0..n).map(|r| block(send, &parts[r], r)).collect());
        let blocks: Vec<&[u8]> = match checked {
            Ok(b) => b,
            Err(e) => {
                let to = others(me, n);
                return Err(refuse(
                    w,
                    self.context,
                    tag::SCATTER,
                    to,
                    None.into_iter(),
                    e,
                ));
            }
        };
        let mut batch = Batch::new(w, self.context);
        for r in others(me, n) {
            batch.send(blocks[r as usize], r, tag::SCATTER);
        }
        let copied = copy_own(recv, blocks[me as usize]);
        batch.finish().and(copied)
    }
}

/// The root's own block: a copy, checked like a message.
pub(super) fn copy_own(to: &mut [u8], from: &[u8]) -> Result<()> {
    if to.len() != from.len() {
        return Err(CollError::Mismatch(format!(
            "this rank's own block is {} bytes, its data {}",
            to.len(),
            from.len()
        )));
    }
    to.copy_from_slice(from);
    Ok(())
}

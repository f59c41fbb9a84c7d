//! Allgather: every rank's block to every rank. Small blocks (within the small allreduce's
//! slots) go by one RDMA write of each rank's block into every other rank's slot for it, the
//! exchange of the small allreduce (`reduce::exchange`). Larger ones: each rank posts a
//! receive from every other rank, then sends its block to each, starting with its successor
//! (so the ranks do not all send to rank 0 first): one round, `n - 1` messages in and out per
//! rank, which is what a ring moves too, without its `n - 1` steps of latency.

use std::ops::Range;

use rdcoll_transport::Rank;

use super::gather::copy_own;
use super::{carve, one_per_rank, others, refuse, tag, Batch};
use crate::agreement::{Call, CallKind};
use crate::error::Result;
use crate::reduce::exchange::Kind;
use crate::Collectives;

impl Collectives {
    /// Gathers every rank's `send` into every rank's `recv`: rank `r`'s bytes land in
    /// `recv[parts[r]]` (every rank passes the same `parts`; blocks must not overlap).
    pub fn allgatherv(&self, send: &[u8], recv: &mut [u8], parts: &[Range<usize>]) -> Result<()> {
        self.agree(|| Call::new(CallKind::Allgatherv).counts(parts))?;
        let w = &self.waiter;
        let (me, n) = (w.rank(), w.size());
        let usable = self
            .usable()
            .and_then(|()| one_per_rank(parts, n, "allgatherv"));
        let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
        if usable.is_ok() && self.exchange_fits(lens.iter().copied()) {
            // Small blocks: one RDMA write of this rank's block into every peer's slot. A rank
            // whose receive buffer is wrong still takes part (and drops what it receives).
            return match carve(recv, parts) {
                Ok(mut blocks) => {
                    self.exchange_blocks(Kind::Allgather, send, &|r| lens[r], &mut |r, b| {
                        blocks[r].copy_from_slice(b)
                    })
                }
                Err(e) => {
                    let _ =
                        self.exchange_blocks(Kind::Allgather, send, &|r| lens[r], &mut |_, _| {});
                    Err(e)
                }
            };
        }
        let checked = usable.and_then(|()| carve(recv, parts));
        let mut blocks = match checked {
            Ok(b) => b,
            Err(e) => {
                let (to, from) = (others(me, n), others(me, n));
                return Err(refuse(w, self.context, tag::ALLGATHER, to, from, e));
            }
        };
        let own = std::mem::take(&mut blocks[me as usize]);
        let mut batch = Batch::new(w, self.context);
        for (r, b) in blocks.into_iter().enumerate() {
            if r as Rank != me {
                batch.recv(b, r as Rank, tag::ALLGATHER);
            }
        }
        for r in others(me, n) {
            batch.send(send, r, tag::ALLGATHER);
        }
        let copied = copy_own(own, send);
        batch.finish().and(copied)
    }
}

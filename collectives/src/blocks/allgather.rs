//! Allgather: every rank's block to every rank. Each rank posts a receive from every other
//! rank, then sends its block to each, starting with its successor (so the ranks do not all
//! send to rank 0 first): one round, `n - 1` messages in and out per rank, which is what a
//! ring moves too, without its `n - 1` steps of latency.

use std::ops::Range;

use rdcoll_transport::Rank;

use super::gather::copy_own;
use super::{carve, one_per_rank, others, refuse, tag, Batch};
use crate::error::Result;
use crate::Collectives;

impl Collectives {
    /// Gathers every rank's `send` into every rank's `recv`: rank `r`'s bytes land in
    /// `recv[parts[r]]` (every rank passes the same `parts`; blocks must not overlap).
    pub fn allgatherv(&self, send: &[u8], recv: &mut [u8], parts: &[Range<usize>]) -> Result<()> {
        let w = &self.waiter;
        let (me, n) = (w.rank(), w.size());
        let checked = self
            .usable()
            .and_then(|()| one_per_rank(parts, n, "allgatherv"))
            .and_then(|()| carve(recv, parts));
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

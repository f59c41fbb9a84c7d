//! Reduce-scatter: block `r` of the element-wise combination of every rank's vector ends at
//! rank `r`. Each rank sends its block `r` to rank `r` (an alltoall of `n - 1` blocks per
//! rank, the least any algorithm moves), then combines the contributions to its own block in
//! rank order, `x0 op x1 op ... op x(n-1)`: the same result in every run, for floating-point
//! elements too.

use std::ops::Range;

use rdcoll_transport::Rank;

use super::{block, carve, even_parts, one_per_rank, others, refuse, tag, Batch};
use crate::agreement::{Call, CallKind};
use crate::error::{CollError, Result};
use crate::reduce::exchange::Kind;
use crate::reduce::op::Reducer;
use crate::Collectives;

impl Collectives {
    /// [`reduce_scatter`](Collectives::reduce_scatter) with blocks of `recv.len()` bytes (the
    /// same everywhere). Where a whole vector fits the exchange slots, every rank writes it to
    /// every other rank (one RDMA write each), and each folds block `me` of all of them in rank
    /// order; larger ones by the alltoall of blocks.
    pub fn reduce_scatter_block(
        &self,
        send: &[u8],
        recv: &mut [u8],
        elem: usize,
        reduce: &Reducer<'_>,
    ) -> Result<()> {
        self.agree(|| {
            Call::new(CallKind::ReduceScatterBlock)
                .bytes(recv.len())
                .reduction(elem, reduce)
        })?;
        let (me, n) = (self.waiter.rank() as usize, self.waiter.size());
        let block = recv.len();
        let whole = n.saturating_mul(block);
        let whole_elems = elem > 0 && block.is_multiple_of(elem);
        if whole_elems && self.usable().is_ok() && self.exchange_fits(std::iter::once(whole)) {
            let at = me * block;
            return self.exchange_blocks(Kind::ReduceScatter, send, &|_| whole, &mut |r, b| {
                if r == 0 {
                    recv.copy_from_slice(&b[at..at + block]);
                } else {
                    reduce(recv, &b[at..at + block]);
                }
            });
        }
        self.reduce_scatter_unchecked(send, &even_parts(n, block), recv, elem, reduce)
    }

    /// Combines every rank's `send` element-wise with `reduce` and leaves block `r`
    /// (`send[parts[r]]`, the same `parts` on every rank) of the result in rank `r`'s `recv`,
    /// which must be as long as its block and aligned for the element type.
    pub fn reduce_scatter(
        &self,
        send: &[u8],
        parts: &[Range<usize>],
        recv: &mut [u8],
        elem: usize,
        reduce: &Reducer<'_>,
    ) -> Result<()> {
        self.agree(|| {
            Call::new(CallKind::ReduceScatter)
                .counts(parts)
                .reduction(elem, reduce)
        })?;
        self.reduce_scatter_unchecked(send, parts, recv, elem, reduce)
    }

    fn reduce_scatter_unchecked(
        &self,
        send: &[u8],
        parts: &[Range<usize>],
        recv: &mut [u8],
        elem: usize,
        reduce: &Reducer<'_>,
    ) -> Result<()> {
        let w = &self.waiter;
        let (me, n) = (w.rank(), w.size());
        let checked = self
            .usable()
            .and_then(|()| one_per_rank(parts, n, "reduce_scatter"))
            .and_then(|()| check_blocks(parts, me as usize, recv.len(), elem))
            .and_then(|()| (0..n).map(|r| block(send, &parts[r], r)).collect());
        let outgoing: Vec<&[u8]> = match checked {
            Ok(b) => b,
            Err(e) => {
                let (to, from) = (others(me, n), others(me, n));
                return Err(refuse(w, self.context, tag::REDUCE_SCATTER, to, from, e));
            }
        };
        let (me, mine) = (me as usize, recv.len());
        // Every rank's contribution to this rank's block (this rank's own stays unused).
        let mut incoming = self.scratch.take(mine * n);
        {
            let blocks = carve(incoming.bytes_mut(), &even_parts(n, mine))?;
            let mut batch = Batch::new(w, self.context);
            for (r, b) in blocks.into_iter().enumerate() {
                if r != me {
                    batch.recv(b, r as Rank, tag::REDUCE_SCATTER);
                }
            }
            for r in others(me as Rank, n) {
                batch.send(outgoing[r as usize], r, tag::REDUCE_SCATTER);
            }
            batch.finish()?;
        }
        let contribution = |r: usize| -> &[u8] {
            if r == me {
                outgoing[me]
            } else {
                &incoming.bytes()[r * mine..(r + 1) * mine]
            }
        };
        recv.copy_from_slice(contribution(0));
        for r in 1..n {
            reduce(recv, contribution(r));
        }
        Ok(())
    }
}

/// Blocks of whole elements, and this rank's as long as its receive buffer.
fn check_blocks(parts: &[Range<usize>], me: usize, recv: usize, elem: usize) -> Result<()> {
    if elem == 0 || parts.iter().any(|p| p.len() % elem != 0) {
        return Err(CollError::InvalidArgument(format!(
            "blocks must be whole {elem}-byte elements"
        )));
    }
    if parts[me].len() != recv {
        return Err(CollError::InvalidArgument(format!(
            "the receive buffer has {recv} bytes, this rank's block {}",
            parts[me].len()
        )));
    }
    Ok(())
}

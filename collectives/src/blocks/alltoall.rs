//! Alltoall: rank `i`'s block `j` to rank `j`'s block `i`. Each rank posts a receive from every
//! other rank, then sends to rank `me + 1`, `me + 2`, ... in turn (the pairwise order of
//! MPICH and Open MPI, so that no rank is every other's first target).

use std::ops::Range;

use rdcoll_transport::Rank;

use super::gather::copy_own;
use super::{block, carve, one_per_rank, others, refuse, tag, Batch};
use crate::agreement::{Call, CallKind};
use crate::error::Result;
use crate::reduce::exchange::Kind;
use crate::Collectives;

impl Collectives {
    /// Alltoall with blocks of `block` bytes (`send` and `recv` hold `size` of them, the same
    /// everywhere). Where a whole send buffer fits the exchange slots, every rank writes it to
    /// every other rank (one RDMA write each), which takes its block; larger ones as
    /// [`alltoallv`](Collectives::alltoallv).
    pub fn alltoall(&self, send: &[u8], recv: &mut [u8], block: usize) -> Result<()> {
        self.agree(|| Call::new(CallKind::Alltoall).bytes(block))?;
        let (me, n) = (self.waiter.rank() as usize, self.waiter.size());
        let whole = n.saturating_mul(block);
        if self.usable().is_ok() && self.exchange_fits(std::iter::once(whole)) {
            if recv.len() != whole {
                let _ = self.exchange_blocks(Kind::Alltoall, send, &|_| whole, &mut |_, _| {});
                return Err(crate::CollError::InvalidArgument(format!(
                    "the receive buffer has {} bytes, not {n} blocks of {block}",
                    recv.len()
                )));
            }
            let at = me * block;
            return self.exchange_blocks(Kind::Alltoall, send, &|_| whole, &mut |r, b| {
                recv[r * block..(r + 1) * block].copy_from_slice(&b[at..at + block])
            });
        }
        let parts = super::even_parts(n, block);
        self.alltoallv_unchecked(send, &parts, recv, &parts)
    }

    /// Sends `send[send_parts[r]]` to every rank `r` and receives rank `r`'s block for this
    /// rank into `recv[recv_parts[r]]` (send blocks may overlap, receive blocks may not). A
    /// block that arrives with another length than its receive block is a `Mismatch`.
    pub fn alltoallv(
        &self,
        send: &[u8],
        send_parts: &[Range<usize>],
        recv: &mut [u8],
        recv_parts: &[Range<usize>],
    ) -> Result<()> {
        self.agree(|| Call::new(CallKind::Alltoallv))?;
        self.alltoallv_unchecked(send, send_parts, recv, recv_parts)
    }

    fn alltoallv_unchecked(
        &self,
        send: &[u8],
        send_parts: &[Range<usize>],
        recv: &mut [u8],
        recv_parts: &[Range<usize>],
    ) -> Result<()> {
        let w = &self.waiter;
        let (me, n) = (w.rank(), w.size());
        let checked = self
            .usable()
            .and_then(|()| one_per_rank(send_parts, n, "alltoallv's send"))
            .and_then(|()| one_per_rank(recv_parts, n, "alltoallv's receive"))
            .and_then(|()| {
                let outgoing = (0..n)
                    .map(|r| block(send, &send_parts[r], r))
                    .collect::<Result<Vec<_>>>()?;
                Ok((outgoing, carve(recv, recv_parts)?))
            });
        let (outgoing, mut blocks) = match checked {
            Ok(b) => b,
            Err(e) => {
                let (to, from) = (others(me, n), others(me, n));
                return Err(refuse(w, self.context, tag::ALLTOALL, to, from, e));
            }
        };
        let own = std::mem::take(&mut blocks[me as usize]);
        let mut batch = Batch::new(w, self.context);
        for (r, b) in blocks.into_iter().enumerate() {
            if r as Rank != me {
                batch.recv(b, r as Rank, tag::ALLTOALL);
            }
        }
        for r in others(me, n) {
            batch.send(outgoing[r as usize], r, tag::ALLTOALL);
        }
        let copied = copy_own(own, outgoing[me as usize]);
        batch.finish().and(copied)
    }
}

//! Alltoall: rank `i`'s block `j` to rank `j`'s block `i`. Small whole vectors of the plain
//! alltoall go through the exchange slots; otherwise (and for every alltoallv) each block goes
//! by the pair exchange: a block of at most its slot size by one RDMA write into the
//! receiver's slot for the sender, a longer one by message (the receiver posts its receives
//! first, the sender sends to rank `me + 1`, `me + 2`, ... in turn: the pairwise order of
//! MPICH and Open MPI, so that no rank is every other's first target).

use std::ops::Range;
use std::sync::atomic::Ordering;

use rdcoll_offload::p2p::{Context, Source, TagSel};
use rdcoll_transport::Rank;
use smallvec::SmallVec;

use super::gather::copy_own;
use super::messages::drop_message;
use super::{block, carve, one_per_rank, others, tag, Batch};
use crate::agreement::{Call, CallKind};
use crate::error::{CollError, Result};
use crate::progress::Waiter;
use crate::reduce::exchange::{Exchange, Kind, PairOp};
use crate::{Collectives, Puts};

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

    /// The pair exchange (`reduce::exchange::pairs`): blocks of at most its slot size go
    /// by one RDMA write each, longer ones by message; the receives of the blocks this rank
    /// expects by message are posted before anything is written.
    fn alltoallv_unchecked(
        &self,
        send: &[u8],
        send_parts: &[Range<usize>],
        recv: &mut [u8],
        recv_parts: &[Range<usize>],
    ) -> Result<()> {
        let w = &self.waiter;
        let n = w.size();
        let checked = one_per_rank(send_parts, n, "alltoallv's send")
            .and_then(|()| one_per_rank(recv_parts, n, "alltoallv's receive"))
            .and_then(|()| {
                let outgoing = (0..n)
                    .map(|r| block(send, &send_parts[r], r))
                    .collect::<Result<SmallVec<[&[u8]; 16]>>>()?;
                Ok((outgoing, carve(recv, recv_parts)?))
            });
        self.with_exchange(|ex, puts| {
            let op = ex.begin_pairs();
            let pairs = Pairs {
                w,
                context: self.context,
                ex,
                puts,
                op,
                batch: Batch::new(w, self.context),
                tag: tag::ALLTOALLV[op.set()],
            };
            match checked {
                Ok((outgoing, blocks)) => pairs.run(&outgoing, blocks),
                Err(e) => pairs.refuse().map(|()| Err(e)),
            }
        })
    }
}

/// One alltoallv through the pair exchange.
struct Pairs<'a, 'b> {
    w: &'b Waiter,
    context: Context,
    ex: &'a mut Exchange,
    puts: &'a mut Puts,
    op: PairOp,
    batch: Batch<'b>,
    tag: u32,
}

impl<'b> Pairs<'_, 'b> {
    /// Moves the blocks: the outer error is the exchange's (it breaks the communicator), the
    /// inner one a block's. A block whose way the two ends see differently is a `Mismatch`,
    /// and nothing is left behind for the next operation: a receive posted for a message that
    /// will not come is withdrawn, a message that came instead of a block in the slot is taken.
    fn run(mut self, outgoing: &[&'b [u8]], mut blocks: Vec<&'b mut [u8]>) -> Result<Result<()>> {
        let (me, n) = (self.w.rank(), self.w.size());
        let limit = self.ex.pair_max();
        let lens: SmallVec<[usize; 16]> = blocks.iter().map(|b| b.len()).collect();
        let own = std::mem::take(&mut blocks[me as usize]);
        for r in others(me, n) {
            if lens[r as usize] > limit {
                self.batch
                    .recv(std::mem::take(&mut blocks[r as usize]), r, self.tag);
            }
        }
        let in_slot = |r: usize| Some(outgoing[r]).filter(|d| d.len() <= limit);
        self.ex
            .publish_pairs(self.w, self.puts, self.op, &in_slot)?;
        for r in others(me, n) {
            if outgoing[r as usize].len() > limit {
                self.batch.send(outgoing[r as usize], r, self.tag);
            }
        }
        // While the peers' blocks are on their way.
        let copied = copy_own(own, outgoing[me as usize]);
        let mut mismatch = None;
        // In the order the peers write to this rank.
        for r in crate::tree::predecessors(me as usize, n).map(|r| r as Rank) {
            let want = lens[r as usize];
            let sent = if want <= limit {
                let block = &mut blocks[r as usize];
                let mut sent = 0;
                let in_slot = self.ex.await_pair(
                    self.w,
                    self.op,
                    r,
                    &after_64_calls(|| self.message_waiting(r)),
                    &mut |d| {
                        sent = d.len();
                        if sent == want {
                            block.copy_from_slice(d);
                        }
                    },
                )?;
                if in_slot {
                    sent
                } else {
                    drop_message(self.w, self.context, self.tag, r).unwrap_or(0)
                }
            } else {
                let flag = self.ex.pair_flag(self.op, r);
                match self
                    .batch
                    .wait_recv_or(r, &|| flag.load(Ordering::Acquire) != 0)
                {
                    Some(Ok(())) => want,
                    Some(Err(e)) => {
                        mismatch.get_or_insert(e);
                        want
                    }
                    None => {
                        let mut sent = 0;
                        self.ex
                            .take_pair(self.w, self.op, r, &mut |d| sent = d.len())?;
                        sent
                    }
                }
            };
            if sent != want {
                mismatch.get_or_insert_with(|| {
                    CollError::Mismatch(format!(
                        "rank {r} sent {sent} bytes where {want} were expected"
                    ))
                });
            }
        }
        let finished = self.batch.finish();
        Ok(mismatch.map_or(finished, Err).and(copied))
    }

    /// Takes part without data (this rank's arguments are wrong): an empty message to every
    /// peer, which then reports a `Mismatch`, and every peer's block taken and dropped, from
    /// its slot or as a message, whichever comes.
    fn refuse(mut self) -> Result<()> {
        let (me, n) = (self.w.rank(), self.w.size());
        self.ex
            .publish_pairs(self.w, self.puts, self.op, &|_| None)?;
        for r in others(me, n) {
            self.batch.send(&[], r, self.tag);
        }
        for r in (0..n as Rank).filter(|&r| r != me) {
            let waiting = || self.message_waiting(r);
            if !self
                .ex
                .await_pair(self.w, self.op, r, &waiting, &mut |_| {})?
            {
                drop_message(self.w, self.context, self.tag, r);
            }
        }
        if let Err(e) = self.batch.finish() {
            tracing::debug!("a refused alltoallv's empty messages: {e}");
        }
        Ok(())
    }

    /// Whether a message of this operation from rank `from` is waiting to be received.
    fn message_waiting(&self, from: Rank) -> bool {
        let source = Source::Rank(self.w.fabric_rank(from));
        let found = self
            .w
            .engine()
            .iprobe(source, TagSel::Value(self.tag), self.context);
        matches!(found, Ok(Some(_)))
    }
}

/// `false` for the first 64 calls, then `look()` at every call: a check too costly for the
/// polls of a wait that normally ends within a few, made at every look once the wait goes on
/// (a sleeping wait is woken by what arrives, so each later call may be the one to see it).
fn after_64_calls(look: impl Fn() -> bool) -> impl Fn() -> bool {
    let calls = std::cell::Cell::new(0u32);
    move || {
        calls.set(calls.get().saturating_add(1));
        calls.get() > 64 && look()
    }
}

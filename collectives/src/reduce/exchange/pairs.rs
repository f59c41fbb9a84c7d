//! The pair exchange: each rank writes every other rank its own block (an alltoallv's) with one
//! RDMA write into the slot the exchange keeps for it there. A block longer than
//! [`PAIR_MAX`] goes by message instead, and its slot is not written. Both ends of a pair know
//! the block's length (the sender's send count is the receiver's receive count), so they agree
//! on the way without asking each other; where a program's counts disagree across the limit,
//! the receiver finds the other way used while it waits (the caller's `instead`), so that an
//! error replaces a wait for ever.
//!
//! The slot sets stay in step as in the other exchanges (the module comment of `exchange`): a
//! rank starts an operation only after it has received every peer's block of the one before,
//! by slot or by message, and each peer sent it only after finishing the operation before
//! that. Blocks are staged in this rank's outgoing slots (registered memory after the two
//! sets), since a write's source must be registered.

use std::sync::atomic::{AtomicU8, Ordering};

use rdcoll_transport::Rank;

use super::{Exchange, Kind, TRAILER};
use crate::error::{CollError, Result};
use crate::progress::Waiter;
use crate::Puts;

/// The longest block a pair exchange writes into a slot; longer ones go by message. Measured
/// with `rdcoll-bench alltoallv --ranks 2` (shm, 2-vCPU VM, alternated with the messages-only
/// code): 1 B-1 KiB 0.70-0.85x its time, 2 KiB 0.9x; a 4 KiB block through the slot costs
/// about what it does by message.
pub(crate) const PAIR_MAX: usize = 2 << 10;

/// One pair exchange under way: its slot set and counter.
#[derive(Clone, Copy)]
pub(crate) struct PairOp {
    set: usize,
    counter: u8,
}

impl PairOp {
    /// Which of the two slot sets the operation uses: alternate operations use different
    /// message tags too, so that a receive of this one can never take the next one's message.
    pub(crate) fn set(self) -> usize {
        self.set
    }
}

impl Exchange {
    /// The longest block a pair exchange writes into a slot (the same on every rank).
    pub(crate) fn pair_max(&self) -> usize {
        PAIR_MAX.min(self.capacity())
    }

    /// Starts a pair exchange (every rank starts the same operations in the same order).
    pub(crate) fn begin_pairs(&mut self) -> PairOp {
        let set = (self.count % 2) as usize;
        self.count += 1;
        let counter = ((self.count - 1) % 255) as u8 + 1;
        PairOp { set, counter }
    }

    /// Writes `out(r)`, where it is a block, into every other rank `r`'s slot for this rank.
    pub(crate) fn publish_pairs<'d>(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        op: PairOp,
        out: &dyn Fn(usize) -> Option<&'d [u8]>,
    ) -> Result<()> {
        let me = w.rank() as usize;
        let mut free = puts.issued == 0;
        for r in crate::tree::successors(me, self.n) {
            let Some(block) = out(r) else { continue };
            if !free {
                // The outgoing slots' last writes are complete before any is written again
                // (looked at only when one is: an alltoallv of long blocks writes none).
                w.puts_done(puts.ct, self.pairs_issued)?;
                free = true;
            }
            let m = block.len();
            if m > self.pair_max() {
                return Err(CollError::InvalidArgument(format!(
                    "a {m}-byte block exceeds the {}-byte pair slots",
                    self.pair_max()
                )));
            }
            let staged = 2 * self.n * self.stride + (r + 1) * self.pair_stride - TRAILER - m;
            // SAFETY: this rank's outgoing slot for `r`, in the part of its area no peer
            // writes; no write out of it is in flight (all are complete, just above).
            unsafe { self.stage(staged, block, Kind::Pairs) }?;
            let (at, _) = self.place(op.set, me, m);
            puts.put(
                w,
                self.area.local(),
                staged,
                m + TRAILER - 1,
                self.area.at(r as Rank, at),
                Some(op.counter),
            )?;
        }
        self.pairs_issued = puts.issued;
        Ok(())
    }

    /// Waits for rank `from`'s block of operation `op` in its slot and hands it to `take`;
    /// `false` if `instead()` turned true first (nothing taken). `instead` may probe for
    /// messages (it is never asked under the fabric's lock).
    pub(crate) fn await_pair(
        &self,
        w: &Waiter,
        op: PairOp,
        from: Rank,
        instead: &dyn Fn() -> bool,
        take: &mut dyn FnMut(&[u8]),
    ) -> Result<bool> {
        let flag = self.pair_flag(op, from);
        w.until_probing(from, &|| flag.load(Ordering::Acquire) != 0 || instead())?;
        if flag.load(Ordering::Acquire) == 0 {
            return Ok(false);
        }
        self.take_pair(w, op, from, take)?;
        Ok(true)
    }

    /// Hands rank `from`'s block of operation `op` (waited for) to `take` and frees its slot.
    pub(crate) fn take_pair(
        &self,
        w: &Waiter,
        op: PairOp,
        from: Rank,
        take: &mut dyn FnMut(&[u8]),
    ) -> Result<()> {
        let (_, trailer) = self.place(op.set, from as usize, 0);
        let len = self.arrived(w, from as usize, trailer, op.counter, Kind::Pairs)?;
        // SAFETY: slot `from` of this set is not written again before this rank has finished
        // this operation (the module comment).
        unsafe { self.area.local().with_bytes(trailer - len, len, take) }?;
        self.pair_flag(op, from).store(0, Ordering::Release);
        Ok(())
    }

    /// The byte that turns nonzero when rank `from`'s block of operation `op` is in its slot.
    pub(crate) fn pair_flag(&self, op: PairOp, from: Rank) -> &AtomicU8 {
        let (_, trailer) = self.place(op.set, from as usize, 0);
        self.area.flag(trailer + TRAILER - 1)
    }
}

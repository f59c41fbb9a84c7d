//! Barrier by dissemination over RDMA-write flags (issue 7): in round `r` every rank writes
//! one byte into the round-`r` flag of rank `me + 2^r` and waits for its own round-`r` flag
//! from rank `me - 2^r`; after `ceil(log2 n)` rounds every rank has heard, through some
//! chain, from every other. No data moves beyond one byte per peer per round.
//!
//! The byte is the barrier's number (mod 256, starting at 1; the initial 0 is barrier 0). A rank can be at most one
//! barrier ahead of another (it cannot leave barrier `b` before everyone entered it), so a
//! flag is "set for barrier `b`" when it is at or past `b` in wrapping order: a faster rank
//! that already wrote `b + 1` does not hide `b`.

use std::sync::atomic::Ordering;

use rdcoll_offload::p2p::{Context, Engine};
use rdcoll_transport::Rank;

use crate::area::Area;
use crate::error::Result;
use crate::progress::Waiter;
use crate::schedule::ceil_log2;
use crate::Puts;

/// One communicator's barrier state.
pub(crate) struct Barrier {
    area: Area,
    rounds: usize,
    count: u64,
}

impl Barrier {
    /// Registers the flags (one byte per round) and exchanges their addresses. Collective.
    pub(crate) fn new(engine: &Engine, context: Context) -> Result<Barrier> {
        let rounds = ceil_log2(engine.size());
        Ok(Barrier {
            area: Area::new(engine, context, rounds.max(1))?,
            rounds,
            count: 0,
        })
    }

    /// Waits until every rank has entered the barrier.
    pub(crate) fn wait(&mut self, w: &Waiter, puts: &mut Puts) -> Result<()> {
        let fabric = w.fabric();
        let (me, n) = (fabric.rank() as usize, fabric.size());
        self.count += 1;
        let mark = self.count as u8;
        for r in 0..self.rounds {
            let dist = 1usize << r;
            let to = ((me + dist) % n) as Rank;
            let from = ((me + n - dist % n) % n) as Rank;
            puts.put(w, self.area.local(), 0, 0, self.area.at(to, r), Some(mark))?;
            let flag = self.area.flag(r);
            // The initial 0 reads as "255 barriers ago", never as done.
            w.until(from, &|| {
                flag.load(Ordering::Acquire).wrapping_sub(mark) as i8 >= 0
            })?;
        }
        Ok(())
    }
}

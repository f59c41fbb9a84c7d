//! Barriers over RDMA-write flags (issue 7). No data moves beyond one byte per peer per round.
//!
//! - Dissemination: in round `r` every rank writes one byte into the round-`r` flag of rank
//!   `me + 2^r` and waits for its own round-`r` flag from rank `me - 2^r`; after
//!   `ceil(log2 n)` rounds every rank has heard, through some chain, from every other.
//! - Flat: every other rank writes its arrival byte into its own slot at rank 0; rank 0 waits
//!   for all of them, then writes a release byte to each. Two hops instead of `log2 n`, but
//!   one wait per rank instead of one per round: when ranks outnumber cores each wait can be
//!   a context switch, and that is what a barrier costs there (docs/ALGORITHMS.md,
//!   "Barrier").
//!
//! The byte is the barrier's number (mod 256, starting at 1; the initial 0 is barrier 0). A
//! rank can be at most one barrier ahead of another (it cannot leave barrier `b` before
//! everyone entered it), so a flag is "set for barrier `b`" when it is at or past `b` in
//! wrapping order: a faster rank that already wrote `b + 1` does not hide `b`.

use std::sync::atomic::{AtomicU8, Ordering};

use rdcoll_offload::p2p::Context;
use rdcoll_transport::Rank;

use crate::area::Area;
use crate::config::BarrierAlgorithm;
use crate::error::Result;
use crate::placement;
use crate::progress::Waiter;
use crate::schedule::ceil_log2;
use crate::Puts;

/// The algorithm `setting` means for `n` ranks of `engine`. The same on every rank.
fn resolve(setting: BarrierAlgorithm, w: &Waiter) -> BarrierAlgorithm {
    match setting {
        BarrierAlgorithm::Auto if placement::crowded_host(w.engine()) => BarrierAlgorithm::Flat,
        BarrierAlgorithm::Auto => BarrierAlgorithm::Dissemination,
        chosen => chosen,
    }
}

/// Whether `flag` says barrier `mark` (or a later one) was reached.
fn reached(flag: &AtomicU8, mark: u8) -> bool {
    // The initial 0 reads as "255 barriers ago", never as done.
    flag.load(Ordering::Acquire).wrapping_sub(mark) as i8 >= 0
}

/// One communicator's barrier state.
pub(crate) struct Barrier {
    area: Area,
    algorithm: BarrierAlgorithm,
    count: u64,
}

impl Barrier {
    /// Registers the flags and exchanges their addresses. Collective.
    ///
    /// Dissemination uses one byte per round; flat uses one arrival byte per rank (at rank 0)
    /// and a release byte. The sizes differ for every `n`, so ranks that resolved to
    /// different algorithms get a mismatch error here instead of a hang.
    pub(crate) fn new(w: &Waiter, context: Context, setting: BarrierAlgorithm) -> Result<Barrier> {
        let algorithm = resolve(setting, w);
        let len = match algorithm {
            BarrierAlgorithm::Flat => w.size() + 1,
            _ => ceil_log2(w.size()).max(1),
        };
        Ok(Barrier {
            area: Area::new(w, context, len)?,
            algorithm,
            count: 0,
        })
    }

    /// Waits until every rank has entered the barrier.
    pub(crate) fn wait(&mut self, w: &Waiter, puts: &mut Puts) -> Result<()> {
        self.count += 1;
        let mark = self.count as u8;
        match self.algorithm {
            BarrierAlgorithm::Flat => self.flat(w, puts, mark),
            _ => self.dissemination(w, puts, mark),
        }
    }

    fn dissemination(&self, w: &Waiter, puts: &mut Puts, mark: u8) -> Result<()> {
        let (me, n) = (w.rank() as usize, w.size());
        for r in 0..ceil_log2(n) {
            let dist = 1usize << r;
            let to = ((me + dist) % n) as Rank;
            let from = ((me + n - dist % n) % n) as Rank;
            puts.put(w, self.area.local(), 0, 0, self.area.at(to, r), Some(mark))?;
            let flag = self.area.flag(r);
            w.until(from, &|| reached(flag, mark))?;
        }
        Ok(())
    }

    /// Arrival of rank `r` is byte `r` at rank 0; the release is byte `n` at every rank.
    fn flat(&self, w: &Waiter, puts: &mut Puts, mark: u8) -> Result<()> {
        let (me, n) = (w.rank() as usize, w.size());
        if me == 0 {
            for from in 1..n {
                let flag = self.area.flag(from);
                w.until(from as Rank, &|| reached(flag, mark))?;
            }
            for to in 1..n {
                puts.put(
                    w,
                    self.area.local(),
                    0,
                    0,
                    self.area.at(to as Rank, n),
                    Some(mark),
                )?;
            }
        } else if n > 1 {
            puts.put(w, self.area.local(), 0, 0, self.area.at(0, me), Some(mark))?;
            let flag = self.area.flag(n);
            w.until(0, &|| reached(flag, mark))?;
        }
        Ok(())
    }
}

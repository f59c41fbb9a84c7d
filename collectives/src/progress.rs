//! Waiting for a flag that a peer's RDMA write sets: spin briefly, then yield, then sleep on
//! the fabric until woken (so more ranks than cores stay usable), driving the offload agent's
//! work meanwhile (peers may need this rank to serve their gets, and the completions of this
//! rank's own puts are counted there), and failing, not hanging, once a rank of the
//! communicator has failed. In thread mode the waiting thread notes that it polls, so the
//! agent stands aside rather than contend with it or sleep on the fabric (a sleeping agent
//! makes every peer's flag write ring a futex: 3x Open MPI's barrier time on a 16-core host).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rdcoll_offload::core_share;
use rdcoll_offload::p2p::{Engine, Members};
use rdcoll_offload::CtHandle;
use rdcoll_transport::{Fabric, Rank, TransportError};

use crate::area::Area;
use crate::error::{CollError, Result};
use crate::Puts;

/// How long a wait spins before it yields.
const SPIN: Duration = Duration::from_micros(50);
/// How long a wait polls before it sleeps.
const POLL: Duration = Duration::from_millis(2);
/// Longest single sleep (failures are looked for between sleeps).
const SLEEP: Duration = Duration::from_millis(1);
/// Polls between looks at the peers' liveness while spinning.
const LIVENESS_EVERY: u32 = 256;
/// Polls between two notes that this thread polls (thread mode): the note is a store to a line
/// the agent reads.
const NOTE_EVERY: u32 = 32;

thread_local! {
    /// This thread runs collectives in the background (a communicator's collective thread)
    /// while the program computes on its own threads: its waits sleep after spinning, rather
    /// than yield, so that a peer's write wakes it at once instead of after the computing
    /// thread's time slice.
    static BACKGROUND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as one that runs collectives in the background (see
/// `BACKGROUND`).
pub fn run_in_background() {
    BACKGROUND.with(|b| b.set(true));
}

/// Waits on behalf of one communicator's collectives.
pub(crate) struct Waiter {
    engine: Arc<Engine>,
    fabric: Arc<dyn Fabric>,
    /// The communicator's ranks (the collectives number ranks as the communicator does; the
    /// fabric, and what it says about failures, as the job does).
    members: Members,
    /// More ranks on this host than cores: spinning only keeps the rank we wait for off its
    /// core, so waits yield at once.
    crowded: bool,
    /// One byte per rank, set by a rank whose collective failed (so that ranks waiting for
    /// something it will now never send stop waiting); known once set up.
    aborts: OnceLock<Area>,
}

impl Waiter {
    pub(crate) fn new(engine: Arc<Engine>, members: Members) -> Waiter {
        let fabric = engine.ni().fabric().clone();
        Waiter {
            crowded: engine.crowded(),
            engine,
            fabric,
            members,
            aborts: OnceLock::new(),
        }
    }

    /// This rank in the communicator.
    pub(crate) fn rank(&self) -> Rank {
        self.members.me()
    }

    /// Ranks in the communicator.
    pub(crate) fn size(&self) -> usize {
        self.members.size()
    }

    /// The job's (fabric's) rank of communicator rank `r` (in range).
    pub(crate) fn fabric_rank(&self, r: Rank) -> Rank {
        self.members.fabric_rank_of(r)
    }

    /// The communicator rank of the job's rank `r` (`PROC_NULL` if not a member).
    pub(crate) fn comm_rank(&self, r: Rank) -> Rank {
        self.members.comm_rank(r)
    }

    /// Whether communicator rank `r` has failed.
    pub(crate) fn is_failed(&self, r: Rank) -> bool {
        self.fabric.is_failed(self.fabric_rank(r))
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether the ranks on this host outnumber its cores (`Engine::crowded`).
    pub(crate) fn crowded(&self) -> bool {
        self.crowded
    }

    pub(crate) fn fabric(&self) -> &dyn Fabric {
        self.fabric.as_ref()
    }

    /// Sets up the abort bytes (collective; done by the first collective).
    pub(crate) fn set_up(&self, context: rdcoll_offload::p2p::Context) -> Result<()> {
        if self.aborts.get().is_none() {
            let area = Area::new(self, context, self.size())?;
            let _ = self.aborts.set(area);
        }
        Ok(())
    }

    /// Tells every other rank that this rank's collective failed (best effort: a rank that
    /// cannot be reached has failed itself).
    pub(crate) fn abort(&self, puts: &mut Puts) {
        let Some(area) = self.aborts.get() else {
            return;
        };
        let me = self.rank();
        for peer in (0..self.size() as Rank).filter(|&p| p != me) {
            let dst = area.at(peer, me as usize);
            // Best effort: a rank that cannot be reached has failed itself.
            let _ = puts.put(self, area.local(), 0, 0, dst, Some(1));
        }
    }

    /// Returns once the flag test `ready` holds (it may only read memory: it is also asked
    /// under the fabric's own lock, see `Fabric::block_unless`). `from` is the rank that makes
    /// it hold: once it has failed (and `ready` still does not hold), or another rank's
    /// collective has failed, the wait fails instead of hanging.
    pub(crate) fn until(&self, from: Rank, ready: &dyn Fn() -> bool) -> Result<()> {
        self.wait(from, ready, true)
    }

    /// [`until`](Waiter::until) for a test that does more than read memory (it may take
    /// locks, probe for messages): it is never asked under the fabric's lock, so a sleeping
    /// wait looks again only when woken or after a slice of sleep, not at the moment a flag is
    /// written.
    pub(crate) fn until_probing(&self, from: Rank, ready: &dyn Fn() -> bool) -> Result<()> {
        self.wait(from, ready, false)
    }

    fn wait(&self, from: Rank, ready: &dyn Fn() -> bool, flag: bool) -> Result<()> {
        let mut polls = 0u32;
        // When it started backing off, by the fabric's clock (virtual in a simulation).
        let mut since: Option<Duration> = None;
        // Past `POLL`: sleeping between looks, no longer polling for the agent.
        let mut sleeping = false;
        let poll_for = if BACKGROUND.with(|b| b.get()) {
            SPIN
        } else {
            POLL
        };
        loop {
            if ready() {
                return Ok(());
            }
            polls = polls.wrapping_add(1);
            let ni = self.engine.ni();
            if !sleeping && (self.crowded || polls % NOTE_EVERY == 1) {
                // Crowded, every poll yields, and NOTE_EVERY of them can outlast the agent's
                // grace.
                ni.note_host_polling();
            }
            // Also when a pass left matched receives its collector could not take: nothing
            // new may ever arrive for them (their senders wait for this rank's gets).
            if (self.fabric.pending() || ni.directs_left()) && ni.progress() > 0 {
                // Something happened: look again before backing off.
                since = None;
                sleeping = false;
                continue;
            }
            if polls.is_multiple_of(LIVENESS_EVERY) {
                self.check(from, ready)?;
            }
            if !polls.is_multiple_of(32) && !self.crowded {
                std::hint::spin_loop();
                continue;
            }
            let now = self.fabric.now();
            let waited = now.saturating_sub(*since.get_or_insert(now));
            // A simulated clock moves only while every rank sleeps: sleep at once there.
            let virtual_clock = self.fabric.clock_is_virtual();
            if waited < core_share::spin_budget(SPIN) && !self.crowded && !virtual_clock {
                std::hint::spin_loop();
            } else if waited < poll_for && !virtual_clock {
                core_share::yield_core(self.fabric.as_ref(), self.engine.home());
            } else {
                sleeping = true;
                self.check(from, ready)?;
                let slice = if virtual_clock {
                    rdcoll_transport::VIRTUAL_CLOCK_SLEEP
                } else {
                    SLEEP
                };
                if flag {
                    self.fabric.block_unless(slice, ready);
                } else {
                    self.fabric.block(slice);
                }
            }
        }
    }

    /// Waits until every put counted on `ct` has completed (`issued` of them), successfully
    /// or not: a put into a rank that has gone fails, and whether that matters is for the
    /// ranks that wait for that rank to say.
    pub(crate) fn puts_done(&self, ct: CtHandle, issued: u64) -> Result<()> {
        let ni = self.engine.ni();
        // Takes the interface's lock: not a flag test (the loop drives the agent).
        let done = || {
            ni.ct_peek(ct)
                .map(|v| v.success + v.failure >= issued)
                .unwrap_or(true)
        };
        // Completions come from this rank's own fabric: no peer to watch.
        self.wait(self.rank(), &done, false)
    }

    fn check(&self, from: Rank, ready: &dyn Fn() -> bool) -> Result<()> {
        let failed = from != self.rank() && self.is_failed(from);
        let aborted = self.aborted_by();
        if (failed || aborted.is_some()) && !ready() {
            // What a peer wrote before it failed counts: `ready` was looked at last.
            // A rank that said its collective failed is the cause even if it has gone since.
            return Err(match aborted {
                Some(r) => CollError::Broken(format!("the collective failed on rank {r}")),
                None => TransportError::PeerFailed(self.fabric_rank(from)).into(),
            });
        }
        Ok(())
    }

    /// Fails if one of `ranks` has failed, or any rank said its collective failed (for
    /// collectives that wait on many ranks at once, such as the multicast).
    pub(crate) fn check_ranks(&self, ranks: impl IntoIterator<Item = Rank>) -> Result<()> {
        if let Some(r) = self.aborted_by() {
            return Err(CollError::Broken(format!(
                "the collective failed on rank {r}"
            )));
        }
        match ranks
            .into_iter()
            .find(|&r| r != self.rank() && self.is_failed(r))
        {
            Some(r) => Err(TransportError::PeerFailed(self.fabric_rank(r)).into()),
            None => Ok(()),
        }
    }

    /// Whether `rank` said its collective failed.
    pub(crate) fn has_aborted(&self, rank: Rank) -> bool {
        self.aborts.get().is_some_and(|area| {
            (rank as usize) < self.size()
                && area
                    .flag(rank as usize)
                    .load(std::sync::atomic::Ordering::Acquire)
                    != 0
        })
    }

    /// A rank that said its collective failed.
    fn aborted_by(&self) -> Option<Rank> {
        let area = self.aborts.get()?;
        (0..self.size()).find_map(|r| {
            (area.flag(r).load(std::sync::atomic::Ordering::Acquire) != 0).then_some(r as Rank)
        })
    }
}

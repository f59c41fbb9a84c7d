//! How a wait backs off while nothing happens ([`Backoff`]), and [`Engine::idle`], the step
//! every wait of the point-to-point engine takes between two looks.

use std::time::Duration;

use rdcoll_transport::Fabric;

use super::Engine;

impl Engine {
    /// One step of backing off while waiting (see [`Backoff`]).
    pub fn idle(&self, backoff: &mut Backoff) {
        let now = self.activity.load(std::sync::atomic::Ordering::Relaxed);
        if now != backoff.activity {
            // Something happened (a chunk landed, a get was served): not idle.
            *backoff = Backoff {
                activity: now,
                ..Backoff::default()
            };
        }
        let step = backoff.step(self.ni.fabric().as_ref());
        if !matches!(step, Step::Block) && backoff.polls % NOTE_EVERY == 1 {
            // Also between this wait's progress passes (the fast receive's idle polls).
            self.ni.note_host_polling();
        }
        match step {
            Step::Spin if self.crowded => std::thread::yield_now(),
            Step::Spin => std::hint::spin_loop(),
            Step::Yield => crate::core_share::yield_core(self.ni.fabric().as_ref(), self.home),
            Step::Block => {
                let mark = backoff.mark.unwrap_or_else(|| self.ni.activity_mark());
                let slice = if self.ni.fabric().clock_is_virtual() {
                    rdcoll_transport::VIRTUAL_CLOCK_SLEEP
                } else {
                    Duration::from_millis(1)
                };
                self.ni.wait_activity(mark, slice);
            }
        }
        if backoff.polls % CLOCK_EVERY == CLOCK_EVERY - 1 {
            // The next step may sleep (it reads the clock): the mark is taken before the
            // caller's look that precedes it, so a change from then on ends that sleep.
            backoff.mark = Some(self.ni.activity_mark());
        }
    }
}

/// A waiting host thread notes that it polls (`Ni::note_host_polling`) at its first and then
/// every 32nd idle poll, not at each: the note is a store to a line the agent reads, and the
/// host's next locked instruction waits for that store to own the line.
const NOTE_EVERY: u32 = 32;

/// A wait reads the clock (and so may step to yielding or sleeping) at every this many polls.
const CLOCK_EVERY: u32 = 32;

/// How a wait backs off while nothing happens: it spins for [`Backoff::SPIN`] (a peer on
/// another core answers within that; less while the core is wanted by another thread, see
/// `core_share`), then yields until [`Backoff::YIELD`] has passed (so ranks
/// sharing a core take turns), then sleeps on the fabric in 1 ms slices (woken by arrivals).
/// Any progress starts it over. In thread mode a spinning or yielding wait notes that it polls
/// (`Ni::note_host_polling`), so the agent leaves the messages to it; asleep, it waits for
/// the agent's notifications instead.
#[derive(Debug, Default)]
pub struct Backoff {
    /// When the wait started backing off, by the fabric's clock.
    since: Option<Duration>,
    polls: u32,
    activity: u64,
    /// Past [`Backoff::SPIN`]: yielding (the clock is read only every 32nd poll).
    yielding: bool,
    /// Where the agent's notifications stood before the caller's last look (thread mode;
    /// taken before each step that reads the clock, as only those can sleep).
    mark: Option<crate::ni::ActivityMark>,
}

enum Step {
    Spin,
    Yield,
    Block,
}

impl Backoff {
    /// How long a wait spins.
    pub const SPIN: Duration = Duration::from_micros(50);
    /// How long a wait polls (spinning, then yielding) before it sleeps.
    pub const YIELD: Duration = Duration::from_millis(2);

    /// The next step; `clock` (the fabric) is read at every 32nd poll.
    fn step(&mut self, clock: &dyn Fabric) -> Step {
        self.polls = self.polls.wrapping_add(1);
        // Reading the clock every poll would cost more than a poll, and so would reading it
        // at the first: most waits for a peer on another core end within 32 polls, and one
        // that ends during a clock read (25-50 ns on this VM) ends that much later.
        if !self.polls.is_multiple_of(CLOCK_EVERY) {
            return if self.yielding {
                Step::Yield
            } else {
                Step::Spin
            };
        }
        if clock.clock_is_virtual() {
            // Simulated time passes only while every rank sleeps in the fabric: spinning
            // until it has passed would never end.
            return Step::Block;
        }
        let now = clock.now();
        let since = *self.since.get_or_insert(now);
        match now.saturating_sub(since) {
            e if e < crate::core_share::spin_budget(Self::SPIN) => Step::Spin,
            e if e < Self::YIELD => {
                self.yielding = true;
                Step::Yield
            }
            _ => {
                // Past the spinning and yielding phases, also when one clock read jumped both.
                self.yielding = true;
                Step::Block
            }
        }
    }
}

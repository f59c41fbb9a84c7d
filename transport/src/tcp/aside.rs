//! The I/O thread stands aside from reading while host threads poll the sockets themselves,
//! where the ranks of a host outnumber its cores (the engine says so: `Fabric::note_crowded`).
//!
//! Why: a host thread that waits reads the sockets at every poll (`Shared::read_now`), and
//! the I/O thread, woken by every frame that arrives, competes with it for a core it does not
//! have: a context switch per message, each taking the core from a rank with work to do. 4
//! ranks over tcp on 2 vCPUs: an 8-byte bcast took 40-60 us and an allreduce 85-125 us with
//! the I/O thread reading, 23-34 and 40-53 with it never reading.
//!
//! How: the hosts count their polls (`Shared::host_polls`). When the I/O thread wakes and sees
//! the count moved, it stops watching the sockets for reading (it keeps writing, beating and
//! failing silent peers); it watches them again once no host thread has polled for [`QUIET`],
//! or at once when a host thread goes to sleep (`Shared::sleeping`, which wakes it), and then
//! reads every peer once, since bytes that came meanwhile raised no readiness event. It never
//! stands aside while a host thread sleeps: the I/O thread publishes that it stands aside and
//! then looks for sleepers, a host thread counts itself asleep and then looks whether it
//! stands aside (both sequentially consistent), so at least one of them sees the other.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

use super::Shared;

/// How long host threads must leave the sockets alone before the I/O thread reads them again
/// (and how often it looks while it stands aside).
pub(super) const QUIET: Duration = Duration::from_millis(1);

/// The I/O thread's side: whether it stands aside, and what it last saw of the hosts' polls.
pub(super) struct Aside {
    active: bool,
    seen: u64,
    /// When the hosts' poll count was last seen to move.
    moved_at: Option<Instant>,
}

impl Aside {
    pub(super) fn new() -> Aside {
        Aside {
            active: false,
            seen: 0,
            moved_at: None,
        }
    }

    /// The longest the I/O thread may sleep in its poll, from `timeout`.
    pub(super) fn timeout(&self, timeout: Duration) -> Duration {
        if self.active {
            timeout.min(QUIET)
        } else {
            timeout
        }
    }

    /// After each wake of the I/O thread: stands aside, or goes back to reading. `true` when
    /// it went back: every peer must then be read once.
    pub(super) fn update(&mut self, sh: &Shared, registry: &Registry) -> bool {
        let crowded = sh.crowded.load(Ordering::Relaxed);
        let polls = sh.host_polls.load(Ordering::Relaxed);
        let now = Instant::now();
        if polls != self.seen {
            self.seen = polls;
            self.moved_at = Some(now);
        }
        let polling = self.moved_at.is_some_and(|t| now - t < QUIET);
        let stay = |sh: &Shared| crowded && polling && sh.asleep.load(Ordering::SeqCst) == 0;
        if !self.active {
            if !stay(sh) {
                return false;
            }
            sh.aside.store(true, Ordering::SeqCst);
            if !stay(sh) {
                // A host thread fell asleep meanwhile (it may not have seen `aside`).
                sh.aside.store(false, Ordering::SeqCst);
                return false;
            }
            watch(sh, registry, Interest::WRITABLE);
            self.active = true;
            return false;
        }
        if stay(sh) {
            return false;
        }
        // Cleared before the sockets are watched again: a host thread that goes to sleep
        // after this wakes nobody, and one that went before is served by the reads below.
        sh.aside.store(false, Ordering::SeqCst);
        watch(sh, registry, Interest::READABLE | Interest::WRITABLE);
        self.active = false;
        self.moved_at = None;
        true
    }
}

/// Watches every live peer's socket for `interest`.
fn watch(sh: &Shared, registry: &Registry, interest: Interest) {
    for (r, peer) in sh.peers.iter().enumerate() {
        let Some(stream) = &peer.stream else { continue };
        if peer.failed.load(Ordering::Acquire) {
            continue;
        }
        let fd = stream.as_raw_fd();
        if let Err(e) = registry.reregister(&mut SourceFd(&fd), Token(r), interest) {
            tracing::debug!(
                "rank {}: watching peer {r}'s socket again failed: {e}",
                sh.rank
            );
        }
    }
}

impl Shared {
    /// Runs `sleep` (a host thread's sleep) counted as asleep: an I/O thread that stands aside
    /// is woken to read again (nobody else would see what arrives), and none stands aside
    /// until it wakes.
    pub(super) fn sleeping(&self, sleep: impl FnOnce()) {
        if !self.crowded.load(Ordering::Relaxed) {
            return sleep();
        }
        self.asleep.fetch_add(1, Ordering::SeqCst);
        if self.aside.load(Ordering::SeqCst) {
            let _ = self.waker.wake();
        }
        sleep();
        self.asleep.fetch_sub(1, Ordering::SeqCst);
    }

    /// Counts a host thread's poll of the sockets (a plain store: the I/O thread only needs to
    /// see the count move).
    pub(super) fn host_polled(&self) {
        if self.crowded.load(Ordering::Relaxed) {
            let n = self.host_polls.load(Ordering::Relaxed);
            self.host_polls.store(n.wrapping_add(1), Ordering::Relaxed);
        }
    }
}

//! The progress agent: drains the fabric and runs all target-side work. In thread mode a
//! dedicated thread runs it; in inline mode the host's calls do.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rdcoll_transport::SpinGuard;
use rdcoll_transport::{Event as FabricEvent, EventRef};

use crate::state::State;
use crate::types::NiFail;
use crate::wire::Msg;
use crate::Shared;

/// Most fabric events handled per lock hold, so host calls get the lock between batches.
const BATCH: usize = 64;

/// How long the agent sleeps between two looks while a host thread works in the library.
const STAND_ASIDE_NAP: Duration = Duration::from_micros(100);

/// Pauses (5-12 us) before the agent tries the state lock again after a host thread held it.
const LOCK_RETRY_SPINS: u32 = 256;

/// Handles what the fabric has ready; returns how many fabric events it handled.
pub(crate) fn progress(shared: &Shared) -> usize {
    progress_guarded(shared, shared.state.lock())
}

/// [`progress`] for the agent thread, if the state lock is free: a host thread holding it is
/// working in the library, and an agent asleep on the lock would cost that thread a wake-up
/// system call when it lets go. `None` if the lock was taken.
fn try_progress(shared: &Shared) -> Option<usize> {
    Some(progress_guarded(shared, shared.state.try_lock()?))
}

/// [`progress_locked`] under `st`, then a notification for thread-mode host waiters.
/// Matched direct receives then go to their owner's collector (MPI's progress rule: a matched
/// rendezvous gets its gets issued whatever the host waits in, or while it computes); when the
/// collector cannot take them now, the pass counts as work, so that the agent comes back soon.
fn progress_guarded(shared: &Shared, mut st: SpinGuard<'_, State>) -> usize {
    let handled = progress_locked(&mut st);
    let directs_waiting = !st.direct_done.is_empty();
    if !directs_waiting && shared.directs_left.load(Ordering::Relaxed) {
        // Taken by now (by a collector or an owner's own pass). Cleared under the lock, so
        // that a later failed collection's mark (set after its pass let go) is never lost.
        shared.directs_left.store(false, Ordering::Release);
    }
    drop(st);
    // Only a thread-mode host waits for notifications.
    if handled > 0 && shared.mode == crate::Mode::Thread {
        shared.changed.notify_all();
    }
    if directs_waiting {
        if let Some(collect) = shared.direct_collector.get() {
            if !collect() {
                // Whoever drives the agent next must come back for them, fabric news or not.
                shared.directs_left.store(true, Ordering::Release);
                return handled.max(1);
            }
            if shared.directs_left.load(Ordering::Acquire) {
                // Taken now: unmark, unless a pass since left more.
                let st = shared.state.lock();
                if st.direct_done.is_empty() {
                    shared.directs_left.store(false, Ordering::Release);
                }
            }
        }
    }
    handled
}

/// [`progress`] with the state already locked (the caller notifies waiters).
pub(crate) fn progress_locked(st: &mut State) -> usize {
    // An error after some events were handled ends the batch with their count (the next
    // poll meets it again and it is logged then).
    let handled = match st.poll_fabric_batch(BATCH, &mut handle_ref) {
        Ok(n) => n,
        Err(e) => {
            tracing::error!("offload agent: polling the fabric failed: {e}");
            0
        }
    };
    if handled > 0 {
        if let Err(e) = st.fire_ready() {
            tracing::error!("offload agent: firing triggered operations failed: {e}");
        }
    }
    handled
}

/// Handles one fabric event, a message's bytes read where the transport holds them (the fast
/// receive path hands over what it does not take).
pub(crate) fn handle_ref(st: &mut State, ev: EventRef<'_>) {
    match ev {
        EventRef::Message { src, data } => handle_message(st, src, data),
        EventRef::Owned(ev) => handle(st, ev),
    }
}

/// Handles one message from `src`.
fn handle_message(st: &mut State, src: rdcoll_transport::Rank, data: &[u8]) {
    match Msg::decode(data) {
        Some(Msg::Done {
            op,
            fail,
            no_ack,
            list,
            mlength,
            remote_offset,
            ..
        }) => {
            let answer = crate::initiator::Answer {
                fail,
                no_ack,
                list,
                mlength,
                remote_offset,
            };
            crate::initiator::on_done(st, src, op, answer)
        }
        Some(msg) => crate::target::on_message(st, src, msg),
        None => tracing::warn!("offload agent: malformed message from rank {src} dropped"),
    }
}

/// Handles one fabric event.
fn handle(st: &mut State, ev: FabricEvent) {
    match ev {
        FabricEvent::Message { src, data } => handle_message(st, src, &data),
        FabricEvent::Completed { op, result } => {
            if let Some(g) = st.direct_gets.remove(&op) {
                if let Err(e) = &result {
                    tracing::debug!("offload agent: a direct get failed: {e}");
                }
                crate::initiator::direct_get_done(st, g, result.is_ok());
            } else if let Some((ct, _)) = st.raw_ops.remove(&op) {
                if let Err(e) = &result {
                    tracing::debug!("offload agent: an RDMA put or get failed: {e}");
                }
                st.count(Some(ct), result.is_ok(), 1);
            } else if let Some(t) = st.transfers.remove(&op) {
                let fail = if result.is_ok() {
                    NiFail::Ok
                } else {
                    NiFail::Undeliverable
                };
                crate::target::finish(st, t, fail);
            } else {
                st.early_completions.insert(op, result.is_ok());
            }
        }
        FabricEvent::PeerFailed { rank } => {
            let i = rank as usize;
            if st.failed_peers.len() <= i {
                st.failed_peers.resize(i + 1, false);
            }
            st.failed_peers[i] = true;
            // RDMA operations a dead peer will never complete fail now.
            let dead: Vec<rdcoll_transport::OpId> = st
                .raw_ops
                .iter()
                .filter(|(_, &(_, peer))| peer == rank)
                .map(|(&op, _)| op)
                .collect();
            for op in dead {
                if let Some((ct, _)) = st.raw_ops.remove(&op) {
                    st.count(Some(ct), false, 1);
                }
            }
            crate::initiator::on_peer_failed(st, rank)
        }
        FabricEvent::Immediate { .. } => {}
    }
}

/// Runs the agent until `shared.stop` is set: it polls for `poll` after its last event (with
/// plain loads, not the state lock), then sleeps until the fabric has something. While a host
/// thread works in the library (it polled in a wait within `grace`, or posted a send or
/// receive within `grace` and polled within [`POSTING_SPAN`]: [`HostWatch`]), that thread
/// does the agent's work and the agent stands aside, touching nothing the host uses: it
/// naps, and looks again.
pub(crate) fn run(shared: Arc<Shared>, poll: Duration, grace: Duration) {
    let fabric = shared.state.lock().fabric.clone();
    // Time is read through the fabric (a simulated one supplies virtual time).
    let mut last_event = fabric.now();
    let mut host = HostWatch::new(&shared);
    while !shared.stop.load(Ordering::Acquire) {
        if host.host_working(grace, fabric.now()) {
            // Naps even with a core of its own: while the host works in the library the agent
            // has nothing to answer quickly, and a spinning agent takes a core for nothing
            // (and the host's, where the scheduler puts them together).
            std::thread::sleep(STAND_ASIDE_NAP);
            // When the host leaves, poll for it as after an event.
            last_event = fabric.now();
            continue;
        }
        let Some(handled) = try_progress(&shared) else {
            // A host thread holds the lock (polling, or posting): try again shortly.
            spin_a_while();
            continue;
        };
        if handled > 0 {
            last_event = fabric.now();
            // The lock is not fair: a host thread that fell asleep waiting for it goes first.
            shared.state.let_sleepers_in();
        } else if fabric.now().saturating_sub(last_event) < poll {
            let mut spins = 0u32;
            while !fabric.pending() && !shared.stop.load(Ordering::Relaxed) && !host.moved() {
                std::hint::spin_loop();
                spins = spins.wrapping_add(1);
                // The clock only now and then: a read costs more than a poll.
                if spins.is_multiple_of(64) && fabric.now().saturating_sub(last_event) >= poll {
                    break;
                }
            }
        } else {
            // Sleeps until the fabric has something (or briefly, to notice `stop`).
            fabric.block(Duration::from_millis(5));
        }
    }
}

/// [`LOCK_RETRY_SPINS`] pauses.
fn spin_a_while() {
    for _ in 0..LOCK_RETRY_SPINS {
        std::hint::spin_loop();
    }
}

/// How long after a host thread's last poll its posts still keep the agent aside
/// (`Ni::note_host_posting`): a window of posts between two waits takes less, and a host
/// that posts without ever waiting leaves the agent's work undone no longer than this.
const POSTING_SPAN: Duration = Duration::from_millis(1);

/// What the agent last saw of the host threads' polls and posts (`Shared::host_polls`,
/// `Shared::host_posts`), and when it last saw each move.
struct HostWatch<'a> {
    polls: &'a std::sync::atomic::AtomicU64,
    posts: &'a std::sync::atomic::AtomicU64,
    seen: (u64, u64),
    polled_at: Option<Duration>,
    posted_at: Option<Duration>,
}

impl<'a> HostWatch<'a> {
    fn new(shared: &'a Shared) -> Self {
        let (polls, posts) = (&shared.host_polls, &shared.host_posts);
        HostWatch {
            seen: (polls.load(Ordering::Relaxed), posts.load(Ordering::Relaxed)),
            polls,
            posts,
            polled_at: None,
            posted_at: None,
        }
    }

    /// Whether either count moved since the last look (plain loads).
    fn moved(&self) -> bool {
        (
            self.polls.load(Ordering::Relaxed),
            self.posts.load(Ordering::Relaxed),
        ) != self.seen
    }

    /// Whether a host thread works in the library at `now` (the fabric's time): it polled
    /// within `grace`, or posted within `grace` and polled within [`POSTING_SPAN`].
    fn host_working(&mut self, grace: Duration, now: Duration) -> bool {
        if grace.is_zero() {
            return false;
        }
        let (polls, posts) = (
            self.polls.load(Ordering::Relaxed),
            self.posts.load(Ordering::Relaxed),
        );
        if polls != self.seen.0 {
            self.polled_at = Some(now);
        }
        if posts != self.seen.1 {
            self.posted_at = Some(now);
        }
        self.seen = (polls, posts);
        let within =
            |at: Option<Duration>, span: Duration| at.is_some_and(|t| now.saturating_sub(t) < span);
        within(self.polled_at, grace)
            || (within(self.posted_at, grace) && within(self.polled_at, POSTING_SPAN.max(grace)))
    }
}

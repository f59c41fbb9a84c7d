//! Waiting without starving: spin, then yield, then block on the fabric. With more ranks than
//! cores, a rank that only spun would steal the core its peer needs to make the progress it
//! waits for.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::error::Result;
use crate::fabric::Fabric;
use crate::types::Event;

/// Polls to spin before yielding (roughly a few microseconds).
const SPIN_POLLS: u32 = 200;
/// Yields before blocking.
const YIELD_POLLS: u32 = 20;
/// Longest single block, so liveness checks keep running.
const MAX_BLOCK: Duration = Duration::from_millis(100);

/// Spin, yield, then block until `fabric` reports an event or `timeout` passes.
pub(crate) fn wait_with_backoff<F: Fabric + ?Sized>(
    fabric: &F,
    timeout: Option<Duration>,
) -> Result<Option<Event>> {
    // A timeout too long to represent is no timeout. By the fabric's clock: a simulated one
    // is virtual, and a waiter there blocks at once (its spinning would take no time).
    let deadline = timeout.and_then(|t| fabric.now().checked_add(t));
    let spins = if fabric.clock_is_virtual() {
        0
    } else {
        SPIN_POLLS + YIELD_POLLS
    };
    for i in 0..spins {
        if let Some(ev) = fabric.poll()? {
            return Ok(Some(ev));
        }
        if i >= SPIN_POLLS {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        // The clock every 16th poll: a read costs more than a poll.
        if i % 16 == 15 && deadline.is_some_and(|d| fabric.now() >= d) {
            return Ok(None);
        }
    }
    loop {
        if let Some(ev) = fabric.poll()? {
            return Ok(Some(ev));
        }
        let slice = match deadline {
            Some(d) => {
                let now = fabric.now();
                if now >= d {
                    return Ok(None);
                }
                (d - now).min(MAX_BLOCK)
            }
            None => MAX_BLOCK,
        };
        fabric.block(slice);
    }
}

/// A queue of events with a condition variable, for events produced by other threads (local
/// peers, the tcp I/O thread) or by the owner's own calls (shm completions and failures). Its
/// length is mirrored in an atomic, so a poll of an empty queue takes no lock.
#[derive(Default)]
pub(crate) struct EventQueue {
    events: Mutex<VecDeque<Event>>,
    ready: Condvar,
    /// The queue's length, mirrored for a look without the lock (`is_empty`).
    len: AtomicUsize,
}

impl EventQueue {
    /// Appends an event and wakes a blocked waiter.
    pub(crate) fn push(&self, ev: Event) {
        self.push_if(ev, || true);
    }
    /// Appends an event from a peer unless `failed` (that peer's flag) is set: checked under
    /// the queue's lock, so an event from the peer is either queued before its `PeerFailed`
    /// (pushed after the flag is set) or dropped, never queued after it.
    pub(crate) fn push_unless_failed(&self, ev: Event, failed: &AtomicBool) {
        self.push_if(ev, || !failed.load(Ordering::Acquire));
    }
    fn push_if(&self, ev: Event, keep: impl FnOnce() -> bool) {
        let mut q = self.events.lock();
        if !keep() {
            return;
        }
        q.push_back(ev);
        // SeqCst: a shm rank rings its own doorbell after this and looks for sleepers.
        self.len.store(q.len(), Ordering::SeqCst);
        drop(q);
        self.ready.notify_one();
    }
    /// Whether no event is queued (a hint, read without the lock: a poller that spins on it
    /// leaves the lock to the threads that push).
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }
    /// Takes the oldest event (without locking when there is none).
    pub(crate) fn pop(&self) -> Option<Event> {
        if self.is_empty() {
            return None;
        }
        let mut q = self.events.lock();
        let ev = q.pop_front();
        self.len.store(q.len(), Ordering::Release);
        ev
    }
    /// Blocks until the queue is non-empty or `timeout` passes.
    pub(crate) fn block(&self, timeout: Duration) {
        let mut q = self.events.lock();
        if q.is_empty() {
            self.ready.wait_for(&mut q, timeout);
        }
    }
    /// [`block`](EventQueue::block), unless `ready` says the waiter's own condition holds;
    /// looked at under the queue's lock, which [`wake_all`](EventQueue::wake_all) takes
    /// before notifying, so a condition set just before a wake-up is never slept through.
    pub(crate) fn block_unless(&self, timeout: Duration, ready: &dyn Fn() -> bool) {
        let mut q = self.events.lock();
        if q.is_empty() && !ready() {
            self.ready.wait_for(&mut q, timeout);
        }
    }
    /// Wakes every blocked waiter (used on peer failure and shutdown).
    pub(crate) fn wake_all(&self) {
        let _q = self.events.lock();
        self.ready.notify_all();
    }
}

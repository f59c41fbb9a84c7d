//! How a thread-mode host sleeps until the agent has changed something: an event count beside
//! the state lock (which, being a `SpinLock`, has no condition variable of its own).
//!
//! A waiter reads the count while it still holds the state lock (after finding nothing to do),
//! releases the lock, and sleeps only while the count is unchanged. The agent bumps the count
//! after every change it makes under the lock, so a change the waiter did not see under the
//! lock always bumps the count after the waiter read it: no wake-up is lost.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use rdcoll_transport::{SpinGuard, SpinLock};

/// Notifications of changes to the state behind a `SpinLock`.
#[derive(Default)]
pub(crate) struct Changes {
    count: AtomicU64,
    /// Waiters between announcing themselves and waking: a notification with none skips the
    /// mutex (thread-mode hosts notify after each progress pass of their own).
    sleepers: AtomicU32,
    sleep: Mutex<()>,
    woken: Condvar,
}

impl Changes {
    /// Wakes every waiter; call after releasing the state lock.
    pub(crate) fn notify_all(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
        // Sequentially consistent with the waiter's announcement: either it sees the new
        // count, or this sees it announced.
        if self.sleepers.load(Ordering::SeqCst) == 0 {
            return;
        }
        let _sleep = self.sleep.lock();
        self.woken.notify_all();
    }

    /// The notifications so far: a mark for [`wait_since`](Changes::wait_since), taken before
    /// a look at the state.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// Sleeps until a notification after `seen` (a [`count`](Changes::count) taken before the
    /// caller last looked at the state) or `timeout`: at once if one came already, so a
    /// change made between that look and this call is not slept through.
    pub(crate) fn wait_since(&self, seen: u64, timeout: Duration) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        {
            let mut sleep = self.sleep.lock();
            if self.count.load(Ordering::SeqCst) == seen {
                self.woken.wait_for(&mut sleep, timeout);
            }
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Releases `guard`, sleeps until the next notification or `timeout`, and locks `lock`
    /// again.
    pub(crate) fn wait_for<'a, T>(
        &self,
        lock: &'a SpinLock<T>,
        guard: SpinGuard<'a, T>,
        timeout: Duration,
    ) -> SpinGuard<'a, T> {
        let seen = self.count();
        drop(guard);
        self.wait_since(seen, timeout);
        lock.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    /// A waiter that looked at the state, found nothing, and only then gets to sleep must not
    /// sleep through a change made in between (the engine's waits take their mark before
    /// their look).
    #[test]
    fn a_change_between_the_mark_and_the_sleep_is_not_slept_through() {
        let changes = Changes::default();
        let mark = changes.count();
        changes.notify_all();
        let start = Instant::now();
        changes.wait_since(mark, Duration::from_secs(30));
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "slept through a notification made after the mark"
        );
    }

    #[test]
    fn a_change_made_after_the_waiters_look_wakes_it() {
        let lock = Arc::new(SpinLock::new(false));
        let changes = Arc::new(Changes::default());
        let (l, c) = (lock.clone(), changes.clone());
        let changer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            *l.lock() = true;
            c.notify_all();
        });
        let start = Instant::now();
        let mut g = lock.lock();
        while !*g {
            g = changes.wait_for(&lock, g, Duration::from_secs(30));
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the notification was lost"
            );
        }
        drop(g);
        changer.join().unwrap();
    }
}

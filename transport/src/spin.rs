//! A test-and-set lock: uncontended, it costs one atomic exchange to take and a plain release
//! store to drop. A `Mutex` pays a locked read-modify-write on unlock, and on x86 that waits
//! for every store before it to complete: after a store into a peer's cache line (the last
//! write of a broadcast root, a ring record) it sits out the line's transfer, and even with
//! nothing pending it costs as much as taking the lock. Used for the shm rings' producer and
//! consumer state, a communicator's collectives, and the offload NI's state.
//!
//! A waiter spins, then yields, then sleeps until a release wakes it. The release only looks
//! for sleepers with a plain load after its plain store; the ordering that look needs (x86 may
//! run the load before the store is visible) is paid by the sleeper, which runs a
//! process-wide membarrier between announcing itself and its last look at the lock. Where the
//! kernel refuses membarriers, a sleeper wakes by itself after a short nap instead.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Spins before a waiter starts yielding.
const SPINS: u32 = 100;
/// Yields before a waiter starts sleeping.
const YIELDS: u32 = 64;
/// A sleeper's longest sleep when releases are sure to see it (the membarrier worked): a
/// safety net only.
const SLEEP: Duration = Duration::from_millis(100);
/// How long `let_sleepers_in` waits for a woken sleeper to take the lock.
const HANDOVER: Duration = Duration::from_micros(50);
/// A sleeper's nap when a release may miss it (no membarrier).
const NAP: Duration = Duration::from_micros(50);

/// Guards `T`; contended waiters spin, then yield, then sleep until woken.
pub struct SpinLock<T> {
    locked: AtomicBool,
    /// Waiters asleep or about to sleep.
    sleepers: AtomicU32,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialised by `locked`, as for a mutex.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the value; no thread holds a guard across that.
unsafe impl<T: Send> Send for SpinLock<T> {}

/// Access to the guarded value; releases the lock on drop.
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> SpinLock<T> {
    /// A lock around `value`.
    pub fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            sleepers: AtomicU32::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// The lock if it is free now.
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        if self.locked.swap(true, Ordering::Acquire) {
            None
        } else {
            Some(SpinGuard { lock: self })
        }
    }

    /// Waits for the lock.
    pub fn lock(&self) -> SpinGuard<'_, T> {
        if let Some(g) = self.try_lock() {
            return g;
        }
        self.lock_contended()
    }

    #[cold]
    fn lock_contended(&self) -> SpinGuard<'_, T> {
        let mut tries = 0u32;
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            while self.locked.load(Ordering::Relaxed) {
                tries = tries.saturating_add(1);
                if tries < SPINS {
                    std::hint::spin_loop();
                } else if tries < SPINS + YIELDS {
                    std::thread::yield_now();
                } else {
                    self.sleep();
                }
            }
        }
    }

    /// Sleeps until a release wakes us (or, without membarriers, for a nap).
    fn sleep(&self) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // Every release whose look at `sleepers` missed our announcement had its `false`
        // store visible before this returns, so the check below cannot sleep through it.
        let woken_for_sure = crate::membarrier::private();
        let timeout = if woken_for_sure { SLEEP } else { NAP };
        let key = &self.sleepers as *const AtomicU32 as usize;
        // SAFETY: the key is the address of this lock's sleeper count (not of the value, which
        // may hold a parking_lot primitive of its own), used only by this lock's sleep and
        // release; the callbacks neither panic nor call into parking_lot_core.
        unsafe {
            parking_lot_core::park(
                key,
                || self.locked.load(Ordering::Relaxed),
                || {},
                |_, _| {},
                parking_lot_core::DEFAULT_PARK_TOKEN,
                Some(Instant::now() + timeout),
            );
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes one sleeper, if any announced itself.
    #[inline]
    fn wake_one(&self) {
        // Keep the compiler from hoisting this load above the releasing store; the CPU's
        // reordering is covered by the sleeper's membarrier.
        compiler_fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) != 0 {
            self.wake_one_slow();
        }
    }

    #[cold]
    fn wake_one_slow(&self) {
        let key = &self.sleepers as *const AtomicU32 as usize;
        // SAFETY: the key is this lock's sleeper count's address (see `sleep`); the callback
        // does nothing.
        unsafe {
            parking_lot_core::unpark_one(key, |_| parking_lot_core::DEFAULT_UNPARK_TOKEN);
        }
    }

    /// For a thread that takes the lock again and again in a loop (the lock is not fair):
    /// if a waiter fell asleep, gives it up to `HANDOVER` to wake and take the lock first.
    pub fn let_sleepers_in(&self) {
        if self.sleepers.load(Ordering::Relaxed) == 0 {
            return;
        }
        let start = Instant::now();
        while !self.locked.load(Ordering::Relaxed) && start.elapsed() < HANDOVER {
            std::thread::yield_now();
        }
    }

    /// The value, through exclusive access to the lock itself.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock, so no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock exclusively.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
        self.lock.wake_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_increments() {
        let lock = SpinLock::new(0u64);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        *lock.lock() += 1;
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), 40_000);
    }

    #[test]
    fn no_two_threads_are_inside_at_once() {
        let lock = SpinLock::new((0u64, 0u64));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..5_000 {
                        let mut g = lock.lock();
                        // Torn if two threads were inside at once.
                        g.0 += 1;
                        std::hint::spin_loop();
                        g.1 += 1;
                        assert_eq!(g.0, g.1);
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), (20_000, 20_000));
    }

    #[test]
    fn waiters_that_fall_asleep_are_woken() {
        // Holders keep the lock long enough for waiters to pass spinning and yielding.
        let lock = SpinLock::new(0u32);
        std::thread::scope(|s| {
            for _ in 0..6 {
                s.spawn(|| {
                    for _ in 0..20 {
                        let mut g = lock.lock();
                        *g += 1;
                        std::thread::sleep(Duration::from_micros(300));
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), 120);
        assert_eq!(lock.sleepers.load(Ordering::Relaxed), 0);
    }
}

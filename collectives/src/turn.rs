//! The lock that serialises a communicator's collectives.
//!
//! A collective ends right after its last write into a peer's memory, whose store waits for
//! that peer's cache line. Releasing a `Mutex` is a locked read-modify-write, which on x86
//! waits for every store before it: the root of a small broadcast would sit out the line's
//! transfer to the receiver inside its call. This lock is released with a plain store instead.
//! Collectives on one communicator from several threads at once are rare (MPI calls them
//! erroneous; here they are serialised), so a waiter spins briefly, then yields, then sleeps
//! in short steps, and no release has to look for sleepers.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `T`, taken by one collective at a time.
pub(crate) struct Turn<T> {
    taken: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialised by `taken`, as for a mutex.
unsafe impl<T: Send> Sync for Turn<T> {}

/// Access to the value; released on drop.
pub(crate) struct TurnGuard<'a, T> {
    turn: &'a Turn<T>,
}

/// Spins before a waiter starts yielding.
const SPINS: u32 = 64;
/// Yields before a waiter starts sleeping.
const YIELDS: u32 = 64;
/// A sleeping waiter's step.
const NAP: Duration = Duration::from_micros(50);

impl<T> Turn<T> {
    pub(crate) fn new(value: T) -> Self {
        Turn {
            taken: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Waits for the value's turn.
    pub(crate) fn lock(&self) -> TurnGuard<'_, T> {
        let mut tries = 0u32;
        loop {
            if !self.taken.load(Ordering::Relaxed) && !self.taken.swap(true, Ordering::Acquire) {
                return TurnGuard { turn: self };
            }
            tries = tries.saturating_add(1);
            if tries < SPINS {
                std::hint::spin_loop();
            } else if tries < SPINS + YIELDS {
                std::thread::yield_now();
            } else {
                std::thread::sleep(NAP);
            }
        }
    }

    /// The value, through exclusive access to the lock itself.
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

impl<T> Deref for TurnGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the turn, so no other reference to the value exists.
        unsafe { &*self.turn.value.get() }
    }
}

impl<T> DerefMut for TurnGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the turn exclusively.
        unsafe { &mut *self.turn.value.get() }
    }
}

impl<T> Drop for TurnGuard<'_, T> {
    fn drop(&mut self) {
        // A plain release store: nothing waits for the stores before it to complete.
        self.turn.taken.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_threads() {
        let turn = Turn::new((0u64, 0u64));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..5_000 {
                        let mut g = turn.lock();
                        // Torn if two threads were inside at once.
                        g.0 += 1;
                        std::hint::spin_loop();
                        g.1 += 1;
                        assert_eq!(g.0, g.1);
                    }
                });
            }
        });
        assert_eq!(*turn.lock(), (20_000, 20_000));
    }
}

//! The key-value store ranks use to find each other: set, blocking get, counters, barriers.

use std::time::Duration;

use crate::error::Result;

/// A job-wide key-value store used only during bootstrap (addresses, secrets, barriers).
pub trait Store: Send + Sync {
    /// Sets `key` to `value`, replacing any earlier value.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    /// The value of `key`, waiting up to `timeout` for some rank to set it.
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>>;
    /// Adds `delta` to the counter `key` (absent counts as 0) and returns the new value.
    fn add(&self, key: &str, delta: i64) -> Result<i64>;
    /// Waits until the counter `key` is at least `target`.
    fn wait_at_least(&self, key: &str, target: i64, timeout: Duration) -> Result<()>;

    /// All `n` ranks meet at `name`; fails with a timeout naming the barrier.
    fn barrier(&self, name: &str, n: usize, timeout: Duration) -> Result<()> {
        let key = format!("barrier/{name}");
        self.add(&key, 1)?;
        self.wait_at_least(&key, n as i64, timeout)
    }
}

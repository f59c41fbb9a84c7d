//! Transport settings, read from `RDCOLL_*` environment variables with laptop-friendly defaults.

use std::time::Duration;

use crate::error::{Result, TransportError};

/// Smallest shm ring: room for three of the largest records (a power of two).
pub const MIN_RING_BYTES: usize = 256 * 1024;
/// Largest shm ring (per ordered pair of ranks).
pub const MAX_RING_BYTES: usize = 1 << 30;
/// Incoming ring bytes per rank when rings are sized by job size.
const RING_BUDGET: usize = 4 << 20;
/// Largest ring chosen by job size.
const MAX_AUTO_RING_BYTES: usize = 2 << 20;
/// Largest shm heap per rank.
pub const MAX_HEAP_BYTES: usize = 1 << 40;
/// Largest region table.
pub const MAX_REGIONS_LIMIT: usize = 1 << 20;

/// Settings shared by the backends.
#[derive(Debug, Clone)]
pub struct FabricConfig {
    /// How long a silent peer may go before it is declared failed (`RDCOLL_PEER_TIMEOUT_MS`).
    pub peer_timeout: Duration,
    /// How long bootstrap waits for peers and keys (`RDCOLL_BOOTSTRAP_TIMEOUT_MS`).
    pub bootstrap_timeout: Duration,
    /// Bytes of each shm message ring, per ordered pair (`RDCOLL_SHM_RING_BYTES`); `None`
    /// sizes them by job size ([`FabricConfig::shm_ring_bytes_for`]).
    pub shm_ring_bytes: Option<usize>,
    /// Bytes of each rank's shared heap for fabric-allocated regions (`RDCOLL_SHM_HEAP_BYTES`).
    pub shm_heap_bytes: usize,
    /// Whether shm may use `process_vm_readv/writev` (`RDCOLL_SHM_CMA=0` forces the bounce path).
    pub shm_cma: bool,
    /// Whether shm wake-ups use an asymmetric fence (`membarrier`, paid by a rank about to
    /// sleep) so that senders publish with plain release stores (`RDCOLL_SHM_MEMBARRIER=0`
    /// makes every sender pay a full fence instead).
    pub shm_membarrier: bool,
    /// Whether a large shm put into memory a peer registered is split between the two
    /// processes (`RDCOLL_SHM_SPLIT_PUTS=0` leaves every byte to the target): the target pulls
    /// the first part while the initiator writes the rest, so two cores copy at once. Only
    /// when every rank has a core of its own.
    pub shm_split_puts: bool,
    /// Testing knob (`RDCOLL_SHM_FAIL_PUSHES=1`): the initiator's write of every shm put into
    /// registered memory (a whole put below the split size, its part of a split one) writes
    /// half its bytes and then reports failure, so the target falls back to pulling that part
    /// itself (the path a refused `process_vm_writev` takes).
    pub shm_fail_pushes: bool,
    /// Most regions one rank may have registered at once (`RDCOLL_MAX_REGIONS`).
    pub max_regions: usize,
    /// Testing knob (`RDCOLL_SINK_RATE`, bytes/s, `K`/`M`/`G` suffixes): data deposited into
    /// this rank's memory by peers is paced to this rate, emulating memory slower than the
    /// network. tcp only.
    pub sink_rate: Option<u64>,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            peer_timeout: Duration::from_secs(5),
            bootstrap_timeout: Duration::from_secs(60),
            shm_ring_bytes: None,
            shm_heap_bytes: 256 << 20,
            shm_cma: true,
            shm_membarrier: true,
            shm_split_puts: true,
            shm_fail_pushes: false,
            max_regions: 16384,
            sink_rate: None,
        }
    }
}

impl FabricConfig {
    /// Defaults overridden by the environment (read through [`crate::settings`]); a malformed
    /// value is an error, not ignored.
    pub fn from_env() -> Result<Self> {
        use crate::settings::{flag, number, size};
        let mut c = FabricConfig::default();
        if let Some(ms) = number("RDCOLL_PEER_TIMEOUT_MS")? {
            c.peer_timeout = Duration::from_millis(ms.max(100));
        }
        if let Some(ms) = number("RDCOLL_BOOTSTRAP_TIMEOUT_MS")? {
            c.bootstrap_timeout = Duration::from_millis(ms);
        }
        c.shm_ring_bytes = size("RDCOLL_SHM_RING_BYTES")?;
        c.shm_heap_bytes = size("RDCOLL_SHM_HEAP_BYTES")?.unwrap_or(c.shm_heap_bytes);
        c.shm_cma = flag("RDCOLL_SHM_CMA")?.unwrap_or(c.shm_cma);
        c.shm_membarrier = flag("RDCOLL_SHM_MEMBARRIER")?.unwrap_or(c.shm_membarrier);
        c.shm_split_puts = flag("RDCOLL_SHM_SPLIT_PUTS")?.unwrap_or(c.shm_split_puts);
        c.shm_fail_pushes = flag("RDCOLL_SHM_FAIL_PUSHES")?.unwrap_or(c.shm_fail_pushes);
        if let Some(v) = number("RDCOLL_MAX_REGIONS")? {
            c.max_regions = usize::try_from(v).unwrap_or(usize::MAX);
        }
        c.sink_rate = number("RDCOLL_SINK_RATE")?;
        c.validate()?;
        Ok(c)
    }

    /// Bytes of each shm ring in a job of `size` ranks: the setting, or by default 4 MiB of
    /// incoming rings per rank, each from `MIN_RING_BYTES` to 2 MiB (2 MiB at 2 ranks, 1 MiB
    /// at 3-4, 512 KiB at 8, the minimum from 16). Large rings let `osu_bw`'s window of 32 KiB
    /// eager messages (2 MiB) flow without backlog: 13.0 against 5.5 GB/s with 256 KiB rings;
    /// and `osu_bibw`'s, whose two windows overflowed 1 MiB rings (both ranks then copy into
    /// and out of their backlogs while the other waits): 25-30 against 4.5-5.3 GB/s at 32 KiB.
    pub fn shm_ring_bytes_for(&self, size: usize) -> usize {
        self.shm_ring_bytes.unwrap_or_else(|| {
            let share = (RING_BUDGET / size.max(1)).clamp(MIN_RING_BYTES, MAX_AUTO_RING_BYTES);
            // A power of two: the largest not above the share.
            1 << share.ilog2()
        })
    }

    /// Checks the settings a backend sizes memory from, so a bad value is a clear error
    /// rather than an overflow or a ring that cannot hold a message.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(TransportError::InvalidArgument(what));
        if let Some(ring) = self.shm_ring_bytes {
            if !ring.is_power_of_two() || !(MIN_RING_BYTES..=MAX_RING_BYTES).contains(&ring) {
                return bad(format!(
                    "RDCOLL_SHM_RING_BYTES={ring} must be a power of two from {MIN_RING_BYTES} to {MAX_RING_BYTES}"
                ));
            }
        }
        if self.shm_heap_bytes > MAX_HEAP_BYTES {
            return bad(format!(
                "RDCOLL_SHM_HEAP_BYTES={} is above the limit of {MAX_HEAP_BYTES}",
                self.shm_heap_bytes
            ));
        }
        if self.sink_rate == Some(0) {
            return bad("RDCOLL_SINK_RATE=0: a rate must be above 0 bytes/s".into());
        }
        if self.max_regions == 0 || self.max_regions > MAX_REGIONS_LIMIT {
            return bad(format!(
                "RDCOLL_MAX_REGIONS={} must be from 1 to {MAX_REGIONS_LIMIT}",
                self.max_regions
            ));
        }
        Ok(())
    }
}

/// Paces deposits to a rate: `pace(n)` sleeps until `n` more bytes fit the rate since start.
#[derive(Debug)]
pub(crate) struct Pacer {
    rate: u64,
    start: std::time::Instant,
    bytes: u64,
}

impl Pacer {
    pub(crate) fn new(rate: u64) -> Pacer {
        Pacer {
            rate,
            start: std::time::Instant::now(),
            bytes: 0,
        }
    }

    /// How long to wait before `n` more bytes may land.
    pub(crate) fn delay_for(&mut self, n: usize) -> Duration {
        let now = self.start.elapsed();
        // An idle spell does not bank credit: restart the budget when behind the clock.
        let due = Duration::from_secs_f64(self.bytes as f64 / self.rate as f64);
        if due < now {
            self.start = std::time::Instant::now();
            self.bytes = 0;
        }
        self.bytes += n as u64;
        let due = Duration::from_secs_f64(self.bytes as f64 / self.rate as f64);
        due.saturating_sub(self.start.elapsed())
    }
}

#[cfg(test)]
mod pacer_tests {
    use super::*;

    #[test]
    fn pacing_adds_up() {
        let mut p = Pacer::new(1 << 20);
        let d = p.delay_for(1 << 20);
        assert!(
            d > Duration::from_millis(900) && d <= Duration::from_secs(1),
            "{d:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_are_sized_by_job_size_unless_set() {
        let auto = FabricConfig::default();
        let sizes = [1, 2, 4, 8, 16, 64, 1 << 20];
        let rings = sizes.map(|n| auto.shm_ring_bytes_for(n));
        let expected = [
            2 << 20,
            2 << 20,
            1 << 20,
            512 << 10,
            256 << 10,
            256 << 10,
            256 << 10,
        ];
        assert_eq!(rings, expected);
        assert!(rings
            .iter()
            .all(|r| r.is_power_of_two() && *r >= MIN_RING_BYTES));
        let set = FabricConfig {
            shm_ring_bytes: Some(128 << 20),
            ..FabricConfig::default()
        };
        assert_eq!(set.shm_ring_bytes_for(2), 128 << 20);
    }
}

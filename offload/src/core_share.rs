//! Noticing that a waiting thread shares its core with the thread it waits for.
//!
//! A wait spins for a while before it yields, as a peer on another core answers within that.
//! But the scheduler sometimes leaves two ranks on one core while the other core idles (both
//! are cache-hot busy threads, which its balancer is slow to move), and then every message
//! costs the waiter's whole spin before the peer gets the core back: one launch in about 30 of
//! an 8-byte broadcast between two ranks ran each iteration in 105 µs instead of 0.25 µs, for
//! the whole run.
//!
//! So a wait times its yields. A yield that gave the core to another thread (it came back after
//! more than [`HANDOFF`]) says someone else wants this core: from then on waits spin only
//! [`SHORT_SPIN`] before yielding, until a yield finds nobody else wanting the core. After
//! [`MOVE_AFTER`] such yields in a row, where every rank is on this host and there is a core
//! per rank, a thread away from its share of the cores moves there (at most once per
//! [`MOVE_EVERY`]), which the scheduler would do only much later. The state is per thread: it
//! describes the core the thread runs on.

use std::cell::Cell;
use std::time::Duration;

use rdcoll_transport::Fabric;

/// How long a wait spins before it yields while its core is wanted by another thread.
/// Longer than [`HANDOFF`], so that a yield to a peer that waits for this thread in turn
/// still reads as one.
pub const SHORT_SPIN: Duration = Duration::from_micros(5);
/// A yield that took longer than this ran another thread meanwhile (on the 2-vCPU VM a yield
/// that finds nobody waiting for the core returns in 0.27 µs on average, and takes over 2 µs
/// once in 3,000).
pub const HANDOFF: Duration = Duration::from_micros(2);
/// Yields in a row that ran another thread before the waiting thread moves off its core.
pub const MOVE_AFTER: u32 = 3;
/// The least time between two moves of one thread.
pub const MOVE_EVERY: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Default)]
struct Share {
    /// Yields in a row that ran another thread.
    handoffs: u32,
    /// When this thread last moved off its core, by the waiting fabric's clock.
    moved_at: Option<Duration>,
}

thread_local! {
    static SHARE: Cell<Share> = const { Cell::new(Share { handoffs: 0, moved_at: None }) };
}

/// How long a wait of this thread spins before yielding: `normal`, or [`SHORT_SPIN`] while its
/// last yield gave the core to another thread.
pub fn spin_budget(normal: Duration) -> Duration {
    if SHARE.with(|s| s.get().handoffs) > 0 {
        normal.min(SHORT_SPIN)
    } else {
        normal
    }
}

/// Where a thread belongs among the cores of its host: the `index`-th of `of` ranks there, so
/// its share is the `index`-th of `of` equal slices of the cores it may run on (as
/// `RDCOLL_BIND=core` binds, but only as a place to move to: it stays free to run anywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Home {
    /// This rank among the ranks on this host.
    pub index: usize,
    /// Ranks on this host (no more than its cores).
    pub of: usize,
}

/// Yields the core, timing the yield by `clock` (the fabric the thread waits on; a simulated
/// fabric's virtual time does not move during a yield, so there nothing changes). With a
/// `home` (no more ranks on this host than cores), a thread whose yields keep running another
/// thread moves to its share of the cores if it is not there: of two ranks left on one core,
/// the one away from home moves, the other stays.
pub fn yield_core(clock: &dyn Fabric, home: Option<Home>) {
    let before = clock.now();
    std::thread::yield_now();
    let after = clock.now();
    let mut s = SHARE.with(Cell::get);
    if after.saturating_sub(before) <= HANDOFF {
        s.handoffs = 0;
    } else {
        s.handoffs = s.handoffs.saturating_add(1);
        let rested = s
            .moved_at
            .is_none_or(|t| after.saturating_sub(t) >= MOVE_EVERY);
        if let Some(home) = home.filter(|_| s.handoffs >= MOVE_AFTER && rested) {
            s.moved_at = Some(after);
            s.handoffs = 0;
            move_home(home);
        }
    }
    SHARE.with(|c| c.set(s));
}

/// The cores of `allowed` that are `home`'s share (`None` if there are fewer cores than
/// ranks).
fn share_of(allowed: &[usize], home: Home) -> Option<&[usize]> {
    let per = allowed.len().checked_div(home.of).filter(|&p| p > 0)?;
    allowed.get(home.index % home.of * per..)?.get(..per)
}

/// Moves the calling thread to its share of the cores it may run on, now, if it is not on one
/// of them, and leaves it free to run on any again: the scheduler keeps it where it landed
/// until it has a reason to move it. Does nothing where the thread was bound to fewer cores
/// than the ranks here.
#[cfg(target_os = "linux")]
fn move_home(home: Home) {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: no arguments; returns the current CPU or -1.
    let Ok(cpu) = usize::try_from(unsafe { libc::sched_getcpu() }) else {
        return;
    };
    // SAFETY: `cpu_set_t` is plain data; zeroed is an empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid set of `size` bytes, for the calling thread (0).
    if unsafe { libc::sched_getaffinity(0, size, &mut allowed) } != 0 {
        return;
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads the set within its fixed size.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
        .collect();
    let Some(share) = share_of(&cpus, home) else {
        return;
    };
    if share.contains(&cpu) {
        return;
    }
    // SAFETY: as above.
    let mut there: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in share {
        // SAFETY: `c` is below CPU_SETSIZE (it came from the set).
        unsafe { libc::CPU_SET(c, &mut there) };
    }
    // SAFETY: valid sets of `size` bytes, for the calling thread; the first call migrates it
    // to its share, the second gives back the cores it had.
    unsafe {
        if libc::sched_setaffinity(0, size, &there) == 0 {
            libc::sched_setaffinity(0, size, &allowed);
        }
    }
    tracing::debug!("moved from core {cpu} to {share:?}: its yields kept running another thread");
}

/// Elsewhere threads stay where the scheduler puts them.
#[cfg(not(target_os = "linux"))]
fn move_home(_: Home) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wanted_core_shortens_the_spin_until_a_yield_finds_it_free() {
        SHARE.with(|c| c.set(Share::default()));
        let normal = Duration::from_micros(50);
        assert_eq!(spin_budget(normal), normal);
        SHARE.with(|c| {
            c.set(Share {
                handoffs: 1,
                moved_at: None,
            })
        });
        assert_eq!(spin_budget(normal), SHORT_SPIN);
        assert_eq!(spin_budget(Duration::ZERO), Duration::ZERO);
        SHARE.with(|c| c.set(Share::default()));
        assert_eq!(spin_budget(normal), normal);
    }

    #[test]
    fn each_rank_has_its_own_share_of_the_cores() {
        let cpus = [0, 1, 2, 3, 4, 5, 6, 7];
        let home = |index, of| Home { index, of };
        assert_eq!(share_of(&cpus, home(0, 2)), Some(&cpus[..4]));
        assert_eq!(share_of(&cpus, home(1, 2)), Some(&cpus[4..]));
        assert_eq!(share_of(&cpus, home(2, 3)), Some(&cpus[4..6]));
        assert_eq!(share_of(&cpus[..2], home(1, 2)), Some(&cpus[1..2]));
        assert_eq!(share_of(&cpus[..2], home(1, 3)), None);
        assert_eq!(share_of(&cpus, home(0, 0)), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn moving_home_keeps_the_cores_the_thread_had() {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        let get = || {
            // SAFETY: `cpu_set_t` is plain data; zeroed is an empty set.
            let mut s: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: a valid set of `size` bytes, for this thread.
            assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut s) }, 0);
            s
        };
        let before = get();
        move_home(Home { index: 1, of: 2 });
        move_home(Home { index: 0, of: 1 });
        let after = get();
        // SAFETY: CPU_EQUAL compares two valid sets.
        assert!(unsafe { libc::CPU_EQUAL(&before, &after) });
    }
}

//! How many cores the ranks of a job on this host have between them, which decides whether
//! waits may spin, whether the offload agent gets a thread, and which shared-memory fences
//! pay off.
//!
//! A process's own affinity is not the answer where a launcher bound each rank to its own
//! cores (Open MPI's `mpirun` binds two ranks to a core each by default, MPICH's `mpiexec
//! -bind-to core`, `srun --cpu-bind`): each rank then sees one core and would take two ranks
//! for a crowded host, yielding at every wait (8-byte latency under `mpiexec -bind-to core`
//! 0.33-0.45 µs instead of 0.23-0.28). Launchers that bind place ranks on different cores,
//! so a process bound to fewer cores than the host has counts its share once per rank here.

/// Cores the `ranks_here` ranks of this job on this host can use: this process's own where it
/// may run on every core of the host, else its share times the ranks here (as a launcher
/// that binds gives each rank its own), never more than the host has.
pub fn for_ranks_here(ranks_here: usize) -> usize {
    let mine = std::thread::available_parallelism().map_or(1, |n| n.get());
    combine(mine, online(), ranks_here)
}

fn combine(mine: usize, online: Option<usize>, ranks_here: usize) -> usize {
    match online {
        Some(host) if mine < host => mine.saturating_mul(ranks_here.max(1)).min(host),
        _ => mine,
    }
}

/// The host's online cores, where the platform says.
#[cfg(unix)]
fn online() -> Option<usize> {
    // SAFETY: sysconf reads a system value; it has no memory arguments.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0)
}

#[cfg(not(unix))]
fn online() -> Option<usize> {
    None
}

#[cfg(test)]
mod tests {
    use super::combine;

    #[test]
    fn bound_ranks_count_their_shares_once_each() {
        // Unbound: the process's own view.
        assert_eq!(combine(2, Some(2), 4), 2);
        // Bound by a launcher to one core each of 16: 4 ranks have 4.
        assert_eq!(combine(1, Some(16), 4), 4);
        // Never more than the host has.
        assert_eq!(combine(1, Some(2), 4), 2);
        assert_eq!(combine(3, None, 4), 3);
        assert!(super::for_ranks_here(1) >= 1);
    }
}

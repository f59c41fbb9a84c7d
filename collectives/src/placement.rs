//! What the collectives know about where the ranks run, for choosing tree shapes.

use std::sync::OnceLock;

use rdcoll_offload::p2p::Engine;

/// Whether every rank of `engine` is on this host (the shm and local backends span one
/// host), so that a write into a peer's collective buffer is a store into shared memory.
/// The same on every rank.
pub(crate) fn one_host(engine: &Engine) -> bool {
    matches!(engine.ni().fabric().backend(), "shm" | "local")
}

/// Whether `n` ranks outnumber the cores this process may run on, so that waiting ranks
/// take turns on cores and every wait can cost a context switch.
pub(crate) fn oversubscribed(n: usize) -> bool {
    // Asking costs tens of microseconds (it reads the cgroup's quota): once per process.
    static CORES: OnceLock<usize> = OnceLock::new();
    n > *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |c| c.get()))
}

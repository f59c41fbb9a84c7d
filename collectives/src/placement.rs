//! What the collectives know about where the ranks run, for choosing tree shapes.

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
    n > std::thread::available_parallelism().map_or(1, |c| c.get())
}

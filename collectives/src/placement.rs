//! What the collectives know about where the ranks run, for choosing tree shapes.

use rdcoll_offload::p2p::Engine;

/// Whether every rank of `engine` is on this host (the shm and local backends span one
/// host), so that a write into a peer's collective buffer is a store into shared memory.
/// The same on every rank.
pub(crate) fn one_host(engine: &Engine) -> bool {
    matches!(engine.ni().fabric().backend(), "shm" | "local")
}

/// Whether every rank is on this host and they outnumber its cores (`Engine::crowded`).
pub(crate) fn crowded_host(engine: &Engine) -> bool {
    one_host(engine) && engine.crowded()
}

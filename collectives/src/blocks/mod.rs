//! The collectives that move whole blocks between pairs of ranks, over point-to-point
//! messages on the communicator's collective context: gather(v), scatter(v), allgather(v),
//! alltoall(v), reduce_scatter and scan / exscan. Each rank posts every receive of its part
//! first and then sends, so no step waits for a peer to post, and long blocks go by the
//! receiver-driven rendezvous (the receiver pulls; nothing is staged). Small blocks go through
//! the exchange slots of the small allreduce instead (`reduce::exchange`, and its pair
//! exchange for alltoallv), one RDMA write per peer. Results are exact:
//! reductions combine contributions in an order fixed by the ranks' ids.

mod allgather;
mod alltoall;
mod gather;
mod messages;
mod reduce_scatter;
mod scan;
pub(crate) mod scratch;

use messages::{block, carve, one_per_rank, refuse, tag, Batch};

/// Every rank but `me`, from its successor on ([`crate::tree::successors`]), as ranks.
fn others(me: rdcoll_transport::Rank, n: usize) -> impl Iterator<Item = rdcoll_transport::Rank> {
    crate::tree::successors(me as usize, n).map(|r| r as rdcoll_transport::Rank)
}

/// Block `r` of `n` blocks of `len` bytes each: `r * len .. (r + 1) * len`.
pub fn even_parts(n: usize, len: usize) -> Vec<std::ops::Range<usize>> {
    (0..n).map(|r| r * len..(r + 1) * len).collect()
}

/// Consecutive blocks of the given lengths, from 0.
pub fn packed_parts(lens: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut at = 0;
    lens.iter()
        .map(|&l| {
            let r = at..at + l;
            at += l;
            r
        })
        .collect()
}

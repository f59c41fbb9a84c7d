//! Settings every rank of a communicator must share (the broadcast's algorithm and thresholds,
//! the reduction tree's degree, the barrier's algorithm): ranks that disagree would take
//! different paths and wait for each other for ever. They are compared once, with the first
//! collective's set-up (an allgather of a hash of each), and a disagreement is `Mismatch` on
//! every rank, naming the setting and the ranks that hold another value.

use rdcoll_offload::p2p::Context;

use crate::area;
use crate::config::CollConfig;
use crate::error::{CollError, Result};
use crate::progress::Waiter;

/// Each shared setting's variable and this rank's value (not among them: the cluster name, how
/// broadcast blocks move into a rank and a multicast's gets per peer, which are each rank's
/// own).
fn shared(cfg: &CollConfig) -> [(&'static str, String); 9] {
    [
        (
            "RDCOLL_BCAST_SMALL_MAX",
            format!("{:?}", cfg.bcast_small_max),
        ),
        ("RDCOLL_BCAST_BLOCK", format!("{:?}", cfg.bcast_block)),
        ("RDCOLL_BCAST_CHUNK", format!("{:?}", cfg.bcast_chunk)),
        (
            "RDCOLL_BCAST_ALGORITHM",
            format!("{:?}", cfg.bcast_algorithm),
        ),
        (
            "RDCOLL_ALLREDUCE_SMALL_MAX",
            format!("{:?}", cfg.allreduce_small_max),
        ),
        (
            "RDCOLL_ALLREDUCE_DEGREE",
            format!("{:?}", cfg.allreduce_degree),
        ),
        (
            "RDCOLL_BARRIER_ALGORITHM",
            format!("{:?}", cfg.barrier_algorithm),
        ),
        (
            "RDCOLL_MULTICAST_PIECE",
            format!("{:?}", cfg.multicast_piece),
        ),
        (
            "RDCOLL_CHECK_COLLECTIVES",
            format!("{:?}", cfg.check_collectives),
        ),
    ]
}

/// Checks that every rank of the communicator has the same shared settings. Collective.
pub(crate) fn check_agreement(w: &Waiter, context: Context, cfg: &CollConfig) -> Result<()> {
    let fields = shared(cfg);
    let mine: Vec<u8> = fields
        .iter()
        .flat_map(|(_, v)| crate::fnv1a(v.as_bytes()).to_le_bytes())
        .collect();
    let all = area::allgather(w, context, &mine)?;
    let me = w.rank() as usize;
    let value_of = |record: &[u8], i: usize| record.get(i * 8..i * 8 + 8).map(<[u8]>::to_vec);
    for (i, (name, value)) in fields.iter().enumerate() {
        let others: Vec<usize> = (0..all.len())
            .filter(|&r| value_of(&all[r], i) != value_of(&all[me], i))
            .collect();
        if !others.is_empty() {
            return Err(CollError::Mismatch(format!(
                "{name} differs between the ranks of the communicator: rank {me} has {value}, \
                 ranks {others:?} another value (set it alike on every rank)"
            )));
        }
    }
    Ok(())
}

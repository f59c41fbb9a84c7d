//! Ranks as threads of this process over a simulated network ([`rdcoll_transport::sim`]): the
//! real library code, a modelled network and virtual time. [`Comm::wtime`] reads the virtual
//! clock, so a program times itself as it would on the modelled machine; the same program
//! gives the same times on every run.
//!
//! ```
//! use rdcoll::sim::{self, SimConfig};
//!
//! // 16 ranks on one switch of 100 Gb/s links: how long does a 1 MiB broadcast take?
//! let times = sim::run(SimConfig::switch(16), |comm| {
//!     let mut buf = vec![0u8; 1 << 20];
//!     comm.barrier().unwrap();
//!     let start = comm.wtime();
//!     comm.bcast(&mut buf, 0).unwrap();
//!     comm.wtime() - start
//! })
//! .unwrap();
//! assert!(times.iter().all(|&t| t > 0.0 && t < 0.01));
//! ```

pub use rdcoll_transport::sim::{
    DragonflyRouting, NetworkModel, SimConfig, Topology, WanChange, WanLink,
};

use crate::{Comm, Result};

/// Runs `f` on the `cfg.ranks` ranks of a simulated job, each a thread with its own [`Comm`]
/// over the `sim` transport, and returns their results by rank. The simulation runs each
/// rank's communication in the library's blocking waits (one thread per rank, whatever the
/// cores), moving virtual time only while every rank waits. A rank that panics ends the job,
/// as under [`crate::local::run`]: the others' waits fail with `PeerFailed`, and `run`
/// returns [`crate::Error::RankPanicked`]. A job in which every rank waits for something
/// nobody will send ends the same way after `cfg.stall_limit` of virtual time. Nonblocking
/// collectives (which run on a thread of their own) are refused with `InvalidArgument`.
pub fn run<T, F>(cfg: SimConfig, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(Comm) -> T + Sync,
{
    let fabrics = rdcoll_transport::sim::create(cfg)?;
    let job = fabrics[0].job();
    crate::local::run_ranks(fabrics, &|| job.end(), f)
}

//! Code shared by `rdcoll-bench` and `rdcoll-bench-mpi`: the OSU micro-benchmark loops
//! (latency, bandwidth, bidirectional bandwidth) written once against [`Messenger`], their
//! options, and their output in the osu_latency / osu_bw / osu_bibw 6.x layout.

pub mod coll;
pub mod coll_blocks;
pub mod depth;
pub mod osu;
pub mod overlap;
pub mod sim;
pub mod wan_scenario;

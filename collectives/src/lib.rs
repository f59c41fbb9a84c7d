//! rdcoll-collectives: broadcast (and, later, reduce, allreduce and barrier) over the emulated
//! network interface of `rdcoll-offload`.

pub mod schedule;

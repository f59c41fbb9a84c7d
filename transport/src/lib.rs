//! rdcoll's bottom layer: an RDMA-shaped fabric contract ([`Fabric`]: register memory, put with
//! immediate, get, small active messages, completions, failure reporting, a clock) and its
//! backends, each held to one conformance suite:
//!
//! | backend | ranks are | data moves by |
//! |---|---|---|
//! | [`local`] | threads of one process | `memcpy` between registered regions |
//! | [`shm`] | processes on one host | rings in a shared segment; direct stores into the shared heap; `process_vm_readv/writev` (or a bounce pipeline) for user memory |
//! | [`tcp`] | processes on several hosts | framed messages on nonblocking sockets; the target's I/O thread performs puts and gets |
//! | `ofi` (feature `ofi`) | processes on several hosts, over any libfabric provider (tcp, verbs, efa, cxi, ...) | libfabric messages; large puts and gets as one-sided writes and reads |
//!
//! [`bootstrap`] finds rank, size and peers (key-value store over TCP or a shared file system),
//! and [`launch`] starts a job of processes on this host (`rdcoll-run`). See DESIGN.md, "Transport".

pub mod bootstrap;
mod config;
mod copy;
pub mod cores;
mod error;
mod fabric;
#[doc(hidden)]
pub mod fuzzing;
mod gate;
pub mod launch;
pub mod local;
mod membarrier;
#[cfg(feature = "ofi")]
pub mod ofi;
mod region;
pub mod settings;
pub mod shm;
pub mod sim;
mod spin;
mod stream;
pub mod tcp;
mod types;
mod wait;

pub use config::FabricConfig;
pub use copy::copy_bytes;
pub use error::{Result, TransportError};
pub use fabric::{poll_up_to, Fabric, Poller, VIRTUAL_CLOCK_SLEEP};
pub use region::{Region, REGION_ALIGN};
pub use spin::{SpinGuard, SpinLock};
pub use types::{
    Event, EventRef, OpId, Payload, PeerCounters, PutStatus, Rank, RegionKey, RemoteAddr,
    RemoteRegion, MAX_MESSAGE_SIZE, REMOTE_REGION_BYTES,
};

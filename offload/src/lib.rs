//! rdcoll-offload: an emulated Portals-4-style network interface.
//!
//! A [`Ni`] sits on a transport [`Fabric`] and offers what a Portals NIC does: portal table
//! entries with priority and overflow lists of match list entries ([`MeSpec`]), unexpected
//! headers and overflow events, memory descriptors, counting events, full event queues,
//! triggered operations released by counter thresholds, and flow control. All target-side work
//! is done by a progress agent: a dedicated thread ([`Mode::Thread`]) or the host's own calls
//! ([`Mode::Inline`]), chosen by `RDCOLL_OFFLOAD=thread|inline|auto`.
//!
//! The exact rules (and the choices made where the sources differ) are in `SEMANTICS.md`
//! beside this crate. MPI portals ([`Ni::pt_alloc_mpi`]) keep their priority list and
//! unexpected headers in `rdcoll-matching`'s engine and take direct receives
//! ([`Ni::post_direct`]): that is how the point-to-point layer (`p2p`) matches every message.

mod agent;
mod changes;
pub mod core_share;
mod counter;
mod error;
mod event;
mod initiator;
mod match_list;
mod me;
mod mpi_lists;
mod ni;
mod ni_config;
mod ni_ct;
mod ni_mpi;
mod ni_puts;
pub mod p2p;
mod pin;
mod portal;
mod state;
mod table;
mod target;
mod target_direct;
mod types;
mod wire;

use std::sync::atomic::{AtomicBool, AtomicU64};

use rdcoll_transport::SpinLock;

pub use error::{OffloadError, Result};
pub use event::{Event, EventKind, Location};
pub use mpi_lists::{DirectDone, DirectHandle};
pub use ni::{ActivityMark, Ni, RdmaPut};
pub use ni_config::{Mode, NiConfig};
pub use ni_mpi::DirectPost;
pub use rdcoll_transport::Fabric;
pub use types::{
    AckReq, CtHandle, CtValue, EqHandle, GetArgs, List, MatchId, MdHandle, MdOptions, MeCounting,
    MeHandle, MeOptions, MeSpec, NiFail, PtIndex, PutArgs, SearchOp,
};

/// What the host and the agent share.
pub(crate) struct Shared {
    /// The NI's state: a `SpinLock`, released with a plain store (a `Mutex`'s locked release
    /// cost as much as taking it, twice per message on the latency path).
    pub(crate) state: SpinLock<state::State>,
    /// Notified whenever the agent changed counters or queued events (thread mode).
    pub(crate) changed: changes::Changes,
    pub(crate) stop: AtomicBool,
    pub(crate) mode: Mode,
    /// Polls by host threads waiting in thread mode ([`Ni::note_host_polling`]), a hint bumped
    /// with plain stores: while it moves, a host thread runs the agent's work itself and the
    /// agent leaves the fabric and the state lock to it.
    pub(crate) host_polls: AtomicU64,
    /// Posts of point-to-point sends and receives by host threads in thread mode
    /// ([`Ni::note_host_posting`]): they keep the agent aside too, but only shortly after a
    /// host thread last polled (a host that posts and never waits does not run the agent's
    /// work).
    pub(crate) host_posts: AtomicU64,
    /// Takes matched direct receives off the NI for their owner (`Ni::set_direct_collector`).
    pub(crate) direct_collector: std::sync::OnceLock<DirectCollector>,
    /// A pass left matched direct receives that the collector could not take (another thread
    /// was in the owner's calls): until a pass finds none left, a waiter that drives the agent
    /// runs passes even when the fabric has nothing new ([`Ni::directs_left`]).
    pub(crate) directs_left: AtomicBool,
}

/// What [`Ni::set_direct_collector`] installs: returns whether it took the matched direct
/// receives (`false`: they stay queued and it is asked again after the next pass).
pub type DirectCollector = Box<dyn Fn() -> bool + Send + Sync>;

//! The errors every transport operation can report.

use std::time::Duration;

use crate::types::Rank;

/// Result of a transport operation.
pub type Result<T, E = TransportError> = std::result::Result<T, E>;

/// What went wrong in a transport operation. Cloneable, because one failure (a dead peer) is
/// reported to every operation it touches.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The peer exited, crashed, or its link broke; every operation involving it fails so.
    #[error("peer rank {0} failed (exited, crashed or its link broke)")]
    PeerFailed(Rank),
    /// A rank outside `0..size` was named.
    #[error("rank {rank} is out of range for a job of {size} ranks")]
    InvalidRank {
        /// The rank that was named.
        rank: Rank,
        /// The job size.
        size: usize,
    },
    /// The remote key is unknown at the target, or names a region that was deregistered.
    #[error("region key {key:#x} is unknown or stale at rank {rank}")]
    BadKey {
        /// Rank that owns (or was supposed to own) the region.
        rank: Rank,
        /// The key that was named.
        key: u64,
    },
    /// The byte range does not fit inside the region.
    #[error(
        "range {offset}+{len} is outside the {region_len}-byte region {key:#x} at rank {rank}"
    )]
    OutOfRange {
        /// Rank that owns the region.
        rank: Rank,
        /// Region key.
        key: u64,
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Actual region length.
        region_len: u64,
    },
    /// An active message longer than the transport's limit.
    #[error("active message of {len} bytes exceeds the limit of {max} bytes")]
    MessageTooLarge {
        /// Length that was offered.
        len: usize,
        /// The documented limit ([`crate::MAX_MESSAGE_SIZE`]).
        max: usize,
    },
    /// A bounded resource (region slots, shared heap, pending operations) is exhausted.
    #[error("out of resources: {what}")]
    OutOfResources {
        /// Which resource.
        what: &'static str,
    },
    /// A wait ran past its deadline.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long was waited.
        after: Duration,
    },
    /// An operating-system call failed.
    #[error("{context}: {message}")]
    Io {
        /// What the transport was doing.
        context: String,
        /// The OS error text.
        message: String,
    },
    /// Starting the job failed (store unreachable, bad environment, peers missing).
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    /// A caller passed an argument that cannot be honoured.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A peer sent something that violates the wire protocol; its link is closed.
    #[error("protocol violation by rank {rank}: {what}")]
    Protocol {
        /// The offending peer.
        rank: Rank,
        /// What was wrong.
        what: String,
    },
}

impl TransportError {
    /// Wraps an OS error with what the transport was doing.
    pub fn io(context: impl Into<String>, err: std::io::Error) -> Self {
        TransportError::Io {
            context: context.into(),
            message: err.to_string(),
        }
    }
}

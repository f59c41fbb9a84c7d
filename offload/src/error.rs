//! Errors of the offload engine.

use rdcoll_transport::TransportError;

/// What went wrong with a call into the network interface.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OffloadError {
    /// A resource with a configured cap is exhausted (triggered operations, handles...).
    #[error("no space for another {what} (limit {limit})")]
    NoSpace {
        /// The resource.
        what: &'static str,
        /// Its configured limit.
        limit: usize,
    },
    /// A handle that does not name a live object, or an argument out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An event queue overflowed; this many events were lost before this call.
    #[error("{0} events were dropped because the event queue was full")]
    EventsDropped(u64),
    /// A wait ran out of time.
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// A message was longer than the receive buffer: nothing past the buffer was written, and
    /// the message was consumed.
    #[error("message from rank {sender} (tag {tag}) is {len} bytes, longer than the {capacity}-byte receive buffer")]
    Truncated {
        /// The sender.
        sender: rdcoll_transport::Rank,
        /// The message's tag.
        tag: u32,
        /// The message's true length.
        len: usize,
        /// The receive buffer's length.
        capacity: usize,
    },
    /// A blocking receive from `sender` cannot complete: `sender` waits in a blocking send
    /// (of a message this receive does not match) until this rank receives it, because its
    /// earlier messages, unreceived here, used up its share of this rank's memory for
    /// unexpected messages. The receive was withdrawn; nothing was lost.
    #[error("rank {sender} waits in a send until this rank receives it, but this receive does not match it: its earlier messages, unreceived here, fill its share of this rank's memory for unexpected messages (RDCOLL_UNEXPECTED_MAX = {limit} bytes); receive them first, or raise the limit")]
    SenderBlocked {
        /// The sender.
        sender: rdcoll_transport::Rank,
        /// `RDCOLL_UNEXPECTED_MAX` at this rank.
        limit: usize,
    },
    /// The transport failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// Result of offload calls.
pub type Result<T, E = OffloadError> = std::result::Result<T, E>;

pub(crate) fn invalid(what: impl Into<String>) -> OffloadError {
    OffloadError::InvalidArgument(what.into())
}

impl From<rdcoll_transport::settings::SettingError> for OffloadError {
    fn from(e: rdcoll_transport::settings::SettingError) -> Self {
        OffloadError::InvalidArgument(e.to_string())
    }
}

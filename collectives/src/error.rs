//! What a collective can fail with.

use rdcoll_offload::OffloadError;
use rdcoll_transport::TransportError;

/// Errors of collective operations.
#[derive(Debug, thiserror::Error)]
pub enum CollError {
    /// The transport failed (a rank of the communicator failed, I/O...).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The messaging engine failed otherwise (resources).
    #[error(transparent)]
    Offload(OffloadError),
    /// An argument was out of range (a root not in the communicator, a bad setting...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Ranks called the collective with arguments that cannot go together (another length,
    /// root, count, reduction or collective): on every rank with `check_collectives`, else as
    /// far as the protocol can tell.
    #[error("ranks disagree: {0}")]
    Mismatch(String),
    /// An earlier collective on this communicator failed, so the ranks may no longer agree
    /// on its state; it cannot be used for collectives any more.
    #[error("an earlier collective on this communicator failed ({0}); its collectives can no longer be used")]
    Broken(String),
}

impl From<OffloadError> for CollError {
    fn from(e: OffloadError) -> Self {
        match e {
            OffloadError::Transport(t) => CollError::Transport(t),
            OffloadError::InvalidArgument(s) => CollError::InvalidArgument(s),
            other => CollError::Offload(other),
        }
    }
}

/// Result of a collective.
pub type Result<T, E = CollError> = std::result::Result<T, E>;

impl From<rdcoll_transport::settings::SettingError> for CollError {
    fn from(e: rdcoll_transport::settings::SettingError) -> Self {
        CollError::InvalidArgument(e.to_string())
    }
}

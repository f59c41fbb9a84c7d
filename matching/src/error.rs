//! Errors of the matching engine: everything a caller or a peer can get wrong is one of these,
//! never a panic.

use std::fmt;

use crate::envelope::{ContextId, Envelope};
use crate::interface::ReceiveHandle;

/// A request the matching engine refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchError {
    /// A context id that does not fit in the 23 bits of the match-bit layout.
    ContextOutOfRange {
        /// The id asked for.
        id: u32,
    },
    /// Portals ignore bits that cover context bits; contexts never cross-match.
    IgnoresContextBits {
        /// The ignore bits given.
        ignore_bits: u64,
    },
    /// A receive handle whose receive was already matched or cancelled (or never existed here).
    StaleHandle {
        /// The handle given.
        handle: ReceiveHandle,
    },
}

impl fmt::Display for MatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MatchError::ContextOutOfRange { id } => {
                write!(f, "context id {id} does not fit in 15 bits")
            }
            MatchError::IgnoresContextBits { ignore_bits } => write!(
                f,
                "ignore bits {ignore_bits:#018x} cover context bits, which are always matched"
            ),
            MatchError::StaleHandle { handle } => {
                write!(f, "receive handle {handle:?} is no longer posted")
            }
        }
    }
}

impl std::error::Error for MatchError {}

/// Why the reorder stage refused a sequenced envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReorderError {
    /// The sequence number was already delivered or is already held.
    Duplicate {
        /// Context of the stream.
        context: ContextId,
        /// Sender of the stream.
        source: u32,
        /// The sequence number given.
        seq: u64,
        /// The next sequence number the stream expects.
        expected: u64,
    },
    /// The sequence number is further ahead of the expected one than the stage's window allows.
    TooFarAhead {
        /// Context of the stream.
        context: ContextId,
        /// Sender of the stream.
        source: u32,
        /// The sequence number given.
        seq: u64,
        /// The next sequence number the stream expects.
        expected: u64,
        /// The window: at most `expected + window - 1` is accepted.
        window: u64,
    },
}

impl fmt::Display for ReorderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReorderError::Duplicate {
                context,
                source,
                seq,
                expected,
            } => write!(
                f,
                "duplicate sequence number {seq} from rank {source} in {context:?} \
                 (next expected {expected})"
            ),
            ReorderError::TooFarAhead {
                context,
                source,
                seq,
                expected,
                window,
            } => write!(
                f,
                "sequence number {seq} from rank {source} in {context:?} is beyond the \
                 reorder window ({expected} + {window})"
            ),
        }
    }
}

impl std::error::Error for ReorderError {}

/// A sequenced envelope the reorder stage refused, handed back with its message value.
#[derive(Debug, PartialEq, Eq)]
pub struct Rejected<M> {
    /// Why it was refused.
    pub reason: ReorderError,
    /// The envelope given.
    pub envelope: Envelope,
    /// The message value given, returned to the caller.
    pub message: M,
}

impl<M> fmt::Display for Rejected<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.reason.fmt(f)
    }
}

impl<M: fmt::Debug> std::error::Error for Rejected<M> {}

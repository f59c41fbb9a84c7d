//! The operations every matching model offers, and what they answer.
//!
//! Both the engine ([`crate::Matcher`]) and the linear reference
//! ([`crate::reference::ReferenceMatcher`]) implement [`Matching`], so the differential test and
//! the benchmark drive them through the same calls and compare every decision.

use crate::envelope::{Envelope, ReceiveSpec};
use crate::error::{MatchError, Rejected};

/// Names one posted receive, for [`Matching::cancel`]. Stale once the receive is matched or
/// cancelled: a generation count makes a stale handle fail instead of reaching a newer receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReceiveHandle {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// Names one queued unexpected message, for [`crate::Matcher::unexpected_mut`] and
/// [`crate::Matcher::withdraw_unexpected`]. Stale once the message is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UnexpectedHandle {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// What posting a receive did.
#[derive(Debug, PartialEq, Eq)]
pub enum PostOutcome<R, M> {
    /// The receive took the earliest arrived matching unexpected message; nothing was posted.
    Matched {
        /// The message's envelope.
        envelope: Envelope,
        /// The message's value, now the caller's.
        message: M,
        /// The receive's value, handed back.
        receive: R,
    },
    /// No unexpected message matched; the receive is posted behind every earlier one.
    Posted(ReceiveHandle),
}

/// What the arrival of a message did.
#[derive(Debug, PartialEq, Eq)]
pub enum ArrivalOutcome<R, M> {
    /// The message took the earliest posted matching receive, which is no longer posted.
    Matched {
        /// The message's envelope.
        envelope: Envelope,
        /// The receive's value.
        receive: R,
        /// The message's value, handed back.
        message: M,
    },
    /// No posted receive matched; the message is queued as unexpected.
    Queued {
        /// The message's envelope.
        envelope: Envelope,
    },
}

/// A message-matching model: MPI semantics (paper 002, Section 1.1) over posted receives
/// carrying values `R` and unexpected messages carrying values `M`.
pub trait Matching<R, M> {
    /// Posts a receive: takes the earliest arrived matching unexpected message, or queues.
    fn post(&mut self, spec: ReceiveSpec, receive: R) -> PostOutcome<R, M>;

    /// A message arrives in its sender's order: takes the earliest posted matching receive, or
    /// queues as unexpected.
    fn arrive(&mut self, envelope: Envelope, message: M) -> ArrivalOutcome<R, M>;

    /// A message arrives with sequence number `seq` of its `(context, sender)` stream, possibly
    /// out of order. Every message now in order is matched as by [`Matching::arrive`] and its
    /// outcome pushed to `outcomes`, in order; an early one is held. Duplicates and
    /// out-of-window numbers are refused. A stream must use either this or `arrive`, not both.
    fn arrive_sequenced(
        &mut self,
        seq: u64,
        envelope: Envelope,
        message: M,
        outcomes: &mut Vec<ArrivalOutcome<R, M>>,
    ) -> Result<(), Rejected<M>>;

    /// The earliest arrived unexpected message `spec` matches, left in place (MPI_Iprobe). It
    /// takes `&mut self` because an implementation may update its indexes for `spec`'s shape.
    fn probe(&mut self, spec: &ReceiveSpec) -> Option<(Envelope, &M)>;

    /// Removes and returns the earliest arrived unexpected message `spec` matches, without a
    /// receive (MPI_Improbe); the returned value plays the role of the MPI message handle.
    fn matched_probe(&mut self, spec: &ReceiveSpec) -> Option<(Envelope, M)>;

    /// Withdraws a posted receive and returns its value; a stale handle is an error.
    fn cancel(&mut self, handle: ReceiveHandle) -> Result<R, MatchError>;

    /// Number of posted receives.
    fn posted_len(&self) -> usize;

    /// Number of queued unexpected messages.
    fn unexpected_len(&self) -> usize;
}

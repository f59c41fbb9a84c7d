//! Message matching for rdcoll: which posted receive an arriving message belongs to, and which
//! queued unexpected message a new receive takes.
//!
//! This crate is the "Matching" layer of DESIGN.md and depends on no other rdcoll crate. It
//! implements MPI matching semantics (paper 002, Section 1.1): a receive names a context, a
//! source or ANY_SOURCE and a tag or ANY_TAG; contexts never cross-match; matching is
//! non-overtaking both ways. It also accepts the Portals 4 form (Section 1.2): 64 match bits plus
//! ignore bits plus a source or ANY (see [`envelope`] for the bit layout).
//!
//! How the pieces fit:
//! - [`envelope`]: envelopes, receive specs, the match-bit layout, the internal-context flag.
//! - `slab`, `bucket_queue`: nodes in a slab, on intrusive FIFO lists keyed by bucket.
//! - `posted`: posted receives in one FIFO per wildcard shape; arrivals take the
//!   smallest-sequence bucket head.
//! - `unexpected`: each unexpected message on the four FIFOs a receive of each shape searches.
//! - `general`: Portals masks of no MPI shape, scanned and merged by post sequence.
//! - `queue_form`: short queues are scanned linearly, long ones indexed.
//! - [`reorder`]: restores per-sender order for transports that deliver out of order.
//! - [`Matcher`]: all of the above behind the [`Matching`] operations.
//! - [`reference`](mod@reference): the linear two-queue model the engine is tested and benchmarked against.
//!
//! ```
//! use rdcoll_matching::{ArrivalOutcome, ContextId, Envelope, Matcher, PostOutcome, ReceiveSpec,
//!     Source, TagPattern};
//!
//! let world = ContextId::user(0)?;
//! let mut engine: Matcher<&str, Vec<u8>> = Matcher::new();
//! let spec = ReceiveSpec::new(world, Source::Any, TagPattern::Exact(7));
//! assert!(matches!(engine.post(spec, "request 1"), PostOutcome::Posted(_)));
//! match engine.arrive(Envelope::new(world, 3, 7), vec![1, 2, 3]) {
//!     ArrivalOutcome::Matched { receive, message, .. } => {
//!         assert_eq!((receive, message.len()), ("request 1", 3))
//!     }
//!     ArrivalOutcome::Queued { .. } => unreachable!(),
//! }
//! # Ok::<(), rdcoll_matching::MatchError>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod bucket_queue;
mod engine;
pub mod envelope;
mod error;
mod general;
mod hasher;
mod interface;
mod posted;
mod queue_form;
pub mod reference;
pub mod reorder;
mod slab;
mod unexpected;

pub use engine::{Footprint, Matcher};
pub use envelope::{ContextId, Envelope, ReceiveSpec, Source, TagPattern};
pub use error::{MatchError, Rejected, ReorderError};
pub use interface::{ArrivalOutcome, Matching, PostOutcome, ReceiveHandle, UnexpectedHandle};
pub use reorder::ReorderStage;

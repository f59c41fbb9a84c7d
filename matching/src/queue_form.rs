//! The two forms a queue takes: short (one list, scanned) and indexed (shape buckets).
//!
//! Section "Matching" of DESIGN.md: small queues take a linear fast path. A queue switches to
//! the indexed form when it grows past [`PROMOTE_ABOVE`] entries and back when it shrinks to
//! [`DEMOTE_AT`]; the gap between the two makes each switch's O(threshold) cost amortize to O(1)
//! per operation. Both forms give the same decisions: the switch only changes how the earliest
//! match is found, never which one it is.

/// How a queue currently finds its earliest match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueForm {
    /// Only the post/arrival-order list; matching scans it from the front.
    Short,
    /// Also in shape buckets; matching looks at bucket heads.
    Indexed,
}

/// A short queue becomes indexed when an insert makes it longer than this.
pub(crate) const PROMOTE_ABOVE: usize = 16;

/// An indexed queue becomes short when a removal brings it down to this length.
pub(crate) const DEMOTE_AT: usize = 4;

//! The reorder stage: restores each sender's order before matching sees its envelopes.
//!
//! MPI's non-overtaking rule (paper 002, Section 1.1) is stated per sender, and the engine
//! decides matches in the order envelopes reach it. A transport with several paths (rails,
//! adaptive routing, RDMA completions polled from several queues) can deliver a sender's
//! envelopes out of order, so each envelope carries a sequence number per `(context, sender)`
//! stream, starting at 0. An envelope that is next in its stream passes straight through (the
//! common case touches one hash entry and no tree); an early one is held until the gap before it
//! fills, then it and every consecutive held envelope are released in order.

use std::collections::BTreeMap;

use crate::envelope::{ContextId, Envelope};
use crate::error::{Rejected, ReorderError};
use crate::hasher::FastMap;

/// Default window: how far ahead of the expected sequence number an envelope may be.
pub const DEFAULT_WINDOW: u64 = 1 << 20;

#[derive(Default)]
struct Stream<M> {
    expected: u64,
    held: BTreeMap<u64, (Envelope, M)>,
}

/// Per-sender reorder buffer in front of the matching engine.
pub struct ReorderStage<M> {
    streams: FastMap<u64, Stream<M>>,
    window: u64,
    held: usize,
}

impl<M> Default for ReorderStage<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M> ReorderStage<M> {
    /// A stage with the [`DEFAULT_WINDOW`].
    pub fn new() -> Self {
        Self::with_window(DEFAULT_WINDOW)
    }

    /// A stage that refuses envelopes `window` or more ahead of their stream's expected number
    /// (a window of 0 is treated as 1: in-order delivery only).
    pub fn with_window(window: u64) -> Self {
        ReorderStage {
            streams: FastMap::default(),
            window: window.max(1),
            held: 0,
        }
    }

    /// Accepts envelope `seq` of stream `(envelope.context, envelope.source)` and calls
    /// `release` for every envelope that is now in order, in order (none if `seq` is early).
    ///
    /// A duplicate or out-of-window sequence number is refused and handed back untouched.
    pub fn accept(
        &mut self,
        seq: u64,
        envelope: Envelope,
        message: M,
        mut release: impl FnMut(Envelope, M),
    ) -> Result<(), Rejected<M>> {
        let key = stream_key(envelope.context, envelope.source);
        let stream = self.streams.entry(key).or_insert_with(|| Stream {
            expected: 0,
            held: BTreeMap::new(),
        });
        let expected = stream.expected;
        if seq == expected {
            release(envelope, message);
            stream.expected += 1;
            while let Some(entry) = stream.held.first_entry() {
                if *entry.key() != stream.expected {
                    break;
                }
                let (envelope, message) = entry.remove();
                self.held -= 1;
                release(envelope, message);
                stream.expected += 1;
            }
            return Ok(());
        }
        let reason = if seq < expected || stream.held.contains_key(&seq) {
            ReorderError::Duplicate {
                context: envelope.context,
                source: envelope.source,
                seq,
                expected,
            }
        } else if seq - expected >= self.window {
            ReorderError::TooFarAhead {
                context: envelope.context,
                source: envelope.source,
                seq,
                expected,
                window: self.window,
            }
        } else {
            stream.held.insert(seq, (envelope, message));
            self.held += 1;
            return Ok(());
        };
        Err(Rejected {
            reason,
            envelope,
            message,
        })
    }

    /// Number of envelopes held waiting for a gap to fill.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Number of `(context, sender)` streams seen.
    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    /// The next sequence number stream `(context, source)` expects (0 for a new stream).
    pub fn expected(&self, context: ContextId, source: u32) -> u64 {
        self.streams
            .get(&stream_key(context, source))
            .map_or(0, |stream| stream.expected)
    }
}

fn stream_key(context: ContextId, source: u32) -> u64 {
    ((context.field() as u64) << 32) | source as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(source: u32, tag: u32) -> Envelope {
        Envelope::new(ContextId::user(1).expect("small id"), source, tag)
    }

    fn accept_all(
        stage: &mut ReorderStage<u32>,
        input: &[(u64, u32, u32)],
    ) -> Vec<Vec<(u32, u32)>> {
        input
            .iter()
            .map(|&(seq, source, value)| {
                let mut out = Vec::new();
                stage
                    .accept(seq, env(source, 0), value, |e, v| out.push((e.source, v)))
                    .expect("accepted");
                out
            })
            .collect()
    }

    #[test]
    fn in_order_passes_straight_through() {
        let mut stage = ReorderStage::new();
        let out = accept_all(&mut stage, &[(0, 1, 10), (1, 1, 11), (0, 2, 20)]);
        assert_eq!(out, vec![vec![(1, 10)], vec![(1, 11)], vec![(2, 20)]]);
        assert_eq!(stage.held(), 0);
        assert_eq!(stage.streams(), 2);
    }

    #[test]
    fn early_envelopes_are_held_until_the_gap_fills() {
        let mut stage = ReorderStage::new();
        let out = accept_all(
            &mut stage,
            &[(2, 1, 12), (1, 1, 11), (0, 2, 20), (0, 1, 10), (3, 1, 13)],
        );
        assert_eq!(
            out,
            vec![
                vec![],
                vec![],
                vec![(2, 20)],
                vec![(1, 10), (1, 11), (1, 12)],
                vec![(1, 13)],
            ]
        );
        assert_eq!(stage.expected(env(1, 0).context, 1), 4);
        assert_eq!(stage.held(), 0);
    }

    #[test]
    fn streams_are_per_context_and_sender() {
        let mut stage = ReorderStage::new();
        let user = env(1, 0);
        let internal = Envelope {
            context: user.context.internal_twin(),
            ..user
        };
        let mut out = Vec::new();
        stage.accept(1, user, 1, |_, v| out.push(v)).expect("held");
        stage
            .accept(0, internal, 2, |_, v| out.push(v))
            .expect("own stream");
        assert_eq!(
            out,
            vec![2],
            "internal stream does not fill the user stream's gap"
        );
    }

    #[test]
    fn duplicates_and_out_of_window_are_handed_back() {
        let mut stage = ReorderStage::with_window(4);
        let mut out = Vec::new();
        stage
            .accept(0, env(1, 0), 0, |_, v| out.push(v))
            .expect("ok");
        stage
            .accept(2, env(1, 0), 2, |_, v| out.push(v))
            .expect("held");
        let old = stage.accept(0, env(1, 0), 99, |_, v| out.push(v));
        let held_again = stage.accept(2, env(1, 0), 98, |_, v| out.push(v));
        let far = stage.accept(5, env(1, 0), 97, |_, v| out.push(v));
        for (result, value) in [(old, 99), (held_again, 98)] {
            let rejected = result.expect_err("duplicate");
            assert!(matches!(rejected.reason, ReorderError::Duplicate { .. }));
            assert_eq!(rejected.message, value);
        }
        let rejected = far.expect_err("too far");
        assert!(matches!(
            rejected.reason,
            ReorderError::TooFarAhead {
                seq: 5,
                expected: 1,
                window: 4,
                ..
            }
        ));
        assert_eq!(out, vec![0]);
        assert_eq!(stage.held(), 1);
    }
}

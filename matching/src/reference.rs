//! The reference model: two linear queues, first match wins.
//!
//! This is matching exactly as paper 002 describes the Portals 4 list walk (Section 1.2):
//! receives in post order, unexpected messages in arrival order, each searched from the front
//! with `((msg_bits ^ match_bits) & !ignore_bits) == 0` plus the source test. It shares no
//! matching code with the engine — it compares match bits, not compiled selectors — so the
//! differential test checks the engine against an independent statement of the rules, and the
//! benchmark measures the engine against the linear walk it replaces. Its reorder stage is a
//! linear list as well.

use std::collections::VecDeque;

use crate::envelope::{ContextId, Envelope, ReceiveSpec, Source};
use crate::error::{MatchError, Rejected, ReorderError};
use crate::interface::{ArrivalOutcome, Matching, PostOutcome, ReceiveHandle};
use crate::reorder::DEFAULT_WINDOW;

struct PostedEntry<R> {
    handle: ReceiveHandle,
    match_bits: u64,
    ignore_bits: u64,
    source: Source,
    value: R,
}

/// Linear-list matching: the specification the engine is tested against.
pub struct ReferenceMatcher<R, M> {
    posted: VecDeque<PostedEntry<R>>,
    unexpected: VecDeque<(Envelope, M)>,
    posts: u64,
    reorder: ReferenceReorder<M>,
}

impl<R, M> Default for ReferenceMatcher<R, M> {
    fn default() -> Self {
        Self::new()
    }
}

fn accepts(match_bits: u64, ignore_bits: u64, source: Source, envelope: &Envelope) -> bool {
    (envelope.match_bits() ^ match_bits) & !ignore_bits == 0
        && match source {
            Source::Any => true,
            Source::Rank(rank) => rank == envelope.source,
        }
}

impl<R, M> ReferenceMatcher<R, M> {
    /// Empty queues and a reorder stage with the default window.
    pub fn new() -> Self {
        Self::with_reorder_window(DEFAULT_WINDOW)
    }

    /// Empty queues and a reorder stage with the given window.
    pub fn with_reorder_window(window: u64) -> Self {
        ReferenceMatcher {
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            posts: 0,
            reorder: ReferenceReorder::with_window(window),
        }
    }

    fn first_unexpected(&self, spec: &ReceiveSpec) -> Option<usize> {
        let (match_bits, ignore_bits) = spec.match_bits();
        self.unexpected
            .iter()
            .position(|(envelope, _)| accepts(match_bits, ignore_bits, spec.source, envelope))
    }
}

fn arrive_at<R, M>(
    posted: &mut VecDeque<PostedEntry<R>>,
    unexpected: &mut VecDeque<(Envelope, M)>,
    envelope: Envelope,
    message: M,
) -> ArrivalOutcome<R, M> {
    let found = posted
        .iter()
        .position(|entry| accepts(entry.match_bits, entry.ignore_bits, entry.source, &envelope));
    match found.and_then(|at| posted.remove(at)) {
        Some(entry) => ArrivalOutcome::Matched {
            envelope,
            receive: entry.value,
            message,
        },
        None => {
            unexpected.push_back((envelope, message));
            ArrivalOutcome::Queued { envelope }
        }
    }
}

impl<R, M> Matching<R, M> for ReferenceMatcher<R, M> {
    fn post(&mut self, spec: ReceiveSpec, receive: R) -> PostOutcome<R, M> {
        if let Some((envelope, message)) = self
            .first_unexpected(&spec)
            .and_then(|at| self.unexpected.remove(at))
        {
            return PostOutcome::Matched {
                envelope,
                message,
                receive,
            };
        }
        let handle = ReceiveHandle {
            index: self.posts as u32,
            generation: (self.posts >> 32) as u32,
        };
        self.posts += 1;
        let (match_bits, ignore_bits) = spec.match_bits();
        self.posted.push_back(PostedEntry {
            handle,
            match_bits,
            ignore_bits,
            source: spec.source,
            value: receive,
        });
        PostOutcome::Posted(handle)
    }

    fn arrive(&mut self, envelope: Envelope, message: M) -> ArrivalOutcome<R, M> {
        arrive_at(&mut self.posted, &mut self.unexpected, envelope, message)
    }

    fn arrive_sequenced(
        &mut self,
        seq: u64,
        envelope: Envelope,
        message: M,
        outcomes: &mut Vec<ArrivalOutcome<R, M>>,
    ) -> Result<(), Rejected<M>> {
        let (posted, unexpected) = (&mut self.posted, &mut self.unexpected);
        self.reorder
            .accept(seq, envelope, message, |envelope, message| {
                outcomes.push(arrive_at(posted, unexpected, envelope, message));
            })
    }

    fn probe(&mut self, spec: &ReceiveSpec) -> Option<(Envelope, &M)> {
        let (envelope, message) = &self.unexpected[self.first_unexpected(spec)?];
        Some((*envelope, message))
    }

    fn matched_probe(&mut self, spec: &ReceiveSpec) -> Option<(Envelope, M)> {
        let at = self.first_unexpected(spec)?;
        self.unexpected.remove(at)
    }

    fn cancel(&mut self, handle: ReceiveHandle) -> Result<R, MatchError> {
        let at = self.posted.iter().position(|entry| entry.handle == handle);
        match at.and_then(|at| self.posted.remove(at)) {
            Some(entry) => Ok(entry.value),
            None => Err(MatchError::StaleHandle { handle }),
        }
    }

    fn posted_len(&self) -> usize {
        self.posted.len()
    }

    fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }
}

/// Linear-list reorder stage with the same contract as [`crate::ReorderStage`].
pub struct ReferenceReorder<M> {
    expected: Vec<(ContextId, u32, u64)>,
    held: Vec<(u64, Envelope, M)>,
    window: u64,
}

impl<M> ReferenceReorder<M> {
    /// A stage with the given window (0 is treated as 1).
    pub fn with_window(window: u64) -> Self {
        ReferenceReorder {
            expected: Vec::new(),
            held: Vec::new(),
            window: window.max(1),
        }
    }

    /// Accepts envelope `seq` of its stream; calls `release` for each envelope now in order.
    pub fn accept(
        &mut self,
        seq: u64,
        envelope: Envelope,
        message: M,
        mut release: impl FnMut(Envelope, M),
    ) -> Result<(), Rejected<M>> {
        let same_stream =
            |e: &Envelope| e.context == envelope.context && e.source == envelope.source;
        let stream = match self
            .expected
            .iter()
            .position(|&(c, s, _)| c == envelope.context && s == envelope.source)
        {
            Some(at) => at,
            None => {
                self.expected.push((envelope.context, envelope.source, 0));
                self.expected.len() - 1
            }
        };
        let expected = self.expected[stream].2;
        let duplicate = seq < expected
            || self
                .held
                .iter()
                .any(|(s, e, _)| *s == seq && same_stream(e));
        let reason = if duplicate {
            Some(ReorderError::Duplicate {
                context: envelope.context,
                source: envelope.source,
                seq,
                expected,
            })
        } else if seq - expected >= self.window {
            Some(ReorderError::TooFarAhead {
                context: envelope.context,
                source: envelope.source,
                seq,
                expected,
                window: self.window,
            })
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(Rejected {
                reason,
                envelope,
                message,
            });
        }
        self.held.push((seq, envelope, message));
        loop {
            let next = self.expected[stream].2;
            let Some(at) = self
                .held
                .iter()
                .position(|(s, e, _)| *s == next && same_stream(e))
            else {
                return Ok(());
            };
            let (_, envelope, message) = self.held.remove(at);
            self.expected[stream].2 += 1;
            release(envelope, message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::TagPattern;

    #[test]
    fn first_match_wins_in_both_directions() {
        let c = ContextId::user(1).expect("small id");
        let mut model: ReferenceMatcher<u32, u32> = ReferenceMatcher::new();
        model.arrive(Envelope::new(c, 1, 5), 10);
        model.arrive(Envelope::new(c, 2, 5), 11);
        let any = ReceiveSpec::new(c, Source::Any, TagPattern::Exact(5));
        assert!(matches!(
            model.post(any, 0),
            PostOutcome::Matched { message: 10, .. }
        ));
        let PostOutcome::Posted(handle) =
            model.post(ReceiveSpec::new(c, Source::Rank(3), TagPattern::Any), 1)
        else {
            panic!("nothing from rank 3 queued");
        };
        assert_eq!(model.cancel(handle), Ok(1));
        assert!(model.cancel(handle).is_err());
        assert_eq!(model.unexpected_len(), 1);
    }

    #[test]
    fn reorder_releases_in_sequence() {
        let c = ContextId::user(1).expect("small id");
        let mut stage = ReferenceReorder::with_window(8);
        let mut out = Vec::new();
        for seq in [2u64, 0, 1] {
            stage
                .accept(seq, Envelope::new(c, 0, 0), seq, |_, v| out.push(v))
                .expect("accepted");
        }
        assert_eq!(out, vec![0, 1, 2]);
        assert!(stage
            .accept(1, Envelope::new(c, 0, 0), 1, |_, _| {})
            .is_err());
    }
}

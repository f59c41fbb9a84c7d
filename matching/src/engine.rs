//! The matching engine: posted and unexpected queues behind a per-sender reorder stage.
//!
//! A new receive first looks for the earliest arrived matching unexpected message and only if
//! there is none is posted; an arriving message first looks for the earliest posted matching
//! receive and only if there is none is queued. Because every message that reaches the queues
//! was first offered to every earlier receive (and vice versa), this gives MPI's non-overtaking
//! order in both directions (paper 002, Section 1.1). Each side is O(1) per operation for MPI
//! shapes; see `posted` and `unexpected` for how.

use crate::envelope::{Envelope, ReceiveSpec, Selector};
use crate::error::{MatchError, Rejected};
use crate::interface::{ArrivalOutcome, Matching, PostOutcome, ReceiveHandle, UnexpectedHandle};
use crate::posted::PostedQueue;
use crate::reorder::ReorderStage;
use crate::slab::SlotId;
use crate::unexpected::UnexpectedQueue;

/// The matching engine for posted receives carrying `R` and unexpected messages carrying `M`.
pub struct Matcher<R, M> {
    posted: PostedQueue<R>,
    unexpected: UnexpectedQueue<M>,
    reorder: ReorderStage<M>,
}

/// How much memory the engine holds, against how much is queued. With ever-new tags the sizes
/// stay proportional to the queues' high-water marks, not to the traffic that passed through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Footprint {
    /// Posted receives now.
    pub posted: usize,
    /// Unexpected messages now.
    pub unexpected: usize,
    /// Envelopes held by the reorder stage now.
    pub held: usize,
    /// Node slots ever created in both slabs (their high-water marks).
    pub node_slots: usize,
    /// Capacity of both slabs' slot vectors.
    pub node_capacity: usize,
    /// Non-empty buckets now.
    pub live_buckets: usize,
    /// Bucket slots allocated.
    pub bucket_slots: usize,
    /// Summed capacity of the bucket hash maps.
    pub map_capacity: usize,
    /// `(context, sender)` streams the reorder stage tracks.
    pub reorder_streams: usize,
}

impl<R, M> Default for Matcher<R, M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R, M> Matcher<R, M> {
    /// An empty engine whose reorder stage has the default window.
    pub fn new() -> Self {
        Self::with_reorder_stage(ReorderStage::new())
    }

    /// An empty engine with the given reorder stage (e.g. a narrower window).
    pub fn with_reorder_stage(reorder: ReorderStage<M>) -> Self {
        Matcher {
            posted: PostedQueue::new(),
            unexpected: UnexpectedQueue::new(),
            reorder,
        }
    }

    /// Posts a receive: takes the earliest arrived matching unexpected message, or queues.
    #[inline]
    pub fn post(&mut self, spec: ReceiveSpec, receive: R) -> PostOutcome<R, M> {
        let selector = Selector::compile(&spec);
        if self.unexpected.len() > 0 {
            if let Some(found) = self.unexpected.find(selector) {
                let (envelope, message) = self.unexpected.take(found);
                return PostOutcome::Matched {
                    envelope,
                    message,
                    receive,
                };
            }
        }
        let SlotId { index, generation } = self.posted.post(selector, receive);
        PostOutcome::Posted(ReceiveHandle { index, generation })
    }

    /// A message arrives in its sender's order: takes the earliest posted matching receive, or
    /// queues as unexpected.
    #[inline]
    pub fn arrive(&mut self, envelope: Envelope, message: M) -> ArrivalOutcome<R, M> {
        arrive_at(&mut self.posted, &mut self.unexpected, envelope, message)
    }

    /// The first half of [`Matcher::arrive`]: takes the earliest posted receive `envelope`
    /// matches, or leaves everything as it was. A caller that gets `None` must queue the
    /// message with [`Matcher::queue_unexpected`] before the next arrival or post (or drop it),
    /// so that the two halves together are one arrival. For a network interface that has to
    /// find a place for the message's data before it can queue it.
    #[inline]
    pub fn take_posted(&mut self, envelope: &Envelope) -> Option<R> {
        if self.posted.len() == 0 {
            return None;
        }
        self.posted.take_match(envelope)
    }

    /// The second half of [`Matcher::arrive`] (after [`Matcher::take_posted`] found nothing):
    /// queues the message as unexpected behind every earlier one; a handle to it.
    #[inline]
    pub fn queue_unexpected(&mut self, envelope: Envelope, message: M) -> UnexpectedHandle {
        let SlotId { index, generation } = self.unexpected.push(envelope, message);
        UnexpectedHandle { index, generation }
    }

    /// The value of a queued unexpected message, to update in place; `None` once taken.
    pub fn unexpected_mut(&mut self, handle: UnexpectedHandle) -> Option<&mut M> {
        self.unexpected.value_mut(SlotId {
            index: handle.index,
            generation: handle.generation,
        })
    }

    /// Removes a queued unexpected message that must not be matched after all (its data never
    /// arrived); `None` once taken.
    pub fn withdraw_unexpected(&mut self, handle: UnexpectedHandle) -> Option<(Envelope, M)> {
        let found = self.unexpected.by_id(SlotId {
            index: handle.index,
            generation: handle.generation,
        })?;
        Some(self.unexpected.take(found))
    }

    /// A message arrives with its stream sequence number, possibly out of order; see
    /// [`Matching::arrive_sequenced`].
    pub fn arrive_sequenced(
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

    /// The earliest arrived unexpected message `spec` matches, left in place.
    pub fn probe(&self, spec: &ReceiveSpec) -> Option<(Envelope, &M)> {
        let found = self.unexpected.find(Selector::compile(spec))?;
        let (envelope, message) = self.unexpected.get(found);
        Some((*envelope, message))
    }

    /// Removes and returns the earliest arrived unexpected message `spec` matches.
    pub fn matched_probe(&mut self, spec: &ReceiveSpec) -> Option<(Envelope, M)> {
        let found = self.unexpected.find(Selector::compile(spec))?;
        Some(self.unexpected.take(found))
    }

    /// Removes and returns the earliest arrived unexpected message `spec` matches if `accept`
    /// takes it (one search, where [`Matcher::probe`] then [`Matcher::matched_probe`] take
    /// two); `None` if none matches or `accept` refuses it, which then stays queued.
    #[inline]
    pub fn matched_probe_if(
        &mut self,
        spec: &ReceiveSpec,
        accept: impl FnOnce(&Envelope, &M) -> bool,
    ) -> Option<(Envelope, M)> {
        if self.unexpected.len() == 0 {
            return None; // the latency path's common case: no compile, no search
        }
        let found = self.unexpected.find(Selector::compile(spec))?;
        let (envelope, message) = self.unexpected.get(found);
        if !accept(envelope, message) {
            return None;
        }
        Some(self.unexpected.take(found))
    }

    /// Withdraws a posted receive in O(1) and returns its value; a stale handle is an error.
    pub fn cancel(&mut self, handle: ReceiveHandle) -> Result<R, MatchError> {
        let id = SlotId {
            index: handle.index,
            generation: handle.generation,
        };
        self.posted
            .cancel(id)
            .ok_or(MatchError::StaleHandle { handle })
    }

    /// Number of posted receives.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }

    /// Number of queued unexpected messages.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }

    /// The reorder stage, to inspect its streams.
    pub fn reorder_stage(&self) -> &ReorderStage<M> {
        &self.reorder
    }

    /// Memory held against what is queued.
    pub fn footprint(&self) -> Footprint {
        let (posted_live, posted_slots, posted_maps) = self.posted.table_sizes();
        let (unexpected_live, unexpected_slots, unexpected_maps) = self.unexpected.table_sizes();
        Footprint {
            posted: self.posted.len(),
            unexpected: self.unexpected.len(),
            held: self.reorder.held(),
            node_slots: self.posted.nodes.slots() + self.unexpected.nodes.slots(),
            node_capacity: self.posted.nodes.capacity() + self.unexpected.nodes.capacity(),
            live_buckets: posted_live + unexpected_live,
            bucket_slots: posted_slots + unexpected_slots,
            map_capacity: posted_maps + unexpected_maps,
            reorder_streams: self.reorder.streams(),
        }
    }
}

#[inline]
fn arrive_at<R, M>(
    posted: &mut PostedQueue<R>,
    unexpected: &mut UnexpectedQueue<M>,
    envelope: Envelope,
    message: M,
) -> ArrivalOutcome<R, M> {
    if posted.len() > 0 {
        if let Some(receive) = posted.take_match(&envelope) {
            return ArrivalOutcome::Matched {
                envelope,
                receive,
                message,
            };
        }
    }
    unexpected.push(envelope, message);
    ArrivalOutcome::Queued { envelope }
}

impl<R, M> Matching<R, M> for Matcher<R, M> {
    fn post(&mut self, spec: ReceiveSpec, receive: R) -> PostOutcome<R, M> {
        Matcher::post(self, spec, receive)
    }

    fn arrive(&mut self, envelope: Envelope, message: M) -> ArrivalOutcome<R, M> {
        Matcher::arrive(self, envelope, message)
    }

    fn arrive_sequenced(
        &mut self,
        seq: u64,
        envelope: Envelope,
        message: M,
        outcomes: &mut Vec<ArrivalOutcome<R, M>>,
    ) -> Result<(), Rejected<M>> {
        Matcher::arrive_sequenced(self, seq, envelope, message, outcomes)
    }

    fn probe(&self, spec: &ReceiveSpec) -> Option<(Envelope, &M)> {
        Matcher::probe(self, spec)
    }

    fn matched_probe(&mut self, spec: &ReceiveSpec) -> Option<(Envelope, M)> {
        Matcher::matched_probe(self, spec)
    }

    fn cancel(&mut self, handle: ReceiveHandle) -> Result<R, MatchError> {
        Matcher::cancel(self, handle)
    }

    fn posted_len(&self) -> usize {
        Matcher::posted_len(self)
    }

    fn unexpected_len(&self) -> usize {
        Matcher::unexpected_len(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{ContextId, Source, TagPattern};

    fn ctx(id: u32) -> ContextId {
        ContextId::user(id).expect("small id")
    }

    fn spec(context: ContextId, source: Source, tag: TagPattern) -> ReceiveSpec {
        ReceiveSpec::new(context, source, tag)
    }

    fn posted_handle<R, M>(outcome: PostOutcome<R, M>) -> ReceiveHandle {
        match outcome {
            PostOutcome::Posted(handle) => handle,
            PostOutcome::Matched { .. } => panic!("expected the receive to be posted"),
        }
    }

    fn matched_receive<R, M>(outcome: ArrivalOutcome<R, M>) -> Option<R> {
        match outcome {
            ArrivalOutcome::Matched { receive, .. } => Some(receive),
            ArrivalOutcome::Queued { .. } => None,
        }
    }

    #[test]
    fn split_arrival_queues_updates_and_withdraws() {
        for padding in [0u32, 40] {
            let mut engine: Matcher<u32, u32> = Matcher::new();
            let c = ctx(1);
            for i in 0..padding {
                engine.queue_unexpected(Envelope::new(c, 9, 1000 + i), 1000 + i);
            }
            engine.post(spec(c, Source::Rank(0), TagPattern::Exact(1)), 7);
            assert_eq!(engine.take_posted(&Envelope::new(c, 0, 2)), None);
            assert_eq!(engine.posted_len(), 1, "a miss leaves the receive posted");
            assert_eq!(engine.take_posted(&Envelope::new(c, 0, 1)), Some(7));
            let first = engine.queue_unexpected(Envelope::new(c, 0, 5), 1);
            let second = engine.queue_unexpected(Envelope::new(c, 0, 5), 2);
            *engine.unexpected_mut(second).expect("queued") = 22;
            assert_eq!(
                engine.withdraw_unexpected(first),
                Some((Envelope::new(c, 0, 5), 1))
            );
            assert_eq!(engine.withdraw_unexpected(first), None, "stale handle");
            let any = spec(c, Source::Any, TagPattern::Exact(5));
            assert_eq!(engine.matched_probe(&any).map(|(_, m)| m), Some(22));
            assert!(engine.unexpected_mut(second).is_none(), "taken");
            assert_eq!(engine.unexpected_len(), padding as usize);
        }
    }

    #[test]
    fn cancel_withdraws_and_stale_handles_are_errors() {
        let mut engine: Matcher<u32, u32> = Matcher::new();
        let c = ctx(1);
        let first = posted_handle(engine.post(spec(c, Source::Rank(0), TagPattern::Exact(1)), 1));
        let second = posted_handle(engine.post(spec(c, Source::Rank(0), TagPattern::Exact(1)), 2));
        assert_eq!(engine.cancel(first), Ok(1));
        assert_eq!(
            engine.cancel(first),
            Err(MatchError::StaleHandle { handle: first })
        );
        assert_eq!(
            matched_receive(engine.arrive(Envelope::new(c, 0, 1), 10)),
            Some(2),
            "cancelled receive is skipped"
        );
        assert_eq!(
            engine.cancel(second),
            Err(MatchError::StaleHandle { handle: second }),
            "a matched receive cannot be cancelled"
        );
        let bogus = ReceiveHandle {
            index: 12345,
            generation: 0,
        };
        assert!(engine.cancel(bogus).is_err());
    }

    #[test]
    fn cancel_in_the_middle_of_a_deep_queue() {
        let mut engine: Matcher<u32, ()> = Matcher::new();
        let c = ctx(1);
        let handles: Vec<_> = (0..1000)
            .map(|i| posted_handle(engine.post(spec(c, Source::Any, TagPattern::Exact(i % 7)), i)))
            .collect();
        for i in (0..1000).step_by(2) {
            assert_eq!(engine.cancel(handles[i as usize]), Ok(i));
        }
        for i in (1..1000).step_by(2) {
            // Every earlier odd receive with this tag was taken by an earlier arrival.
            let got = matched_receive(engine.arrive(Envelope::new(c, 3, i % 7), ()));
            assert_eq!(got, Some(i));
        }
        assert_eq!(engine.posted_len(), 0);
    }

    #[test]
    fn probe_looks_and_matched_probe_takes() {
        let mut engine: Matcher<u32, &str> = Matcher::new();
        let c = ctx(2);
        assert!(matches!(
            engine.arrive(Envelope::new(c, 4, 9), "first"),
            ArrivalOutcome::Queued { .. }
        ));
        engine.arrive(Envelope::new(c, 4, 9), "second");
        let any = spec(c, Source::Any, TagPattern::Any);
        assert_eq!(engine.probe(&any), Some((Envelope::new(c, 4, 9), &"first")));
        assert_eq!(
            engine.probe(&any).map(|(_, m)| *m),
            Some("first"),
            "probe leaves it"
        );
        assert_eq!(
            engine.matched_probe(&spec(c, Source::Rank(4), TagPattern::Exact(9))),
            Some((Envelope::new(c, 4, 9), "first"))
        );
        assert_eq!(engine.probe(&any).map(|(_, m)| *m), Some("second"));
        assert_eq!(engine.matched_probe_if(&any, |_, m| *m == "first"), None);
        assert_eq!(
            engine.probe(&any).map(|(_, m)| *m),
            Some("second"),
            "refused: left"
        );
        assert_eq!(
            engine.probe(&spec(c, Source::Rank(5), TagPattern::Any)),
            None
        );
        match engine.post(any, 7) {
            PostOutcome::Matched {
                message, receive, ..
            } => assert_eq!((message, receive), ("second", 7)),
            PostOutcome::Posted(_) => panic!("should have matched"),
        }
        assert_eq!(engine.matched_probe(&any), None);
    }

    #[test]
    fn contexts_never_cross_match() {
        let mut engine: Matcher<u32, u32> = Matcher::new();
        for context in 0..5 {
            engine.post(spec(ctx(context), Source::Any, TagPattern::Any), context);
        }
        for context in (0..5).rev() {
            let got = matched_receive(engine.arrive(Envelope::new(ctx(context), 1, 1), 0));
            assert_eq!(got, Some(context));
        }
        engine.arrive(Envelope::new(ctx(6), 1, 1), 60);
        for context in 0..5 {
            let probe = spec(ctx(context), Source::Any, TagPattern::Any);
            assert_eq!(engine.probe(&probe), None);
        }
    }

    #[test]
    fn internal_traffic_is_never_taken_by_user_any_tag() {
        for depth in [0u32, 100] {
            let mut engine: Matcher<&str, &str> = Matcher::new();
            let user = ctx(3);
            let internal = user.internal_twin();
            for i in 0..depth {
                engine.post(
                    spec(user, Source::Rank(99), TagPattern::Exact(i)),
                    "padding",
                );
            }
            engine.post(spec(user, Source::Any, TagPattern::Any), "user any-any");
            engine.post(spec(user, Source::Rank(1), TagPattern::Any), "user any-tag");
            // Collective traffic on the internal twin, same source, any tag: must queue.
            for tag in [0, 1, u32::MAX] {
                let outcome = engine.arrive(Envelope::new(internal, 1, tag), "collective");
                assert!(matches!(outcome, ArrivalOutcome::Queued { .. }), "{tag}");
            }
            // A user ANY_TAG receive or probe does not see it either.
            assert_eq!(
                engine.probe(&spec(user, Source::Any, TagPattern::Any)),
                None
            );
            // The internal receive does.
            match engine.post(
                spec(internal, Source::Rank(1), TagPattern::Exact(1)),
                "coll",
            ) {
                PostOutcome::Matched { message, .. } => assert_eq!(message, "collective"),
                PostOutcome::Posted(_) => panic!("internal receive must match"),
            }
            // And user traffic still goes to the user receives, in post order.
            let got = matched_receive(engine.arrive(Envelope::new(user, 1, 5), "user"));
            assert_eq!(got, Some("user any-any"));
        }
    }

    #[test]
    fn sequenced_arrivals_match_in_sender_order() {
        let mut engine: Matcher<u32, u32> = Matcher::new();
        let c = ctx(1);
        // Two ANY_TAG receives from rank 0: must take message 0 then message 1.
        engine.post(spec(c, Source::Rank(0), TagPattern::Any), 100);
        engine.post(spec(c, Source::Rank(0), TagPattern::Any), 101);
        let mut outcomes = Vec::new();
        engine
            .arrive_sequenced(1, Envelope::new(c, 0, 8), 1, &mut outcomes)
            .expect("held");
        assert!(outcomes.is_empty(), "message 1 waits for message 0");
        assert_eq!(engine.probe(&spec(c, Source::Any, TagPattern::Any)), None);
        engine
            .arrive_sequenced(0, Envelope::new(c, 0, 7), 0, &mut outcomes)
            .expect("in order");
        let pairs: Vec<_> = outcomes
            .into_iter()
            .map(|o| match o {
                ArrivalOutcome::Matched {
                    receive, message, ..
                } => (message, receive),
                ArrivalOutcome::Queued { .. } => panic!("should match"),
            })
            .collect();
        assert_eq!(pairs, vec![(0, 100), (1, 101)]);
        let rejected = engine
            .arrive_sequenced(1, Envelope::new(c, 0, 8), 5, &mut Vec::new())
            .expect_err("duplicate");
        assert_eq!(rejected.message, 5);
    }

    #[test]
    fn portals_masks_of_no_mpi_shape_match_by_the_portals_rule() {
        use crate::envelope::{NONCE_MASK, TAG_SHIFT};
        for padding in [0u32, 50] {
            let mut engine: Matcher<u32, u32> = Matcher::new();
            let c = ctx(4);
            for i in 0..padding {
                engine.post(
                    spec(c, Source::Rank(9), TagPattern::Exact(1000 + i)),
                    1000 + i,
                );
            }
            // Tag layout of the application: high byte = phase, low byte = step; receive any
            // step of phase 3 from rank 2, posted between two exact receives.
            let phase_bits = Envelope::new(c, 0, 0x0300).match_bits();
            let any_step = ReceiveSpec::from_match_bits(
                phase_bits,
                (0xFF << TAG_SHIFT) | NONCE_MASK,
                Source::Rank(2),
            )
            .expect("tag bits only");
            engine.post(spec(c, Source::Rank(2), TagPattern::Exact(0x0305)), 1);
            engine.post(any_step, 2);
            engine.post(spec(c, Source::Rank(2), TagPattern::Exact(0x0307)), 3);
            let arrive = |engine: &mut Matcher<u32, u32>, tag, nonce| {
                let envelope = Envelope {
                    nonce,
                    ..Envelope::new(c, 2, tag)
                };
                matched_receive(
                    engine.arrive(Envelope::from_match_bits(envelope.match_bits(), 2), 0),
                )
            };
            assert_eq!(
                arrive(&mut engine, 0x0307, 0xAA),
                Some(2),
                "mask posted before exact"
            );
            assert_eq!(arrive(&mut engine, 0x0307, 0), Some(3));
            assert_eq!(arrive(&mut engine, 0x0407, 0), None, "phase 4 differs");
            assert_eq!(arrive(&mut engine, 0x0305, 0), Some(1));
            // The queued phase-4 message is found by a masked probe for phase 4 only.
            let phase_4 = ReceiveSpec::new(
                c,
                Source::Any,
                TagPattern::Masked {
                    tag: 0x0400,
                    ignore: 0xFF,
                },
            );
            let phase_3 = ReceiveSpec {
                tag: TagPattern::Masked {
                    tag: 0x0300,
                    ignore: 0xFF,
                },
                ..phase_4
            };
            assert_eq!(engine.probe(&phase_3), None);
            assert_eq!(
                engine.matched_probe(&phase_4).map(|(e, _)| e.tag),
                Some(0x0407)
            );
        }
    }

    #[test]
    fn footprint_returns_to_empty_after_a_burst() {
        let mut engine: Matcher<u32, u32> = Matcher::new();
        let c = ctx(1);
        for tag in 0..10_000 {
            engine.post(spec(c, Source::Rank(1), TagPattern::Exact(tag)), tag);
        }
        let full = engine.footprint();
        assert_eq!(full.posted, 10_000);
        assert_eq!(full.live_buckets, 10_000);
        for tag in 0..10_000 {
            engine.arrive(Envelope::new(c, 1, tag), tag);
        }
        let empty = engine.footprint();
        assert_eq!(
            (empty.posted, empty.live_buckets, empty.map_capacity),
            (0, 0, 0)
        );
        assert_eq!(
            empty.node_slots, 10_000,
            "slab keeps its high-water mark of slots"
        );
    }
}

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

    /// The earliest arrived queued unexpected message whose envelope is `envelope`, its nonce
    /// included (which no receive looks at), to update in place.
    pub fn unexpected_exact_mut(&mut self, envelope: &Envelope) -> Option<&mut M> {
        self.unexpected.exact_mut(envelope)
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
    pub fn probe(&mut self, spec: &ReceiveSpec) -> Option<(Envelope, &M)> {
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

    fn probe(&mut self, spec: &ReceiveSpec) -> Option<(Envelope, &M)> {
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
mod tests;

//! The posted-receive queue: which posted receive an arriving message takes.
//!
//! MPI's rule (paper 002, Section 1.1) is that an arrival takes the *earliest posted* matching
//! receive. Receives are kept in one FIFO per wildcard shape — exact `(context, source, tag)`,
//! any-tag `(context, source)`, any-source `(context, tag)`, any-any `(context)` — each entry
//! stamped with a post sequence number. The earliest matching receive is the smallest-sequence
//! head among the (at most four) buckets an envelope selects, merged with the first match in the
//! general class (Portals masks of no MPI shape, see `general`). While the queue is short it is
//! kept only as a small contiguous array in post order and scanned, which beats hash lookups.

use crate::bucket_queue::{push_back, unlink, BucketTable, Link, Linked, ListEnds};
use crate::envelope::{Envelope, Selector, Shape};
use crate::general;
use crate::queue_form::{QueueForm, DEMOTE_AT, PROMOTE_ABOVE};
use crate::slab::{Slab, SlotId, NIL};

/// Lane of the post-order list every posted receive is on while the queue is indexed.
const ALL: usize = 0;
/// Lane of the bucket (shape FIFO) a posted receive is on while the queue is indexed.
pub(crate) const BUCKET: usize = 1;

/// A posted receive's bookkeeping in the slab (its value `R` sits beside it).
#[derive(Clone, Copy)]
pub(crate) struct PostedNode {
    pub(crate) selector: Selector,
    pub(crate) seq: u64,
    lanes: [Link; 2],
    bucket: u32,
}

impl Linked for PostedNode {
    #[inline]
    fn link(&self, lane: usize) -> Link {
        self.lanes[lane]
    }
    #[inline]
    fn link_mut(&mut self, lane: usize) -> &mut Link {
        &mut self.lanes[lane]
    }
}

/// Key of the exact bucket: context, source and tag.
#[inline]
pub(crate) fn exact_key(context: u32, source: u32, tag: u32) -> u128 {
    ((context as u128) << 64) | ((source as u128) << 32) | tag as u128
}

/// Key of a bucket with one wildcard: context and the remaining field.
#[inline]
pub(crate) fn pair_key(context: u32, field: u32) -> u64 {
    ((context as u64) << 32) | field as u64
}

/// A posted receive of the short form: what to compare, and where its node is.
#[derive(Clone, Copy)]
struct ShortEntry {
    selector: Selector,
    index: u32,
}

/// Posted receives, in their short or indexed form.
pub(crate) struct PostedQueue<R> {
    pub(crate) nodes: Slab<PostedNode, R>,
    /// Short form: every posted receive, in post order.
    short: Vec<ShortEntry>,
    /// Indexed form: every posted receive, in post order (to return to the short form).
    all: ListEnds,
    /// Post sequence number of the next receive.
    next_seq: u64,
    form: QueueForm,
    /// Posted receives of each shape, so an arrival skips the lookups of absent shapes.
    per_shape: [usize; 5],
    exact: BucketTable<u128>,
    any_tag: BucketTable<u64>,
    any_source: BucketTable<u64>,
    any_any: BucketTable<u32>,
    pub(crate) general: BucketTable<u32>,
}

impl<R> PostedQueue<R> {
    /// An empty queue.
    pub(crate) fn new() -> Self {
        PostedQueue {
            nodes: Slab::new(),
            short: Vec::with_capacity(PROMOTE_ABOVE + 1),
            all: ListEnds::EMPTY,
            next_seq: 0,
            form: QueueForm::Short,
            per_shape: [0; 5],
            exact: BucketTable::new(),
            any_tag: BucketTable::new(),
            any_source: BucketTable::new(),
            any_any: BucketTable::new(),
            general: BucketTable::new(),
        }
    }

    /// Number of posted receives.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Appends a receive; returns its slot address.
    #[inline]
    pub(crate) fn post(&mut self, selector: Selector, value: R) -> SlotId {
        let seq = self.next_seq;
        self.next_seq += 1;
        let id = self.nodes.insert(
            PostedNode {
                selector,
                seq,
                lanes: [Link::DETACHED; 2],
                bucket: NIL,
            },
            value,
        );
        self.per_shape[selector.shape as usize] += 1;
        match self.form {
            QueueForm::Short => {
                self.short.push(ShortEntry {
                    selector,
                    index: id.index,
                });
                if self.short.len() > PROMOTE_ABOVE {
                    self.promote();
                }
            }
            QueueForm::Indexed => {
                push_back(&mut self.nodes, &mut self.all, id.index, ALL);
                self.link_bucket(id.index);
            }
        }
        id
    }

    /// Removes and returns the earliest posted receive that `envelope` matches.
    #[inline]
    pub(crate) fn take_match(&mut self, envelope: &Envelope) -> Option<R> {
        match self.form {
            QueueForm::Short => {
                let position = self
                    .short
                    .iter()
                    .position(|entry| entry.selector.matches(envelope))?;
                Some(self.remove_short(position))
            }
            QueueForm::Indexed => {
                let index = self.find_indexed(envelope)?;
                Some(self.remove_indexed(index))
            }
        }
    }

    /// Removes the receive `id` names, if it is still posted.
    pub(crate) fn cancel(&mut self, id: SlotId) -> Option<R> {
        if !self.nodes.contains(id) {
            return None;
        }
        match self.form {
            QueueForm::Short => {
                let position = self.short.iter().position(|e| e.index == id.index)?;
                Some(self.remove_short(position))
            }
            QueueForm::Indexed => Some(self.remove_indexed(id.index)),
        }
    }

    /// Bucket tables, for the footprint: (live buckets, bucket slots, map capacity).
    pub(crate) fn table_sizes(&self) -> (usize, usize, usize) {
        let live = self.exact.live()
            + self.any_tag.live()
            + self.any_source.live()
            + self.any_any.live()
            + self.general.live();
        let slots = self.exact.slots()
            + self.any_tag.slots()
            + self.any_source.slots()
            + self.any_any.slots()
            + self.general.slots();
        let capacity = self.exact.map_capacity()
            + self.any_tag.map_capacity()
            + self.any_source.map_capacity()
            + self.any_any.map_capacity()
            + self.general.map_capacity();
        (live, slots, capacity)
    }

    /// The smallest-sequence head among the candidate buckets and the general class.
    #[inline]
    fn find_indexed(&self, envelope: &Envelope) -> Option<u32> {
        let context = envelope.context.field();
        let mut best: Option<(u64, u32)> = None;
        let mut consider = |head: Option<u32>| {
            if let Some(index) = head {
                let seq = self.nodes.node(index).seq;
                if best.is_none_or(|(best_seq, _)| seq < best_seq) {
                    best = Some((seq, index));
                }
            }
        };
        if self.per_shape[Shape::Exact as usize] > 0 {
            consider(
                self.exact
                    .head(&exact_key(context, envelope.source, envelope.tag)),
            );
        }
        if self.per_shape[Shape::AnyTag as usize] > 0 {
            consider(self.any_tag.head(&pair_key(context, envelope.source)));
        }
        if self.per_shape[Shape::AnySource as usize] > 0 {
            consider(self.any_source.head(&pair_key(context, envelope.tag)));
        }
        if self.per_shape[Shape::AnyAny as usize] > 0 {
            consider(self.any_any.head(&context));
        }
        if self.per_shape[Shape::General as usize] > 0 {
            let before = best.map_or(u64::MAX, |(seq, _)| seq);
            if let Some(found) = general::first_posted_match(self, envelope, before) {
                best = Some(found);
            }
        }
        best.map(|(_, index)| index)
    }

    #[inline]
    fn remove_short(&mut self, position: usize) -> R {
        let index = self.short.remove(position).index;
        self.per_shape[self.nodes.node(index).selector.shape as usize] -= 1;
        self.nodes.remove(index)
    }

    #[inline]
    fn remove_indexed(&mut self, index: u32) -> R {
        unlink(&mut self.nodes, &mut self.all, index, ALL);
        self.unlink_bucket(index);
        self.per_shape[self.nodes.node(index).selector.shape as usize] -= 1;
        let value = self.nodes.remove(index);
        if self.nodes.len() <= DEMOTE_AT {
            self.demote();
        }
        value
    }

    fn link_bucket(&mut self, index: u32) {
        let selector = self.nodes.node(index).selector;
        let (context, source, tag) = (selector.context, selector.source, selector.tag);
        let (id, ends) = match selector.shape {
            Shape::Exact => {
                let id = self.exact.get_or_create(exact_key(context, source, tag));
                (id, self.exact.ends_mut(id))
            }
            Shape::AnyTag => {
                let id = self.any_tag.get_or_create(pair_key(context, source));
                (id, self.any_tag.ends_mut(id))
            }
            Shape::AnySource => {
                let id = self.any_source.get_or_create(pair_key(context, tag));
                (id, self.any_source.ends_mut(id))
            }
            Shape::AnyAny => {
                let id = self.any_any.get_or_create(context);
                (id, self.any_any.ends_mut(id))
            }
            Shape::General => {
                let id = self.general.get_or_create(context);
                (id, self.general.ends_mut(id))
            }
        };
        push_back(&mut self.nodes, ends, index, BUCKET);
        self.nodes.node_mut(index).bucket = id;
    }

    fn unlink_bucket(&mut self, index: u32) {
        let node = self.nodes.node(index);
        let (shape, id) = (node.selector.shape, node.bucket);
        let nodes = &mut self.nodes;
        match shape {
            Shape::Exact => self.exact.unlink_node(nodes, id, index, BUCKET),
            Shape::AnyTag => self.any_tag.unlink_node(nodes, id, index, BUCKET),
            Shape::AnySource => self.any_source.unlink_node(nodes, id, index, BUCKET),
            Shape::AnyAny => self.any_any.unlink_node(nodes, id, index, BUCKET),
            Shape::General => self.general.unlink_node(nodes, id, index, BUCKET),
        }
    }

    /// Short to indexed: link every receive, in post order, into the post-order list and its
    /// bucket.
    fn promote(&mut self) {
        self.form = QueueForm::Indexed;
        let mut short = std::mem::take(&mut self.short);
        for entry in short.drain(..) {
            push_back(&mut self.nodes, &mut self.all, entry.index, ALL);
            self.link_bucket(entry.index);
        }
        self.short = short;
    }

    /// Indexed to short: copy the few remaining receives, in post order, into the short array
    /// and drop the buckets.
    fn demote(&mut self) {
        self.form = QueueForm::Short;
        let mut at = self.all.head;
        while at != NIL {
            let node = self.nodes.node(at);
            self.short.push(ShortEntry {
                selector: node.selector,
                index: at,
            });
            at = node.lanes[ALL].next;
        }
        self.all = ListEnds::EMPTY;
        self.exact.clear();
        self.any_tag.clear();
        self.any_source.clear();
        self.any_any.clear();
        self.general.clear();
    }

    /// Values of the posted receives in post order (for tests).
    #[cfg(test)]
    pub(crate) fn values_in_order(&self) -> Vec<&R> {
        let mut out = Vec::new();
        match self.form {
            QueueForm::Short => {
                out.extend(self.short.iter().map(|e| self.nodes.value(e.index)));
            }
            QueueForm::Indexed => {
                let mut at = self.all.head;
                while at != NIL {
                    out.push(self.nodes.value(at));
                    at = self.nodes.node(at).lanes[ALL].next;
                }
            }
        }
        out
    }

    /// Whether the queue is in its indexed form (for tests).
    #[cfg(test)]
    pub(crate) fn is_indexed(&self) -> bool {
        self.form == QueueForm::Indexed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{ContextId, ReceiveSpec, Source, TagPattern};

    fn ctx() -> ContextId {
        ContextId::user(1).expect("small id")
    }

    fn sel(source: Source, tag: TagPattern) -> Selector {
        Selector::compile(&ReceiveSpec::new(ctx(), source, tag))
    }

    fn env(source: u32, tag: u32) -> Envelope {
        Envelope::new(ctx(), source, tag)
    }

    /// Posts the same mixed sequence of receives at several depths (so both forms are used).
    fn check_earliest_of_four_shapes(padding: usize) {
        let mut queue = PostedQueue::new();
        for i in 0..padding {
            queue.post(sel(Source::Rank(99), TagPattern::Exact(i as u32)), 1000 + i);
        }
        queue.post(sel(Source::Any, TagPattern::Exact(7)), 1);
        queue.post(sel(Source::Rank(2), TagPattern::Any), 2);
        queue.post(sel(Source::Rank(2), TagPattern::Exact(7)), 3);
        queue.post(sel(Source::Any, TagPattern::Any), 4);
        assert_eq!(queue.is_indexed(), padding + 4 > PROMOTE_ABOVE);
        // Each arrival from rank 2 with tag 7 matches all four; post order decides.
        for expected in 1..=4 {
            assert_eq!(queue.take_match(&env(2, 7)), Some(expected));
        }
        assert_eq!(queue.take_match(&env(2, 7)), None);
        assert_eq!(queue.len(), padding);
    }

    #[test]
    fn arrival_takes_earliest_posted_in_short_form() {
        check_earliest_of_four_shapes(0);
    }

    #[test]
    fn arrival_takes_earliest_posted_in_indexed_form() {
        check_earliest_of_four_shapes(100);
    }

    #[test]
    fn promote_then_demote_keeps_post_order() {
        let mut queue = PostedQueue::new();
        let n = PROMOTE_ABOVE as u32 + 10;
        for i in 0..n {
            let source = if i % 3 == 0 {
                Source::Any
            } else {
                Source::Rank(i % 2)
            };
            queue.post(sel(source, TagPattern::Exact(i % 4)), i);
        }
        assert!(queue.is_indexed());
        let mut order = Vec::new();
        while let Some(v) = queue.take_match(&env(0, 0)) {
            order.push(v);
        }
        let expected: Vec<u32> = (0..n)
            .filter(|i| i % 4 == 0 && (i % 3 == 0 || i % 2 == 0))
            .collect();
        assert_eq!(order, expected);
        while queue.len() > DEMOTE_AT {
            let head = *queue.values_in_order()[0];
            let source = if head % 3 == 0 { 5 } else { head % 2 };
            assert_eq!(queue.take_match(&env(source, head % 4)), Some(head));
        }
        assert!(!queue.is_indexed());
        let (live, slots, _) = queue.table_sizes();
        assert_eq!((live, slots), (0, 0));
    }

    #[test]
    fn cancel_by_id_is_exact_and_stale_ids_are_refused() {
        let mut queue = PostedQueue::new();
        let ids: Vec<SlotId> = (0..40)
            .map(|i| queue.post(sel(Source::Rank(1), TagPattern::Exact(5)), i))
            .collect();
        assert_eq!(queue.cancel(ids[10]), Some(10));
        assert_eq!(queue.cancel(ids[10]), None, "second cancel is stale");
        assert_eq!(queue.take_match(&env(1, 5)), Some(0));
        assert_eq!(
            queue.cancel(ids[0]),
            None,
            "matched receive cannot be cancelled"
        );
        let reused = queue.post(sel(Source::Rank(1), TagPattern::Exact(5)), 99);
        assert_eq!(
            queue.cancel(ids[0]),
            None,
            "old id does not reach the new occupant"
        );
        assert_eq!(queue.cancel(reused), Some(99));
        assert_eq!(queue.take_match(&env(1, 5)), Some(1));
    }
}

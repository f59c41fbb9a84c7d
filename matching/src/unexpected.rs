//! The unexpected-message queue: which queued message a new receive (or probe) takes.
//!
//! MPI's rule (paper 002, Section 1.1) is that a receive takes the *earliest arrived* matching
//! message. Each unexpected message is linked, in arrival order, into the four FIFOs that a
//! receive of each wildcard shape would search: exact `(context, source, tag)`, by source
//! `(context, source)` for ANY_TAG, by tag `(context, tag)` for ANY_SOURCE, and by context for
//! ANY_SOURCE + ANY_TAG. A receive of an MPI shape therefore finds its message at the head of
//! exactly one bucket; a general-class receive scans the by-source or by-context FIFO (see
//! `general`). Taking a message unlinks it from all four lists in O(1). While the queue is short
//! it is kept only as a small contiguous array in arrival order and scanned.
//!
//! The three wildcard FIFOs are kept only while receives of their shape look: the first such
//! receive while the queue is indexed links every queued message into its FIFO, in arrival
//! order (O(queue length), paid for by the arrivals since the queue was last short), and
//! arrivals are linked into it from then on. When the queue is short again, a FIFO that no
//! receive looked at during that time is no longer kept. A program that receives by exact
//! envelope (most do) thus links and unlinks each message once, not four times: at depth
//! 10,000 that was a fifth of a receive's time.

use crate::bucket_queue::{push_back, unlink, BucketTable, Link, Linked, ListEnds};
use crate::envelope::{Envelope, Selector, Shape};
use crate::general;
use crate::posted::{exact_key, pair_key};
use crate::queue_form::{QueueForm, DEMOTE_AT, PROMOTE_ABOVE};
use crate::slab::{Slab, SlotId, NIL};

/// Lane of the exact `(context, source, tag)` FIFO.
const EXACT: usize = 0;
/// Lane of the `(context, source)` FIFO, searched by ANY_TAG receives.
pub(crate) const BY_SOURCE: usize = 1;
/// Lane of the `(context, tag)` FIFO, searched by ANY_SOURCE receives.
const BY_TAG: usize = 2;
/// Lane of the `(context)` FIFO, searched by ANY_SOURCE + ANY_TAG receives.
pub(crate) const BY_CONTEXT: usize = 3;
/// Lane of the arrival-order list of all unexpected messages, while the queue is indexed.
const ALL: usize = 4;

/// An unexpected message's bookkeeping in the slab (its value `M` sits beside it).
#[derive(Clone, Copy)]
pub(crate) struct UnexpectedNode {
    pub(crate) envelope: Envelope,
    lanes: [Link; 5],
    buckets: [u32; 4],
}

impl Linked for UnexpectedNode {
    #[inline]
    fn link(&self, lane: usize) -> Link {
        self.lanes[lane]
    }
    #[inline]
    fn link_mut(&mut self, lane: usize) -> &mut Link {
        &mut self.lanes[lane]
    }
}

/// An unexpected message of the short form: its envelope, and where its node is.
#[derive(Clone, Copy)]
struct ShortEntry {
    envelope: Envelope,
    index: u32,
}

/// A message [`UnexpectedQueue::find`] found: its slot, and in the short form its position.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found {
    index: u32,
    position: usize,
}

/// Unexpected messages, in their short or indexed form.
pub(crate) struct UnexpectedQueue<M> {
    pub(crate) nodes: Slab<UnexpectedNode, M>,
    /// Short form: every message, in arrival order.
    short: Vec<ShortEntry>,
    /// Indexed form: every message, in arrival order (to return to the short form).
    all: ListEnds,
    form: QueueForm,
    /// Bit `1 << lane` for each wildcard lane kept in the indexed form.
    kept_lanes: u8,
    /// Bit `1 << lane` for each wildcard lane a receive looked at since the queue was indexed.
    used_lanes: u8,
    exact: BucketTable<u128>,
    pub(crate) by_source: BucketTable<u64>,
    by_tag: BucketTable<u64>,
    pub(crate) by_context: BucketTable<u32>,
}

impl<M> UnexpectedQueue<M> {
    /// An empty queue.
    pub(crate) fn new() -> Self {
        UnexpectedQueue {
            nodes: Slab::new(),
            short: Vec::with_capacity(PROMOTE_ABOVE + 1),
            all: ListEnds::EMPTY,
            form: QueueForm::Short,
            kept_lanes: 0,
            used_lanes: 0,
            exact: BucketTable::new(),
            by_source: BucketTable::new(),
            by_tag: BucketTable::new(),
            by_context: BucketTable::new(),
        }
    }

    /// Number of queued messages.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Queues a message behind every earlier one; its slot, for [`UnexpectedQueue::by_id`].
    #[inline]
    pub(crate) fn push(&mut self, envelope: Envelope, value: M) -> SlotId {
        let node = UnexpectedNode {
            envelope,
            lanes: [Link::DETACHED; 5],
            buckets: [NIL; 4],
        };
        let id = self.nodes.insert(node, value);
        let index = id.index;
        match self.form {
            QueueForm::Short => {
                self.short.push(ShortEntry { envelope, index });
                if self.short.len() > PROMOTE_ABOVE {
                    self.promote();
                }
            }
            QueueForm::Indexed => {
                push_back(&mut self.nodes, &mut self.all, index, ALL);
                self.link_buckets(index);
            }
        }
        id
    }

    /// Where the message `id` names is, if it is still queued (O(1); in the short form a scan
    /// of at most [`PROMOTE_ABOVE`] entries).
    pub(crate) fn by_id(&self, id: SlotId) -> Option<Found> {
        if !self.nodes.contains(id) {
            return None;
        }
        let position = match self.form {
            QueueForm::Short => self.short.iter().position(|e| e.index == id.index)?,
            QueueForm::Indexed => usize::MAX,
        };
        Some(Found {
            index: id.index,
            position,
        })
    }

    /// The value of the message `id` names, to update in place.
    pub(crate) fn value_mut(&mut self, id: SlotId) -> Option<&mut M> {
        self.nodes.value_mut(id)
    }

    /// Where the earliest arrived message `selector` matches is (keeping the wildcard lane its
    /// shape searches from now on, if it was not kept yet).
    #[inline]
    pub(crate) fn find(&mut self, selector: Selector) -> Option<Found> {
        if self.form == QueueForm::Short {
            let position = self
                .short
                .iter()
                .position(|entry| selector.matches(&entry.envelope))?;
            return Some(Found {
                index: self.short[position].index,
                position,
            });
        }
        let lane = match selector.shape {
            Shape::Exact => EXACT,
            Shape::AnyTag => BY_SOURCE,
            Shape::AnySource => BY_TAG,
            Shape::AnyAny => BY_CONTEXT,
            Shape::General if selector.any_source() => BY_CONTEXT,
            Shape::General => BY_SOURCE,
        };
        if lane != EXACT {
            self.used_lanes |= 1 << lane;
            if self.kept_lanes & (1 << lane) == 0 {
                self.keep_lane(lane);
            }
        }
        let context = selector.context;
        let index = match selector.shape {
            Shape::Exact => self
                .exact
                .head(&exact_key(context, selector.source, selector.tag)),
            Shape::AnyTag => self.by_source.head(&pair_key(context, selector.source)),
            Shape::AnySource => self.by_tag.head(&pair_key(context, selector.tag)),
            Shape::AnyAny => self.by_context.head(&context),
            Shape::General => general::first_unexpected_match(self, selector),
        }?;
        Some(Found {
            index,
            position: usize::MAX,
        })
    }

    /// The earliest arrived message whose envelope is `envelope`, nonce included, to update
    /// in place (a receive ignores the nonce; this tells apart messages whose other fields
    /// are equal). It walks the exact `(context, source, tag)` FIFO, or the short form.
    pub(crate) fn exact_mut(&mut self, envelope: &Envelope) -> Option<&mut M> {
        let index = match self.form {
            QueueForm::Short => self.short.iter().find(|e| e.envelope == *envelope)?.index,
            QueueForm::Indexed => {
                let key = exact_key(envelope.context.field(), envelope.source, envelope.tag);
                let mut at = self.exact.head(&key)?;
                while self.nodes.node(at).envelope != *envelope {
                    at = self.nodes.node(at).lanes[EXACT].next;
                    if at == NIL {
                        return None;
                    }
                }
                at
            }
        };
        Some(self.nodes.value_mut_at(index))
    }

    /// The queued message `found` names.
    pub(crate) fn get(&self, found: Found) -> (&Envelope, &M) {
        (
            &self.nodes.node(found.index).envelope,
            self.nodes.value(found.index),
        )
    }

    /// Removes the message `found` names from every list it is on.
    #[inline]
    pub(crate) fn take(&mut self, found: Found) -> (Envelope, M) {
        let index = found.index;
        match self.form {
            QueueForm::Short => {
                self.short.remove(found.position);
            }
            QueueForm::Indexed => {
                unlink(&mut self.nodes, &mut self.all, index, ALL);
                self.unlink_buckets(index);
            }
        }
        let envelope = self.nodes.node(index).envelope;
        let value = self.nodes.remove(index);
        if self.form == QueueForm::Indexed && self.nodes.len() <= DEMOTE_AT {
            self.demote();
        }
        (envelope, value)
    }

    /// Bucket tables, for the footprint: (live buckets, bucket slots, map capacity).
    pub(crate) fn table_sizes(&self) -> (usize, usize, usize) {
        let live =
            self.exact.live() + self.by_source.live() + self.by_tag.live() + self.by_context.live();
        let slots = self.exact.slots()
            + self.by_source.slots()
            + self.by_tag.slots()
            + self.by_context.slots();
        let capacity = self.exact.map_capacity()
            + self.by_source.map_capacity()
            + self.by_tag.map_capacity()
            + self.by_context.map_capacity();
        (live, slots, capacity)
    }

    /// Links node `index` into its exact bucket and the wildcard lanes kept.
    fn link_buckets(&mut self, index: u32) {
        let envelope = self.nodes.node(index).envelope;
        let key = exact_key(envelope.context.field(), envelope.source, envelope.tag);
        let exact = self.exact.get_or_create(key);
        push_back(&mut self.nodes, self.exact.ends_mut(exact), index, EXACT);
        self.nodes.node_mut(index).buckets = [exact, NIL, NIL, NIL];
        if self.kept_lanes != 0 {
            for lane in [BY_SOURCE, BY_TAG, BY_CONTEXT] {
                if self.kept_lanes & (1 << lane) != 0 {
                    self.link_lane(index, lane);
                }
            }
        }
    }

    /// Links node `index` at the back of its bucket on wildcard `lane`.
    fn link_lane(&mut self, index: u32, lane: usize) {
        let envelope = self.nodes.node(index).envelope;
        let (context, source, tag) = (envelope.context.field(), envelope.source, envelope.tag);
        let ends = match lane {
            BY_SOURCE => {
                let id = self.by_source.get_or_create(pair_key(context, source));
                (id, self.by_source.ends_mut(id))
            }
            BY_TAG => {
                let id = self.by_tag.get_or_create(pair_key(context, tag));
                (id, self.by_tag.ends_mut(id))
            }
            _ => {
                let id = self.by_context.get_or_create(context);
                (id, self.by_context.ends_mut(id))
            }
        };
        let (id, ends) = ends;
        push_back(&mut self.nodes, ends, index, lane);
        self.nodes.node_mut(index).buckets[lane] = id;
    }

    /// Starts keeping wildcard `lane`: links every queued message into it, in arrival order.
    #[cold]
    fn keep_lane(&mut self, lane: usize) {
        self.kept_lanes |= 1 << lane;
        if lane == BY_TAG {
            self.by_tag.reserve(self.nodes.len());
        }
        let mut at = self.all.head;
        while at != NIL {
            self.link_lane(at, lane);
            at = self.nodes.node(at).lanes[ALL].next;
        }
    }

    /// Unlinks node `index` from its exact bucket and the wildcard lanes kept.
    fn unlink_buckets(&mut self, index: u32) {
        let [exact, by_source, by_tag, by_context] = self.nodes.node(index).buckets;
        unlink(&mut self.nodes, self.exact.ends_mut(exact), index, EXACT);
        self.exact.release_if_empty(exact);
        if self.kept_lanes == 0 {
            return;
        }
        if by_source != NIL {
            unlink(
                &mut self.nodes,
                self.by_source.ends_mut(by_source),
                index,
                BY_SOURCE,
            );
            self.by_source.release_if_empty(by_source);
        }
        if by_tag != NIL {
            unlink(&mut self.nodes, self.by_tag.ends_mut(by_tag), index, BY_TAG);
            self.by_tag.release_if_empty(by_tag);
        }
        if by_context != NIL {
            unlink(
                &mut self.nodes,
                self.by_context.ends_mut(by_context),
                index,
                BY_CONTEXT,
            );
            self.by_context.release_if_empty(by_context);
        }
    }

    /// Short to indexed: link every message, in arrival order, into the arrival-order list, its
    /// exact bucket and the wildcard lanes kept.
    fn promote(&mut self) {
        self.form = QueueForm::Indexed;
        let mut short = std::mem::take(&mut self.short);
        for entry in short.drain(..) {
            push_back(&mut self.nodes, &mut self.all, entry.index, ALL);
            self.link_buckets(entry.index);
        }
        self.short = short;
    }

    /// Indexed to short: copy the few remaining messages, in arrival order, into the short
    /// array and drop the buckets; keep the wildcard lanes that were looked at.
    fn demote(&mut self) {
        self.form = QueueForm::Short;
        let mut at = self.all.head;
        while at != NIL {
            let node = self.nodes.node(at);
            self.short.push(ShortEntry {
                envelope: node.envelope,
                index: at,
            });
            at = node.lanes[ALL].next;
        }
        self.all = ListEnds::EMPTY;
        self.kept_lanes = self.used_lanes;
        self.used_lanes = 0;
        self.exact.clear();
        self.by_source.clear();
        self.by_tag.clear();
        self.by_context.clear();
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
        ContextId::user(3).expect("small id")
    }

    fn sel(source: Source, tag: TagPattern) -> Selector {
        Selector::compile(&ReceiveSpec::new(ctx(), source, tag))
    }

    fn take_value(queue: &mut UnexpectedQueue<u32>, selector: Selector) -> Option<u32> {
        let found = queue.find(selector)?;
        Some(queue.take(found).1)
    }

    /// `exact_mut` finds the message with the nonce asked for among equal envelopes, in both
    /// forms, and nothing once it is taken.
    #[test]
    fn exact_lookup_tells_nonces_apart() {
        for n in [3u16, 100] {
            let mut queue = UnexpectedQueue::new();
            for nonce in 0..n {
                let envelope = Envelope {
                    nonce,
                    ..Envelope::new(ctx(), 1, 5)
                };
                queue.push(envelope, u32::from(nonce));
            }
            queue.push(Envelope::new(ctx(), 2, 5), 999);
            let want = Envelope {
                nonce: n - 2,
                ..Envelope::new(ctx(), 1, 5)
            };
            *queue.exact_mut(&want).expect("queued") += 1000;
            let missing = Envelope {
                nonce: n,
                ..Envelope::new(ctx(), 1, 5)
            };
            assert!(queue.exact_mut(&missing).is_none());
            let any = sel(Source::Rank(1), TagPattern::Exact(5));
            let taken: Vec<u32> = std::iter::from_fn(|| take_value(&mut queue, any)).collect();
            let mut expect: Vec<u32> = (0..u32::from(n)).collect();
            expect[usize::from(n) - 2] += 1000;
            assert_eq!(taken, expect);
            assert!(queue.exact_mut(&want).is_none());
        }
    }

    /// Messages (source, tag): (1,5) (2,5) (1,6) (2,6) repeated; each receive shape must take
    /// the earliest it matches, in both forms.
    fn check_each_shape_takes_earliest(rounds: u32) {
        let mut queue = UnexpectedQueue::new();
        let mut value = 0;
        for _ in 0..rounds {
            for (source, tag) in [(1, 5), (2, 5), (1, 6), (2, 6)] {
                queue.push(Envelope::new(ctx(), source, tag), value);
                value += 1;
            }
        }
        assert_eq!(queue.is_indexed(), rounds * 4 > PROMOTE_ABOVE as u32);
        assert_eq!(
            take_value(&mut queue, sel(Source::Rank(2), TagPattern::Exact(6))),
            Some(3)
        );
        assert_eq!(
            take_value(&mut queue, sel(Source::Rank(2), TagPattern::Any)),
            Some(1)
        );
        assert_eq!(
            take_value(&mut queue, sel(Source::Any, TagPattern::Exact(6))),
            Some(2)
        );
        assert_eq!(
            take_value(&mut queue, sel(Source::Any, TagPattern::Any)),
            Some(0)
        );
        assert_eq!(
            take_value(&mut queue, sel(Source::Any, TagPattern::Exact(7))),
            None
        );
        let other_context = Selector::compile(&ReceiveSpec::new(
            ctx().internal_twin(),
            Source::Any,
            TagPattern::Any,
        ));
        assert!(queue.find(other_context).is_none());
    }

    #[test]
    fn each_shape_takes_earliest_arrival_short() {
        check_each_shape_takes_earliest(1);
    }

    #[test]
    fn each_shape_takes_earliest_arrival_indexed() {
        check_each_shape_takes_earliest(50);
    }

    /// The wildcard lanes are kept from the first receive of their shape, linked in arrival
    /// order with the messages queued before, kept across the short form while used, and
    /// dropped after an indexed stretch that did not use them: every cycle of indexed form
    /// (each shape first after an exact receive, then after the others, with arrivals between)
    /// takes the earliest match, as a scan of arrival order would.
    #[test]
    fn wildcard_lanes_kept_on_demand_take_the_earliest() {
        let mut queue = UnexpectedQueue::new();
        let mut model: Vec<(Envelope, u32)> = Vec::new();
        let mut value = 0;
        let shapes = [
            (Source::Rank(1), TagPattern::Exact(2)),
            (Source::Rank(2), TagPattern::Any),
            (Source::Any, TagPattern::Exact(1)),
            (Source::Any, TagPattern::Any),
            (Source::Rank(0), TagPattern::Masked { tag: 0, ignore: 1 }),
            (Source::Any, TagPattern::Masked { tag: 2, ignore: 1 }),
        ];
        for cycle in 0..6 {
            for step in 0..40 {
                let envelope = Envelope::new(ctx(), (step * 7 + cycle) % 3, step % 4);
                queue.push(envelope, value);
                model.push((envelope, value));
                value += 1;
            }
            assert!(queue.is_indexed());
            // Each shape in a cycle-dependent order, with an arrival after each receive.
            for k in 0..shapes.len() {
                let (source, tag) = shapes[(k + cycle as usize) % shapes.len()];
                let selector = sel(source, tag);
                let want = model.iter().position(|(e, _)| selector.matches(e));
                let got = take_value(&mut queue, selector);
                assert_eq!(
                    got,
                    want.map(|i| model.remove(i).1),
                    "cycle {cycle} shape {k}"
                );
                let envelope = Envelope::new(ctx(), k as u32 % 3, 3);
                queue.push(envelope, value);
                model.push((envelope, value));
                value += 1;
            }
            // Drain until the queue is short again, mostly by exact receives.
            for i in 0.. {
                if model.len() <= 2 {
                    break;
                }
                let (envelope, _) = model[model.len() / 2];
                let (source, tag) = match i % 3 {
                    0 => shapes[(i / 3) % shapes.len()],
                    _ => (
                        Source::Rank(envelope.source),
                        TagPattern::Exact(envelope.tag),
                    ),
                };
                let selector = sel(source, tag);
                let want = model.iter().position(|(e, _)| selector.matches(e));
                let got = take_value(&mut queue, selector);
                assert_eq!(got, want.map(|i| model.remove(i).1));
            }
            assert!(!queue.is_indexed());
            assert_eq!(
                queue.kept_lanes,
                (1 << BY_SOURCE) | (1 << BY_TAG) | (1 << BY_CONTEXT)
            );
        }
        // An indexed stretch of exact receives only: the lanes are not kept afterwards.
        for step in 0..40 {
            queue.push(Envelope::new(ctx(), step % 3, 100 + step), value);
            value += 1;
        }
        for step in 0..40 {
            let selector = sel(Source::Rank(step % 3), TagPattern::Exact(100 + step));
            assert!(take_value(&mut queue, selector).is_some());
        }
        assert_eq!(queue.kept_lanes, 0);
    }

    #[test]
    fn taking_from_one_lane_leaves_the_others_consistent() {
        let mut queue = UnexpectedQueue::new();
        for value in 0..100u32 {
            queue.push(Envelope::new(ctx(), value % 3, value % 5), value);
        }
        // Take every message via a different lane in turn; order must stay arrival order.
        let mut taken = Vec::new();
        for value in 0..100u32 {
            let selector = match value % 4 {
                0 => sel(Source::Rank(value % 3), TagPattern::Exact(value % 5)),
                1 => sel(Source::Rank(value % 3), TagPattern::Any),
                2 => sel(Source::Any, TagPattern::Exact(value % 5)),
                _ => sel(Source::Any, TagPattern::Any),
            };
            taken.push(take_value(&mut queue, selector));
        }
        assert_eq!(taken, (0..100).map(Some).collect::<Vec<_>>());
        assert_eq!(queue.len(), 0);
        assert!(!queue.is_indexed());
        let (live, slots, _) = queue.table_sizes();
        assert_eq!((live, slots), (0, 0));
    }
}

//! The unexpected-message queue: which queued message a new receive (or probe) takes.
//!
//! MPI's rule (paper 002, Section 1.1) is that a receive takes the *earliest arrived* matching
//! message. Each unexpected message is linked, in arrival order, into the FIFOs that a
//! receive of each wildcard shape would search (the wildcard ones while kept, below): exact
//! `(context, source, tag)`, by source
//! `(context, source)` for ANY_TAG, by tag `(context, tag)` for ANY_SOURCE, and by context for
//! ANY_SOURCE + ANY_TAG. A receive of an MPI shape therefore finds its message at the head of
//! exactly one bucket; a general-class receive scans the by-source or by-context FIFO (see
//! `general`). Taking a message unlinks it from every list it is on in O(1). While the queue is short
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
use crate::hasher::FastMap;
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

/// Key of a message in `by_nonce`: its exact key with the nonce above the context.
fn nonce_key(envelope: &Envelope) -> u128 {
    exact_key(envelope.context.field(), envelope.source, envelope.tag)
        | (u128::from(envelope.nonce) << 112)
}

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
    /// Queued messages with a nonce (rendezvous messages; eager ones carry none), by envelope
    /// and nonce, for [`UnexpectedQueue::exact_mut`]: the earliest of each.
    by_nonce: FastMap<u128, u32>,
    /// Queued messages with a nonce that a message queued before had too (not in `by_nonce`;
    /// a sender never has two in flight, so this stays 0 unless one misbehaves).
    nonce_repeats: usize,
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
            by_nonce: FastMap::default(),
            nonce_repeats: 0,
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
        if envelope.nonce != 0 {
            self.index_nonce(&envelope, index);
        }
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
    /// are equal). O(1) for a nonce other than 0 (messages with one are indexed by it); with
    /// nonce 0 (eager messages) a walk of the exact `(context, source, tag)` FIFO, or the
    /// short form.
    pub(crate) fn exact_mut(&mut self, envelope: &Envelope) -> Option<&mut M> {
        if envelope.nonce != 0 && self.nonce_repeats == 0 {
            let index = *self.by_nonce.get(&nonce_key(envelope))?;
            return Some(self.nodes.value_mut_at(index));
        }
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

    /// Records queued message `index`, whose envelope has a nonce, in `by_nonce`.
    #[cold]
    fn index_nonce(&mut self, envelope: &Envelope, index: u32) {
        match self.by_nonce.entry(nonce_key(envelope)) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(index);
            }
            std::collections::hash_map::Entry::Occupied(_) => self.nonce_repeats += 1,
        }
    }

    /// Forgets queued message `index`, whose envelope has a nonce, as it leaves the queue.
    #[cold]
    fn unindex_nonce(&mut self, envelope: &Envelope, index: u32) {
        let key = nonce_key(envelope);
        if self.by_nonce.get(&key) == Some(&index) {
            self.by_nonce.remove(&key);
        } else {
            self.nonce_repeats -= 1;
        }
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
        if envelope.nonce != 0 {
            self.unindex_nonce(&envelope, index);
        }
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
        let nodes = &mut self.nodes;
        self.exact.unlink_node(nodes, exact, index, EXACT);
        if self.kept_lanes == 0 {
            return;
        }
        if by_source != NIL {
            self.by_source
                .unlink_node(nodes, by_source, index, BY_SOURCE);
        }
        if by_tag != NIL {
            self.by_tag.unlink_node(nodes, by_tag, index, BY_TAG);
        }
        if by_context != NIL {
            self.by_context
                .unlink_node(nodes, by_context, index, BY_CONTEXT);
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
        // A burst of rendezvous headers does not pin its index's memory (at most the few
        // messages left are in it).
        if self.by_nonce.capacity() > 256 {
            self.by_nonce.shrink_to(16);
        }
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
#[path = "unexpected_tests.rs"]
mod tests;

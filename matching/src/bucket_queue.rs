//! Intrusive FIFO lists over a [`Slab`], and tables of such lists ("buckets") keyed by the
//! non-wildcard fields of a receive shape.
//!
//! A node carries one [`Link`] per list it can be on (its *lanes*), so one unexpected message can
//! sit in the four FIFOs that receives of each wildcard shape search, plus the arrival-order list,
//! and leave all of them in O(1). A bucket's ends live in a small vector addressed by bucket id;
//! the hash map only finds a bucket by key. A bucket that empties stays in the map, idle, so a
//! key that is used again soon (the same tag every iteration) costs one lookup instead of a
//! removal and an insertion, and a queue that drains (received tag by tag) pays no hash
//! removal at all: its map is cleared when the queue is short again. Idle buckets are dropped
//! together, in one pass over the map, when a bucket is looked up to link a node while more
//! than [`IDLE_FLOOR`] buckets, and at least as many as are live, are idle: the map holds at most twice the live
//! buckets or the floor, and each pass, O(map size), is paid for by the buckets that emptied
//! since the last one. (Removing each emptied bucket at once cost a draining receive a second
//! hash lookup of the key it had just found, a tenth of a receive at depth 10,000; sweeping
//! every [`IDLE_FLOOR`] emptyings, an earlier design, a fifth.)

use std::hash::Hash;

use crate::hasher::FastMap;
use crate::slab::{Slab, NIL};

/// Links of one node on one lane: slot indices of its neighbours, or [`NIL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    pub(crate) prev: u32,
    pub(crate) next: u32,
}

impl Link {
    /// Not on any list.
    pub(crate) const DETACHED: Link = Link {
        prev: NIL,
        next: NIL,
    };
}

/// A node that can be on several intrusive lists, one per lane.
pub(crate) trait Linked {
    /// The link on `lane`.
    fn link(&self, lane: usize) -> Link;
    /// The link on `lane`, to update.
    fn link_mut(&mut self, lane: usize) -> &mut Link;
}

/// Head and tail of one intrusive list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ListEnds {
    pub(crate) head: u32,
    pub(crate) tail: u32,
}

impl ListEnds {
    /// The empty list.
    pub(crate) const EMPTY: ListEnds = ListEnds {
        head: NIL,
        tail: NIL,
    };

    /// Whether the list has no node.
    pub(crate) fn is_empty(&self) -> bool {
        self.head == NIL
    }
}

/// Appends node `index` to the list `ends` on `lane`.
#[inline]
pub(crate) fn push_back<N: Linked + Copy, V>(
    slab: &mut Slab<N, V>,
    ends: &mut ListEnds,
    index: u32,
    lane: usize,
) {
    let tail = ends.tail;
    *slab.node_mut(index).link_mut(lane) = Link {
        prev: tail,
        next: NIL,
    };
    if tail == NIL {
        ends.head = index;
    } else {
        slab.node_mut(tail).link_mut(lane).next = index;
    }
    ends.tail = index;
}

/// Removes node `index` from the list `ends` on `lane`.
#[inline]
pub(crate) fn unlink<N: Linked + Copy, V>(
    slab: &mut Slab<N, V>,
    ends: &mut ListEnds,
    index: u32,
    lane: usize,
) {
    let Link { prev, next } = slab.node(index).link(lane);
    if prev == NIL {
        ends.head = next;
    } else {
        slab.node_mut(prev).link_mut(lane).next = next;
    }
    if next == NIL {
        ends.tail = prev;
    } else {
        slab.node_mut(next).link_mut(lane).prev = prev;
    }
}

/// The node after `index` on `lane`, or [`NIL`].
#[inline]
pub(crate) fn next_on<N: Linked + Copy, V>(slab: &Slab<N, V>, index: u32, lane: usize) -> u32 {
    slab.node(index).link(lane).next
}

/// Maps above this capacity are dropped, not just cleared, when a queue returns to its short
/// form, so a burst does not pin its memory.
const KEEP_CAPACITY: usize = 256;

/// Idle buckets kept for keys that come back, however few buckets are live.
const IDLE_FLOOR: usize = 64;

/// FIFO lists keyed by `K`, created on first use and dropped some time after they empty.
pub(crate) struct BucketTable<K> {
    index: FastMap<K, u32>,
    buckets: Vec<ListEnds>,
    free: Vec<u32>,
    idle: usize,
    /// The key last created or found by [`BucketTable::get_or_create`] and its bucket id: a
    /// run of receives (or messages) with one envelope, the common case, finds its bucket
    /// without hashing. Valid until buckets are dropped ([`BucketTable::drop_idle`],
    /// [`BucketTable::clear`]), which forget it.
    last: Option<(K, u32)>,
}

impl<K: Hash + Eq + Copy> BucketTable<K> {
    /// An empty table.
    pub(crate) fn new() -> Self {
        BucketTable {
            index: FastMap::default(),
            buckets: Vec::new(),
            free: Vec::new(),
            idle: 0,
            last: None,
        }
    }

    /// The bucket id for `key`, if that bucket exists (it may be idle, i.e. empty).
    #[inline]
    pub(crate) fn find(&self, key: &K) -> Option<u32> {
        if let Some((last, id)) = self.last {
            if last == *key {
                return Some(id);
            }
        }
        self.index.get(key).copied()
    }

    /// The first node of the bucket for `key`, if any.
    #[inline]
    pub(crate) fn head(&self, key: &K) -> Option<u32> {
        let id = self.find(key)?;
        let head = self.buckets[id as usize].head;
        (head != NIL).then_some(head)
    }

    /// The ends of bucket `id`.
    #[inline]
    pub(crate) fn ends(&self, id: u32) -> ListEnds {
        self.buckets[id as usize]
    }

    /// The ends of bucket `id`, to update.
    #[inline]
    pub(crate) fn ends_mut(&mut self, id: u32) -> &mut ListEnds {
        &mut self.buckets[id as usize]
    }

    /// The bucket id for `key`, creating a bucket if there is none; the caller links a node
    /// into it right away.
    #[inline]
    pub(crate) fn get_or_create(&mut self, key: K) -> u32 {
        if self.idle > IDLE_FLOOR && self.idle >= self.live() {
            self.drop_idle();
        }
        if let Some((last, id)) = self.last {
            if last == key {
                if self.buckets[id as usize].is_empty() {
                    self.idle -= 1;
                }
                return id;
            }
        }
        let (buckets, free) = (&mut self.buckets, &mut self.free);
        let mut revived = false;
        let id = *self
            .index
            .entry(key)
            .and_modify(|&mut id| revived = buckets[id as usize].is_empty())
            .or_insert_with(|| match free.pop() {
                Some(id) => {
                    buckets[id as usize] = ListEnds::EMPTY;
                    id
                }
                None => {
                    buckets.push(ListEnds::EMPTY);
                    (buckets.len() - 1) as u32
                }
            });
        if revived {
            self.idle -= 1;
        }
        self.last = Some((key, id));
        id
    }

    /// Unlinks node `index` from bucket `id` on `lane` and notes that it left.
    #[inline]
    pub(crate) fn unlink_node<N: Linked + Copy, V>(
        &mut self,
        slab: &mut Slab<N, V>,
        id: u32,
        index: u32,
        lane: usize,
    ) {
        unlink(slab, &mut self.buckets[id as usize], index, lane);
        self.release_if_empty(id);
    }

    /// Notes that a node left bucket `id`; an emptied bucket turns idle (see the module doc
    /// for when idle buckets are dropped).
    #[inline]
    pub(crate) fn release_if_empty(&mut self, id: u32) {
        if self.buckets[id as usize].is_empty() {
            self.idle += 1;
        }
    }

    /// Makes room for `additional` more keys at once (before linking a whole queue).
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.index.reserve(additional);
    }

    /// Removes every idle bucket from the map (their ids become free), and gives back room
    /// the map no longer needs.
    #[cold]
    fn drop_idle(&mut self) {
        let (buckets, free) = (&self.buckets, &mut self.free);
        self.index.retain(|_, &mut id| {
            let live = !buckets[id as usize].is_empty();
            if !live {
                free.push(id);
            }
            live
        });
        self.idle = 0;
        self.last = None;
        let wanted = 2 * (self.index.len() + IDLE_FLOOR);
        if self.index.capacity() > 2 * wanted {
            self.index.shrink_to(wanted);
        }
    }

    /// Forgets every bucket (the caller relinks or drops the nodes); large maps are freed.
    pub(crate) fn clear(&mut self) {
        if self.index.capacity() > KEEP_CAPACITY {
            *self = Self::new();
        } else {
            self.index.clear();
            self.last = None;
            self.buckets.clear();
            self.free.clear();
            self.idle = 0;
        }
    }

    /// Number of non-empty buckets.
    pub(crate) fn live(&self) -> usize {
        self.index.len() - self.idle
    }

    /// Capacity of the key map.
    pub(crate) fn map_capacity(&self) -> usize {
        self.index.capacity()
    }

    /// Bucket slots ever created since the last clear: the high-water mark of the map's length.
    pub(crate) fn slots(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy)]
    struct Node {
        lanes: [Link; 2],
    }

    impl Linked for Node {
        fn link(&self, lane: usize) -> Link {
            self.lanes[lane]
        }
        fn link_mut(&mut self, lane: usize) -> &mut Link {
            &mut self.lanes[lane]
        }
    }

    const NODE: Node = Node {
        lanes: [Link::DETACHED; 2],
    };

    fn collect(slab: &Slab<Node, u32>, ends: ListEnds, lane: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let mut at = ends.head;
        while at != NIL {
            out.push(*slab.value(at));
            at = next_on(slab, at, lane);
        }
        out
    }

    #[test]
    fn one_node_on_two_lists_unlinks_from_each_in_o1() {
        let mut slab = Slab::new();
        let (mut all, mut odd) = (ListEnds::EMPTY, ListEnds::EMPTY);
        let ids: Vec<u32> = (0..6)
            .map(|value| {
                let id = slab.insert(NODE, value).index;
                push_back(&mut slab, &mut all, id, 0);
                if value % 2 == 1 {
                    push_back(&mut slab, &mut odd, id, 1);
                }
                id
            })
            .collect();
        assert_eq!(collect(&slab, all, 0), [0, 1, 2, 3, 4, 5]);
        assert_eq!(collect(&slab, odd, 1), [1, 3, 5]);
        for &victim in &[ids[3], ids[1], ids[5]] {
            unlink(&mut slab, &mut all, victim, 0);
            unlink(&mut slab, &mut odd, victim, 1);
        }
        assert_eq!(collect(&slab, all, 0), [0, 2, 4]);
        assert!(odd.is_empty());
        assert_eq!(odd, ListEnds::EMPTY);
    }

    /// Pushes one node under `key`, unlinks it again, and returns the bucket id used.
    fn touch(slab: &mut Slab<Node, u32>, table: &mut BucketTable<u64>, key: u64) -> u32 {
        let id = table.get_or_create(key);
        let node = slab.insert(NODE, key as u32).index;
        push_back(slab, table.ends_mut(id), node, 0);
        assert_eq!(table.head(&key), Some(node));
        unlink(slab, table.ends_mut(id), node, 0);
        table.release_if_empty(id);
        slab.remove(node);
        assert_eq!(table.head(&key), None);
        id
    }

    #[test]
    fn a_reused_key_keeps_its_idle_bucket() {
        let (mut slab, mut table) = (Slab::new(), BucketTable::new());
        let first = touch(&mut slab, &mut table, 7);
        for _ in 0..1000 {
            assert_eq!(touch(&mut slab, &mut table, 7), first);
        }
        assert_eq!((table.live(), table.slots()), (0, 1));
    }

    #[test]
    fn idle_buckets_of_ever_new_keys_are_dropped() {
        let (mut slab, mut table) = (Slab::new(), BucketTable::new());
        for key in 0..100_000u64 {
            touch(&mut slab, &mut table, key);
            assert!(
                table.index.len() <= 2 * IDLE_FLOOR + 2,
                "len {} cap {} idle {}",
                table.index.len(),
                table.index.capacity(),
                table.idle
            );
        }
        assert_eq!(table.live(), 0);
        assert!(
            table.slots() <= 2 * IDLE_FLOOR + 2,
            "slots {}",
            table.slots()
        );
        assert!(table.map_capacity() <= 4 * IDLE_FLOOR);
    }

    #[test]
    fn dropping_idle_buckets_keeps_busy_ones() {
        let (mut slab, mut table) = (Slab::new(), BucketTable::new());
        let busy: Vec<(u64, u32)> = (0..10u64)
            .map(|key| {
                let id = table.get_or_create(1_000_000 + key);
                let node = slab.insert(NODE, key as u32).index;
                push_back(&mut slab, table.ends_mut(id), node, 0);
                (1_000_000 + key, node)
            })
            .collect();
        for key in 0..1000u64 {
            touch(&mut slab, &mut table, key);
        }
        for (key, node) in busy {
            assert_eq!(table.head(&key), Some(node));
        }
        assert_eq!(table.live(), 10);
        assert!(table.index.len() <= 2 * (10 + IDLE_FLOOR) + 2);
    }

    /// Draining many live buckets (a deep queue received key by key) removes nothing from
    /// the map; new keys afterwards drop the idle buckets instead of growing it.
    #[test]
    fn draining_then_refilling_reuses_the_room() {
        let (mut slab, mut table) = (Slab::new(), BucketTable::new());
        let queued: Vec<(u32, u32)> = (0..10_000u64)
            .map(|key| {
                let id = table.get_or_create(key);
                let node = slab.insert(NODE, key as u32).index;
                push_back(&mut slab, table.ends_mut(id), node, 0);
                (id, node)
            })
            .collect();
        let capacity = table.map_capacity();
        for (id, node) in queued.into_iter().rev() {
            unlink(&mut slab, table.ends_mut(id), node, 0);
            table.release_if_empty(id);
            slab.remove(node);
        }
        assert_eq!((table.live(), table.index.len()), (0, 10_000));
        for round in 1..4u64 {
            for key in 0..10_000u64 {
                let key = round * 1_000_000 + key;
                let id = table.get_or_create(key);
                let node = slab.insert(NODE, key as u32).index;
                push_back(&mut slab, table.ends_mut(id), node, 0);
                unlink(&mut slab, table.ends_mut(id), node, 0);
                table.release_if_empty(id);
                slab.remove(node);
            }
        }
        assert!(table.map_capacity() <= capacity);
        assert!(table.index.len() <= 2 * IDLE_FLOOR + 2);
        assert!(table.slots() <= capacity + 1);
    }

    #[test]
    fn clear_drops_large_maps() {
        let mut table: BucketTable<u32> = BucketTable::new();
        for key in 0..10_000 {
            table.get_or_create(key);
        }
        assert!(table.map_capacity() >= 10_000);
        table.clear();
        assert_eq!(table.map_capacity(), 0);
        assert_eq!((table.live(), table.slots()), (0, 0));
    }
}

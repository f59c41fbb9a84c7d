//! A slab: a `Vec` of slots with a free list, addressed by `u32` index plus a generation.
//!
//! Queue nodes (posted receives, unexpected messages) live here so that the intrusive lists of
//! `bucket_queue` can link them by index and remove any of them in O(1). Each slot holds the
//! node's bookkeeping `N` (links, key fields: plain `Copy` data that stays in place) and the
//! caller's value `V`, which is the only thing moved out on removal. A slot's generation changes
//! every time it is freed, so a handle kept by a caller after its node was matched or cancelled
//! is detected as stale instead of reaching a newer node. A slot whose generation would wrap is
//! retired rather than reused, so a stale handle can never alias.

/// Index value meaning "no slot" in links and the free list.
pub(crate) const NIL: u32 = u32::MAX;

/// A slot address that remembers which occupant it meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SlotId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

struct Slot<N, V> {
    generation: u32,
    next_free: u32,
    node: N,
    /// `Some` exactly while the slot is occupied.
    value: Option<V>,
}

/// Slots with generations and a free list.
pub(crate) struct Slab<N, V> {
    slots: Vec<Slot<N, V>>,
    free_head: u32,
    len: usize,
}

impl<N: Copy, V> Slab<N, V> {
    /// An empty slab.
    pub(crate) fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free_head: NIL,
            len: 0,
        }
    }

    /// Number of occupied slots.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Number of slots ever created (occupied or free): the high-water mark of `len`.
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Capacity of the slot vector.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// Stores a node and its value and returns the address.
    ///
    /// Panics only if more than `u32::MAX - 1` slots would be live at once, which memory does not
    /// allow for any real node size (like `Vec`'s capacity overflow).
    #[inline]
    pub(crate) fn insert(&mut self, node: N, value: V) -> SlotId {
        self.len += 1;
        if self.free_head != NIL {
            let index = self.free_head;
            let slot = &mut self.slots[index as usize];
            self.free_head = slot.next_free;
            slot.node = node;
            slot.value = Some(value);
            return SlotId {
                index,
                generation: slot.generation,
            };
        }
        let index = u32::try_from(self.slots.len())
            .ok()
            .filter(|&i| i != NIL)
            .expect("slab holds more than u32::MAX - 1 nodes");
        self.slots.push(Slot {
            generation: 0,
            next_free: NIL,
            node,
            value: Some(value),
        });
        SlotId {
            index,
            generation: 0,
        }
    }

    /// Whether `id` still names an occupied slot.
    #[inline]
    pub(crate) fn contains(&self, id: SlotId) -> bool {
        self.slots
            .get(id.index as usize)
            .is_some_and(|slot| slot.generation == id.generation && slot.value.is_some())
    }

    /// The node at `index` (which must be occupied: internal links only point at live nodes).
    #[inline]
    pub(crate) fn node(&self, index: u32) -> &N {
        let slot = &self.slots[index as usize];
        debug_assert!(slot.value.is_some(), "link to a vacant slot");
        &slot.node
    }

    /// The node at `index`, to update.
    #[inline]
    pub(crate) fn node_mut(&mut self, index: u32) -> &mut N {
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.value.is_some(), "link to a vacant slot");
        &mut slot.node
    }

    /// The value at `index`, to update; an internal link to a vacant slot is a bug, so it
    /// panics.
    pub(crate) fn value_mut_at(&mut self, index: u32) -> &mut V {
        match &mut self.slots[index as usize].value {
            Some(value) => value,
            None => unreachable!("link to a vacant slot"),
        }
    }

    /// The value at `index`; an internal link to a vacant slot is a bug, so it panics.
    #[inline]
    pub(crate) fn value(&self, index: u32) -> &V {
        match &self.slots[index as usize].value {
            Some(value) => value,
            None => unreachable!("link to a vacant slot"),
        }
    }

    /// The value `id` names, to update in place; `None` once that occupant is gone.
    #[inline]
    pub(crate) fn value_mut(&mut self, id: SlotId) -> Option<&mut V> {
        let slot = self.slots.get_mut(id.index as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        slot.value.as_mut()
    }

    /// Frees the occupied slot at `index` and returns its value (its node stays readable only
    /// until the slot is reused).
    #[inline]
    pub(crate) fn remove(&mut self, index: u32) -> V {
        let slot = &mut self.slots[index as usize];
        let Some(value) = slot.value.take() else {
            unreachable!("remove of a vacant slot");
        };
        self.len -= 1;
        // A slot at the last generation is retired: reusing it would let a 2^32-old handle
        // alias a new node.
        if slot.generation != u32::MAX {
            slot.generation += 1;
            slot.next_free = self.free_head;
            self.free_head = index;
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove_reuses_slots() {
        let mut slab = Slab::new();
        let a = slab.insert(1u8, "a");
        let b = slab.insert(2u8, "b");
        assert!(slab.contains(a));
        assert_eq!((*slab.node(a.index), *slab.value(a.index)), (1, "a"));
        assert_eq!(slab.remove(a.index), "a");
        assert!(!slab.contains(a), "stale id must not resolve");
        let c = slab.insert(3, "c");
        assert_eq!(c.index, a.index, "freed slot is reused");
        assert_ne!(c.generation, a.generation);
        assert!(!slab.contains(a));
        assert!(slab.contains(c) && slab.contains(b));
        assert_eq!((slab.len(), slab.slots()), (2, 2));
    }

    #[test]
    fn out_of_range_id_is_not_contained() {
        let slab: Slab<u8, u8> = Slab::new();
        assert!(!slab.contains(SlotId {
            index: 5,
            generation: 0
        }));
    }

    #[test]
    fn slot_at_last_generation_is_retired() {
        let mut slab = Slab::new();
        let a = slab.insert((), 1u8);
        slab.slots[a.index as usize].generation = u32::MAX;
        slab.remove(a.index);
        let b = slab.insert((), 2u8);
        assert_ne!(b.index, a.index, "a retired slot is never handed out again");
        assert_eq!(slab.len(), 1);
    }

    #[test]
    fn slots_are_bounded_by_high_water_mark() {
        let mut slab = Slab::new();
        for round in 0..1000u32 {
            let ids: Vec<_> = (0..10).map(|i| slab.insert((), round * 10 + i)).collect();
            for id in ids {
                slab.remove(id.index);
            }
        }
        assert_eq!(slab.slots(), 10);
        assert_eq!(slab.len(), 0);
    }
}

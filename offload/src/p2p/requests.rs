//! The engine's requests in flight (and finished ones whose result is not collected yet): a
//! slab indexed by the request id, so that posting, matching and completing a request each
//! reach it with one indexed load instead of a hash lookup, and a slot freed by a completion
//! (still in cache) is the next one reused. An id is the slot's index and its generation, so a
//! stale id never names a later request. Each request may belong to a group (`group`); the
//! number of grouped requests is kept so that a group with nothing left costs nothing to wait
//! for.

use super::Req;

/// Generations wrap here, so that every id stays below the `user_ptr`s the engine uses for
/// other things (`RESERVED_IDS`).
const GENERATION_LIMIT: u32 = u32::MAX >> 1;
const _: () = assert!(((GENERATION_LIMIT as u64) << 32 | 0xffff_ffff) < super::RESERVED_IDS);

struct Slot {
    /// Bumped when the slot is freed, so the old id no longer names it.
    generation: u32,
    /// The group the request belongs to (0: none).
    group: u64,
    /// Order of creation, for waiting on a group's requests oldest first.
    serial: u64,
    /// `None`: free, or reserved by [`Requests::reserve`] and not filled yet.
    req: Option<Req>,
    /// Whether the slot is in use (reserved or filled).
    used: bool,
}

/// The requests of one engine.
#[derive(Default)]
pub(super) struct Requests {
    slots: Vec<Slot>,
    free: Vec<u32>,
    serial: u64,
    grouped: usize,
}

fn split(id: u64) -> (usize, u32) {
    ((id & 0xffff_ffff) as usize, (id >> 32) as u32)
}

impl Requests {
    /// A new request id whose slot is reserved (for an NI operation that must name it before
    /// the request can be stored); [`Requests::fill`] stores it, [`Requests::release`] gives
    /// the slot back if the request never starts.
    pub(super) fn reserve(&mut self) -> u64 {
        self.serial += 1;
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 1,
                    group: 0,
                    serial: 0,
                    req: None,
                    used: false,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.used = true;
        slot.serial = self.serial;
        (u64::from(slot.generation) << 32) | u64::from(index)
    }

    /// Stores `req` under the reserved `id`, or replaces the state of request `id`.
    pub(super) fn fill(&mut self, id: u64, req: Req) {
        if let Some(slot) = self.slot_mut(id) {
            slot.req = Some(req);
        }
    }

    /// A new request holding `req`: its id.
    pub(super) fn insert(&mut self, req: Req) -> u64 {
        let id = self.reserve();
        self.fill(id, req);
        id
    }

    /// Records request `id` in `group`.
    pub(super) fn set_group(&mut self, id: u64, group: u64) {
        let Some(slot) = self.slot_mut(id) else {
            return;
        };
        let newly = slot.group == 0 && group != 0;
        slot.group = group;
        if newly {
            self.grouped += 1;
        }
    }

    fn slot_mut(&mut self, id: u64) -> Option<&mut Slot> {
        let (index, generation) = split(id);
        self.slots
            .get_mut(index)
            .filter(|s| s.used && s.generation == generation)
    }

    /// Request `id`, if it is still the engine's.
    #[inline]
    pub(super) fn get_mut(&mut self, id: u64) -> Option<&mut Req> {
        self.slot_mut(id)?.req.as_mut()
    }

    /// Whether `id` names a request (reserved or stored) that is still the engine's.
    pub(super) fn contains(&self, id: u64) -> bool {
        let (index, generation) = split(id);
        self.slots
            .get(index)
            .is_some_and(|s| s.used && s.generation == generation)
    }

    /// Removes request `id`: its state, if it had one.
    pub(super) fn remove(&mut self, id: u64) -> Option<Req> {
        let slot = self.slot_mut(id)?;
        let req = slot.req.take();
        let grouped = slot.group != 0;
        slot.group = 0;
        slot.used = false;
        slot.generation = if slot.generation >= GENERATION_LIMIT {
            1
        } else {
            slot.generation + 1
        };
        if grouped {
            self.grouped -= 1;
        }
        self.free.push(split(id).0 as u32);
        req
    }

    /// Gives back a reserved id whose request never started.
    pub(super) fn release(&mut self, id: u64) {
        self.remove(id);
    }

    /// The ids of `group`'s requests, oldest first.
    pub(super) fn of_group(&self, group: u64) -> Vec<u64> {
        if self.grouped == 0 {
            return Vec::new();
        }
        let mut found: Vec<(u64, u64)> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.used && s.group == group)
            .map(|(i, s)| (s.serial, (u64::from(s.generation) << 32) | i as u64))
            .collect();
        found.sort_unstable();
        found.into_iter().map(|(_, id)| id).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::p2p::Status;

    fn done() -> Req {
        Req::Done(Ok(Status {
            source: 0,
            tag: 0,
            len: 0,
            cancelled: false,
        }))
    }

    #[test]
    fn a_stale_id_names_nothing_after_its_slot_is_reused() {
        let mut r = Requests::default();
        let a = r.insert(done());
        assert!(r.remove(a).is_some());
        let b = r.insert(done());
        assert_ne!(a, b, "the reused slot has a new generation");
        assert!(r.get_mut(a).is_none());
        assert!(!r.contains(a));
        assert!(r.remove(a).is_none());
        assert!(r.get_mut(b).is_some());
    }

    #[test]
    fn ids_stay_below_the_reserved_user_ptrs() {
        let mut r = Requests::default();
        for _ in 0..10_000 {
            let id = r.insert(done());
            assert!(id < super::super::RESERVED_IDS);
            r.remove(id);
        }
    }

    #[test]
    fn a_group_lists_its_uncollected_requests_oldest_first() {
        let mut r = Requests::default();
        let ids: Vec<u64> = (0..6).map(|_| r.insert(done())).collect();
        for &id in &ids[..4] {
            r.set_group(id, 7);
        }
        r.set_group(ids[4], 8);
        r.remove(ids[1]);
        // A slot freed and reused is newer than every earlier request.
        let newer = r.insert(done());
        r.set_group(newer, 7);
        assert_eq!(r.of_group(7), vec![ids[0], ids[2], ids[3], newer]);
        assert_eq!(r.of_group(8), vec![ids[4]]);
        for id in r.of_group(7).into_iter().chain(r.of_group(8)) {
            r.remove(id);
        }
        assert_eq!(r.grouped, 0);
        assert!(r.of_group(7).is_empty());
    }

    #[test]
    fn a_released_reservation_frees_its_slot() {
        let mut r = Requests::default();
        let id = r.reserve();
        assert!(r.contains(id));
        assert!(r.get_mut(id).is_none(), "reserved, not filled");
        r.release(id);
        assert!(!r.contains(id));
        assert_eq!(r.free.len(), 1);
    }
}

//! The per-rank table of registered regions: turns a [`RegionKey`] from a peer into a live
//! region (index and generation checked), and performs puts and gets into this rank's regions
//! from regions of the same process.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::{copy_between, Publisher, Region, RegionInner};
use crate::error::{Result, TransportError};
use crate::types::{Rank, RegionKey};

impl RegionTable {
    /// Performs a put into one of this table's regions from a region of the same process (the
    /// `local` backend, and every backend's puts to itself).
    pub(crate) fn put_from(
        &self,
        src: &Region,
        src_off: usize,
        len: usize,
        dst: crate::RemoteAddr,
    ) -> Result<()> {
        self.lookup(dst.key)
            .and_then(|r| copy_between(src, src_off, &r, dst.offset, len))
    }

    /// [`put_from`](RegionTable::put_from) followed by the flag byte of
    /// [`crate::Fabric::put_flag`], stored with release ordering once the data is in place.
    pub(crate) fn put_flag_from(
        &self,
        src: &Region,
        src_off: usize,
        len: usize,
        dst: crate::RemoteAddr,
        flag: u8,
    ) -> Result<()> {
        let r = self.lookup(dst.key)?;
        r.check_range(dst.offset, len.saturating_add(1))?;
        copy_between(src, src_off, &r, dst.offset, len)?;
        r.store_flag(dst.offset + len, flag)
    }

    /// Performs a get from one of this table's regions into a region of the same process.
    pub(crate) fn get_into(
        &self,
        dst: &Region,
        dst_off: usize,
        len: usize,
        src: crate::RemoteAddr,
    ) -> Result<()> {
        self.lookup(src.key)
            .and_then(|r| copy_between(&r, src.offset, dst, dst_off, len))
    }
}

struct Slot {
    generation: u32,
    region: Option<Weak<RegionInner>>,
}

/// The regions one rank has registered, by key. Lookups check index and generation.
pub(crate) struct RegionTable {
    rank: Rank,
    slots: Mutex<(Vec<Slot>, Vec<u32>)>,
    limit: usize,
}

impl RegionTable {
    /// A table for `rank` that holds at most `limit` live regions.
    pub(crate) fn new(rank: Rank, limit: usize) -> Arc<RegionTable> {
        Arc::new(RegionTable {
            rank,
            slots: Mutex::new((Vec::new(), Vec::new())),
            limit,
        })
    }

    /// Reserves a slot and builds the region for its key with `make`.
    pub(crate) fn insert(
        self: &Arc<Self>,
        make: impl FnOnce(RegionKey, Weak<dyn Publisher>) -> Result<Region>,
    ) -> Result<Region> {
        let weak_self: Weak<RegionTable> = Arc::downgrade(self);
        self.insert_via(weak_self, make)
    }

    /// Like [`RegionTable::insert`], with another publisher (which must unpublish from this
    /// table too) handed to the region.
    pub(crate) fn insert_via(
        self: &Arc<Self>,
        publisher: Weak<dyn Publisher>,
        make: impl FnOnce(RegionKey, Weak<dyn Publisher>) -> Result<Region>,
    ) -> Result<Region> {
        let mut guard = self.slots.lock();
        let (slots, free) = &mut *guard;
        let index = match free.pop() {
            Some(i) => i,
            None if slots.len() < self.limit => {
                slots.push(Slot {
                    generation: 0,
                    region: None,
                });
                (slots.len() - 1) as u32
            }
            None => {
                return Err(TransportError::OutOfResources {
                    what: "region slots",
                })
            }
        };
        let slot = &mut slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1).max(1);
        let key = RegionKey::new(index, slot.generation);
        match make(key, publisher) {
            Ok(region) => {
                slot.region = Some(Arc::downgrade(&region.inner));
                Ok(region)
            }
            Err(e) => {
                free.push(index);
                Err(e)
            }
        }
    }

    /// The live region named by `key`, or the error a peer should see.
    pub(crate) fn lookup(&self, key: RegionKey) -> Result<Region> {
        let bad = || TransportError::BadKey {
            rank: self.rank,
            key: key.0,
        };
        let guard = self.slots.lock();
        let slot = guard.0.get(key.index() as usize).ok_or_else(bad)?;
        if slot.generation != key.generation() {
            return Err(bad());
        }
        let inner = slot
            .region
            .as_ref()
            .and_then(Weak::upgrade)
            .ok_or_else(bad)?;
        Ok(Region {
            inner,
            owner: false,
        })
    }

    /// Number of live regions.
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.slots
            .lock()
            .0
            .iter()
            .filter(|s| s.region.is_some())
            .count()
    }
}

impl RegionTable {
    /// Forgets `key`; its slot is handed out again only if `reuse` (a backend that cannot be
    /// sure no peer still holds the slot busy retires it instead).
    pub(crate) fn forget(&self, key: RegionKey, reuse: bool) {
        let mut guard = self.slots.lock();
        let (slots, free) = &mut *guard;
        if let Some(slot) = slots.get_mut(key.index() as usize) {
            if slot.generation == key.generation() && slot.region.is_some() {
                slot.region = None;
                slot.generation = slot.generation.wrapping_add(1).max(1);
                if reuse {
                    free.push(key.index());
                }
            }
        }
    }
}

impl Publisher for RegionTable {
    fn unpublish(&self, key: RegionKey) {
        self.forget(key, true);
    }
}

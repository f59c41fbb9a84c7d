//! The shared region table: each rank publishes its regions in its own segment, seqlocked, so
//! a peer can check a key, offset and length itself and then copy directly.
//!
//! An entry's sequence word is `generation << 1` while the region is published and odd while
//! it is being written or after it was withdrawn, so a key only matches a live entry of its
//! own generation. Direct copies into or out of the heap announce themselves first: in the
//! copying thread's slot of its own segment (`copy_slot`, with the asymmetric fence) or in the
//! entry's `users` word; the owner, withdrawing a region, waits until no announcement names it
//! before the memory can be handed out again.

use std::sync::atomic::{compiler_fence, fence, Ordering};
use std::time::{Duration, Instant};

use super::{copy_slot, Inner};
use crate::error::{Result, TransportError};
use crate::types::{range_fits, Rank, RegionKey};

/// Kind of a region-table entry: a block of the owner's heap (addr = heap offset).
pub(super) const KIND_HEAP: u64 = 1;
/// Kind of a region-table entry: private memory (addr = virtual address in the owner).
pub(super) const KIND_EXTERNAL: u64 = 2;

/// Longest an owner waits for peers to finish direct copies of a region it withdraws; past
/// it the block is retired rather than reused.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);
/// Shorter limit once some peer is known dead (it may have died holding the count).
const DRAIN_LIMIT_WITH_DEAD_PEER: Duration = Duration::from_millis(20);

const SEQ: usize = 0;
const KIND: usize = 1;
const ADDR: usize = 2;
const LEN: usize = 3;
const USERS: usize = 4;

/// A validated view of a peer's region-table entry.
#[derive(Clone, Copy)]
pub(super) struct Entry {
    pub(super) kind: u64,
    pub(super) addr: usize,
    pub(super) len: usize,
    seq: u64,
}

impl Inner {
    /// Publishes one of our regions in the shared table (seqlock write).
    pub(super) fn publish(&self, key: RegionKey, kind: u64, addr: usize, len: usize) {
        let v = self.view(self.rank);
        let i = key.index() as usize;
        let gen = (key.generation() as u64) << 1;
        v.entry(i, SEQ).store(gen | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        v.entry(i, KIND).store(kind, Ordering::Relaxed);
        v.entry(i, ADDR).store(addr as u64, Ordering::Relaxed);
        v.entry(i, LEN).store(len as u64, Ordering::Relaxed);
        v.entry(i, SEQ).store(gen, Ordering::Release);
    }

    /// Withdraws one of our regions: no peer starts a direct copy after this, and the ones
    /// under way have finished when it returns. Returns false if some did not finish in time
    /// (a peer died inside one), or their end could not be ordered: the slot and, for heap
    /// regions, the block must then be retired, never reused.
    pub(super) fn retract(&self, key: RegionKey) -> bool {
        let v = self.view(self.rank);
        let i = key.index() as usize;
        // SeqCst pairs with the peers' SeqCst increment of `users` and reload of the sequence
        // (see `direct_copy`): either they see the odd value, or we see their count.
        v.entry(i, SEQ)
            .store(((key.generation() as u64) << 1) | 1, Ordering::SeqCst);
        let heap = v.entry(i, KIND).load(Ordering::Relaxed) == KIND_HEAP;
        let quarantine = || {
            if heap {
                let addr = v.entry(i, ADDR).load(Ordering::Relaxed) as usize;
                self.heap.lock().quarantine(addr);
            }
            false
        };
        // Copies announced in slots: for heap blocks with the asymmetric fence (after the
        // membarrier, a peer thread either had its slot store visible or will see the odd
        // sequence), and for memory the caller registered always (the writer's slot store is
        // SeqCst, pairing with ours above).
        let in_slots = !heap || self.asymmetric_fence;
        if heap && in_slots && !crate::membarrier::global() {
            return quarantine();
        }
        let tag = copy_slot::tag(self.rank as usize, i);
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            // A live peer's announced write: waited for without limit when the memory goes back
            // to the caller (it cannot be quarantined); such a write is one bounded
            // `process_vm_writev`. A dead peer writes nothing more.
            let live_writer = in_slots && self.announced_by_a_live_peer(tag);
            let counted = v.entry(i, USERS).load(Ordering::SeqCst) != 0;
            if !live_writer && !counted {
                return true;
            }
            let someone_died = self
                .failed
                .iter()
                .chain(self.dead.iter())
                .any(|f| f.load(Ordering::Acquire));
            // A count (from a thread without a slot) is bounded like a heap copy.
            let limit = if live_writer && !heap {
                Duration::MAX
            } else if someone_died {
                DRAIN_LIMIT_WITH_DEAD_PEER
            } else {
                DRAIN_LIMIT
            };
            if start.elapsed() > limit {
                return quarantine();
            }
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Withdraws every region still published (see [`Inner::retract`]): once the fabric is
    /// gone, deregistering a region no longer reaches the table, so no peer may go on writing
    /// into memory the caller gets back then.
    pub(super) fn withdraw_all(&self) {
        let v = self.view(self.rank);
        for i in 0..self.layout.max_regions {
            let seq = v.entry(i, SEQ).load(Ordering::Acquire);
            if seq != 0 && seq & 1 == 0 {
                if let Ok(generation) = u32::try_from(seq >> 1) {
                    self.retract(RegionKey::new(i as u32, generation));
                }
            }
        }
    }

    /// Whether a thread of a peer not known dead announces a direct copy tagged `tag` in its
    /// copy slot.
    fn announced_by_a_live_peer(&self, tag: u64) -> bool {
        (0..self.size as Rank)
            .filter(|&r| r != self.rank && !self.dead[r as usize].load(Ordering::Acquire))
            .any(|r| {
                let v = self.view(r);
                (0..copy_slot::COPY_SLOTS).any(|t| v.copy_slot(t).load(Ordering::SeqCst) == tag)
            })
    }

    /// Reads and validates entry `key` of `rank`'s region table.
    pub(super) fn entry(&self, rank: Rank, key: RegionKey) -> Result<Entry> {
        let bad = || TransportError::BadKey { rank, key: key.0 };
        let index = key.index() as usize;
        if index >= self.layout.max_regions || key.generation() == 0 {
            return Err(bad());
        }
        let v = self.view(rank);
        let seq = v.entry(index, SEQ).load(Ordering::Acquire);
        if seq != (key.generation() as u64) << 1 {
            // A peer that closed its fabric withdrew every region first (`withdraw_all`): the
            // key is not bad, the peer is gone.
            if v.closed().load(Ordering::Acquire) != 0 {
                return Err(TransportError::PeerFailed(rank));
            }
            return Err(bad());
        }
        let (kind, addr, len) = (
            v.entry(index, KIND).load(Ordering::Relaxed),
            v.entry(index, ADDR).load(Ordering::Relaxed),
            v.entry(index, LEN).load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        if v.entry(index, SEQ).load(Ordering::Relaxed) != seq {
            return Err(bad());
        }
        let corrupt = || TransportError::Protocol {
            rank,
            what: "corrupt region table entry".into(),
        };
        let addr = usize::try_from(addr).map_err(|_| corrupt())?;
        let len = usize::try_from(len).map_err(|_| corrupt())?;
        let sane = match kind {
            KIND_HEAP => range_fits(addr, len, self.layout.heap_bytes),
            KIND_EXTERNAL => addr.checked_add(len).is_some(),
            _ => false,
        };
        if !sane {
            return Err(corrupt());
        }
        Ok(Entry {
            kind,
            addr,
            len,
            seq,
        })
    }

    /// Checks `offset..offset + len` against a validated entry.
    pub(super) fn check_remote_range(
        &self,
        rank: Rank,
        key: RegionKey,
        e: &Entry,
        offset: usize,
        len: usize,
    ) -> Result<()> {
        if range_fits(offset, len, e.len) {
            Ok(())
        } else {
            Err(TransportError::OutOfRange {
                rank,
                key: key.0,
                offset: offset as u64,
                len: len as u64,
                region_len: e.len as u64,
            })
        }
    }

    /// The entry of `key` at `rank`, validated and with `offset..offset + len` inside it.
    pub(super) fn entry_for(
        &self,
        rank: Rank,
        key: RegionKey,
        offset: usize,
        len: usize,
    ) -> Result<Entry> {
        let e = self.entry(rank, key)?;
        self.check_remote_range(rank, key, &e, offset, len)?;
        Ok(e)
    }

    /// Whether the entry is unchanged since `e` was read (the region was not withdrawn): a
    /// seqlock reader's second look, after the data it copied.
    pub(super) fn still_valid(&self, rank: Rank, key: RegionKey, e: &Entry) -> bool {
        fence(Ordering::Acquire);
        self.view(rank)
            .entry(key.index() as usize, SEQ)
            .load(Ordering::Relaxed)
            == e.seq
    }

    /// Runs `copy` on a peer's region (a heap block, or registered memory written by
    /// `process_vm_writev`) while announced to its owner, so the owner cannot
    /// free and reuse the block in the middle; a withdrawn region is `BadKey`.
    ///
    /// With the asymmetric fence the announcement is this thread's copy slot, written with
    /// plain stores (the owner's membarrier in `retract` orders it against the sequence
    /// check); otherwise, or for a thread without a slot, the entry's shared `users` count,
    /// whose locked increment and decrement order it themselves. Registered memory needs a
    /// slot: `OutOfResources` without one (the caller leaves the copy to the owner).
    pub(super) fn direct_copy(
        &self,
        rank: Rank,
        key: RegionKey,
        e: &Entry,
        copy: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let v = self.view(rank);
        let i = key.index() as usize;
        let seq = v.entry(i, SEQ);
        // Heap blocks use slots with the asymmetric fence (plain stores, the owner pays a
        // membarrier); memory the caller registered always does, with SeqCst stores (no
        // membarrier per withdrawn user buffer), so the owner sees which peer writes.
        let heap = e.kind == KIND_HEAP;
        let slot = (self.asymmetric_fence || !heap)
            .then(copy_slot::this_thread)
            .flatten()
            .map(|t| self.view(self.rank).copy_slot(t));
        let users = v.entry(i, USERS);
        if slot.is_none() && !heap {
            // Caller memory is withdrawn without a time limit only from writers announced in
            // a slot (`retract`); a counted writer could outlive the owner's bounded wait. A
            // thread beyond the slots leaves such copies to the owner (callers fall back).
            return Err(TransportError::OutOfResources {
                what: "copy slots for writes into a peer's registered memory",
            });
        }
        match slot {
            Some(slot) if heap => {
                slot.store(copy_slot::tag(rank as usize, i), Ordering::Relaxed);
                // The store above and the load below stay in this order in the program; the
                // owner's membarrier orders them for the CPU.
                compiler_fence(Ordering::SeqCst);
            }
            Some(slot) => slot.store(copy_slot::tag(rank as usize, i), Ordering::SeqCst),
            None => {
                users.fetch_add(1, Ordering::SeqCst);
            }
        }
        let result = if seq.load(Ordering::SeqCst) == e.seq {
            copy()
        } else {
            Err(TransportError::BadKey { rank, key: key.0 })
        };
        // Release: the copy's accesses are done before the owner may reuse the memory.
        match slot {
            Some(slot) => slot.store(0, Ordering::Release),
            None => {
                users.fetch_sub(1, Ordering::Release);
            }
        }
        result
    }
}

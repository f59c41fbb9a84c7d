//! Large broadcasts among ranks that share memory (shm, local): the root copies each chunk of
//! the message once, into staging in its own registered area, and every other rank copies it
//! from there straight into its buffer (`Fabric::load_now`). One copy per rank, and no rank
//! writes into memory that another rank reads except the root into its staging, which it
//! writes with non-temporal stores (`Region::write_streaming`), so that it does not first take
//! every line back from the readers' caches.
//!
//! Why (docs/ALGORITHMS.md, "Broadcast"): the counter-byte
//! blocks and RDMC's staged transfers write every byte into each receiver's memory and the
//! receiver copies it out again. With 4 ranks on 2 cores a 256 KiB broadcast through counter
//! blocks took 1.5-1.8x Open MPI's time, 41 % of its `perf` samples in the root's stores into
//! its children's blocks (lines they had read), 3 % in each leaf's copy out. Through this
//! staging: 0.45 of Open MPI's time at 256 KiB, 0.08-0.10 from 1 MiB; 2 ranks 0.38-0.71 of the
//! better MPI's from 8 KiB to 4 MiB.
//!
//! Flow control, per root: every rank counts the chunks each root has staged (the same count
//! on every rank: each broadcast's length and chunk size are known to all). The root's `u`th
//! chunk goes into slot `u % SLOTS`; the root writes it there only once every reader has said
//! it is done with chunk `u - SLOTS` (a byte per reader in the root's area, the count of that
//! root's chunks it has copied), then writes a ready byte for the slot into each reader's area
//! (one per root and slot, holding the chunk's count: the value the slot held before is the
//! previous chunk's, never the same). A reader waits for that byte, copies the chunk, and
//! writes its count into the root's area. The root does not wait for its readers at the end:
//! its buffer is free as soon as the last chunk is staged; its staging must outlive their
//! reads, so dropping the communicator waits for them ([`SharedStaging::drain`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use rdcoll_offload::p2p::Context;
use rdcoll_transport::Rank;

use crate::area::Area;
use crate::error::{CollError, Result};
use crate::progress::Waiter;
use crate::Puts;

/// Staging slots per rank: the root runs this many chunks ahead of its slowest reader.
pub(crate) const SLOTS: usize = 4;
const _: () = assert!(SLOTS < 127);

/// One communicator's shared-staging state.
pub(crate) struct SharedStaging {
    area: Area,
    /// Bytes per slot: the largest chunk.
    slot_cap: usize,
    /// Offset of the ready bytes (`SLOTS` per root, written by the roots).
    ready: usize,
    /// Offset of the done bytes (one per reader, written by the readers).
    done: usize,
    /// Chunks each rank has staged as a root so far (the same on every rank).
    staged: Vec<u64>,
}

impl SharedStaging {
    /// Registers `SLOTS` slots of `slot_cap` bytes and the flag bytes. Collective.
    pub(crate) fn new(w: &Waiter, context: Context, slot_cap: usize) -> Result<SharedStaging> {
        let n = w.size();
        let ready = SLOTS * slot_cap;
        let done = ready + n * SLOTS;
        let area = Area::new(w, context, done + n)?;
        Ok(SharedStaging {
            area,
            slot_cap,
            ready,
            done,
            staged: vec![0; n],
        })
    }

    /// At the root: stages `data` in chunks of `chunk` bytes for every other rank.
    pub(crate) fn send(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        data: &[u8],
        chunk: usize,
    ) -> Result<()> {
        let chunk = self.check(chunk)?;
        let (me, n) = (w.rank(), w.size() as Rank);
        let readers = || (0..n).filter(move |&r| r != me);
        let first = self.staged[me as usize];
        for (j, part) in chunks(data, chunk).enumerate() {
            let u = first + j as u64;
            let slot = (u % SLOTS as u64) as usize;
            if let Some(need) = (u + 1).checked_sub(SLOTS as u64) {
                for r in readers() {
                    let done = self.area.flag(self.done + r as usize);
                    // Counts travel as bytes: a reader is never more than `SLOTS` chunks behind.
                    w.until(r, &|| {
                        done.load(Ordering::Acquire).wrapping_sub(need as u8) as i8 >= 0
                    })?;
                }
            }
            self.area
                .local()
                .write_streaming(slot * self.slot_cap, part)?;
            let at = self.ready + me as usize * SLOTS + slot;
            for r in readers() {
                puts.put(
                    w,
                    self.area.local(),
                    0,
                    0,
                    self.area.at(r, at),
                    Some(ready_byte(u)),
                )?;
            }
        }
        self.staged[me as usize] += chunk_count(data.len(), chunk);
        Ok(())
    }

    /// `chunk`, if it fits a slot.
    fn check(&self, chunk: usize) -> Result<usize> {
        if chunk == 0 || chunk > self.slot_cap {
            return Err(CollError::InvalidArgument(format!(
                "a {chunk}-byte chunk does not fit the {}-byte staging slots",
                self.slot_cap
            )));
        }
        Ok(chunk)
    }

    /// Waits until every other rank has copied out what this rank staged (a reader may still
    /// be copying its last chunks when the root has returned and drops the communicator), at
    /// most `limit`; a rank that has failed, or a communicator a failure broke, is not waited
    /// for.
    pub(crate) fn drain(&self, w: &Waiter, limit: Duration) {
        let fabric = w.fabric();
        let me = w.rank();
        let staged = self.staged[me as usize];
        if staged == 0 {
            return;
        }
        let deadline = fabric.now().saturating_add(limit);
        for r in (0..w.size() as Rank).filter(|&r| r != me) {
            let done = self.area.flag(self.done + r as usize);
            let copied = || done.load(Ordering::Acquire).wrapping_sub(staged as u8) as i8 >= 0;
            if w.until(r, &|| copied() || fabric.now() >= deadline)
                .is_err()
                || !copied()
            {
                tracing::debug!("rank {r} had not copied out rank {me}'s last broadcast");
            }
        }
    }

    /// Elsewhere: copies `root`'s message, `buf.len()` bytes in chunks of `chunk`, out of its
    /// staging.
    pub(crate) fn receive(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        buf: &mut [u8],
        root: Rank,
        chunk: usize,
    ) -> Result<()> {
        let chunk = self.check(chunk)?;
        let fabric = w.fabric();
        let me = w.rank();
        let first = self.staged[root as usize];
        let count = chunk_count(buf.len(), chunk);
        for (j, part) in chunks_mut(buf, chunk).enumerate() {
            let u = first + j as u64;
            let slot = (u % SLOTS as u64) as usize;
            let ready = self.area.flag(self.ready + root as usize * SLOTS + slot);
            let want = ready_byte(u);
            w.until(root, &|| ready.load(Ordering::Acquire) == want)?;
            let from = self.area.at(root, slot * self.slot_cap);
            if !fabric.load_now(part, from)? {
                return Err(CollError::InvalidArgument(format!(
                    "the {} backend cannot read rank {root}'s staging directly: choose another \
                     broadcast algorithm (RDCOLL_BCAST_ALGORITHM)",
                    fabric.backend()
                )));
            }
            // Its count of this root's chunks, after the copy (release).
            let at = self.area.at(root, self.done + me as usize);
            puts.put(w, self.area.local(), 0, 0, at, Some((u + 1) as u8))?;
        }
        self.staged[root as usize] += count;
        Ok(())
    }
}

/// The ready byte of a root's `u`th chunk: never 0 ("nothing yet"), and never the byte of the
/// chunk the slot held before (`u - SLOTS`).
fn ready_byte(u: u64) -> u8 {
    (u % 255) as u8 + 1
}

/// Chunks a message of `len` bytes takes (an empty one takes one, as [`chunks`] yields).
fn chunk_count(len: usize, chunk: usize) -> u64 {
    len.div_ceil(chunk).max(1) as u64
}

/// `data` in chunks of `chunk` bytes; an empty message is one empty chunk (so that every rank
/// counts it alike).
fn chunks(data: &[u8], chunk: usize) -> impl Iterator<Item = &[u8]> {
    let empty: &[u8] = &[];
    data.chunks(chunk).chain(data.is_empty().then_some(empty))
}

/// The same over a buffer to fill.
fn chunks_mut(buf: &mut [u8], chunk: usize) -> impl Iterator<Item = &mut [u8]> {
    let empty: Option<&mut [u8]> = buf.is_empty().then_some(&mut []);
    buf.chunks_mut(chunk).chain(empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_never_holds_the_byte_of_the_chunk_it_waits_for() {
        for u in SLOTS as u64..5000 {
            assert_ne!(ready_byte(u), ready_byte(u - SLOTS as u64), "{u}");
            assert_ne!(ready_byte(u), 0);
        }
    }

    #[test]
    fn chunks_cover_the_message_and_an_empty_one_is_one_chunk() {
        let data: Vec<u8> = (0..10u8).collect();
        let lens: Vec<usize> = chunks(&data, 4).map(|c| c.len()).collect();
        assert_eq!(lens, vec![4, 4, 2]);
        assert_eq!(chunks(&[], 4).count(), 1);
        assert_eq!((chunk_count(10, 4), chunk_count(0, 4)), (3, 1));
        let mut buf = vec![0u8; 8];
        assert_eq!(chunks_mut(&mut buf, 4).count(), 2);
        assert_eq!(chunks_mut(&mut [], 4).count(), 1);
    }
}

//! Large vectors: reduce-scatter, then allgather (or gather, for a reduce), both bandwidth
//! optimal: each rank sends and receives `(n - 1) / n` of the vector in each phase, by RDMA
//! writes into registered staging slots, pipelined in chunks.
//!
//! Rank `o` owns segment `o` of the vector. Round `q` moves chunk `q` of every segment:
//! 1. every rank writes its part of chunk `q` of each other owner's segment into that owner's
//!    reduce-scatter slot for it;
//! 2. each owner combines the `n` contributions strictly as `v0 op v1 op ... op v(n-1)`
//!    (ascending ranks, whatever the arrival order: results are reproducible bit for bit),
//!    acknowledging each slot as it is consumed: rank 0 into its own buffer, the others into
//!    rank 0's contribution where it arrived (no copy of it first; a reduce's rank that does
//!    not receive the result only reads its own vector, never writes it);
//! 3. each owner writes the reduced chunk into every other rank's allgather slot for it (only
//!    the root's, for a reduce);
//! 4. each rank copies the chunks it receives into place and acknowledges them.
//!
//! Every slot has two windows (rounds alternate), and each rank writes its parts of round
//! `q + 1` (step 1) right after step 3 of round `q`, so they travel while round `q`'s reduced
//! chunks do; a window is written again only once its previous contents were acknowledged
//! (one byte, the count of writes consumed, in the writer's area). No step waits for anything
//! of a later round, nor for a later step of its own round, so no cycle of waits can form.

use std::sync::atomic::Ordering;

use rdcoll_offload::p2p::Context;
use rdcoll_transport::Rank;

use crate::area::Area;
use crate::error::{CollError, Result};
use crate::progress::Waiter;
use crate::reduce::op::Reducer;
use crate::Puts;

/// Bytes per chunk (rounded down to whole elements) where small chunks pipeline best: more
/// than two ranks sharing memory.
const CHUNK: usize = 64 << 10;
/// The largest chunk, where each write and acknowledgement should move more: two ranks, or a
/// transport whose every write costs system calls (2 ranks, 1 MiB: 1.5x faster than with
/// `CHUNK` over shm and tcp alike).
const WIDE_CHUNK: usize = 256 << 10;
/// What the slots of wide chunks may take in all (2 phases x n peers x `WINDOWS`).
const WIDE_SLOTS_BUDGET: usize = 8 << 20;
/// Rounds in flight per slot.
const WINDOWS: usize = 2;

/// Elements `[start, start + len)` of the vector that rank `r` of `n` owns.
pub(crate) fn segment(count: usize, n: usize, r: usize) -> (usize, usize) {
    let (base, extra) = (count / n, count % n);
    (r * base + r.min(extra), base + usize::from(r < extra))
}

/// Bytes per chunk for `n` ranks over `fabric`, the same on every rank (all ranks of a job
/// run over one kind of fabric): [`WIDE_CHUNK`] for two ranks or where each write is a
/// message (the fabric suggests a rendezvous chunk), halved while the slots would take more
/// than [`WIDE_SLOTS_BUDGET`]; else [`CHUNK`].
fn chunk_for(n: usize, fabric: &dyn rdcoll_transport::Fabric) -> usize {
    if n != 2 && fabric.rndv_chunk_hint().is_none() {
        return CHUNK;
    }
    wide_chunk(n)
}

/// [`WIDE_CHUNK`], halved while `n` ranks' slots would take more than [`WIDE_SLOTS_BUDGET`]
/// (never below [`CHUNK`]).
fn wide_chunk(n: usize) -> usize {
    let mut chunk = WIDE_CHUNK;
    while chunk > CHUNK && 2 * n * WINDOWS * chunk > WIDE_SLOTS_BUDGET {
        chunk /= 2;
    }
    chunk
}

/// Which kind of slot.
#[derive(Clone, Copy)]
enum Phase {
    Scatter = 0,
    Gather = 1,
}

/// This rank's contribution to a large reduction.
pub(crate) enum Contribution<'a> {
    /// Read, and written with the result (an allreduce, or the root of a reduce).
    InOut(&'a mut [u8]),
    /// Only read (a reduce's rank other than the root: its vector is not copied first).
    In(&'a [u8]),
    /// Read from `from`, the result written to `into` (of the same length): a rank that
    /// receives the result into a buffer of its own copies only its own segment across.
    Apart { from: &'a [u8], into: &'a mut [u8] },
}

/// Where a rank's combined chunk is.
#[derive(Clone, Copy)]
enum Folded {
    /// In its place in the rank's own vector.
    Mine,
    /// In this rank's area at this offset (rank 0's scatter slot, still to be acknowledged,
    /// or, for rank 0 itself, its own unused scatter slot).
    Area(usize),
}

/// The regions of this rank's vector during a large reduction.
struct Vector<'a> {
    /// Its contribution (read).
    src: &'a rdcoll_transport::Region,
    /// Where its result goes, if it receives one (the same region as `src` unless `apart`).
    dst: Option<&'a rdcoll_transport::Region>,
    /// Whether `dst` is a buffer of its own.
    apart: bool,
}

/// One communicator's staging slots for large reductions.
pub(crate) struct ScatterGather {
    area: Area,
    /// Bytes per slot (a chunk plus the flag, rounded to 64).
    stride: usize,
    /// Offset of the acknowledgement bytes: `[phase][peer][window]`.
    acks: usize,
    n: usize,
    /// Writes made to / consumed from each `[phase][peer][window]` slot, mod 256.
    written: Vec<u8>,
    consumed: Vec<u8>,
    /// Bytes per chunk ([`chunk_for`]).
    chunk: usize,
}

impl ScatterGather {
    /// Registers the slots (two phases, one per peer and window). Collective.
    pub(crate) fn new(w: &Waiter, context: Context) -> Result<ScatterGather> {
        let n = w.size();
        let chunk = chunk_for(n, w.fabric());
        let stride = (chunk + 1).next_multiple_of(64);
        let slots = 2 * n * WINDOWS;
        let acks = slots * stride;
        let area = Area::new(w, context, acks + slots)?;
        Ok(ScatterGather {
            area,
            stride,
            acks,
            n,
            written: vec![0; slots],
            consumed: vec![0; slots],
            chunk,
        })
    }

    fn index(&self, phase: Phase, peer: usize, window: usize) -> usize {
        ((phase as usize) * self.n + peer) * WINDOWS + window
    }

    /// The slot at a rank's area for `peer`'s writes in `phase`, `window`.
    fn slot(&self, phase: Phase, peer: usize, window: usize) -> usize {
        self.index(phase, peer, window) * self.stride
    }

    /// Writes `len` bytes of `src` at `offset` into `to`'s `phase` slot for this rank, once
    /// the window's previous contents were consumed; the flag follows the data.
    #[allow(clippy::too_many_arguments)]
    fn give(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        phase: Phase,
        to: usize,
        window: usize,
        src: &rdcoll_transport::Region,
        offset: usize,
        len: usize,
    ) -> Result<()> {
        let me = w.rank() as usize;
        let i = self.index(phase, to, window);
        let before = self.written[i];
        let ack = self.area.flag(self.acks + i);
        w.until(to as Rank, &|| ack.load(Ordering::Acquire) == before)?;
        // Bottom-filled: the data ends right before the slot's fixed flag byte, so a shorter
        // chunk never finds an old chunk's data where its flag would be.
        let data = self.slot(phase, me, window) + self.chunk - len;
        let flag = (before % 255) + 1;
        puts.put(
            w,
            src,
            offset,
            len,
            self.area.at(to as Rank, data),
            Some(flag),
        )?;
        self.written[i] = before.wrapping_add(1);
        Ok(())
    }

    /// Waits for `from`'s write of `len` bytes into this rank's `phase` slot; returns where
    /// its data starts. Call [`consumed`](ScatterGather::consumed) once it has been used.
    fn take(
        &self,
        w: &Waiter,
        phase: Phase,
        from: usize,
        window: usize,
        len: usize,
    ) -> Result<usize> {
        let i = self.index(phase, from, window);
        let slot = self.slot(phase, from, window);
        let flag = self.area.flag(slot + self.chunk);
        let want = (self.consumed[i] % 255) + 1;
        w.until(from as Rank, &|| flag.load(Ordering::Acquire) != 0)?;
        let got = flag.load(Ordering::Acquire);
        if got != want {
            return Err(CollError::Mismatch(format!(
                "rank {from}'s chunk carries {got}, expected {want}: the ranks' reductions are \
                 out of step (different lengths?)"
            )));
        }
        Ok(slot + self.chunk - len)
    }

    /// Marks `from`'s slot consumed and tells `from`.
    fn consumed(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        phase: Phase,
        from: usize,
        window: usize,
    ) -> Result<()> {
        let me = w.rank() as usize;
        let i = self.index(phase, from, window);
        let slot = self.slot(phase, from, window);
        self.area
            .flag(slot + self.chunk)
            .store(0, Ordering::Release);
        self.consumed[i] = self.consumed[i].wrapping_add(1);
        let at = self
            .area
            .at(from as Rank, self.acks + self.index(phase, me, window));
        puts.notify(w, self.area.local(), at, self.consumed[i]);
        Ok(())
    }

    /// Reduces this rank's contribution (`elem`-byte elements, aligned) across all ranks:
    /// afterwards every rank's vector holds the result (`root: None`), or the root's. A
    /// read-only contribution ([`Contribution::In`]) is for a rank that receives nothing.
    pub(crate) fn reduce(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        contribution: Contribution<'_>,
        elem: usize,
        reduce: &Reducer<'_>,
        root: Option<Rank>,
    ) -> Result<()> {
        let (me, n) = (w.rank() as usize, self.n);
        let receives = |r: usize| root.is_none_or(|root| root as usize == r);
        let (from, into) = match contribution {
            Contribution::InOut(acc) => ((acc.as_mut_ptr(), acc.len()), Some(None)),
            Contribution::In(acc) => ((acc.as_ptr().cast_mut(), acc.len()), None),
            Contribution::Apart { from, into } => {
                if from.len() != into.len() {
                    return Err(CollError::InvalidArgument(format!(
                        "send has {} bytes, receive {}",
                        from.len(),
                        into.len()
                    )));
                }
                let into = (into.as_mut_ptr(), into.len());
                ((from.as_ptr().cast_mut(), from.len()), Some(Some(into)))
            }
        };
        let bytes = from.1;
        if into.is_none() && receives(me) {
            return Err(CollError::InvalidArgument(
                "a rank that receives the result needs a writable vector".into(),
            ));
        }
        if elem == 0 || !bytes.is_multiple_of(elem) || elem > self.chunk {
            return Err(CollError::InvalidArgument(format!(
                "{bytes} bytes are not whole {elem}-byte elements"
            )));
        }
        let count = bytes / elem;
        let chunk = self.chunk / elem;
        let rounds = (0..n)
            .map(|o| segment(count, n, o).1.div_ceil(chunk))
            .max()
            .unwrap_or(0);
        // The chunk of owner `o`'s segment in round `q`: byte offset and length in the vector.
        let piece = |o: usize, q: usize| -> Option<(usize, usize)> {
            let (start, len) = segment(count, n, o);
            (q * chunk < len).then(|| {
                (
                    (start + q * chunk) * elem,
                    chunk.min(len - q * chunk) * elem,
                )
            })
        };
        // The contribution (and the result's buffer) are borrowed for the whole call (the
        // result's mutably) and only reached through these regions from here on: reads by
        // the puts out of them, which complete before they are dropped, and the combining and
        // copies into the result's buffer below. Their keys are never given to a peer, so
        // nothing else writes them.
        // SAFETY: as just said; `from` is the borrowed contribution.
        let src = unsafe { w.fabric().register_memory(from.0, from.1)? };
        let dst = match into {
            None => None,
            Some(None) => Some(src.clone()),
            // SAFETY: as above; `into` is the borrowed result buffer.
            Some(Some((ptr, len))) => Some(unsafe { w.fabric().register_memory(ptr, len)? }),
        };
        let vector = Vector {
            src: &src,
            dst: dst.as_ref(),
            apart: matches!(into, Some(Some(_))),
        };
        let result = (|| -> Result<()> {
            // 1. This rank's parts of the other owners' chunks, a round ahead: round `q + 1`'s
            // travel while round `q`'s reduced chunks do.
            let scatter = |sg: &mut Self, puts: &mut Puts, q: usize| -> Result<()> {
                for o in crate::tree::successors(me, n) {
                    if let Some((at, len)) = piece(o, q) {
                        sg.give(w, puts, Phase::Scatter, o, q % WINDOWS, &src, at, len)?;
                    }
                }
                Ok(())
            };
            if rounds > 0 {
                scatter(self, puts, 0)?;
            }
            for q in 0..rounds {
                let window = q % WINDOWS;
                // 2. This rank's own chunk, combined in ascending rank order.
                if let Some((at, len)) = piece(me, q) {
                    let folded = self.combine(w, puts, &vector, at, len, elem, window, reduce)?;
                    // 3. The reduced chunk to every rank that gathers it: from this rank's
                    // result if it receives the result too (then it is copied there first),
                    // else from where it was combined, which is released once those writes
                    // are done.
                    let (from, offset) = match (folded, vector.dst) {
                        (Folded::Mine, Some(dst)) => (dst, at),
                        (Folded::Area(slot), Some(dst)) => {
                            dst.copy_from(at, self.area.local(), slot, len)?;
                            self.release_fold(w, puts, window)?;
                            (dst, at)
                        }
                        (Folded::Area(slot), None) => (self.area.local(), slot),
                        (Folded::Mine, None) => unreachable!("no result buffer to fold into"),
                    };
                    let from = from.clone();
                    for r in crate::tree::successors(me, n).filter(|&r| receives(r)) {
                        self.give(w, puts, Phase::Gather, r, window, &from, offset, len)?;
                    }
                    if vector.dst.is_none() {
                        w.puts_done(puts.ct, puts.issued)?;
                        self.release_fold(w, puts, window)?;
                    }
                }
                if q + 1 < rounds {
                    scatter(self, puts, q + 1)?;
                }
                // 4. The other owners' reduced chunks, into place. No wait for this rank's
                // writes out of those bytes: an owner's reduced chunk includes this rank's
                // part, so that write was read before the owner could send it.
                if receives(me) {
                    // In the order the owners write to this rank.
                    for o in crate::tree::predecessors(me, n) {
                        if let Some((at, len)) = piece(o, q) {
                            let slot = self.take(w, Phase::Gather, o, window, len)?;
                            let dst = vector
                                .dst
                                .expect("a rank that receives has a result buffer");
                            dst.copy_from(at, self.area.local(), slot, len)?;
                            self.consumed(w, puts, Phase::Gather, o, window)?;
                        }
                    }
                }
            }
            Ok(())
        })();
        // Every write out of the vectors must be done before they are handed back.
        let done = w.puts_done(puts.ct, puts.issued);
        drop((src, dst));
        result.and(done)
    }

    /// Combines round `window`'s contributions to this rank's chunk at `at` (`len` bytes of
    /// `elem`-byte elements) in ascending rank order, `v0 op v1 op ...`, this rank's own in
    /// its place, and says where the result is. Rank 0 folds into its chunk of the result
    /// buffer (after copying its contribution there if that is a buffer of its own), or, if it
    /// receives no result, into its own (unused) scatter slot after a copy of its chunk;
    /// the others fold into rank 0's contribution where it arrived (its slot is acknowledged
    /// later, by [`release_fold`](ScatterGather::release_fold)).
    #[allow(clippy::too_many_arguments)]
    fn combine(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        vector: &Vector<'_>,
        at: usize,
        len: usize,
        elem: usize,
        window: usize,
        reduce: &Reducer<'_>,
    ) -> Result<Folded> {
        let me = w.rank() as usize;
        let area = self.area.local().clone();
        let src = vector.src;
        // Where the running result is: this rank's chunk of the result buffer, or `area` at
        // `into`.
        let into = match (me, vector.dst) {
            (0, Some(dst)) => {
                if vector.apart {
                    dst.copy_from(at, src, at, len)?;
                }
                None
            }
            (0, None) => {
                let own = self.slot(Phase::Scatter, 0, window) + self.chunk - len;
                area.copy_from(own, src, at, len)?;
                Some(own)
            }
            _ => Some(self.take(w, Phase::Scatter, 0, window, len)?),
        };
        // `reduce` needs its accumulator aligned for the elements: regions are 64-aligned,
        // slots 64-aligned within them, and data ends at the slot's chunk end (a multiple of
        // 64) after whole elements, so it is aligned to the elements' size's largest
        // power-of-two factor, which their alignment divides.
        debug_assert!(into.is_none_or(|o| {
            let address = self.area.flag(o) as *const _ as usize;
            address.is_multiple_of(1 << elem.trailing_zeros().min(6))
        }));
        // Rank 0's contribution is where the result starts.
        for r in 1..self.n {
            let slot = (r != me)
                .then(|| self.take(w, Phase::Scatter, r, window, len))
                .transpose()?;
            // A peer `r` wrote its slot and waits for the acknowledgement below before it
            // writes it again; rank 0's slot (`into`) is acknowledged only after the result
            // has left it; this rank's own chunk and own slot are not lent to any operation
            // meanwhile (only other ranks' parts and finished results are put).
            // SAFETY: so nothing else reads or writes these ranges while they are lent here.
            let folded = unsafe {
                match (into, slot) {
                    (None, Some(s)) => vector
                        .dst
                        .expect("rank 0 folds in place only into a result buffer")
                        .with_bytes_mut(at, len, |out| {
                            area.with_bytes(s, len, |part| reduce(out, part))
                        })?,
                    (Some(o), Some(s)) => area.with_bytes_mut(o, len, |out| {
                        area.with_bytes(s, len, |part| reduce(out, part))
                    })?,
                    (Some(o), None) => area.with_bytes_mut(o, len, |out| {
                        src.with_bytes(at, len, |part| reduce(out, part))
                    })?,
                    (None, None) => unreachable!("rank 0 does not fold itself in"),
                }
            };
            folded?;
            if slot.is_some() {
                self.consumed(w, puts, Phase::Scatter, r, window)?;
            }
        }
        Ok(into.map_or(Folded::Mine, Folded::Area))
    }

    /// Acknowledges rank 0's scatter slot of `window` once the result folded into it has
    /// left (rank 0 itself has nothing to acknowledge).
    fn release_fold(&mut self, w: &Waiter, puts: &mut Puts, window: usize) -> Result<()> {
        if w.rank() == 0 {
            return Ok(());
        }
        self.consumed(w, puts, Phase::Scatter, 0, window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_chunks_shrink_with_the_ranks_to_stay_within_their_budget() {
        let local = rdcoll_transport::local::create(1).unwrap().pop().unwrap();
        assert!(rdcoll_transport::Fabric::rndv_chunk_hint(&local).is_none());
        assert_eq!(chunk_for(2, &local), WIDE_CHUNK);
        assert_eq!(chunk_for(3, &local), CHUNK);
        let wide: Vec<usize> = [2, 8, 16, 32, 1000].map(wide_chunk).to_vec();
        assert_eq!(wide, [256 << 10, 256 << 10, 128 << 10, 64 << 10, 64 << 10]);
    }

    #[test]
    fn segments_tile_the_vector() {
        for count in [0, 1, 7, 100, 1001] {
            for n in 1..=9 {
                let mut next = 0;
                for r in 0..n {
                    let (s, l) = segment(count, n, r);
                    assert_eq!(s, next);
                    next += l;
                }
                assert_eq!(next, count);
            }
        }
    }
}

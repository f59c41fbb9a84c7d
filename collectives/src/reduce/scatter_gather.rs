//! Large vectors: reduce-scatter, then allgather (or gather, for a reduce), both bandwidth
//! optimal: each rank sends and receives `(n - 1) / n` of the vector in each phase, by RDMA
//! writes into registered staging slots, pipelined in chunks.
//!
//! Rank `o` owns segment `o` of the vector. Round `q` moves chunk `q` of every segment:
//! 1. every rank writes its part of chunk `q` of each other owner's segment into that owner's
//!    reduce-scatter slot for it;
//! 2. each owner combines the `n` contributions strictly as `v0 op v1 op ... op v(n-1)`
//!    (ascending ranks, whatever the arrival order: results are reproducible bit for bit),
//!    into its own buffer, acknowledging each slot as it is consumed;
//! 3. each owner writes the reduced chunk into every other rank's allgather slot for it (only
//!    the root's, for a reduce);
//! 4. each rank copies the chunks it receives into place and acknowledges them.
//!
//! Every slot has two windows (rounds alternate), so round `q + 1` is written while round `q`
//! is combined; a window is written again only once its previous contents were acknowledged
//! (one byte, the count of writes consumed, in the writer's area). No step waits for anything
//! of a later step, so no cycle of waits can form.

use std::sync::atomic::Ordering;

use rdcoll_offload::p2p::Context;
use rdcoll_transport::Rank;

use crate::area::Area;
use crate::error::{CollError, Result};
use crate::progress::Waiter;
use crate::reduce::op::Reducer;
use crate::Puts;

/// Bytes per chunk (rounded down to whole elements).
pub(crate) const CHUNK: usize = 64 << 10;
/// Rounds in flight per slot.
const WINDOWS: usize = 2;

/// Elements `[start, start + len)` of the vector that rank `r` of `n` owns.
pub(crate) fn segment(count: usize, n: usize, r: usize) -> (usize, usize) {
    let (base, extra) = (count / n, count % n);
    (r * base + r.min(extra), base + usize::from(r < extra))
}

/// Which kind of slot.
#[derive(Clone, Copy)]
enum Phase {
    Scatter = 0,
    Gather = 1,
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
    /// An aligned buffer for the running result of one chunk.
    scratch: Vec<u64>,
}

impl ScatterGather {
    /// Registers the slots (two phases, one per peer and window). Collective.
    pub(crate) fn new(w: &Waiter, context: Context) -> Result<ScatterGather> {
        let n = w.size();
        let stride = (CHUNK + 1).next_multiple_of(64);
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
            scratch: vec![0; CHUNK / 8],
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
        let data = self.slot(phase, me, window) + CHUNK - len;
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
        let flag = self.area.flag(slot + CHUNK);
        let want = (self.consumed[i] % 255) + 1;
        w.until(from as Rank, &|| flag.load(Ordering::Acquire) != 0)?;
        let got = flag.load(Ordering::Acquire);
        if got != want {
            return Err(CollError::Mismatch(format!(
                "rank {from}'s chunk carries {got}, expected {want}: the ranks' reductions are \
                 out of step (different lengths?)"
            )));
        }
        Ok(slot + CHUNK - len)
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
        self.area.flag(slot + CHUNK).store(0, Ordering::Release);
        self.consumed[i] = self.consumed[i].wrapping_add(1);
        let at = self
            .area
            .at(from as Rank, self.acks + self.index(phase, me, window));
        puts.notify(w, self.area.local(), at, self.consumed[i]);
        Ok(())
    }

    /// Reduces `acc` (this rank's contribution; `elem`-byte elements, aligned) across all
    /// ranks: afterwards every rank's `acc` holds the result (`root: None`), or the root's.
    pub(crate) fn reduce(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        acc: &mut [u8],
        elem: usize,
        reduce: &Reducer<'_>,
        root: Option<Rank>,
    ) -> Result<()> {
        let (me, n) = (w.rank() as usize, self.n);
        if elem == 0 || !acc.len().is_multiple_of(elem) || elem > CHUNK {
            return Err(CollError::InvalidArgument(format!(
                "{} bytes are not whole {elem}-byte elements",
                acc.len()
            )));
        }
        let count = acc.len() / elem;
        let chunk = CHUNK / elem;
        let rounds = (0..n)
            .map(|o| segment(count, n, o).1.div_ceil(chunk))
            .max()
            .unwrap_or(0);
        // The chunk of owner `o`'s segment in round `q`: byte offset and length in `acc`.
        let piece = |o: usize, q: usize| -> Option<(usize, usize)> {
            let (start, len) = segment(count, n, o);
            (q * chunk < len).then(|| {
                (
                    (start + q * chunk) * elem,
                    chunk.min(len - q * chunk) * elem,
                )
            })
        };
        let receives = |r: usize| root.is_none_or(|root| root as usize == r);
        // SAFETY: `acc` is borrowed mutably for the whole call and only reached through this
        // region from here on (reads by the puts out of it, which complete before it is
        // dropped, and the copies into it below); its key is never given to a peer.
        let mine = unsafe { w.fabric().register_memory(acc.as_mut_ptr(), acc.len())? };
        let result = (|| -> Result<()> {
            for q in 0..rounds {
                let window = q % WINDOWS;
                // 1. This rank's parts of the other owners' chunks.
                for o in (0..n).filter(|&o| o != me) {
                    if let Some((at, len)) = piece(o, q) {
                        self.give(w, puts, Phase::Scatter, o, window, &mine, at, len)?;
                    }
                }
                // 2. This rank's own chunk, combined in ascending rank order.
                if let Some((at, len)) = piece(me, q) {
                    self.combine(w, puts, &mine, at, len, window, reduce)?;
                    // 3. The reduced chunk to every rank that gathers it.
                    for r in (0..n).filter(|&r| r != me && receives(r)) {
                        self.give(w, puts, Phase::Gather, r, window, &mine, at, len)?;
                    }
                }
                // 4. The other owners' reduced chunks, into place.
                if receives(me) {
                    for o in (0..n).filter(|&o| o != me) {
                        if let Some((at, len)) = piece(o, q) {
                            let slot = self.take(w, Phase::Gather, o, window, len)?;
                            // Writes from this rank's part of chunk `q` must be done before
                            // it is overwritten.
                            w.puts_done(puts.ct, puts.issued)?;
                            mine.copy_from(at, self.area.local(), slot, len)?;
                            self.consumed(w, puts, Phase::Gather, o, window)?;
                        }
                    }
                }
            }
            Ok(())
        })();
        // Every write out of `acc` must be done before it is handed back.
        let done = w.puts_done(puts.ct, puts.issued);
        drop(mine);
        result.and(done)
    }

    /// Combines round `window`'s contributions to this rank's chunk at `at` (`len` bytes) in
    /// ascending rank order, `v0 op v1 op ...`, this rank's own in its place, and leaves the
    /// result in `mine`. Rank 0 folds straight into its own chunk; the others start from
    /// rank 0's contribution in an aligned buffer and copy the result in at the end.
    #[allow(clippy::too_many_arguments)]
    fn combine(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        mine: &rdcoll_transport::Region,
        at: usize,
        len: usize,
        window: usize,
        reduce: &Reducer<'_>,
    ) -> Result<()> {
        let me = w.rank() as usize;
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = (|| -> Result<()> {
            let acc = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut scratch)[..len];
            for r in 0..self.n {
                let slot = if r == me {
                    None
                } else {
                    Some(self.take(w, Phase::Scatter, r, window, len)?)
                };
                match (me, r, slot) {
                    // Rank 0: its own chunk is the running result.
                    (0, 0, _) => {}
                    (0, _, Some(slot)) => {
                        let area = self.area.local();
                        // SAFETY: `r` wrote this slot and waits for the acknowledgement below
                        // before it writes it again; this rank's own chunk is not lent to any
                        // operation (only other ranks' parts and finished results are put).
                        unsafe {
                            mine.with_bytes_mut(at, len, |out| {
                                area.with_bytes(slot, len, |part| reduce(out, part))
                            })
                        }??;
                    }
                    (_, 0, Some(slot)) => self.area.local().read(slot, acc)?,
                    // SAFETY: as above, for this rank's own chunk (read only).
                    (_, _, None) => unsafe { mine.with_bytes(at, len, |part| reduce(acc, part)) }?,
                    // SAFETY: as above, for `r`'s slot.
                    (_, _, Some(slot)) => unsafe {
                        self.area
                            .local()
                            .with_bytes(slot, len, |part| reduce(acc, part))
                    }?,
                }
                if slot.is_some() {
                    self.consumed(w, puts, Phase::Scatter, r, window)?;
                }
            }
            if me != 0 {
                mine.write(at, acc)?;
            }
            Ok(())
        })();
        self.scratch = scratch;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

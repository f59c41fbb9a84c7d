//! The allreduce of degree `n - 1` without its broadcast: every rank writes its vector into
//! every other rank's slot for it, and every rank combines all `n` in ascending rank order,
//! `v0 op v1 op ... op v(n-1)` - the order of the degree-(n-1) tree, so the result is the same
//! bits as that tree's, on every rank. One step instead of two (reduce, then broadcast): the
//! model's choice for small vectors on few ranks.
//!
//! Slots come in two sets used by alternate operations, and every operation involves every
//! rank, so a slot is never written again before it was read: a rank that starts operation
//! `i + 2` has received everyone's operation-`i + 1` data, which each rank sent only after it
//! had finished operation `i` (paper 004, Section 4.2.4: the next operation starts only after
//! everyone has the previous result).

use std::sync::atomic::Ordering;

use rdcoll_offload::p2p::Context;
use rdcoll_transport::Rank;

use crate::area::Area;
use crate::error::{CollError, Result};
use crate::progress::Waiter;
use crate::reduce::op::Reducer;
use crate::Puts;

mod pairs;
pub(crate) use pairs::PairOp;

/// Bytes after a slot's data: its length (4), the operation's kind (1), padding (2), the
/// counter byte (1).
const TRAILER: usize = 8;

/// What an exchange is for, carried beside each contribution: ranks that run different
/// collectives through the slots get an error instead of each other's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Allreduce = 1,
    Allgather,
    Alltoall,
    ReduceScatter,
    /// The comparison of the ranks' calls (`RDCOLL_CHECK_COLLECTIVES`).
    Agreement,
    /// A pair exchange (`alltoallv`): each rank's own block for each other rank.
    Pairs,
}

/// One communicator's exchange slots.
pub(crate) struct Exchange {
    area: Area,
    stride: usize,
    n: usize,
    count: u64,
    /// For each set, the writes issued when it was last written from (a backend whose puts
    /// complete later must be done with them before the slot is written again).
    issued: [u64; 2],
    /// The pair exchange's outgoing slots (after the two sets): one per rank, of this stride.
    pair_stride: usize,
    /// The writes issued when the outgoing slots were last written from.
    pairs_issued: u64,
}

impl Exchange {
    /// Registers two sets of `n` slots of `cap` bytes, and the pair exchange's `n` outgoing
    /// slots. Collective.
    pub(crate) fn new(w: &Waiter, context: Context, cap: usize) -> Result<Exchange> {
        let n = w.size();
        let stride = (cap + TRAILER).next_multiple_of(64);
        let pair_stride = (pairs::PAIR_MAX.min(cap) + TRAILER).next_multiple_of(64);
        Ok(Exchange {
            area: Area::new(w, context, n * (2 * stride + pair_stride))?,
            stride,
            n,
            count: 0,
            issued: [0; 2],
            pair_stride,
            pairs_issued: 0,
        })
    }

    /// The largest vector, in bytes, the slots take.
    pub(crate) fn capacity(&self) -> usize {
        self.stride - TRAILER
    }

    /// Lays out `data` and its trailer (length, kind) at `at` of this rank's area, as a write
    /// of `data.len() + TRAILER - 1` bytes from there carries them (the write adds the counter
    /// byte as its flag).
    ///
    /// # Safety
    /// No peer writes those bytes, and no write out of them is in flight.
    unsafe fn stage(&self, at: usize, data: &[u8], kind: Kind) -> Result<()> {
        let m = data.len();
        // SAFETY: passed on from the caller.
        unsafe {
            self.area
                .local()
                .with_bytes_mut(at, m + TRAILER - 1, |out| {
                    out[..m].copy_from_slice(data);
                    out[m..m + 4].copy_from_slice(&(m as u32).to_le_bytes());
                    out[m + 4] = kind as u8;
                })
        }?;
        Ok(())
    }

    /// Where rank `from`'s data of `m` bytes and its trailer sit in slot set `set`.
    fn place(&self, set: usize, from: usize, m: usize) -> (usize, usize) {
        let trailer = (set * self.n + from) * self.stride + self.stride - TRAILER;
        (trailer - m, trailer)
    }

    /// Every rank's `acc` combined in ascending rank order, into every rank's `acc`. Written
    /// out rather than through `exchange`: this is the small allreduce's latency path.
    pub(crate) fn allreduce(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        acc: &mut [u8],
        reduce: &Reducer<'_>,
    ) -> Result<()> {
        let me = w.rank() as usize;
        let m = acc.len();
        if m > self.capacity() {
            return Err(CollError::InvalidArgument(format!(
                "{m} bytes exceed the {}-byte exchange slots",
                self.capacity()
            )));
        }
        let set = (self.count % 2) as usize;
        self.count += 1;
        let counter = ((self.count - 1) % 255) as u8 + 1;
        // This rank's contribution, laid out in its own slot (nobody else writes it): the
        // source of its writes, and its operand at its own place in the order.
        let (data, _) = self.place(set, me, m);
        let local = self.area.local();
        if puts.issued > 0 {
            w.puts_done(puts.ct, self.issued[set])?;
        }
        // SAFETY: this rank's own slot: only this rank writes it, and no write out of it is
        // in flight (the last one of this set is complete, just above).
        unsafe { self.stage(data, acc, Kind::Allreduce) }?;
        for r in crate::tree::successors(me, self.n) {
            puts.put(
                w,
                local,
                data,
                m + TRAILER - 1,
                self.area.at(r as Rank, data),
                Some(counter),
            )?;
        }
        self.issued[set] = puts.issued;
        // Waited for in the order the peers write to this rank, then combined in rank order.
        for r in crate::tree::predecessors(me, self.n) {
            let (_, trailer) = self.place(set, r, m);
            self.arrived_exact(w, r, trailer, counter, m)?;
        }
        for r in 0..self.n {
            let (at, trailer) = self.place(set, r, m);
            // SAFETY: slot `r` of this set is not written again before this rank has finished
            // this operation (see the module's comment), and this rank's own slot is written
            // only by this rank.
            unsafe {
                local.with_bytes(at, m, |part| {
                    if r == 0 {
                        acc.copy_from_slice(part);
                    } else {
                        reduce(acc, part);
                    }
                })
            }?;
            if r != me {
                self.area
                    .flag(trailer + TRAILER - 1)
                    .store(0, Ordering::Release);
            }
        }
        Ok(())
    }

    /// Every rank's `mine` (rank `r`'s `lens(r)` bytes, each within the slots' capacity)
    /// handed to `take(r, bytes)` in ascending rank order, on every rank (an allgather). A
    /// rank whose data is not as long as expected is skipped and reported as the inner
    /// `Mismatch` once every other rank's data has been taken: the slots stay in step, so the
    /// communicator stays usable; the outer error is one that leaves them out of step.
    pub(crate) fn exchange(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        kind: Kind,
        mine: &[u8],
        lens: &dyn Fn(usize) -> usize,
        take: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<Result<()>> {
        let op = self.publish(w, puts, kind, mine, lens)?;
        self.collect(w, op, lens, take)
    }

    /// Writes `mine` into every other rank's slot for this rank; the operation's slot set,
    /// counter and this rank's length.
    #[inline]
    fn publish(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        kind: Kind,
        mine: &[u8],
        lens: impl Fn(usize) -> usize,
    ) -> Result<(usize, u8, usize, Kind)> {
        let me = w.rank() as usize;
        let m = mine.len();
        if let Some(r) = (0..self.n).find(|&r| lens(r) > self.capacity()) {
            return Err(CollError::InvalidArgument(format!(
                "rank {r}'s {} bytes exceed the {}-byte exchange slots",
                lens(r),
                self.capacity()
            )));
        }
        let set = (self.count % 2) as usize;
        self.count += 1;
        let counter = ((self.count - 1) % 255) as u8 + 1;
        // This rank's contribution, laid out in its own slot (nobody else writes it): the
        // source of its writes, and its operand at its own place in the order.
        let (data, _) = self.place(set, me, m);
        let local = self.area.local();
        if puts.issued > 0 {
            w.puts_done(puts.ct, self.issued[set])?;
        }
        // SAFETY: this rank's own slot: only this rank writes it, and no write out of it is
        // in flight (the last one of this set is complete, just above).
        unsafe { self.stage(data, mine, kind) }?;
        for r in crate::tree::successors(me, self.n) {
            puts.put(
                w,
                local,
                data,
                m + TRAILER - 1,
                self.area.at(r as Rank, data),
                Some(counter),
            )?;
        }
        self.issued[set] = puts.issued;
        Ok((set, counter, m, kind))
    }

    /// Hands every rank's data of operation `(set, counter)` to `take`, in rank order, as it
    /// arrives.
    #[inline]
    fn collect(
        &self,
        w: &Waiter,
        (set, counter, m, kind): (usize, u8, usize, Kind),
        lens: impl Fn(usize) -> usize,
        mut take: impl FnMut(usize, &[u8]),
    ) -> Result<Result<()>> {
        let me = w.rank() as usize;
        let local = self.area.local();
        let mut mismatch = None;
        // Waited for in the order the peers write to this rank, then handed on in rank order.
        let mut got = vec![m; self.n];
        for r in crate::tree::predecessors(me, self.n) {
            let (_, trailer) = self.place(set, r, lens(r));
            got[r] = self.arrived(w, r, trailer, counter, kind)?;
        }
        for r in 0..self.n {
            let (at, trailer) = self.place(set, r, lens(r));
            // This rank's own data was published with its true length: the others see a
            // mismatch too.
            let got = got[r];
            if got == lens(r) {
                // SAFETY: slot `r` of this set is not written again before this rank has
                // finished this operation (see the module's comment), and this rank's own slot
                // is written only by this rank.
                unsafe { local.with_bytes(at, lens(r), |part| take(r, part)) }?;
            } else if mismatch.is_none() {
                mismatch = Some(CollError::Mismatch(format!(
                    "rank {r} contributed {got} bytes where {} were expected",
                    lens(r)
                )));
            }
            if r != me {
                self.area
                    .flag(trailer + TRAILER - 1)
                    .store(0, Ordering::Release);
            }
        }
        Ok(mismatch.map_or(Ok(()), Err))
    }

    /// Waits for rank `from`'s contribution (operation `counter`); its length.
    fn arrived(
        &self,
        w: &Waiter,
        from: usize,
        trailer: usize,
        counter: u8,
        kind: Kind,
    ) -> Result<usize> {
        let flag = self.area.flag(trailer + TRAILER - 1);
        w.until(from as Rank, &|| flag.load(Ordering::Acquire) != 0)?;
        let got = flag.load(Ordering::Acquire);
        if got != counter {
            return Err(CollError::Mismatch(format!(
                "rank {from}'s contribution carries operation {got}, expected {counter}: the \
                 ranks' allreduces are out of step"
            )));
        }
        let mut head = [0u8; 5];
        // SAFETY: `from` wrote the trailer before the flag and writes it again only in the
        // operation after next.
        unsafe {
            self.area
                .local()
                .with_bytes(trailer, 5, |b| head.copy_from_slice(b))
        }?;
        if head[4] != kind as u8 {
            return Err(CollError::Mismatch(format!(
                "rank {from} ran another collective ({}) where this rank runs {kind:?}: the \
                 ranks' collectives are out of step",
                head[4]
            )));
        }
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > self.capacity() {
            return Err(CollError::Mismatch(format!(
                "rank {from}'s contribution says {len} bytes, more than the {}-byte slots \
                 (different settings?)",
                self.capacity()
            )));
        }
        Ok(len)
    }

    /// Waits for rank `from`'s contribution (operation `counter`) and checks its length.
    fn arrived_exact(
        &self,
        w: &Waiter,
        from: usize,
        trailer: usize,
        counter: u8,
        m: usize,
    ) -> Result<()> {
        let flag = self.area.flag(trailer + TRAILER - 1);
        w.until(from as Rank, &|| flag.load(Ordering::Acquire) != 0)?;
        let got = flag.load(Ordering::Acquire);
        if got != counter {
            return Err(CollError::Mismatch(format!(
                "rank {from}'s contribution carries operation {got}, expected {counter}: the \
                 ranks' allreduces are out of step"
            )));
        }
        let mut len = [0u8; 4];
        // SAFETY: `from` wrote the trailer before the flag and writes it again only in the
        // operation after next.
        unsafe {
            self.area
                .local()
                .with_bytes(trailer, 4, |b| len.copy_from_slice(b))
        }?;
        let len = u32::from_le_bytes(len) as usize;
        if len != m {
            return Err(CollError::Mismatch(format!(
                "rank {from} contributed {len} bytes, this rank {m}"
            )));
        }
        Ok(())
    }
}

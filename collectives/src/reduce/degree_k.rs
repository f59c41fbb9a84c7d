//! Degree-k tree reduce with RDMA writes (paper 004, Section 4.2).
//!
//! The tree: in step `s` the nodes still holding a partial result (ids that are multiples of
//! `(k+1)^s`, ids relative to the root) form groups of `k + 1` consecutive ones; the first of
//! each group receives from the other (at most `k`) and combines them in ascending id order
//! after its own; the others are done. `k = 1` is the binomial tree; `k = n - 1` is one step.
//!
//! The transfer: every rank registers one slot per rank; a sender RDMA-writes its partial
//! result into the slot named by its own id at the receiver, bottom-filled, followed by an
//! 8-byte trailer (its length, and last the operation's counter byte, written after the data).
//! The receiver waits for the counter, checks the length (ranks that passed different lengths
//! are told so), combines, resets the counter byte, and acknowledges with one byte in the
//! sender's acknowledgement area: a sender writes to a receiver again only after its previous
//! write there was consumed (the paper relies on the allreduce's broadcast for this; a reduce
//! has no broadcast to wait for).
//!
//! Because the combination order is fixed by the ids and the tree, never by arrival, a
//! floating-point result is bitwise the same in every run and on every rank.

use std::sync::atomic::Ordering;

use rdcoll_offload::p2p::Context;
use rdcoll_transport::Rank;

use crate::area::Area;
use crate::error::{CollError, Result};
use crate::progress::Waiter;
use crate::reduce::op::Reducer;
use crate::tree;
use crate::Puts;

mod prefix;

/// Bytes after a slot's data: its length (4), padding (3), the counter byte (1).
const TRAILER: usize = 8;

/// What a node does at one step of the degree-k tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Combines what these nodes send, in this (ascending) order.
    Receive(Vec<usize>),
    /// Sends its partial result to this node; it is then done.
    Send(usize),
}

/// The degree-`k` reduce tree over `n` nodes (node 0 ends with the result).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DegreeK {
    n: usize,
    k: usize,
}

impl DegreeK {
    /// For `n` nodes (at least 1) and degree `k` (at least 1).
    pub fn new(n: usize, k: usize) -> DegreeK {
        DegreeK {
            n: n.max(1),
            k: k.max(1),
        }
    }

    /// The degree.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Steps until node 0 has everything: the least `s` with `(k+1)^s >= n`.
    pub fn steps(&self) -> usize {
        let mut span = 1usize;
        let mut s = 0;
        while span < self.n {
            span = span.saturating_mul(self.k + 1);
            s += 1;
        }
        s
    }

    /// What `node` does at `step`; `None` when it has nothing to do (already sent, or a
    /// receiver whose group is empty).
    pub fn role(&self, node: usize, step: usize) -> Option<Role> {
        let stride = (self.k + 1).checked_pow(step as u32)?;
        let group = stride.saturating_mul(self.k + 1);
        if node >= self.n || !node.is_multiple_of(stride) {
            return None;
        }
        if !node.is_multiple_of(group) {
            return Some(Role::Send(node - node % group));
        }
        let from: Vec<usize> = (1..=self.k)
            .map_while(|j| node.checked_add(j * stride))
            .filter(|&f| f < self.n)
            .collect();
        (!from.is_empty()).then_some(Role::Receive(from))
    }
}

/// The degrees the model may choose for `n` ranks: `2^j - 1` up to `n - 1`, and `n - 1`.
pub fn degrees(n: usize) -> impl Iterator<Item = usize> {
    let top = n.saturating_sub(1).max(1);
    let powers = (1..usize::BITS)
        .map(|j| (1usize << j) - 1)
        .take_while(move |&k| k <= top);
    // `n - 1` itself unless it is already one of them.
    let extra = (!(top + 1).is_power_of_two()).then_some(top);
    powers.chain(extra)
}

/// One communicator's degree-k slots.
pub(crate) struct DegreeKSlots {
    area: Area,
    /// Bytes per slot (the largest vector plus the trailer, rounded to 64).
    stride: usize,
    /// Offset of the acknowledgement bytes (one per rank).
    acks: usize,
    /// Writes this rank made to each rank, and their consumptions it acknowledged for each.
    written: Vec<u8>,
    consumed: Vec<u8>,
    /// The ranks this rank's own slot was last written out to: it is staged again only once
    /// they have consumed those writes (so the writes have landed; on a fabric whose writes
    /// complete later they may read the slot until then).
    own_out: Vec<Rank>,
    /// Operations so far (the counter byte is derived from it).
    count: u64,
}

impl DegreeKSlots {
    /// Registers `n` slots of `cap` bytes of data. Collective.
    pub(crate) fn new(w: &Waiter, context: Context, cap: usize) -> Result<DegreeKSlots> {
        let n = w.size();
        let stride = (cap + TRAILER).next_multiple_of(64);
        let acks = n * stride;
        let area = Area::new(w, context, acks + n)?;
        Ok(DegreeKSlots {
            area,
            stride,
            acks,
            written: vec![0; n],
            consumed: vec![0; n],
            own_out: Vec::new(),
            count: 0,
        })
    }

    /// The largest vector, in bytes, the slots take.
    pub(crate) fn capacity(&self) -> usize {
        self.stride - TRAILER
    }

    /// Reduces `acc` (this rank's contribution, aligned for the element type) over the
    /// degree-`k` tree rooted at `root`: afterwards the root's `acc` holds the result.
    pub(crate) fn reduce(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        acc: &mut [u8],
        reduce: &Reducer<'_>,
        k: usize,
        root: Rank,
    ) -> Result<()> {
        let (me, n) = (w.rank() as usize, w.size());
        let m = acc.len();
        if m > self.capacity() {
            return Err(CollError::InvalidArgument(format!(
                "{m} bytes exceed the {}-byte reduction slots",
                self.capacity()
            )));
        }
        let counter = self.next_counter();
        let tree = DegreeK::new(n, k);
        let rel = tree::relative(me, root as usize, n);
        let abs = |r: usize| tree::absolute(r, root as usize, n) as Rank;
        for step in 0..tree.steps() {
            match tree.role(rel, step) {
                None => {}
                Some(Role::Receive(from)) => {
                    for f in from {
                        let len = self.take(w, abs(f), counter)?;
                        if len != m {
                            return Err(CollError::Mismatch(format!(
                                "rank {} contributed {len} bytes, this rank {m}",
                                abs(f)
                            )));
                        }
                        let (data, _) = self.place(abs(f), m);
                        // SAFETY: the sender writes this slot again only after the
                        // acknowledgement `release` sends once the data has been used.
                        unsafe {
                            self.area
                                .local()
                                .with_bytes(data, m, |part| reduce(acc, part))
                        }?;
                        self.release(w, puts, abs(f), m);
                    }
                }
                Some(Role::Send(to)) => {
                    self.give(w, puts, abs(to), counter, acc, w.rank())?;
                    break;
                }
            }
        }
        Ok(())
    }

    /// Moves `acc` from rank `from` into rank `to`'s `acc` through the slots: one write.
    /// Collective (every rank counts every operation); a length that differs at `to` is the
    /// inner `Mismatch`.
    pub(crate) fn forward(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        acc: &mut [u8],
        from: Rank,
        to: Rank,
    ) -> Result<Result<()>> {
        self.check_fits(acc.len())?;
        let counter = self.next_counter();
        let me = w.rank();
        if me == from && me != to {
            self.give(w, puts, to, counter, acc, me)?;
        } else if me == to && me != from {
            return self.take_into(w, puts, from, counter, acc);
        }
        Ok(Ok(()))
    }

    /// A gather of blocks of `m` bytes through the slots (the degree-(n-1) tree's shape):
    /// every other rank writes `mine` into its slot at `root`, once `root` has acknowledged
    /// its previous write, and returns; `root` copies rank `r`'s block into `out[r]` in rank
    /// order (its own from `mine`). Collective.
    pub(crate) fn gather(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        mine: &[u8],
        out: Option<&mut [u8]>,
        root: Rank,
    ) -> Result<Result<()>> {
        let (me, n, m) = (w.rank(), w.size(), mine.len());
        self.check_fits(m)?;
        let counter = self.next_counter();
        let Some(out) = out else {
            return self.give(w, puts, root, counter, mine, me).map(Ok);
        };
        let mut result = Ok(());
        for r in 0..n as Rank {
            let block = &mut out[r as usize * m..(r as usize + 1) * m];
            if r == me {
                block.copy_from_slice(mine);
                continue;
            }
            let got = self.take_into(w, puts, r, counter, block)?;
            result = result.and(got);
        }
        Ok(result)
    }

    /// A scatter of blocks of `m` bytes through the slots: `root` writes block `r` of `send`
    /// into its slot at every rank `r` (staged in its own slot `r`, which nobody writes while
    /// this operation lasts), each once that rank has acknowledged the previous write; every
    /// other rank copies its block into `recv` and acknowledges it. Collective.
    pub(crate) fn scatter(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        send: Option<&[u8]>,
        recv: &mut [u8],
        root: Rank,
    ) -> Result<Result<()>> {
        let (me, n, m) = (w.rank(), w.size(), recv.len());
        self.check_fits(m)?;
        let counter = self.next_counter();
        let Some(send) = send else {
            return self.take_into(w, puts, root, counter, recv);
        };
        // A send buffer of another length than `n` blocks: every rank gets an empty block
        // (and a `Mismatch`), the root an error.
        let whole = send.len() == n * m;
        for i in 1..n {
            let r = ((me as usize + i) % n) as Rank;
            let block = match whole {
                true => &send[r as usize * m..(r as usize + 1) * m],
                false => &[],
            };
            self.give(w, puts, r, counter, block, r)?;
        }
        if !whole {
            return Ok(Err(CollError::InvalidArgument(format!(
                "the root's send buffer has {} bytes, not {n} blocks of {m}",
                send.len()
            ))));
        }
        recv.copy_from_slice(&send[me as usize * m..(me as usize + 1) * m]);
        Ok(Ok(()))
    }

    fn check_fits(&self, m: usize) -> Result<()> {
        if m > self.capacity() {
            return Err(CollError::InvalidArgument(format!(
                "{m} bytes exceed the {}-byte reduction slots",
                self.capacity()
            )));
        }
        Ok(())
    }

    /// The next operation's counter byte (every rank counts every operation).
    fn next_counter(&mut self) -> u8 {
        self.count += 1;
        ((self.count - 1) % 255) as u8 + 1
    }

    /// Where `sender`'s data of `m` bytes sits in a slot, and where its trailer starts.
    fn place(&self, sender: Rank, m: usize) -> (usize, usize) {
        let trailer = sender as usize * self.stride + self.stride - TRAILER;
        (trailer - m, trailer)
    }

    /// Waits for `from`'s data of operation `counter`; returns its length (it sits at
    /// `place(from, len)`). [`release`](DegreeKSlots::release) the slot once it has been used.
    fn take(&self, w: &Waiter, from: Rank, counter: u8) -> Result<usize> {
        let (_, trailer) = self.place(from, 0);
        let flag = self.area.flag(trailer + TRAILER - 1);
        w.until(from, &|| flag.load(Ordering::Acquire) != 0)?;
        let got = flag.load(Ordering::Acquire);
        if got != counter {
            return Err(CollError::Mismatch(format!(
                "rank {from}'s contribution carries operation {got}, expected {counter}: the \
                 ranks' reductions are out of step"
            )));
        }
        let mut len = [0u8; 4];
        self.area.local().read(trailer, &mut len)?;
        Ok(u32::from_le_bytes(len) as usize)
    }

    /// Copies `from`'s data of operation `counter` into `into` if it is as long, and releases
    /// the slot either way: another length is the inner `Mismatch` (the slots stay in step).
    fn take_into(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        from: Rank,
        counter: u8,
        into: &mut [u8],
    ) -> Result<Result<()>> {
        let m = into.len();
        let len = self.take(w, from, counter)?;
        let got = if len == m {
            let (data, _) = self.place(from, m);
            // SAFETY: `from` writes this slot again only after `release` acknowledges it.
            unsafe {
                self.area
                    .local()
                    .with_bytes(data, m, |part| into.copy_from_slice(part))
            }?;
            Ok(())
        } else {
            Err(CollError::Mismatch(format!(
                "rank {from} sent {len} bytes where {m} were expected"
            )))
        };
        self.release(w, puts, from, len);
        Ok(got)
    }

    /// Empties `from`'s slot and tells `from` it may write there again.
    fn release(&mut self, w: &Waiter, puts: &mut Puts, from: Rank, m: usize) {
        let (_, trailer) = self.place(from, m);
        self.area
            .flag(trailer + TRAILER - 1)
            .store(0, Ordering::Release);
        // The count of consumed writes, mod 256 (at most one is ever unacknowledged).
        let c = &mut self.consumed[from as usize];
        *c = c.wrapping_add(1);
        let me = w.rank() as usize;
        let at = self.area.at(from, self.acks + me);
        puts.notify(w, self.area.local(), at, *c);
    }

    /// Writes `acc` into `to`'s slot for this rank (operation `counter`), once `to` has
    /// consumed the previous one, staged in this rank's own slot `stage` (its own, which
    /// nobody else writes, or one whose writer writes nothing while this operation lasts).
    fn give(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        to: Rank,
        counter: u8,
        acc: &[u8],
        stage: Rank,
    ) -> Result<()> {
        let before = self.written[to as usize];
        let ack = self.area.flag(self.acks + to as usize);
        // At most one write is ever unacknowledged, so the byte comparison is exact.
        w.until(to, &|| ack.load(Ordering::Acquire) == before)?;
        let me = w.rank();
        if stage == me {
            self.await_own_slot(w)?;
        }
        // Laid out as the target's slot for this rank.
        let (source, trailer) = self.place(stage, acc.len());
        let (data, _) = self.place(me, acc.len());
        let local = self.area.local();
        local.write(source, acc)?;
        local.write(trailer, &(acc.len() as u32).to_le_bytes())?;
        let span = acc.len() + TRAILER - 1;
        puts.put(
            w,
            local,
            source,
            span,
            self.area.at(to, data),
            Some(counter),
        )?;
        self.written[to as usize] = before.wrapping_add(1);
        if stage == me {
            // Reusing the list's room: this is every small reduction's path.
            self.own_out.clear();
            self.own_out.push(to);
        }
        Ok(())
    }

    /// Waits until every rank this rank's own slot was last written out to has consumed
    /// what this rank wrote it (before the slot is staged again).
    fn await_own_slot(&self, w: &Waiter) -> Result<()> {
        for &to in &self.own_out {
            let written = self.written[to as usize];
            let ack = self.area.flag(self.acks + to as usize);
            w.until(to, &|| ack.load(Ordering::Acquire) == written)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles(t: &DegreeK, step: usize) -> Vec<(usize, Role)> {
        (0..t.n)
            .filter_map(|node| t.role(node, step).map(|r| (node, r)))
            .collect()
    }

    /// Paper 004 Figure 3 (a): degree-1 on 4 nodes. "In the first step P1 and P3 send data to
    /// P0 and P2 respectively ... The computed result is forwarded by P2 to P0."
    #[test]
    fn degree_one_on_four_nodes_is_the_papers() {
        let t = DegreeK::new(4, 1);
        assert_eq!(t.steps(), 2);
        assert_eq!(
            roles(&t, 0),
            vec![
                (0, Role::Receive(vec![1])),
                (1, Role::Send(0)),
                (2, Role::Receive(vec![3])),
                (3, Role::Send(2)),
            ]
        );
        assert_eq!(
            roles(&t, 1),
            vec![(0, Role::Receive(vec![2])), (2, Role::Send(0))]
        );
    }

    /// Figure 3 (b): degree-3 on 4 nodes, one step: "P0 waits for P1, P2 and P3".
    #[test]
    fn degree_three_on_four_nodes_is_one_step() {
        let t = DegreeK::new(4, 3);
        assert_eq!(t.steps(), 1);
        assert_eq!(roles(&t, 0)[0], (0, Role::Receive(vec![1, 2, 3])));
    }

    /// Figure 4: degree-3 on 32 nodes takes three steps; nobody receives from more than 3.
    #[test]
    fn degree_three_on_thirty_two_nodes() {
        let t = DegreeK::new(32, 3);
        assert_eq!(t.steps(), 3);
        assert_eq!(roles(&t, 1)[0], (0, Role::Receive(vec![4, 8, 12])));
        assert!(roles(&t, 1).contains(&(16, Role::Receive(vec![20, 24, 28]))));
        assert_eq!(
            roles(&t, 2),
            vec![(0, Role::Receive(vec![16])), (16, Role::Send(0))]
        );
    }

    /// Every node's contribution reaches node 0 exactly once, through receivers that are
    /// still live, for every size and degree (non-powers of two included).
    #[test]
    #[allow(clippy::needless_range_loop)]
    fn every_tree_is_sound() {
        for n in 1..=70 {
            for k in degrees(n).collect::<Vec<_>>() {
                let t = DegreeK::new(n, k);
                // covered[x] = nodes whose data x holds; done[x] = x has sent.
                let mut covered: Vec<Vec<usize>> = (0..n).map(|x| vec![x]).collect();
                let mut done = vec![false; n];
                for step in 0..t.steps() {
                    let mut moves = Vec::new();
                    for node in 0..n {
                        match t.role(node, step) {
                            Some(Role::Receive(from)) => {
                                assert!(from.len() <= k, "n={n} k={k}: too many senders");
                                assert!(from.windows(2).all(|w| w[0] < w[1]));
                                for f in from {
                                    assert_eq!(t.role(f, step), Some(Role::Send(node)));
                                    moves.push((f, node));
                                }
                            }
                            Some(Role::Send(to)) => assert!(!done[node] && to < node),
                            None => {}
                        }
                    }
                    for (f, to) in moves {
                        assert!(!done[f]);
                        done[f] = true;
                        let got = std::mem::take(&mut covered[f]);
                        covered[to].extend(got);
                    }
                }
                let mut all = covered[0].clone();
                all.sort();
                assert_eq!(all, (0..n).collect::<Vec<_>>(), "n={n} k={k}");
            }
        }
    }

    #[test]
    fn the_degrees_on_offer() {
        let d = |n| degrees(n).collect::<Vec<_>>();
        assert_eq!(d(1), vec![1]);
        assert_eq!(d(2), vec![1]);
        assert_eq!(d(8), vec![1, 3, 7]);
        assert_eq!(d(9), vec![1, 3, 7, 8]);
        assert_eq!(d(16), vec![1, 3, 7, 15]);
    }
}

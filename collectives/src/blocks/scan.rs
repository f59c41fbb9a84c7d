//! Inclusive and exclusive prefix reductions. Small vectors: each rank's to every rank above
//! it through the reduction slots, folded in rank order (`x0 op x1 op ... op x(me)`; see
//! `reduce::degree_k::prefix`). Larger ones
//! along the chain of ranks up to `CHAIN_MAX` ranks, beyond by recursive doubling (MPICH's
//! algorithm): in
//! step `s` each rank swaps the combination of its current window of `2^s` ranks with rank
//! `me ^ 2^s`, and folds what came from below into its result. `ceil(log2 n)` steps; the
//! bracketing depends only on the ranks' ids, so the result is the same in every run, and a
//! non-commutative operation sees its operands in rank order. A rank whose part fails (bad
//! arguments, a partner's wrong length) still takes every later step, with empty messages,
//! so that no partner waits for it.

use rdcoll_transport::Rank;

use super::{refuse, tag, Batch};
use crate::agreement::{Call, CallKind};
use crate::error::{CollError, Result};
use crate::reduce::op::Reducer;
use crate::Collectives;

/// The partners of rank `me` of `n`, step by step.
fn partners(me: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..usize::BITS)
        .map(|s| 1usize << s)
        .take_while(move |&mask| mask < n)
        .map(move |mask| me ^ mask)
        .filter(move |&p| p < n)
}

/// Up to this many ranks, large scans go along the chain of ranks (`n - 1` transfers one
/// after another, one combination each, no copies); beyond, by recursive doubling
/// (`log2 n` steps, each moving the whole vector both ways and combining twice).
const CHAIN_MAX: usize = 8;

impl Collectives {
    /// The chain: rank `r` receives the combination of ranks `0..r` from rank `r - 1` straight
    /// into `recv`, folds its own vector in (the received one on the left: rank order) and
    /// passes it on. A rank whose part failed (`checked`, or what came from the left) passes an
    /// empty message on, so the ranks after it fail too instead of waiting.
    fn chain(
        &self,
        send: &[u8],
        recv: &mut [u8],
        reduce: &Reducer<'_>,
        inclusive: bool,
        checked: Result<()>,
    ) -> Result<()> {
        let w = &self.waiter;
        let (me, n) = (w.rank() as usize, w.size());
        let mut result = checked;
        if me > 0 {
            // Received even by a rank whose own part failed: nothing stays queued.
            let mut scratch;
            let into: &mut [u8] = if result.is_ok() {
                recv
            } else {
                scratch = self.scratch.take(send.len());
                scratch.bytes_mut()
            };
            // Rank `me - 1` only waits for this rank to take its message.
            let mut batch = Batch::from_idle_senders(w, self.context);
            batch.recv(into, (me - 1) as Rank, tag::SCAN);
            result = result.and(batch.finish());
        }
        // What goes to the right: the combination of ranks `0..=me`.
        let mut staged = None;
        let onward: &[u8] = match (&result, inclusive, me) {
            (Err(_), _, _) => &[],
            (Ok(()), true, 0) => {
                recv.copy_from_slice(send);
                recv
            }
            (Ok(()), true, _) => {
                reduce(recv, send);
                recv
            }
            (Ok(()), false, 0) => send,
            (Ok(()), false, _) if me + 1 < n => {
                let mut t = self.scratch.take(send.len());
                t.bytes_mut().copy_from_slice(recv);
                reduce(t.bytes_mut(), send);
                staged.insert(t).bytes()
            }
            (Ok(()), false, _) => &[],
        };
        if me + 1 < n {
            let mut batch = Batch::new(w, self.context);
            batch.send(onward, (me + 1) as Rank, tag::SCAN);
            let sent = batch.finish();
            result = result.and(sent);
        }
        result
    }

    /// Rank `r`'s `recv` becomes `send(0) op send(1) op ... op send(r)`, element-wise.
    /// `recv` is aligned for the element type and as long as `send`.
    pub fn scan(
        &self,
        send: &[u8],
        recv: &mut [u8],
        elem: usize,
        reduce: &Reducer<'_>,
    ) -> Result<()> {
        self.agree(|| {
            Call::new(CallKind::Scan)
                .bytes(send.len())
                .reduction(elem, reduce)
        })?;
        self.prefix(send, recv, elem, reduce, true)
    }

    /// Rank `r > 0`'s `recv` becomes `send(0) op ... op send(r - 1)`; rank 0's is left as
    /// it was.
    pub fn exscan(
        &self,
        send: &[u8],
        recv: &mut [u8],
        elem: usize,
        reduce: &Reducer<'_>,
    ) -> Result<()> {
        self.agree(|| {
            Call::new(CallKind::Exscan)
                .bytes(send.len())
                .reduction(elem, reduce)
        })?;
        self.prefix(send, recv, elem, reduce, false)
    }

    fn prefix(
        &self,
        send: &[u8],
        recv: &mut [u8],
        elem: usize,
        reduce: &Reducer<'_>,
        inclusive: bool,
    ) -> Result<()> {
        let w = &self.waiter;
        let (me, n) = (w.rank() as usize, w.size());
        let m = send.len();
        let valid = send.len() == recv.len() && elem > 0 && m.is_multiple_of(elem);
        if self.usable().is_ok() && self.exchange_fits(std::iter::once(m)) {
            // Small vectors: each rank's to every rank above it (one RDMA write each), folded
            // in rank order. A rank with a wrong buffer takes part and then fails.
            if !valid {
                let _ = self.slots_prefix(send, None, reduce, inclusive);
                return Err(CollError::InvalidArgument(format!(
                    "send ({m} bytes) and receive ({} bytes) must be the same whole number \
                     of {elem}-byte elements",
                    recv.len()
                )));
            }
            return self.slots_prefix(send, Some(recv), reduce, inclusive);
        }
        let checked = self.usable().and_then(|()| {
            if send.len() != recv.len() || elem == 0 || !send.len().is_multiple_of(elem) {
                return Err(CollError::InvalidArgument(format!(
                    "send ({} bytes) and receive ({} bytes) must be the same whole number \
                     of {elem}-byte elements",
                    send.len(),
                    recv.len()
                )));
            }
            Ok(())
        });
        if n <= CHAIN_MAX {
            return self.chain(send, recv, reduce, inclusive, checked);
        }
        if let Err(e) = checked {
            let steps = || partners(me, n).map(|p| p as Rank);
            return Err(refuse(w, self.context, tag::SCAN, steps(), steps(), e));
        }
        // The combination of this rank's window so far, and what came from a partner.
        let mut window = self.scratch.take(m);
        window.bytes_mut().copy_from_slice(send);
        let mut theirs = self.scratch.take(m);
        let mut scratch = self.scratch.take(m);
        // Whether `recv` holds anything yet (from the start, for the inclusive scan).
        let mut have = inclusive;
        if inclusive {
            recv.copy_from_slice(send);
        }
        let mut failed: Option<CollError> = None;
        for partner in partners(me, n) {
            if let Some(e) = failed.take() {
                let p = std::iter::once(partner as Rank);
                failed = Some(refuse(w, self.context, tag::SCAN, p.clone(), p, e));
                continue;
            }
            let mut batch = Batch::new(w, self.context);
            batch.recv(theirs.bytes_mut(), partner as Rank, tag::SCAN);
            batch.send(window.bytes(), partner as Rank, tag::SCAN);
            if let Err(e) = batch.finish() {
                failed = Some(e);
                continue;
            }
            if partner > me {
                // Theirs covers ranks above this window: it goes after.
                reduce(window.bytes_mut(), theirs.bytes());
                continue;
            }
            // Theirs covers the ranks just below this window: it goes first.
            scratch.bytes_mut().copy_from_slice(theirs.bytes());
            reduce(scratch.bytes_mut(), window.bytes());
            std::mem::swap(&mut window, &mut scratch);
            if have {
                scratch.bytes_mut().copy_from_slice(theirs.bytes());
                reduce(scratch.bytes_mut(), recv);
                recv.copy_from_slice(scratch.bytes());
            } else {
                recv.copy_from_slice(theirs.bytes());
                have = true;
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

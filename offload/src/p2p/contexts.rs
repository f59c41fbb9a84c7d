//! Communicator context ids. A duplication is collective (every rank duplicates in the same
//! order), so ids handed out from a counter agree across ranks without a message. A dropped
//! communicator gives its id back on its own rank only; ids are reused once every rank has given
//! them back, which the caller learns through an agreement of its own (the bitwise AND of every
//! rank's [`Contexts::free_mask`], adopted with [`Contexts::adopt`]): every rank then holds the
//! same list of reusable ids and takes from it in the same order.
//!
//! That needs every rank of the job: a communicator over part of it (a split) takes its id
//! from a second pool instead, by an agreement over its parent each time (the bitwise AND of
//! every parent rank's [`Contexts::group_free_mask`], lowest id free everywhere): the ranks
//! outside the parent may hold that id for communicators of their own, which never share a
//! rank with the new one.

use super::{Context, Engine, COLLECTIVE_CONTEXT_BIT};
use crate::error::{OffloadError, Result};

/// Ids communicators can have (the rest serve their collectives).
pub const CONTEXT_IDS: usize = COLLECTIVE_CONTEXT_BIT as usize;
/// The first id of the pool of communicators over part of the job (below: the job's own and
/// its duplicates).
const GROUP_FIRST: usize = CONTEXT_IDS / 2;
/// Words of a `Contexts::free_mask` (the duplicates' pool).
pub const CONTEXT_MASK_WORDS: usize = GROUP_FIRST / 64;
/// Words of a `Contexts::group_free_mask`.
pub const GROUP_MASK_WORDS: usize = (CONTEXT_IDS - GROUP_FIRST) / 64;

/// One rank's context ids.
pub(super) struct Contexts {
    /// Ids at or above this (and below `GROUP_FIRST`) were never handed out.
    fresh: usize,
    /// Bit `c`: id `c` belongs to a communicator alive on this rank (id 0 is the job's own),
    /// for both pools.
    live: Vec<u64>,
    /// Ids every rank had given back at the last agreement, highest first (taken from the end).
    agreed: Vec<Context>,
}

impl Default for Contexts {
    fn default() -> Self {
        let mut live = vec![0u64; CONTEXT_IDS / 64];
        live[0] = 1;
        Contexts {
            fresh: 1,
            live,
            agreed: Vec::new(),
        }
    }
}

impl Contexts {
    /// The next id, the same on every rank: a fresh one, else one agreed reusable; `None` when
    /// both have run out (an agreement may find more).
    pub(super) fn take(&mut self) -> Option<Context> {
        let c = if self.fresh < GROUP_FIRST {
            self.fresh += 1;
            self.fresh - 1
        } else {
            self.agreed.pop()? as usize
        };
        self.live[c / 64] |= 1 << (c % 64);
        Some(c as Context)
    }

    /// Gives `c` back (its communicator is gone on this rank). Ids not handed out, and the
    /// job's own id 0, are ignored.
    pub(super) fn release(&mut self, c: Context) {
        let c = c as usize;
        if c != 0 && (c < self.fresh || (GROUP_FIRST..CONTEXT_IDS).contains(&c)) {
            self.live[c / 64] &= !(1 << (c % 64));
        }
    }

    /// Whether the next [`take`](Contexts::take) needs an agreement first (the same answer on
    /// every rank).
    pub(super) fn exhausted(&self) -> bool {
        self.fresh >= GROUP_FIRST && self.agreed.is_empty()
    }

    /// Bit `c` set: id `c` of the duplicates' pool is free on this rank (for the agreement).
    pub(super) fn free_mask(&self) -> Vec<u64> {
        self.live[..CONTEXT_MASK_WORDS].iter().map(|w| !w).collect()
    }

    /// Bit `i` set: id `GROUP_FIRST + i` is free on this rank (for a split's agreement).
    pub(super) fn group_free_mask(&self) -> Vec<u64> {
        self.live[CONTEXT_MASK_WORDS..].iter().map(|w| !w).collect()
    }

    /// The lowest id of the split pool free on every rank of the agreement (`all_free`, the
    /// AND of their [`group_free_mask`](Contexts::group_free_mask)s), taken on this rank if
    /// `join` (a rank that joins no new communicator only took part in the agreement).
    pub(super) fn take_group(&mut self, all_free: &[u64], join: bool) -> Option<Context> {
        let i = all_free
            .iter()
            .take(GROUP_MASK_WORDS)
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)?;
        let c = GROUP_FIRST + i;
        if join {
            self.live[c / 64] |= 1 << (c % 64);
        }
        Some(c as Context)
    }

    /// Adopts the agreement: the ids free on every rank (the AND of their masks) become the
    /// ones reused next, lowest first.
    pub(super) fn adopt(&mut self, all_free: &[u64]) {
        self.agreed = (1..GROUP_FIRST.min(all_free.len() * 64))
            .rev()
            .filter(|&c| {
                all_free[c / 64] >> (c % 64) & 1 == 1 && self.live[c / 64] >> (c % 64) & 1 == 0
            })
            .map(|c| c as Context)
            .collect();
    }
}

impl Engine {
    /// A context id for a duplicated communicator. Collective: every rank must call it in the
    /// same order, so that all agree on the ids. Fails with `NoSpace` once every id is in use
    /// or waits to be agreed free: see [`Engine::contexts_exhausted`].
    pub fn new_context(&self) -> Result<Context> {
        self.inner
            .lock()
            .contexts
            .take()
            .ok_or(OffloadError::NoSpace {
                what: "communicator context id (every one is in use on some rank)",
                limit: GROUP_FIRST - 1,
            })
    }

    /// This rank's free ids of the pool of communicators over part of the job
    /// ([`GROUP_MASK_WORDS`] words), for a split's agreement over its parent.
    pub fn free_group_contexts(&self) -> Vec<u64> {
        self.inner.lock().contexts.group_free_mask()
    }

    /// The id the split's agreement (`all_free`: the AND of every parent rank's
    /// [`free_group_contexts`](Engine::free_group_contexts)) gives the new communicators,
    /// taken on this rank if `join`s one. `NoSpace` when no id is free everywhere.
    pub fn take_group_context(&self, all_free: &[u64], join: bool) -> Result<Context> {
        self.inner
            .lock()
            .contexts
            .take_group(all_free, join)
            .ok_or(OffloadError::NoSpace {
                what: "context id for a split communicator (every one is in use on some rank)",
                limit: CONTEXT_IDS - GROUP_FIRST,
            })
    }

    /// Gives back the context id of a communicator that is gone on this rank; it is reused once
    /// every rank has given it back and an agreement ([`Engine::adopt_free_contexts`]) says so.
    pub fn release_context(&self, context: Context) {
        self.inner.lock().contexts.release(context);
    }

    /// Whether the next [`new_context`](Engine::new_context) needs an agreement first: the
    /// same answer on every rank, as long as every rank duplicates in the same order.
    pub fn contexts_exhausted(&self) -> bool {
        self.inner.lock().contexts.exhausted()
    }

    /// This rank's free context ids as a bit mask ([`CONTEXT_MASK_WORDS`] words), for the
    /// agreement: the bitwise AND over all ranks goes to [`adopt_free_contexts`](Engine::adopt_free_contexts).
    pub fn free_contexts(&self) -> Vec<u64> {
        self.inner.lock().contexts.free_mask()
    }

    /// Adopts the agreement: the ids free on every rank (the AND of their masks) are handed
    /// out next, in the same order on every rank.
    pub fn adopt_free_contexts(&self, all_free: &[u64]) {
        self.inner.lock().contexts.adopt(all_free);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_back_only_once_every_rank_agrees() {
        let mut a = Contexts::default();
        let mut b = Contexts::default();
        let mut taken = Vec::new();
        while !a.exhausted() {
            let (x, y) = (a.take().unwrap(), b.take().unwrap());
            assert_eq!(x, y);
            taken.push(x);
        }
        assert_eq!(taken.len(), GROUP_FIRST - 1);
        assert_eq!(a.take(), None);
        // Rank a frees 5 and 9, rank b frees 9 and 7: only 9 is free on both.
        a.release(5);
        a.release(9);
        b.release(9);
        b.release(7);
        let and: Vec<u64> = a
            .free_mask()
            .iter()
            .zip(b.free_mask())
            .map(|(x, y)| x & y)
            .collect();
        a.adopt(&and);
        b.adopt(&and);
        assert_eq!((a.take(), b.take()), (Some(9), Some(9)));
        assert!(a.exhausted() && b.exhausted());
        // The job's own id is never given out.
        a.release(0);
        assert_eq!(a.free_mask()[0] & 1, 0);
    }

    #[test]
    fn split_ids_are_free_on_every_rank_of_the_parent() {
        let mut a = Contexts::default();
        let mut b = Contexts::default();
        let and = |a: &Contexts, b: &Contexts| -> Vec<u64> {
            let (x, y) = (a.group_free_mask(), b.group_free_mask());
            x.iter().zip(y).map(|(x, y)| x & y).collect()
        };
        // a joins the first split, b only agrees: the next agreement skips a's id anyway.
        let all = and(&a, &b);
        let first = a.take_group(&all, true).unwrap();
        assert_eq!(b.take_group(&all, false), Some(first));
        assert_eq!(first as usize, GROUP_FIRST);
        let all = and(&a, &b);
        let second = b.take_group(&all, true).unwrap();
        assert_eq!(second, first + 1);
        // Duplicates never take split ids, and released split ids come back.
        assert!(a.take().unwrap() < first);
        a.release(first);
        let all = and(&a, &b);
        assert_eq!(a.take_group(&all, true), Some(first));
        // Every id in use somewhere: none agreed.
        let full = vec![0u64; GROUP_MASK_WORDS];
        assert_eq!(a.take_group(&full, true), None);
    }
}

//! One match list of a portal table entry (priority or overflow), in append order, with the
//! entries that ignore no match bits also indexed by their bits: an arrival finds the first
//! entry that takes it by one lookup among those, plus (where the list has entries with
//! wildcard bits) a walk only as far as the first exact candidate. The rendezvous portal holds one exact get entry
//! per message in flight, and walking them all for every get made a window of n messages cost
//! n² (docs/PERFORMANCE.md, "Releasing a memory descriptor without a scan").

use std::collections::{BTreeMap, BTreeSet};

use rdcoll_transport::Rank;
use rustc_hash::FxHashMap as HashMap;

use crate::me::Me;

/// Entries by append sequence number, indexed by match bits where they ignore none.
#[derive(Debug, Default)]
pub(crate) struct MatchList {
    entries: BTreeMap<u64, Me>,
    /// Sequence numbers of the entries with no ignore bits, by their match bits.
    exact: HashMap<u64, BTreeSet<u64>>,
    /// How many other entries there are (with wildcard bits).
    wild: usize,
}

impl MatchList {
    /// Appends `me` under sequence number `seq` (larger than any before it).
    pub(crate) fn insert(&mut self, seq: u64, me: Me) {
        // Sequence numbers are never reused; the index stays right if one were.
        if let Some(old) = self.entries.remove(&seq) {
            self.unindex(seq, &old);
        }
        if me.ignore_bits == 0 {
            self.exact.entry(me.match_bits).or_default().insert(seq);
        } else {
            self.wild += 1;
        }
        self.entries.insert(seq, me);
    }

    /// Unlinks the entry `seq`.
    pub(crate) fn remove(&mut self, seq: u64) -> Option<Me> {
        let me = self.entries.remove(&seq)?;
        self.unindex(seq, &me);
        Some(me)
    }

    fn unindex(&mut self, seq: u64, me: &Me) {
        if me.ignore_bits == 0 {
            if let Some(seqs) = self.exact.get_mut(&me.match_bits) {
                seqs.remove(&seq);
                if seqs.is_empty() {
                    self.exact.remove(&me.match_bits);
                }
            }
        } else {
            self.wild -= 1;
        }
    }

    /// The entry `seq`, to consume from (its match bits must not change).
    pub(crate) fn get_mut(&mut self, seq: u64) -> Option<&mut Me> {
        self.entries.get_mut(&seq)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The first entry in append order that takes a message from `initiator` with `bits`.
    pub(crate) fn first_accepting(
        &self,
        initiator: Rank,
        bits: u64,
        remote_offset: usize,
        rlength: usize,
    ) -> Option<u64> {
        let accepts = |seq: &&u64| {
            self.entries
                .get(seq)
                .is_some_and(|me| me.accepts(initiator, bits, remote_offset, rlength))
        };
        let exact = self
            .exact
            .get(&bits)
            .and_then(|seqs| seqs.iter().find(accepts).copied());
        if self.wild == 0 {
            return exact;
        }
        // A wildcard entry wins only if it was appended before the exact candidate.
        let wild = self
            .entries
            .range(..exact.unwrap_or(u64::MAX))
            .find(|(_, me)| {
                me.ignore_bits != 0 && me.accepts(initiator, bits, remote_offset, rlength)
            })
            .map(|(&seq, _)| seq);
        wild.or(exact)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{MatchId, MeOptions};
    use rdcoll_transport::Fabric;

    fn me(match_bits: u64, ignore_bits: u64, from: MatchId) -> Me {
        let f = rdcoll_transport::local::create(1).unwrap().remove(0);
        let region = f.alloc_region(16).unwrap();
        Me::new(crate::types::MeSpec {
            region,
            match_bits,
            ignore_bits,
            match_id: from,
            options: MeOptions::default(),
            user_ptr: 0,
        })
    }

    /// Against a plain walk in append order, over random lists and arrivals.
    #[test]
    fn finds_what_a_walk_in_append_order_finds() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..200 {
            let mut list = MatchList::default();
            let mut seq = 0;
            for _ in 0..next(40) {
                seq += 1 + next(3);
                let (bits, ignore) = match next(3) {
                    0 => (next(4), 0),
                    1 => (next(4), 1),
                    _ => (0, u64::MAX),
                };
                let from = if next(2) == 0 {
                    MatchId::Any
                } else {
                    MatchId::Rank(next(3) as Rank)
                };
                list.insert(seq, me(bits, ignore, from));
                if next(4) == 0 {
                    let victim = 1 + next(seq);
                    list.remove(victim);
                }
            }
            for _ in 0..20 {
                let (from, bits) = (next(3) as Rank, next(5));
                let walk = list
                    .entries
                    .iter()
                    .find(|(_, m)| m.accepts(from, bits, 0, 0))
                    .map(|(&s, _)| s);
                assert_eq!(list.first_accepting(from, bits, 0, 0), walk);
            }
        }
    }
}

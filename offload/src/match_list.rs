//! One match list of a portal table entry (priority or overflow), in append order, with every
//! entry also filed under its ignore mask and the match bits outside it. An arrival looks its
//! own bits up under each mask in use (a few: receives ignore the nonce, wildcard-tag receives
//! the tag too, rendezvous get entries nothing, bounce buffers everything) and takes the
//! earliest entry that accepts it, instead of walking the list. The rendezvous portal holds
//! one get entry per message in flight and the message portal one entry per posted receive:
//! walking them for every arrival made a window of n messages cost n².

use std::collections::{BTreeMap, BTreeSet};

use rdcoll_transport::Rank;
use rustc_hash::FxHashMap as HashMap;

use crate::me::Me;

/// The entries of one ignore mask, by their match bits outside it.
#[derive(Debug)]
struct MaskBins {
    mask: u64,
    bins: HashMap<u64, BTreeSet<u64>>,
}

/// Entries by append sequence number, filed by ignore mask and match bits.
#[derive(Debug, Default)]
pub(crate) struct MatchList {
    entries: BTreeMap<u64, Me>,
    /// One per ignore mask in use (few), in the order the masks first appeared.
    masks: Vec<MaskBins>,
}

impl MatchList {
    /// Appends `me` under sequence number `seq` (larger than any before it).
    pub(crate) fn insert(&mut self, seq: u64, me: Me) {
        debug_assert!(
            !self.entries.contains_key(&seq),
            "sequence numbers are never reused"
        );
        let mask = me.ignore_bits;
        let key = me.match_bits & !mask;
        let at = match self.masks.iter().position(|m| m.mask == mask) {
            Some(at) => at,
            None => {
                self.masks.push(MaskBins {
                    mask,
                    bins: HashMap::default(),
                });
                self.masks.len() - 1
            }
        };
        self.masks[at].bins.entry(key).or_default().insert(seq);
        self.entries.insert(seq, me);
    }

    /// Unlinks the entry `seq`.
    pub(crate) fn remove(&mut self, seq: u64) -> Option<Me> {
        let me = self.entries.remove(&seq)?;
        self.unfile(seq, &me);
        Some(me)
    }

    fn unfile(&mut self, seq: u64, me: &Me) {
        let mask = me.ignore_bits;
        let key = me.match_bits & !mask;
        let Some(at) = self.masks.iter().position(|m| m.mask == mask) else {
            return;
        };
        let bins = &mut self.masks[at].bins;
        if let Some(seqs) = bins.get_mut(&key) {
            seqs.remove(&seq);
            if seqs.is_empty() {
                bins.remove(&key);
            }
        }
        if bins.is_empty() {
            self.masks.swap_remove(at);
        }
    }

    /// The entry `seq`, to consume from (its match bits must not change).
    pub(crate) fn get_mut(&mut self, seq: u64) -> Option<&mut Me> {
        self.entries.get_mut(&seq)
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
        self.masks
            .iter()
            .filter_map(|m| m.bins.get(&(bits & !m.mask)))
            .filter_map(|seqs| seqs.iter().find(accepts).copied())
            .min()
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

    /// Against a plain walk in append order, over random lists (several ignore masks, match
    /// ids, removals) and arrivals.
    #[test]
    fn finds_what_a_walk_in_append_order_finds() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..500 {
            let mut list = MatchList::default();
            let mut seq = 0;
            for _ in 0..next(40) {
                seq += 1 + next(3);
                let ignore = [0, 1, 3, 0xc, u64::MAX][next(5) as usize];
                let bits = next(16);
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
            for _ in 0..40 {
                let (from, bits) = (next(3) as Rank, next(16));
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

//! The ranks of a communicator that spans part of the job (made by a split): its rank `i` is
//! the fabric's rank `ranks[i]`. Communicators over the whole job in the fabric's order have
//! none (their ranks are the fabric's), so their message path translates nothing.

use rdcoll_transport::Rank;

use super::PROC_NULL;
use crate::error::{invalid, Result};

/// No communicator rank for this fabric rank.
const ABSENT: Rank = Rank::MAX;

/// A communicator's ranks in the fabric's numbering, and the way back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members {
    /// Communicator rank -> fabric rank.
    ranks: Vec<Rank>,
    /// Fabric rank -> communicator rank (`ABSENT` for ranks outside it).
    index: Vec<Rank>,
    /// This rank in the communicator.
    me: Rank,
}

impl Members {
    /// The communicator whose rank `i` is fabric rank `ranks[i]`, seen from fabric rank
    /// `fabric_me` (which must be among them), in a fabric of `fabric_size` ranks.
    pub fn new(ranks: Vec<Rank>, fabric_me: Rank, fabric_size: usize) -> Result<Members> {
        let mut index = vec![ABSENT; fabric_size];
        for (i, &r) in ranks.iter().enumerate() {
            match index.get_mut(r as usize) {
                Some(slot) if *slot == ABSENT => *slot = i as Rank,
                Some(_) => return Err(invalid(format!("rank {r} is named twice"))),
                None => {
                    return Err(invalid(format!(
                        "rank {r} is not in the job of {fabric_size} ranks"
                    )))
                }
            }
        }
        let me = match index.get(fabric_me as usize) {
            Some(&m) if m != ABSENT => m,
            _ => return Err(invalid(format!("rank {fabric_me} is not among {ranks:?}"))),
        };
        Ok(Members { ranks, index, me })
    }

    /// The whole job in the fabric's order (what a communicator without members means).
    pub fn whole(fabric_me: Rank, fabric_size: usize) -> Members {
        let ranks: Vec<Rank> = (0..fabric_size as Rank).collect();
        Members {
            index: ranks.clone(),
            ranks,
            me: fabric_me,
        }
    }

    /// Whether this is the whole job in the fabric's order.
    pub fn is_whole(&self) -> bool {
        self.ranks.len() == self.index.len()
            && self.ranks.iter().enumerate().all(|(i, &r)| r as usize == i)
    }

    /// This rank in the communicator.
    pub fn me(&self) -> Rank {
        self.me
    }

    /// Ranks in the communicator.
    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// The fabric rank of communicator rank `r`; [`PROC_NULL`] stays itself; any other rank
    /// outside the communicator is an error.
    pub fn fabric_rank(&self, r: Rank) -> Result<Rank> {
        if r == PROC_NULL {
            return Ok(PROC_NULL);
        }
        self.ranks.get(r as usize).copied().ok_or_else(|| {
            invalid(format!(
                "rank {r} is not in this communicator of {} ranks",
                self.ranks.len()
            ))
        })
    }

    /// The fabric rank of communicator rank `r`, which the caller knows to be in range.
    pub fn fabric_rank_of(&self, r: Rank) -> Rank {
        self.ranks[r as usize]
    }

    /// The communicator rank of fabric rank `r` ([`PROC_NULL`] stays itself; a rank outside
    /// the communicator, which sends on its context cannot come from, maps to `PROC_NULL`).
    pub fn comm_rank(&self, r: Rank) -> Rank {
        match self.index.get(r as usize) {
            Some(&m) if m != ABSENT => m,
            _ => PROC_NULL,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_map_both_ways() {
        let m = Members::new(vec![5, 2, 7], 7, 8).unwrap();
        assert_eq!((m.me(), m.size()), (2, 3));
        assert_eq!(m.fabric_rank(1).unwrap(), 2);
        assert_eq!(m.comm_rank(5), 0);
        assert_eq!(m.comm_rank(3), PROC_NULL);
        assert_eq!(m.fabric_rank(PROC_NULL).unwrap(), PROC_NULL);
        assert!(m.fabric_rank(3).is_err());
        assert!(!m.is_whole());
        assert!(Members::new(vec![1, 1], 1, 4).is_err());
        assert!(Members::new(vec![1, 9], 1, 4).is_err());
        assert!(Members::new(vec![1, 2], 0, 4).is_err());
        assert!(Members::whole(1, 3).is_whole());
        assert!(Members::new(vec![0, 1, 2], 1, 3).unwrap().is_whole());
        assert!(!Members::new(vec![0, 1], 1, 3).unwrap().is_whole());
    }
}

//! Broadcast: counter-byte RDMA-write blocks for small messages (paper 004), the RDMC family
//! for large ones (papers 000/001).
//!
//! Large broadcasts first broadcast their length through the small path (the receivers learn
//! the size before the first block; a rank whose buffer has another length still takes part,
//! through a buffer of the right size, and then reports the mismatch). `bcast_any_size` does
//! the same for receivers that do not know the size at all.

mod counter_blocks;
mod rdmc;

pub(crate) use counter_blocks::CounterBcast;
pub(crate) use rdmc::Rdmc;

use rdcoll_transport::Rank;

use crate::config::{BcastAlgorithm, BcastTransfer};
use crate::error::{CollError, Result};
use crate::schedule::Algorithm;
use crate::{Collectives, Inner};

impl Collectives {
    /// Broadcasts `buf` from `root` to every rank; every rank passes a buffer of the same
    /// length (a rank whose length differs from the root's gets an error once the broadcast
    /// has completed elsewhere, for large messages; small ones may only be detected later).
    pub fn bcast(&self, buf: &mut [u8], root: Rank) -> Result<()> {
        self.check_root(root)?;
        self.guarded(|inner| {
            let path = self.path_for(inner, buf.len())?;
            match path {
                None => {
                    self.small(inner, buf, root)?;
                    Ok(Ok(()))
                }
                Some(alg) => {
                    let mut len = (buf.len() as u64).to_le_bytes();
                    self.small(inner, &mut len, root)?;
                    let root_len = u64::from_le_bytes(len);
                    if root_len == buf.len() as u64 {
                        self.rdmc(inner, alg, buf, root)?;
                        return Ok(Ok(()));
                    }
                    // Take part with a buffer of the root's size, then report.
                    let mut whole = vec![0u8; usize::try_from(root_len).unwrap_or(usize::MAX)];
                    self.rdmc(inner, alg, &mut whole, root)?;
                    let n = whole.len().min(buf.len());
                    buf[..n].copy_from_slice(&whole[..n]);
                    // Every rank completed the broadcast: the communicator stays usable.
                    Ok(Err(CollError::Mismatch(format!(
                        "rank {root} broadcast {root_len} bytes into a {}-byte buffer",
                        buf.len()
                    ))))
                }
            }
        })
    }

    /// Broadcasts `data` (given at the root; ignored elsewhere) to every rank, which need not
    /// know its length: each rank returns the root's bytes.
    pub fn bcast_any_size(&self, data: Option<&[u8]>, root: Rank) -> Result<Vec<u8>> {
        self.check_root(root)?;
        let me = self.waiter.fabric().rank();
        let at_root = match (me == root, data) {
            (true, Some(d)) => Some(d),
            (true, None) => {
                return Err(CollError::InvalidArgument(
                    "the root of bcast_any_size must pass the data".into(),
                ))
            }
            (false, _) => None,
        };
        self.guarded(|inner| {
            let mut len = (at_root.map_or(0, <[u8]>::len) as u64).to_le_bytes();
            self.small(inner, &mut len, root)?;
            let len = usize::try_from(u64::from_le_bytes(len)).map_err(|_| {
                CollError::InvalidArgument("the broadcast is too long for this host".into())
            })?;
            let mut out = match at_root {
                Some(d) => d.to_vec(),
                None => vec![0u8; len],
            };
            match self.path_for(inner, len)? {
                None => self.small(inner, &mut out, root)?,
                Some(alg) => self.rdmc(inner, alg, &mut out, root)?,
            }
            Ok(Ok(out))
        })
    }

    /// `None`: counter-byte blocks; else the RDMC algorithm for a message of `len` bytes.
    fn path_for(&self, inner: &mut Inner, len: usize) -> Result<Option<Algorithm>> {
        Ok(match self.cfg.bcast_algorithm {
            BcastAlgorithm::Counter => None,
            BcastAlgorithm::Rdmc(a) => Some(a),
            BcastAlgorithm::Auto if len <= self.bcast_small_max => None,
            BcastAlgorithm::Auto => {
                let groups = self.groups(inner)?;
                let several = groups.iter().any(|&g| g != groups[0]);
                Some(if several {
                    Algorithm::Hybrid
                } else {
                    Algorithm::BinomialPipeline
                })
            }
        })
    }

    /// The counter-byte broadcast (its buffers set up on first use).
    pub(crate) fn small(&self, inner: &mut Inner, buf: &mut [u8], root: Rank) -> Result<()> {
        if inner.counter.is_none() {
            inner.counter = Some(CounterBcast::new(self.waiter.engine(), self.context)?);
        }
        let Inner { counter, puts, .. } = inner;
        let counter = counter.as_mut().expect("set just above");
        counter.bcast(&self.waiter, puts, buf, root)
    }

    /// Runs RDMC algorithm `alg` over `buf` (its length agreed by every rank).
    fn rdmc(&self, inner: &mut Inner, alg: Algorithm, buf: &mut [u8], root: Rank) -> Result<()> {
        let fabric = self.waiter.fabric();
        let (me, n) = (fabric.rank() as usize, fabric.size());
        let block = self.cfg.block_for(buf.len(), n, self.crowded_host);
        let blocks = buf.len().div_ceil(block).max(1);
        // Node i of the schedule is rank root + i.
        let members: Vec<Rank> = (0..n).map(|i| ((root as usize + i) % n) as Rank).collect();
        let groups: Vec<u64> = if alg == Algorithm::Hybrid {
            let g = self.groups(inner)?;
            members.iter().map(|&r| g[r as usize]).collect()
        } else {
            Vec::new()
        };
        let group_ids: Vec<usize> = groups.iter().map(|&g| g as usize).collect();
        let schedule = alg.schedule(n, blocks, &group_ids);
        if inner.rdmc.is_none() {
            let cap = self.cfg.max_block();
            inner.rdmc = Some(Rdmc::new(self.waiter.engine(), self.context, cap)?);
        }
        let Inner { rdmc, puts, .. } = inner;
        let rdmc = rdmc.as_mut().expect("set just above");
        debug_assert!(block <= rdmc.slot_cap());
        let node = (me + n - root as usize) % n;
        let transfer = self.cfg.bcast_transfer.unwrap_or(if self.waiter.crowded() {
            BcastTransfer::Staged
        } else {
            BcastTransfer::Write
        });
        let job = rdmc::Job {
            schedule: schedule.as_ref(),
            members: &members,
            me: node,
            block,
            transfer,
        };
        rdmc.run(&self.waiter, puts, &job, buf)
    }
}

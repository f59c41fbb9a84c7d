//! Broadcast: counter-byte RDMA-write blocks for small messages (paper 004), the RDMC family
//! for large ones (papers 000/001); where every rank shares one host (shm, local), large ones
//! go through the root's own staging instead (`shared_staging`: one copy per rank, no
//! store into lines another rank reads).
//!
//! Every broadcast starts with a counter-byte broadcast: the message itself when it is
//! small, or a header alone announcing a large broadcast of the root's length (RDMC or
//! shared staging: every rank picks the same from that length and the shared settings).
//! The root alone chooses small or large, from its length; the receivers follow what comes
//! (`Heard`), so a rank whose buffer has another length still takes part in full (through
//! a buffer of the root's length) and then reports the mismatch (a one-block message carries
//! its length too, which the paper's do not), and `bcast_any_size` needs no separate round
//! for the length.

mod block_layout;
mod counter_blocks;
mod rdmc;
mod shared_staging;

pub(crate) use counter_blocks::CounterBcast;
pub(crate) use rdmc::Rdmc;
pub(crate) use shared_staging::SharedStaging;

use counter_blocks::{host_len, Heard, Sink};
use rdcoll_transport::Rank;

use crate::agreement::{Call, CallKind};
use crate::config::{BcastAlgorithm, BcastTransfer, Multicast};
use crate::error::{CollError, Result};
use crate::schedule::Algorithm;
use crate::{Collectives, Inner, Puts};

impl Collectives {
    /// Broadcasts `buf` from `root` to every rank; every rank passes a buffer of the same
    /// length. A rank whose length differs from the root's still takes part and gets an
    /// error (`Mismatch`) once its part is done, with as much of the root's message as fits;
    /// the communicator stays usable.
    pub fn bcast(&self, buf: &mut [u8], root: Rank) -> Result<()> {
        self.agree(|| Call::new(CallKind::Bcast).root(root).bytes(buf.len()))?;
        self.bcast_by(buf, root, None)
    }

    /// A broadcast of `buf` from `root` by a receiver-initiated multicast across clusters
    /// (`RDCOLL_CLUSTER`, else hosts), whatever its size: [`Multicast::Robber`] (paper 003:
    /// the ranks of a cluster share the work of pulling each piece into it once, and idle
    /// ones steal work from busy ones) or [`Multicast::Mob`] (the same with fixed shares).
    /// The root's choice decides how the message travels; lengths are handled as by
    /// [`bcast`](Collectives::bcast).
    pub fn multicast(&self, buf: &mut [u8], root: Rank, how: Multicast) -> Result<()> {
        // The root's choice decides how the message travels: a bcast on another rank, or
        // another way, is the same call.
        self.agree(|| Call::new(CallKind::Bcast).root(root).bytes(buf.len()))?;
        self.bcast_by(buf, root, Some(how))
    }

    /// A broadcast, large ones by the settings (`way` `None`) or by the multicast `way`.
    fn bcast_by(&self, buf: &mut [u8], root: Rank, way: Option<Multicast>) -> Result<()> {
        self.check_root(root)?;
        self.guarded(|inner| {
            if self.waiter.rank() == root {
                if way.is_none() && self.is_small(buf.len()) {
                    self.announce(inner, buf, None, false)?;
                } else {
                    self.announce(inner, &[], Some(announced(buf.len() as u64, way)?), false)?;
                    self.large(inner, buf, root, way)?;
                }
                return Ok(Ok(()));
            }
            let sink = if way.is_none() && self.is_small(buf.len()) {
                Sink::Exact(buf)
            } else {
                Sink::Announced(buf)
            };
            let heard = self.hear(inner, sink, root)?;
            let root_len = match heard {
                Heard::Message(len) => len,
                Heard::Follows(word) => {
                    let (len, way) = heard_way(word, root)?;
                    if len == buf.len() as u64 {
                        self.large(inner, buf, root, way)?;
                    } else {
                        // Take part with a buffer of the root's size, then report.
                        let mut whole = vec![0u8; host_len(len)?];
                        self.large(inner, &mut whole, root, way)?;
                        let n = whole.len().min(buf.len());
                        buf[..n].copy_from_slice(&whole[..n]);
                    }
                    len
                }
            };
            // Every rank completed the broadcast: the communicator stays usable.
            Ok(match root_len {
                len if len == buf.len() as u64 => Ok(()),
                len => Err(CollError::Mismatch(format!(
                    "rank {root} broadcast {len} bytes into a {}-byte buffer",
                    buf.len()
                ))),
            })
        })
    }

    /// Broadcasts `data` (given at the root; ignored elsewhere) to every rank, which need not
    /// know its length: each rank returns the root's bytes.
    pub fn bcast_any_size(&self, data: Option<&[u8]>, root: Rank) -> Result<Vec<u8>> {
        let at_root = match (self.waiter.rank() == root, data) {
            (true, Some(d)) => Some(d),
            (true, None) => {
                self.refuse_call();
                return Err(CollError::InvalidArgument(
                    "the root of bcast_any_size must pass the data".into(),
                ));
            }
            (false, _) => None,
        };
        self.agree(|| Call::new(CallKind::BcastAnySize).root(root))?;
        self.check_root(root)?;
        self.guarded(|inner| {
            if let Some(d) = at_root {
                if self.is_small(d.len()) {
                    self.announce(inner, d, None, true)?;
                    return Ok(Ok(d.to_vec()));
                }
                self.announce(inner, &[], Some(announced(d.len() as u64, None)?), true)?;
                let mut out = d.to_vec();
                self.large(inner, &mut out, root, None)?;
                return Ok(Ok(out));
            }
            let mut out = Vec::new();
            match self.hear(inner, Sink::Grow(&mut out), root)? {
                Heard::Message(_) => {}
                Heard::Follows(word) => {
                    let (len, way) = heard_way(word, root)?;
                    out.resize(host_len(len)?, 0);
                    self.large(inner, &mut out, root, way)?;
                }
            }
            Ok(Ok(out))
        })
    }

    /// Whether a root broadcasts `len` bytes by counter-byte blocks (else by RDMC).
    #[inline]
    fn is_small(&self, len: usize) -> bool {
        match self.cfg.bcast_algorithm {
            BcastAlgorithm::Counter => true,
            BcastAlgorithm::Rdmc(_) => false,
            BcastAlgorithm::Auto | BcastAlgorithm::Shared | BcastAlgorithm::Multicast(_) => {
                len <= self.bcast_small_max
            }
        }
    }

    /// A broadcast announced as large, of `buf.len()` bytes (the root's length: the same on
    /// every rank, as are the settings and the root's `way`, so every rank takes the same
    /// path).
    fn large(
        &self,
        inner: &mut Inner,
        buf: &mut [u8],
        root: Rank,
        way: Option<Multicast>,
    ) -> Result<()> {
        let way = match (way, self.cfg.bcast_algorithm) {
            (Some(how), _) | (None, BcastAlgorithm::Multicast(how)) => Some(how),
            (None, _) => None,
        };
        if let Some(how) = way {
            return self.multicast_large(inner, buf, root, how);
        }
        let shared = match self.cfg.bcast_algorithm {
            BcastAlgorithm::Shared => true,
            BcastAlgorithm::Auto => self.one_host && !self.direct_pair(buf.len()),
            BcastAlgorithm::Counter | BcastAlgorithm::Rdmc(_) | BcastAlgorithm::Multicast(_) => {
                false
            }
        };
        if shared {
            return self.shared(inner, buf, root);
        }
        let alg = self.large_algorithm(inner)?;
        self.rdmc(inner, alg, buf, root)
    }

    /// Whether a large broadcast of `len` bytes between the two ranks of one host, each with a
    /// core, goes by RDMC's direct write (one copy, into the receiver's buffer) rather than
    /// the shared staging (two copies, each rank one): from 64 KiB the direct write took
    /// 0.3-0.6x the staging's time at 2 ranks on a 16-core host and on a 2-vCPU one; at 32 KiB
    /// they tie, and from 4 ranks the staging is as fast or faster (every receiver copies out
    /// of it at once). The same on every rank.
    fn direct_pair(&self, len: usize) -> bool {
        const DIRECT_PAIR_MIN: usize = 64 << 10;
        self.waiter.size() == 2 && !self.crowded_host && len >= DIRECT_PAIR_MIN
    }

    /// The RDMC algorithm of a large broadcast (the same on every rank; the first call is
    /// collective where it must learn the ranks' hosts).
    fn large_algorithm(&self, inner: &mut Inner) -> Result<Algorithm> {
        Ok(match self.cfg.bcast_algorithm {
            BcastAlgorithm::Rdmc(a) => a,
            BcastAlgorithm::Counter
            | BcastAlgorithm::Auto
            | BcastAlgorithm::Shared
            | BcastAlgorithm::Multicast(_) => {
                let groups = self.groups(inner)?;
                let several = groups.iter().any(|&g| g != groups[0]);
                if several {
                    Algorithm::Hybrid
                } else {
                    Algorithm::BinomialPipeline
                }
            }
        })
    }

    /// The counter-byte broadcast (its buffers set up on first use).
    #[inline]
    fn counter<'a>(&self, inner: &'a mut Inner) -> Result<(&'a mut CounterBcast, &'a mut Puts)> {
        if inner.counter.is_none() {
            inner.counter = Some(CounterBcast::new(&self.waiter, self.context)?);
        }
        let Inner { counter, puts, .. } = inner;
        Ok((counter.as_mut().expect("set just above"), puts))
    }

    /// At the root: a counter-byte broadcast of `data` (with its length if `sized`), or of a
    /// header alone announcing an RDMC broadcast of `follows` bytes.
    #[inline]
    fn announce(
        &self,
        inner: &mut Inner,
        data: &[u8],
        follows: Option<u64>,
        sized: bool,
    ) -> Result<()> {
        let (counter, puts) = self.counter(inner)?;
        counter.send(&self.waiter, puts, data, follows, sized)
    }

    /// Elsewhere: a counter-byte broadcast from `root` into `sink` (see
    /// `CounterBcast::receive`).
    #[inline]
    fn hear(&self, inner: &mut Inner, sink: Sink<'_>, root: Rank) -> Result<Heard> {
        let (counter, puts) = self.counter(inner)?;
        counter.receive(&self.waiter, puts, sink, root)
    }

    /// A counter-byte broadcast of `buf` from `root`, whose length every rank knows (the
    /// collectives' own exchanges): another length is an error that breaks the
    /// communicator, as the ranks no longer agree on what they are doing.
    pub(crate) fn small(&self, inner: &mut Inner, buf: &mut [u8], root: Rank) -> Result<()> {
        if self.waiter.rank() == root {
            return self.announce(inner, buf, None, false);
        }
        let expect = buf.len() as u64;
        match self.hear(inner, Sink::Exact(buf), root)? {
            Heard::Message(len) if len == expect => Ok(()),
            _ => Err(out_of_step(root, "an exchange of the collectives")),
        }
    }

    /// The shared-staging broadcast of `buf` from `root` (its length agreed by every rank).
    fn shared(&self, inner: &mut Inner, buf: &mut [u8], root: Rank) -> Result<()> {
        if inner.staging.is_none() {
            let cap = self.cfg.max_shared_chunk();
            inner.staging = Some(SharedStaging::new(&self.waiter, self.context, cap)?);
        }
        let Inner { staging, puts, .. } = inner;
        let staging = staging.as_mut().expect("set just above");
        let chunk = self.cfg.shared_chunk(buf.len());
        if self.waiter.rank() == root {
            staging.send(&self.waiter, puts, buf, chunk)
        } else {
            staging.receive(&self.waiter, puts, buf, root, chunk)
        }
    }

    /// Multicasts `buf` (its length agreed by every rank) from `root` the `how` way.
    fn multicast_large(
        &self,
        inner: &mut Inner,
        buf: &mut [u8],
        root: Rank,
        how: Multicast,
    ) -> Result<()> {
        inner.multicasts += 1;
        let seed = crate::fnv1a(
            &[
                inner.multicasts.to_le_bytes(),
                (root as u64).to_le_bytes(),
                (buf.len() as u64).to_le_bytes(),
            ]
            .concat(),
        );
        let groups = self.groups(inner)?.to_vec();
        let job = crate::robber::Job {
            groups: &groups,
            root,
            piece_len: self.cfg.multicast_piece_for(buf.len()),
            steal: how == Multicast::Robber,
            gets_per_peer: self.cfg.multicast_gets,
            seed,
        };
        crate::robber::run(&self.waiter, self.context, buf, &job)
    }

    /// Runs RDMC algorithm `alg` over `buf` (its length agreed by every rank).
    fn rdmc(&self, inner: &mut Inner, alg: Algorithm, buf: &mut [u8], root: Rank) -> Result<()> {
        let (me, n) = (self.waiter.rank() as usize, self.waiter.size());
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
            inner.rdmc = Some(Rdmc::new(&self.waiter, self.context, cap)?);
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

/// Where an announced length carries the way a large broadcast travels (0: by the settings,
/// 1: Robber, 2: MOB), above any length a host holds.
const WAY_SHIFT: u32 = 60;

/// The header word announcing a large broadcast of `len` bytes the `way` way.
fn announced(len: u64, way: Option<Multicast>) -> Result<u64> {
    if len >> WAY_SHIFT != 0 {
        return Err(CollError::InvalidArgument(format!(
            "{len} bytes are too many to broadcast"
        )));
    }
    let code = match way {
        None => 0,
        Some(Multicast::Robber) => 1,
        Some(Multicast::Mob) => 2,
    };
    Ok(len | code << WAY_SHIFT)
}

/// The length and way in an announcement's header word from `root`.
fn heard_way(word: u64, root: Rank) -> Result<(u64, Option<Multicast>)> {
    let len = word & ((1 << WAY_SHIFT) - 1);
    let way = match word >> WAY_SHIFT {
        0 => None,
        1 => Some(Multicast::Robber),
        2 => Some(Multicast::Mob),
        _ => return Err(out_of_step(root, "a broadcast")),
    };
    Ok((len, way))
}

/// The error of a counter-byte broadcast that is not the one this rank takes part in.
fn out_of_step(root: Rank, what: &str) -> CollError {
    CollError::Mismatch(format!(
        "rank {root} broadcast something else than {what}: the ranks' collectives are out of \
         step"
    ))
}

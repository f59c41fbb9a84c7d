//! rdcoll-collectives: collectives over the emulated network interface of `rdcoll-offload`,
//! written against RDMA semantics (one-sided writes into buffers registered once, completion
//! counters), after papers 004 (RDMA-write broadcast with counter bytes) and 000/001 (RDMC).
//!
//! A [`Collectives`] belongs to one communicator. Its operations are collective: every rank
//! calls them in the same order. Its own set-up messages travel on the communicator's context
//! with [`COLLECTIVE_CONTEXT_BIT`] set, so they never meet the communicator's point-to-point
//! traffic. Ranks that pass arguments that cannot go together get [`CollError::Mismatch`]
//! (on every rank, before anything moves, with `RDCOLL_CHECK_COLLECTIVES`: `agreement`) and
//! the communicator stays usable. After a collective fails otherwise (a rank died, ranks
//! disagreed in a way the protocol cannot recover from) the ranks may disagree on where the
//! collectives' buffers stand, so every later collective on the communicator fails with
//! [`CollError::Broken`].

mod agreement;
mod area;
mod barrier;
pub mod bcast;
pub mod blocks;
pub mod config;
mod error;
mod placement;
mod progress;
pub mod reduce;
pub(crate) mod robber;
pub mod schedule;
mod settings;
mod tree;

use std::sync::Arc;

use rdcoll_offload::p2p::{Context, Engine, Members, COLLECTIVE_CONTEXT_BIT};
use rdcoll_offload::CtHandle;
use rdcoll_transport::{Rank, SpinLock, TransportError};

pub use config::{
    BarrierAlgorithm, BcastAlgorithm, BcastTransfer, CollConfig, Multicast, ReduceDegree,
};
pub use error::{CollError, Result};
pub use num_complex::{Complex32, Complex64};
pub use progress::run_in_background;
pub use reduce::model::Model;
pub use reduce::op::{Element, Op};

use bcast::{CounterBcast, Rdmc};
use progress::Waiter;

/// The one-sided writes a communicator's collectives issued, counted on one counter.
pub(crate) struct Puts {
    pub(crate) ct: CtHandle,
    /// Writes that did not complete at once (counted on `ct` as they do).
    pub(crate) issued: u64,
}

impl Puts {
    /// One RDMA write (with the flag byte after the data, if `flag`); see `Ni::rdma_put`.
    pub(crate) fn put(
        &mut self,
        w: &progress::Waiter,
        src: &rdcoll_transport::Region,
        src_offset: usize,
        len: usize,
        dst: rdcoll_transport::RemoteAddr,
        flag: Option<u8>,
    ) -> std::result::Result<(), rdcoll_offload::OffloadError> {
        let how = w
            .engine()
            .ni()
            .rdma_put(src, src_offset, len, dst, flag, self.ct)?;
        if how == rdcoll_offload::RdmaPut::Counted {
            self.issued += 1;
        }
        Ok(())
    }

    /// A write that only serves the target's future writes to this rank (a release, an
    /// acknowledgement): best effort, as a target that has left or dropped its communicator
    /// writes no more and needs none.
    pub(crate) fn notify(
        &mut self,
        w: &progress::Waiter,
        src: &rdcoll_transport::Region,
        dst: rdcoll_transport::RemoteAddr,
        flag: u8,
    ) {
        if let Err(e) = self.put(w, src, 0, 0, dst, Some(flag)) {
            tracing::debug!(
                "a collective's notification to rank {} was not delivered: {e}",
                dst.rank
            );
        }
    }
}

/// One communicator's collectives.
pub struct Collectives {
    waiter: Waiter,
    context: Context,
    cfg: CollConfig,
    /// `cfg.bcast_small_max`, or its default for where the ranks run.
    bcast_small_max: usize,
    /// Every rank on this host (`placement::one_host`): large broadcasts go through the
    /// root's shared staging (two ranks with a core each: see `direct_pair`). The same on every rank.
    one_host: bool,
    /// Every rank on this host, and more of them than its cores (`placement::crowded_host`):
    /// the same on every rank, so it may choose what the ranks must agree on.
    crowded_host: bool,
    /// Scratch buffers of the block collectives, kept between calls.
    scratch: blocks::scratch::Pool,
    /// Released with a plain store, not a `Mutex`'s locked instruction, which would wait for
    /// the collective's last store into a peer's memory to land (see `SpinLock`).
    inner: SpinLock<Inner>,
}

pub(crate) struct Inner {
    broken: Option<String>,
    puts: Puts,
    counter: Option<CounterBcast>,
    rdmc: Option<Rdmc>,
    staging: Option<bcast::SharedStaging>,
    barrier: Option<barrier::Barrier>,
    reduction: Option<reduce::ReduceState>,
    /// Each rank's group (host or `RDCOLL_CLUSTER`) for the hybrid broadcast.
    groups: Option<Vec<u64>>,
    /// The ranks were found to share their settings (`settings::check_agreement`).
    settings_agreed: bool,
    /// Multicasts run so far (each draws its peer graph from a seed that includes it).
    multicasts: u64,
}

impl Collectives {
    /// The collectives of the communicator with context `context` over `engine`, with
    /// settings from the environment. Not collective: buffers are set up (collectively) by the
    /// first collective that needs them.
    pub fn new(engine: Arc<Engine>, context: Context) -> Result<Collectives> {
        let cfg = CollConfig::from_env_for(engine.ni().fabric().as_ref())?;
        Collectives::with_config(engine, context, cfg)
    }

    /// Like [`new`](Collectives::new), with explicit settings.
    pub fn with_config(
        engine: Arc<Engine>,
        context: Context,
        cfg: CollConfig,
    ) -> Result<Collectives> {
        let whole = Members::whole(engine.rank(), engine.size());
        Collectives::with_members(engine, context, cfg, whole)
    }

    /// The collectives of a communicator over `members` (ranks numbered as the communicator
    /// numbers them), with settings `cfg`.
    pub fn with_members(
        engine: Arc<Engine>,
        context: Context,
        cfg: CollConfig,
        members: Members,
    ) -> Result<Collectives> {
        let one_host = placement::one_host(&engine);
        if cfg.bcast_algorithm == BcastAlgorithm::Shared && !one_host {
            return Err(CollError::InvalidArgument(format!(
                "the shared broadcast needs ranks that share memory (shm, local), not {}",
                engine.ni().fabric().backend()
            )));
        }
        let ct = engine.ni().ct_alloc()?;
        let crowded_host = placement::crowded_host(&engine);
        let bcast_small_max = cfg.bcast_small_max.unwrap_or(if one_host {
            config::SHARED_BCAST_SMALL_MAX
        } else {
            config::DEFAULT_BCAST_SMALL_MAX
        });
        Ok(Collectives {
            bcast_small_max,
            one_host,
            crowded_host,
            waiter: Waiter::new(engine, members),
            scratch: Default::default(),
            context: context | COLLECTIVE_CONTEXT_BIT,
            cfg,
            inner: SpinLock::new(Inner {
                broken: None,
                puts: Puts { ct, issued: 0 },
                counter: None,
                rdmc: None,
                staging: None,
                barrier: None,
                reduction: None,
                groups: None,
                settings_agreed: false,
                multicasts: 0,
            }),
        })
    }

    /// The settings in use.
    pub fn config(&self) -> &CollConfig {
        &self.cfg
    }

    fn check_root(&self, root: Rank) -> Result<()> {
        let n = self.waiter.size();
        if root as usize >= n {
            return Err(CollError::InvalidArgument(format!(
                "root {root} is not in this communicator of {n} ranks"
            )));
        }
        Ok(())
    }

    /// Refuses a collective once the communicator is broken (for the collectives over
    /// point-to-point messages, which need none of the set-up).
    fn usable(&self) -> Result<()> {
        match &self.inner.lock().broken {
            Some(why) => Err(CollError::Broken(why.clone())),
            None => Ok(()),
        }
    }

    /// Runs a collective step: refused once the communicator is broken; an error of the
    /// outer result breaks it, one of the inner result (reported after a collective that
    /// completed consistently everywhere) does not.
    fn guarded<T>(&self, f: impl FnOnce(&mut Inner) -> Result<Result<T>>) -> Result<T> {
        let mut inner = self.inner.lock();
        if let Some(why) = &inner.broken {
            return Err(CollError::Broken(why.clone()));
        }
        let result = self
            .waiter
            .set_up(self.context)
            .and_then(|()| self.agree_on_settings(&mut inner))
            .and_then(|()| f(&mut inner));
        match result {
            Ok(r) => r,
            Err(e) => {
                // A rank that said its collective failed and then left is the cause, not its
                // absence (a put to it, say, found it gone before a wait saw its flag), nor
                // the regions it withdrew as it dropped the communicator (a put into its area
                // found the key stale).
                let e = match e {
                    CollError::Transport(
                        TransportError::PeerFailed(r) | TransportError::BadKey { rank: r, .. },
                    ) if self.waiter.has_aborted(self.waiter.comm_rank(r)) => {
                        CollError::Broken(format!("the collective failed on rank {r}"))
                    }
                    e => e,
                };
                inner.broken = Some(e.to_string());
                // Ranks waiting for this one would otherwise wait for ever.
                self.waiter.abort(&mut inner.puts);
                Err(e)
            }
        }
    }

    /// Compares the shared settings of every rank, once (collective: with the first
    /// collective's set-up).
    fn agree_on_settings(&self, inner: &mut Inner) -> Result<()> {
        if !inner.settings_agreed {
            settings::check_agreement(&self.waiter, self.context, &self.cfg)?;
            inner.settings_agreed = true;
        }
        Ok(())
    }

    /// Returns once every rank of the communicator has called `barrier`.
    pub fn barrier(&self) -> Result<()> {
        self.agree(|| agreement::Call::new(agreement::CallKind::Barrier))?;
        self.guarded(|inner| {
            if inner.barrier.is_none() {
                inner.barrier = Some(barrier::Barrier::new(
                    &self.waiter,
                    self.context,
                    self.cfg.barrier_algorithm,
                )?);
            }
            let Inner { barrier, puts, .. } = inner;
            barrier
                .as_mut()
                .expect("set just above")
                .wait(&self.waiter, puts)?;
            Ok(Ok(()))
        })
    }

    /// Each rank's group for the hybrid broadcast (exchanged once).
    fn groups<'a>(&self, inner: &'a mut Inner) -> Result<&'a [u64]> {
        if inner.groups.is_none() {
            let key = match &self.cfg.cluster {
                Some(c) => format!("cluster:{c}"),
                None => format!("host:{}", rdcoll_transport::bootstrap::host_identity()),
            };
            let mine = fnv1a(key.as_bytes()).to_le_bytes();
            let all = area::allgather(&self.waiter, self.context, &mine)?;
            let ids = all
                .iter()
                .map(|b| u64::from_le_bytes(b[..8].try_into().unwrap_or_default()))
                .collect();
            inner.groups = Some(ids);
        }
        Ok(inner.groups.as_deref().unwrap_or_default())
    }
}

/// Longest a dropped communicator waits for the other ranks to copy out its last broadcast.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Drop for Collectives {
    fn drop(&mut self) {
        let inner = self.inner.get_mut();
        if let Some(staging) = &inner.staging {
            staging.drain(&self.waiter, DRAIN_LIMIT);
        }
        let ni = self.waiter.engine().ni();
        let _ = ni.ct_free(inner.puts.ct);
        if let Some(rdmc) = &inner.rdmc {
            let _ = ni.ct_free(rdmc.counter());
        }
    }
}

/// FNV-1a: a stable hash of a group's name.
fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_from(0xcbf2_9ce4_8422_2325, bytes)
}

/// FNV-1a of `bytes` continued from `hash`.
fn fnv1a_from(hash: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(hash, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

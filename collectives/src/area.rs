//! Registered memory every rank of a communicator can write into: each rank allocates one
//! region from its fabric (on shm it lives in the shared segment, so a peer's put is a direct
//! store) and learns everyone else's descriptor once, at creation (paper 004 Section 3.1,
//! static registration).

use std::sync::atomic::AtomicU8;

use rdcoll_offload::p2p::{Context, Fetch, Group, Source, TagSel};
use rdcoll_offload::OffloadError;
use rdcoll_transport::{Rank, Region, RemoteAddr, RemoteRegion, REMOTE_REGION_BYTES};

use crate::error::{CollError, Result};
use crate::progress::Waiter;

/// Tag of the set-up exchanges (on the collectives' own context).
const SETUP_TAG: u32 = 0xC011_0000;

/// One rank's region and every rank's descriptor of its own.
pub(crate) struct Area {
    local: Region,
    remote: Vec<RemoteRegion>,
}

impl Area {
    /// Allocates `len` zeroed bytes and exchanges descriptors. Collective. A rank that cannot
    /// allocate (out of registered regions) still takes part, saying so, so that every rank
    /// fails the set-up instead of the others waiting for it.
    pub(crate) fn new(w: &Waiter, context: Context, len: usize) -> Result<Area> {
        let local = w.fabric().alloc_region(len);
        // [allocated?, descriptor...]
        let mut record = [0u8; 1 + REMOTE_REGION_BYTES];
        if let Ok(region) = &local {
            record[0] = 1;
            record[1..].copy_from_slice(&region.remote().to_bytes());
        }
        let all = allgather(w, context, &record)?;
        let local = local?;
        let failed: Vec<usize> = (0..all.len()).filter(|&r| all[r][0] == 0).collect();
        if !failed.is_empty() {
            return Err(CollError::Broken(format!(
                "rank(s) {failed:?} could not allocate the collectives' memory \
                 (out of registered regions: RDCOLL_MAX_REGIONS?)"
            )));
        }
        let remote = all
            .iter()
            .map(|b| RemoteRegion::from_bytes(&b[1..]))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        if remote.iter().any(|r| r.len < len) {
            return Err(CollError::Mismatch(
                "ranks set up collective buffers of different sizes (different settings?)".into(),
            ));
        }
        Ok(Area { local, remote })
    }

    /// This rank's region.
    pub(crate) fn local(&self) -> &Region {
        &self.local
    }

    /// `offset` in `rank`'s region.
    pub(crate) fn at(&self, rank: Rank, offset: usize) -> RemoteAddr {
        self.remote[rank as usize].at(offset)
    }

    /// The byte at `offset` of this rank's region, for flags peers write.
    pub(crate) fn flag(&self, offset: usize) -> &AtomicU8 {
        // Offsets are computed from the area's own layout, which fits the region.
        self.local
            .atomic_u8(offset)
            .expect("collective flag offset inside its area")
    }
}

/// Every rank's `mine` (all of the same length), in rank order. Collective. The receives are
/// posted before anything is sent, so the exchange needs no eager send (a record longer than
/// the eager limit goes by rendezvous).
pub(crate) fn allgather(w: &Waiter, context: Context, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
    let engine = w.engine();
    let (me, n) = (w.rank(), w.size() as Rank);
    let mut out: Vec<Vec<u8>> = (0..n)
        .map(|p| {
            if p == me {
                mine.to_vec()
            } else {
                vec![0u8; mine.len()]
            }
        })
        .collect();
    let group = Group::new();
    let mut posted = Vec::with_capacity(n as usize);
    let mut exchange = || -> std::result::Result<(), OffloadError> {
        for (peer, buf) in out.iter_mut().enumerate() {
            if peer as Rank == me {
                continue;
            }
            let from = Source::Rank(w.fabric_rank(peer as Rank));
            let tag = TagSel::Value(SETUP_TAG);
            // Every rank sends to every other meanwhile: its senders are busy.
            let (ptr, len) = (buf.as_mut_ptr(), buf.len());
            // SAFETY: `buf` stays in `out`, untouched, until every request of `group` has
            // ended: waited for below, or by `wait_group` when anything fails.
            let id = unsafe { engine.irecv_in(group, ptr, len, from, tag, context, Fetch::Read)? };
            posted.push((peer as Rank, id));
        }
        for peer in (0..n).filter(|&p| p != me) {
            engine.send_from(mine, w.fabric_rank(peer), SETUP_TAG, context)?;
        }
        Ok(())
    };
    let started = exchange();
    let mut result = started.map_err(CollError::from);
    for &(peer, id) in &posted {
        if result.is_err() {
            break;
        }
        result = match engine.wait(id) {
            Ok(st) if st.len == mine.len() => Ok(()),
            Ok(st) => Err(CollError::Mismatch(format!(
                "rank {peer} sent a {}-byte set-up record, expected {}",
                st.len,
                mine.len()
            ))),
            Err(OffloadError::Truncated { .. }) => Err(CollError::Mismatch(format!(
                "rank {peer} sent a longer set-up record than {} bytes",
                mine.len()
            ))),
            Err(other) => Err(other.into()),
        };
    }
    if result.is_err() {
        // Nothing may still write into `out` once it is dropped.
        for &(_, id) in &posted {
            let _ = engine.cancel(id);
        }
        engine.wait_group(group);
    }
    result.map(|()| out)
}

const _: () = assert!(REMOTE_REGION_BYTES <= 64);

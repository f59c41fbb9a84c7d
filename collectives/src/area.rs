//! Registered memory every rank of a communicator can write into: each rank allocates one
//! region from its fabric (on shm it lives in the shared segment, so a peer's put is a direct
//! store) and learns everyone else's descriptor once, at creation (paper 004 Section 3.1,
//! static registration).

use std::sync::atomic::AtomicU8;

use rdcoll_offload::p2p::{Context, Engine, Source, TagSel};
use rdcoll_transport::{Rank, Region, RemoteAddr, RemoteRegion, REMOTE_REGION_BYTES};

use crate::error::{CollError, Result};

/// Tag of the set-up exchanges (on the collectives' own context).
const SETUP_TAG: u32 = 0xC011_0000;

/// One rank's region and every rank's descriptor of its own.
pub(crate) struct Area {
    local: Region,
    remote: Vec<RemoteRegion>,
}

impl Area {
    /// Allocates `len` zeroed bytes and exchanges descriptors. Collective.
    pub(crate) fn new(engine: &Engine, context: Context, len: usize) -> Result<Area> {
        let local = engine.ni().fabric().alloc_region(len)?;
        let all = allgather(engine, context, &local.remote().to_bytes())?;
        let remote = all
            .iter()
            .map(|b| RemoteRegion::from_bytes(b))
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

/// Every rank's `mine` (all of the same length), in rank order. Collective.
pub(crate) fn allgather(engine: &Engine, context: Context, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
    let (me, n) = (engine.rank(), engine.size() as Rank);
    for peer in (0..n).filter(|&p| p != me) {
        engine.send_from(mine, peer, SETUP_TAG, context)?;
    }
    let mut out = Vec::with_capacity(n as usize);
    for peer in 0..n {
        if peer == me {
            out.push(mine.to_vec());
            continue;
        }
        let mut buf = vec![0u8; mine.len()];
        let st = engine
            .recv_into(
                &mut buf,
                Source::Rank(peer),
                TagSel::Value(SETUP_TAG),
                context,
            )
            .map_err(|e| match e {
                rdcoll_offload::OffloadError::Truncated { .. } => CollError::Mismatch(format!(
                    "rank {peer} sent a longer set-up record than {} bytes",
                    mine.len()
                )),
                other => other.into(),
            })?;
        if st.len != mine.len() {
            return Err(CollError::Mismatch(format!(
                "rank {peer} sent a {}-byte set-up record, expected {}",
                st.len,
                mine.len()
            )));
        }
        out.push(buf);
    }
    Ok(out)
}

const _: () = assert!(REMOTE_REGION_BYTES <= 64);

//! `sim`: a simulated fabric. Ranks are threads of this process running the real code; the
//! network and the clock are modelled. Virtual time ([`Fabric::now`]) moves only while every
//! rank's thread sleeps in the fabric, to the next time anything happens (a conservative
//! discrete-event simulation, as SimGrid's SMPI runs MPI programs), so a run is deterministic:
//! the same program gives the same deliveries at the same virtual times every time.
//!
//! The network ([`SimConfig`], [`NetworkModel`]) charges per-operation overhead and latency,
//! and either shares every link's bandwidth max-min fairly among the transfers crossing it
//! (flow level) or moves packets through finite switch buffers with credit flow control
//! (packet level), on a single switch, a fat tree, a Dragonfly or clusters joined by WAN
//! links. With
//! [`payload_free_above`](SimConfig::payload_free_above) long transfers move no bytes, for
//! runs at sizes no memory could hold.
//!
//! Each endpoint must belong to one thread that either waits in the fabric or drops the
//! endpoint (leaving the job): a thread that holds an endpoint and waits on anything else
//! keeps virtual time from moving.

mod config;
mod deliver;
mod dragonfly;
mod network;
mod packets;
mod transfer;
mod world;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use config::{DragonflyRouting, NetworkModel, SimConfig, Topology, WanChange, WanLink};

use crate::error::{Result, TransportError};
use crate::fabric::Fabric;
use crate::region::Region;
use crate::types::{Event, OpId, Rank, RemoteAddr};
use transfer::What;
use world::World;

/// One rank of a simulated job; dropping it is that rank leaving (peers see `PeerFailed`).
pub struct SimFabric {
    rank: Rank,
    world: Arc<World>,
    next_op: AtomicU64,
}

/// Creates the endpoints of a simulated job, one per rank, each to be moved into the thread
/// that runs that rank.
pub fn create(cfg: SimConfig) -> Result<Vec<SimFabric>> {
    let n = cfg.ranks;
    let world = World::new(cfg)?;
    Ok((0..n)
        .map(|r| SimFabric {
            rank: r as Rank,
            world: world.clone(),
            next_op: AtomicU64::new(0),
        })
        .collect())
}

impl SimFabric {
    /// A handle on the whole simulated job, for its launcher.
    pub fn job(&self) -> SimJob {
        SimJob(self.world.clone())
    }

    /// Makes this rank dead to its peers, as a crash would: operations toward it fail, and
    /// each peer sees `PeerFailed` after whatever this rank sent it before.
    pub fn fail(&self) {
        self.world.fail(self.rank);
    }

    fn live_peer(&self, rank: Rank) -> Result<()> {
        if rank as usize >= self.world.cfg.ranks {
            return Err(TransportError::InvalidRank {
                rank,
                size: self.world.cfg.ranks,
            });
        }
        if self.world.knows_failed(self.rank, rank) {
            return Err(TransportError::PeerFailed(rank));
        }
        Ok(())
    }

    fn next_op(&self) -> OpId {
        OpId(self.next_op.fetch_add(1, Ordering::Relaxed))
    }

    /// Whether a transfer of `len` bytes moves no bytes (payload-free runs).
    fn payload_free(&self, len: usize) -> bool {
        self.world.cfg.payload_free_above.is_some_and(|l| len > l)
    }

    fn start_put(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        imm: Option<u64>,
        flag: Option<u8>,
    ) -> Result<OpId> {
        src.check_range(src_offset, len)?;
        self.live_peer(dst.rank)?;
        // The bytes as they are now: the caller leaves them alone until completion anyway,
        // and the simulation then holds no handle on the caller's memory.
        let bytes = if self.payload_free(len) {
            None
        } else {
            let mut buf = vec![0u8; len];
            src.read(src_offset, &mut buf)?;
            Some(buf)
        };
        let op = self.next_op();
        let what = What::Put {
            bytes,
            len,
            dst,
            imm,
            flag,
            op,
        };
        self.world.issue(self.rank, dst.rank, what);
        Ok(op)
    }
}

/// The whole simulated job, for its launcher (`rdcoll::sim::run`).
#[derive(Clone)]
pub struct SimJob(Arc<World>);

impl SimJob {
    /// Ends the job, as a launcher does when a rank fails: every rank is marked failed and
    /// told of every other at once.
    pub fn end(&self) {
        self.0.end();
    }

    /// Virtual time since the start.
    pub fn now(&self) -> Duration {
        self.0.now()
    }
}

impl Fabric for SimFabric {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> usize {
        self.world.cfg.ranks
    }
    fn backend(&self) -> &'static str {
        "sim"
    }

    fn alloc_region(&self, len: usize) -> Result<Region> {
        let rank = self.rank;
        self.world.tables[rank as usize].insert(|key, p| Region::alloc_lazy(rank, key, len, p))
    }

    unsafe fn register_memory(&self, ptr: *mut u8, len: usize) -> Result<Region> {
        let rank = self.rank;
        self.world.tables[rank as usize].insert(|key, p| Region::external(rank, key, ptr, len, p))
    }

    fn put(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        imm: Option<u64>,
    ) -> Result<OpId> {
        self.start_put(src, src_offset, len, dst, imm, None)
    }

    fn put_flag(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        flag: u8,
    ) -> Result<OpId> {
        self.start_put(src, src_offset, len, dst, None, Some(flag))
    }

    fn get(&self, dst: &Region, dst_offset: usize, len: usize, src: RemoteAddr) -> Result<OpId> {
        dst.check_range(dst_offset, len)?;
        if dst.rank() != self.rank {
            return Err(TransportError::InvalidArgument(format!(
                "a get into rank {}'s region from rank {}",
                dst.rank(),
                self.rank
            )));
        }
        self.live_peer(src.rank)?;
        let op = self.next_op();
        let what = What::Get {
            src,
            len,
            dst_key: dst.key(),
            dst_offset,
            bytes: None,
            op,
        };
        self.world.issue(self.rank, src.rank, what);
        Ok(op)
    }

    fn send(&self, dest: Rank, data: &[u8]) -> Result<()> {
        self.send_parts(dest, &[data])
    }

    fn send_parts(&self, dest: Rank, parts: &[&[u8]]) -> Result<()> {
        crate::types::check_message_len(parts)?;
        self.live_peer(dest)?;
        let data = crate::types::payload_of(parts);
        self.world.issue(self.rank, dest, What::Message(data));
        Ok(())
    }

    fn poll(&self) -> Result<Option<Event>> {
        Ok(self.world.inboxes[self.rank as usize].pop())
    }

    fn pending(&self) -> bool {
        !self.world.inboxes[self.rank as usize].is_empty()
    }

    fn block(&self, timeout: Duration) {
        self.world.block(self.rank, timeout, &|| false)
    }

    fn block_unless(&self, timeout: Duration, ready: &dyn Fn() -> bool) {
        self.world.block(self.rank, timeout, ready)
    }

    fn now(&self) -> Duration {
        self.world.now()
    }

    fn clock_is_virtual(&self) -> bool {
        true
    }

    /// Whether this rank has learnt that `rank` failed: after everything `rank` sent it
    /// before failing has arrived.
    fn is_failed(&self, rank: Rank) -> bool {
        self.world.knows_failed(self.rank, rank)
    }
}

impl Drop for SimFabric {
    fn drop(&mut self) {
        self.world.fail(self.rank);
        self.world.leave(self.rank);
    }
}

#[cfg(test)]
mod tests;

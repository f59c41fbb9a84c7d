//! `local`: ranks are threads of one process. Puts and gets are `memcpy`s between registered
//! regions done by the initiator; active messages go straight into the target's event queue.
//! Used by tests, examples and users' own unit tests.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Result, TransportError};
use crate::fabric::Fabric;
use crate::region::{Region, RegionTable};
use crate::types::{Event, OpId, Rank, RemoteAddr};
use crate::wait::EventQueue;

struct Endpoint {
    table: Arc<RegionTable>,
    events: EventQueue,
    alive: AtomicBool,
}

struct World {
    endpoints: Vec<Endpoint>,
    start: Instant,
}

/// One rank of an in-process job; dropping it is that rank leaving (peers see `PeerFailed`).
pub struct LocalFabric {
    rank: Rank,
    world: Arc<World>,
    next_op: AtomicU64,
}

/// Creates the endpoints of an `n`-rank in-process job, one per rank, to be moved into threads.
pub fn create(n: usize) -> Result<Vec<LocalFabric>> {
    create_with_limit(n, crate::FabricConfig::default().max_regions)
}

/// Like [`create`], with at most `max_regions` live regions per rank.
pub fn create_with_limit(n: usize, max_regions: usize) -> Result<Vec<LocalFabric>> {
    if n == 0 || n > u32::MAX as usize {
        return Err(TransportError::InvalidArgument(format!(
            "a job of {n} ranks"
        )));
    }
    let world = Arc::new(World {
        endpoints: (0..n)
            .map(|r| Endpoint {
                table: RegionTable::new(r as Rank, max_regions),
                events: EventQueue::default(),
                alive: AtomicBool::new(true),
            })
            .collect(),
        start: Instant::now(),
    });
    Ok((0..n)
        .map(|r| LocalFabric {
            rank: r as Rank,
            world: world.clone(),
            next_op: AtomicU64::new(0),
        })
        .collect())
}

impl LocalFabric {
    /// A transfer that found its remote region gone because its owner died meanwhile failed
    /// for the death (`PeerFailed`), not for a bad key: the owner dropped its regions on the
    /// way out.
    fn blame_death(&self, rank: Rank, result: Result<()>) -> Result<()> {
        match result {
            Err(TransportError::BadKey { .. }) if self.is_failed(rank) => {
                Err(TransportError::PeerFailed(rank))
            }
            other => other,
        }
    }

    fn peer(&self, rank: Rank) -> Result<&Endpoint> {
        let ep = self
            .world
            .endpoints
            .get(rank as usize)
            .ok_or(TransportError::InvalidRank {
                rank,
                size: self.world.endpoints.len(),
            })?;
        if ep.alive.load(Ordering::Acquire) {
            Ok(ep)
        } else {
            Err(TransportError::PeerFailed(rank))
        }
    }

    fn me(&self) -> &Endpoint {
        &self.world.endpoints[self.rank as usize]
    }

    fn complete(&self, result: Result<()>) -> OpId {
        let op = OpId(self.next_op.fetch_add(1, Ordering::Relaxed));
        self.me().events.push(Event::Completed { op, result });
        op
    }
}

impl Fabric for LocalFabric {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> usize {
        self.world.endpoints.len()
    }
    fn backend(&self) -> &'static str {
        "local"
    }

    fn alloc_region(&self, len: usize) -> Result<Region> {
        let rank = self.rank;
        self.me()
            .table
            .insert(|key, p| Region::alloc_owned(rank, key, len, p))
    }

    unsafe fn register_memory(&self, ptr: *mut u8, len: usize) -> Result<Region> {
        let rank = self.rank;
        self.me()
            .table
            .insert(|key, p| Region::external(rank, key, ptr, len, p))
    }

    fn put(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        imm: Option<u64>,
    ) -> Result<OpId> {
        src.check_range(src_offset, len)?;
        let target = self.peer(dst.rank)?;
        let result = self.blame_death(dst.rank, target.table.put_from(src, src_offset, len, dst));
        if result.is_ok() {
            if let Some(imm) = imm {
                target.events.push(Event::Immediate {
                    src: self.rank,
                    imm,
                });
            }
        }
        Ok(self.complete(result))
    }

    fn put_flag(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        flag: u8,
    ) -> Result<OpId> {
        src.check_range(src_offset, len)?;
        let target = self.peer(dst.rank)?;
        let result = self.blame_death(
            dst.rank,
            target.table.put_flag_from(src, src_offset, len, dst, flag),
        );
        // The target may be blocked waiting for exactly this byte.
        target.events.wake_all();
        Ok(self.complete(result))
    }

    fn put_now(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        flag: Option<u8>,
    ) -> Result<crate::PutStatus> {
        src.check_range(src_offset, len)?;
        let target = self.peer(dst.rank)?;
        let result = match flag {
            Some(v) => target.table.put_flag_from(src, src_offset, len, dst, v),
            None => target.table.put_from(src, src_offset, len, dst),
        };
        self.blame_death(dst.rank, result)?;
        if flag.is_some() {
            target.events.wake_all();
        }
        Ok(crate::PutStatus::Done)
    }

    fn load_now(&self, dst: &mut [u8], src: RemoteAddr) -> Result<bool> {
        let target = self.peer(src.rank)?;
        let read = target
            .table
            .lookup(src.key)
            .and_then(|r| r.read(src.offset, dst));
        self.blame_death(src.rank, read).map(|()| true)
    }

    fn gets_into_private(&self) -> bool {
        true
    }

    fn gets_copy_in_call(&self, _peer: Rank) -> bool {
        true
    }

    fn get(&self, dst: &Region, dst_offset: usize, len: usize, src: RemoteAddr) -> Result<OpId> {
        dst.check_range(dst_offset, len)?;
        let target = self.peer(src.rank)?;
        let result = self.blame_death(src.rank, target.table.get_into(dst, dst_offset, len, src));
        Ok(self.complete(result))
    }

    fn send(&self, dest: Rank, data: &[u8]) -> Result<()> {
        self.send_parts(dest, &[data])
    }

    fn send_parts(&self, dest: Rank, parts: &[&[u8]]) -> Result<()> {
        crate::types::check_message_len(parts)?;
        let target = self.peer(dest)?;
        target.events.push(Event::Message {
            src: self.rank,
            data: crate::types::payload_of(parts),
        });
        Ok(())
    }

    fn poll(&self) -> Result<Option<Event>> {
        Ok(self.me().events.pop())
    }

    fn pending(&self) -> bool {
        !self.me().events.is_empty()
    }

    fn block(&self, timeout: Duration) {
        self.me().events.block(timeout)
    }

    fn block_unless(&self, timeout: Duration, ready: &dyn Fn() -> bool) {
        self.me().events.block_unless(timeout, ready)
    }

    fn now(&self) -> Duration {
        self.world.start.elapsed()
    }

    fn is_failed(&self, rank: Rank) -> bool {
        self.world
            .endpoints
            .get(rank as usize)
            .is_some_and(|e| !e.alive.load(Ordering::Acquire))
    }
}

impl LocalFabric {
    /// Makes this rank dead to its peers at once, as a crash would: their pending and later
    /// operations with it fail with `PeerFailed`. For tests of failure handling, where a rank
    /// "crashes" by unwinding, which would otherwise drop its regions (and so make peers' gets
    /// fail with `BadKey`) before the rank itself is gone. Dropping the rank does the same.
    pub fn fail(&self) {
        if !self.me().alive.swap(false, Ordering::AcqRel) {
            return;
        }
        for (r, ep) in self.world.endpoints.iter().enumerate() {
            if r as Rank != self.rank && ep.alive.load(Ordering::Acquire) {
                ep.events.push(Event::PeerFailed { rank: self.rank });
            }
        }
    }
}

impl LocalFabric {
    /// A handle on the whole job this rank belongs to, for its launcher.
    pub fn job(&self) -> LocalJob {
        LocalJob(self.world.clone())
    }
}

/// The whole in-process job, for its launcher (`rdcoll::local::run`).
#[derive(Clone)]
pub struct LocalJob(Arc<World>);

impl LocalJob {
    /// Ends the job, as a launcher does when one of its ranks fails: every rank still alive is
    /// marked failed and every rank told, so that whatever each waits for (a message from any
    /// rank among them) ends with `PeerFailed` instead of waiting for ever.
    pub fn end(&self) {
        let endpoints = &self.0.endpoints;
        let ended: Vec<Rank> = (0..endpoints.len())
            .filter(|&r| endpoints[r].alive.swap(false, Ordering::AcqRel))
            .map(|r| r as Rank)
            .collect();
        for (r, ep) in endpoints.iter().enumerate() {
            for &gone in ended.iter().filter(|&&g| g as usize != r) {
                ep.events.push(Event::PeerFailed { rank: gone });
            }
        }
    }
}

impl Drop for LocalFabric {
    fn drop(&mut self) {
        self.fail();
    }
}

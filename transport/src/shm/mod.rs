//! `shm`: processes on one host.
//!
//! Each rank creates one segment (`layout`) holding its control words, its region table, the
//! rings its peers write messages into, and a heap. Every rank maps every segment; each is
//! unlinked as soon as all have mapped it.
//!
//! - Messages: one SPSC ring per ordered pair (`ring`), in the receiver's segment; no locks
//!   shared between processes. A sender whose ring is full keeps a private backlog, flushed by
//!   its own progress, and the receiver wakes it when space frees up.
//! - Regions the fabric allocates live in the heap: a peer's put is a direct store, a get a
//!   direct load, after a seqlocked check of the owner's region table.
//! - Memory the caller registers is reached with `process_vm_readv` (single copy): gets by the
//!   initiator, puts by the target pulling from the initiator. When the kernel refuses (EPERM),
//!   or with `RDCOLL_SHM_CMA=0`, data goes through bounce chunks in the rings instead.
//! - Waiting: spin, yield, then sleep on a futex in the segment; senders wake sleepers only when
//!   one is registered (a Dekker-style flag, so there is no syscall on the fast path). The
//!   flag's store-load ordering is paid by the sleeper with a membarrier where every rank has
//!   a core and the kernel allows it (senders then need no fence), else by the senders.
//! - Liveness: a watchdog thread waits on pidfds of all peers; a dead peer fails every pending
//!   and later operation that involves it.

mod copy_slot;
#[cfg(test)]
mod fuzz;
mod heap;
mod layout;
mod liveness;
mod os;
mod producer;
mod pull;
mod push;
mod records;
mod ring;
mod rma;
mod segment;
mod service;
mod setup;
mod split;
mod table;

use std::collections::HashMap;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Result, TransportError};
use crate::fabric::Fabric;
use crate::region::{Backing, Publisher, Region, RegionTable};
use crate::spin::SpinLock;
use crate::types::{Event, OpId, Rank, RegionKey, RemoteAddr};
use heap::HeapAlloc;
use layout::{Layout, View};
use producer::{ProducerSide, RingRef};
pub(crate) use records::PutTail;
use records::*;
pub(crate) use segment::remove_job_segments;
use segment::Segment;
use table::{KIND_EXTERNAL, KIND_HEAP};

pub(crate) enum PendingKind {
    Put {
        src: Region,
        src_off: usize,
        tail: PutTail,
    },
    Get {
        dst: Region,
        dst_off: usize,
        received: usize,
    },
}

pub(crate) struct Pending {
    peer: Rank,
    key: RegionKey,
    offset: usize,
    len: usize,
    kind: PendingKind,
}

pub(crate) struct Inner {
    rank: Rank,
    size: usize,
    start: Instant,
    layout: Layout,
    segs: Vec<Arc<Segment>>,
    pids: Vec<i32>,
    table: Arc<RegionTable>,
    heap: Arc<Mutex<HeapAlloc>>,
    /// Events raised by this rank's own calls (completions, failures).
    local_events: crate::wait::EventQueue,
    producers: Vec<SpinLock<ProducerSide>>,
    /// The ring from us into each rank's segment.
    outgoing: Vec<RingRef>,
    /// The ring from each rank into ours.
    incoming: Vec<RingRef>,
    any_backlog: AtomicBool,
    consumers: SpinLock<Option<service::Consumers>>,
    /// The consumers are with an exclusive poller (`Fabric::take_poller`) until it is dropped.
    poller_taken: AtomicBool,
    pending: Mutex<HashMap<u64, Pending>>,
    failed: Vec<AtomicBool>,
    /// Peers known gone (process exited, fabric closed) whose rings may still hold records:
    /// they are failed once those are drained, so nothing they sent is lost.
    dead: Vec<AtomicBool>,
    any_dead: AtomicBool,
    cma_ok: Vec<AtomicBool>,
    next_op: AtomicU64,
    /// How long a dropped fabric waits for a peer that takes none of its queued records.
    close_patience: Duration,
    /// Every rank registered for expedited membarriers: a rank about to sleep runs one, so a
    /// sender's check for sleepers needs only a compiler fence after its release store (see
    /// `ring_doorbell`). Otherwise the sender fences.
    asymmetric_fence: bool,
    /// Large puts into a peer's registered memory are split between the two processes
    /// (`split`): every rank has a core, and `RDCOLL_SHM_SPLIT_PUTS` allows it.
    split_puts: bool,
    /// `RDCOLL_SHM_FAIL_PUSHES` (testing): the initiator's write of a pushed put, or of its
    /// part of a split put, fails midway.
    fail_pushes: bool,
    /// Per peer: the kernel refused a `process_vm_writev` into it (`push`); its puts are
    /// pulled by the target from then on.
    push_refused: Vec<AtomicBool>,
    /// Split puts from a peer whose first part we pulled, waiting for its `K_PUSHED`.
    halves: Mutex<HashMap<(Rank, u64), split::PulledPart>>,
}

/// Unpublishes regions from both the shared table and the local one.
struct ShmPublisher {
    inner: std::sync::Weak<Inner>,
}

impl Publisher for ShmPublisher {
    fn unpublish(&self, key: RegionKey) {
        if let Some(inner) = self.inner.upgrade() {
            let drained = inner.retract(key);
            inner.table.forget(key, drained);
        }
    }
}

/// One rank's shared-memory endpoint.
pub struct ShmFabric {
    inner: Arc<Inner>,
    publisher: Arc<ShmPublisher>,
    watchdog: Option<liveness::Watchdog>,
}

impl Inner {
    fn view(&self, rank: Rank) -> View<'_> {
        View {
            seg: &self.segs[rank as usize],
            layout: self.layout,
        }
    }

    fn check_peer(&self, rank: Rank) -> Result<()> {
        if rank as usize >= self.size {
            return Err(TransportError::InvalidRank {
                rank,
                size: self.size,
            });
        }
        if self.failed[rank as usize].load(Ordering::Acquire)
            || self.dead[rank as usize].load(Ordering::Acquire)
        {
            return Err(TransportError::PeerFailed(rank));
        }
        Ok(())
    }

    /// Takes back an operation whose request could not be sent: `Err` if nothing will report
    /// it, `Ok(op)` if a peer failure already queued its completion.
    fn abandon(&self, op: OpId, err: TransportError) -> Result<OpId> {
        if self.pending.lock().remove(&op.0).is_some() {
            Err(err)
        } else {
            Ok(op)
        }
    }

    fn new_op(&self) -> OpId {
        OpId(self.next_op.fetch_add(1, Ordering::Relaxed))
    }

    /// Queues an event for this rank and wakes a sleeping thread of it.
    fn push_local(&self, ev: Event) {
        self.local_events.push(ev);
        self.ring_doorbell(self.rank);
    }

    /// Wakes `rank` if any of its threads sleeps; called after every publication it may wait
    /// for (a ring record's sequence word, a flag byte, the local queue's length). The
    /// publication and the look at `sleepers` must not be reordered (a store-load pair), and
    /// neither may a sleeper's raising of `sleepers` and its last look for work (see
    /// `block_unless`): then either it sees our publication or we see it. With the asymmetric
    /// fence the sleeper's membarrier orders both sides, and here the compiler only must keep
    /// the order; otherwise this side pays a full fence.
    #[inline]
    fn ring_doorbell(&self, rank: Rank) {
        if self.asymmetric_fence {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
        let ring = &self.outgoing[rank as usize];
        if ring.sleepers().load(Ordering::Relaxed) > 0 {
            let v = self.view(rank);
            v.doorbell().fetch_add(1, Ordering::Release);
            os::futex_wake(v.doorbell());
        }
    }

    /// Writes one record into `dest`'s ring from us; false if the ring is full.
    #[inline]
    fn try_push(&self, dest: Rank, side: &mut ProducerSide, kind: u32, parts: &[&[u8]]) -> bool {
        let ring = &self.outgoing[dest as usize];
        // The ring from us to `dest` lives in dest's mapped segment and only this rank
        // (under the producer lock) writes it.
        // SAFETY: as just said.
        unsafe {
            side.ring
                .try_push(ring.data, self.layout.ring_bytes, ring.head(), kind, parts)
        }
    }

    /// Sends a record to `dest`, behind any backlog so order per pair holds.
    #[inline]
    fn send_record(&self, dest: Rank, kind: u32, parts: &[&[u8]]) -> Result<()> {
        self.check_peer(dest)?;
        let mut side = self.producers[dest as usize].lock();
        if side.backlog.is_empty() && self.try_push(dest, &mut side, kind, parts) {
            drop(side);
            self.ring_doorbell(dest);
            return Ok(());
        }
        self.backlog_record(dest, side, kind, parts);
        Ok(())
    }

    /// Queues a record that found its ring full (or others queued before it) in the
    /// producer's backlog; out of line, so the common path of `send_record` stays short.
    #[cold]
    #[inline(never)]
    fn backlog_record(
        &self,
        dest: Rank,
        mut side: crate::spin::SpinGuard<'_, ProducerSide>,
        kind: u32,
        parts: &[&[u8]],
    ) {
        let record = side.backlog_buffer(parts);
        side.backlog.push_back((kind, record));
        self.any_backlog.store(true, Ordering::Release);
        self.view(dest)
            .ring_producer_waiting(self.rank as usize)
            .store(1, Ordering::Release);
    }

    /// Moves backlogged records into rings that have room again.
    #[inline]
    fn flush_backlogs(&self) {
        if self.any_backlog.load(Ordering::Acquire) {
            self.flush_backlogs_now();
        }
    }

    /// [`flush_backlogs`](Inner::flush_backlogs) once one is known to exist: out of line, so
    /// every poll pays one load for it.
    #[cold]
    #[inline(never)]
    fn flush_backlogs_now(&self) {
        if !self.any_backlog.swap(false, Ordering::AcqRel) {
            return;
        }
        for dest in 0..self.size as Rank {
            let mut side = self.producers[dest as usize].lock();
            let mut pushed = false;
            while let Some((kind, bytes)) = side.backlog.pop_front() {
                if self.try_push(dest, &mut side, kind, &[&bytes]) {
                    pushed = true;
                    side.recycle(bytes);
                } else {
                    side.backlog.push_front((kind, bytes));
                    break;
                }
            }
            if !side.backlog.is_empty() {
                self.any_backlog.store(true, Ordering::Release);
                self.outgoing[dest as usize]
                    .waiting()
                    .store(1, Ordering::Release);
            }
            drop(side);
            if pushed {
                self.ring_doorbell(dest);
            }
        }
    }

    /// Address of heap byte `addr` of `rank`, as mapped here.
    fn heap_ptr(&self, rank: Rank, addr: usize, len: usize) -> Result<*mut u8> {
        self.segs[rank as usize].at(self.layout.heap_offset() + addr, len)
    }

    fn add_pending(&self, op: OpId, p: Pending) -> Result<()> {
        let mut pending = self.pending.lock();
        if self.failed[p.peer as usize].load(Ordering::Acquire) {
            return Err(TransportError::PeerFailed(p.peer));
        }
        pending.insert(op.0, p);
        Ok(())
    }

    /// Whether anything is ready for this rank's progress to pick up.
    fn anything_ready(&self) -> bool {
        !self.local_events.is_empty()
            || self.any_dead.load(Ordering::Acquire)
            || service::rings_ready(self)
    }
}

impl Fabric for ShmFabric {
    fn rank(&self) -> Rank {
        self.inner.rank
    }
    fn size(&self) -> usize {
        self.inner.size
    }
    fn backend(&self) -> &'static str {
        "shm"
    }

    fn alloc_region(&self, len: usize) -> Result<Region> {
        let inner = &self.inner;
        let rank = inner.rank;
        let block = inner.heap.lock().alloc_block(len);
        let weak: std::sync::Weak<dyn Publisher> = Arc::downgrade(&self.publisher) as _;
        let Some(heap::Block { off, used_before }) = block else {
            // The shared heap is full: fall back to private memory, reached by peers through
            // cross-memory attach like registered memory.
            return inner.table.insert_via(weak, |key, p| {
                let r = Region::alloc_owned(rank, key, len, p)?;
                inner.publish(key, KIND_EXTERNAL, r.base_addr(), len);
                Ok(r)
            });
        };
        let ptr = match inner.heap_ptr(rank, off, len) {
            Ok(p) => p,
            Err(e) => {
                inner.heap.lock().free(off, len);
                return Err(e);
            }
        };
        // Zero what an earlier block left; the rest is still the new segment's zeroes.
        // SAFETY: `ptr` covers `len` bytes of our own heap block, not yet handed out.
        unsafe { std::ptr::write_bytes(ptr, 0, used_before.min(len)) };
        let heap = inner.heap.clone();
        // The region keeps the mapping alive even if it outlives the fabric.
        let mapping = inner.segs[rank as usize].clone();
        let res = inner.table.insert_via(weak, |key, p| {
            inner.publish(key, KIND_HEAP, off, len);
            let nn = std::ptr::NonNull::new(ptr)
                .ok_or(TransportError::OutOfResources { what: "shm heap" })?;
            let release = Box::new(move || {
                heap.lock().free(off, len);
                drop(mapping);
            });
            Ok(Region::from_raw(
                rank,
                key,
                nn,
                len,
                Backing::Shared(release),
                p,
            ))
        });
        if res.is_err() {
            inner.heap.lock().free(off, len);
        }
        res
    }

    unsafe fn register_memory(&self, ptr: *mut u8, len: usize) -> Result<Region> {
        let inner = &self.inner;
        let rank = inner.rank;
        let weak: std::sync::Weak<dyn Publisher> = Arc::downgrade(&self.publisher) as _;
        inner.table.insert_via(weak, |key, p| {
            let region = Region::external(rank, key, ptr, len, p)?;
            inner.publish(key, KIND_EXTERNAL, ptr as usize, len);
            Ok(region)
        })
    }

    fn put(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        imm: Option<u64>,
    ) -> Result<OpId> {
        let tail = imm.map_or(PutTail::None, PutTail::Imm);
        rma::put(&self.inner, src, src_offset, len, dst, tail)
    }

    fn put_flag(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        flag: u8,
    ) -> Result<OpId> {
        rma::put(&self.inner, src, src_offset, len, dst, PutTail::Flag(flag))
    }

    fn put_now(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        flag: Option<u8>,
    ) -> Result<crate::PutStatus> {
        let tail = flag.map_or(PutTail::None, PutTail::Flag);
        rma::put_now(&self.inner, src, src_offset, len, dst, tail, true)
    }

    fn store_now(&self, parts: &[&[u8]], dst: RemoteAddr, flag: Option<u8>) -> Result<bool> {
        rma::store_now(&self.inner, parts, dst, flag)
    }

    fn load_now(&self, dst: &mut [u8], src: RemoteAddr) -> Result<bool> {
        rma::load_now(&self.inner, dst, src)
    }

    fn get(&self, dst: &Region, dst_offset: usize, len: usize, src: RemoteAddr) -> Result<OpId> {
        rma::get(&self.inner, dst, dst_offset, len, src)
    }

    fn gets_into_private(&self) -> bool {
        true
    }

    fn gets_copy_in_call(&self, peer: Rank) -> bool {
        // Without cross-memory attach a get is a request the peer serves (bounce chunks).
        let cma = self.inner.cma_ok.get(peer as usize);
        cma.is_some_and(|ok| ok.load(Ordering::Acquire))
    }

    fn direct_get_max(&self) -> usize {
        self.inner.direct_get_max()
    }

    fn send(&self, dest: Rank, data: &[u8]) -> Result<()> {
        self.send_parts(dest, &[data])
    }

    fn send_parts(&self, dest: Rank, parts: &[&[u8]]) -> Result<()> {
        crate::types::check_message_len(parts)?;
        if dest == self.inner.rank {
            // Messages to self skip the ring, so `poll` only watches the peers' rings.
            let data = crate::types::payload_of(parts);
            self.inner.push_local(Event::Message { src: dest, data });
            return Ok(());
        }
        self.inner.send_record(dest, K_MSG, parts)
    }

    fn poll(&self) -> Result<Option<Event>> {
        let mut out = None;
        service::poll_with(&self.inner, &mut |ev| out = Some(ev.into_owned()))?;
        Ok(out)
    }

    fn poll_with(&self, f: &mut dyn FnMut(crate::EventRef<'_>)) -> Result<bool> {
        service::poll_with(&self.inner, f)
    }

    fn pending(&self) -> bool {
        service::pending(&self.inner)
    }

    fn take_poller(&self) -> Option<Box<dyn crate::Poller>> {
        let inner = &self.inner;
        // Under the lock, so that a poll that holds it finishes first and a later one finds
        // the consumers gone.
        let mut cons = inner.consumers.lock();
        let consumers = cons.take()?;
        inner.poller_taken.store(true, Ordering::Relaxed);
        Some(Box::new(service::ShmPoller {
            inner: inner.clone(),
            consumers: Some(consumers),
        }))
    }

    fn block(&self, timeout: Duration) {
        self.block_unless(timeout, &|| false)
    }

    fn block_unless(&self, timeout: Duration, ready: &dyn Fn() -> bool) {
        let inner = &self.inner;
        let own = inner.view(inner.rank);
        let seen = own.doorbell().load(Ordering::Acquire);
        own.sleepers().fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        // A publisher stores before it looks at `sleepers` (`ring_doorbell`): either it sees
        // us and rings, or we see its publication here. Without our membarrier its look could
        // pass its own store, so if the barrier fails the sleep is kept short instead.
        let barrier_ok = !inner.asymmetric_fence || crate::membarrier::global();
        // A receiver may have freed ring space (and rung us) between our last flush and the
        // `seen` above; flushing now, after `seen`, either moves the backlog or leaves the
        // waiting flag raised, and the receiver's next wake-up then ends the sleep. Without
        // it the sleep could last the whole cap below with records the receiver had room for.
        inner.flush_backlogs();
        if !inner.anything_ready() && !ready() {
            // With a backlog, the receiver wakes us when it frees ring space; the short cap
            // covers the race where it looked before we raised the flag.
            let timeout = if inner.any_backlog.load(Ordering::Acquire) || !barrier_ok {
                timeout.min(Duration::from_millis(1))
            } else {
                timeout
            };
            os::futex_wait(own.doorbell(), seen, timeout);
        }
        own.sleepers().fetch_sub(1, Ordering::SeqCst);
    }

    fn now(&self) -> Duration {
        self.inner.start.elapsed()
    }

    fn rendezvous_past_backlog(&self) -> bool {
        true
    }

    fn backlogged(&self, dest: Rank) -> bool {
        let inner = &self.inner;
        inner.any_backlog.load(Ordering::Acquire)
            && inner
                .producers
                .get(dest as usize)
                .is_some_and(|p| !p.lock().backlog.is_empty())
    }

    fn is_failed(&self, rank: Rank) -> bool {
        let r = rank as usize;
        r < self.inner.size
            && (self.inner.failed[r].load(Ordering::Acquire)
                || self.inner.dead[r].load(Ordering::Acquire))
    }
}

impl Inner {
    /// Records waiting in backlogs (ring full), over all peers.
    fn backlog_len(&self) -> usize {
        self.producers.iter().map(|p| p.lock().backlog.len()).sum()
    }
}

impl Drop for ShmFabric {
    fn drop(&mut self) {
        let inner = &self.inner;
        // Hand queued records to the rings for as long as peers keep making room: a message
        // `send` accepted is not dropped because a peer is slow. A peer that takes nothing for
        // the peer timeout (or fails, which clears its backlog) ends the wait.
        let mut left = inner.backlog_len();
        let mut last_progress = Instant::now();
        while left > 0 && last_progress.elapsed() < inner.close_patience {
            inner.flush_backlogs();
            std::thread::sleep(Duration::from_micros(100));
            let now_left = inner.backlog_len();
            if now_left < left {
                last_progress = Instant::now();
            }
            left = now_left;
        }
        if left > 0 {
            tracing::warn!(
                "shm rank {}: closing with {left} records peers did not take",
                inner.rank
            );
        }
        // Peers fail us once they have drained what we sent (their watchdogs look at this).
        // Stored before the regions are withdrawn, so a peer that finds one withdrawn also sees
        // why (`Inner::entry` reports `PeerFailed`, not a bad key).
        inner.view(inner.rank).closed().store(1, Ordering::SeqCst);
        inner.withdraw_all();
        if let Some(w) = self.watchdog.take() {
            w.stop();
        }
    }
}

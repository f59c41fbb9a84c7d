//! `shm`: processes on one host.
//!
//! Each rank creates one segment ([`layout`]) holding its control words, its region table, the
//! rings its peers write messages into, and a heap. Every rank maps every segment; each is
//! unlinked as soon as all have mapped it.
//!
//! - Messages: one SPSC ring per ordered pair ([`ring`]), in the receiver's segment; no locks
//!   shared between processes. A sender whose ring is full keeps a private backlog, flushed by
//!   its own progress, and the receiver wakes it when space frees up.
//! - Regions the fabric allocates live in the heap: a peer's put is a direct store, a get a
//!   direct load, after a seqlocked check of the owner's region table.
//! - Memory the caller registers is reached with `process_vm_readv` (single copy): gets by the
//!   initiator, puts by the target pulling from the initiator. When the kernel refuses (EPERM),
//!   or with `RDCOLL_SHM_CMA=0`, data goes through bounce chunks in the rings instead.
//! - Waiting: spin, yield, then sleep on a futex in the segment; senders wake sleepers only when
//!   one is registered (a Dekker-style flag, so there is no syscall on the fast path).
//! - Liveness: a watchdog thread waits on pidfds of all peers; a dead peer fails every pending
//!   and later operation that involves it.

mod heap;
mod layout;
mod liveness;
mod os;
mod records;
mod ring;
mod segment;
mod service;
mod spin;
mod table;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::bootstrap::{Store, JOB_ID_KEY};
use crate::config::FabricConfig;
use crate::error::{Result, TransportError};
use crate::fabric::Fabric;
use crate::region::{Backing, Publisher, Region, RegionTable};
use crate::types::{Event, OpId, Rank, RegionKey, RemoteAddr};
use heap::HeapAlloc;
use layout::{Layout, View, MAGIC};
use records::*;
use segment::Segment;
use spin::SpinLock;
use table::{KIND_EXTERNAL, KIND_HEAP};

/// Raw addresses of one ring's data and control words, computed once: the message path should
/// not redo layout arithmetic and bounds checks for every record.
#[derive(Clone, Copy)]
struct RingRef {
    data: *mut u8,
    head: *const AtomicU64,
    waiting: *const AtomicU32,
    /// The sleeper count of the segment's owner (checked after every send).
    sleepers: *const AtomicU32,
}

// SAFETY: the pointers are into segments that `Inner` keeps mapped for its whole life; the
// words behind them are atomics and the data area follows the ring protocol.
unsafe impl Send for RingRef {}
// SAFETY: as above.
unsafe impl Sync for RingRef {}

impl RingRef {
    fn new(v: &View<'_>, src: usize) -> RingRef {
        RingRef {
            data: v.ring_data(src),
            head: v.ring_head(src),
            waiting: v.ring_producer_waiting(src),
            sleepers: v.sleepers(),
        }
    }
    fn head(&self) -> &AtomicU64 {
        // SAFETY: points into a segment mapped for as long as `Inner` (and so `self`) lives.
        unsafe { &*self.head }
    }
    fn waiting(&self) -> &AtomicU32 {
        // SAFETY: as for `head`.
        unsafe { &*self.waiting }
    }
    fn sleepers(&self) -> &AtomicU32 {
        // SAFETY: as for `head`.
        unsafe { &*self.sleepers }
    }
}

/// Events raised by this rank's own calls (completions, failures), checked on every poll
/// without taking the lock unless something is there.
#[derive(Default)]
struct LocalQueue {
    events: Mutex<VecDeque<Event>>,
    len: std::sync::atomic::AtomicUsize,
}

impl LocalQueue {
    fn push(&self, ev: Event) {
        let mut q = self.events.lock();
        q.push_back(ev);
        self.len.store(q.len(), Ordering::SeqCst);
    }
    fn pop(&self) -> Option<Event> {
        if self.is_empty() {
            return None;
        }
        let mut q = self.events.lock();
        let ev = q.pop_front();
        self.len.store(q.len(), Ordering::Release);
        ev
    }
    fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }
}

struct ProducerSide {
    ring: ring::Producer,
    backlog: VecDeque<(u32, Vec<u8>)>,
}

pub(crate) enum PendingKind {
    Put {
        src: Region,
        src_off: usize,
        imm: Option<u64>,
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
    local_events: LocalQueue,
    producers: Vec<SpinLock<ProducerSide>>,
    /// The ring from us into each rank's segment.
    outgoing: Vec<RingRef>,
    /// The ring from each rank into ours.
    incoming: Vec<RingRef>,
    any_backlog: AtomicBool,
    consumers: SpinLock<(Vec<ring::Consumer>, usize)>,
    pending: Mutex<HashMap<u64, Pending>>,
    failed: Vec<AtomicBool>,
    /// Peers known gone (process exited, fabric closed) whose rings may still hold records:
    /// they are failed once those are drained, so nothing they sent is lost.
    dead: Vec<AtomicBool>,
    any_dead: AtomicBool,
    cma_ok: Vec<AtomicBool>,
    next_op: AtomicU64,
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

fn parse_peer(bytes: &[u8]) -> Option<(String, usize, i32, [usize; 3])> {
    let s = std::str::from_utf8(bytes).ok()?;
    let f: Vec<&str> = s.split(' ').collect();
    if f.len() != 6 {
        return None;
    }
    let n = |i: usize| f[i].parse::<usize>().ok();
    Some((
        f[0].to_string(),
        n(1)?,
        f[2].parse().ok()?,
        [n(3)?, n(4)?, n(5)?],
    ))
}

impl ShmFabric {
    /// Creates this rank's segment, maps every peer's, and starts the liveness watchdog.
    pub fn new(
        rank: Rank,
        size: usize,
        store: &dyn Store,
        cfg: &FabricConfig,
    ) -> Result<ShmFabric> {
        cfg.validate()?;
        if rank as usize >= size {
            return Err(TransportError::InvalidRank { rank, size });
        }
        let timeout = cfg.bootstrap_timeout;
        let job = String::from_utf8_lossy(&store.get(JOB_ID_KEY, timeout)?).to_string();
        let layout = Layout {
            size,
            max_regions: cfg.max_regions,
            ring_bytes: cfg.shm_ring_bytes,
            heap_bytes: cfg.shm_heap_bytes,
        };
        let total = layout.checked_total().ok_or_else(|| {
            TransportError::InvalidArgument(format!("shm segment for {layout:?} is too large"))
        })?;
        let name = format!("/rdcoll-{job}-{rank}");
        let own = Arc::new(Segment::create(&name, total)?);
        let mapped = Self::map_peers(rank, size, store, cfg, layout, (&name, &own));
        // Unlinked in every case: on success all ranks have mapped it, on failure it must not
        // outlive this process.
        own.unlink();
        let (segs, pids) = mapped?;
        Self::start(rank, size, cfg, layout, segs, pids)
    }

    /// Publishes our segment, maps every peer's, and waits until all ranks have done so.
    fn map_peers(
        rank: Rank,
        size: usize,
        store: &dyn Store,
        cfg: &FabricConfig,
        layout: Layout,
        (name, own): (&str, &Arc<Segment>),
    ) -> Result<(Vec<Arc<Segment>>, Vec<i32>)> {
        let timeout = cfg.bootstrap_timeout;
        let pid = std::process::id() as i32;
        {
            let v = View { seg: own, layout };
            v.pid().store(pid as u64, Ordering::Relaxed);
            v.owner_base().store(own.base() as u64, Ordering::Relaxed);
            v.magic().store(MAGIC, Ordering::Release);
        }
        // Allow peers to attach to our memory where Yama restricts ptrace to descendants.
        // SAFETY: prctl with constant arguments.
        unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
        let shape = [layout.max_regions, layout.ring_bytes, layout.heap_bytes];
        let me = format!(
            "{name} {} {pid} {} {} {}",
            layout.total(),
            shape[0],
            shape[1],
            shape[2]
        );
        store.set(&format!("shm/{rank}"), me.as_bytes())?;
        let mut segs = Vec::with_capacity(size);
        let mut pids = Vec::with_capacity(size);
        for r in 0..size {
            if r == rank as usize {
                segs.push(own.clone());
                pids.push(pid);
                continue;
            }
            let info = store.get(&format!("shm/{r}"), timeout)?;
            let (pname, total, ppid, pshape) = parse_peer(&info).ok_or_else(|| {
                TransportError::Bootstrap(format!("rank {r} published a malformed shm entry"))
            })?;
            if pshape != shape || total != layout.total() {
                return Err(TransportError::Bootstrap(format!(
                    "rank {r} uses a different shm layout {pshape:?} from ours {shape:?}: set the same RDCOLL_SHM_* on every rank"
                )));
            }
            let seg = Segment::open(&pname, total)?;
            if (View { seg: &seg, layout }).magic().load(Ordering::Acquire) != MAGIC {
                return Err(TransportError::Bootstrap(format!(
                    "rank {r}'s segment is not initialised"
                )));
            }
            segs.push(Arc::new(seg));
            pids.push(ppid);
        }
        store.barrier("shm-mapped", size, timeout)?;
        Ok((segs, pids))
    }

    /// Builds the endpoint over the mapped segments and starts its watchdog.
    fn start(
        rank: Rank,
        size: usize,
        cfg: &FabricConfig,
        layout: Layout,
        segs: Vec<Arc<Segment>>,
        pids: Vec<i32>,
    ) -> Result<ShmFabric> {
        let cma_ok: Vec<AtomicBool> = (0..size)
            .map(|r| {
                let ok =
                    cfg.shm_cma && (r == rank as usize || cma_probe(pids[r], &segs[r], layout));
                AtomicBool::new(ok)
            })
            .collect();
        let heap_ptr_len = layout.heap_bytes;
        let outgoing = segs
            .iter()
            .map(|seg| RingRef::new(&View { seg, layout }, rank as usize))
            .collect();
        let incoming = (0..size)
            .map(|src| {
                RingRef::new(
                    &View {
                        seg: &segs[rank as usize],
                        layout,
                    },
                    src,
                )
            })
            .collect();
        let inner = Arc::new(Inner {
            outgoing,
            incoming,
            rank,
            size,
            start: Instant::now(),
            layout,
            segs,
            pids: pids.clone(),
            table: RegionTable::new(rank, cfg.max_regions),
            heap: Arc::new(Mutex::new(HeapAlloc::new(heap_ptr_len))),
            local_events: LocalQueue::default(),
            producers: (0..size)
                .map(|_| {
                    SpinLock::new(ProducerSide {
                        ring: Default::default(),
                        backlog: VecDeque::new(),
                    })
                })
                .collect(),
            any_backlog: AtomicBool::new(false),
            consumers: SpinLock::new(((0..size).map(|_| ring::Consumer::default()).collect(), 0)),
            pending: Mutex::new(HashMap::new()),
            failed: (0..size).map(|_| AtomicBool::new(false)).collect(),
            dead: (0..size).map(|_| AtomicBool::new(false)).collect(),
            any_dead: AtomicBool::new(false),
            cma_ok,
            next_op: AtomicU64::new(0),
        });
        let publisher = Arc::new(ShmPublisher {
            inner: Arc::downgrade(&inner),
        });
        let watchdog = liveness::Watchdog::start(inner.clone(), pids)?;
        Ok(ShmFabric {
            inner,
            publisher,
            watchdog: Some(watchdog),
        })
    }
}

/// Whether `process_vm_readv` from `pid` works: read the peer's magic through it.
fn cma_probe(pid: i32, seg: &Segment, layout: Layout) -> bool {
    let remote = (View { seg, layout }).owner_base().load(Ordering::Acquire) as usize;
    let mut word = [0u8; 8];
    os::read_remote(pid, remote, word.as_mut_ptr(), 8).is_ok() && u64::from_le_bytes(word) == MAGIC
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

    /// Notes that `rank` is gone. It is failed by the next poll that finds its ring drained,
    /// so its last messages and completions still arrive, before the failure.
    pub(crate) fn mark_dead(&self, rank: Rank) {
        if self.dead[rank as usize].swap(true, Ordering::AcqRel) {
            return;
        }
        self.any_dead.store(true, Ordering::SeqCst);
        let own = self.view(self.rank);
        own.doorbell().fetch_add(1, Ordering::Release);
        os::futex_wake(own.doorbell());
    }

    /// Whether `rank`'s fabric was dropped (its process may live on).
    pub(crate) fn peer_closed(&self, rank: Rank) -> bool {
        self.view(rank).closed().load(Ordering::Acquire) != 0
    }

    /// Fails the dead peers whose rings are empty; call without the consumer lock.
    #[cold]
    fn reap_dead(&self) {
        if !self.any_dead.load(Ordering::Acquire) {
            return;
        }
        let mut left = false;
        for src in 0..self.size {
            if !self.dead[src].load(Ordering::Acquire) || self.failed[src].load(Ordering::Acquire) {
                continue;
            }
            let ring = &self.incoming[src];
            // SAFETY: our own incoming ring; `head` is where its consumer stands.
            if unsafe { ring::peek_ready(ring.data, self.layout.ring_bytes, ring.head()) } {
                left = true;
            } else {
                self.fail_peer(src as Rank);
            }
        }
        if !left {
            self.any_dead.store(false, Ordering::Release);
            // A peer marked dead meanwhile has set the flag again after its own store.
            if self
                .dead
                .iter()
                .zip(&self.failed)
                .any(|(d, f)| d.load(Ordering::Acquire) && !f.load(Ordering::Acquire))
            {
                self.any_dead.store(true, Ordering::Release);
            }
        }
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

    /// Wakes `rank` if any of its threads sleeps. Every publication before this is a SeqCst
    /// store (the ring record's sequence word, the local queue's length), and a sleeper raises
    /// `sleepers` and fences before its last look, so either it sees our record or we see it.
    fn ring_doorbell(&self, rank: Rank) {
        let ring = &self.outgoing[rank as usize];
        if ring.sleepers().load(Ordering::SeqCst) > 0 {
            let v = self.view(rank);
            v.doorbell().fetch_add(1, Ordering::Release);
            os::futex_wake(v.doorbell());
        }
    }

    /// Writes one record into `dest`'s ring from us; false if the ring is full.
    fn try_push(&self, dest: Rank, side: &mut ProducerSide, kind: u32, parts: &[&[u8]]) -> bool {
        let ring = &self.outgoing[dest as usize];
        // SAFETY: the ring from us to `dest` lives in dest's mapped segment and only this rank
        // (under the producer lock) writes it.
        unsafe {
            side.ring
                .try_push(ring.data, self.layout.ring_bytes, ring.head(), kind, parts)
        }
    }

    /// Sends a record to `dest`, behind any backlog so order per pair holds.
    fn send_record(&self, dest: Rank, kind: u32, parts: &[&[u8]]) -> Result<()> {
        self.check_peer(dest)?;
        let mut side = self.producers[dest as usize].lock();
        if side.backlog.is_empty() && self.try_push(dest, &mut side, kind, parts) {
            drop(side);
            self.ring_doorbell(dest);
            return Ok(());
        }
        side.backlog.push_back((kind, parts.concat()));
        self.any_backlog.store(true, Ordering::Release);
        self.view(dest)
            .ring_producer_waiting(self.rank as usize)
            .store(1, Ordering::Release);
        Ok(())
    }

    /// Moves backlogged records into rings that have room again.
    #[inline]
    fn flush_backlogs(&self) {
        if !self.any_backlog.load(Ordering::Acquire)
            || !self.any_backlog.swap(false, Ordering::AcqRel)
        {
            return;
        }
        for dest in 0..self.size as Rank {
            let mut side = self.producers[dest as usize].lock();
            let mut pushed = false;
            while let Some((kind, bytes)) = side.backlog.pop_front() {
                if self.try_push(dest, &mut side, kind, &[&bytes]) {
                    pushed = true;
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

    /// Fails `rank` once: pending operations complete with `PeerFailed`, then the event.
    pub(crate) fn fail_peer(&self, rank: Rank) {
        let drained: Vec<u64> = {
            let mut pending = self.pending.lock();
            if self.failed[rank as usize].swap(true, Ordering::AcqRel) {
                return;
            }
            self.dead[rank as usize].store(true, Ordering::Release);
            let ids: Vec<u64> = pending
                .iter()
                .filter(|(_, p)| p.peer == rank)
                .map(|(k, _)| *k)
                .collect();
            for id in &ids {
                pending.remove(id);
            }
            ids
        };
        self.producers[rank as usize].lock().backlog.clear();
        for op in drained {
            self.local_events.push(Event::Completed {
                op: OpId(op),
                result: Err(TransportError::PeerFailed(rank)),
            });
        }
        self.local_events.push(Event::PeerFailed { rank });
        let own = self.view(self.rank);
        own.doorbell().fetch_add(1, Ordering::Release);
        os::futex_wake(own.doorbell());
    }

    /// Whether anything is ready for this rank's progress to pick up.
    fn anything_ready(&self) -> bool {
        if !self.local_events.is_empty() || self.any_dead.load(Ordering::Acquire) {
            return true;
        }
        let Some(cons) = self.consumers.try_lock() else {
            return true;
        };
        (0..self.size)
            .filter(|&src| src != self.rank as usize && !self.failed[src].load(Ordering::Relaxed))
            .any(|src| {
                // SAFETY: our own incoming ring from `src`, read under the consumer lock.
                unsafe { cons.0[src].ready(self.incoming[src].data, self.layout.ring_bytes) }
            })
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
        let off = inner.heap.lock().alloc(len);
        let weak: std::sync::Weak<dyn Publisher> = Arc::downgrade(&self.publisher) as _;
        let Some(off) = off else {
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
        // Zero it: the block may have been used before.
        // SAFETY: `ptr` covers `len` bytes of our own heap block, not yet handed out.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
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
        let nn = std::ptr::NonNull::new(ptr)
            .ok_or_else(|| TransportError::InvalidArgument("null pointer registered".into()))?;
        let inner = &self.inner;
        let rank = inner.rank;
        let weak: std::sync::Weak<dyn Publisher> = Arc::downgrade(&self.publisher) as _;
        inner.table.insert_via(weak, |key, p| {
            inner.publish(key, KIND_EXTERNAL, ptr as usize, len);
            Ok(Region::from_raw(rank, key, nn, len, Backing::External, p))
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
        let inner = &self.inner;
        src.check_range(src_offset, len)?;
        inner.check_peer(dst.rank)?;
        let op = inner.new_op();
        if dst.rank == inner.rank {
            let result = inner.table.put_from(src, src_offset, len, dst);
            if let (Ok(()), Some(imm)) = (&result, imm) {
                inner.push_local(Event::Immediate {
                    src: inner.rank,
                    imm,
                });
            }
            inner.push_local(Event::Completed { op, result });
            return Ok(op);
        }
        let e = match inner.entry_for(dst.rank, dst.key, dst.offset, len) {
            Ok(e) => e,
            Err(err) => {
                inner.push_local(Event::Completed {
                    op,
                    result: Err(err),
                });
                return Ok(op);
            }
        };
        if e.kind == KIND_HEAP {
            let result = inner.direct_copy(dst.rank, dst.key, &e, || {
                let d = inner.heap_ptr(dst.rank, e.addr + dst.offset, len)?;
                src.with_range(src_offset, len, |s| {
                    // SAFETY: `d` is inside the peer's heap block (validated entry and range,
                    // held by `direct_copy`), `s` inside our live source region.
                    unsafe { std::ptr::copy_nonoverlapping(s, d, len) }
                })
            });
            let result = match (result, imm) {
                (Ok(()), Some(imm)) => inner.send_record(dst.rank, K_IMM, &[&imm.to_le_bytes()]),
                (result, _) => result,
            };
            inner.push_local(Event::Completed { op, result });
            return Ok(op);
        }
        let kind = PendingKind::Put {
            src: src.clone(),
            src_off: src_offset,
            imm,
        };
        inner.add_pending(
            op,
            Pending {
                peer: dst.rank,
                key: dst.key,
                offset: dst.offset,
                len,
                kind,
            },
        )?;
        let sent = if inner.cma_ok[dst.rank as usize].load(Ordering::Acquire) {
            let words = [
                op.0,
                dst.key.0,
                dst.offset as u64,
                len as u64,
                (src.base_addr() + src_offset) as u64,
                imm.is_some() as u64,
                imm.unwrap_or(0),
            ];
            inner.send_record(dst.rank, K_PUT_PULL, &[&header(words)])
        } else {
            service::send_put_chunks(inner, op.0, dst, src, src_offset, len, imm)
        };
        match sent {
            Ok(()) => Ok(op),
            Err(e) => inner.abandon(op, e),
        }
    }

    fn get(&self, dst: &Region, dst_offset: usize, len: usize, src: RemoteAddr) -> Result<OpId> {
        let inner = &self.inner;
        dst.check_range(dst_offset, len)?;
        inner.check_peer(src.rank)?;
        let op = inner.new_op();
        if src.rank == inner.rank {
            let result = inner.table.get_into(dst, dst_offset, len, src);
            inner.push_local(Event::Completed { op, result });
            return Ok(op);
        }
        let e = match inner.entry_for(src.rank, src.key, src.offset, len) {
            Ok(e) => e,
            Err(err) => {
                inner.push_local(Event::Completed {
                    op,
                    result: Err(err),
                });
                return Ok(op);
            }
        };
        let stale = || TransportError::BadKey {
            rank: src.rank,
            key: src.key.0,
        };
        if e.kind == KIND_HEAP {
            let result = inner.direct_copy(src.rank, src.key, &e, || {
                let s = inner.heap_ptr(src.rank, e.addr + src.offset, len)?;
                dst.with_range(dst_offset, len, |d| {
                    // SAFETY: `s` is inside the peer's heap block (validated entry and range,
                    // held by `direct_copy`), `d` inside our live destination region.
                    unsafe { std::ptr::copy_nonoverlapping(s, d, len) }
                })
            });
            inner.push_local(Event::Completed { op, result });
            return Ok(op);
        }
        if inner.cma_ok[src.rank as usize].load(Ordering::Acquire) {
            let pid = inner.pids[src.rank as usize];
            let read = dst.with_range(dst_offset, len, |d| {
                os::read_remote(pid, e.addr + src.offset, d, len)
            })?;
            match read {
                Ok(()) => {
                    // A region deregistered during the copy may have yielded garbage: refuse it.
                    let result = if inner.still_valid(src.rank, src.key, &e) {
                        Ok(())
                    } else {
                        Err(stale())
                    };
                    inner.push_local(Event::Completed { op, result });
                    return Ok(op);
                }
                Err(errno) if errno == libc::EPERM || errno == libc::ENOSYS => {
                    inner.cma_ok[src.rank as usize].store(false, Ordering::Release);
                }
                Err(errno) => {
                    let gone = errno == libc::ESRCH
                        || inner.failed[src.rank as usize].load(Ordering::Acquire);
                    let result = if gone || !os::process_alive(pid) {
                        inner.fail_peer(src.rank);
                        Err(TransportError::PeerFailed(src.rank))
                    } else {
                        Err(stale())
                    };
                    inner.push_local(Event::Completed { op, result });
                    return Ok(op);
                }
            }
        }
        let kind = PendingKind::Get {
            dst: dst.clone(),
            dst_off: dst_offset,
            received: 0,
        };
        inner.add_pending(
            op,
            Pending {
                peer: src.rank,
                key: src.key,
                offset: src.offset,
                len,
                kind,
            },
        )?;
        let request = header([op.0, src.key.0, src.offset as u64, len as u64]);
        match inner.send_record(src.rank, K_GET_REQ, &[&request]) {
            Ok(()) => Ok(op),
            Err(e) => inner.abandon(op, e),
        }
    }

    fn send(&self, dest: Rank, data: &[u8]) -> Result<()> {
        if data.len() > crate::MAX_MESSAGE_SIZE {
            return Err(TransportError::MessageTooLarge {
                len: data.len(),
                max: crate::MAX_MESSAGE_SIZE,
            });
        }
        if dest == self.inner.rank {
            // Messages to self skip the ring, so `poll` only watches the peers' rings.
            let data = crate::types::Payload::from_slice(data);
            self.inner.push_local(Event::Message { src: dest, data });
            return Ok(());
        }
        self.inner.send_record(dest, K_MSG, &[data])
    }

    fn poll(&self) -> Result<Option<Event>> {
        let mut out = None;
        service::poll_with(&self.inner, &mut |ev| out = Some(ev.into_owned()))?;
        Ok(out)
    }

    fn poll_with(&self, f: &mut dyn FnMut(crate::EventRef<'_>)) -> Result<bool> {
        service::poll_with(&self.inner, f)
    }

    fn block(&self, timeout: Duration) {
        let inner = &self.inner;
        let own = inner.view(inner.rank);
        let seen = own.doorbell().load(Ordering::Acquire);
        own.sleepers().fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !inner.anything_ready() {
            // With a backlog, the receiver wakes us when it frees ring space; the short cap
            // covers the race where it looked before we raised the flag.
            let timeout = if inner.any_backlog.load(Ordering::Acquire) {
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

    fn is_failed(&self, rank: Rank) -> bool {
        let r = rank as usize;
        r < self.inner.size
            && (self.inner.failed[r].load(Ordering::Acquire)
                || self.inner.dead[r].load(Ordering::Acquire))
    }
}

/// How long a dropped fabric keeps trying to hand queued records to peers that are slow to
/// make room for them.
const CLOSE_FLUSH_LIMIT: Duration = Duration::from_secs(1);

impl Drop for ShmFabric {
    fn drop(&mut self) {
        let inner = &self.inner;
        let deadline = Instant::now() + CLOSE_FLUSH_LIMIT;
        while inner.any_backlog.load(Ordering::Acquire) && Instant::now() < deadline {
            inner.flush_backlogs();
            std::thread::sleep(Duration::from_micros(100));
        }
        if inner.any_backlog.load(Ordering::Acquire) {
            tracing::warn!(
                "shm rank {}: closing with records peers did not take",
                inner.rank
            );
        }
        // Peers fail us once they have drained what we sent (their watchdogs look at this).
        inner.view(inner.rank).closed().store(1, Ordering::SeqCst);
        if let Some(w) = self.watchdog.take() {
            w.stop();
        }
    }
}

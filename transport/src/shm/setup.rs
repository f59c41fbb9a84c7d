//! Bringing up a rank's shm endpoint: its segment, every peer's, the cross-memory-attach probe.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::heap::HeapAlloc;
use super::layout::{Layout, View, MAGIC};
use super::segment::Segment;
use super::{liveness, os, ring, Inner, ProducerSide, RingRef, ShmFabric, ShmPublisher};
use crate::bootstrap::{Store, JOB_ID_KEY};
use crate::config::FabricConfig;
use crate::error::{Result, TransportError};
use crate::region::RegionTable;
use crate::spin::SpinLock;
use crate::types::Rank;

fn parse_peer(bytes: &[u8]) -> Option<PeerInfo> {
    let s = std::str::from_utf8(bytes).ok()?;
    let f: Vec<&str> = s.split(' ').collect();
    if f.len() != 7 {
        return None;
    }
    let n = |i: usize| f[i].parse::<usize>().ok();
    Some(PeerInfo {
        name: f[0].to_string(),
        total: n(1)?,
        pid: f[2].parse().ok()?,
        shape: [n(3)?, n(4)?, n(5)?],
        membarrier: match f[6] {
            "1" => true,
            "0" => false,
            _ => return None,
        },
    })
}

/// What a rank publishes about its segment.
struct PeerInfo {
    name: String,
    total: usize,
    pid: i32,
    shape: [usize; 3],
    /// Whether its process is registered for expedited membarriers.
    membarrier: bool,
}

/// Every rank's mapped segment and pid, and whether all of them registered for membarriers.
struct Mapped {
    segs: Vec<Arc<Segment>>,
    pids: Vec<i32>,
    all_membarrier: bool,
}

impl ShmFabric {
    /// Every rank of a `size`-rank shm job as an endpoint of this process (the backend does
    /// not mind its ranks sharing one): for tests and measurements that drive several ranks
    /// from one thread. Bootstraps through a file store in a fresh temporary directory,
    /// removed before this returns.
    pub fn job_in_process(size: usize, cfg: &FabricConfig) -> Result<Vec<ShmFabric>> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("rdcoll-shm-job-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = crate::bootstrap::FileStore::open(&dir)?;
        let made = crate::bootstrap::publish_job_identity(&store).and_then(|()| {
            // Each rank waits in bootstrap for the others: one thread per rank.
            std::thread::scope(|s| {
                let ranks: Vec<_> = (0..size)
                    .map(|r| {
                        let store = &store;
                        s.spawn(move || ShmFabric::new(r as Rank, size, store, cfg))
                    })
                    .collect();
                ranks
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            })
        });
        let _ = std::fs::remove_dir_all(&dir);
        made
    }

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
            ring_bytes: cfg.shm_ring_bytes_for(size),
            heap_bytes: cfg.shm_heap_bytes,
        };
        let total = layout.checked_total().ok_or_else(|| {
            TransportError::InvalidArgument(format!("shm segment for {layout:?} is too large"))
        })?;
        // A random part no other process can predict or claim first; peers learn the name
        // from the store.
        let suffixes = std::iter::repeat_with(rand::random::<u64>);
        let (own, name) =
            Segment::create_unique(&format!("/rdcoll-{job}-{rank}"), total, suffixes)?;
        let own = Arc::new(own);
        let mapped = Self::map_peers(rank, size, store, cfg, layout, (&name, &own));
        // Unlinked in every case: on success all ranks have mapped it, on failure it must not
        // outlive this process.
        own.unlink();
        Self::start(rank, size, cfg, layout, mapped?)
    }

    /// Publishes our segment, maps every peer's, and waits until all ranks have done so.
    fn map_peers(
        rank: Rank,
        size: usize,
        store: &dyn Store,
        cfg: &FabricConfig,
        layout: Layout,
        (name, own): (&str, &Arc<Segment>),
    ) -> Result<Mapped> {
        let timeout = cfg.bootstrap_timeout;
        // Registered before anyone can write to us: a peer that relies on our membarriers
        // learns that we take them only from what we publish below. Not when the ranks
        // outnumber the cores: then they sleep at almost every wait, and a membarrier per sleep
        // (an interrupt to every other core) cost more than the senders' fences (4 ranks on 2
        // cores: barrier 6.4 vs 5.1 us).
        let cores = crate::cores::for_ranks_here(size);
        let membarrier =
            cfg.shm_membarrier && size <= cores && crate::membarrier::register_global();
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
            "{name} {} {pid} {} {} {} {}",
            layout.total(),
            shape[0],
            shape[1],
            shape[2],
            u8::from(membarrier)
        );
        store.set(&format!("shm/{rank}"), me.as_bytes())?;
        let mut segs = Vec::with_capacity(size);
        let mut pids = Vec::with_capacity(size);
        let mut all_membarrier = membarrier;
        for r in 0..size {
            if r == rank as usize {
                segs.push(own.clone());
                pids.push(pid);
                continue;
            }
            let info = store.get(&format!("shm/{r}"), timeout)?;
            let peer = parse_peer(&info).ok_or_else(|| {
                TransportError::Bootstrap(format!("rank {r} published a malformed shm entry"))
            })?;
            if peer.shape != shape || peer.total != layout.total() {
                return Err(TransportError::Bootstrap(format!(
                    "rank {r} uses a different shm layout {:?} from ours {shape:?}: set the same RDCOLL_SHM_* on every rank",
                    peer.shape
                )));
            }
            all_membarrier &= peer.membarrier;
            let seg = Segment::open(&peer.name, peer.total)?;
            if (View { seg: &seg, layout }).magic().load(Ordering::Acquire) != MAGIC {
                return Err(TransportError::Bootstrap(format!(
                    "rank {r}'s segment is not initialised"
                )));
            }
            segs.push(Arc::new(seg));
            pids.push(peer.pid);
        }
        store.barrier("shm-mapped", size, timeout)?;
        Ok(Mapped {
            segs,
            pids,
            all_membarrier,
        })
    }

    /// Builds the endpoint over the mapped segments and starts its watchdog.
    fn start(
        rank: Rank,
        size: usize,
        cfg: &FabricConfig,
        layout: Layout,
        mapped: Mapped,
    ) -> Result<ShmFabric> {
        let Mapped {
            segs,
            pids,
            all_membarrier,
        } = mapped;
        let cma_ok: Vec<AtomicBool> = (0..size)
            .map(|r| {
                let ok =
                    cfg.shm_cma && (r == rank as usize || cma_probe(pids[r], &segs[r], layout));
                AtomicBool::new(ok)
            })
            .collect();
        prefault_rings(rank as usize, &segs, layout);
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
            local_events: Default::default(),
            producers: (0..size)
                .map(|_| {
                    SpinLock::new(ProducerSide {
                        ring: Default::default(),
                        backlog: VecDeque::new(),
                        spare: Vec::new(),
                    })
                })
                .collect(),
            any_backlog: AtomicBool::new(false),
            consumers: SpinLock::new(Some((
                (0..size).map(|_| ring::Consumer::default()).collect(),
                0,
            ))),
            poller_taken: AtomicBool::new(false),
            pending: Mutex::new(HashMap::new()),
            failed: (0..size).map(|_| AtomicBool::new(false)).collect(),
            dead: (0..size).map(|_| AtomicBool::new(false)).collect(),
            any_dead: AtomicBool::new(false),
            cma_ok,
            next_op: AtomicU64::new(0),
            close_patience: cfg.peer_timeout,
            asymmetric_fence: all_membarrier,
            split_puts: cfg.shm_split_puts && size <= crate::cores::for_ranks_here(size),
            fail_pushes: cfg.shm_fail_pushes,
            push_refused: (0..size).map(|_| AtomicBool::new(false)).collect(),
            halves: Mutex::new(HashMap::new()),
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

/// At most this many bytes of ring, summed over the rings a rank writes, are mapped in ahead
/// of use (the same again for the rings it reads): every job whose rings are sized by job size
/// up to 16 ranks ([`FabricConfig::shm_ring_bytes_for`]).
const PREFAULT_RING_BYTES: usize = 4 << 20;

/// Maps in the rings this rank writes (its ring in every peer's segment) and reads (every
/// peer's ring in its own), when they are few enough that allocating them all up front costs
/// little; larger jobs fault ring pages in as traffic reaches them.
fn prefault_rings(rank: usize, segs: &[Arc<Segment>], layout: Layout) {
    let size = segs.len();
    if size.saturating_mul(layout.ring_bytes) > PREFAULT_RING_BYTES {
        return;
    }
    for seg in segs {
        seg.prefault(layout.ring_offset(rank), layout.ring_stride());
    }
    segs[rank].prefault(layout.ring_offset(0), size * layout.ring_stride());
}

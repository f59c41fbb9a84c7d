//! `ofi`: RDMA networks through libfabric (the `ofi` cargo feature; `RDCOLL_TRANSPORT=ofi`,
//! provider chosen with libfabric's own `FI_PROVIDER`, `FI_TCP_IFACE`, ...).
//!
//! One reliable-datagram endpoint per rank, with a table address vector filled in rank order
//! from the bootstrap store (a rank's `fi_addr_t` is its rank), one completion queue, and
//! multi-receive buffers for messages. Active messages are libfabric sends. Puts and gets up to
//! [`state::INLINE_MAX`] travel inside messages (the target copies and acknowledges: one message
//! each way, as MPI's eager protocol); larger ones are `fi_writemsg` with delivery-complete and
//! `fi_readmsg` into or out of the peer's registered region, after one key lookup per region
//! ([`keys`]). An immediate or flag that goes with a large write follows it in a `Notice`
//! message sent once the write has landed, so the target sees the data first.
//!
//! libfabric gives weak failure guarantees (a refused key can tear down a `tcp;ofi_rxm`
//! connection; a write to a dead peer may report success), so the backend brings its own:
//! keys and ranges checked at the initiator, a region's registration closed only after every
//! peer that looked it up has let go, heartbeats every fifth of the peer timeout, a peer silent
//! for the timeout (or whose operations fail, or who said goodbye) failed with every operation
//! that involves it. A progress thread serves peers' one-sided operations and messages while
//! the owner computes (most providers progress data only when called) and wakes a blocked
//! owner.

mod handle;
mod keys;
mod post;
mod provider;
mod rma;
mod state;
mod wire;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::bootstrap::Store;
use crate::config::FabricConfig;
use crate::error::{Result, TransportError};
use crate::fabric::Fabric;
use crate::region::{Publisher, Region, RegionTable};
use crate::types::{Event, EventRef, OpId, Rank, RegionKey, RemoteAddr};
use crate::wait::EventQueue;
use keys::LocalMr;
use provider::Provider;
use state::State;
use wire::Kind;

/// Longest the progress thread serves the completion queue in one round (then it lets go of
/// the state lock; one batch of completions is always served).
const ROUND_BUDGET: Duration = Duration::from_millis(2);
/// How recently the owner must have polled for the progress thread to leave the completion
/// queue to it.
const OWNER_ACTIVE: Duration = Duration::from_micros(200);
/// How long a departing rank keeps progressing after its last send was handed over.
const LINGER: Duration = Duration::from_millis(20);
/// Longest sleep of the progress thread between looks when it has no descriptor to wait on.
const MAX_NAP: Duration = Duration::from_millis(1);

struct Shared {
    rank: Rank,
    size: usize,
    start: Instant,
    state: Mutex<State>,
    events: Arc<EventQueue>,
    table: Arc<RegionTable>,
    failed: Arc<Vec<AtomicBool>>,
    /// Nanoseconds since `start` of the owner's last poll (0: it is blocked).
    owner_polled: AtomicU64,
    stop: AtomicBool,
    peer_timeout: Duration,
    provider_name: String,
    wait_fd: Option<i32>,
}

impl Shared {
    /// Runs `f` under the state lock, then drops (outside it) the regions `f` let go of.
    fn with_state<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut st = self.state.lock();
        let r = f(&mut st);
        let dead = st.take_graveyard();
        drop(st);
        drop(dead);
        r
    }

    fn owner_active(&self) -> bool {
        let polled = self.owner_polled.load(Ordering::Relaxed);
        polled != 0
            && self.start.elapsed().as_nanos() as u64 - polled < OWNER_ACTIVE.as_nanos() as u64
    }

    fn register(&self, region: Region, external: bool) -> Result<Region> {
        let len = region.len();
        let key = region.key().0;
        let ptr = region.base_addr() as *mut u8;
        let r = self.with_state(|st| {
            if len == 0 {
                return Ok(());
            }
            let (mr, desc, remote_key) = st.prov.register(ptr, len, key)?;
            let remote_base = if st.prov.traits.needs(rdcoll_ofi_sys::FI_MR_VIRT_ADDR) {
                ptr as u64
            } else {
                0
            };
            st.local.insert(
                key,
                LocalMr {
                    mr,
                    desc,
                    remote_base,
                    len,
                    transient: external,
                    remote_key,
                    holders: Vec::new(),
                    awaiting: Vec::new(),
                    dying: false,
                },
            );
            Ok(())
        });
        match r {
            Ok(()) => Ok(region),
            Err(e) => {
                drop(region);
                Err(e)
            }
        }
    }

    /// One round of the progress thread: serve the queue unless the owner does, send what
    /// waits, heartbeats and the liveness check when due. Returns whether it may sleep on the
    /// wait descriptor.
    fn progress_round(&self, beat_due: bool) -> bool {
        let owner_active = self.owner_active();
        self.with_state(|st| {
            // Heartbeats go first: a round that serves a flood can take long on a crowded
            // host (64 completions took 100-170 ms with three busy loops beside two ranks on
            // two cores), and a peer that hears nothing for the peer timeout fails this rank.
            if beat_due {
                self.send_heartbeats(st);
            }
            if !owner_active {
                let started = Instant::now();
                for _ in 0..16 {
                    // Without lending, every message goes to the event queue.
                    if let Err(e) = st.drain(false) {
                        tracing::warn!(rank = self.rank, error = %e, "ofi progress");
                        break;
                    }
                    // The owner waits for the lock meanwhile: a round holds it briefly.
                    if st.prov.may_sleep() || started.elapsed() > ROUND_BUDGET {
                        break;
                    }
                }
            }
            st.flush();
            if beat_due {
                self.fail_silent_peers(st);
            }
            !owner_active && self.wait_fd.is_some() && st.prov.may_sleep()
        })
    }

    /// Tells every live peer this rank is alive, unless messages to it wait already (they
    /// tell it as well, once they go).
    fn send_heartbeats(&self, st: &mut State) {
        for peer in 0..self.size as Rank {
            if peer != self.rank && !st.is_failed(peer) && st.outbox[peer as usize].len() < 4 {
                let _ = st.send_control(peer, Kind::Heartbeat, [0; 6], &[], false);
            }
        }
    }

    /// Fails every peer not heard from for the peer timeout.
    fn fail_silent_peers(&self, st: &mut State) {
        let now = Instant::now();
        for peer in 0..self.size as Rank {
            if peer == self.rank || st.is_failed(peer) {
                continue;
            }
            if now.duration_since(st.last_heard[peer as usize]) > self.peer_timeout {
                tracing::warn!(
                    rank = self.rank,
                    peer,
                    "ofi: peer silent past the peer timeout"
                );
                st.fail_peer(peer);
            }
        }
    }
}

impl Publisher for Shared {
    /// A region goes: no new lookups of its key succeed; peers that looked it up are told, and
    /// its registration (and so its memory) is let go once they all have answered, failed, or
    /// stayed silent past the peer timeout.
    fn unpublish(&self, key: RegionKey) {
        self.table.forget(key, true);
        let pending = self.with_state(|st| {
            let Some(mr) = st.local.get_mut(&key.0) else {
                return false;
            };
            mr.dying = true;
            let holders = std::mem::take(&mut mr.holders);
            let mut told = Vec::new();
            for h in holders {
                if st
                    .send_control(h, Kind::KeyGone, [key.0, 0, 0, 0, 0, 0], &[], false)
                    .is_ok()
                {
                    told.push(h);
                }
            }
            match st.local.get_mut(&key.0) {
                Some(mr) => mr.awaiting = told,
                None => return false,
            }
            if st.local[&key.0].awaiting.is_empty() {
                st.close_local(key.0);
                return false;
            }
            true
        });
        if !pending {
            return;
        }
        let deadline = Instant::now() + self.peer_timeout;
        loop {
            let done = self.with_state(|st| {
                let _ = st.drain(false);
                match st.local.get(&key.0) {
                    None => true,
                    Some(mr) if Instant::now() >= deadline => {
                        // A peer that keeps a retired key past the timeout breaks the protocol.
                        for r in mr.awaiting.clone() {
                            st.fail_peer(r);
                        }
                        st.close_local(key.0);
                        true
                    }
                    Some(_) => false,
                }
            });
            if done {
                return;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// One rank's ofi endpoint.
pub struct OfiFabric {
    shared: Arc<Shared>,
    progress: Option<JoinHandle<()>>,
}

impl OfiFabric {
    /// Opens this rank's endpoint and connects it to its peers' through `store`.
    ///
    /// On IP providers it uses the interface that holds `local_ip` (the address that reaches
    /// the store), where one of the provider's entries is bound to it.
    pub fn new(
        rank: Rank,
        size: usize,
        store: &dyn Store,
        cfg: &FabricConfig,
        local_ip: Option<std::net::IpAddr>,
    ) -> Result<OfiFabric> {
        if rank as usize >= size {
            return Err(TransportError::InvalidRank { rank, size });
        }
        let mut prov = Provider::open(size, state::MESSAGE_ROOM, local_ip)?;
        store.set(&format!("ofi/addr/{rank}"), &prov.name()?)?;
        let mut names = Vec::with_capacity(size);
        for r in 0..size {
            names.push(store.get(&format!("ofi/addr/{r}"), cfg.bootstrap_timeout)?);
        }
        prov.insert_addresses(&names)?;
        let provider_name = prov.traits.name.clone();
        let wait_fd = prov.wait_fd;
        tracing::debug!(rank, provider = %provider_name, traits = ?prov.traits, "ofi endpoint open");
        let events = Arc::new(EventQueue::default());
        let table = RegionTable::new(rank, cfg.max_regions);
        let failed: Arc<Vec<AtomicBool>> =
            Arc::new((0..size).map(|_| AtomicBool::new(false)).collect());
        let st = State::new(
            prov,
            rank,
            size,
            events.clone(),
            table.clone(),
            failed.clone(),
        )?;
        let shared = Arc::new(Shared {
            rank,
            size,
            start: Instant::now(),
            state: Mutex::new(st),
            events,
            table,
            failed,
            owner_polled: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            peer_timeout: cfg.peer_timeout,
            provider_name,
            wait_fd,
        });
        let s = shared.clone();
        let progress = std::thread::Builder::new()
            .name(format!("rdcoll-ofi-{rank}"))
            .spawn(move || progress_thread(&s))
            .map_err(|e| TransportError::io("starting the ofi progress thread", e))?;
        Ok(OfiFabric {
            shared,
            progress: Some(progress),
        })
    }

    /// The libfabric provider in use (e.g. `tcp;ofi_rxm`).
    pub fn provider(&self) -> &str {
        &self.shared.provider_name
    }

    fn publisher(&self) -> Weak<dyn Publisher> {
        let weak: Weak<Shared> = Arc::downgrade(&self.shared);
        weak
    }
}

fn progress_thread(sh: &Shared) {
    let interval = sh.peer_timeout / 5;
    let mut next_beat = Instant::now() + interval;
    let mut nap = Duration::from_micros(20);
    while !sh.stop.load(Ordering::Acquire) {
        let now = Instant::now();
        let beat_due = now >= next_beat;
        if beat_due {
            next_beat = now + interval;
        }
        let may_sleep = sh.progress_round(beat_due);
        let until_beat = next_beat.saturating_duration_since(Instant::now());
        match sh.wait_fd {
            Some(fd) if may_sleep => {
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = until_beat.as_millis().clamp(1, 50) as i32;
                // SAFETY: one valid pollfd for the duration of the call.
                unsafe { libc::poll(&mut pfd, 1, ms) };
                nap = Duration::from_micros(20);
            }
            _ => {
                std::thread::sleep(nap.min(until_beat.max(Duration::from_micros(20))));
                nap = (nap * 2).min(MAX_NAP);
            }
        }
    }
}

impl Drop for OfiFabric {
    fn drop(&mut self) {
        let sh = &self.shared;
        sh.with_state(|st| {
            for peer in 0..sh.size as Rank {
                if peer != sh.rank && !st.is_failed(peer) {
                    let _ = st.send_control(peer, Kind::Bye, [0; 6], &[], false);
                }
            }
            // What this rank sent goes out before it leaves (a rank that sends and exits loses
            // nothing): queued messages handed to the provider, and those that report a
            // completion delivered; bounded by the peer timeout (a dead peer never answers).
            let deadline = Instant::now() + sh.peer_timeout;
            loop {
                let _ = st.drain(false);
                let idle = st.queued == 0
                    && st.free_slots.len() == st.slots.len()
                    && st.postings.is_empty();
                if idle || Instant::now() >= deadline {
                    break;
                }
                std::thread::yield_now();
            }
            // Injected messages (the goodbyes among them) report no completion: a little more
            // progress for the provider to put them on the wire.
            let linger = Instant::now() + LINGER;
            while Instant::now() < linger {
                let _ = st.drain(false);
                std::thread::yield_now();
            }
        });
        sh.stop.store(true, Ordering::Release);
        if let Some(t) = self.progress.take() {
            let _ = t.join();
        }
    }
}

impl Fabric for OfiFabric {
    fn rank(&self) -> Rank {
        self.shared.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    fn backend(&self) -> &'static str {
        "ofi"
    }

    fn alloc_region(&self, len: usize) -> Result<Region> {
        let rank = self.shared.rank;
        let region = self.shared.table.insert_via(self.publisher(), |key, p| {
            Region::alloc_owned(rank, key, len, p)
        })?;
        self.shared.register(region, false)
    }

    unsafe fn register_memory(&self, ptr: *mut u8, len: usize) -> Result<Region> {
        let rank = self.shared.rank;
        let region = self.shared.table.insert_via(self.publisher(), |key, p| {
            Region::external(rank, key, ptr, len, p)
        })?;
        self.shared.register(region, true)
    }

    fn put(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        imm: Option<u64>,
    ) -> Result<OpId> {
        self.shared
            .with_state(|st| st.put(src, src_offset, len, dst, imm, None))
    }

    fn put_flag(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        flag: u8,
    ) -> Result<OpId> {
        self.shared
            .with_state(|st| st.put(src, src_offset, len, dst, None, Some(flag)))
    }

    fn get(&self, dst: &Region, dst_offset: usize, len: usize, src: RemoteAddr) -> Result<OpId> {
        self.shared
            .with_state(|st| st.get(dst, dst_offset, len, src))
    }

    fn send(&self, dest: Rank, data: &[u8]) -> Result<()> {
        self.send_parts(dest, &[data])
    }

    fn send_parts(&self, dest: Rank, parts: &[&[u8]]) -> Result<()> {
        crate::types::check_message_len(parts)?;
        let sh = &self.shared;
        sh.with_state(|st| {
            st.check_peer(dest)?;
            if dest == sh.rank {
                sh.events.push(Event::Message {
                    src: dest,
                    data: crate::types::payload_of(parts),
                });
                return Ok(());
            }
            let mut scratch = std::mem::take(&mut st.scratch);
            let seq = st.next_seq(dest);
            wire::user(sh.rank, seq, parts, &mut scratch);
            st.scratch = scratch;
            st.send_scratch(dest, false)
        })
    }

    fn poll(&self) -> Result<Option<Event>> {
        let mut out = None;
        self.poll_with(&mut |ev| out = Some(ev.into_owned()))?;
        Ok(out)
    }

    fn poll_with(&self, f: &mut dyn FnMut(EventRef<'_>)) -> Result<bool> {
        let sh = &self.shared;
        sh.owner_polled
            .store(sh.start.elapsed().as_nanos() as u64 | 1, Ordering::Relaxed);
        let got = sh.with_state(|st| -> Result<_> {
            if let Some(ev) = sh.events.pop() {
                return Ok(Some(Err(ev)));
            }
            Ok(match st.drain(true)? {
                Some(lent) => Some(Ok(lent)),
                None => sh.events.pop().map(Err),
            })
        })?;
        match got {
            None => Ok(false),
            Some(Err(ev)) => {
                f(EventRef::Owned(ev));
                Ok(true)
            }
            Some(Ok(lent)) => {
                // SAFETY: the bytes lie in a receive buffer held (its `lent` count) until the
                // count is dropped below, after the callback.
                let data = unsafe { std::slice::from_raw_parts(lent.data, lent.len) };
                f(EventRef::Message {
                    src: lent.src,
                    data,
                });
                sh.with_state(|st| {
                    st.recv[lent.buffer].lent -= 1;
                    st.maybe_repost(lent.buffer);
                });
                Ok(true)
            }
        }
    }

    fn block(&self, timeout: Duration) {
        self.shared.owner_polled.store(0, Ordering::Relaxed);
        self.shared.events.block(timeout);
    }

    fn block_unless(&self, timeout: Duration, ready: &dyn Fn() -> bool) {
        self.shared.owner_polled.store(0, Ordering::Relaxed);
        self.shared.events.block_unless(timeout, ready);
    }

    fn now(&self) -> Duration {
        self.shared.start.elapsed()
    }

    fn pending_report(&self) -> Option<String> {
        // Bounded: a thread stuck holding the state is itself the answer.
        let Some(st) = self.shared.state.try_lock_for(Duration::from_secs(1)) else {
            let rank = self.shared.rank;
            return Some(format!("ofi rank {rank}: its state stayed locked for 1 s"));
        };
        Some(st.pending_report())
    }

    fn is_failed(&self, rank: Rank) -> bool {
        self.shared
            .failed
            .get(rank as usize)
            .is_some_and(|f| f.load(Ordering::Acquire))
    }
}

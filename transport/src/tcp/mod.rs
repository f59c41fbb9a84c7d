//! `tcp`: processes on several hosts. One nonblocking socket per pair of ranks, a framed wire
//! format ([`wire`]), and an I/O thread per rank that performs peers' puts and gets on their
//! behalf (software RDMA), so a get is served even while the target's owner computes. A host
//! thread that polls and finds no event reads the sockets itself (`Shared::read_now`), so a
//! busy-polling rank sees a message as soon as it arrives rather than after the I/O thread's
//! wake-up; a per-peer read lock keeps each peer's frames read and handled in order.
//!
//! Liveness: the I/O thread sends a heartbeat every fifth of the peer timeout; a peer whose link
//! closes, errors, sends garbage, or stays silent for the peer timeout is failed, and every
//! pending operation that involves it completes with `PeerFailed`.

mod aside;
mod connect;
mod engine;
mod frames;
mod host_poll;
mod landing;
mod out;
mod pending;
mod send;
pub mod wire;
#[cfg(test)]
mod wire_fuzz;

pub(crate) use pending::{Pending, PendingKind};

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::bootstrap::Store;
use crate::config::FabricConfig;
use crate::error::{Result, TransportError};
use crate::fabric::Fabric;
use crate::region::{Region, RegionTable};
use crate::types::{Event, EventRef, OpId, PeerCounters, Rank, RemoteAddr};
use crate::wait::EventQueue;
use out::OutQueue;
use wire::{Frame, CHUNK};

pub(crate) struct Peer {
    stream: Option<mio::net::TcpStream>,
    out: Mutex<OutQueue>,
    /// A hint that `out` holds frames (set when one is queued, cleared by the polling host
    /// thread's flush that empties it): lets that thread's poll skip the peers with nothing to
    /// write without touching their locks.
    queued: AtomicBool,
    failed: AtomicBool,
}

pub(crate) struct Shared {
    rank: Rank,
    size: usize,
    start: Instant,
    table: Arc<RegionTable>,
    events: EventQueue,
    peers: Vec<Peer>,
    /// What was read from each peer and not yet handled; whoever holds a peer's lock reads
    /// its socket (the I/O thread, or a host thread polling: `read_now`).
    readers: Vec<Mutex<engine::ReadBuf>>,
    /// When each peer was last heard from (nanoseconds since `start`): bytes read from it, by
    /// the I/O thread or a host thread, or its socket reporting an event. Silence past the peer
    /// timeout fails it.
    heard: Vec<AtomicU64>,
    /// Peers a host thread stopped reading with bytes left (its budget ran out): the I/O
    /// thread reads them next (readiness is edge-triggered: no event would say so).
    host_left: Vec<AtomicBool>,
    /// Pending operations; peer failure is decided under this lock so none is missed.
    pending: Mutex<HashMap<u64, Pending>>,
    /// Put bytes in flight toward each peer, and their peak (under the `pending` lock's
    /// discipline: updated where pending puts are added and removed).
    flight: Mutex<Vec<PeerCounters>>,
    /// `RDCOLL_SINK_RATE`: deposits into this rank's memory are paced to this many bytes/s.
    pub(crate) sink: Option<Mutex<crate::config::Pacer>>,
    next_op: AtomicU64,
    stop: AtomicBool,
    waker: mio::Waker,
    peer_timeout: Duration,
    /// The ranks of this host outnumber its cores (`Fabric::note_crowded`): the I/O thread
    /// stands aside from reading while host threads poll ([`aside`]).
    crowded: AtomicBool,
    /// Host threads' polls of the sockets, counted while `crowded`.
    host_polls: AtomicU64,
    /// The I/O thread stands aside from reading.
    aside: AtomicBool,
    /// Host threads asleep in `block` (while crowded).
    asleep: AtomicUsize,
    /// Which peers' sockets a host thread's poll reads (`None`: every peer's, one peer).
    host_poll: Option<host_poll::HostPoll>,
}

/// One rank's tcp endpoint.
pub struct TcpFabric {
    shared: Arc<Shared>,
    io_thread: Option<JoinHandle<()>>,
}

impl TcpFabric {
    /// Connects rank `rank` of `size` to its peers through `store`.
    pub fn new(
        rank: Rank,
        size: usize,
        store: &dyn Store,
        cfg: &FabricConfig,
        local_ip: Option<IpAddr>,
    ) -> Result<TcpFabric> {
        if rank as usize >= size {
            return Err(TransportError::InvalidRank { rank, size });
        }
        let streams = connect::connect_mesh(rank, size, store, cfg.bootstrap_timeout, local_ip)?;
        let poll = mio::Poll::new().map_err(|e| TransportError::io("creating the poller", e))?;
        let waker = mio::Waker::new(poll.registry(), mio::Token(size))
            .map_err(|e| TransportError::io("creating the waker", e))?;
        let mut peers = Vec::with_capacity(size);
        for (r, s) in streams.into_iter().enumerate() {
            let stream = match s {
                Some(s) => {
                    s.set_nonblocking(true)
                        .map_err(|e| TransportError::io("nonblocking socket", e))?;
                    let mut s = mio::net::TcpStream::from_std(s);
                    poll.registry()
                        .register(
                            &mut s,
                            mio::Token(r),
                            mio::Interest::READABLE | mio::Interest::WRITABLE,
                        )
                        .map_err(|e| TransportError::io("registering a socket", e))?;
                    Some(s)
                }
                None => None,
            };
            peers.push(Peer {
                stream,
                out: Mutex::new(OutQueue::default()),
                queued: AtomicBool::new(false),
                failed: AtomicBool::new(false),
            });
        }
        let sockets: Vec<(usize, std::os::fd::RawFd)> = peers
            .iter()
            .enumerate()
            .filter_map(|(r, p)| Some((r, p.stream.as_ref()?.as_raw_fd())))
            .collect();
        let host_poll = host_poll::HostPoll::new(&sockets)?;
        let shared = Arc::new(Shared {
            rank,
            size,
            start: Instant::now(),
            table: RegionTable::new(rank, cfg.max_regions),
            events: EventQueue::default(),
            peers,
            readers: (0..size)
                .map(|_| Mutex::new(engine::ReadBuf::new()))
                .collect(),
            host_left: (0..size).map(|_| AtomicBool::new(false)).collect(),
            heard: (0..size).map(|_| AtomicU64::new(0)).collect(),
            pending: Mutex::new(HashMap::new()),
            flight: Mutex::new(vec![PeerCounters::default(); size]),
            sink: cfg
                .sink_rate
                .map(|r| Mutex::new(crate::config::Pacer::new(r))),
            next_op: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            waker,
            peer_timeout: cfg.peer_timeout,
            crowded: AtomicBool::new(false),
            host_polls: AtomicU64::new(0),
            aside: AtomicBool::new(false),
            asleep: AtomicUsize::new(0),
            host_poll,
        });
        let s2 = shared.clone();
        let io_thread = std::thread::Builder::new()
            .name(format!("rdcoll-tcp-{rank}"))
            .spawn(move || engine::run(s2, poll))
            .map_err(|e| TransportError::io("starting the I/O thread", e))?;
        Ok(TcpFabric {
            shared,
            io_thread: Some(io_thread),
        })
    }
}

impl Shared {
    /// Notes that peer `r` was heard from now.
    pub(super) fn heard_now(&self, r: usize) {
        let now = self.start.elapsed().as_nanos() as u64;
        self.heard[r].store(now, Ordering::Relaxed);
    }

    /// How long peer `r` has been silent.
    pub(super) fn silent_for(&self, r: usize) -> Duration {
        let now = self.start.elapsed().as_nanos() as u64;
        Duration::from_nanos(now.saturating_sub(self.heard[r].load(Ordering::Relaxed)))
    }

    fn check_rank(&self, rank: Rank) -> Result<()> {
        if (rank as usize) < self.size {
            Ok(())
        } else {
            Err(TransportError::InvalidRank {
                rank,
                size: self.size,
            })
        }
    }

    fn new_op(&self) -> OpId {
        OpId(self.next_op.fetch_add(1, Ordering::Relaxed))
    }

    /// Marks `rank` failed (once), completes its pending operations with `PeerFailed`, reports
    /// it, and closes the link.
    pub(crate) fn fail_peer(&self, rank: Rank, why: &str) {
        let peer = &self.peers[rank as usize];
        let drained: Vec<u64> = {
            let mut pending = self.pending.lock();
            if peer.failed.swap(true, Ordering::AcqRel) {
                return;
            }
            let ids: Vec<u64> = pending
                .iter()
                .filter(|(_, p)| p.peer == rank)
                .map(|(id, _)| *id)
                .collect();
            for id in &ids {
                if let Some(p) = pending.remove(id) {
                    self.landed(&p);
                }
            }
            ids
        };
        tracing::debug!("rank {}: peer {rank} failed: {why}", self.rank);
        // The link closes and its queue goes (releasing held payloads) before the operations
        // complete: their callers may then reuse or free the memory.
        if let Some(s) = peer.stream.as_ref() {
            let _ = s.shutdown(std::net::Shutdown::Both);
            if let Some(hp) = &self.host_poll {
                hp.forget(s.as_raw_fd());
            }
        }
        peer.out.lock().clear();
        peer.queued.store(false, Ordering::Relaxed);
        for op in drained {
            self.events.push(Event::Completed {
                op: OpId(op),
                result: Err(TransportError::PeerFailed(rank)),
            });
        }
        self.events.push(Event::PeerFailed { rank });
    }
}

impl TcpFabric {
    /// A put (with an immediate or a flag, or neither) as frames the target deposits.
    fn put_frames(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        imm: Option<u64>,
        flag: Option<u8>,
    ) -> Result<OpId> {
        let sh = &self.shared;
        src.check_range(src_offset, len)?;
        sh.check_rank(dst.rank)?;
        let op = sh.new_op();
        if dst.rank == sh.rank {
            let result = match flag {
                Some(v) => sh.table.put_flag_from(src, src_offset, len, dst, v),
                None => sh.table.put_from(src, src_offset, len, dst),
            };
            if let (Ok(()), Some(imm)) = (&result, imm) {
                sh.events.push(Event::Immediate { src: sh.rank, imm });
            }
            sh.events.push(Event::Completed { op, result });
            return Ok(op);
        }
        sh.add_pending(
            op,
            Pending {
                peer: dst.rank,
                key: dst.key.0,
                offset: dst.offset,
                len,
                kind: PendingKind::Put,
            },
        )?;
        let mut chunk_off = 0;
        loop {
            let n = (len - chunk_off).min(CHUNK);
            let head = Frame::Put {
                op: op.0,
                key: dst.key.0,
                base: dst.offset as u64,
                total: len as u64,
                chunk_off: chunk_off as u64,
                imm,
                flag,
                data: &[],
            };
            let frame = out::data_frame(&head, src, src_offset + chunk_off, n);
            let frame = match frame {
                Ok(f) => f,
                Err(e) => {
                    sh.complete(op.0, |_| Err(e));
                    return Ok(op);
                }
            };
            // A failure here already completed the op with PeerFailed.
            if sh.enqueue_frame(dst.rank, frame).is_err() {
                return Ok(op);
            }
            chunk_off += n;
            if chunk_off >= len {
                return Ok(op);
            }
        }
    }
}

impl TcpFabric {
    /// A put of at most one frame, copied into the frame now and not acknowledged: done for
    /// the caller on return (its source is free; the stream keeps it in order with this rank's
    /// later writes to the peer). A failure to deliver shows as the peer's failure.
    fn put_unacknowledged(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        flag: Option<u8>,
    ) -> Result<crate::PutStatus> {
        let sh = &self.shared;
        src.check_range(src_offset, len)?;
        let head = Frame::Put {
            op: wire::UNACKNOWLEDGED,
            key: dst.key.0,
            base: dst.offset as u64,
            total: len as u64,
            chunk_off: 0,
            imm: None,
            flag,
            data: &[],
        };
        sh.send_now(
            dst.rank,
            &wire::encode_head(&head, len),
            src,
            src_offset,
            len,
        )?;
        Ok(crate::PutStatus::Done)
    }
}

/// Hands a queued event to a `poll_with` callback (a message's bytes lent from the event).
fn hand_over(f: &mut dyn FnMut(EventRef<'_>), ev: Event) {
    match ev {
        Event::Message { src, data } => f(EventRef::Message { src, data: &data }),
        ev => f(EventRef::Owned(ev)),
    }
}

impl Fabric for TcpFabric {
    fn put_now(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        flag: Option<u8>,
    ) -> Result<crate::PutStatus> {
        let sh = &self.shared;
        sh.check_rank(dst.rank)?;
        if dst.rank != sh.rank && len <= wire::CHUNK {
            return self.put_unacknowledged(src, src_offset, len, dst, flag);
        }
        crate::fabric::start_put(self, src, src_offset, len, dst, flag)
    }

    /// One get per frame's worth: several gets in flight keep the socket busy while a served
    /// one is read (2 ranks over loopback: 2-4 MiB latency 0.6-0.8x of 2 MiB chunks', bandwidth
    /// 1.0-1.2x).
    fn rndv_chunk_hint(&self) -> Option<usize> {
        Some(CHUNK)
    }

    fn counters(&self, peer: Rank) -> Option<PeerCounters> {
        self.shared.flight.lock().get(peer as usize).copied()
    }
    fn rank(&self) -> Rank {
        self.shared.rank
    }
    fn size(&self) -> usize {
        self.shared.size
    }
    fn backend(&self) -> &'static str {
        "tcp"
    }

    fn alloc_region(&self, len: usize) -> Result<Region> {
        let rank = self.shared.rank;
        self.shared
            .table
            .insert(|key, p| Region::alloc_owned(rank, key, len, p))
    }

    unsafe fn register_memory(&self, ptr: *mut u8, len: usize) -> Result<Region> {
        let rank = self.shared.rank;
        self.shared
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
        self.put_frames(src, src_offset, len, dst, imm, None)
    }

    fn put_flag(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        flag: u8,
    ) -> Result<OpId> {
        self.put_frames(src, src_offset, len, dst, None, Some(flag))
    }

    fn gets_into_private(&self) -> bool {
        true
    }

    fn get(&self, dst: &Region, dst_offset: usize, len: usize, src: RemoteAddr) -> Result<OpId> {
        let sh = &self.shared;
        dst.check_range(dst_offset, len)?;
        sh.check_rank(src.rank)?;
        let op = sh.new_op();
        if src.rank == sh.rank {
            let result = sh.table.get_into(dst, dst_offset, len, src);
            sh.events.push(Event::Completed { op, result });
            return Ok(op);
        }
        let kind = PendingKind::Get {
            dst: dst.clone(),
            dst_off: dst_offset,
            received: 0,
        };
        sh.add_pending(
            op,
            Pending {
                peer: src.rank,
                key: src.key.0,
                offset: src.offset,
                len,
                kind,
            },
        )?;
        let frame = Frame::Get {
            op: op.0,
            key: src.key.0,
            offset: src.offset as u64,
            len: len as u64,
        };
        let _ = sh.enqueue(src.rank, frame.encode());
        Ok(op)
    }

    fn send(&self, dest: Rank, data: &[u8]) -> Result<()> {
        self.send_parts(dest, &[data])
    }

    fn send_parts(&self, dest: Rank, parts: &[&[u8]]) -> Result<()> {
        let sh = &self.shared;
        crate::types::check_message_len(parts)?;
        sh.check_rank(dest)?;
        if dest == sh.rank {
            sh.events.push(Event::Message {
                src: dest,
                data: crate::types::payload_of(parts),
            });
            return Ok(());
        }
        sh.send_message(dest, parts)
    }

    fn poll(&self) -> Result<Option<Event>> {
        let sh = &self.shared;
        if let Some(ev) = sh.events.pop() {
            return Ok(Some(ev));
        }
        sh.read_now();
        Ok(sh.events.pop())
    }

    /// As [`poll`](Fabric::poll), but the messages this host thread reads while no event is
    /// queued are handed to `f` where they lie in the read buffer (no copy into an event).
    fn poll_with(&self, f: &mut dyn FnMut(EventRef<'_>)) -> Result<bool> {
        let sh = &self.shared;
        let mut lent = false;
        if let Some(ev) = sh.events.pop() {
            hand_over(f, ev);
            return Ok(true);
        }
        {
            let mut counting = |ev: EventRef<'_>| {
                lent = true;
                f(ev)
            };
            sh.read_now_lending(&mut Some(&mut counting));
        }
        if lent {
            return Ok(true);
        }
        Ok(sh.events.pop().map(|ev| hand_over(f, ev)).is_some())
    }

    fn block(&self, timeout: Duration) {
        let sh = &self.shared;
        sh.sleeping(|| sh.events.block(timeout))
    }

    fn block_unless(&self, timeout: Duration, ready: &dyn Fn() -> bool) {
        let sh = &self.shared;
        sh.sleeping(|| sh.events.block_unless(timeout, ready))
    }

    fn note_crowded(&self, crowded: bool) {
        self.shared.crowded.store(crowded, Ordering::Relaxed);
    }

    fn now(&self) -> Duration {
        self.shared.start.elapsed()
    }

    /// Frames wait in `dest`'s queue: its socket was full (the flushes that empty the queue,
    /// the I/O thread's and a polling host thread's, clear the hint; a failed peer has none).
    fn backlogged(&self, dest: Rank) -> bool {
        self.shared
            .peers
            .get(dest as usize)
            .is_some_and(|p| p.queued.load(Ordering::Relaxed))
    }

    fn is_failed(&self, rank: Rank) -> bool {
        self.shared
            .peers
            .get(rank as usize)
            .is_some_and(|p| p.failed.load(Ordering::Acquire))
    }
}

impl Drop for TcpFabric {
    fn drop(&mut self) {
        let sh = &self.shared;
        for r in 0..sh.size as Rank {
            if r != sh.rank {
                let _ = sh.enqueue(r, Frame::Bye.encode());
            }
        }
        sh.stop.store(true, Ordering::Release);
        let _ = sh.waker.wake();
        if let Some(t) = self.io_thread.take() {
            let _ = t.join();
        }
        sh.events.wake_all();
    }
}

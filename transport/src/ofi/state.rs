//! Everything one ofi rank keeps under its state lock: the provider, receive buffers, send
//! slots, the per-peer queues of messages waiting for room, operations in flight, and the
//! registrations on both sides. Completions and received messages are handled in
//! [`super::handle`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::keys::{LocalMr, RemoteMr};
use super::post::{OpContext, Posted};
use super::provider::Provider;
use super::wire::{self, Kind};
use crate::error::{Result, TransportError};
use crate::region::{Region, RegionTable};
use crate::types::{Event, OpId, Rank};
use crate::wait::EventQueue;

/// Puts and gets up to this size travel inside messages (one message each way, no key
/// lookup); larger ones are one-sided writes and reads.
pub(crate) const INLINE_MAX: usize = 16 << 10;
/// Bytes of each multi-receive buffer.
pub(crate) const RECV_BUFFER_BYTES: usize = 4 << 20;
/// Multi-receive buffers posted at once.
pub(crate) const RECV_BUFFERS: usize = 4;
/// Room for the largest message plus headers.
pub(crate) const MESSAGE_ROOM: usize = crate::MAX_MESSAGE_SIZE + wire::CONTROL_HEADER;
/// Registered send buffers for messages too long to inject.
const SEND_SLOTS: usize = 32;
/// How long a peer that a send found unreachable keeps its last messages' chance to come up
/// (the provider may still hold them, its farewell among them, when the completion queue is
/// first found empty) before its failure is delivered without its farewell. Without it, one
/// run in about ten of `random_messages_and_windows_over_ofi` on a loaded 2-vCPU host lost a
/// departed sender's last messages (reproduced; the same before this was added).
const LOSS_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

/// Token bits naming a receive buffer or a send slot rather than an operation.
pub(crate) const RECV_BIT: u64 = 1 << 63;
pub(crate) const SLOT_BIT: u64 = 1 << 62;

pub(crate) struct RecvBuffer {
    pub(crate) mem: Vec<u8>,
    pub(crate) mr: *mut rdcoll_ofi_sys::fid_mr,
    pub(crate) desc: *mut c_void,
    pub(crate) ctx: Box<OpContext>,
    pub(crate) posted: bool,
    /// Messages in it lent to a caller's callback right now.
    pub(crate) lent: u32,
}

pub(crate) struct SendSlot {
    pub(crate) mem: Vec<u8>,
    pub(crate) mr: *mut rdcoll_ofi_sys::fid_mr,
    pub(crate) desc: *mut c_void,
    pub(crate) ctx: Box<OpContext>,
    pub(crate) dest: Rank,
}

/// A message waiting for room; `fenced` ones (they announce data written one-sidedly) also
/// wait until the writes to their target before them have landed.
pub(crate) struct Outgoing {
    pub(crate) bytes: Vec<u8>,
    pub(crate) fenced: bool,
}

/// A one-sided write or read, waiting for its key, for room, or posted.
pub(crate) struct RmaRequest {
    pub(crate) op: u64,
    pub(crate) write: bool,
    pub(crate) region: Region,
    pub(crate) local_offset: usize,
    pub(crate) len: usize,
    pub(crate) dest: Rank,
    pub(crate) key: u64,
    pub(crate) remote_offset: usize,
    /// For a write: the immediate and flag its `Notice` carries.
    pub(crate) marks: Option<(Option<u64>, Option<u8>)>,
}

/// A one-sided operation the provider holds.
pub(crate) struct Posting {
    /// Handed to the provider; must stay at its address until the completion.
    pub(crate) _ctx: Box<OpContext>,
    pub(crate) request: RmaRequest,
}

/// What an operation of this rank waits for.
pub(crate) enum Waiting {
    /// The target's `PutAck`.
    Ack,
    /// The target's `GetData`, to copy into `region` at `offset`.
    Data { region: Region, offset: usize },
    /// A one-sided write or read (its key, room, or completion).
    Rma,
}

pub(crate) struct Operation {
    pub(crate) dest: Rank,
    pub(crate) waiting: Waiting,
}

pub(crate) struct State {
    pub(crate) prov: Provider,
    pub(crate) rank: Rank,
    pub(crate) size: usize,
    pub(crate) events: Arc<EventQueue>,
    pub(crate) table: Arc<RegionTable>,
    pub(crate) failed: Arc<Vec<AtomicBool>>,
    pub(crate) recv: Vec<RecvBuffer>,
    /// The fewest receive buffers the provider has held at once since the start (a buffer
    /// is off while it is handed back full and until it is posted again), for the report.
    pub(crate) fewest_posted: usize,
    pub(crate) slots: Vec<SendSlot>,
    pub(crate) free_slots: Vec<usize>,
    pub(crate) outbox: Vec<VecDeque<Outgoing>>,
    pub(crate) queued: usize,
    /// The peer whose outbox the next [`State::flush`] tries first (it moves on by one each
    /// time, so that no peer's queue always goes first).
    flush_from: usize,
    pub(crate) retry: VecDeque<RmaRequest>,
    pub(crate) postings: HashMap<u64, Posting>,
    pub(crate) ops: HashMap<u64, Operation>,
    pub(crate) parked: HashMap<(Rank, u64), Vec<RmaRequest>>,
    pub(crate) remote: HashMap<(Rank, u64), RemoteMr>,
    pub(crate) local: HashMap<u64, LocalMr>,
    pub(crate) writes_in_flight: Vec<u32>,
    pub(crate) last_heard: Vec<Instant>,
    /// Number of the next message to each peer, and expected next from each peer.
    pub(crate) send_seq: Vec<u64>,
    pub(crate) recv_seq: Vec<u64>,
    /// Peers whose failure has been delivered (`fail_peer`): nothing more is taken from them.
    /// A peer that is failed (`is_failed`, every operation to it fails) but not gone yet was
    /// found unreachable by a send, and what it sent before may still be coming
    /// (`lose_peer`).
    pub(crate) gone: Vec<bool>,
    /// How many peers are failed but not gone.
    pub(crate) losing: usize,
    /// When the earliest of them was found unreachable.
    losing_since: Option<Instant>,
    /// Messages that arrived ahead of their turn, per sender, and how many in all.
    pub(crate) stash: Vec<BTreeMap<u64, Vec<u8>>>,
    pub(crate) stashed: usize,
    pub(crate) next_token: u64,
    /// Regions whose last handle may be in here, dropped after the lock is released (a drop
    /// can deregister, which takes the lock).
    pub(crate) graveyard: Vec<Region>,
    pub(crate) scratch: Vec<u8>,
}

// SAFETY: the raw pointers (registrations, descriptors) name libfabric objects that only this
// state touches, under its lock.
unsafe impl Send for State {}

impl State {
    pub(crate) fn new(
        prov: Provider,
        rank: Rank,
        size: usize,
        events: Arc<EventQueue>,
        table: Arc<RegionTable>,
        failed: Arc<Vec<AtomicBool>>,
    ) -> Result<State> {
        let mut st = State {
            prov,
            rank,
            size,
            events,
            table,
            failed,
            recv: Vec::new(),
            fewest_posted: RECV_BUFFERS,
            slots: Vec::new(),
            free_slots: Vec::new(),
            outbox: (0..size).map(|_| VecDeque::new()).collect(),
            queued: 0,
            flush_from: 0,
            retry: VecDeque::new(),
            postings: HashMap::new(),
            ops: HashMap::new(),
            parked: HashMap::new(),
            remote: HashMap::new(),
            local: HashMap::new(),
            writes_in_flight: vec![0; size],
            last_heard: vec![Instant::now(); size],
            send_seq: vec![0; size],
            recv_seq: vec![0; size],
            gone: vec![false; size],
            losing: 0,
            losing_since: None,
            stash: (0..size).map(|_| BTreeMap::new()).collect(),
            stashed: 0,
            next_token: 1,
            graveyard: Vec::new(),
            scratch: Vec::with_capacity(MESSAGE_ROOM),
        };
        for i in 0..RECV_BUFFERS {
            let mut mem = vec![0u8; RECV_BUFFER_BYTES];
            let (mr, desc, _) =
                st.prov
                    .register(mem.as_mut_ptr(), mem.len(), u64::MAX - i as u64)?;
            st.recv.push(RecvBuffer {
                mem,
                mr,
                desc,
                ctx: OpContext::new(RECV_BIT | i as u64),
                posted: false,
                lent: 0,
            });
            st.repost(i)?;
        }
        for i in 0..SEND_SLOTS {
            let mut mem = vec![0u8; MESSAGE_ROOM];
            let key = u64::MAX - (RECV_BUFFERS + i) as u64;
            let (mr, desc, _) = st.prov.register(mem.as_mut_ptr(), mem.len(), key)?;
            st.slots.push(SendSlot {
                mem,
                mr,
                desc,
                ctx: OpContext::new(SLOT_BIT | i as u64),
                dest: 0,
            });
            st.free_slots.push(i);
        }
        Ok(st)
    }

    /// Posts receive buffer `i` again.
    pub(crate) fn repost(&mut self, i: usize) -> Result<()> {
        let b = &mut self.recv[i];
        let ctx: *mut OpContext = &mut *b.ctx;
        // SAFETY: the buffer and its context live in this state until the endpoint is closed
        // (State::drop closes it first), and nothing reads or writes the buffer while posted
        // except through completions.
        let r = unsafe {
            self.prov
                .post_multi_recv(b.mem.as_mut_ptr(), b.mem.len(), b.desc, ctx)
        }?;
        b.posted = r == Posted::Taken;
        Ok(())
    }

    pub(crate) fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    /// The sequence number of the next message to `dest`.
    pub(crate) fn next_seq(&mut self, dest: Rank) -> u64 {
        let s = &mut self.send_seq[dest as usize];
        *s += 1;
        *s - 1
    }

    pub(crate) fn is_failed(&self, rank: Rank) -> bool {
        self.failed[rank as usize].load(Ordering::Acquire)
    }

    pub(crate) fn check_peer(&self, rank: Rank) -> Result<()> {
        if rank as usize >= self.size {
            return Err(TransportError::InvalidRank {
                rank,
                size: self.size,
            });
        }
        if self.is_failed(rank) {
            return Err(TransportError::PeerFailed(rank));
        }
        Ok(())
    }

    /// Sends `self.scratch` to `dest` now, or queues it behind what waits for that peer.
    pub(crate) fn send_scratch(&mut self, dest: Rank, fenced: bool) -> Result<()> {
        let blocked = fenced && self.writes_in_flight[dest as usize] > 0;
        if self.outbox[dest as usize].is_empty() && !blocked {
            let bytes = std::mem::take(&mut self.scratch);
            let r = self.try_post(dest, &bytes);
            self.scratch = bytes;
            if r? == Posted::Taken {
                return Ok(());
            }
        }
        self.outbox[dest as usize].push_back(Outgoing {
            bytes: self.scratch.clone(),
            fenced,
        });
        self.queued += 1;
        Ok(())
    }

    /// Sends a backend message.
    pub(crate) fn send_control(
        &mut self,
        dest: Rank,
        kind: Kind,
        words: [u64; 6],
        payload: &[u8],
        fenced: bool,
    ) -> Result<()> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let seq = self.next_seq(dest);
        wire::control(kind, self.rank, seq, words, payload, &mut scratch);
        self.scratch = scratch;
        self.send_scratch(dest, fenced)
    }

    /// One attempt to hand `bytes` to the provider.
    fn try_post(&mut self, dest: Rank, bytes: &[u8]) -> Result<Posted> {
        let r = if bytes.len() <= self.prov.traits.inject_size {
            self.prov.inject(bytes, dest as u64)
        } else {
            let Some(i) = self.free_slots.pop() else {
                return Ok(Posted::Again);
            };
            let slot = &mut self.slots[i];
            slot.mem[..bytes.len()].copy_from_slice(bytes);
            slot.dest = dest;
            let ctx: *mut OpContext = &mut *slot.ctx;
            // SAFETY: the slot's memory and context stay in this state, untouched, until its
            // completion hands the slot back.
            let r = unsafe {
                self.prov
                    .send(slot.mem.as_ptr(), bytes.len(), slot.desc, dest as u64, ctx)
            };
            if !matches!(r, Ok(Posted::Taken)) {
                self.free_slots.push(i);
            }
            r
        };
        match r {
            Err(e) => {
                tracing::warn!(rank = self.rank, dest, error = %e, "ofi send failed");
                self.lose_peer(dest);
                Err(TransportError::PeerFailed(dest))
            }
            ok => ok,
        }
    }

    /// Posts what waits, in order per peer, until the provider has no more room: first the
    /// receive buffers a repost could not hand to the provider (it answered "again"; only
    /// their own completion would have tried again, and an unposted buffer has none). A peer
    /// whose front message the provider cannot take now (its connection is full, or no send
    /// slot is free for a message too long to inject) holds back only its own queue: the
    /// other peers' queues are tried too, starting each time one peer further on, so that a
    /// slow peer's backlog neither blocks nor always goes before the others'.
    pub(crate) fn flush(&mut self) {
        for i in 0..self.recv.len() {
            let b = &self.recv[i];
            if !b.posted && b.lent == 0 {
                if let Err(e) = self.repost(i) {
                    tracing::warn!(rank = self.rank, error = %e, "ofi: reposting a receive buffer");
                }
            }
        }
        while let Some(req) = self.retry.pop_front() {
            if !self.post_rma(req) {
                return;
            }
        }
        let start = self.flush_from % self.size.max(1);
        self.flush_from = start + 1;
        for dest in (start..self.size).chain(0..start) {
            if self.queued == 0 {
                return;
            }
            while let Some(front) = self.outbox[dest].front() {
                if front.fenced && self.writes_in_flight[dest] > 0 {
                    break;
                }
                let bytes = std::mem::take(&mut self.outbox[dest][0].bytes);
                match self.try_post(dest as Rank, &bytes) {
                    Ok(Posted::Taken) => {
                        self.outbox[dest].pop_front();
                        self.queued -= 1;
                    }
                    Ok(Posted::Again) => {
                        self.outbox[dest][0].bytes = bytes;
                        break;
                    }
                    // The peer was failed and its queue emptied.
                    Err(_) => break,
                }
            }
        }
    }

    /// [`Fabric::pending_report`](crate::Fabric::pending_report): the send slots and queues,
    /// and per peer with anything held: queued sends, messages ahead of their turn (and
    /// which one they wait for), the sequence numbers, and when it was last heard from.
    pub(crate) fn pending_report(&self) -> String {
        let posted = self.recv.iter().filter(|b| b.posted).count();
        let mut out = format!(
            "ofi rank {}: send slots free {}/{}, queued {}, rma retries {}, postings {}, \
             receive buffers posted {}/{} (fewest {})",
            self.rank,
            self.free_slots.len(),
            self.slots.len(),
            self.queued,
            self.retry.len(),
            self.postings.len(),
            posted,
            self.recv.len(),
            self.fewest_posted
        );
        for peer in 0..self.size {
            let (queued, ahead) = (self.outbox[peer].len(), self.stash[peer].len());
            if queued == 0 && ahead == 0 {
                continue;
            }
            let first_ahead = self.stash[peer].keys().next().copied();
            out.push_str(&format!(
                "; peer {peer}: {queued} queued, {ahead} ahead of their turn (first {first_ahead:?}, \
                 waiting for {}), sent up to {}, heard {:?} ago",
                self.recv_seq[peer],
                self.send_seq[peer],
                self.last_heard[peer].elapsed()
            ));
        }
        out
    }

    /// Records an operation's outcome for the owner's `poll`.
    pub(crate) fn complete(&mut self, op: u64, result: Result<()>) {
        if let Some(o) = self.ops.remove(&op) {
            if let Waiting::Data { region, .. } = o.waiting {
                self.graveyard.push(region);
            }
            self.events.push(Event::Completed {
                op: OpId(op),
                result,
            });
        }
    }

    /// A send or one-sided operation to `rank` failed: the peer has gone, or its connection
    /// has. It is failed for everything sent to it from now on, but messages it sent before may
    /// still be on their way up the provider (a departed peer's last ones, ahead of its
    /// farewell): its failure is delivered by its farewell, or by the first drain that finds
    /// the completion queue empty once [`LOSS_GRACE`] has passed (`fail_unreachable`), so that
    /// they are not dropped.
    pub(crate) fn lose_peer(&mut self, rank: Rank) {
        if rank == self.rank || self.failed[rank as usize].swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::debug!(rank = self.rank, peer = rank, "ofi peer unreachable");
        self.losing += 1;
        self.losing_since.get_or_insert_with(Instant::now);
        self.fail_outgoing(rank);
    }

    /// Delivers the failure of the peers found unreachable (the completion queue is drained).
    pub(crate) fn fail_unreachable(&mut self) {
        if self.losing == 0 {
            self.losing_since = None;
            return;
        }
        if self.losing_since.is_some_and(|t| t.elapsed() < LOSS_GRACE) {
            return;
        }
        self.losing_since = None;
        for rank in 0..self.size as Rank {
            if self.is_failed(rank) && !self.gone[rank as usize] {
                self.fail_peer(rank);
            }
        }
    }

    /// Declares `rank` failed and delivers its failure: once, with every operation that
    /// involves it failed too.
    pub(crate) fn fail_peer(&mut self, rank: Rank) {
        if rank == self.rank || std::mem::replace(&mut self.gone[rank as usize], true) {
            return;
        }
        tracing::debug!(rank = self.rank, peer = rank, "ofi peer failed");
        if self.failed[rank as usize].swap(true, Ordering::AcqRel) {
            self.losing -= 1;
        }
        self.fail_outgoing(rank);
        self.stashed -= self.stash[rank as usize].len();
        self.stash[rank as usize].clear();
        self.events.push(Event::PeerFailed { rank });
        self.events.wake_all();
    }

    /// Fails every operation to `rank` and drops what waits to go to it.
    fn fail_outgoing(&mut self, rank: Rank) {
        let doomed: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, o)| o.dest == rank)
            .map(|(k, _)| *k)
            .collect();
        for op in doomed {
            self.complete(op, Err(TransportError::PeerFailed(rank)));
        }
        let parked: Vec<_> = self
            .parked
            .keys()
            .filter(|k| k.0 == rank)
            .copied()
            .collect();
        for at in parked {
            for req in self.parked.remove(&at).unwrap_or_default() {
                self.graveyard.push(req.region);
            }
        }
        self.queued -= self.outbox[rank as usize].len();
        self.outbox[rank as usize].clear();
        self.writes_in_flight[rank as usize] = 0;
        self.remote.retain(|k, _| k.0 != rank);
        let mut closable = Vec::new();
        for (key, mr) in self.local.iter_mut() {
            mr.holders.retain(|&h| h != rank);
            mr.awaiting.retain(|&h| h != rank);
            if mr.dying && mr.awaiting.is_empty() {
                closable.push(*key);
            }
        }
        for key in closable {
            self.close_local(key);
        }
    }

    /// Closes the registration of a retired region.
    pub(crate) fn close_local(&mut self, key: u64) {
        if let Some(mr) = self.local.remove(&key) {
            self.prov.deregister(mr.mr);
        }
    }

    /// Regions to drop once the lock is released.
    pub(crate) fn take_graveyard(&mut self) -> Vec<Region> {
        std::mem::take(&mut self.graveyard)
    }
}

impl Drop for State {
    fn drop(&mut self) {
        // Nothing may land in the buffers once they are freed: the endpoint goes first.
        self.prov.close_endpoint();
        for b in &self.recv {
            self.prov.deregister(b.mr);
        }
        for s in &self.slots {
            self.prov.deregister(s.mr);
        }
        for (_, mr) in self.local.drain() {
            self.prov.deregister(mr.mr);
        }
    }
}

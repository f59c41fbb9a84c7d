//! Runs one node of a multicast over the fabric: control messages are point-to-point messages
//! on the collectives' context (one receive posted per peer, so each peer's arrive in order),
//! pieces move by one-sided gets (`Ni::rdma_get`) from the holder's registered buffer into
//! the same place in this rank's, each counted on a counter of its own so that this rank
//! knows which piece has landed. The holder does nothing to serve them.

use rdcoll_offload::p2p::{Backoff, Context, Fetch, Group, ReqId, Source, Started, TagSel};
use rdcoll_offload::CtHandle;
use rdcoll_transport::{Rank, Region, RemoteRegion, TransportError};

use super::node::{Action, Node, OutOfStep, Params};
use super::pieces::Pieces;
use super::plan::Plan;
use super::wire::{decode, encode, max_len};
use crate::error::{CollError, Result};
use crate::progress::Waiter;

/// Tag of the control messages on the collectives' context (next to the block collectives'
/// 0xC011_01xx tags).
const MULTICAST_TAG: u32 = 0xC011_0200;

/// One multicast: who is where, and how the message is cut.
pub(crate) struct Job<'a> {
    /// Each communicator rank's cluster (equal values: same cluster).
    pub(crate) groups: &'a [u64],
    pub(crate) root: Rank,
    /// Bytes per piece (the last may be shorter).
    pub(crate) piece_len: usize,
    pub(crate) steal: bool,
    pub(crate) gets_per_peer: usize,
    /// The same on every rank: draws the peer graph (and, with the rank, each node's choices).
    pub(crate) seed: u64,
}

/// A get in flight, on a counter of its own.
struct Slot {
    ct: CtHandle,
    /// Gets issued on `ct` so far.
    issued: u64,
    /// The peer and piece of the one in flight.
    busy: Option<(usize, usize)>,
}

/// A peer's posted receive and its buffer.
struct Inbox {
    peer: usize,
    buf: Vec<u8>,
    posted: Option<ReqId>,
}

/// Everything one node has in flight.
struct Run<'a> {
    w: &'a Waiter,
    context: Context,
    job: &'a Job<'a>,
    total: usize,
    pieces: usize,
    mine: Region,
    key: RemoteRegion,
    node: Node,
    group: Group,
    inboxes: Vec<Inbox>,
    slots: Vec<Slot>,
    /// Each peer's buffer, from its bitfield.
    keys: Vec<Option<RemoteRegion>>,
    /// Rendezvous sends in flight, with the bytes they send.
    sends: std::collections::VecDeque<(ReqId, Vec<u8>)>,
}

/// Multicasts `buf` (the root's bytes at the root; its length agreed by every rank) over
/// `job`. Collective.
pub(crate) fn run(w: &Waiter, context: Context, buf: &mut [u8], job: &Job<'_>) -> Result<()> {
    let total = buf.len();
    if total == 0 || w.size() == 1 {
        return Ok(());
    }
    let pieces = total.div_ceil(job.piece_len);
    let plan = Plan::new(job.groups, job.seed);
    let me = w.rank() as usize;
    let root = job.root as usize;
    let have = if me == root {
        Pieces::all(pieces)
    } else {
        Pieces::none(pieces)
    };
    let cluster_has = if plan.cluster_of[me] == plan.cluster_of[root] {
        Pieces::all(pieces)
    } else {
        Pieces::none(pieces)
    };
    let params = Params {
        pieces,
        steal: job.steal,
        gets_per_peer: job.gets_per_peer,
    };
    let node = Node::new(
        me,
        &plan,
        have,
        &cluster_has,
        stagger(&plan, root, me),
        params,
        job.seed,
    );
    // SAFETY: `buf` is borrowed for this call, and `Run::finish` / `Run::abandon` wait for
    // every get into it (and peers get from it only until they have said their stop, which
    // this rank waits for) before the region goes.
    let mine = unsafe { w.fabric().register_memory(buf.as_mut_ptr(), total)? };
    let ni = w.engine().ni();
    let mut slots = Vec::new();
    for _ in 0..plan.peers[me].len() * job.gets_per_peer {
        match ni.ct_alloc() {
            Ok(ct) => slots.push(Slot {
                ct,
                issued: 0,
                busy: None,
            }),
            Err(e) => {
                free(w, &slots);
                return Err(e.into());
            }
        }
    }
    let mut run = Run {
        w,
        context,
        job,
        total,
        pieces,
        key: mine.remote(),
        mine,
        node,
        group: Group::new(),
        inboxes: plan.peers[me]
            .iter()
            .map(|p| Inbox {
                peer: p.node,
                buf: vec![0; max_len(pieces)],
                posted: None,
            })
            .collect(),
        slots,
        keys: vec![None; w.size()],
        sends: Default::default(),
    };
    let result = run.drive();
    run.settle(result.is_ok());
    free(w, &run.slots);
    result
}

/// `me`'s cluster's place among the clusters that pull pieces in (all but the root's), and
/// their number.
pub(crate) fn stagger(plan: &Plan, root: usize, me: usize) -> (usize, usize) {
    let (mine, root) = (plan.cluster_of[me], plan.cluster_of[root]);
    let before = (0..mine).filter(|&c| c != root).count();
    (before, plan.members.len().saturating_sub(1).max(1))
}

fn free(w: &Waiter, slots: &[Slot]) {
    for s in slots {
        let _ = w.engine().ni().ct_free(s.ct);
    }
}

fn out_of_step(e: OutOfStep) -> CollError {
    CollError::Mismatch(format!(
        "the multicast's ranks are out of step ({}): different settings or another collective?",
        e.0
    ))
}

impl Run<'_> {
    fn drive(&mut self) -> Result<()> {
        for k in 0..self.inboxes.len() {
            self.post(k)?;
        }
        let first = self.node.start();
        self.apply(first)?;
        let mut backoff = Backoff::default();
        let mut idle = 0u32;
        let engine = self.w.engine();
        loop {
            let mut moved = self.receive()?;
            moved |= self.land()?;
            if self.node.finished() && self.sends.is_empty() {
                return Ok(());
            }
            if moved {
                backoff = Backoff::default();
                continue;
            }
            idle = idle.wrapping_add(1);
            if idle.is_multiple_of(64) {
                let waiting = self.node.waiting_for().map(|p| p as Rank);
                self.w.check_ranks(waiting)?;
            }
            engine.idle(&mut backoff);
        }
    }

    /// Posts the receive for the next message from inbox `k`'s peer.
    fn post(&mut self, k: usize) -> Result<()> {
        let inbox = &mut self.inboxes[k];
        let from = Source::Rank(self.w.fabric_rank(inbox.peer as Rank));
        // SAFETY: the inbox's buffer is neither touched nor dropped while the receive is
        // posted: it is only read after `test` has returned the receive's result, and
        // `settle` cancels and waits for every posted receive before the run ends.
        let id = unsafe {
            self.w.engine().irecv_in(
                self.group,
                inbox.buf.as_mut_ptr(),
                inbox.buf.len(),
                from,
                TagSel::Value(MULTICAST_TAG),
                self.context,
                Fetch::Fabric,
            )?
        };
        inbox.posted = Some(id);
        Ok(())
    }

    /// Handles the control messages that have come, and forgets the sends that completed
    /// (one progress pass for all of them).
    fn receive(&mut self) -> Result<bool> {
        let posted: Vec<(usize, ReqId)> = self
            .inboxes
            .iter()
            .enumerate()
            .filter_map(|(k, inbox)| inbox.posted.map(|id| (k, id)))
            .collect();
        let mut ids: Vec<ReqId> = posted.iter().map(|&(_, id)| id).collect();
        ids.extend(self.sends.iter().map(|(id, _)| *id));
        let results = self.w.engine().test_all(&ids);
        let (recvs, sends) = results.split_at(posted.len());
        let mut moved = false;
        // A completed request is gone from the engine: each is forgotten here, in any order.
        let mut done = sends.iter().map(|r| r.as_ref().map(|st| st.is_some()));
        let mut failed = None;
        self.sends.retain(|_| match done.next() {
            Some(Ok(true)) => {
                moved = true;
                false
            }
            Some(Err(e)) => {
                failed.get_or_insert_with(|| e.clone());
                true
            }
            _ => true,
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
        for (&(k, _), result) in posted.iter().zip(recvs) {
            let status = match result {
                Ok(Some(st)) => *st,
                Ok(None) => continue,
                Err(e) => {
                    self.inboxes[k].posted = None;
                    return Err(e.clone().into());
                }
            };
            self.inboxes[k].posted = None;
            moved = true;
            let peer = self.inboxes[k].peer;
            let bytes = &self.inboxes[k].buf[..status.len.min(self.inboxes[k].buf.len())];
            let (msg, key) = decode(bytes, self.pieces)
                .ok_or_else(|| out_of_step(OutOfStep(format!("bad message from rank {peer}"))))?;
            if let Some(key) = key {
                let expect = self.w.fabric_rank(peer as Rank);
                if key.rank != expect || key.len != self.total {
                    return Err(out_of_step(OutOfStep(format!(
                        "rank {peer}'s buffer is {} bytes, not {}",
                        key.len, self.total
                    ))));
                }
                self.keys[peer] = Some(key);
            }
            let stop = msg == super::wire::Msg::Stop;
            let actions = self.node.on_message(peer, msg).map_err(out_of_step)?;
            if !stop {
                // A stop is a peer's last message.
                self.post(k)?;
            }
            self.apply(actions)?;
        }
        Ok(moved)
    }

    /// Hands the node the pieces whose gets have completed.
    fn land(&mut self) -> Result<bool> {
        let ni = self.w.engine().ni();
        let mut moved = false;
        for s in 0..self.slots.len() {
            let Some((peer, piece)) = self.slots[s].busy else {
                continue;
            };
            let v = ni.ct_peek(self.slots[s].ct)?;
            if v.success + v.failure < self.slots[s].issued {
                continue;
            }
            self.slots[s].busy = None;
            if v.failure > 0 {
                let rank = self.w.fabric_rank(peer as Rank);
                return Err(TransportError::PeerFailed(rank).into());
            }
            moved = true;
            let actions = self.node.on_piece(peer, piece).map_err(out_of_step)?;
            self.apply(actions)?;
        }
        Ok(moved)
    }

    fn apply(&mut self, actions: Vec<Action>) -> Result<()> {
        let engine = self.w.engine();
        for a in actions {
            match a {
                Action::Send { to, msg } => {
                    let bytes = encode(&msg, &self.key);
                    let dest = self.w.fabric_rank(to as Rank);
                    // SAFETY: `bytes` is kept (in `sends`) until the send completes, or never
                    // freed if the run ends first (`settle`).
                    let started = unsafe {
                        engine.isend_started(
                            bytes.as_ptr(),
                            bytes.len(),
                            dest,
                            MULTICAST_TAG,
                            self.context,
                        )?
                    };
                    if let Started::Pending(id) = started {
                        self.sends.push_back((id, bytes));
                    }
                }
                Action::Get { from, piece } => {
                    let key = self.keys[from].ok_or_else(|| {
                        out_of_step(OutOfStep(format!("no buffer known for rank {from}")))
                    })?;
                    let slot = self
                        .slots
                        .iter_mut()
                        .find(|s| s.busy.is_none())
                        .expect("the node keeps at most gets_per_peer gets per peer in flight");
                    let offset = piece * self.job.piece_len;
                    let len = self.job.piece_len.min(self.total - offset);
                    engine
                        .ni()
                        .rdma_get(&self.mine, offset, len, key.at(offset), slot.ct)?;
                    // Counted only once started: a get that could not start completes never.
                    slot.issued += 1;
                    slot.busy = Some((from, piece));
                }
            }
        }
        Ok(())
    }

    /// Leaves nothing in flight that could touch memory this run lent out: receives are
    /// cancelled (or waited for), gets into the buffer waited for. After an error, rendezvous
    /// sends still in flight keep their bytes for ever (a few bytes each; a peer that gave up
    /// may never take them).
    fn settle(&mut self, ok: bool) {
        let engine = self.w.engine();
        for inbox in &mut self.inboxes {
            if let Some(id) = inbox.posted.take() {
                let _ = engine.cancel(id);
            }
        }
        engine.wait_group(self.group);
        let ni = engine.ni();
        let mut backoff = Backoff::default();
        while self.slots.iter().any(|s| {
            s.busy.is_some()
                && ni
                    .ct_peek(s.ct)
                    .map(|v| v.success + v.failure < s.issued)
                    .unwrap_or(false)
        }) {
            let _ = engine.progress();
            engine.idle(&mut backoff);
        }
        if !ok {
            for (_, bytes) in self.sends.drain(..) {
                std::mem::forget(bytes);
            }
        }
        self.mine.deregister();
    }
}

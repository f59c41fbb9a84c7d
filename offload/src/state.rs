//! The network interface's state, behind one lock: object tables, operations in flight, and the
//! counter work list that fires triggered operations.

use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use rdcoll_transport::{EventRef, Fabric, OpId, Poller, Rank, Region};

use crate::counter::{Counter, TriggeredOp};
use crate::error::{OffloadError, Result};
use crate::event::{Event, EventQueue};
use crate::me::Placement;
use crate::mpi_lists::{DirectDone, DirectRecv};
use crate::portal::HeaderRef;
use crate::portal::Portal;
use crate::table::Table;
use crate::types::{AckReq, CtHandle, CtValue, EqHandle, List, MdHandle, MdOptions, PtIndex};
use crate::NiConfig;

/// A memory descriptor.
#[derive(Debug)]
pub(crate) struct Md {
    pub(crate) region: Region,
    pub(crate) eq: Option<EqHandle>,
    pub(crate) opts: MdOptions,
}

/// An operation this rank started, waiting for the target's answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InitOp {
    pub(crate) get: bool,
    pub(crate) md: MdHandle,
    pub(crate) user_ptr: u64,
    pub(crate) target: Rank,
    pub(crate) ack: AckReq,
    pub(crate) len: usize,
    /// SEND is still owed (a put whose data the target pulls).
    pub(crate) send_owed: bool,
    pub(crate) match_bits: u64,
}

/// A transfer the target side issued on an initiator's behalf.
#[derive(Debug, Clone)]
pub(crate) struct Transfer {
    /// A pulled put (`false`) or a served get (`true`).
    pub(crate) get: bool,
    pub(crate) initiator: Rank,
    pub(crate) op: u64,
    pub(crate) pt: PtIndex,
    pub(crate) list: List,
    pub(crate) region: Region,
    pub(crate) place: Placement,
    pub(crate) bits: u64,
    pub(crate) rlength: usize,
    pub(crate) remote_offset: usize,
    pub(crate) hdr_data: u64,
    /// The initiator's region the rest of the message can be read from (a publishing put).
    pub(crate) published: Option<u64>,
    pub(crate) user_ptr: u64,
    pub(crate) counting: crate::types::MeCounting,
    pub(crate) unlinked: bool,
    /// The entry asked for no acknowledgement events at the initiator.
    pub(crate) ack_disabled: bool,
    /// The entry's event options (link/unlink/comm disable).
    pub(crate) me_options: crate::types::MeOptions,
    /// An inline put that asked for no acknowledgement: a success is not answered.
    pub(crate) quiet: bool,
    /// The unexpected header recorded for this transfer when it matched the overflow list.
    pub(crate) header: Option<HeaderRef>,
    /// An entry appended (or a search-delete) took that header before the data was all in:
    /// its PUT_OVERFLOW is raised when the transfer finishes.
    pub(crate) taken_by: Option<Taker>,
    /// A put into a direct receive's buffer (MPI portals): reported as a `DirectDone`.
    pub(crate) direct: Option<DirectRecv>,
}

/// Who took an unexpected header whose data was still arriving.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taker {
    pub(crate) user_ptr: u64,
    pub(crate) counting: crate::types::MeCounting,
    /// A direct receive took it: the data is copied into its buffer when it is all in.
    pub(crate) direct: Option<DirectRecv>,
}

pub(crate) struct State {
    pub(crate) fabric: Arc<dyn Fabric>,
    pub(crate) cfg: NiConfig,
    pub(crate) portals: Table<Portal>,
    pub(crate) cts: Table<Counter>,
    pub(crate) eqs: Table<EventQueue>,
    pub(crate) mds: Table<Md>,
    pub(crate) next_seq: u64,
    pub(crate) next_op: u64,
    pub(crate) ops: HashMap<u64, InitOp>,
    pub(crate) transfers: HashMap<OpId, Transfer>,
    pub(crate) triggered_pending: usize,
    /// Operations in flight and triggered operations waiting, per memory descriptor that
    /// they use: `Ni::md_release` refuses a descriptor in use without scanning every
    /// operation and trigger (a window of rendezvous messages made that quadratic).
    pub(crate) md_users: HashMap<u32, usize>,
    /// Counters that changed and may have operations to release, in the order they changed.
    pub(crate) dirty: std::collections::VecDeque<CtHandle>,
    /// Reused for encoding outgoing messages.
    pub(crate) wire_buf: Vec<u8>,
    /// RDMA puts and gets issued with `Ni::rdma_put` and `Ni::rdma_get`, by fabric
    /// operation: the counter their completion bumps, and the peer they involve (their
    /// failure is counted when it fails, as a dead target never completes them).
    pub(crate) raw_ops: HashMap<OpId, (CtHandle, rdcoll_transport::Rank)>,
    /// Direct gets in flight (`GetArgs::published`), by fabric operation.
    pub(crate) direct_gets: HashMap<OpId, crate::initiator::DirectGet>,
    /// Completions of fabric operations nobody had recorded yet (an `rdma_put` whose event
    /// the agent handled before the put was recorded), with their success.
    pub(crate) early_completions: HashMap<OpId, bool>,
    /// Peers whose failure the agent has handled: everything they sent before was handled
    /// first (the fabric reports a failure after the peer's last message).
    pub(crate) failed_peers: Vec<bool>,
    /// Unexpected headers queued so far, on any portal (bumped under the state lock; read
    /// without it by the p2p fast receive to learn that another thread's progress queued
    /// something it may have to take: see `p2p::fast`).
    pub(crate) queued_unexpected: Arc<AtomicU64>,
    /// The fabric's exclusive poller, where it has one: the agent polls only under the state
    /// lock, so the fabric's own lock is not needed (`Fabric::take_poller`).
    poller: Option<Box<dyn Poller>>,
    /// Direct receives that matched, not yet collected (`Ni::progress_and_drain`).
    pub(crate) direct_done: Vec<DirectDone>,
    /// Where senders' "now waiting" notices arrive and what they mark
    /// (`Ni::take_waits_notices`).
    pub(crate) waits_notices: Option<WaitsNotices>,
}

/// Puts on `notice_pt` whose header data has `flag` mark, as they arrive, the header their
/// initiator and match bits name queued on MPI portal `msg_pt` (`MpiLists::mark_waiting`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitsNotices {
    pub(crate) notice_pt: PtIndex,
    pub(crate) msg_pt: PtIndex,
    pub(crate) flag: u64,
}

impl State {
    pub(crate) fn new(fabric: Arc<dyn Fabric>, cfg: NiConfig) -> State {
        State {
            portals: Table::new("portal table entry", cfg.max_objects),
            cts: Table::new("counter", cfg.max_objects),
            eqs: Table::new("event queue", cfg.max_objects),
            mds: Table::new("memory descriptor", cfg.max_objects),
            fabric,
            cfg,
            next_seq: 0,
            next_op: 0,
            ops: HashMap::default(),
            transfers: HashMap::default(),
            triggered_pending: 0,
            md_users: HashMap::default(),
            dirty: std::collections::VecDeque::new(),
            wire_buf: Vec::new(),
            failed_peers: Vec::new(),
            raw_ops: HashMap::default(),
            direct_gets: HashMap::default(),
            early_completions: HashMap::default(),
            queued_unexpected: Arc::new(AtomicU64::new(0)),
            poller: None,
            direct_done: Vec::new(),
            waits_notices: None,
        }
    }

    /// Takes the fabric's exclusive poller, where it has one (before the agent first polls).
    pub(crate) fn take_poller(&mut self) {
        self.poller = self.fabric.take_poller();
    }

    /// Hands the next fabric event, if one is ready, to `f` with the state; returns whether
    /// there was one. `f` must not poll the fabric.
    pub(crate) fn poll_fabric(
        &mut self,
        f: &mut dyn FnMut(&mut State, EventRef<'_>),
    ) -> rdcoll_transport::Result<bool> {
        let Some(mut poller) = self.poller.take() else {
            // No exclusive poller (ofi, tcp): the fabric's own `poll_with`, which lends the
            // message in place where the backend can (ofi); a handle of our own to call it
            // through while `f` has the state.
            let fabric = Arc::clone(&self.fabric);
            return fabric.poll_with(&mut |ev| f(self, ev));
        };
        // The poller lends a message in the transport's buffer while `f` handles it (no copy);
        // `f` does not poll, so it does not miss the poller meanwhile.
        let polled = poller.poll_with(&mut |ev| f(self, ev));
        self.poller = Some(poller);
        polled
    }

    /// [`poll_fabric`](State::poll_fabric) up to `max` times (one taking and handing back of
    /// the poller for all of them); how many events were handled (an error after some were
    /// ends the batch with their count: see `Poller::poll_batch`). `f` must not poll the
    /// fabric.
    pub(crate) fn poll_fabric_batch(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(&mut State, EventRef<'_>),
    ) -> rdcoll_transport::Result<usize> {
        let Some(mut poller) = self.poller.take() else {
            return rdcoll_transport::poll_up_to(max, || self.poll_fabric(f));
        };
        let polled = poller.poll_batch(max, &mut |ev| f(self, ev));
        self.poller = Some(poller);
        polled
    }

    pub(crate) fn rank(&self) -> Rank {
        self.fabric.rank()
    }

    pub(crate) fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    pub(crate) fn portal(&mut self, pt: PtIndex) -> Result<&mut Portal> {
        self.portals.must(pt.0)
    }

    /// Queues `ev` on `eq`, if there is one.
    pub(crate) fn post(&mut self, eq: Option<EqHandle>, ev: Event) {
        if let Some(q) = eq.and_then(|e| self.eqs.get_mut(e.0)) {
            q.push(ev);
        }
    }

    /// Queues the PT_DISABLED event of `pt`, past the queue's capacity if need be.
    pub(crate) fn post_pt_disabled(&mut self, pt: PtIndex, ev: Event) {
        let eq = self.portals.get(pt.0).and_then(|p| p.eq);
        if let Some(q) = eq.and_then(|e| self.eqs.get_mut(e.0)) {
            q.push_reserved(ev);
        }
    }

    /// Queues `ev` on the EQ of portal `pt`.
    pub(crate) fn post_pt(&mut self, pt: PtIndex, ev: Event) {
        let eq = self.portals.get(pt.0).and_then(|p| p.eq);
        self.post(eq, ev);
    }

    /// Adds to a counter (success by `amount`, or failure by one) and schedules its triggers.
    pub(crate) fn count(&mut self, ct: Option<CtHandle>, ok: bool, amount: u64) {
        let Some(ct) = ct else { return };
        if let Some(c) = self.cts.get_mut(ct.0) {
            if ok {
                c.value.success = c.value.success.saturating_add(amount);
            } else {
                c.value.failure = c.value.failure.saturating_add(1);
            }
            self.dirty.push_back(ct);
        }
    }

    pub(crate) fn ct_change(&mut self, ct: CtHandle, f: impl FnOnce(&mut CtValue)) -> Result<()> {
        let c = self.cts.must(ct.0)?;
        f(&mut c.value);
        self.dirty.push_back(ct);
        Ok(())
    }

    /// Posts `op` on `ct` at `threshold`, or runs it now if the threshold is already reached.
    pub(crate) fn trigger(&mut self, ct: CtHandle, threshold: u64, op: TriggeredOp) -> Result<()> {
        let limit = self.cfg.max_triggered;
        let pending = self.triggered_pending;
        let seq = self.seq();
        let c = self.cts.must(ct.0)?;
        if c.value.total() >= threshold {
            self.run_triggered(op);
            return self.fire_ready();
        }
        if pending >= limit {
            return Err(OffloadError::NoSpace {
                what: "triggered operation",
                limit,
            });
        }
        let md = op.md();
        c.add_trigger(threshold, seq, op);
        self.triggered_pending += 1;
        if let Some(md) = md {
            self.use_md(md);
        }
        Ok(())
    }

    /// Counts one more user of `md` (an operation in flight or a waiting trigger).
    pub(crate) fn use_md(&mut self, md: MdHandle) {
        *self.md_users.entry(md.0).or_insert(0) += 1;
    }

    /// Counts one user of `md` less.
    pub(crate) fn unuse_md(&mut self, md: MdHandle) {
        if let Some(n) = self.md_users.get_mut(&md.0) {
            *n -= 1;
            if *n == 0 {
                self.md_users.remove(&md.0);
            }
        }
    }

    /// Whether an operation in flight or a waiting trigger uses `md`.
    pub(crate) fn md_in_use(&self, md: MdHandle) -> bool {
        self.md_users.contains_key(&md.0)
    }

    /// Releases every triggered operation whose counter has reached its threshold, following
    /// the cascade through counters they change (a work list, not recursion).
    pub(crate) fn fire_ready(&mut self) -> Result<()> {
        while let Some(ct) = self.dirty.pop_front() {
            while let Some(op) = self.cts.get_mut(ct.0).and_then(Counter::pop_ready) {
                self.triggered_pending -= 1;
                if let Some(md) = op.md() {
                    self.unuse_md(md);
                }
                self.run_triggered(op);
            }
        }
        Ok(())
    }

    fn run_triggered(&mut self, op: TriggeredOp) {
        match op {
            TriggeredOp::Put(a) => crate::initiator::issue_put(self, a),
            TriggeredOp::Get(a) => crate::initiator::issue_get(self, a),
            TriggeredOp::CtInc { ct, by } => {
                let _ = self.ct_change(ct, |v| {
                    v.success = v.success.saturating_add(by.success);
                    v.failure = v.failure.saturating_add(by.failure);
                });
            }
            TriggeredOp::CtSet { ct, to } => {
                let _ = self.ct_change(ct, |v| *v = to);
            }
        }
    }
}

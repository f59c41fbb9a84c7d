//! The network interface handle: the host-side calls, and waiting (its configuration is in
//! `ni_config`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdcoll_transport::{Fabric, Rank, Region};
use rdcoll_transport::{SpinGuard, SpinLock};

use crate::counter::TriggeredOp;
use crate::error::{invalid, OffloadError, Result};
use crate::event::{Event, EventKind, EventQueue};
use crate::me::Me;
use crate::ni_ct::check_increment;
use crate::portal::Portal;
use crate::state::{Md, State};
use crate::types::{
    CtHandle, CtValue, EqHandle, GetArgs, List, MdHandle, MdOptions, MeHandle, MeSpec, NiFail,
    PtIndex, PutArgs, SearchOp,
};
use crate::Shared;
use crate::{Mode, NiConfig};

/// A point in the agent's notifications ([`Ni::activity_mark`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActivityMark(u64);

/// What [`Ni::rdma_put`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaPut {
    /// Complete already: nothing was counted.
    Done,
    /// Started: its completion will be counted on the counter.
    Counted,
}

/// One rank's emulated network interface.
pub struct Ni {
    pub(crate) shared: Arc<Shared>,
    pub(crate) fabric: Arc<dyn Fabric>,
    agent: Option<JoinHandle<()>>,
    /// Where to pin the agent thread, if anywhere.
    pin_slot: Option<usize>,
    /// `NiConfig::inline_max`, fixed at creation (read without the state lock).
    pub(crate) inline_max: usize,
    /// `State::queued_unexpected`, read without the state lock.
    queued_unexpected: Arc<std::sync::atomic::AtomicU64>,
    /// `NiConfig::agent_poll`.
    agent_poll: Duration,
    /// `NiConfig::agent_grace`.
    agent_grace: Duration,
}

impl Ni {
    /// A network interface over `fabric`, starting the agent thread in thread mode.
    pub fn new(fabric: Arc<dyn Fabric>, cfg: NiConfig) -> Result<Ni> {
        let mut ni = Ni::new_paused(fabric, cfg)?;
        ni.start_agent()?;
        Ok(ni)
    }

    /// A network interface whose agent thread (thread mode) has not started yet: nothing
    /// polls the fabric until [`start_agent`](Ni::start_agent), so the owner can allocate its
    /// portal table entries and append its entries before the first message is handled (a
    /// message that arrives earlier waits in the fabric instead of finding no entry).
    pub fn new_paused(fabric: Arc<dyn Fabric>, mut cfg: NiConfig) -> Result<Ni> {
        cfg.inline_max = cfg.inline_max.min(crate::initiator::inline_capacity());
        let mut state = State::new(fabric.clone(), cfg.clone());
        state.take_poller();
        let queued_unexpected = state.queued_unexpected.clone();
        let shared = Arc::new(Shared {
            state: SpinLock::new(state),
            changed: crate::changes::Changes::default(),
            stop: AtomicBool::new(false),
            mode: cfg.mode,
            host_polls: std::sync::atomic::AtomicU64::new(0),
            host_posts: std::sync::atomic::AtomicU64::new(0),
            direct_collector: std::sync::OnceLock::new(),
            directs_left: AtomicBool::new(false),
        });
        Ok(Ni {
            shared,
            fabric,
            agent: None,
            pin_slot: cfg.pin_slot,
            inline_max: cfg.inline_max,
            queued_unexpected,
            agent_poll: cfg.agent_poll,
            agent_grace: cfg.agent_grace,
        })
    }

    /// Starts the agent thread (thread mode; nothing to do in inline mode or if it runs).
    pub fn start_agent(&mut self) -> Result<()> {
        if self.shared.mode != Mode::Thread || self.agent.is_some() {
            return Ok(());
        }
        let s = self.shared.clone();
        let name = format!("rdcoll-offload-{}", self.fabric.rank());
        let slot = self.pin_slot;
        let (poll, grace) = (self.agent_poll, self.agent_grace);
        let t = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                if let Some(slot) = slot {
                    match crate::pin::pin_current_thread(slot) {
                        Ok(core) => tracing::debug!("offload agent pinned to core {core}"),
                        Err(why) => tracing::debug!("offload agent not pinned: {why}"),
                    }
                }
                crate::agent::run(s, poll, grace)
            })
            .map_err(|e| invalid(format!("starting the progress thread: {e}")))?;
        self.agent = Some(t);
        Ok(())
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.fabric.rank()
    }

    /// The fabric underneath (for allocating and registering regions).
    pub fn fabric(&self) -> &Arc<dyn Fabric> {
        &self.fabric
    }

    /// Whether the agent has handled `rank`'s failure. Unlike [`Fabric::is_failed`], this
    /// turns true only after everything `rank` sent before it failed has been handled (matched
    /// or queued as unexpected).
    pub fn peer_failed(&self, rank: Rank) -> bool {
        let st = self.shared.state.lock();
        st.failed_peers.get(rank as usize).copied().unwrap_or(false)
    }

    /// The state, locked (for the NI's own modules).
    pub(crate) fn lock_state(&self) -> SpinGuard<'_, State> {
        self.shared.state.lock()
    }

    /// How many unexpected headers the agent has queued so far, on any portal (a hint read
    /// without the lock; under the state lock, `State::queued_unexpected` is exact).
    pub(crate) fn queued_unexpected(&self) -> u64 {
        self.queued_unexpected
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Who runs the agent.
    pub fn mode(&self) -> Mode {
        self.shared.mode
    }

    /// Runs the agent once from this thread (inline mode; harmless in thread mode).
    pub fn progress(&self) -> usize {
        crate::agent::progress(&self.shared)
    }

    /// Whether a progress pass left matched direct receives that its collector could not take
    /// (a hint read without the lock): a thread that waits by driving [`Ni::progress`] only
    /// when the fabric has something pending must then run a pass anyway, or the receives wait
    /// for the next message to arrive, which may be never (their senders wait for them).
    pub fn directs_left(&self) -> bool {
        self.shared
            .directs_left
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Installs the owner's collector of matched direct receives: whoever runs a progress pass
    /// that leaves some queued ([`Ni::progress`], the thread-mode agent) calls it afterwards,
    /// holding no lock of the NI, so that it may take them ([`Ni::take_direct_done`]) and act
    /// on them (issue a rendezvous's gets) even while no host thread is in the owner's calls.
    /// Set once; `InvalidArg` if one is set already.
    pub fn set_direct_collector(&self, collect: crate::DirectCollector) -> Result<()> {
        self.shared
            .direct_collector
            .set(collect)
            .map_err(|_| invalid("a direct collector is set already"))
    }

    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut State) -> Result<R>) -> Result<R> {
        let mut st = self.shared.state.lock();
        let r = f(&mut st);
        let fired = st.fire_ready();
        drop(st);
        // Only a thread-mode host waits on the condition variable.
        if self.shared.mode == Mode::Thread {
            self.shared.changed.notify_all();
        }
        let r = r?;
        fired?;
        Ok(r)
    }

    /// A new event queue holding up to `capacity` events.
    pub fn eq_alloc(&self, capacity: usize) -> Result<EqHandle> {
        self.with(|st| {
            st.eqs
                .insert(EventQueue::new(capacity.max(1)))
                .map(EqHandle)
        })
    }

    /// The next event of `eq`, if any (runs the agent first in inline mode).
    pub fn eq_get(&self, eq: EqHandle) -> Result<Option<Event>> {
        if self.shared.mode == Mode::Inline {
            self.progress();
        }
        self.with(|st| st.eqs.must(eq.0)?.pop())
    }

    /// Waits up to `timeout` for the next event of `eq`.
    pub fn eq_wait(&self, eq: EqHandle, timeout: Duration) -> Result<Event> {
        let mut out = None;
        self.wait_until(timeout, |st| {
            out = st.eqs.must(eq.0)?.pop()?;
            Ok(out.is_some())
        })?;
        out.ok_or(OffloadError::Timeout(timeout))
    }

    /// A new portal table entry. `flow_control` disables it (with a `PtDisabled` event on
    /// `eq`, which it therefore needs) when an arrival finds no entry or no header slot.
    pub fn pt_alloc(&self, eq: Option<EqHandle>, flow_control: bool) -> Result<PtIndex> {
        if flow_control && eq.is_none() {
            return Err(invalid("flow control needs an event queue"));
        }
        self.alloc_portal(eq, flow_control, false)
    }

    /// A new portal table entry, general or MPI (`Ni::pt_alloc_mpi`).
    pub(crate) fn alloc_portal(
        &self,
        eq: Option<EqHandle>,
        flow_control: bool,
        mpi: bool,
    ) -> Result<PtIndex> {
        self.with(|st| {
            if let Some(e) = eq {
                st.eqs.must(e.0)?;
            }
            let max_unexpected = st.cfg.max_unexpected;
            st.portals
                .insert(Portal::new(eq, flow_control, max_unexpected, mpi))
                .map(PtIndex)
        })
    }

    /// Re-enables a portal table entry that flow control (or `pt_disable`) disabled.
    pub fn pt_enable(&self, pt: PtIndex) -> Result<()> {
        self.with(|st| {
            st.portal(pt)?.enabled = true;
            Ok(())
        })
    }

    /// Disables a portal table entry: arrivals fail with `PtDisabled` until it is enabled.
    pub fn pt_disable(&self, pt: PtIndex) -> Result<()> {
        self.with(|st| {
            st.portal(pt)?.enabled = false;
            Ok(())
        })
    }

    /// Binds a memory descriptor over `region` (a region of this rank's fabric).
    pub fn md_bind(
        &self,
        region: Region,
        eq: Option<EqHandle>,
        opts: MdOptions,
    ) -> Result<MdHandle> {
        self.check_own(&region)?;
        self.with(|st| {
            if let Some(e) = eq {
                st.eqs.must(e.0)?;
            }
            if let Some(c) = opts.ct {
                st.cts.must(c.0)?;
            }
            st.mds.insert(Md { region, eq, opts }).map(MdHandle)
        })
    }

    /// Releases a memory descriptor. Refused while an operation in flight or a pending
    /// triggered operation uses it (its events and counts would have nowhere to go).
    pub fn md_release(&self, md: MdHandle) -> Result<()> {
        self.with(|st| {
            st.mds.must(md.0)?;
            debug_assert_eq!(
                st.md_in_use(md),
                st.ops.values().any(|o| o.md == md) || st.cts.values().any(|c| c.uses_md(md)),
                "the use count of a memory descriptor went wrong"
            );
            if st.md_in_use(md) {
                return Err(invalid(
                    "the memory descriptor is in use by an operation or a triggered operation",
                ));
            }
            st.mds.remove(md.0);
            Ok(())
        })
    }

    fn check_own(&self, region: &Region) -> Result<()> {
        if region.rank() != self.rank() {
            return Err(invalid(format!(
                "the region belongs to rank {}, not to this rank {}",
                region.rank(),
                self.rank()
            )));
        }
        Ok(())
    }

    /// Appends an entry to a list of `pt`. On the priority list it first takes matching
    /// unexpected headers (oldest first; one for a use-once entry, which is then not linked):
    /// one `PutOverflow` event each, pointing at the data already deposited.
    pub fn me_append(&self, pt: PtIndex, list: List, spec: MeSpec) -> Result<MeHandle> {
        self.check_own(&spec.region)?;
        self.with(|st| {
            if let Some(c) = spec.options.counting.ct {
                st.cts.must(c.0)?;
            }
            st.portal(pt)?;
            let me = Me::new(spec);
            let seq = st.seq();
            let handle = MeHandle { pt, list, seq };
            if list == List::Priority && st.portal(pt)?.mpi.is_some() {
                crate::ni_mpi::append_mpi(st, pt, seq, me)?;
                return Ok(handle);
            }
            if list == List::Priority {
                let taken = crate::target::take_unexpected(st, pt, &me);
                if taken > 0 && me.options.use_once {
                    if !me.options.event_unlink_disable {
                        let ev =
                            Event::simple(EventKind::AutoUnlink, Some(pt), st.rank(), me.user_ptr);
                        st.post_pt(pt, ev);
                    }
                    return Ok(handle);
                }
            }
            let (user_ptr, quiet) = (me.user_ptr, me.options.event_link_disable);
            st.portal(pt)?.list(list).insert(seq, me);
            if !quiet {
                let ev = Event::simple(EventKind::Link, Some(pt), st.rank(), user_ptr);
                st.post_pt(pt, ev);
            }
            Ok(handle)
        })
    }

    /// Unlinks an entry that is still linked.
    pub fn me_unlink(&self, me: MeHandle) -> Result<()> {
        self.with(|st| {
            let portal = st.portal(me.pt)?;
            if let (List::Priority, Some(mpi)) = (me.list, portal.mpi.as_mut()) {
                return mpi
                    .unlink_entry(me.seq)
                    .map(drop)
                    .ok_or_else(|| invalid("the match list entry is not linked"));
            }
            portal
                .list(me.list)
                .remove(me.seq)
                .map(drop)
                .ok_or_else(|| invalid("the match list entry is not linked"))
        })
    }

    /// Searches the unexpected headers of `pt` with `spec`'s rule. `Only` raises one `Search`
    /// event (the first match, or `NoMatch`) and changes nothing; `Delete` takes the matches
    /// like an append would (`PutOverflow` events, overflow counting) without linking.
    pub fn me_search(&self, pt: PtIndex, spec: MeSpec, op: SearchOp) -> Result<()> {
        self.with(|st| {
            let me = Me::new(spec);
            st.portal(pt)?;
            if op == SearchOp::Delete && crate::target::take_unexpected(st, pt, &me) > 0 {
                return Ok(());
            }
            let first = st.portal(pt)?.first_header(&me);
            let mut ev = Event::simple(EventKind::Search, Some(pt), st.rank(), me.user_ptr);
            match first {
                Some(u) if op == SearchOp::Only => {
                    ev.peer = u.initiator;
                    ev.match_bits = u.match_bits;
                    ev.rlength = u.rlength as u64;
                    ev.mlength = u.mlength as u64;
                    ev.remote_offset = u.remote_offset as u64;
                    ev.hdr_data = u.hdr_data;
                    ev.list = Some(List::Overflow);
                    ev.start = Some(u.start);
                }
                _ => ev.fail = NiFail::NoMatch,
            }
            st.post_pt(pt, ev);
            Ok(())
        })
    }

    /// Moves every queued event of `eq` to `out` without running the agent.
    pub fn eq_drain(&self, eq: EqHandle, out: &mut Vec<Event>) -> Result<()> {
        drain_eq(&mut self.shared.state.lock(), eq, out)
    }

    /// Runs the agent's work once from this thread and moves every queued event of `eq` to
    /// `out`, under one acquisition of the state lock. Returns how many fabric events it
    /// handled. In thread mode too: a host thread that polls for its own requests would
    /// otherwise wait for the agent to notice each message and hand it over (2.9 us one-way
    /// against 0.54 inline on a 16-core host).
    pub fn progress_and_drain(&self, eq: EqHandle, out: &mut Vec<Event>) -> Result<usize> {
        let mut st = self.shared.state.lock();
        let handled = crate::agent::progress_locked(&mut st);
        let drained = drain_eq(&mut st, eq, out);
        drop(st);
        if handled > 0 {
            // Other host threads may sleep on the agent's notifications.
            self.notify_changed();
        }
        drained.map(|()| handled)
    }

    /// Wakes host threads sleeping on the agent's notifications (thread mode), after this
    /// thread did the agent's work itself and changed something.
    pub(crate) fn notify_changed(&self) {
        if self.shared.mode == Mode::Thread {
            self.shared.changed.notify_all();
        }
    }

    /// Notes that this thread is polling in a wait, driving progress itself (thread mode;
    /// nothing in inline mode, where no agent runs). While host threads keep noting it (within
    /// `NiConfig::agent_grace`), the agent leaves the fabric and the state lock to them: the
    /// host handles its messages as they arrive instead of contending with the agent for them.
    /// Calls that leave progress to the agent (Portals-level `eq_get`, `put`, `ct_get` in
    /// thread mode) must not note: a loop of them would keep the agent aside with nobody doing
    /// its work. Never called on the agent's own thread.
    /// A plain load and store: it is only a hint, and racing threads may lose a count.
    #[inline]
    pub fn note_host_polling(&self) {
        if self.shared.mode == Mode::Thread {
            let c = &self.shared.host_polls;
            c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        }
    }

    /// Notes that this thread posts a point-to-point send or receive (thread mode). The agent
    /// stands aside for posts as for polls, but only within 1 ms of a host thread's last poll:
    /// a window of 64 x 32 KiB sends takes longer than the grace to post, and an agent that
    /// took the state lock in the middle of it (for a batch of 32 KiB copies) halved
    /// `osu_bibw` at 16-64 KiB on a 16-core host; a host that only posts (eager sends whose
    /// requests complete at once, never a wait that drives progress) must not keep the agent
    /// from the work nobody else does.
    #[inline]
    pub fn note_host_posting(&self) {
        if self.shared.mode == Mode::Thread {
            let c = &self.shared.host_posts;
            c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        }
    }

    /// Gets `len` bytes from a target's portal table entry into a memory descriptor.
    pub fn get(&self, a: GetArgs) -> Result<()> {
        self.with(|st| {
            crate::initiator::check_md(st, a.md, a.local_offset, a.len)?;
            crate::initiator::issue_get(st, a);
            Ok(())
        })
    }

    /// A put released when `ct` reaches `threshold` (at once if it already has).
    pub fn triggered_put(&self, a: PutArgs, ct: CtHandle, threshold: u64) -> Result<()> {
        self.with(|st| {
            crate::initiator::check_md(st, a.md, a.local_offset, a.len)?;
            st.trigger(ct, threshold, TriggeredOp::Put(a))
        })
    }

    /// A get released when `ct` reaches `threshold` (at once if it already has).
    pub fn triggered_get(&self, a: GetArgs, ct: CtHandle, threshold: u64) -> Result<()> {
        self.with(|st| {
            crate::initiator::check_md(st, a.md, a.local_offset, a.len)?;
            st.trigger(ct, threshold, TriggeredOp::Get(a))
        })
    }

    /// Adds `by` to `target` when `ct` reaches `threshold` (one of `success` and `failure`
    /// non-zero, as for `ct_inc`).
    pub fn triggered_ct_inc(
        &self,
        target: CtHandle,
        by: CtValue,
        ct: CtHandle,
        threshold: u64,
    ) -> Result<()> {
        check_increment(by)?;
        self.with(|st| {
            st.cts.must(target.0)?;
            st.trigger(ct, threshold, TriggeredOp::CtInc { ct: target, by })
        })
    }

    /// Sets `target` to `to` when `ct` reaches `threshold`.
    pub fn triggered_ct_set(
        &self,
        target: CtHandle,
        to: CtValue,
        ct: CtHandle,
        threshold: u64,
    ) -> Result<()> {
        self.with(|st| {
            st.cts.must(target.0)?;
            st.trigger(ct, threshold, TriggeredOp::CtSet { ct: target, to })
        })
    }

    /// Where the agent's notifications stand: take one before looking at the state, and pass
    /// it to [`wait_activity`](Ni::wait_activity) if the look found nothing.
    pub fn activity_mark(&self) -> ActivityMark {
        ActivityMark(self.shared.changed.count())
    }

    /// Waits up to `timeout` for something to happen: in thread mode for a notification of
    /// the agent's after `mark` (at once if one came since), in inline mode for the fabric to
    /// have an event.
    pub fn wait_activity(&self, mark: ActivityMark, timeout: Duration) {
        match self.shared.mode {
            Mode::Thread => self.shared.changed.wait_since(mark.0, timeout),
            Mode::Inline => self.fabric.block(timeout),
        }
    }

    /// Runs `check` until it returns true or `timeout` passes: driving the agent itself in
    /// inline mode, sleeping on the agent's notifications in thread mode.
    pub(crate) fn wait_until(
        &self,
        timeout: Duration,
        mut check: impl FnMut(&mut State) -> Result<bool>,
    ) -> Result<()> {
        // Time through the fabric (a simulated one supplies virtual time).
        let fabric = self.fabric();
        let deadline = fabric.now().checked_add(timeout);
        let mut idle = 0u32;
        loop {
            {
                let mut st = self.shared.state.lock();
                if check(&mut st)? {
                    return Ok(());
                }
                if self.shared.mode == Mode::Thread {
                    let slice = Duration::from_millis(10);
                    st = self.shared.changed.wait_for(&self.shared.state, st, slice);
                    if check(&mut st)? {
                        return Ok(());
                    }
                }
            }
            if deadline.is_some_and(|d| fabric.now() >= d) {
                return Err(OffloadError::Timeout(timeout));
            }
            if self.shared.mode == Mode::Inline {
                if self.progress() > 0 {
                    idle = 0;
                } else {
                    idle += 1;
                    if idle > 100 || fabric.clock_is_virtual() {
                        self.fabric.block(Duration::from_millis(1));
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        }
    }
}

/// Moves every queued event of `eq` to `out`.
pub(crate) fn drain_eq(st: &mut State, eq: EqHandle, out: &mut Vec<Event>) -> Result<()> {
    let q = st.eqs.must(eq.0)?;
    while let Some(ev) = q.pop()? {
        out.push(ev);
    }
    Ok(())
}

impl Drop for Ni {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.agent.take() {
            // The last owner may be let go by the agent itself (a direct collector's owner
            // that it held while the host dropped its own): the agent ends once it returns.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

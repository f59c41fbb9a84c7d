//! MPI point-to-point messaging over the network interface: eager messages and the
//! receiver-driven chunked rendezvous of paper 002, Sections 3.2-3.3.
//!
//! - A send of at most `eager_limit` bytes is one inline put to the peer's message portal,
//!   landing in the posted receive's buffer (expected) or in a bounce buffer on the overflow
//!   list (unexpected). The send is complete when the put call returns.
//! - A longer send appends a get entry over its whole buffer to its rendezvous portal, counting
//!   the gets served, then puts the first chunk (`RNDV_FIRST_CHUNK`, 1 KiB, or the eager limit
//!   if smaller) with a header naming the total length and the chunk size. The receive that matches it (at append time, from the unexpected
//!   headers, or later from the put event) fetches the rest in gets of one chunk each, at most
//!   `c` in flight: the first `c` now, each further one a triggered get released by the reply
//!   counter of the one `c` places before it. The sender is done when its counter reaches the
//!   number of gets.
//! - Match bits are `context | tag | nonce` (see `bits`); a receive ignores the nonce, the
//!   sender's get entry does not, so rendezvous messages with identical envelopes are fetched
//!   concurrently, each from its own buffer.

#[cfg(test)]
mod backlog_tests;
mod backoff;
mod bits;
#[cfg(test)]
mod collector_tests;
mod config;
mod contexts;
mod credit_flow;
mod credits;
mod fast;
mod group;
#[cfg(test)]
mod host_note_tests;
mod members;
#[cfg(test)]
mod post_fetch_tests;
mod probe;
mod recv;
mod requests;
mod send;
mod status;
mod wait;

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use rdcoll_transport::{Fabric, Rank, Region, SpinLock, TransportError};

pub use backoff::Backoff;
pub use config::DEFAULT_RNDV_CREDITS;
pub use contexts::{CONTEXT_IDS, CONTEXT_MASK_WORDS, GROUP_MASK_WORDS};
pub use group::{Group, Started};
pub use members::Members;
pub use recv::Fetch;
pub use send::RNDV_FIRST_CHUNK;
pub use status::{Source, Status, TagSel, NULL_TAG, PROC_NULL};
/// Largest `RDCOLL_RNDV_CHUNK` (what the rendezvous header can describe).
pub const MAX_RNDV_CHUNK: usize = bits::MAX_CHUNK;
pub use config::{
    parse_size, P2pConfig, DEFAULT_EAGER_LIMIT, DEFAULT_RNDV_CHUNK, DEFAULT_UNEXPECTED_MAX,
};

use crate::error::{invalid, OffloadError, Result};
use crate::event::{Event, EventKind};
use crate::types::{EqHandle, List, MatchId, MdHandle, MdOptions, MeOptions, MeSpec, PtIndex};
use crate::{Ni, NiConfig};

/// A nonblocking operation in flight, named by the engine that started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReqId(u64);

/// A communicator's context id: messages of different contexts never match.
pub type Context = u16;

/// Set in the context a communicator's collectives use for their own messages, so that they
/// never match the communicator's point-to-point traffic; communicators get ids below it.
pub const COLLECTIVE_CONTEXT_BIT: Context = 0x8000;

/// Ids at or above this are not requests.
const RESERVED_IDS: u64 = u64::MAX - 16;
/// `user_ptr` of the overflow list's bounce buffers.
const BOUNCE: u64 = u64::MAX;
/// `user_ptr` of eager puts (their events report only failures).
const EAGER: u64 = u64::MAX - 1;
/// `user_ptr` of the entry that takes credit returns.
const CREDIT: u64 = u64::MAX - 2;
/// Bytes of each bounce buffer on the overflow list.
const BOUNCE_BYTES: usize = 1 << 20;
/// Bounce buffers kept on the overflow list (each renews itself when full).
const BOUNCE_BUFFERS: usize = 2;

/// What a request is doing.
enum Req {
    /// Finished; its result waits to be collected.
    Done(Result<Status>),
    /// A rendezvous send waiting for the receiver's gets.
    Send(send::Rendezvous),
    /// A posted receive.
    Recv(recv::Receive),
}

struct Inner {
    reqs: requests::Requests,
    /// Nonces and buffer registrations of the rendezvous sends in flight.
    books: send::SendBooks,
    /// Results of probes, by their id.
    searches: HashMap<u64, Event>,
    scratch: Vec<Event>,
    contexts: contexts::Contexts,
    /// The first delivery failure an eager put reported, returned by the next call.
    delivery_failure: Option<OffloadError>,
    /// A blocking receive on the fast path, not posted as an entry.
    fast: Option<fast::FastRecv>,
    /// Matched direct receives, collected by a progress pass (reused).
    directs: Vec<crate::DirectDone>,
}

/// One rank's point-to-point engine.
pub struct Engine {
    ni: Ni,
    eq: EqHandle,
    pt_msg: PtIndex,
    pt_rndv: PtIndex,
    /// Where receivers return eager credit (zero-byte puts whose header data is the total).
    pt_credit: PtIndex,
    credits: credits::Credits,
    /// Queued headers of senders that wait for their message (`bits::SENDER_WAITS`).
    waiting_headers: Arc<std::sync::atomic::AtomicUsize>,
    /// Events and counts of eager puts (their payload is passed inline).
    eager_md: MdHandle,
    /// The credit returns' descriptor: a return that fails (its sender has gone) reports
    /// nothing, where a failed eager message is an error (`dispatch`).
    credit_md: MdHandle,
    /// The region probes name (they deposit nothing).
    probe_region: Region,
    cfg: P2pConfig,
    /// `cfg.rndv_chunk` and `cfg.rndv_credits` as they are now ([`Engine::set_rendezvous`]).
    rndv_chunk: std::sync::atomic::AtomicUsize,
    rndv_credits: std::sync::atomic::AtomicUsize,
    inner: SpinLock<Inner>,
    /// Bumped whenever progress found something to do: waits back off only while idle.
    activity: std::sync::atomic::AtomicU64,
    /// `Inner::delivery_failure` is set (so a send can skip the lock when it is not).
    delivery_failed: std::sync::atomic::AtomicBool,
    /// Whether a fast receive is in progress (`fast::FAST_*`; see `fast::FastRecv`).
    fast_state: std::sync::atomic::AtomicU8,
    /// `Ni::queued_unexpected` when the message queue was last seen empty (`take_queued`).
    empty_at: std::sync::atomic::AtomicU64,
    /// Ranks of the job on this host.
    ranks_here: usize,
    /// More of them than cores: waits yield at once instead of spinning (a spinning rank
    /// only keeps the one it waits for off its core).
    crowded: bool,
    /// Where this rank belongs among the cores, when every rank of the job is on this host
    /// and there are no more of them than cores (`core_share`).
    home: Option<crate::core_share::Home>,
}

impl Engine {
    /// An engine over `fabric` with the network interface set up by `ni_cfg` and the protocol
    /// settings `cfg`, for a job with `ranks_here` ranks on this host. Shared: the NI's agent
    /// (and any thread's progress pass) hands it matched receives through a weak reference
    /// (`Engine::collect_matched`).
    pub fn new(
        fabric: Arc<dyn Fabric>,
        ni_cfg: NiConfig,
        cfg: P2pConfig,
        ranks_here: usize,
    ) -> Result<Arc<Engine>> {
        let mut engine = Engine::build(fabric, ni_cfg, cfg)?;
        engine.ranks_here = ranks_here.max(1);
        engine.crowded = engine.ranks_here > rdcoll_transport::cores::for_ranks_here(ranks_here);
        engine.ni.fabric().note_crowded(engine.crowded);
        engine.home =
            (!engine.crowded && engine.ranks_here == engine.ni.fabric().size()).then(|| {
                crate::core_share::Home {
                    index: engine.ni.fabric().rank() as usize,
                    of: engine.ranks_here,
                }
            });
        let engine = Arc::new(engine);
        let weak = Arc::downgrade(&engine);
        engine.ni.set_direct_collector(Box::new(move || {
            weak.upgrade().is_none_or(|e| e.collect_matched())
        }))?;
        Ok(engine)
    }

    fn build(fabric: Arc<dyn Fabric>, mut ni_cfg: NiConfig, cfg: P2pConfig) -> Result<Engine> {
        if fabric.clock_is_virtual() {
            // Simulated time moves only while every rank's thread sleeps in the fabric: an
            // agent thread of its own would keep it from moving.
            ni_cfg.mode = crate::Mode::Inline;
        }
        // Unexpected messages are limited by memory, as in MPI, not by a header count.
        ni_cfg.max_unexpected = usize::MAX;
        ni_cfg.max_objects = ni_cfg.max_objects.max(1 << 20);
        ni_cfg.max_triggered = ni_cfg.max_triggered.max(1 << 20);
        // Eager messages and first chunks are inline puts: let them use the whole message.
        ni_cfg.inline_max = crate::initiator::inline_capacity();
        let inline_max = ni_cfg.inline_max;
        cfg.validate(inline_max)?;
        // The agent starts once the portals and bounce buffers exist: a message that arrives
        // earlier (a peer that started first) must wait in the fabric, not find no entry.
        let mut ni = Ni::new_paused(fabric.clone(), ni_cfg)?;
        let eq = ni.eq_alloc(usize::MAX)?;
        let pt_msg = ni.pt_alloc_mpi(Some(eq))?;
        let pt_rndv = ni.pt_alloc(None, false)?;
        let probe_region = fabric.alloc_region(0)?;
        let pt_credit = credit_flow::credit_portal(&ni, eq, &probe_region)?;
        let waiting_headers = ni.track_waiting_senders(pt_msg, bits::SENDER_WAITS)?;
        ni.take_waits_notices(pt_credit, pt_msg, credit_flow::WAITS_NOTICE);
        let eager_opts = MdOptions {
            event_send_disable: true,
            // Every put on it is an eager message, a rendezvous header or a credit return:
            // a failed one is seen in `dispatch` as the delivery failure of an eager message.
            quiet_user_ptr: EAGER,
            ..MdOptions::default()
        };
        let eager_md = ni.md_bind(probe_region.clone(), Some(eq), eager_opts)?;
        let credit_opts = MdOptions {
            event_send_disable: true,
            quiet_user_ptr: CREDIT,
            ..MdOptions::default()
        };
        let credit_md = ni.md_bind(probe_region.clone(), Some(eq), credit_opts)?;
        for _ in 0..BOUNCE_BUFFERS {
            let spec = MeSpec {
                region: fabric.alloc_region(BOUNCE_BYTES)?,
                match_bits: 0,
                ignore_bits: !0,
                match_id: MatchId::Any,
                options: MeOptions {
                    manage_local: true,
                    // Any put to this portal fits what is left (puts here are inline).
                    min_free: crate::initiator::inline_capacity(),
                    op_get: false,
                    renew: true,
                    event_link_disable: true,
                    event_unlink_disable: true,
                    event_comm_disable: true,
                    ..MeOptions::default()
                },
                user_ptr: BOUNCE,
            };
            ni.me_append(pt_msg, List::Overflow, spec)?;
        }
        ni.start_agent()?;
        Ok(Engine {
            ni,
            eq,
            pt_msg,
            pt_rndv,
            pt_credit,
            credits: credits::Credits::new(fabric.size(), cfg.unexpected_max as u64),
            waiting_headers,
            eager_md,
            credit_md,
            probe_region,
            rndv_chunk: cfg.rndv_chunk.into(),
            rndv_credits: cfg.rndv_credits.into(),
            cfg,
            activity: std::sync::atomic::AtomicU64::new(0),
            delivery_failed: std::sync::atomic::AtomicBool::new(false),
            fast_state: std::sync::atomic::AtomicU8::new(fast::FAST_NONE),
            empty_at: std::sync::atomic::AtomicU64::new(0),
            ranks_here: fabric.size(),
            crowded: fabric.size() > rdcoll_transport::cores::for_ranks_here(fabric.size()),
            home: None,
            inner: SpinLock::new(Inner {
                reqs: requests::Requests::default(),
                books: send::SendBooks::default(),
                searches: HashMap::default(),
                scratch: Vec::new(),
                contexts: contexts::Contexts::default(),
                delivery_failure: None,
                fast: None,
                directs: Vec::new(),
            }),
        })
    }

    /// An engine configured from the environment (`RDCOLL_OFFLOAD`, `RDCOLL_EAGER_LIMIT`,
    /// `RDCOLL_RNDV_CHUNK`, `RDCOLL_RNDV_CREDITS`) for a job with `ranks_here` ranks on this host.
    pub fn from_env(fabric: Arc<dyn Fabric>, ranks_here: usize) -> Result<Arc<Engine>> {
        let p2p = P2pConfig::from_env_for(fabric.as_ref())?;
        Engine::new(fabric, NiConfig::from_env(ranks_here)?, p2p, ranks_here)
    }

    /// Ranks of the job on this host (as the launcher said; all of them by default).
    pub fn ranks_here(&self) -> usize {
        self.ranks_here
    }

    /// Whether the ranks on this host outnumber the cores this process may run on: waiting
    /// ranks then take turns on cores, spinning only keeps the awaited rank off its core, and
    /// every wait can cost a context switch.
    pub fn crowded(&self) -> bool {
        self.crowded
    }

    /// Where this rank belongs among the cores, if a waiting thread of it may move there
    /// (`core_share::yield_core`).
    pub fn home(&self) -> Option<crate::core_share::Home> {
        self.home
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.ni.rank()
    }

    /// Ranks in the job.
    pub fn size(&self) -> usize {
        self.ni.fabric().size()
    }

    /// The protocol settings.
    pub fn config(&self) -> P2pConfig {
        P2pConfig {
            rndv_chunk: self.rndv_chunk(),
            rndv_credits: self.rndv_credits(),
            ..self.cfg
        }
    }

    /// Changes this rank's rendezvous settings for the messages it starts sending (`chunk`)
    /// and the receives it matches (`credits`) from now on, as `RDCOLL_RNDV_CHUNK` and
    /// `RDCOLL_RNDV_CREDITS` would have set them; messages already in flight keep theirs. For
    /// tuning and for comparing settings within one run (`rdcoll-bench bw --vs-single-get`).
    pub fn set_rendezvous(&self, chunk: usize, credits: usize) -> Result<()> {
        let wanted = P2pConfig {
            rndv_chunk: chunk,
            rndv_credits: credits,
            ..self.cfg
        };
        wanted.validate(crate::initiator::inline_capacity())?;
        use std::sync::atomic::Ordering::Relaxed;
        self.rndv_chunk.store(chunk, Relaxed);
        self.rndv_credits.store(credits, Relaxed);
        Ok(())
    }

    fn rndv_chunk(&self) -> usize {
        self.rndv_chunk.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn rndv_credits(&self) -> usize {
        self.rndv_credits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The network interface underneath.
    pub fn ni(&self) -> &Ni {
        &self.ni
    }

    #[inline]
    fn check_rank(&self, r: Rank, what: &str) -> Result<()> {
        if (r as usize) >= self.size() {
            return Err(self.rank_out_of_range(r, what));
        }
        Ok(())
    }

    /// The error of [`check_rank`](Engine::check_rank), built out of line.
    #[cold]
    #[inline(never)]
    fn rank_out_of_range(&self, r: Rank, what: &str) -> OffloadError {
        invalid(format!(
            "{what} rank {r} is not in this job of {} ranks",
            self.size()
        ))
    }

    /// Runs the agent's work from this thread (in thread mode too, beside the agent) and hands
    /// queued events to the requests they concern.
    pub fn progress(&self) -> Result<()> {
        let mut inner = self.inner.lock();
        self.progress_locked(&mut inner)
    }

    fn progress_locked(&self, inner: &mut Inner) -> Result<()> {
        // A host thread driving progress: the thread-mode agent stands aside meanwhile. At
        // every pass: a window of queued receives may take only one or two.
        self.ni.note_host_polling();
        let mut events = std::mem::take(&mut inner.scratch);
        let mut directs = std::mem::take(&mut inner.directs);
        let handled = self
            .ni
            .progress_and_collect(self.eq, &mut events, &mut directs)?;
        if handled + events.len() + directs.len() > 0 {
            self.note_activity();
        }
        for d in directs.drain(..) {
            recv::on_direct(self, inner, d);
        }
        for ev in events.drain(..) {
            self.dispatch(inner, ev);
        }
        inner.scratch = events;
        inner.directs = directs;
        self.return_credits();
        Ok(())
    }

    /// Takes the NI's matched direct receives and acts on them (a rendezvous's gets are
    /// issued, an eager receive is finished), for a thread that is not in the engine's calls:
    /// the thread-mode agent, or a collective's wait. `false` if another thread is in the
    /// engine now (it, or the next pass, takes them).
    fn collect_matched(&self) -> bool {
        let Some(mut inner) = self.inner.try_lock() else {
            return false;
        };
        let mut directs = std::mem::take(&mut inner.directs);
        self.ni.take_direct_done(&mut directs);
        if !directs.is_empty() {
            self.note_activity();
        }
        for d in directs.drain(..) {
            recv::on_direct(self, &mut inner, d);
        }
        inner.directs = directs;
        drop(inner);
        self.return_credits();
        true
    }

    fn dispatch(&self, inner: &mut Inner, ev: Event) {
        match ev.kind {
            EventKind::Search => {
                inner.searches.insert(ev.user_ptr, ev);
            }
            EventKind::Put if ev.user_ptr == CREDIT => self.on_credit_put(&ev),
            EventKind::Ack if ev.user_ptr == EAGER && ev.fail != crate::NiFail::Ok => {
                tracing::error!(
                    "an eager message to rank {} was not delivered: {:?}",
                    ev.peer,
                    ev.fail
                );
                inner
                    .delivery_failure
                    .get_or_insert(OffloadError::Transport(TransportError::PeerFailed(ev.peer)));
                self.delivery_failed
                    .store(true, std::sync::atomic::Ordering::Release);
            }
            // Links, unlinks, and deposits into bounce buffers need nothing from us.
            _ => {}
        }
    }

    /// Whether request `id` has finished; if so, its result (and the request is gone).
    pub fn test(&self, id: ReqId) -> Result<Option<Status>> {
        let mut inner = self.inner.lock();
        self.progress_locked(&mut inner)?;
        self.test_locked(&mut inner, id)
    }

    /// [`test`](Engine::test) for each of `ids` after one progress pass (not one per
    /// request, each of which polls the fabric): each request's result, `Ok(None)` while it
    /// is in flight.
    pub fn test_all(&self, ids: &[ReqId]) -> Vec<Result<Option<Status>>> {
        let mut inner = self.inner.lock();
        if let Err(e) = self.progress_locked(&mut inner) {
            return ids.iter().map(|_| Err(e.clone())).collect();
        }
        ids.iter()
            .map(|&id| self.test_locked(&mut inner, id))
            .collect()
    }

    fn test_locked(&self, inner: &mut Inner, id: ReqId) -> Result<Option<Status>> {
        let Inner { reqs, books, .. } = inner;
        let Some(req) = reqs.get_mut(id.0) else {
            return Err(invalid(format!("no request {id:?} is in flight")));
        };
        let finished = match req {
            Req::Done(_) => true,
            Req::Send(s) => match send::check(self, books, s) {
                Some(result) => {
                    *req = Req::Done(result);
                    true
                }
                None => false,
            },
            Req::Recv(r) => match recv::check(self, r) {
                Some(result) => {
                    *req = Req::Done(result);
                    true
                }
                None => false,
            },
        };
        if !finished {
            return Ok(None);
        }
        match inner.reqs.remove(id.0) {
            Some(Req::Done(r)) => r.map(Some),
            _ => unreachable!("a finished request is Done"),
        }
    }

    /// Tries to cancel a posted receive. Returns whether it was cancelled (its result is then
    /// a status with `cancelled` set); a receive that already matched, and any send, completes
    /// normally.
    pub fn cancel(&self, id: ReqId) -> Result<bool> {
        let mut inner = self.inner.lock();
        self.progress_locked(&mut inner)?;
        match inner.reqs.get_mut(id.0) {
            None => Err(invalid(format!("no request {id:?} is in flight"))),
            Some(Req::Recv(r)) => {
                let done = recv::cancel(self, r);
                if let Some(result) = done {
                    inner.reqs.fill(id.0, Req::Done(result));
                    return Ok(true);
                }
                Ok(false)
            }
            Some(_) => Ok(false),
        }
    }

    fn take_delivery_failure(&self, inner: &mut Inner) -> Result<()> {
        self.delivery_failed
            .store(false, std::sync::atomic::Ordering::Relaxed);
        match inner.delivery_failure.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("rank", &self.rank())
            .field("config", &self.config())
            .finish_non_exhaustive()
    }
}

/// A truncated receive: the message was longer than the buffer.
pub(crate) fn truncated(status: Status, capacity: usize) -> OffloadError {
    OffloadError::Truncated {
        sender: status.source,
        tag: status.tag,
        len: status.len,
        capacity,
    }
}

//! The short-message fast path: a blocking receive that finds nothing queued
//! before it polls the fabric itself and copies a matching eager message straight from the
//! transport's buffer into the user's, without linking a match entry, raising events or
//! allocating (the latency path of `rdcoll-bench latency`, docs/PERFORMANCE.md).
//!
//! Matching stays MPI's: the receive is taken only while no other receive is posted on the
//! message portal and no queued unexpected message matches it, so it is the oldest receive
//! that could take an arrival, and every arrival older than the one it takes was handled (and
//! found not to match) first. Everything it does not take (other messages, rendezvous headers,
//! gets, completions) goes through the agent as usual. What the agent queues as unexpected
//! meanwhile (a rendezvous header this receive handed it, or a message another thread's
//! progress polled, the thread-mode agent's included) is noticed through the NI's count of
//! queued headers, checked under the state lock before each message is taken: one that matches
//! makes the receive an ordinary one, which takes it, so a newer message never overtakes it.
//! In thread mode the agent stands aside while the receive polls (`Ni::note_host_polling`), so it
//! rarely gets there first. If another thread posts a receive in the
//! meantime, that thread first posts this one as an ordinary entry ("materialises" it), and the
//! fast receive turns into an ordinary wait, so post order is kept across threads too.

use std::sync::atomic::Ordering;

use rdcoll_transport::{Rank, TransportError};

use super::bits::{self, Header};
use super::{Backoff, Context, Engine, Inner, ReqId, Source, Status, TagSel};
use crate::error::Result;
use crate::me::bits_match;
use crate::state::State;
use crate::wire::peek_quiet_put;

/// `Engine::fast_state`: no fast receive.
pub(super) const FAST_NONE: u8 = 0;
/// A fast receive is polling.
const FAST_OPEN: u8 = 1;
/// Another thread is posting the fast receive as an ordinary one.
const FAST_CLAIMED: u8 = 2;

/// A fast receive in progress, for another thread that has to post it as an ordinary receive.
/// Whether one is in progress is `Engine::fast_state`, changed only under the network
/// interface's state lock (which also serialises polling), so the owner taking a message and
/// another thread claiming the receive can never both happen.
pub(super) struct FastRecv {
    addr: usize,
    capacity: usize,
    source: Source,
    tag: TagSel,
    context: Context,
    /// The ordinary request it became, once claimed and posted.
    materialized: Option<Result<ReqId>>,
}

/// What a receive accepts, in match-bit form.
#[derive(Clone, Copy)]
pub(super) struct Selector {
    match_bits: u64,
    ignore_bits: u64,
    source: Source,
}

impl Selector {
    pub(super) fn new(context: Context, tag: TagSel, source: Source) -> Selector {
        let (match_bits, ignore_bits) = bits::receive_bits(context, tag);
        Selector {
            match_bits,
            ignore_bits,
            source,
        }
    }

    pub(super) fn accepts(&self, from: Rank, bits: u64) -> bool {
        bits_match(bits, self.match_bits, self.ignore_bits)
            && match self.source {
                Source::Any => true,
                Source::Rank(r) => r == from,
            }
    }
}

/// What polling one fabric event gave.
pub(super) enum Polled {
    Nothing,
    /// Handled by the agent (not ours).
    Other,
    /// Our message: what taking it gave is in the caller's slot.
    Taken,
}

impl Engine {
    /// Receives a message into `buf` through the fast path; `None` when the fast path does not
    /// apply (another receive posted, a matching message already queued) and the
    /// caller should post an ordinary receive.
    pub(super) fn recv_fast(
        &self,
        buf: &mut [u8],
        source: Source,
        tag: TagSel,
        context: Context,
    ) -> Option<Result<Status>> {
        if let Source::Rank(r) = source {
            if let Err(e) = self.check_rank(r, "source") {
                return Some(Err(e));
            }
        }
        // Unexpected headers queued when this receive last looked (see the loop).
        let mut seen;
        let sel = Selector::new(context, tag, source);
        {
            let mut inner = self.inner.lock();
            if self.fast_state.load(Ordering::Relaxed) != FAST_NONE {
                return None;
            }
            if let Err(e) = self.take_delivery_failure(&mut inner) {
                return Some(Err(e));
            }
            if !inner.lights.is_empty() {
                // Queued receives are older: this one joins them.
                return None;
            }
            let st = self.ni.lock_state();
            if !self.fast_path_open(&st, sel) {
                return None;
            }
            seen = st.queued_unexpected.load(Ordering::Relaxed);
            inner.fast = Some(FastRecv {
                addr: buf.as_mut_ptr() as usize,
                capacity: buf.len(),
                source,
                tag,
                context,
                materialized: None,
            });
            self.fast_state.store(FAST_OPEN, Ordering::Relaxed);
        }
        let fabric = self.ni.fabric();
        let mut backoff = Backoff::default();
        let mut idle_polls = 0u32;
        loop {
            // Idle: a few plain loads, no lock (the locks' atomics would set the pace).
            let claimed = self.fast_state.load(Ordering::Acquire) == FAST_CLAIMED;
            if claimed {
                // The claimer holds the engine lock until it has posted the receive.
                return self.finish_as_ordinary(false);
            }
            // Another thread's progress may have queued a message for this receive as
            // unexpected: looked at below, before anything newer is taken.
            if !fabric.pending() && self.ni.queued_unexpected() == seen {
                idle_polls = idle_polls.wrapping_add(1);
                // A failed sender is looked for now and then (and whenever the fabric has
                // something, which includes a failure).
                if !idle_polls.is_multiple_of(64) {
                    self.idle(&mut backoff);
                    continue;
                }
            }
            let mut st = self.ni.lock_state();
            if self.fast_state.load(Ordering::Relaxed) != FAST_OPEN {
                continue; // claimed meanwhile
            }
            let mut polled_any = false;
            let mut queued_match = false;
            let mut taken = None;
            for _ in 0..16 {
                // Every message older than the next one in the fabric was handled (by us
                // or by another thread's progress); one this receive matches was queued as
                // unexpected, and it must be taken before anything newer. The agent's work
                // on what we hand it (a rendezvous header, say) queues such messages too.
                let queued = st.queued_unexpected.load(Ordering::Relaxed);
                if queued != seen {
                    seen = queued;
                    if unexpected_match(&st, self, sel) {
                        queued_match = true;
                        break;
                    }
                }
                let take = |src, data: &[u8]| take_eager(self, sel, src, data, buf);
                match poll_one(&mut st, &mut taken, take) {
                    Polled::Nothing | Polled::Taken => break,
                    Polled::Other => polled_any = true,
                }
            }
            if polled_any {
                // The counts the handled events changed may release triggered operations (a
                // rendezvous's next get), also when a message is taken right after them.
                fire(&mut st);
            }
            let dead = if taken.is_none() && !queued_match {
                sender_gone(&st, self, source)
            } else {
                None
            };
            if taken.is_some() || dead.is_some() {
                self.fast_state.store(FAST_NONE, Ordering::Relaxed);
            }
            drop(st);
            if polled_any || taken.is_some() {
                self.note_activity();
            }
            if polled_any {
                // Host threads asleep on the agent's notifications (thread mode).
                self.ni.notify_changed();
            }
            if let Some(result) = taken {
                return Some(result);
            }
            if queued_match {
                // Post it as an ordinary receive, which takes the queued message. It stays
                // open until posted: a receive another thread posts meanwhile must post this
                // one first (`materialize_fast`), as it is older.
                return self.finish_as_ordinary(true);
            }
            if let Some(dead) = dead {
                return Some(Err(TransportError::PeerFailed(dead).into()));
            }
            if !polled_any {
                self.idle(&mut backoff);
            }
        }
    }

    /// Ends a fast receive that became an ordinary one (claimed by another thread, or posted
    /// here with `materialize` because a queued message matches it): waits for that request.
    /// Out of line, so the polling loop's frame stays small.
    #[cold]
    #[inline(never)]
    fn finish_as_ordinary(&self, materialize: bool) -> Option<Result<Status>> {
        let mut inner = self.inner.lock();
        if materialize {
            self.materialize_fast(&mut inner);
        }
        let posted = inner.fast.take().and_then(|f| f.materialized);
        self.fast_state.store(FAST_NONE, Ordering::Relaxed);
        drop(inner);
        Some(posted?.and_then(|id| self.wait(id)))
    }

    /// Marks progress for waiters' back-off (a hint: a plain load and store, no atomic
    /// read-modify-write on the message path).
    pub(super) fn note_activity(&self) {
        let a = self.activity.load(Ordering::Relaxed);
        self.activity.store(a.wrapping_add(1), Ordering::Relaxed);
    }

    /// Whether a receive with `sel` may take the fast path: nothing else posted, and no queued
    /// message it would take.
    fn fast_path_open(&self, st: &State, sel: Selector) -> bool {
        let Some(portal) = st.portals.get(self.pt_msg.0) else {
            return false;
        };
        portal.priority.is_empty() && !unexpected_match(st, self, sel)
    }

    /// Posts another thread's fast receive as an ordinary one (it is older than whatever the
    /// caller is about to post). Call with the engine lock held, before posting.
    pub(super) fn materialize_fast(&self, inner: &mut Inner) {
        // Fast receives open only under the engine lock, which the caller holds: one that is
        // not open now cannot open meanwhile (no state lock for the common case).
        if self.fast_state.load(Ordering::Relaxed) != FAST_OPEN {
            return;
        }
        {
            let _st = self.ni.lock_state();
            if self.fast_state.load(Ordering::Relaxed) != FAST_OPEN {
                return;
            }
            self.fast_state.store(FAST_CLAIMED, Ordering::Release);
        }
        let Some(f) = inner.fast.as_ref().map(FastRecv::describe) else {
            return;
        };
        let posted = self.materialize(inner, &f);
        if let Some(slot) = inner.fast.as_mut() {
            slot.materialized = Some(posted);
        }
    }

    fn materialize(&self, inner: &mut Inner, f: &FastRecv) -> Result<ReqId> {
        // SAFETY: the buffer belongs to the blocked fast receive that registered it; it stays
        // borrowed by that call until the ordinary request posted here has completed.
        unsafe {
            self.post_recv(
                inner,
                f.addr as *mut u8,
                f.capacity,
                f.source,
                f.tag,
                f.context,
            )
        }
    }
}

impl FastRecv {
    /// The receive's description, without a result.
    fn describe(&self) -> FastRecv {
        FastRecv {
            addr: self.addr,
            capacity: self.capacity,
            source: self.source,
            tag: self.tag,
            context: self.context,
            materialized: None,
        }
    }
}

/// Releases the triggered operations that the counts changed by handled events have reached.
pub(super) fn fire(st: &mut State) {
    if let Err(e) = st.fire_ready() {
        tracing::error!("offload agent: firing triggered operations failed: {e}");
    }
}

/// Polls one fabric event: a message `take` accepts (it returns `Some`) is the caller's, taken
/// straight from the transport's buffer, and what taking it gave is left in `taken` (a slot
/// of the caller's, not a return value: the result is large and this is the latency path);
/// anything else is handed to the agent.
pub(super) fn poll_one<T>(
    st: &mut State,
    taken: &mut Option<T>,
    mut take: impl FnMut(Rank, &[u8]) -> Option<T>,
) -> Polled {
    let mut other = None;
    let polled = st.poll_fabric_with(&mut |ev| match ev {
        rdcoll_transport::EventRef::Message { src, data } => match take(src, data) {
            Some(t) => *taken = Some(t),
            None => other = Some(ev.into_owned()),
        },
        rdcoll_transport::EventRef::Owned(e) => other = Some(e),
    });
    match polled {
        Ok(false) => Polled::Nothing,
        Err(e) => {
            log_poll_failure(&e);
            Polled::Nothing
        }
        Ok(true) => {
            if taken.is_some() {
                return Polled::Taken;
            }
            if let Some(ev) = other {
                crate::agent::handle(st, ev);
            }
            Polled::Other
        }
    }
}

/// Logs a failed poll of the fabric (out of line: the logging macro's call-site code would
/// otherwise sit in every poll's frame).
#[cold]
#[inline(never)]
fn log_poll_failure(e: &rdcoll_transport::TransportError) {
    tracing::error!("offload agent: polling the fabric failed: {e}");
}

/// Copies an eager message for this receive into `buf`; `None` if `data` is anything else.
fn take_eager(
    engine: &Engine,
    sel: Selector,
    src: Rank,
    data: &[u8],
    buf: &mut [u8],
) -> Option<Result<Status>> {
    let (bits, payload) = eager_on_message_portal(engine, data)?;
    sel.accepts(src, bits)
        .then(|| deliver_eager(src, bits, payload, buf))
}

/// The match bits and payload of `data` if it is an eager message on the message portal.
/// Eager messages and rendezvous headers both travel as compact quiet puts; a header that
/// names a chunk size starts a rendezvous, which is the agent's (through an entry).
pub(super) fn eager_on_message_portal<'a>(
    engine: &Engine,
    data: &'a [u8],
) -> Option<(u64, &'a [u8])> {
    let (pt, bits, hdr_data, payload) = peek_quiet_put(data)?;
    (pt == engine.pt_msg && Header::decode(hdr_data).chunk.is_none()).then_some((bits, payload))
}

/// Copies an eager message from `src` into `buf`: its status, or `Truncated` (with the true
/// length, nothing written past `buf`).
#[inline]
pub(super) fn deliver_eager(
    src: Rank,
    bits: u64,
    payload: &[u8],
    buf: &mut [u8],
) -> Result<Status> {
    let status = Status {
        source: src,
        tag: bits::tag_of(bits),
        len: payload.len(),
        cancelled: false,
    };
    let n = payload.len().min(buf.len());
    rdcoll_transport::copy_bytes(&mut buf[..n], &payload[..n]);
    if payload.len() > buf.len() {
        Err(super::truncated(status, buf.len()))
    } else {
        Ok(status)
    }
}

/// Whether a queued unexpected message on the message portal matches `sel`.
pub(super) fn unexpected_match(st: &State, engine: &Engine, sel: Selector) -> bool {
    let Some(portal) = st.portals.get(engine.pt_msg.0) else {
        return false;
    };
    portal
        .unexpected
        .values()
        .any(|u| !u.get && sel.accepts(u.initiator, u.match_bits))
}

/// The failed sender a receive from `source` would wait for forever (see `recv::peer_gone`);
/// here the agent's record is read directly, as this thread is the agent.
fn sender_gone(st: &State, engine: &Engine, source: Source) -> Option<Rank> {
    let fabric = engine.ni.fabric();
    let handled = |r: Rank| st.failed_peers.get(r as usize).copied().unwrap_or(false);
    match source {
        Source::Rank(s) => (fabric.is_failed(s) && handled(s)).then_some(s),
        Source::Any => {
            let me = fabric.rank();
            let mut others = (0..fabric.size() as Rank).filter(|&p| p != me).peekable();
            others.peek()?;
            let mut last = None;
            for p in others {
                if !(fabric.is_failed(p) && handled(p)) {
                    return None;
                }
                last = Some(p);
            }
            last
        }
    }
}

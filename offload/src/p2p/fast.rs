//! The short-message fast path: a blocking receive that finds nothing posted and nothing
//! queued for it has the NI poll the fabric (`Ni::fast_receive_pass`) and copies a matching
//! eager message straight from the transport's buffer into the user's, without posting a
//! receive, raising events or allocating (the latency path of `rdcoll-bench latency`). A
//! matching rendezvous header is taken the same way (its first chunk copied into the user's
//! buffer), and the receive then fetches the rest as a posted one would.
//!
//! Matching stays MPI's and the matching engine's: the receive opens only while the message
//! portal's engine holds no posted receive and no queued message it matches
//! (`Ni::fast_receive_open`), so it is the oldest receive that could take an arrival, and every
//! arrival older than the one it takes was handled (and found not to match) first. Everything it
//! does not take (other messages, gets, completions) goes through the agent as usual. What the
//! agent queues as unexpected meanwhile (a message another thread's progress polled, the
//! thread-mode agent's included) is noticed through the NI's count of queued headers and looked up in the engine before each
//! message is taken: one that matches makes the receive an ordinary one, which takes it, so a
//! newer message never overtakes it. In thread mode the agent stands aside while the receive
//! polls (`Ni::note_host_polling`), so it rarely gets there first. If another thread posts a
//! receive in the meantime, that thread first posts this one as an ordinary receive
//! ("materialises" it, claiming it under the NI's lock: `Ni::serialized`), and the fast receive
//! turns into an ordinary wait, so post order is kept across threads too.

use std::sync::atomic::Ordering;

use rdcoll_transport::{Rank, TransportError};

use super::bits::{self, Header};
use super::{Backoff, Context, Engine, Inner, Req, ReqId, Source, Status, TagSel};
use crate::error::Result;
use crate::ni_mpi::{FastOpen, FastPass, Queued};
use crate::wire::QuietPut;
use crate::DirectDone;
use rdcoll_matching::ReceiveSpec;

/// `Engine::fast_state`: no fast receive.
pub(super) const FAST_NONE: u8 = 0;
/// A fast receive is polling.
const FAST_OPEN: u8 = 1;
/// Another thread is posting the fast receive as an ordinary one.
const FAST_CLAIMED: u8 = 2;
/// A wait is turning its posted receive into a fast one (`Engine::wait_alone`).
const FAST_WITHDRAWING: u8 = 3;

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
        let spec = bits::receive_spec(context, tag, source);
        if let Some(done) = self.take_queued(buf, &spec) {
            return Some(done);
        }
        let seen = {
            let mut inner = self.inner.lock();
            match self.open_fast(&mut inner, buf, &spec, (source, tag, context), false) {
                Opened::Open(seen) => seen,
                Opened::Done(done) => return Some(done),
                Opened::Closed => return None,
            }
        };
        self.poll_fast(buf, source, &spec, seen)
    }

    /// [`Engine::wait`] for request `id` (`inner`: the engine lock, held since the look that
    /// found it in flight) if it is a receive that is the only one posted and has not
    /// matched: it is withdrawn and waits as a fast receive, which is what it would be had it
    /// been a blocking receive. `None` if that does not apply (the lock is let go and the
    /// caller waits as usual).
    ///
    /// Matching is unchanged: nothing queued matches it (it would have taken that when
    /// posted), every arrival since found it posted, no receive can be posted between the
    /// withdrawal and the opening (both under the engine lock), and no other thread's
    /// blocking receive takes a message queued in between (the fast state says
    /// `FAST_WITHDRAWING`, which `take_queued` leaves to it), so the fast receive takes what
    /// it would have taken. The request is gone from the engine from then on; this wait
    /// holds its buffer until the message is in.
    pub(super) fn wait_alone(
        &self,
        mut inner: rdcoll_transport::SpinGuard<'_, Inner>,
        id: ReqId,
    ) -> Option<Result<Status>> {
        let Some(Req::Recv(r)) = inner.reqs.get_mut(id.0) else {
            return None;
        };
        let lone = r.lone()?;
        // A failed eager send waits to be reported by the next call that starts something
        // (the fast receive's opening would report it, on a receive that had been posted
        // before); the engine lock held here keeps it from being recorded meanwhile.
        if self.fast_state.load(Ordering::Relaxed) != FAST_NONE
            || self.delivery_failed.load(Ordering::Relaxed)
        {
            return None;
        }
        // From the withdrawal to the opening the receive counts as an open fast receive, so
        // that another thread's blocking receive does not take a message queued meanwhile
        // (`take_queued` leaves it to the older fast receive); its other receives wait for
        // the engine lock, held here throughout.
        self.fast_state.store(FAST_WITHDRAWING, Ordering::Relaxed);
        let withdrawn = self
            .ni
            .cancel_direct_if_alone(self.pt_msg, lone.handle)
            .unwrap_or(false);
        if !withdrawn {
            self.fast_state.store(FAST_NONE, Ordering::Relaxed);
            return None;
        }
        inner.reqs.remove(id.0);
        // The buffer (`capacity` > 0 bytes at `addr`) was lent to request `id`, which the
        // caller waits for: it stays lent to this wait until the message is in it.
        // SAFETY: lent as said; the posted receive is withdrawn, so only this wait writes it.
        let buf = unsafe { std::slice::from_raw_parts_mut(lone.addr as *mut u8, lone.capacity) };
        let (source, tag, context) = (lone.source, lone.tag, lone.context);
        let spec = bits::receive_spec(context, tag, source);
        let opened = self.open_fast(&mut inner, buf, &spec, (source, tag, context), true);
        if !matches!(opened, Opened::Open(_)) {
            self.fast_state.store(FAST_NONE, Ordering::Relaxed);
        }
        let done = match opened {
            Opened::Open(seen) => {
                drop(inner);
                self.poll_fast(buf, source, &spec, seen)
            }
            Opened::Done(done) => Some(done),
            Opened::Closed => {
                // Posted again before the engine lock is let go: still older than any
                // receive posted after it.
                // SAFETY: as above.
                let posted = unsafe {
                    self.post_recv(
                        &mut inner,
                        (lone.addr as *mut u8, lone.capacity),
                        source,
                        tag,
                        context,
                        super::Fetch::Fabric,
                    )
                };
                drop(inner);
                Some(posted.and_then(|id| self.wait_posted(id)))
            }
        };
        let done = done.unwrap_or_else(|| {
            // SAFETY: as above.
            let id = unsafe { self.irecv(buf.as_mut_ptr(), buf.len(), source, tag, context)? };
            self.wait_posted(id)
        });
        self.return_credits();
        Some(done)
    }

    /// Opens a fast receive into `buf` with `spec` (from `source`, `tag`, `context`), under
    /// the engine lock `inner`: a queued eager message it matches is taken at once (the
    /// engine lock keeps every other receive of this rank out meanwhile); else, with nothing
    /// else posted and nothing queued for it, it opens under the state lock, which
    /// serialises it with claims.
    ///
    /// `withdrawing`: the fast state is `FAST_WITHDRAWING` (a wait replacing its posted
    /// receive), which the caller clears unless the receive opens.
    fn open_fast(
        &self,
        inner: &mut Inner,
        buf: &mut [u8],
        spec: &ReceiveSpec,
        (source, tag, context): (Source, TagSel, Context),
        withdrawing: bool,
    ) -> Opened {
        if !withdrawing && self.fast_state.load(Ordering::Relaxed) != FAST_NONE {
            return Opened::Closed;
        }
        if let Err(e) = self.take_delivery_failure(inner) {
            return Opened::Done(Err(e));
        }
        let open = || self.fast_state.store(FAST_OPEN, Ordering::Relaxed);
        let eager = |src, hdr_data| self.takes_eager(src, hdr_data);
        // Unexpected headers queued so far (see `poll_fast`).
        let seen = match self
            .ni
            .fast_receive_open(self.pt_msg, spec, buf, eager, open)
        {
            FastOpen::Open(seen) => seen,
            FastOpen::Took(d) => return Opened::Done(super::recv::queued_eager(d, buf.len())),
            FastOpen::Closed => return Opened::Closed,
        };
        inner.fast = Some(FastRecv {
            addr: buf.as_mut_ptr() as usize,
            capacity: buf.len(),
            source,
            tag,
            context,
            materialized: None,
        });
        Opened::Open(seen)
    }

    /// The fast receive opened by `open_fast` (`seen`: the unexpected headers queued then),
    /// polling the fabric until it takes its message or becomes an ordinary receive.
    fn poll_fast(
        &self,
        buf: &mut [u8],
        source: Source,
        spec: &ReceiveSpec,
        mut seen: u64,
    ) -> Option<Result<Status>> {
        let rule = spec.match_bits();
        let from = match source {
            Source::Any => None,
            Source::Rank(r) => Some(r),
        };
        let fabric = self.ni.fabric();
        let mut backoff = Backoff::default();
        let mut idle_polls = 0u32;
        let mut looks = 0u32;
        loop {
            // Idle: a few plain loads, no lock (the locks' atomics would set the pace).
            let claimed = self.fast_state.load(Ordering::Acquire) == FAST_CLAIMED;
            if claimed {
                // The claimer holds the engine lock until it has posted the receive.
                return self.finish_as_ordinary(false);
            }
            // A sender blocked behind its own unreceived messages: the ordinary wait
            // withdraws the receive with the error (`Engine::wait`).
            looks = looks.wrapping_add(1);
            if looks.is_multiple_of(64) && self.blocked_sender(source).is_some() {
                return self.finish_as_ordinary(true);
            }
            // A matched receive another thread's pass could not hand to the engine (it was
            // busy): taken now, since its sender may send what this receive waits for only
            // once that receive's gets went out.
            if self.ni.directs_left() {
                self.ni.progress();
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
            let mut taken = None;
            let still_open = || self.fast_state.load(Ordering::Relaxed) == FAST_OPEN;
            let close = || self.fast_state.store(FAST_NONE, Ordering::Relaxed);
            let take = |src, q: &QuietPut<'_>| {
                let taken = take_message(src, q, buf);
                if let Taken::Eager(_) = taken {
                    // The pass holds the NI's state lock (see `received_in_pass`).
                    self.credits.received_in_pass(src, q.payload.len());
                }
                Some(taken)
            };
            let pass = self.ni.fast_receive_pass(
                self.pt_msg,
                spec,
                rule,
                from,
                &mut seen,
                still_open,
                close,
                &mut taken,
                take,
            );
            let polled_any = match pass {
                FastPass::Claimed => continue,
                FastPass::Taken => {
                    self.note_activity();
                    match taken {
                        Some(Taken::Eager(result)) => return Some(result),
                        Some(Taken::Rendezvous(d)) => {
                            return Some(self.fetch_taken(buf, source, d));
                        }
                        None => continue,
                    }
                }
                // Post it as an ordinary receive, which takes the queued message. It stays
                // open until posted: a receive another thread posts meanwhile must post this
                // one first (`materialize_fast`), as it is older.
                FastPass::QueuedMatch => return self.finish_as_ordinary(true),
                FastPass::SenderGone(dead) => {
                    return Some(Err(TransportError::PeerFailed(dead).into()))
                }
                FastPass::Nothing(polled_any) => polled_any,
            };
            if polled_any {
                self.note_activity();
            }
            if !polled_any {
                self.idle(&mut backoff);
            }
        }
    }

    /// Takes a queued eager message `spec` matches into `buf` without the engine lock (see
    /// `Ni::take_queued`), when messages may be queued: unless no header was queued since
    /// the queue was last seen empty (the latency path's case, which then costs one load).
    #[inline]
    fn take_queued(&self, buf: &mut [u8], spec: &ReceiveSpec) -> Option<Result<Status>> {
        let queued = self.ni.queued_unexpected();
        if queued == self.empty_at.load(Ordering::Relaxed)
            || self.delivery_failed.load(Ordering::Relaxed)
        {
            return None;
        }
        let eager = |src, hdr_data| self.takes_eager(src, hdr_data);
        let others_open = || self.fast_state.load(Ordering::Relaxed) != FAST_NONE;
        match self
            .ni
            .take_queued(self.pt_msg, spec, buf, eager, others_open)
        {
            Queued::Took(d) => Some(super::recv::queued_eager(d, buf.len())),
            Queued::Empty(at) => {
                self.empty_at.store(at, Ordering::Relaxed);
                None
            }
            Queued::Other => None,
        }
    }

    /// Whether a blocking receive takes a queued message from `src` with `hdr_data` in place:
    /// an eager one, which is then received (called under the NI's state lock, see
    /// `Credits::received_in_pass`).
    #[inline]
    fn takes_eager(&self, src: Rank, hdr_data: u64) -> bool {
        let header = Header::decode(hdr_data);
        if header.chunk.is_some() {
            return false;
        }
        self.credits.received_in_pass(src, header.len as usize);
        true
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
        // Not by the fast path again: that gave it back (a blocked sender would be seen
        // there over and over).
        Some(posted?.and_then(|id| self.wait_posted(id)))
    }

    /// Marks progress for waiters' back-off (a hint: a plain load and store, no atomic
    /// read-modify-write on the message path).
    pub(super) fn note_activity(&self) {
        let a = self.activity.load(Ordering::Relaxed);
        self.activity.store(a.wrapping_add(1), Ordering::Relaxed);
    }

    /// Posts another thread's fast receive as an ordinary one (it is older than whatever the
    /// caller is about to post). Call with the engine lock held, before posting.
    pub(super) fn materialize_fast(&self, inner: &mut Inner) {
        // Fast receives open only under the engine lock, which the caller holds: one that is
        // not open now cannot open meanwhile (no state lock for the common case).
        if self.fast_state.load(Ordering::Relaxed) != FAST_OPEN {
            return;
        }
        let claimed = self.ni.serialized(|| {
            let open = self.fast_state.load(Ordering::Relaxed) == FAST_OPEN;
            if open {
                self.fast_state.store(FAST_CLAIMED, Ordering::Release);
            }
            open
        });
        if !claimed {
            return;
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
                (f.addr as *mut u8, f.capacity),
                f.source,
                f.tag,
                f.context,
                super::Fetch::Fabric,
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

/// How opening a fast receive went (`Engine::open_fast`).
enum Opened {
    /// Open: the unexpected headers queued so far.
    Open(u64),
    /// Done at once (a queued eager message taken, or an earlier failure): its result.
    Done(Result<Status>),
    /// The fast path does not apply: post an ordinary receive.
    Closed,
}

/// What the fast receive took.
enum Taken {
    /// An eager message, copied into the buffer: the receive's result.
    Eager(Result<Status>),
    /// A rendezvous header, its first chunk copied into the buffer: what a direct receive
    /// would be told of it (the rest is fetched as for one).
    Rendezvous(DirectDone),
}

/// Takes a message that matches the fast receive into `buf`: an eager one whole; of a
/// rendezvous one (a chunk size in its header) the first chunk, as a direct receive posted
/// for it would, so that the receive goes on to fetch the rest without the header being queued
/// and the receive posted (a copy into a bounce buffer and out again, about 0.8 us).
#[inline]
fn take_message(src: Rank, q: &QuietPut<'_>, buf: &mut [u8]) -> Taken {
    if Header::decode(q.hdr_data).chunk.is_none() {
        return Taken::Eager(deliver_eager(src, q.bits, q.payload, buf));
    }
    let n = q.payload.len().min(buf.len());
    rdcoll_transport::copy_bytes(&mut buf[..n], &q.payload[..n]);
    Taken::Rendezvous(DirectDone {
        user_ptr: 0,
        initiator: src,
        match_bits: q.bits,
        hdr_data: q.hdr_data,
        rlength: q.payload.len() as u64,
        mlength: n as u64,
        fail: crate::NiFail::Ok,
        published: q.published,
    })
}

/// Copies an eager message from `src` into `buf`: its status, or `Truncated` (with the true
/// length, nothing written past `buf`).
#[inline]
fn deliver_eager(src: Rank, bits: u64, payload: &[u8], buf: &mut [u8]) -> Result<Status> {
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

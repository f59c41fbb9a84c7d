//! The NI's MPI-portal API (SEMANTICS.md §12): portals whose match lists the matching engine
//! keeps, direct receives, and the blocking receive's fast path. This is how the message layer
//! (`p2p`) talks to the NI for matching; it never sees the NI's state.

use std::sync::atomic::Ordering;

use rdcoll_matching::ReceiveSpec;
use rdcoll_transport::{EventRef, Rank};

use crate::error::{invalid, Result};
use crate::event::{Event, EventKind};
use crate::me::Me;
use crate::mpi_lists::{spec_of, DirectDone, DirectHandle, DirectRecv, Posted, PostedAs};
use crate::state::{State, Taker};
use crate::types::{EqHandle, MatchId, PtIndex};
use crate::wire::{peek_quiet_put, QuietPut};
use crate::Ni;

/// What posting a direct receive did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectPost {
    /// Posted behind every earlier receive of the portal.
    Posted(DirectHandle),
    /// It took a queued unexpected message: its `DirectDone` comes with the next
    /// [`Ni::progress_and_collect`] (once the message's data is all in).
    Matched,
}

/// Where a blocking receive stands when it starts ([`Ni::fast_receive_open`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FastOpen {
    /// It may take the fast path; the count of headers queued so far.
    Open(u64),
    /// It took a queued message: what a direct receive would be told of it.
    Took(DirectDone),
    /// It must be posted as an ordinary receive.
    Closed,
}

/// What a blocking receive found among the queued messages ([`Ni::take_queued`]).
pub(crate) enum Queued {
    /// It took one: what a direct receive would be told of it.
    Took(DirectDone),
    /// None is queued; the count of headers queued so far (the queue was empty then).
    Empty(u64),
    /// It must go the ordinary way (nothing it may take, or another receive is open).
    Other,
}

/// How one pass of the blocking receive's fast path ended ([`Ni::fast_receive_pass`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FastPass {
    /// The receive is no longer open (another thread claimed it).
    Claimed,
    /// `take` accepted a message: its result is in the caller's slot.
    Taken,
    /// A queued unexpected message matches the receive: post it as an ordinary one.
    QueuedMatch,
    /// Every sender it could get a message from has failed (and their last messages were
    /// handled).
    SenderGone(Rank),
    /// Nothing for it; `true` if other events were handled.
    Nothing(bool),
}

/// The matching state of MPI portal `pt` (an error for any other portal).
fn mpi_lists(st: &mut State, pt: PtIndex) -> Result<&mut crate::mpi_lists::MpiLists> {
    st.portal(pt)?
        .mpi
        .as_deref_mut()
        .ok_or_else(|| invalid("not an MPI portal"))
}

/// Appends a priority-list entry to an MPI portal: it takes the oldest unexpected header it
/// matches, else it is posted behind every earlier receive.
pub(crate) fn append_mpi(st: &mut State, pt: PtIndex, seq: u64, me: Me) -> Result<()> {
    let spec = spec_of(me.match_bits, me.ignore_bits, me.match_id).ok_or_else(|| {
        invalid(
            "an MPI portal's priority entries need MPI match bits (the context never ignored, \
             the nonce always)",
        )
    })?;
    let o = me.options;
    if !o.use_once || o.no_truncate || !o.op_put || o.manage_local {
        return Err(invalid(
            "an MPI portal's priority entries are use-once put entries without no-truncate or \
             manage-local",
        ));
    }
    let (user_ptr, counting) = (me.user_ptr, o.counting);
    let mpi = mpi_lists(st, pt)?;
    match mpi.post(
        spec,
        Posted::Entry {
            seq,
            me: Box::new(me),
        },
    ) {
        PostedAs::Took(u) => {
            let taker = Taker {
                user_ptr,
                counting,
                direct: None,
            };
            crate::target::settle_taken(st, pt, &u, taker);
            if !o.event_unlink_disable {
                let ev = Event::simple(EventKind::AutoUnlink, Some(pt), st.rank(), user_ptr);
                st.post_pt(pt, ev);
            }
        }
        PostedAs::Linked(_) => {
            if !o.event_link_disable {
                let ev = Event::simple(EventKind::Link, Some(pt), st.rank(), user_ptr);
                st.post_pt(pt, ev);
            }
        }
    }
    Ok(())
}

impl Ni {
    /// A new MPI portal: its priority list and unexpected headers are kept by the matching
    /// engine (O(1) per match), its priority entries must have MPI shapes (see
    /// [`Ni::me_append`]), it takes direct receives, and it refuses gets.
    pub fn pt_alloc_mpi(&self, eq: Option<EqHandle>) -> Result<PtIndex> {
        self.alloc_portal(eq, false, true)
    }

    /// Posts a direct receive on MPI portal `pt`: a message from `from` whose match bits agree
    /// with `match_bits` outside `ignore_bits` is written into `addr..addr + capacity` (as
    /// much as fits) with no entry, region or event, and reported as a [`DirectDone`] by
    /// [`Ni::progress_and_collect`]. Post order with the portal's entries is kept.
    ///
    /// # Safety
    /// `addr..addr + capacity` must stay valid, and must not be read or written by anything
    /// else, until the receive's `DirectDone` has been collected or [`Ni::cancel_direct`]
    /// withdrew it.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn post_direct(
        &self,
        pt: PtIndex,
        match_bits: u64,
        ignore_bits: u64,
        from: MatchId,
        user_ptr: u64,
        addr: *mut u8,
        capacity: usize,
    ) -> Result<DirectPost> {
        let spec = spec_of(match_bits, ignore_bits, from)
            .ok_or_else(|| invalid("a direct receive needs MPI match bits"))?;
        let d = DirectRecv {
            user_ptr,
            addr: addr as usize,
            capacity,
        };
        self.with(|st| {
            let mpi = mpi_lists(st, pt)?;
            match mpi.post(spec, Posted::Direct(d)) {
                PostedAs::Linked(h) => Ok(DirectPost::Posted(DirectHandle(h))),
                PostedAs::Took(u) => {
                    let taker = Taker {
                        user_ptr,
                        counting: Default::default(),
                        direct: Some(d),
                    };
                    crate::target::settle_taken(st, pt, &u, taker);
                    Ok(DirectPost::Matched)
                }
            }
        })
    }

    /// Withdraws a direct receive; `false` if it has matched already (its `DirectDone` comes).
    pub fn cancel_direct(&self, pt: PtIndex, handle: DirectHandle) -> Result<bool> {
        let mut st = self.lock_state();
        let mpi = mpi_lists(&mut st, pt)?;
        Ok(mpi.cancel_direct(handle).is_some())
    }

    /// Withdraws direct receive `handle` if it is the only receive posted on MPI portal `pt`
    /// (so that a wait may take its message by the fast path instead, see
    /// `Engine::wait`): `true` if withdrawn, `false` if it has matched already (its
    /// `DirectDone` comes) or others are posted (it stays).
    pub(crate) fn cancel_direct_if_alone(&self, pt: PtIndex, handle: DirectHandle) -> Result<bool> {
        let mut st = self.lock_state();
        let mpi = mpi_lists(&mut st, pt)?;
        if !mpi.one_posted() {
            return Ok(false);
        }
        Ok(mpi.cancel_direct(handle).is_some())
    }

    /// Has MPI portal `pt` count, per sender, the queued unexpected headers whose header data
    /// has any bit of `bits` set ([`Ni::sender_waits_behind`]). Returns a counter of all of
    /// them, to read without the state lock.
    pub fn track_waiting_senders(
        &self,
        pt: PtIndex,
        bits: u64,
    ) -> Result<std::sync::Arc<std::sync::atomic::AtomicUsize>> {
        let mut st = self.lock_state();
        let mpi = mpi_lists(&mut st, pt)?;
        Ok(mpi.track_waiting(bits))
    }

    /// Has puts on portal `notice_pt` whose header data has `flag` mark, as they arrive, the
    /// header from their initiator with their match bits (nonce included) queued unexpected
    /// on MPI portal `msg_pt` with the bits [`Ni::track_waiting_senders`] counts: its sender,
    /// which sent it without them, now waits for it. Applied at arrival, in order with the
    /// sender's messages, so a notice never marks a later message that reuses the nonce; a
    /// notice for a header a receive took already marks nothing. The put itself is handled
    /// as any other on `notice_pt`.
    pub fn take_waits_notices(&self, notice_pt: PtIndex, msg_pt: PtIndex, flag: u64) {
        self.lock_state().waits_notices = Some(crate::state::WaitsNotices {
            notice_pt,
            msg_pt,
            flag,
        });
    }

    /// Whether a header from `sender` that [`Ni::track_waiting_senders`] counts is queued
    /// unexpected on MPI portal `pt` (no receive posted so far matches it).
    pub fn sender_waits_behind(&self, pt: PtIndex, sender: Rank) -> bool {
        let mut st = self.lock_state();
        st.portal(pt)
            .ok()
            .and_then(|p| p.mpi.as_ref())
            .is_some_and(|mpi| mpi.waiting_from(sender))
    }

    /// Moves every matched direct receive to `directs` (without a progress pass).
    pub fn take_direct_done(&self, directs: &mut Vec<DirectDone>) {
        let mut st = self.lock_state();
        directs.append(&mut st.direct_done);
    }

    /// Puts matched direct receives taken by [`Ni::take_direct_done`] back, ahead of any
    /// matched since, for the next progress pass or collector to act on, and marks them
    /// ([`Ni::directs_left`]) so that a thread that drives passes only on fabric news still
    /// runs one.
    pub fn defer_direct_done(&self, deferred: &mut Vec<DirectDone>) {
        if deferred.is_empty() {
            return;
        }
        let mut st = self.lock_state();
        st.direct_done.splice(0..0, deferred.drain(..));
        self.shared
            .directs_left
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Runs the agent's work once from this thread and moves every queued event of `eq` to
    /// `events` and every matched direct receive to `directs`, under one acquisition of the
    /// state lock. Returns how many fabric events it handled (see
    /// [`Ni::progress_and_drain`]).
    pub fn progress_and_collect(
        &self,
        eq: EqHandle,
        events: &mut Vec<Event>,
        directs: &mut Vec<DirectDone>,
    ) -> Result<usize> {
        let mut st = self.lock_state();
        let handled = crate::agent::progress_locked(&mut st);
        directs.append(&mut st.direct_done);
        // Taken, under the lock: a mark of receives left for a pass is spent.
        self.shared
            .directs_left
            .store(false, std::sync::atomic::Ordering::Release);
        let drained = crate::ni::drain_eq(&mut st, eq, events);
        drop(st);
        if handled > 0 {
            self.notify_changed();
        }
        drained.map(|()| handled)
    }

    /// Where a blocking receive with `spec` on MPI portal `pt` into `buf` stands, under one
    /// acquisition of the state lock:
    /// - the oldest queued message it matches is all in and `takes` its sender and header data
    ///   (called under the state lock, and only once: `true` means it is taken): taken,
    ///   copied into `buf` (as much as fits), and reported ([`FastOpen::Took`]), exactly as a
    ///   receive posted now would take it;
    /// - nothing queued matches and nothing is posted: `open` ran, and it may take the fast
    ///   path ([`FastOpen::Open`], with the count of headers queued so far for
    ///   [`Ni::fast_receive_pass`]);
    /// - else it must be posted as an ordinary receive ([`FastOpen::Closed`]).
    ///
    /// The caller holds off every other receive of the portal meanwhile (the engine lock), so
    /// that no older receive is still to be posted.
    #[inline]
    pub(crate) fn fast_receive_open(
        &self,
        pt: PtIndex,
        spec: &ReceiveSpec,
        buf: &mut [u8],
        takes: impl FnOnce(Rank, u64) -> bool,
        open: impl FnOnce(),
    ) -> FastOpen {
        let mut st = self.lock_state();
        let Some(mpi) = st.portals.get_mut(pt.0).and_then(|p| p.mpi.as_deref_mut()) else {
            return FastOpen::Closed;
        };
        let mut matched = false;
        // An empty queue (the latency path's case) is not searched.
        let taken = if mpi.unexpected_len() > 0 {
            mpi.take_header_if(spec, |u| {
                matched = true;
                u.pending.is_none() && takes(u.initiator, u.hdr_data)
            })
        } else {
            None
        };
        if let Some(u) = taken {
            return FastOpen::Took(copy_into(buf, &u));
        }
        if matched || !mpi.nothing_posted() {
            return FastOpen::Closed;
        }
        open();
        FastOpen::Open(st.queued_unexpected.load(Ordering::Relaxed))
    }

    /// The first step of a blocking receive with `spec` on MPI portal `pt` into `buf` when
    /// messages may be queued: under the state lock only, unless `others_open()` (another
    /// thread's fast receive, which is older), the oldest queued message it matches is taken
    /// and copied as by [`Ni::fast_receive_open`] if it is all in and `takes` its sender and
    /// header data (as there).
    /// The caller's other receives need not be held off: this takes only what a receive
    /// posted now would take, and receives of other threads that race with it have no order.
    #[inline]
    pub(crate) fn take_queued(
        &self,
        pt: PtIndex,
        spec: &ReceiveSpec,
        buf: &mut [u8],
        takes: impl FnOnce(Rank, u64) -> bool,
        others_open: impl FnOnce() -> bool,
    ) -> Queued {
        let mut st = self.lock_state();
        let queued = st.queued_unexpected.load(Ordering::Relaxed);
        let Some(mpi) = st.portals.get_mut(pt.0).and_then(|p| p.mpi.as_deref_mut()) else {
            return Queued::Other;
        };
        if mpi.unexpected_len() == 0 {
            return Queued::Empty(queued);
        }
        if others_open() {
            return Queued::Other;
        }
        let taken = mpi.take_header_if(spec, |u| {
            u.pending.is_none() && takes(u.initiator, u.hdr_data)
        });
        match taken {
            Some(u) => Queued::Took(copy_into(buf, &u)),
            None => Queued::Other,
        }
    }

    /// Runs `f` under the state lock, which serialises it with fast-receive passes.
    pub(crate) fn serialized<R>(&self, f: impl FnOnce() -> R) -> R {
        let _st = self.lock_state();
        f()
    }

    /// One pass of the blocking receive's fast path, which acts as the receive posted alone on
    /// MPI portal `pt` with `spec` from `source` (`None`: any) without posting it: under the
    /// state lock, while `still_open()`, polls up to 16 fabric events; an inline put to `pt`
    /// that `spec` matches (`bits`: `spec.match_bits()`, computed once by the caller; `source`:
    /// `spec`'s source) is offered to `take` (its sender and the put read in place) straight from the
    /// transport's buffer, and one it accepts ends the pass; anything else is the agent's.
    /// Before each event, headers queued meanwhile (counted by `seen`) are compared with `spec`,
    /// so that a queued match is taken first. `close()` runs under the lock when the pass
    /// ends the receive (taken, or its sender failed).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn fast_receive_pass<T>(
        &self,
        pt: PtIndex,
        spec: &ReceiveSpec,
        bits: (u64, u64),
        source: Option<Rank>,
        seen: &mut u64,
        still_open: impl Fn() -> bool,
        close: impl Fn(),
        taken: &mut Option<T>,
        mut take: impl FnMut(Rank, &QuietPut<'_>) -> Option<T>,
    ) -> FastPass {
        let mut st = self.lock_state();
        if !still_open() {
            return FastPass::Claimed;
        }
        let mut polled_any = false;
        let mut queued_match = false;
        let (match_bits, ignore_bits) = bits;
        for _ in 0..16 {
            let queued = st.queued_unexpected.load(Ordering::Relaxed);
            if queued != *seen {
                *seen = queued;
                let probe = st.portals.get_mut(pt.0).and_then(|p| p.mpi.as_deref_mut());
                if probe.is_some_and(|m| m.probe(spec).is_some()) {
                    queued_match = true;
                    break;
                }
            }
            let mut accept = |src: Rank, data: &[u8]| {
                let q = peek_quiet_put(data)?;
                // The engine's rule in its Portals form (`ReceiveSpec::match_bits`), computed
                // once per pass: a few instructions on the latency path.
                let mine =
                    (q.bits ^ match_bits) & !ignore_bits == 0 && source.is_none_or(|s| s == src);
                if q.pt != pt || !mine {
                    return None;
                }
                take(src, &q)
            };
            let mut other = false;
            let polled = poll_one(&mut st, taken, &mut accept, &mut other);
            polled_any |= other;
            match polled {
                Polled::Nothing | Polled::Taken => break,
                Polled::Other => {}
            }
        }
        if polled_any {
            // The counts the handled events changed may release triggered operations (a
            // rendezvous's next get), also when a message is taken right after them.
            if let Err(e) = st.fire_ready() {
                tracing::error!("offload agent: firing triggered operations failed: {e}");
            }
        }
        let outcome = if taken.is_some() {
            FastPass::Taken
        } else if queued_match {
            FastPass::QueuedMatch
        } else if let Some(dead) = sender_gone(&st, source) {
            FastPass::SenderGone(dead)
        } else {
            FastPass::Nothing(polled_any)
        };
        if matches!(outcome, FastPass::Taken | FastPass::SenderGone(_)) {
            close();
        }
        drop(st);
        if polled_any {
            // Host threads asleep on the agent's notifications (thread mode).
            self.notify_changed();
        }
        outcome
    }
}

/// What polling one fabric event gave.
enum Polled {
    Nothing,
    /// Handled by the agent (not the caller's).
    Other,
    /// The caller's: what taking it gave is in the caller's slot.
    Taken,
}

/// Polls one fabric event: a message `take` accepts (it returns `Some`) is the caller's, taken
/// straight from the transport's buffer, and what taking it gave is left in `taken` (a slot
/// of the caller's, not a return value: the result is large and this is the latency path);
/// anything else is handed to the agent, in place too, and sets `other`.
///
/// A fabric may hand over several events in one poll (tcp lends every message it read).
/// Only the first message `take` accepts is the caller's, and none once the agent queued an
/// unexpected header in this poll: that may be a message the receive matches but does not
/// take here, which a later one must not overtake; the caller's next look at the queue finds
/// it. (Other events, such as credit returns, leave later messages to `take`.)
fn poll_one<T>(
    st: &mut State,
    taken: &mut Option<T>,
    take: &mut impl FnMut(Rank, &[u8]) -> Option<T>,
    other: &mut bool,
) -> Polled {
    let mut queued = false;
    let polled = st.poll_fabric(&mut |st, ev| {
        if let (EventRef::Message { src, data }, None, false) = (&ev, &taken, queued) {
            if let Some(t) = take(*src, data) {
                *taken = Some(t);
                return;
            }
        }
        *other = true;
        let before = st.queued_unexpected.load(Ordering::Relaxed);
        crate::agent::handle_ref(st, ev);
        queued |= st.queued_unexpected.load(Ordering::Relaxed) != before;
    });
    match polled {
        Ok(false) => Polled::Nothing,
        Err(e) => {
            log_poll_failure(&e);
            Polled::Nothing
        }
        Ok(true) if taken.is_some() => Polled::Taken,
        Ok(true) => Polled::Other,
    }
}

/// Logs a failed poll of the fabric (out of line: the logging macro's call-site code would
/// otherwise sit in every poll's frame).
#[cold]
#[inline(never)]
fn log_poll_failure(e: &rdcoll_transport::TransportError) {
    tracing::error!("offload agent: polling the fabric failed: {e}");
}

/// The failed sender a receive from `source` (`None`: any) would wait for forever, once the
/// agent has handled its failure (so its last messages are in).
fn sender_gone(st: &State, source: Option<Rank>) -> Option<Rank> {
    let fabric = &st.fabric;
    let handled = |r: Rank| st.failed_peers.get(r as usize).copied().unwrap_or(false);
    match source {
        Some(s) => (fabric.is_failed(s) && handled(s)).then_some(s),
        None => {
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

/// Copies the data of the taken header `u` into a blocking receive's `buf` (as much as fits):
/// what a direct receive would be told of it.
fn copy_into(buf: &mut [u8], u: &crate::portal::Unexpected) -> DirectDone {
    let d = DirectRecv {
        user_ptr: 0,
        addr: buf.as_mut_ptr() as usize,
        capacity: buf.len(),
    };
    crate::target::copy_out(d, u, crate::NiFail::Ok)
}

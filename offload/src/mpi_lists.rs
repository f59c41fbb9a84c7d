//! The MPI-shaped match lists of a portal table entry, kept by the matching engine
//! (`rdcoll-matching`): the priority list's posted receives and the unexpected headers that
//! arrivals on the overflow list leave (SEMANTICS.md §12).
//!
//! A portal allocated with [`crate::Ni::pt_alloc_mpi`] matches like a Portals portal whose
//! priority entries all have MPI shapes: match bits `context | tag | nonce` in the layout of
//! `rdcoll_matching::envelope`, ignore bits covering the nonce (and the tag, or some of its
//! bits), a source or any source, use-once. Every match, in both directions, is one O(1)
//! operation of the engine instead of a walk of a list, and the engine's post order is the
//! append order. Two kinds of receive share that order:
//! - entries ([`Posted::Entry`]): Portals match list entries, with events and counters;
//! - direct receives ([`Posted::Direct`]): a buffer and a request id, no entry, region or
//!   event: an inline put that matches one is copied straight into the buffer and reported as
//!   a [`DirectDone`] (the NI's fast path for MPI messages).
//!
//! The overflow list stays an ordinary [`MatchList`] (bounce buffers).

use rdcoll_matching::envelope::NONCE_MASK;
use rdcoll_matching::UnexpectedHandle;
use rdcoll_matching::{Envelope, Matcher, PostOutcome, ReceiveHandle, ReceiveSpec, Source};
use rdcoll_transport::Rank;
use rustc_hash::FxHashMap as HashMap;

use crate::me::Me;
use crate::portal::Unexpected;
use crate::types::{MatchId, NiFail};

/// A receive posted on an MPI portal.
pub(crate) enum Posted {
    /// A match list entry appended to the priority list, with its sequence number (boxed, so
    /// that the matching engine moves direct receives, the message path's case, as 32 bytes
    /// rather than an entry's size).
    Entry { seq: u64, me: Box<Me> },
    /// A direct receive.
    Direct(DirectRecv),
}
const _: () = assert!(std::mem::size_of::<Posted>() <= 32);

/// A direct receive: where an inline put that matches it is copied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirectRecv {
    pub(crate) user_ptr: u64,
    /// The buffer (a plain number so the NI stays `Send`), lent by `Ni::post_direct`'s caller.
    pub(crate) addr: usize,
    pub(crate) capacity: usize,
}

impl DirectRecv {
    /// Copies `data` (as much as fits) into the receive's buffer; the bytes copied.
    pub(crate) fn deposit(&self, data: &[u8]) -> usize {
        let n = data.len().min(self.capacity);
        if n > 0 {
            // `Ni::post_direct`'s caller lent `addr..addr + capacity` to this receive,
            // valid and untouched by anything else until it completes, which this deposit
            // does; `n <= capacity`.
            // SAFETY: as just said.
            let out = unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, n) };
            rdcoll_transport::copy_bytes(out, &data[..n]);
        }
        n
    }
}

/// A direct receive that matched: its message is in its buffer (as much as fits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectDone {
    /// The receive's request id, as given to `Ni::post_direct`.
    pub user_ptr: u64,
    /// The sender.
    pub initiator: Rank,
    /// The message's match bits.
    pub match_bits: u64,
    /// The message's header data.
    pub hdr_data: u64,
    /// Bytes the message brought (the put's length).
    pub rlength: u64,
    /// Bytes copied into the buffer.
    pub mlength: u64,
    /// `Ok`, or why the data could not be delivered.
    pub fail: NiFail,
    /// The key of the region of the initiator's that the message published (the rest of a
    /// rendezvous message, for gets that name it: `GetArgs::published`).
    pub published: Option<u64>,
}

/// Names a direct receive that is still posted, for `Ni::cancel_direct`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DirectHandle(pub(crate) ReceiveHandle);

/// The receive spec of an entry or receive with these bits, if it has an MPI shape.
pub(crate) fn spec_of(match_bits: u64, ignore_bits: u64, from: MatchId) -> Option<ReceiveSpec> {
    if ignore_bits & NONCE_MASK != NONCE_MASK {
        return None; // an entry that matches on the nonce (a rendezvous get entry)
    }
    let source = match from {
        MatchId::Any => Source::Any,
        MatchId::Rank(r) => Source::Rank(r),
    };
    ReceiveSpec::from_match_bits(match_bits, ignore_bits, source).ok()
}

/// The envelope of a message from `initiator` with `bits`.
pub(crate) fn envelope_of(initiator: Rank, bits: u64) -> Envelope {
    Envelope::from_match_bits(bits, initiator)
}

/// Posted receives and unexpected headers of one MPI portal.
#[derive(Default)]
pub(crate) struct MpiLists {
    matcher: Matcher<Posted, Unexpected>,
    /// Linked entries by sequence number, for unlinking.
    entries: HashMap<u64, ReceiveHandle>,
    /// Header-data bits that mark a sender waiting for its message (`track_waiting`; 0: none).
    waits_bits: u64,
    /// Queued headers with `waits_bits`, by sender.
    waiting: HashMap<Rank, usize>,
    /// Their number, for readers without the state lock.
    waiting_total: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// What posting a receive (entry or direct) found.
pub(crate) enum PostedAs {
    /// Linked behind every earlier receive.
    Linked(ReceiveHandle),
    /// It took the oldest unexpected header it matches (and was not linked).
    Took(Unexpected),
}

impl MpiLists {
    /// Posts a receive with `spec`.
    pub(crate) fn post(&mut self, spec: ReceiveSpec, posted: Posted) -> PostedAs {
        let seq = match &posted {
            Posted::Entry { seq, .. } => Some(*seq),
            Posted::Direct(_) => None,
        };
        match self.matcher.post(spec, posted) {
            PostOutcome::Matched { message, .. } => {
                self.left(&message);
                PostedAs::Took(message)
            }
            PostOutcome::Posted(handle) => {
                if let Some(seq) = seq {
                    self.entries.insert(seq, handle);
                }
                PostedAs::Linked(handle)
            }
        }
    }

    /// Takes the oldest posted receive a message from `initiator` with `bits` matches.
    pub(crate) fn take_posted(&mut self, initiator: Rank, bits: u64) -> Option<Posted> {
        let taken = self.matcher.take_posted(&envelope_of(initiator, bits))?;
        if let Posted::Entry { seq, .. } = &taken {
            self.entries.remove(seq);
        }
        Some(taken)
    }

    /// Unlinks the entry `seq`; `None` if it is not linked (it matched, or never was).
    pub(crate) fn unlink_entry(&mut self, seq: u64) -> Option<Me> {
        let handle = self.entries.remove(&seq)?;
        match self.matcher.cancel(handle).ok()? {
            Posted::Entry { me, .. } => Some(*me),
            Posted::Direct(_) => None,
        }
    }

    /// Withdraws a direct receive; `None` if it matched already.
    pub(crate) fn cancel_direct(&mut self, handle: DirectHandle) -> Option<DirectRecv> {
        match self.matcher.cancel(handle.0).ok()? {
            Posted::Direct(d) => Some(d),
            // Only `post_direct` makes a `DirectHandle`; entries' handles stay in `entries`.
            Posted::Entry { .. } => unreachable!("a direct handle named an entry"),
        }
    }

    /// Whether nothing is posted.
    pub(crate) fn nothing_posted(&self) -> bool {
        self.matcher.posted_len() == 0
    }

    /// Whether exactly one receive is posted.
    pub(crate) fn one_posted(&self) -> bool {
        self.matcher.posted_len() == 1
    }

    /// Queues an unexpected header behind every earlier one.
    pub(crate) fn queue_header(&mut self, u: Unexpected) -> UnexpectedHandle {
        let envelope = envelope_of(u.initiator, u.match_bits);
        if u.hdr_data & self.waits_bits != 0 {
            *self.waiting.entry(u.initiator).or_default() += 1;
            self.waiting_total
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.matcher.queue_unexpected(envelope, u)
    }

    /// Counts queued headers whose header data has any of `bits`, per sender; their total
    /// is kept in the returned counter.
    pub(crate) fn track_waiting(
        &mut self,
        bits: u64,
    ) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
        self.waits_bits = bits;
        self.waiting_total.clone()
    }

    /// Marks the queued header from `initiator` with match bits `bits` (nonce included) with
    /// the tracked bits (`track_waiting`), as if it had come with them: its sender now waits
    /// for it. `false` if it is not queued (taken already) or no bits are tracked.
    pub(crate) fn mark_waiting(&mut self, initiator: Rank, bits: u64) -> bool {
        let waits_bits = self.waits_bits;
        let envelope = envelope_of(initiator, bits);
        let Some(u) = self.matcher.unexpected_exact_mut(&envelope) else {
            return false;
        };
        if waits_bits == 0 || u.hdr_data & waits_bits != 0 {
            return waits_bits != 0;
        }
        u.hdr_data |= waits_bits;
        *self.waiting.entry(initiator).or_default() += 1;
        self.waiting_total
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        true
    }

    /// Whether a queued header from `sender` has the tracked bits.
    pub(crate) fn waiting_from(&self, sender: Rank) -> bool {
        self.waiting.contains_key(&sender)
    }

    /// Books a header that left the queue.
    #[inline]
    fn left(&mut self, u: &Unexpected) {
        self.left_by(u.hdr_data, u.initiator);
    }

    #[inline]
    fn left_by(&mut self, hdr_data: u64, initiator: Rank) {
        if hdr_data & self.waits_bits == 0 {
            return;
        }
        if let Some(n) = self.waiting.get_mut(&initiator) {
            self.waiting_total
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            *n -= 1;
            if *n == 0 {
                self.waiting.remove(&initiator);
            }
        }
    }

    pub(crate) fn header_mut(&mut self, h: UnexpectedHandle) -> Option<&mut Unexpected> {
        self.matcher.unexpected_mut(h)
    }

    pub(crate) fn withdraw_header(&mut self, h: UnexpectedHandle) {
        if let Some(u) = self.matcher.unexpected_mut(h) {
            let (hdr_data, initiator) = (u.hdr_data, u.initiator);
            self.left_by(hdr_data, initiator);
        }
        self.matcher.withdraw_unexpected(h);
    }

    pub(crate) fn unexpected_len(&self) -> usize {
        self.matcher.unexpected_len()
    }

    /// The oldest unexpected header `spec` matches, left in place.
    pub(crate) fn probe(&mut self, spec: &ReceiveSpec) -> Option<&Unexpected> {
        self.matcher.probe(spec).map(|(_, u)| u)
    }

    /// Takes the oldest unexpected header `spec` matches if `accept` takes it (else it stays).
    pub(crate) fn take_header_if(
        &mut self,
        spec: &ReceiveSpec,
        accept: impl FnOnce(&Unexpected) -> bool,
    ) -> Option<Unexpected> {
        let taken = self
            .matcher
            .matched_probe_if(spec, |_, u| accept(u))
            .map(|(_, u)| u);
        if let Some(u) = &taken {
            self.left(u);
        }
        taken
    }

    /// Takes the oldest unexpected header `spec` matches.
    pub(crate) fn take_header(&mut self, spec: &ReceiveSpec) -> Option<Unexpected> {
        let taken = self.matcher.matched_probe(spec).map(|(_, u)| u);
        if let Some(u) = &taken {
            self.left(u);
        }
        taken
    }
}

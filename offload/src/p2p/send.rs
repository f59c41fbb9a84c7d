//! Sends: eager puts, and the sender's half of the rendezvous (a get entry over the buffer,
//! a counter of gets served, and the first chunk with the header).

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use rdcoll_transport::{Rank, Region, TransportError};

use super::bits::{self, Header};
use super::{Context, Engine, Req, ReqId, Source, Status, EAGER};
use crate::error::{invalid, OffloadError, Result};
use crate::types::{
    AckReq, CtHandle, List, MatchId, MeCounting, MeHandle, MeOptions, MeSpec, PutArgs,
};

/// The nonces in use by rendezvous sends in flight, per peer and envelope: a nonce only has
/// to tell apart messages whose envelopes (context, tag) are identical, so each envelope toward
/// each peer has 65535 of its own. Nonce 0 is never handed out (left for a future in-order
/// fallback). When all are in use the send fails with `NoSpace` rather than wait for the
/// receiver (a nonblocking send must not).
#[derive(Default)]
pub(super) struct Nonces {
    in_use: HashMap<(Rank, u64), (u16, HashSet<u16>)>,
    /// Rendezvous sends in flight per destination (nonces taken and not given back).
    to_rank: HashMap<Rank, usize>,
}

impl Nonces {
    /// A free nonce for a message to `dest` with match bits `bits` (nonce field 0).
    fn take(&mut self, dest: Rank, bits: u64) -> Option<u16> {
        let (next, used) = self.in_use.entry((dest, bits)).or_default();
        if used.len() >= u16::MAX as usize {
            return None;
        }
        loop {
            *next = next.wrapping_add(1).max(1);
            if used.insert(*next) {
                *self.to_rank.entry(dest).or_default() += 1;
                return Some(*next);
            }
        }
    }

    /// Whether a rendezvous send to `dest` is in flight: `dest` then reads from this rank.
    pub(super) fn sending_to(&self, dest: Rank) -> bool {
        self.to_rank.contains_key(&dest)
    }

    fn give_back(&mut self, dest: Rank, bits: u64, nonce: u16) {
        if let Some((_, used)) = self.in_use.get_mut(&(dest, bits)) {
            if used.remove(&nonce) {
                if let Some(n) = self.to_rank.get_mut(&dest) {
                    *n -= 1;
                    if *n == 0 {
                        self.to_rank.remove(&dest);
                    }
                }
            }
            if used.is_empty() {
                self.in_use.remove(&(dest, bits));
            }
        }
    }
}

/// Registrations of send buffers, shared by the rendezvous sends in flight from the same bytes
/// (a buffer sent to many peers, or many times, is registered once), and dropped with the last.
#[derive(Default)]
pub(super) struct Registrations {
    live: HashMap<(usize, usize), (Region, usize)>,
}

impl Registrations {
    /// The registration of `data` (at `ptr`), new or shared.
    ///
    /// # Safety
    /// As for `Fabric::register_memory`: the bytes stay valid and unmodified while registered
    /// (every send that took this registration is still in flight).
    unsafe fn take(&mut self, engine: &Engine, ptr: *const u8, len: usize) -> Result<Region> {
        if let Some((region, users)) = self.live.get_mut(&(ptr as usize, len)) {
            *users += 1;
            return Ok(region.clone());
        }
        // SAFETY: passed on from the caller; peers only read it (through a get-only entry).
        let region = unsafe { engine.ni.fabric().register_memory(ptr as *mut u8, len)? };
        self.live.insert((ptr as usize, len), (region.clone(), 1));
        Ok(region)
    }

    /// One send of the registration of `ptr..ptr + len` has ended.
    fn give_back(&mut self, ptr: usize, len: usize) {
        if let Some((_, users)) = self.live.get_mut(&(ptr, len)) {
            *users -= 1;
            if *users == 0 {
                self.live.remove(&(ptr, len));
            }
        }
    }
}

/// What sends in flight hold: nonces and buffer registrations.
#[derive(Default)]
pub(super) struct SendBooks {
    pub(super) nonces: Nonces,
    registrations: Registrations,
}

/// Bytes of a rendezvous message that travel with its header. Smaller than the eager limit: on
/// shm a 1 KiB first chunk made 16 KiB - 256 KiB messages 1-2 µs faster than an 8 KiB one
/// (the rest is fetched by gets either way).
pub const RNDV_FIRST_CHUNK: usize = 1024;

/// How a rendezvous send announces itself.
#[derive(Debug, Clone, Copy)]
pub(super) struct Announce {
    /// Bytes that travel with the header.
    first: usize,
    /// The header says that the sender waits for the receive (`bits::SENDER_WAITS`).
    sender_waits: bool,
    /// A short message that found no eager credit.
    uncredited: bool,
}

impl Announce {
    /// A short message that found no eager credit: only the header travels.
    const UNCREDITED: Announce = Announce {
        first: 0,
        sender_waits: false,
        uncredited: true,
    };
}

/// A rendezvous send waiting for its receiver's gets.
pub(super) struct Rendezvous {
    dest: Rank,
    /// Its match bits with the nonce field 0 (the nonce's key).
    envelope: u64,
    nonce: u16,
    me: MeHandle,
    ct: CtHandle,
    gets: u64,
    /// What the send reports when done.
    status: Status,
    /// The buffer's registration (`SendBooks::registrations`), until the last get is served.
    _region: Region,
    buffer: (usize, usize),
    /// The match bits to name in a notice that its sender now waits for it
    /// (`Engine::notice_sender_waits`): a short `isend` that found no eager credit, until
    /// the notice is sent.
    notice: Option<u64>,
}

impl Rendezvous {
    /// Its receiver and the match bits for the notice that its sender now waits, once.
    pub(super) fn take_notice(&mut self) -> Option<(Rank, u64)> {
        self.notice.take().map(|bits| (self.dest, bits))
    }
}

/// Shortest nonblocking send that goes by rendezvous rather than eagerly while earlier
/// messages to its destination wait in this rank's own queue for room in the channel
/// (`Fabric::backlogged`, where `Fabric::rendezvous_past_backlog`: shm): the receive then
/// copies it once, from the sender's buffer, instead of the queue taking a copy and the
/// channel another. Below it the copies cost less than a rendezvous's round trip.
pub(super) const BACKLOG_RENDEZVOUS_MIN: usize = 16 << 10;

/// Whether `e` says a rendezvous found its resources spent (nonces for its envelope, memory
/// registrations), so that a short send may go eagerly instead.
pub(super) fn is_exhaustion(e: &OffloadError) -> bool {
    matches!(
        e,
        OffloadError::NoSpace { .. }
            | OffloadError::Transport(TransportError::OutOfResources { .. })
    )
}

impl Engine {
    /// Starts sending `len` bytes at `ptr` to `dest` with `tag` in `context`.
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay valid and unmodified until the request has completed
    /// (`test` or `wait` returned its result): receivers read it in place.
    pub unsafe fn isend(
        &self,
        ptr: *const u8,
        len: usize,
        dest: Rank,
        tag: u32,
        context: Context,
    ) -> Result<ReqId> {
        // SAFETY: passed on from the caller.
        unsafe { self.isend_as(ptr, len, dest, tag, context, None) }
    }

    /// [`isend`](Engine::isend), by rendezvous as `announce` says if given (else eagerly when
    /// the message is short and credit allows, by rendezvous otherwise).
    ///
    /// # Safety
    /// As for [`Engine::isend`].
    pub(super) unsafe fn isend_as(
        &self,
        ptr: *const u8,
        len: usize,
        dest: Rank,
        tag: u32,
        context: Context,
        announce: Option<Announce>,
    ) -> Result<ReqId> {
        if dest == super::PROC_NULL {
            let mut inner = self.inner.lock();
            let status = self.sent_status(tag, 0);
            let id = inner.reqs.insert(Req::Done(Ok(status)));
            return Ok(ReqId(id));
        }
        self.check_rank(dest, "destination")?;
        if len as u64 > bits::MAX_LEN {
            return Err(invalid(format!("a {len}-byte message is too long")));
        }
        let fabric = self.ni.fabric();
        if fabric.is_failed(dest) {
            return Err(TransportError::PeerFailed(dest).into());
        }
        // The agent stands aside while the host posts (its eager put takes no state lock).
        self.ni.note_host_posting();
        let mut inner = self.inner.lock();
        self.take_delivery_failure(&mut inner)?;
        // SAFETY: the caller keeps the buffer valid and unmodified while the request is in
        // flight; eager sends copy it before returning.
        let data = unsafe { slice_or_empty(ptr, len) };
        let announce = match announce {
            Some(a) => a,
            None if len > self.cfg.eager_limit => self.announce_rendezvous(),
            // Credit returns may wait unread in the engine's events: taken before giving up.
            None if self.credits.take(dest, len)
                || (self.progress_locked(&mut inner).is_ok() && self.credits.take(dest, len)) =>
            {
                let bits = bits::message_bits(context, tag, 0);
                self.put_first(dest, bits, Header::eager(len), data)?;
                let id = inner.reqs.insert(Req::Done(Ok(self.sent_status(tag, len))));
                return Ok(ReqId(id));
            }
            // No eager credit: the data waits here until the receive pulls it.
            None => Announce::UNCREDITED,
        };
        let envelope = bits::message_bits(context, tag, 0);
        let Some(nonce) = inner.books.nonces.take(dest, envelope) else {
            return Err(OffloadError::NoSpace {
                what: "rendezvous send with this envelope in flight to this rank (their nonces)",
                limit: u16::MAX as usize,
            });
        };
        let books = &mut inner.books;
        // SAFETY: passed on from the caller.
        let started =
            unsafe { self.start_rendezvous(books, dest, tag, context, nonce, ptr, data, announce) };
        match started {
            Ok(r) => Ok(ReqId(inner.reqs.insert(Req::Send(r)))),
            Err(e) => {
                inner.books.nonces.give_back(dest, envelope, nonce);
                Err(e)
            }
        }
    }

    /// The status of a send of `len` bytes with `tag` from this rank.
    pub(super) fn sent_status(&self, tag: u32, len: usize) -> Status {
        Status {
            source: self.rank(),
            tag,
            len,
            cancelled: false,
        }
    }

    /// Sends a message of at most the eager limit; complete on return.
    #[inline]
    pub(super) fn send_eager(
        &self,
        data: &[u8],
        dest: Rank,
        tag: u32,
        context: Context,
    ) -> Result<()> {
        if self.ni.fabric().backlogged(dest) {
            self.wait_for_room(dest)?;
        }
        if self.send_credited(data, dest, tag, context)? {
            return Ok(());
        }
        self.send_uncredited(data, dest, tag, context)
    }

    /// A blocking send to `dest`, whose channel is full and holds earlier messages in this
    /// rank's own queue (`Fabric::backlogged`): makes progress (which moves them on as `dest`
    /// makes room, and takes what arrives meanwhile, so two ranks that send to each other
    /// both go on) until they have gone. The message is then copied once, into the channel,
    /// rather than into the queue too. `PeerFailed` if `dest` fails meanwhile.
    #[cold]
    #[inline(never)]
    fn wait_for_room(&self, dest: Rank) -> Result<()> {
        let fabric = self.ni.fabric();
        let mut backoff = super::Backoff::default();
        while fabric.backlogged(dest) {
            if fabric.is_failed(dest) {
                return Err(TransportError::PeerFailed(dest).into());
            }
            self.progress()?;
            if !fabric.backlogged(dest) {
                break;
            }
            self.idle(&mut backoff);
        }
        Ok(())
    }

    /// Sends a message of at most the eager limit eagerly if `dest` has credit for it (see
    /// `credits`); `false` (nothing sent) if not.
    #[inline]
    pub(super) fn send_credited(
        &self,
        data: &[u8],
        dest: Rank,
        tag: u32,
        context: Context,
    ) -> Result<bool> {
        self.check_rank(dest, "destination")?;
        if self.ni.fabric().is_failed(dest) {
            return Err(TransportError::PeerFailed(dest).into());
        }
        if self
            .delivery_failed
            .load(std::sync::atomic::Ordering::Acquire)
        {
            self.take_delivery_failure(&mut self.inner.lock())?;
        }
        if !self.credits.take(dest, data.len()) {
            return Ok(false);
        }
        // The agent stands aside while the host sends (`Ni::note_host_posting`).
        self.ni.note_host_posting();
        let bits = bits::message_bits(context, tag, 0);
        self.put_first(dest, bits, Header::eager(data.len()), data)?;
        Ok(true)
    }

    /// A short send that found no eager credit (its receiver has not caught up). The returns
    /// that would give it some may have arrived and wait, unread, in the engine's events (a
    /// rank that only sends and receives by the blocking fast paths takes them nowhere else):
    /// they are taken first, and the message goes eagerly if they sufficed. Otherwise by
    /// rendezvous with nothing in the header, waited for, and marked as waited for so that a
    /// receiver blocked on a later message of this rank can tell (`Engine::wait`).
    #[cold]
    #[inline(never)]
    fn send_uncredited(&self, data: &[u8], dest: Rank, tag: u32, context: Context) -> Result<()> {
        self.progress()?;
        if self.send_credited(data, dest, tag, context)? {
            return Ok(());
        }
        let announce = Announce {
            sender_waits: !data.is_empty(),
            ..Announce::UNCREDITED
        };
        // SAFETY: `data` is borrowed for the whole call and the request completes before it
        // returns (`wait` returns only once the request is no longer the engine's).
        let id = unsafe {
            self.isend_as(
                data.as_ptr(),
                data.len(),
                dest,
                tag,
                context,
                Some(announce),
            )?
        };
        self.wait(id).map(drop)
    }

    /// Whether a nonblocking send of `len` bytes to `dest` goes by rendezvous rather than
    /// eagerly because the channel is backed up (see [`BACKLOG_RENDEZVOUS_MIN`]): only one
    /// that would otherwise go eagerly with credit (one without credit takes the no-credit
    /// rendezvous, whose notice and bounds `credits` describes).
    pub(super) fn diverts_from_backlog(&self, len: usize, dest: Rank) -> bool {
        let fabric = self.ni.fabric();
        (BACKLOG_RENDEZVOUS_MIN..=self.cfg.eager_limit).contains(&len)
            && fabric.rendezvous_past_backlog()
            && fabric.backlogged(dest)
            && self.credits.has(dest, len)
    }

    /// How an ordinary rendezvous announces itself.
    pub(super) fn announce_rendezvous(&self) -> Announce {
        Announce {
            first: self.cfg.eager_limit.min(RNDV_FIRST_CHUNK),
            sender_waits: false,
            uncredited: false,
        }
    }

    /// # Safety
    /// As for [`Engine::isend`] (`data` is the buffer at `ptr`).
    #[allow(clippy::too_many_arguments)]
    unsafe fn start_rendezvous(
        &self,
        books: &mut SendBooks,
        dest: Rank,
        tag: u32,
        context: Context,
        nonce: u16,
        ptr: *const u8,
        data: &[u8],
        announce: Announce,
    ) -> Result<Rendezvous> {
        // SAFETY: the caller of `isend` keeps the buffer valid and unmodified until the send
        // completes, and the region is only exposed through a get-only entry (peers read it).
        let region = unsafe { books.registrations.take(self, ptr, data.len())? };
        let buffer = (ptr as usize, data.len());
        let started = self.expose_and_announce(&region, dest, tag, context, nonce, data, announce);
        match started {
            Ok((me, ct, gets)) => Ok(Rendezvous {
                dest,
                envelope: bits::message_bits(context, tag, 0),
                nonce,
                me,
                ct,
                gets,
                status: Status {
                    source: self.rank(),
                    tag,
                    len: data.len(),
                    cancelled: false,
                },
                _region: region,
                buffer,
                notice: (announce.uncredited && !announce.sender_waits && !data.is_empty())
                    .then(|| bits::message_bits(context, tag, nonce)),
            }),
            Err(e) => {
                drop(region);
                books.registrations.give_back(buffer.0, buffer.1);
                Err(e)
            }
        }
    }

    /// Appends the get entry over `region` and puts the first chunk with the header; the
    /// entry, its counter, and how many gets the receiver will make.
    #[allow(clippy::too_many_arguments)]
    fn expose_and_announce(
        &self,
        region: &Region,
        dest: Rank,
        tag: u32,
        context: Context,
        nonce: u16,
        data: &[u8],
        announce: Announce,
    ) -> Result<(MeHandle, CtHandle, u64)> {
        let ct = self.ni.ct_alloc()?;
        let bits = bits::message_bits(context, tag, nonce);
        let first = announce.first.min(data.len());
        let chunk = self.rndv_chunk();
        let spec = MeSpec {
            region: region.clone(),
            match_bits: bits,
            ignore_bits: 0,
            match_id: MatchId::Rank(dest),
            options: MeOptions {
                op_put: false,
                op_get: true,
                counting: MeCounting {
                    ct: Some(ct),
                    comm: true,
                    ..MeCounting::default()
                },
                ..MeOptions::default()
            },
            user_ptr: 0,
        };
        let me = match self.ni.me_append(self.pt_rndv, List::Priority, spec) {
            Ok(me) => me,
            Err(e) => {
                let _ = self.ni.ct_free(ct);
                return Err(e);
            }
        };
        let header = if announce.sender_waits {
            Header::rendezvous_waited(data.len(), chunk)
        } else {
            Header::rendezvous(data.len(), chunk)
        };
        // The buffer's region published with the header: the receiver's gets read it directly.
        let a = self.first_put(dest, bits, header, first);
        if let Err(e) = self.ni.put_inline_published(a, &data[..first], region) {
            let _ = self.ni.me_unlink(me);
            let _ = self.ni.ct_free(ct);
            return Err(e);
        }
        Ok((me, ct, bits::gets_for(data.len(), first, chunk)))
    }

    /// Puts `data` (at most the eager limit) with its header to `dest`'s message portal.
    #[inline]
    fn put_first(&self, dest: Rank, bits: u64, hdr_data: u64, data: &[u8]) -> Result<()> {
        let a = self.first_put(dest, bits, hdr_data, data.len());
        // The eager descriptor raises no SEND event and counts nothing (see `Engine::new`).
        self.ni.put_inline_unsignalled(a, data)
    }

    /// The put of a message's first `len` bytes with its header to `dest`'s message portal.
    #[inline]
    fn first_put(&self, dest: Rank, bits: u64, hdr_data: u64, len: usize) -> PutArgs {
        PutArgs {
            md: self.eager_md,
            local_offset: 0,
            len,
            ack_req: AckReq::None,
            target: dest,
            pt: self.pt_msg,
            match_bits: bits,
            remote_offset: 0,
            user_ptr: EAGER,
            hdr_data,
        }
    }
}

/// The result of a rendezvous send once its receiver has fetched everything (or failed).
pub(super) fn check(
    engine: &Engine,
    books: &mut SendBooks,
    s: &mut Rendezvous,
) -> Option<Result<Status>> {
    let value = match engine.ni.ct_get(s.ct) {
        Ok(v) => v,
        Err(e) => return Some(Err(e)),
    };
    // Everything fetched is success, whatever the receiver did afterwards. A receiver that
    // has gone fails the send only once the agent has taken in what it sent before (the
    // notices of its last fetches), as for a receive (`recv::peer_gone`).
    let fetched = value.success >= s.gets && value.failure == 0;
    let failed = !fetched
        && (value.failure > 0 || super::recv::peer_gone(engine, Source::Rank(s.dest)).is_some());
    if !fetched && !failed {
        return None;
    }
    let _ = engine.ni.me_unlink(s.me);
    let _ = engine.ni.ct_free(s.ct);
    books.nonces.give_back(s.dest, s.envelope, s.nonce);
    books.registrations.give_back(s.buffer.0, s.buffer.1);
    if failed {
        return Some(Err(OffloadError::Transport(TransportError::PeerFailed(
            s.dest,
        ))));
    }
    Some(Ok(s.status))
}

/// Views `len` bytes at `ptr` (any pointer when `len` is 0).
///
/// # Safety
/// With `len > 0`, `ptr..ptr + len` must be valid for reads for the returned lifetime.
pub(super) unsafe fn slice_or_empty<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: the caller guarantees the range is valid.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

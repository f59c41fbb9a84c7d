//! Receives: a direct receive over the user's buffer on the message portal (the NI copies
//! a matching eager message or first chunk into it, see `Ni::post_direct`), the match (at post
//! time from an unexpected message, or later on arrival), and the receiver-driven chunked gets.

use rdcoll_transport::{Rank, Region, TransportError};

use super::bits::{self, Header};
use super::send::Nonces;
use super::{truncated, Context, Engine, Inner, Req, ReqId, Source, Status, TagSel};
use crate::error::{OffloadError, Result};
use crate::types::{CtHandle, GetArgs, MatchId, MdHandle, MdOptions, NiFail};
use crate::{DirectDone, DirectHandle, DirectPost};

/// How a receive that matched a rendezvous fetches the rest of the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fetch {
    /// As the fabric moves it fastest from a sender with nothing else to do: on shm with a
    /// core per rank, the sender writes half while this rank reads the other half.
    #[default]
    Fabric,
    /// This rank reads all of it: the sender is receiving from this rank at the same time
    /// (an exchange: `sendrecv`, allgather, alltoall), so its core is as busy as this one's,
    /// and a share it was asked to write would wait for it. 2 ranks on shm, allgather of
    /// 64 KiB - 256 KiB: 1.27-1.41x / 1.22-1.25x / 1.11-1.19x Open MPI's time against
    /// 1.89-2.13x / 1.47-1.74x / 1.10-1.36x with the sender writing half.
    Read,
}

/// A posted receive.
pub(super) struct Receive {
    /// The user's buffer (a plain number so the engine stays `Send`).
    addr: usize,
    capacity: usize,
    source: Source,
    /// Its tag and context, for a wait that takes it by the fast path instead
    /// (`Engine::wait_alone`); `None` for one that never was posted.
    selects: Option<(TagSel, Context)>,
    fetch: Fetch,
    phase: Phase,
}

/// A posted receive that has not matched, as a fast receive would take its message.
pub(super) struct Lone {
    pub(super) handle: DirectHandle,
    pub(super) addr: usize,
    pub(super) capacity: usize,
    pub(super) source: Source,
    pub(super) tag: TagSel,
    pub(super) context: Context,
}

impl Receive {
    /// The receive as the fast path would take it: posted and not matched, fetching as the
    /// fabric does, into a buffer of at least one byte (an empty one may be no address at
    /// all, through C).
    pub(super) fn lone(&self) -> Option<Lone> {
        let Phase::Matching {
            posted: Some(handle),
        } = self.phase
        else {
            return None;
        };
        let (tag, context) = self.selects?;
        (self.fetch == Fetch::Fabric && self.capacity > 0).then_some(Lone {
            handle,
            addr: self.addr,
            capacity: self.capacity,
            source: self.source,
            tag,
            context,
        })
    }
}

enum Phase {
    /// Posted on the message portal (`None`: it matched while posting, its `DirectDone` is
    /// on its way).
    Matching { posted: Option<DirectHandle> },
    /// Matched a rendezvous; the gets for the rest are in flight.
    Fetching {
        /// The buffer, registered so the sender can deposit the replies.
        registered: Region,
        ct: CtHandle,
        md: MdHandle,
        gets: u64,
        status: Status,
    },
    /// Done: the result, not yet collected.
    Finished(Result<Status>),
}

impl Engine {
    /// Posts a receive of at most `len` bytes into `ptr` for a message from `source` with
    /// `tag` in `context`.
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay valid, and must not be read or written by anything else,
    /// until the request has completed (`test` or `wait` returned its result): the message is
    /// written there while it is in flight.
    pub unsafe fn irecv(
        &self,
        ptr: *mut u8,
        len: usize,
        source: Source,
        tag: TagSel,
        context: Context,
    ) -> Result<ReqId> {
        // SAFETY: passed on from the caller.
        unsafe {
            self.irecv_locked(
                &mut self.inner.lock(),
                (ptr, len),
                source,
                tag,
                context,
                Fetch::Fabric,
            )
        }
    }

    /// [`irecv`](Engine::irecv) with the engine lock held.
    ///
    /// # Safety
    /// As for `irecv`.
    pub(super) unsafe fn irecv_locked(
        &self,
        inner: &mut Inner,
        (ptr, len): (*mut u8, usize),
        source: Source,
        tag: TagSel,
        context: Context,
        fetch: Fetch,
    ) -> Result<ReqId> {
        if source == Source::Rank(super::PROC_NULL) {
            let id = inner.reqs.insert(Req::Done(Ok(Status::from_proc_null())));
            return Ok(ReqId(id));
        }
        // The agent stands aside while the host posts (`Ni::note_host_posting`).
        self.ni.note_host_posting();
        self.take_delivery_failure(inner)?;
        // A fast receive another thread is blocked in was posted first: it goes first.
        self.materialize_fast(inner);
        // SAFETY: passed on from the caller.
        unsafe { self.post_recv(inner, (ptr, len), source, tag, context, fetch) }
    }

    /// Posts a receive (see [`irecv`](Engine::irecv)) with the engine lock held.
    ///
    /// # Safety
    /// As for `irecv`.
    pub(super) unsafe fn post_recv(
        &self,
        inner: &mut Inner,
        (ptr, len): (*mut u8, usize),
        source: Source,
        tag: TagSel,
        context: Context,
        fetch: Fetch,
    ) -> Result<ReqId> {
        let match_id = match source {
            Source::Any => MatchId::Any,
            Source::Rank(r) => {
                self.check_rank(r, "source")?;
                MatchId::Rank(r)
            }
        };
        let id = inner.reqs.reserve();
        let (match_bits, ignore_bits) = bits::receive_bits(context, tag);
        // SAFETY: the caller keeps the buffer valid and otherwise untouched until the receive
        // completes; the NI writes into it only while the receive is posted or matched, and
        // completion (or cancelling) ends that.
        let posted = unsafe {
            self.ni
                .post_direct(self.pt_msg, match_bits, ignore_bits, match_id, id, ptr, len)
        };
        let posted = match posted {
            Ok(p) => p,
            Err(e) => {
                inner.reqs.release(id);
                return Err(e);
            }
        };
        let posted = match posted {
            DirectPost::Posted(h) => Some(h),
            DirectPost::Matched => None,
        };
        let receive = Receive {
            addr: ptr as usize,
            capacity: len,
            source,
            selects: Some((tag, context)),
            fetch,
            phase: Phase::Matching { posted },
        };
        inner.reqs.fill(id, Req::Recv(receive));
        if posted.is_none() {
            // It took an unexpected message: its completion is queued now.
            self.collect_matched_at_post(inner);
        }
        Ok(ReqId(id))
    }
}

/// A direct receive matched: finish an eager message, start fetching a rendezvous.
pub(super) fn on_direct(engine: &Engine, inner: &mut Inner, d: DirectDone) {
    let id = d.user_ptr;
    let Some(Req::Recv(r)) = inner.reqs.get_mut(id) else {
        return;
    };
    if !matches!(r.phase, Phase::Matching { .. }) {
        return;
    }
    let header = Header::decode(d.hdr_data);
    let status = Status {
        source: d.initiator,
        tag: bits::tag_of(d.match_bits),
        len: usize::try_from(header.len).unwrap_or(usize::MAX),
        cancelled: false,
    };
    if d.fail != NiFail::Ok {
        r.phase = Phase::Finished(Err(TransportError::PeerFailed(d.initiator).into()));
        return;
    }
    let first = d.rlength as usize;
    match header.chunk {
        None => engine.credits.received(d.initiator, status.len),
        // Nothing with the header: sent without eager credit (or with no eager limit).
        Some(_) if first == 0 => engine.credits.owed_now(d.initiator),
        Some(_) => {}
    }
    let chunk = match header.chunk {
        Some(c) if status.len > first => c,
        _ => {
            r.phase = Phase::Finished(complete(status, r.capacity));
            return;
        }
    };
    let read_all =
        r.fetch == Fetch::Read || sender_reads_too(engine, &inner.books.nonces, &d, status.len);
    r.phase = match fetch(engine, id, r, &d, status, (first, chunk), read_all) {
        Ok(phase) => phase,
        Err(e) => Phase::Finished(Err(e)),
    };
}

/// Whether a rendezvous of `len` bytes that `d` matched should be read all by this rank
/// although its receive did not ask to ([`Fetch::Read`]): the message is past the eager
/// limit and this rank has a rendezvous send in flight to its sender, which then reads from
/// this rank meanwhile (two ranks trading windows of long messages, as `osu_bibw`), so a
/// share of the copy it was asked to write would wait for its core. "In flight" lasts until
/// this rank's send request completes, so a send the peer has already read, or not yet
/// matched, also counts: then this rank copies alone what the two could have shared. Not
/// for messages within the eager limit that went by rendezvous because the ring was full:
/// there the sender is busy with the ring, and sharing the copy stays faster (`osu_bibw` at
/// 64 KiB).
fn sender_reads_too(engine: &Engine, sends: &Nonces, d: &DirectDone, len: usize) -> bool {
    len > engine.cfg.eager_limit && sends.sending_to(d.initiator)
}

/// Whether the receive that matched `d` as it was posted should leave its fetch to the next
/// progress pass: a rendezvous from a published buffer on a fabric whose gets copy in the
/// call (shm). Done inside the post, the copy would hold back what the caller does next,
/// typically its own sends to the peer, which then waits for them: in an exchange of
/// windows the two ranks would copy by turns instead of at once. At the next pass this
/// rank's sends are out, so [`sender_reads_too`] also sees that the peer is busy.
fn fetch_after_post(engine: &Engine, d: &DirectDone) -> bool {
    let header = Header::decode(d.hdr_data);
    let more = header.chunk.is_some() && header.len > d.rlength;
    more && d.fail == NiFail::Ok
        && d.published.is_some()
        && engine.ni.fabric().gets_copy_in_call(d.initiator)
        // A thread-mode agent takes the copy on its own core, but only once it next wakes.
        && engine.ni.mode() != crate::Mode::Thread
}

impl Engine {
    /// After a receive took a queued message as it was posted: acts on the matched receives
    /// at once (an eager one is finished; a rendezvous over tcp or libfabric asks for the
    /// rest), but leaves to the next pass the fetches that copy in the call
    /// (`fetch_after_post`).
    pub(super) fn collect_matched_at_post(&self, inner: &mut Inner) {
        let mut directs = std::mem::take(&mut inner.directs);
        self.ni.take_direct_done(&mut directs);
        let mut later = Vec::new();
        for d in directs.drain(..) {
            if fetch_after_post(self, &d) {
                later.push(d);
            } else {
                self.note_activity();
                on_direct(self, inner, d);
            }
        }
        self.ni.defer_direct_done(&mut later);
        inner.directs = directs;
        self.return_credits();
    }
}

/// The result of a blocking receive of `capacity` bytes that took a queued eager message.
/// (Its credit was counted when it was taken, `Engine::takes_eager`.)
pub(super) fn queued_eager(d: DirectDone, capacity: usize) -> Result<Status> {
    if d.fail != NiFail::Ok {
        return Err(TransportError::PeerFailed(d.initiator).into());
    }
    let status = Status {
        source: d.initiator,
        tag: bits::tag_of(d.match_bits),
        len: usize::try_from(Header::decode(d.hdr_data).len).unwrap_or(usize::MAX),
        cancelled: false,
    };
    complete(status, capacity)
}

/// Issues the gets for the rest of a rendezvous: the first `c` now, each later one triggered
/// by the reply of the get `c` places before it.
fn fetch(
    engine: &Engine,
    id: u64,
    r: &Receive,
    d: &DirectDone,
    status: Status,
    (first, chunk): (usize, usize),
    read_all: bool,
) -> Result<Phase> {
    let ni = &engine.ni;
    let gets = bits::gets_for(status.len, first, chunk);
    let registered = receive_region(engine, r, d, read_all)?;
    let ct = ni.ct_alloc()?;
    let opts = MdOptions {
        ct: Some(ct),
        ct_reply: true,
        ..MdOptions::default()
    };
    let md = match ni.md_bind(registered.clone(), None, opts) {
        Ok(md) => md,
        Err(e) => {
            let _ = ni.ct_free(ct);
            return Err(e);
        }
    };
    let credits = engine.rndv_credits();
    let plan = bits::get_plan(status.len, first, chunk, r.capacity);
    for (i, (remote_offset, local_offset, len)) in plan.enumerate() {
        let a = GetArgs {
            md,
            local_offset,
            len,
            target: d.initiator,
            pt: engine.pt_rndv,
            match_bits: d.match_bits,
            remote_offset,
            user_ptr: id,
            // The sender published its buffer with the header: the gets read it directly.
            published: d.published,
            read_all,
        };
        let issued = if i < credits {
            ni.get(a)
        } else {
            ni.triggered_get(a, ct, (i - credits + 1) as u64)
        };
        if let Err(e) = issued {
            let _ = ni.ct_free(ct);
            return Err(e);
        }
    }
    Ok(Phase::Fetching {
        registered,
        ct,
        md,
        gets,
        status,
    })
}

/// The region the gets of receive `r` land in. A receive that reads the whole message itself
/// (`Fetch::Read`) from a published buffer, on a fabric whose gets write local memory
/// themselves, needs no registration: no peer ever touches it (`Region::private`), which
/// spares the registration and, on shm, its retraction (that looks for peers' copies).
fn receive_region(engine: &Engine, r: &Receive, d: &DirectDone, read_all: bool) -> Result<Region> {
    let fabric = engine.ni.fabric();
    let reads_all_itself = read_all && d.published.is_some();
    if reads_all_itself && fabric.gets_into_private() {
        // SAFETY: the receive's buffer, valid and reserved for it until it completes (its
        // region is dropped then), written only by this receive's gets.
        return Ok(unsafe { Region::private(engine.ni.rank(), r.addr as *mut u8, r.capacity) });
    }
    // SAFETY: the receive's buffer, valid and reserved for it until it completes; completion
    // deregisters this region before the buffer is handed back.
    Ok(unsafe { fabric.register_memory(r.addr as *mut u8, r.capacity)? })
}

fn complete(status: Status, capacity: usize) -> Result<Status> {
    if status.len > capacity {
        Err(truncated(status, capacity))
    } else {
        Ok(status)
    }
}

/// The receive's result once it has one.
pub(super) fn check(engine: &Engine, r: &mut Receive) -> Option<Result<Status>> {
    let result = match &r.phase {
        Phase::Finished(res) => res.clone(),
        Phase::Matching { posted } => {
            let dead = peer_gone(engine, r.source)?;
            // Withdrawing fails if a message matched meanwhile: then it completes normally.
            if !engine.ni.cancel_direct(engine.pt_msg, (*posted)?).ok()? {
                return None;
            }
            Err(TransportError::PeerFailed(dead).into())
        }
        Phase::Fetching {
            registered,
            ct,
            md,
            gets,
            status,
        } => {
            let value = match engine.ni.ct_get(*ct) {
                Ok(v) => v,
                Err(e) => return Some(Err(e)),
            };
            if value.failure == 0 && value.success < *gets {
                return None;
            }
            // Frees the triggered gets not yet released, if a get failed.
            let _ = engine.ni.ct_free(*ct);
            let _ = engine.ni.md_release(*md);
            registered.deregister();
            if value.failure > 0 {
                Err(OffloadError::Transport(TransportError::PeerFailed(
                    status.source,
                )))
            } else {
                complete(*status, r.capacity)
            }
        }
    };
    Some(result)
}

/// The failed rank that a receive from `source` would wait for forever: that rank, or for
/// `Source::Any` the last of all other ranks once every one of them has failed.
pub(super) fn peer_gone(engine: &Engine, source: Source) -> Option<Rank> {
    let (ni, fabric) = (&engine.ni, engine.ni.fabric());
    match source {
        // The fabric's flag first (cheap); the agent's record means its last messages are in.
        Source::Rank(s) => (fabric.is_failed(s) && ni.peer_failed(s)).then_some(s),
        Source::Any => {
            let me = fabric.rank();
            let others: Vec<Rank> = (0..fabric.size() as Rank).filter(|&p| p != me).collect();
            let all_failed = !others.is_empty()
                && others
                    .iter()
                    .all(|&p| fabric.is_failed(p) && ni.peer_failed(p));
            all_failed.then(|| others[others.len() - 1])
        }
    }
}

/// Whom a receive that has not matched yet waits for.
pub(super) fn waiting_for(r: &Receive) -> Option<Source> {
    r.phase.matching().then_some(r.source)
}

impl Phase {
    fn matching(&self) -> bool {
        matches!(self, Phase::Matching { posted: Some(_) })
    }
}

/// Cancels a receive that has not matched yet.
pub(super) fn cancel(engine: &Engine, r: &mut Receive) -> Option<Result<Status>> {
    let Phase::Matching { posted: Some(h) } = r.phase else {
        return None;
    };
    if !engine.ni.cancel_direct(engine.pt_msg, h).ok()? {
        return None;
    }
    Some(Ok(Status {
        source: 0,
        tag: 0,
        len: 0,
        cancelled: true,
    }))
}

impl Engine {
    /// Receives into `buf`, blocking until the message is there.
    pub fn recv_into(
        &self,
        buf: &mut [u8],
        source: Source,
        tag: TagSel,
        context: Context,
    ) -> Result<Status> {
        if source == Source::Rank(super::PROC_NULL) {
            return Ok(Status::from_proc_null());
        }
        let done = match self.recv_fast(buf, source, tag, context) {
            Some(done) => done,
            None => self.recv_posted(buf, source, tag, context),
        };
        self.return_credits();
        done
    }

    /// Goes on with a rendezvous message the fast receive into `buf` from `source` took (`d`:
    /// its header, the first chunk already in `buf`): fetches the rest as a receive posted for
    /// it would, and waits.
    pub(super) fn fetch_taken(
        &self,
        buf: &mut [u8],
        source: Source,
        mut d: DirectDone,
    ) -> Result<Status> {
        let id = {
            let mut inner = self.inner.lock();
            let receive = Receive {
                addr: buf.as_mut_ptr() as usize,
                capacity: buf.len(),
                source,
                selects: None,
                fetch: Fetch::Fabric,
                phase: Phase::Matching { posted: None },
            };
            let id = inner.reqs.insert(Req::Recv(receive));
            d.user_ptr = id;
            on_direct(self, &mut inner, d);
            id
        };
        // `buf` stays borrowed until the request completes: `wait` returns only then.
        self.wait(ReqId(id))
    }

    /// [`recv_into`](Engine::recv_into) where the fast path does not apply: an ordinary
    /// receive, posted and waited for (out of line, so the fast path's frame stays small).
    #[inline(never)]
    fn recv_posted(
        &self,
        buf: &mut [u8],
        source: Source,
        tag: TagSel,
        context: Context,
    ) -> Result<Status> {
        // SAFETY: `buf` is borrowed mutably for the whole call and the request completes
        // before it returns (`Engine::wait` returns only once the request is no longer the
        // engine's, whatever it returns).
        let id = unsafe { self.irecv(buf.as_mut_ptr(), buf.len(), source, tag, context)? };
        // The fast path declined it: waited for as posted.
        self.wait_posted(id)
    }

    /// Sends `data`, blocking until its buffer may be reused.
    #[inline]
    pub fn send_from(&self, data: &[u8], dest: Rank, tag: u32, context: Context) -> Result<()> {
        if dest == super::PROC_NULL {
            return Ok(());
        }
        if data.len() <= self.cfg.eager_limit {
            // Complete when the put call returns: no request to track (and inlined into the
            // caller: this is the latency path).
            return self.send_eager(data, dest, tag, context);
        }
        self.send_rendezvous(data, dest, tag, context)
    }

    /// [`send_from`](Engine::send_from) above the eager limit: a rendezvous send, waited for.
    #[inline(never)]
    fn send_rendezvous(&self, data: &[u8], dest: Rank, tag: u32, context: Context) -> Result<()> {
        // SAFETY: `data` is borrowed for the whole call and the request completes before it
        // returns.
        let id = unsafe { self.isend(data.as_ptr(), data.len(), dest, tag, context)? };
        self.wait(id).map(drop)
    }
}

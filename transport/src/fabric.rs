//! The transport contract every backend implements, shaped like verbs / libfabric RMA.

use std::time::Duration;

use crate::error::Result;
use crate::region::Region;
use crate::types::{Event, EventRef, OpId, Rank, RemoteAddr};

/// How long a wait on a fabric whose clock is virtual ([`Fabric::clock_is_virtual`]) sleeps
/// between two looks: everything that concerns a rank there wakes it (an arrival, a failure,
/// a flag), so the slice only bounds how late the waiter's own checks run, and a longer one
/// saves the simulation a step per slice (a 60 s WAN transfer woke every waiting rank 60,000
/// times at 1 ms).
pub const VIRTUAL_CLOCK_SLEEP: Duration = Duration::from_millis(100);

/// One rank's endpoint into a job's fabric.
///
/// - Memory is registered as a [`Region`]; peers name it by [`crate::RemoteRegion`] and the owner
///   checks every key, offset and length.
/// - `put` / `get` move bytes between a local region and a peer's region; each reports an
///   [`Event::Completed`]. A put may carry an immediate value, raised as [`Event::Immediate`] at
///   the target once the data is visible there.
/// - `send` carries small active messages (at most [`crate::MAX_MESSAGE_SIZE`] bytes), FIFO per
///   ordered pair of ranks.
/// - If a peer exits or its link breaks, every pending and later operation that involves it
///   fails with [`crate::TransportError::PeerFailed`] within the peer timeout.
pub trait Fabric: Send + Sync {
    /// This endpoint's rank.
    fn rank(&self) -> Rank;
    /// Number of ranks in the job.
    fn size(&self) -> usize;
    /// Backend name: `local`, `shm` or `tcp`.
    fn backend(&self) -> &'static str;

    /// Allocates a zeroed region of `len` bytes that peers may put into and get from. On `shm`
    /// it lives in the shared segment, so a peer's put is a direct store.
    fn alloc_region(&self, len: usize) -> Result<Region>;

    /// Registers caller memory so peers can reach it.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid (allocated, not moved) until [`Region::deregister`] has
    /// returned or the last clone of the returned region is dropped, and must not be accessed
    /// through Rust references while peers may write into it.
    unsafe fn register_memory(&self, ptr: *mut u8, len: usize) -> Result<Region>;

    /// RDMA write: `len` bytes from `src` at `src_offset` to `dst`; with `imm`, the target sees
    /// [`Event::Immediate`] after the data is in place. `src` must stay untouched until the
    /// operation completes.
    fn put(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        imm: Option<u64>,
    ) -> Result<OpId>;

    /// RDMA write followed by a flag byte (the counter byte of paper 004): `len` bytes from
    /// `src` at `src_offset` land at `dst`, then `flag` is stored in the byte right after them
    /// (`dst.offset + len`) with release ordering. A target that reads that byte with acquire
    /// ([`Region::atomic_u8`]) and finds `flag` also sees the data, and the data of every put
    /// this rank issued to that target earlier into regions the target's fabric allocated. A
    /// target blocked in [`block`](Fabric::block) is woken. The target range is `len + 1`
    /// bytes of a region the target's fabric allocated; completion as for `put`.
    fn put_flag(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        flag: u8,
    ) -> Result<OpId>;

    /// [`put`](Fabric::put) (without an immediate) or, with `flag`,
    /// [`put_flag`](Fabric::put_flag), for a caller that takes the result at once when the
    /// backend has it: `Done` and no completion event when `src` may be reused at once and
    /// the write reaches `dst` before any later write of this rank to that peer (shm: a direct
    /// copy, in place on return; tcp: a put of one frame, copied into it and sent without
    /// asking for an acknowledgement, a failure to deliver showing as the peer's failure);
    /// otherwise the put is started as usual and `Pending` names its completion event.
    fn put_now(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        flag: Option<u8>,
    ) -> Result<crate::PutStatus> {
        start_put(self, src, src_offset, len, dst, flag)
    }

    /// Writes the concatenation of `parts`, caller memory that need not be registered, to
    /// `dst` (the flag byte after it, if any, stored once the data is visible) as a store
    /// completed on return, where the backend can reach `dst` directly: shm into a peer's
    /// heap. `Ok(false)` elsewhere, having written nothing; the caller then stages the bytes in
    /// a region for [`put_now`](Fabric::put_now). Saves the staging copy of small collectives
    /// (and, with a header part, the copy that would join header and payload).
    fn store_now(&self, parts: &[&[u8]], dst: RemoteAddr, flag: Option<u8>) -> Result<bool> {
        let _ = (parts, dst, flag);
        Ok(false)
    }

    /// Reads `dst.len()` bytes at `src` into caller memory that need not be registered, done on
    /// return, where the backend can reach `src` at once: shm (a peer's heap by a load,
    /// other registered memory by `process_vm_readv`) and local. `Ok(false)` elsewhere, having
    /// read nothing (then [`get`](Fabric::get) into a registered region). Lets every reader of
    /// a broadcast copy a chunk straight out of the root's staging.
    fn load_now(&self, dst: &mut [u8], src: RemoteAddr) -> Result<bool> {
        let _ = (dst, src);
        Ok(false)
    }

    /// Whether [`get`](Fabric::get) may land in a region this rank never registered
    /// ([`Region::private`]): true where the backend's own code writes the bytes (shm, tcp,
    /// local); false where a network card writes them and wants the memory registered with it
    /// (libfabric), or where the destination is looked up by its key (the simulated fabric). Spares a
    /// reader the registration of a buffer that no peer ever touches.
    fn gets_into_private(&self) -> bool {
        false
    }

    /// Whether [`get`](Fabric::get) from `peer` copies the bytes itself before it returns
    /// (shm's `process_vm_readv` or load, the local fabric's copy), rather than asking the
    /// peer or a network card, which move them while the caller goes on. A caller about to do
    /// something a peer waits for (its own sends) does it before such a get.
    fn gets_copy_in_call(&self, peer: Rank) -> bool {
        let _ = peer;
        false
    }

    /// RDMA read: `len` bytes from `src` into `dst` at `dst_offset`.
    fn get(&self, dst: &Region, dst_offset: usize, len: usize, src: RemoteAddr) -> Result<OpId>;

    /// The longest [`get`](Fabric::get) this backend does at least as fast as the target
    /// could write the same bytes with [`put`](Fabric::put): the offload NI reads a region a
    /// target published itself up to this length, and has the target serve longer reads (shm
    /// splits a large put between both processes, so each copies half, where a get is one
    /// process's copy). No limit by default.
    fn direct_get_max(&self) -> usize {
        usize::MAX
    }

    /// The rendezvous chunk (bytes per get) this backend moves long messages fastest with, if
    /// it has one; the offload layer's default otherwise (`RDCOLL_RNDV_CHUNK` overrides both).
    fn rndv_chunk_hint(&self) -> Option<usize> {
        None
    }

    /// Sends an active message to `dest` (which may be this rank).
    fn send(&self, dest: Rank, data: &[u8]) -> Result<()>;

    /// Sends the concatenation of `parts` as one active message (a header and a caller's
    /// payload without first copying them together). By default it concatenates and sends;
    /// shm writes the parts straight into the ring.
    fn send_parts(&self, dest: Rank, parts: &[&[u8]]) -> Result<()> {
        self.send(dest, &parts.concat())
    }

    /// The next event, if one is ready, after making what progress can be made without waiting.
    fn poll(&self) -> Result<Option<Event>>;

    /// Takes the sole right to poll this endpoint, where the backend polls cheaper with it
    /// (`shm`: without its consumer lock, one locked instruction per poll). Once taken, the
    /// endpoint's own [`poll`](Fabric::poll), [`poll_with`](Fabric::poll_with) and
    /// [`wait`](Fabric::wait) fail with [`TransportError::InvalidArgument`]; everything else
    /// (sends, puts, [`pending`](Fabric::pending), [`block`](Fabric::block)) is unchanged.
    /// Dropping the poller gives the right back. `None` where the backend has no such poller,
    /// and while another one is out. The offload NI takes it when it starts, so on shm a
    /// communicator's own `fabric().poll()` fails once its messaging engine runs, and a second
    /// NI over the same endpoint can only poll through the first.
    ///
    /// [`TransportError::InvalidArgument`]: crate::TransportError::InvalidArgument
    fn take_poller(&self) -> Option<Box<dyn Poller>> {
        None
    }

    /// Like [`poll`](Fabric::poll), but hands the next event to `f` instead of returning it, with
    /// a message's bytes lent from the transport's buffer (no copy); a backend may hand over
    /// several events in one call, in order (tcp lends every message it reads). Returns
    /// whether an event was handed over. `f` must not wait on this fabric: not poll it, and
    /// not deregister memory it may still be sending from (tcp holds a queued payload's
    /// region until written, and its I/O thread may be waiting to read the peer `f` is
    /// handling).
    fn poll_with(&self, f: &mut dyn FnMut(EventRef<'_>)) -> Result<bool> {
        Ok(match self.poll()? {
            Some(Event::Message { src, data }) => {
                f(EventRef::Message { src, data: &data });
                true
            }
            Some(ev) => {
                f(EventRef::Owned(ev));
                true
            }
            None => false,
        })
    }

    /// A cheap hint: `false` when [`poll`](Fabric::poll) would certainly find nothing right
    /// now (so a spinning waiter can skip taking its own locks), `true` when it may find
    /// something. The default always says `true`.
    fn pending(&self) -> bool {
        true
    }

    /// Sleeps until an event may be ready or `timeout` passes (spurious wake-ups allowed). Used
    /// by [`wait`](Fabric::wait) after it has spun and yielded.
    fn block(&self, timeout: Duration);

    /// Like [`block`](Fabric::block), for a waiter whose condition is a flag that peers set
    /// with [`put_flag`](Fabric::put_flag) rather than an event: `ready` is looked at once
    /// more after this thread is registered as a sleeper, so a flag stored meanwhile either
    /// stops the sleep or wakes it (no lost wake-up). `ready` may be called under the
    /// backend's internal locks: it must only read memory (a flag), never call the fabric or
    /// take a lock.
    fn block_unless(&self, timeout: Duration, ready: &dyn Fn() -> bool) {
        if !ready() {
            self.block(timeout);
        }
    }

    /// The next event, waiting up to `timeout` (`None`: forever): spins briefly, then yields,
    /// then blocks, so more ranks than cores stay usable.
    fn wait(&self, timeout: Option<Duration>) -> Result<Option<Event>> {
        crate::wait::wait_with_backoff(self, timeout)
    }

    /// Time since the fabric started, read through the fabric so a simulated fabric can supply
    /// virtual time.
    fn now(&self) -> Duration;

    /// Whether [`now`](Fabric::now) is a simulated clock that moves only while every rank
    /// waits in [`block`](Fabric::block) (the `sim` backend). A waiter must then block at once
    /// rather than spin or yield for a while first: by that clock its spinning takes no time,
    /// so a wait that spins until time has passed would never end. `false` by default.
    fn clock_is_virtual(&self) -> bool {
        false
    }

    /// Told (by the offload engine) whether the ranks on this host outnumber the cores they
    /// may run on: a backend with threads of its own may then keep them out of the way of the
    /// host threads that wait (`tcp`'s I/O thread stops reading while they poll). Nothing by
    /// default.
    fn note_crowded(&self, crowded: bool) {
        let _ = crowded;
    }

    /// What this endpoint has in flight toward `peer`, where the backend counts it (`tcp`);
    /// `None` elsewhere.
    fn counters(&self, peer: Rank) -> Option<crate::types::PeerCounters> {
        let _ = peer;
        None
    }
    /// Whether messages to `dest` wait in this endpoint's own queue because the channel to it
    /// is full (shm: its ring; tcp: its socket; they were copied there and go on as `dest`
    /// makes room). A blocking sender may wait, making progress, until they have gone on,
    /// rather than copy another message behind them: a stream that outruns its receiver then
    /// costs one copy per message instead of an allocation and two copies. `false` by
    /// default.
    fn backlogged(&self, dest: Rank) -> bool {
        let _ = dest;
        false
    }

    /// Whether a nonblocking eager message toward a channel that is [`backlogged`] should go
    /// by rendezvous instead: where queuing it costs a copy the rendezvous avoids, because
    /// the receive reads the sender's memory directly (shm). Over tcp the rendezvous's data
    /// would queue on the same socket, one round trip later. `false` by default.
    ///
    /// [`backlogged`]: Fabric::backlogged
    fn rendezvous_past_backlog(&self) -> bool {
        false
    }

    /// Whether `rank` is known to have failed.
    fn is_failed(&self, rank: Rank) -> bool;

    /// What this fabric holds that has reached neither its peer nor its owner (queued
    /// sends, messages that arrived ahead of their turn), in a line, where the backend keeps
    /// such state: for a caller that waited in vain to print (the conformance tests do).
    fn pending_report(&self) -> Option<String> {
        None
    }
}

/// The sole right to poll one endpoint ([`Fabric::take_poller`]): `&mut self` makes its
/// holder the only poller, so the backend needs no lock of its own.
pub trait Poller: Send {
    /// As [`Fabric::poll_with`].
    fn poll_with(&mut self, f: &mut dyn FnMut(EventRef<'_>)) -> Result<bool>;

    /// As [`Fabric::poll`].
    fn poll(&mut self) -> Result<Option<Event>> {
        let mut out = None;
        self.poll_with(&mut |ev| out = Some(ev.into_owned()))?;
        Ok(out)
    }

    /// Hands up to `max` ready events to `f`, one by one as [`poll_with`](Poller::poll_with)
    /// would; returns how many (fewer than `max`: nothing more was ready, or a poll that
    /// needs a call of its own, such as a failed peer's reaping, comes next). An error after
    /// some events were handed over ends the batch with their count; the next poll meets it
    /// again. A backend whose poll has work to do once per call (not per event) does it once
    /// here. `f` must not poll.
    fn poll_batch(&mut self, max: usize, f: &mut dyn FnMut(EventRef<'_>)) -> Result<usize> {
        poll_up_to(max, || self.poll_with(f))
    }
}

/// Runs `poll` (one event handed over: `true`) up to `max` times, until it has nothing more;
/// how many events it handed over. An error after some ends the run with their count (the
/// next poll meets it again), as [`Poller::poll_batch`] says.
pub fn poll_up_to(max: usize, mut poll: impl FnMut() -> Result<bool>) -> Result<usize> {
    let mut n = 0;
    while n < max {
        match poll() {
            Ok(true) => n += 1,
            Ok(false) => break,
            Err(e) if n == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(n)
}

/// [`Fabric::put_now`]'s ordinary path: the put (with `flag`, [`Fabric::put_flag`]) started,
/// its completion to come as an event. For backends whose `put_now` does this for some puts.
pub fn start_put<F: Fabric + ?Sized>(
    fabric: &F,
    src: &Region,
    src_offset: usize,
    len: usize,
    dst: RemoteAddr,
    flag: Option<u8>,
) -> Result<crate::PutStatus> {
    match flag {
        Some(v) => fabric.put_flag(src, src_offset, len, dst, v),
        None => fabric.put(src, src_offset, len, dst, None),
    }
    .map(crate::PutStatus::Pending)
}

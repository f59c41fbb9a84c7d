//! Progress for the shm backend: draining the incoming rings, and serving the operations that
//! need the target (puts into registered memory, bounce gets) or complete through it.

use std::sync::atomic::Ordering;

use super::records::*;
use super::{os, ring, Inner, PendingKind, PutTail};
use crate::error::{Result, TransportError};
use crate::region::Region;
use crate::types::{range_fits, Event, EventRef, OpId, Payload, Rank, RegionKey, RemoteAddr};

/// Whether an incoming ring of a live peer has a record (plain loads, no lock).
pub(super) fn rings_ready(inner: &Inner) -> bool {
    let me = inner.rank as usize;
    (0..inner.size).any(|src| {
        let ring = &inner.incoming[src];
        // SAFETY: our own incoming ring; `head` is where its consumer (us) stands.
        src != me
            && unsafe { ring::peek_ready(ring.data, inner.layout.ring_bytes, ring.head()) }
            && !inner.failed[src].load(Ordering::Acquire)
    })
}

/// See [`crate::Fabric::pending`]: local events, a ring record, a dead peer to reap, or a
/// backlog to flush.
pub(super) fn pending(inner: &Inner) -> bool {
    !inner.local_events.is_empty()
        || inner.any_dead.load(Ordering::Relaxed)
        || inner.any_backlog.load(Ordering::Relaxed)
        || rings_ready(inner)
}

/// What the incoming rings of a rank's endpoint are read with: a consumer per ring and the
/// ring to look at first (round robin). Behind the endpoint's consumer lock, or owned by its
/// exclusive poller once one was taken (then the lock holds `None`).
pub(super) type Consumers = (Vec<ring::Consumer>, usize);

/// The error of polling an endpoint whose exclusive poller was taken.
fn poller_taken() -> TransportError {
    TransportError::InvalidArgument(
        "this endpoint's events go to its exclusive poller (Fabric::take_poller)".into(),
    )
}

/// One step of progress: hands the next event, if there is one, to `f` (a message's bytes
/// straight from the ring) and returns whether it did. The endpoint's own poll, under its
/// consumer lock.
pub(super) fn poll_with(inner: &Inner, f: &mut dyn FnMut(EventRef<'_>)) -> Result<bool> {
    if inner.poller_taken.load(Ordering::Relaxed) {
        return Err(poller_taken());
    }
    if let Some(polled) = poll_outside_rings(inner, f) {
        return Ok(polled);
    }
    let Some(mut cons) = inner.consumers.try_lock() else {
        return Ok(false);
    };
    let Some(consumers) = cons.as_mut() else {
        return Err(poller_taken());
    };
    let popped = pop_next(inner, consumers, f);
    drop(cons);
    Ok(after_rings(inner, popped, f))
}

/// The sole poller of an endpoint ([`crate::Fabric::take_poller`]): the same progress as
/// [`poll_with`] without the consumer lock. Dropping it hands the consumers back to the
/// endpoint, whose own polls work again.
pub(super) struct ShmPoller {
    pub(super) inner: std::sync::Arc<Inner>,
    /// Always `Some` until dropped.
    pub(super) consumers: Option<Consumers>,
}

impl Drop for ShmPoller {
    fn drop(&mut self) {
        let mut cons = self.inner.consumers.lock();
        *cons = self.consumers.take();
        self.inner.poller_taken.store(false, Ordering::Relaxed);
    }
}

impl crate::Poller for ShmPoller {
    fn poll_with(&mut self, f: &mut dyn FnMut(EventRef<'_>)) -> Result<bool> {
        let inner = &*self.inner;
        if let Some(ev) = inner.local_events.pop() {
            f(EventRef::Owned(ev));
            return Ok(true);
        }
        inner.flush_backlogs();
        let Some(consumers) = self.consumers.as_mut() else {
            return Err(poller_taken());
        };
        // No lock to spare here, so no look before reading (`poll_outside_rings`): a pass
        // over empty rings is the same few plain loads, and `after_rings` reaps a dead peer.
        let popped = pop_next(inner, consumers, f);
        Ok(after_rings(inner, popped, f))
    }

    /// [`poll_with`](crate::Poller::poll_with) up to `max` times, in one call: before each
    /// ring record, a local event if one is queued, and our own backlogged records once a
    /// peer has made room for them (it rings our doorbell then; each a single load when there
    /// is nothing). Not just once per batch: a peer waiting for those records would wait out
    /// the whole batch (64 records of 32 KiB to copy), and two ranks exchanging windows then
    /// took turns instead of overlapping (`osu_bibw` at 32 KiB: 6 instead of 32 GB/s).
    fn poll_batch(&mut self, max: usize, f: &mut dyn FnMut(EventRef<'_>)) -> Result<usize> {
        let inner = &*self.inner;
        let bell = inner.view(inner.rank).doorbell();
        // The doorbell when the backlogs were last flushed, and records since: a flush that
        // finds the rings still full is not repeated (locking every peer's producer) until a
        // peer rings, or every `REFLUSH_EVERY` records (a consumer may free room just before
        // the producer raises its waiting flag, and then does not ring).
        let mut flushed_at = None;
        let mut since_flush = 0;
        let mut n = 0;
        while n < max {
            if let Some(ev) = inner.local_events.pop() {
                f(EventRef::Owned(ev));
                n += 1;
                continue;
            }
            if inner.any_backlog.load(Ordering::Acquire) {
                let rung = bell.load(Ordering::Acquire);
                if flushed_at != Some(rung) || since_flush >= REFLUSH_EVERY {
                    flushed_at = Some(rung);
                    since_flush = 0;
                    inner.flush_backlogs_now();
                }
                since_flush += 1;
            }
            let Some(consumers) = self.consumers.as_mut() else {
                return if n > 0 { Ok(n) } else { Err(poller_taken()) };
            };
            match pop_next(inner, consumers, f) {
                RingPoll::Delivered => n += 1,
                other => {
                    n += usize::from(after_undelivered(inner, other, f));
                    break;
                }
            }
        }
        Ok(n)
    }
}

/// Records a batch poll takes between two flushes of a backlog whose peer did not ring.
const REFLUSH_EVERY: u32 = 16;

/// The part of a poll before the rings: a local event, backlogs to flush, and when no ring
/// has a record, a dead peer to reap. `None`: the rings have something.
fn poll_outside_rings(inner: &Inner, f: &mut dyn FnMut(EventRef<'_>)) -> Option<bool> {
    if let Some(ev) = inner.local_events.pop() {
        f(EventRef::Owned(ev));
        return Some(true);
    }
    inner.flush_backlogs();
    // Look before reading: an idle poll is then a few plain loads.
    if rings_ready(inner) {
        return None;
    }
    if inner.any_dead.load(Ordering::Relaxed) {
        inner.reap_dead();
        return Some(deliver(inner.local_events.pop(), f));
    }
    Some(false)
}

/// What reading the rings gave.
enum RingPoll {
    /// An event was handed to the callback.
    Delivered,
    /// Every ring was read; nothing for the callback.
    Empty,
    /// This peer's ring is corrupt.
    Corrupt(Rank),
}

/// Hands the next record of the incoming rings (round robin from `consumers.1`) to `f`.
#[inline]
fn pop_next(inner: &Inner, consumers: &mut Consumers, f: &mut dyn FnMut(EventRef<'_>)) -> RingPoll {
    let size = inner.size;
    let me = inner.rank as usize;
    let next = |src: usize| if src + 1 == size { 0 } else { src + 1 };
    let mut src = consumers.1;
    for _ in 0..size {
        // Nothing is ever sent to ourselves through the ring (see `send`), and a failed
        // peer's ring is not read again (it may be corrupt).
        if src == me || inner.failed[src].load(Ordering::Acquire) {
            src = next(src);
            continue;
        }
        let ring = &inner.incoming[src];
        loop {
            // What a service record raised, handed to `f` once its space is released (a
            // message is lent to `f` in place). Kept out of the pop's result, which stays a
            // flag: moving an event through it cost the message path a large frame.
            let mut raised: Option<Event> = None;
            // Our own incoming ring from `src`, read only by the holder of
            // `consumers` (the consumer lock's, or the exclusive poller's).
            // SAFETY: as just said.
            let popped = unsafe {
                consumers.0[src].try_pop(
                    ring.data,
                    inner.layout.ring_bytes,
                    ring.head(),
                    |kind, payload| {
                        if kind == K_MSG {
                            f(EventRef::Message {
                                src: src as Rank,
                                data: payload,
                            });
                            true
                        } else {
                            raised = handle(inner, src as Rank, kind, payload);
                            raised.is_some()
                        }
                    },
                )
            };
            match popped {
                Ok(None) => break,
                Err(_) => {
                    consumers.1 = next(src);
                    return RingPoll::Corrupt(src as Rank);
                }
                Ok(Some(delivered)) => {
                    // Space was freed: wake the sender if it waits for it.
                    if ring.waiting().load(Ordering::Acquire) != 0 {
                        wake_producer(inner, src as Rank);
                    }
                    if let Some(ev) = raised {
                        f(EventRef::Owned(ev));
                    }
                    if delivered {
                        consumers.1 = next(src);
                        return RingPoll::Delivered;
                    }
                }
            }
        }
        src = next(src);
    }
    RingPoll::Empty
}

/// Wakes `src`, which waits for space in its ring to us (some was just freed).
#[cold]
#[inline(never)]
fn wake_producer(inner: &Inner, src: Rank) {
    inner.incoming[src as usize]
        .waiting()
        .store(0, Ordering::Release);
    let peer = inner.view(src);
    peer.doorbell().fetch_add(1, Ordering::Release);
    os::futex_wake(peer.doorbell());
}

/// The part of a poll after the rings (read without holding the consumers any more): nothing
/// to do when a record was delivered, else a corrupt ring to fail or a dead peer to reap.
#[inline]
fn after_rings(inner: &Inner, popped: RingPoll, f: &mut dyn FnMut(EventRef<'_>)) -> bool {
    match popped {
        RingPoll::Delivered => true,
        other => after_undelivered(inner, other, f),
    }
}

/// [`after_rings`] when nothing was delivered, out of line.
#[inline(never)]
fn after_undelivered(inner: &Inner, popped: RingPoll, f: &mut dyn FnMut(EventRef<'_>)) -> bool {
    match popped {
        RingPoll::Delivered => true,
        RingPoll::Corrupt(src) => {
            inner.fail_peer(src);
            deliver(inner.local_events.pop(), f)
        }
        RingPoll::Empty => {
            if inner.any_dead.load(Ordering::Relaxed) {
                inner.reap_dead();
            }
            deliver(inner.local_events.pop(), f)
        }
    }
}

fn deliver(ev: Option<Event>, f: &mut dyn FnMut(EventRef<'_>)) -> bool {
    match ev {
        Some(ev) => {
            f(EventRef::Owned(ev));
            true
        }
        None => false,
    }
}

pub(super) fn status_of(e: &TransportError) -> (u64, u64) {
    match e {
        TransportError::OutOfRange { region_len, .. } => (ST_OUT_OF_RANGE, *region_len),
        _ => (ST_BAD_KEY, 0),
    }
}

pub(super) fn done(inner: &Inner, to: Rank, op: u64, status: u64, region_len: u64) {
    let _ = inner.send_record(to, K_DONE, &[&header([op, status, region_len])]);
}

/// Looks up one of our regions for a peer and checks the range.
pub(super) fn target_region(
    inner: &Inner,
    key: u64,
    offset: u64,
    len: u64,
) -> Result<(Region, usize, usize)> {
    let region = inner.table.lookup(RegionKey(key))?;
    let (o, l) = (
        usize::try_from(offset).unwrap_or(usize::MAX),
        usize::try_from(len).unwrap_or(usize::MAX),
    );
    if range_fits(o, l, region.len()) {
        Ok((region, o, l))
    } else {
        Err(TransportError::OutOfRange {
            rank: inner.rank,
            key,
            offset,
            len,
            region_len: region.len() as u64,
        })
    }
}

/// What a finished put's tail raises at its target: an immediate's event; for a flag (stored
/// already), a wake-up of this rank's sleepers, which may wait for exactly that byte.
pub(super) fn tail_event(inner: &Inner, src: Rank, tail: PutTail) -> Option<Event> {
    match tail {
        PutTail::Imm(imm) => Some(Event::Immediate { src, imm }),
        PutTail::Flag(_) => {
            inner.ring_doorbell(inner.rank);
            None
        }
        PutTail::None => None,
    }
}

/// Handles one record from `src`; returns the event it raises, if any.
#[inline(never)]
fn handle(inner: &Inner, src: Rank, kind: u32, payload: &[u8]) -> Option<Event> {
    match kind {
        K_MSG => Some(Event::Message {
            src,
            data: Payload::from_slice(payload),
        }),
        K_IMM => parse::<1>(payload).map(|([imm], _)| Event::Immediate { src, imm }),
        K_PUT_PULL => {
            let (words, _) = parse::<7>(payload)?;
            match super::pull::PullPut::parse(words) {
                Ok(put) => put.finish(inner, src, 0),
                Err(op) => {
                    done(inner, src, op, ST_BAD_KEY, 0);
                    None
                }
            }
        }
        K_PUT_CHUNK => {
            let ([op, key, base, total, chunk_off, tail_kind, tail_value], data) =
                parse::<7>(payload)?;
            let tail = PutTail::from_words(tail_kind, tail_value);
            let end = chunk_off
                .checked_add(data.len() as u64)
                .filter(|&e| e <= total);
            let result = match (end, tail) {
                (Some(end), Some(tail)) => {
                    let span = total.saturating_add(tail.extra() as u64);
                    target_region(inner, key, base, span).and_then(|(region, o, _)| {
                        region.write(o + chunk_off as usize, data)?;
                        if let (true, PutTail::Flag(v)) = (end == total, tail) {
                            region.store_flag(o + total as usize, v)?;
                        }
                        Ok(())
                    })
                }
                _ => Err(TransportError::Protocol {
                    rank: src,
                    what: "put chunk outside its range, or a bad tail".into(),
                }),
            };
            match result {
                Ok(()) if end == Some(total) => {
                    done(inner, src, op, ST_OK, 0);
                    tail_event(inner, src, tail.unwrap_or(PutTail::None))
                }
                Ok(()) => None,
                Err(e) => {
                    let (st, rl) = status_of(&e);
                    done(inner, src, op, st, rl);
                    None
                }
            }
        }
        K_GET_REQ => {
            let ([op, key, offset, len], _) = parse::<4>(payload)?;
            match target_region(inner, key, offset, len) {
                Ok((region, o, l)) => {
                    let mut at = 0;
                    while at < l {
                        let n = (l - at).min(BOUNCE_CHUNK);
                        let mut chunk = header([op, at as u64]);
                        let start = chunk.len();
                        chunk.resize(start + n, 0);
                        if region.read(o + at, &mut chunk[start..]).is_err() {
                            done(inner, src, op, ST_BAD_KEY, 0);
                            return None;
                        }
                        let _ = inner.send_record(src, K_GET_CHUNK, &[&chunk]);
                        at += n;
                    }
                    done(inner, src, op, ST_OK, 0);
                }
                Err(e) => {
                    let (st, rl) = status_of(&e);
                    done(inner, src, op, st, rl);
                }
            }
            None
        }
        K_GET_CHUNK => {
            let ([op, chunk_off], data) = parse::<2>(payload)?;
            let mut pending = inner.pending.lock();
            let p = pending.get_mut(&op)?;
            if p.peer != src {
                return None;
            }
            let fits = chunk_off
                .checked_add(data.len() as u64)
                .is_some_and(|e| e <= p.len as u64);
            if let (
                true,
                PendingKind::Get {
                    dst,
                    dst_off,
                    received,
                },
            ) = (fits, &mut p.kind)
            {
                if dst.write(*dst_off + chunk_off as usize, data).is_ok() {
                    *received += data.len();
                }
            }
            None
        }
        K_PUT_SPLIT => super::split::on_split(inner, src, payload),
        K_PUSHED => super::split::on_pushed(inner, src, payload),
        K_DONE => {
            let ([op, status, region_len], _) = parse::<3>(payload)?;
            finish(inner, src, op, status, region_len)
        }
        _ => None,
    }
}

/// Completes a target-served operation from its `K_DONE`.
fn finish(inner: &Inner, src: Rank, op: u64, status: u64, region_len: u64) -> Option<Event> {
    if status == ST_CMA_REFUSED {
        return resend_as_chunks(inner, src, op);
    }
    let p = {
        let mut pending = inner.pending.lock();
        if pending.get(&op).is_none_or(|p| p.peer != src) {
            return None;
        }
        pending.remove(&op)?
    };
    let result = match status {
        ST_OK => match &p.kind {
            PendingKind::Get { received, .. } if *received != p.len => {
                Err(TransportError::Protocol {
                    rank: src,
                    what: format!("get returned {received} of {} bytes", p.len),
                })
            }
            _ => Ok(()),
        },
        ST_OUT_OF_RANGE => Err(TransportError::OutOfRange {
            rank: src,
            key: p.key.0,
            offset: p.offset as u64,
            len: p.len as u64,
            region_len,
        }),
        _ => Err(TransportError::BadKey {
            rank: src,
            key: p.key.0,
        }),
    };
    Some(Event::Completed {
        op: OpId(op),
        result,
    })
}

/// The target cannot attach to our memory: sends a pending put's data through the ring
/// instead. The operation stays pending throughout, so a peer failure meanwhile completes it
/// exactly once.
fn resend_as_chunks(inner: &Inner, src: Rank, op: u64) -> Option<Event> {
    inner.cma_ok[src as usize].store(false, Ordering::Release);
    let (dst, region, src_off, len, tail) = {
        let pending = inner.pending.lock();
        let p = pending.get(&op).filter(|p| p.peer == src)?;
        let PendingKind::Put {
            src: region,
            src_off,
            tail,
        } = &p.kind
        else {
            return None;
        };
        let dst = RemoteAddr {
            rank: p.peer,
            key: p.key,
            offset: p.offset,
        };
        (dst, region.clone(), *src_off, p.len, *tail)
    };
    let err = send_put_chunks(inner, op, dst, &region, src_off, len, tail).err()?;
    inner.pending.lock().remove(&op)?;
    Some(Event::Completed {
        op: OpId(op),
        result: Err(err),
    })
}

/// Sends a put as bounce chunks through the ring (when cross-memory attach is refused).
pub(super) fn send_put_chunks(
    inner: &Inner,
    op: u64,
    dst: RemoteAddr,
    src: &Region,
    src_off: usize,
    len: usize,
    tail: PutTail,
) -> Result<()> {
    let mut at = 0;
    loop {
        let n = (len - at).min(BOUNCE_CHUNK);
        let words = [
            op,
            dst.key.0,
            dst.offset as u64,
            len as u64,
            at as u64,
            tail.words()[0],
            tail.words()[1],
        ];
        let mut chunk = header(words);
        let start = chunk.len();
        chunk.resize(start + n, 0);
        src.read(src_off + at, &mut chunk[start..])?;
        inner.send_record(dst.rank, K_PUT_CHUNK, &[&chunk])?;
        at += n;
        if at >= len {
            return Ok(());
        }
    }
}

//! The target side, run by the progress agent: matching incoming puts and gets against the
//! portal table, depositing, counting, raising events, unlinking, recording unexpected
//! headers, and flow control (SEMANTICS.md §1-3, §5, §7).

use std::sync::atomic::Ordering;

use rdcoll_transport::{Rank, RegionKey, RemoteAddr};

use crate::event::{Event, EventKind, Location};
use crate::me::Me;
use crate::mpi_lists::DirectRecv;
use crate::portal::{Chosen, Unexpected};
use crate::state::{State, Taker, Transfer};
pub(crate) use crate::target_direct::{copy_out, direct_from_header};
use crate::target_direct::{direct_done, put_direct};
use crate::types::{List, MeCounting, NiFail, PtIndex};
use crate::wire::{Msg, PutData};

/// What the answer to a served put or get says of its deposit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deposit {
    pub(crate) no_ack: bool,
    pub(crate) list: List,
    pub(crate) mlength: usize,
    pub(crate) offset: usize,
}

impl Deposit {
    pub(crate) fn of(t: &Transfer) -> Deposit {
        Deposit {
            no_ack: t.ack_disabled,
            list: t.list,
            mlength: t.place.mlength,
            offset: t.place.offset,
        }
    }
}

pub(crate) fn answer(
    st: &mut State,
    to: Rank,
    reply: bool,
    op: u64,
    fail: NiFail,
    done: Option<Deposit>,
) {
    let msg = Msg::Done {
        reply,
        op,
        fail,
        no_ack: done.is_some_and(|d| d.no_ack),
        list: done.map(|d| d.list),
        mlength: done.map_or(0, |d| d.mlength as u64),
        remote_offset: done.map_or(0, |d| d.offset as u64),
    };
    // A dead initiator is reported by the transport; nothing else to do here.
    let _ = st.fabric.send(to, &msg.encode());
}

/// Bumps an entry's counter for a put or get it served.
pub(crate) fn count_comm(st: &mut State, c: MeCounting, mlength: usize) {
    if c.comm {
        st.count(c.ct, true, if c.bytes { mlength as u64 } else { 1 });
    }
}

/// Why a message found no entry to take it; disables the entry under flow control.
fn refuse(st: &mut State, pt: PtIndex) -> NiFail {
    let Ok(portal) = st.portal(pt) else {
        return NiFail::Dropped;
    };
    if !portal.enabled {
        return NiFail::PtDisabled;
    }
    if !portal.flow_control {
        return NiFail::Dropped;
    }
    portal.enabled = false;
    let mut ev = Event::simple(EventKind::PtDisabled, Some(pt), st.rank(), 0);
    ev.fail = NiFail::PtDisabled;
    st.post_pt_disabled(pt, ev);
    NiFail::PtDisabled
}

/// What an arrival selected (returned once per arrival, never stored: no box).
#[allow(clippy::large_enum_variant)]
enum Selected {
    /// An entry: the transfer to perform.
    Entry(Transfer),
    /// A direct receive of an MPI portal.
    Direct(DirectRecv),
}

/// An incoming put or get, as matching and depositing see it.
pub(crate) struct Arrival {
    pub(crate) from: Rank,
    pub(crate) pt: PtIndex,
    pub(crate) get: bool,
    pub(crate) op: u64,
    pub(crate) bits: u64,
    pub(crate) remote_offset: usize,
    pub(crate) rlength: usize,
    pub(crate) hdr_data: u64,
    /// The initiator's region the rest of the message can be read from (a publishing put).
    pub(crate) published: Option<u64>,
}

/// Selects the entry for a message and applies its side effects on the entry (offset advance,
/// unlink); returns the transfer to perform, or the failure to answer with.
fn select(st: &mut State, a: &Arrival) -> Result<Selected, NiFail> {
    let Ok(portal) = st.portal(a.pt) else {
        return Err(NiFail::Dropped);
    };
    if !portal.enabled {
        return Err(NiFail::PtDisabled);
    }
    if a.get && portal.mpi.is_some() {
        // MPI portals take puts only (SEMANTICS.md §12).
        return Err(NiFail::OpViolation);
    }
    let header_room = portal.unexpected_len() < portal.max_unexpected;
    let (list, seq) = match portal.choose(a.from, a.bits, a.remote_offset, a.rlength) {
        None => return Err(refuse(st, a.pt)),
        Some(Chosen::Direct(d)) => return Ok(Selected::Direct(d)),
        Some(Chosen::Taken(mut me)) => {
            // Use-once, and already off its list.
            let (t, _) = entry_transfer(a, List::Priority, &mut me)?;
            return Ok(Selected::Entry(Transfer {
                unlinked: true,
                ..t
            }));
        }
        Some(Chosen::Linked(list, seq)) => (list, seq),
    };
    if list == List::Overflow && !header_room {
        return Err(refuse(st, a.pt));
    }
    let entries = portal.list(list);
    let me = entries.get_mut(seq).ok_or(NiFail::Dropped)?;
    let (t, unlink) = entry_transfer(a, list, me)?;
    if unlink {
        if let Some(old) = entries.remove(seq) {
            if old.options.renew {
                renew(st, a.pt, list, old);
            }
        }
    }
    Ok(Selected::Entry(t))
}

/// The transfer of arrival `a` into entry `me` of `list`, after the permission check, and
/// whether the entry must now unlink.
fn entry_transfer(a: &Arrival, list: List, me: &mut Me) -> Result<(Transfer, bool), NiFail> {
    let allowed = if a.get {
        me.options.op_get
    } else {
        me.options.op_put
    };
    if !allowed {
        return Err(NiFail::OpViolation);
    }
    let place = me.placement(a.remote_offset, a.rlength);
    let unlink = me.consume(place.mlength);
    let t = Transfer {
        get: a.get,
        initiator: a.from,
        op: a.op,
        pt: a.pt,
        list,
        // The bytes only: the transfer copies into or out of them, peers never name it.
        region: me.region.clone_memory(),
        place,
        bits: a.bits,
        rlength: a.rlength,
        remote_offset: a.remote_offset,
        hdr_data: a.hdr_data,
        published: a.published,
        user_ptr: me.user_ptr,
        counting: me.options.counting,
        unlinked: unlink,
        ack_disabled: me.options.ack_disable,
        me_options: me.options,
        quiet: false,
        header: None,
        taken_by: None,
        direct: None,
    };
    Ok((t, unlink))
}

/// Appends a fresh copy of a renewing entry that just unlinked itself.
fn renew(st: &mut State, pt: PtIndex, list: List, old: Me) {
    let region = match st.fabric.alloc_region(old.region.len()) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(
                "offload: renewing an overflow entry failed ({e}); arrivals may be refused"
            );
            return;
        }
    };
    let fresh = Me {
        region,
        local_off: 0,
        ..old
    };
    let seq = st.seq();
    if let Ok(portal) = st.portal(pt) {
        portal.list(list).insert(seq, fresh);
    }
}

fn header_of(t: &Transfer, pending: Option<rdcoll_transport::OpId>) -> Unexpected {
    Unexpected {
        initiator: t.initiator,
        match_bits: t.bits,
        rlength: t.rlength,
        mlength: t.place.mlength,
        remote_offset: t.remote_offset,
        hdr_data: t.hdr_data,
        published: t.published,
        start: Location {
            // The bytes only (an unexpected message is read here, never named by a peer).
            region: t.region.clone_memory(),
            offset: t.place.offset,
        },
        pending,
        get: t.get,
    }
}

/// Records the unexpected header of a put that matched the overflow list, in arrival order,
/// before its data is pulled (so appends and searches see it in its place).
fn record_header(st: &mut State, t: &mut Transfer, pending: Option<rdcoll_transport::OpId>) {
    let seq = st.seq();
    if let Ok(portal) = st.portal(t.pt) {
        t.header = Some(portal.queue_header(seq, header_of(t, pending)));
        // One writer (the state lock's holder): a plain load and store, no locked operation.
        let queued = st.queued_unexpected.load(Ordering::Relaxed);
        st.queued_unexpected.store(queued + 1, Ordering::Release);
    }
}

/// Raises PUT_OVERFLOW (GET_OVERFLOW for a get's header) for `taker`, which took `u`; a
/// direct receive gets the data copied out of the overflow entry and a `DirectDone` instead.
fn overflow_event(st: &mut State, pt: PtIndex, u: &Unexpected, taker: Taker, fail: NiFail) {
    if let Some(d) = taker.direct {
        return direct_from_header(st, d, u, fail);
    }
    let kind = if u.get {
        EventKind::GetOverflow
    } else {
        EventKind::PutOverflow
    };
    let mut ev = Event::simple(kind, Some(pt), u.initiator, taker.user_ptr);
    ev.fail = fail;
    ev.match_bits = u.match_bits;
    ev.rlength = u.rlength as u64;
    ev.mlength = u.mlength as u64;
    ev.remote_offset = u.remote_offset as u64;
    ev.hdr_data = u.hdr_data;
    ev.list = Some(List::Overflow);
    ev.start = Some(u.start.clone());
    st.post_pt(pt, ev);
    let c = taker.counting;
    if fail != NiFail::Ok {
        st.count(c.ct, false, 1);
    } else if c.overflow {
        st.count(c.ct, true, if c.bytes { u.mlength as u64 } else { 1 });
    }
}

/// Raises the target events of a finished transfer, settles the unexpected header of an
/// overflow deposit, and answers the initiator.
pub(crate) fn finish(st: &mut State, mut t: Transfer, fail: NiFail) {
    if let Some(d) = t.direct {
        // A put pulled into a direct receive's buffer: no entry, no events.
        let mlength = if fail == NiFail::Ok {
            t.place.mlength
        } else {
            0
        };
        let mut done = direct_done(d, t.initiator, t.bits, t.hdr_data, t.rlength, mlength, fail);
        done.published = t.published;
        st.direct_done.push(done);
        if fail != NiFail::Ok {
            t.place.mlength = 0;
        } else if t.quiet {
            return;
        }
        return answer(st, t.initiator, t.get, t.op, fail, Some(Deposit::of(&t)));
    }
    // Every message that lands on the overflow list leaves a header (a get's data went out
    // from the overflow entry; an append that takes its header learns of it).
    let on_overflow = t.list == List::Overflow;
    if fail == NiFail::Ok && !t.me_options.event_comm_disable {
        let mut ev = Event::simple(
            if t.get {
                EventKind::Get
            } else {
                EventKind::Put
            },
            Some(t.pt),
            t.initiator,
            t.user_ptr,
        );
        ev.match_bits = t.bits;
        ev.rlength = t.rlength as u64;
        ev.mlength = t.place.mlength as u64;
        ev.remote_offset = t.remote_offset as u64;
        ev.hdr_data = t.hdr_data;
        ev.list = Some(t.list);
        ev.start = Some(Location {
            region: t.region.clone(),
            offset: t.place.offset,
        });
        st.post_pt(t.pt, ev);
    }
    if fail == NiFail::Ok {
        count_comm(st, t.counting, t.place.mlength);
        if on_overflow && t.header.is_none() {
            record_header(st, &mut t, None);
        }
    }
    if on_overflow {
        if let Some(taker) = t.taken_by {
            overflow_event(st, t.pt, &header_of(&t, None), taker, fail);
        } else if let (Some(h), Ok(portal)) = (t.header, st.portal(t.pt)) {
            if fail == NiFail::Ok {
                if let Some(u) = portal.header_mut(h) {
                    u.pending = None;
                }
            } else {
                // The data never arrived: the header must not be taken.
                portal.withdraw_header(h);
            }
        }
    }
    if t.unlinked && !t.me_options.event_unlink_disable {
        let ev = Event::simple(EventKind::AutoUnlink, Some(t.pt), st.rank(), t.user_ptr);
        st.post_pt(t.pt, ev);
    }
    if fail != NiFail::Ok {
        t.place.mlength = 0;
    } else if t.quiet {
        return;
    }
    answer(st, t.initiator, t.get, t.op, fail, Some(Deposit::of(&t)));
}

/// A sender's notice that it now waits for its message with `bits` (`State::waits_notices`),
/// applied as it arrives: in order with that sender's messages, so it marks that message if
/// it is still queued and never a later one that reuses its nonce.
#[cold]
fn mark_waiting(st: &mut State, msg_pt: PtIndex, from: Rank, bits: u64) {
    if let Some(mpi) = st
        .portals
        .get_mut(msg_pt.0)
        .and_then(|p| p.mpi.as_deref_mut())
    {
        mpi.mark_waiting(from, bits);
    }
}

/// An incoming put or get.
pub(crate) fn on_message(st: &mut State, from: Rank, msg: Msg<'_>) {
    match msg {
        Msg::Put {
            op,
            pt,
            ack,
            bits,
            remote_offset,
            hdr_data,
            rlength,
            data,
        } => {
            if let Some(w) = st.waits_notices {
                if w.notice_pt == pt && hdr_data & w.flag != 0 {
                    mark_waiting(st, w.msg_pt, from, bits);
                }
            }
            let a = Arrival {
                from,
                pt,
                get: false,
                op,
                bits,
                remote_offset: to_usize(remote_offset),
                rlength: to_usize(rlength),
                hdr_data,
                published: match data {
                    PutData::Published { key, .. } => Some(key),
                    _ => None,
                },
            };
            let quiet = ack == crate::types::AckReq::None
                && !matches!(data, PutData::Pull { .. })
                && op & crate::initiator::QUIET_OP != 0;
            let mut t = match select(st, &a) {
                Ok(Selected::Entry(t)) => t,
                Ok(Selected::Direct(d)) => return put_direct(st, &a, d, quiet, data),
                Err(fail) => return answer(st, from, false, op, fail, None),
            };
            t.quiet = quiet;
            match data {
                PutData::Inline(bytes) | PutData::Published { bytes, .. } => {
                    let n = t.place.mlength;
                    // A zero-length deposit (offset at or past the end) touches no memory.
                    let written = n == 0 || t.region.write(t.place.offset, &bytes[..n]).is_ok();
                    let fail = if written { NiFail::Ok } else { NiFail::Dropped };
                    finish(st, t, fail);
                }
                PutData::Pull { key, offset } => {
                    if t.place.mlength == 0 {
                        return finish(st, t, NiFail::Ok);
                    }
                    let src = RemoteAddr {
                        rank: from,
                        key: RegionKey(key),
                        offset: to_usize(offset),
                    };
                    match st
                        .fabric
                        .get(&t.region, t.place.offset, t.place.mlength, src)
                    {
                        Ok(id) => {
                            let mut t = t;
                            if t.list == List::Overflow {
                                record_header(st, &mut t, Some(id));
                            }
                            st.transfers.insert(id, t);
                        }
                        Err(_) => finish(st, t, NiFail::Undeliverable),
                    }
                }
            }
        }
        Msg::Get {
            op,
            pt,
            bits,
            remote_offset,
            rlength,
            key,
            md_offset,
        } => {
            let a = Arrival {
                from,
                pt,
                get: true,
                op,
                bits,
                remote_offset: to_usize(remote_offset),
                rlength: to_usize(rlength),
                hdr_data: 0,
                published: None,
            };
            let t = match select(st, &a) {
                Ok(Selected::Entry(t)) => t,
                // Gets never select a direct receive (MPI portals refuse them).
                Ok(Selected::Direct(_)) => {
                    return answer(st, from, true, op, NiFail::Dropped, None)
                }
                Err(fail) => return answer(st, from, true, op, fail, None),
            };
            if t.place.mlength == 0 {
                return finish(st, t, NiFail::Ok);
            }
            let dst = RemoteAddr {
                rank: from,
                key: RegionKey(key),
                offset: to_usize(md_offset),
            };
            match st
                .fabric
                .put(&t.region, t.place.offset, t.place.mlength, dst, None)
            {
                Ok(id) => {
                    let mut t = t;
                    if t.list == List::Overflow {
                        record_header(st, &mut t, Some(id));
                    }
                    st.transfers.insert(id, t);
                }
                Err(_) => finish(st, t, NiFail::Undeliverable),
            }
        }
        Msg::GetNotice {
            pt,
            bits,
            remote_offset,
            rlength,
            fail,
        } => {
            let a = Arrival {
                from,
                pt,
                get: true,
                op: 0,
                bits,
                remote_offset: to_usize(remote_offset),
                rlength: to_usize(rlength),
                hdr_data: 0,
                published: None,
            };
            on_get_notice(st, &a, fail);
        }
        Msg::Done { .. } => {}
    }
}

/// A direct get read the region the entry `a` selects covers (or failed to, `fail`): the
/// entry is counted, its events raised and its offset and unlinking applied as for a get it
/// served, and nobody is answered. A notice that finds no entry counts nothing: the read has
/// happened anyway (the initiator was told by its own completion).
fn on_get_notice(st: &mut State, a: &Arrival, fail: NiFail) {
    let mut t = match select(st, a) {
        Ok(Selected::Entry(t)) => t,
        _ => {
            tracing::debug!(
                "offload: a direct get's notice from rank {} found no entry on portal {}",
                a.from,
                a.pt.0
            );
            return;
        }
    };
    if fail != NiFail::Ok {
        // The read failed: the entry's owner learns it on its counter.
        st.count(t.counting.ct, false, 1);
        return;
    }
    t.quiet = true;
    finish(st, t, NiFail::Ok);
}

pub(crate) fn to_usize(x: u64) -> usize {
    usize::try_from(x).unwrap_or(usize::MAX)
}

/// Takes the unexpected headers `me` matches for an append or a search-delete: one
/// PUT_OVERFLOW each (pointing at the deposited data), counted on `me`'s overflow counter; for
/// a header whose data is still arriving, the event comes when the transfer finishes.
/// Returns how many it took.
pub(crate) fn take_unexpected(st: &mut State, pt: PtIndex, me: &Me) -> usize {
    let Ok(portal) = st.portal(pt) else { return 0 };
    let taken = portal.take_headers(me, !me.options.use_once, true);
    let taker = Taker {
        user_ptr: me.user_ptr,
        counting: me.options.counting,
        direct: None,
    };
    for u in &taken {
        settle_taken(st, pt, u, taker);
    }
    taken.len()
}

/// Hands the taken header `u` to `taker`: now, or when its data has arrived.
pub(crate) fn settle_taken(st: &mut State, pt: PtIndex, u: &Unexpected, taker: Taker) {
    match u.pending.and_then(|id| st.transfers.get_mut(&id)) {
        Some(t) => t.taken_by = Some(taker),
        None => overflow_event(st, pt, u, taker, NiFail::Ok),
    }
}

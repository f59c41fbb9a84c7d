//! The initiator side: issuing puts and gets from memory descriptors, and turning the target's
//! answers (or its failure) into SEND, ACK and REPLY events and counts (SEMANTICS.md §12).

use rdcoll_transport::{Rank, Region, RegionKey, RemoteAddr};

use crate::error::{invalid, Result};
use crate::event::{Event, EventKind};
use crate::state::{InitOp, State};
use crate::types::{AckReq, GetArgs, List, MdHandle, NiFail, PtIndex, PutArgs};
use crate::wire::{Msg, PutData, PUT_HEADER};

/// Checks that a memory descriptor exists and holds `offset..offset + len`.
pub(crate) fn check_md(st: &mut State, md: MdHandle, offset: usize, len: usize) -> Result<()> {
    let m = st.mds.must(md.0)?;
    if offset
        .checked_add(len)
        .is_none_or(|end| end > m.region.len())
    {
        return Err(invalid(format!(
            "{len} bytes at offset {offset} are outside the {}-byte memory descriptor",
            m.region.len()
        )));
    }
    Ok(())
}

/// Operation ids with this bit are inline puts that asked for no acknowledgement: they are not
/// tracked, the target answers only a failure, and the low 32 bits name the memory descriptor
/// that failure is reported on.
pub(crate) const QUIET_OP: u64 = 1 << 63;

fn new_op(st: &mut State, op: InitOp) -> u64 {
    st.next_op += 1;
    st.use_md(op.md);
    st.ops.insert(st.next_op, op);
    st.next_op
}

/// Starts a put. Failures after validation (an unreachable target) complete the operation with
/// failure events rather than an error, as they would for a triggered put.
pub(crate) fn issue_put(st: &mut State, a: PutArgs) {
    if let Err(e) = check_md(st, a.md, a.local_offset, a.len) {
        tracing::warn!("triggered put dropped: {e}");
        return;
    }
    issue_put_from(st, a, None);
}

/// Starts a put whose payload is `bytes` (inline, read now) or, without them, the memory
/// descriptor's range. Returns whether the header message left this rank.
pub(crate) fn issue_put_from(st: &mut State, a: PutArgs, bytes: Option<&[u8]>) -> bool {
    let inline = bytes.is_some() || a.len <= st.cfg.inline_max;
    let record = InitOp {
        get: false,
        md: a.md,
        user_ptr: a.user_ptr,
        target: a.target,
        ack: a.ack_req,
        len: a.len,
        send_owed: !inline,
        match_bits: a.match_bits,
    };
    let quiet = inline && a.ack_req == AckReq::None;
    let op = if quiet {
        QUIET_OP | a.md.0 as u64
    } else {
        new_op(st, record)
    };
    let Some(md) = st.mds.get(a.md.0) else {
        return false;
    };
    let region = md.region.clone();
    let mut data = Vec::new();
    let payload = if let Some(bytes) = bytes {
        PutData::Inline(bytes)
    } else if inline {
        data.resize(a.len, 0);
        if region.read(a.local_offset, &mut data).is_err() {
            fail_op(st, op, NiFail::Undeliverable);
            return false;
        }
        PutData::Inline(&data)
    } else {
        PutData::Pull {
            key: region.key().0,
            offset: a.local_offset as u64,
        }
    };
    let msg = Msg::Put {
        op,
        pt: a.pt,
        ack: a.ack_req,
        bits: a.match_bits,
        remote_offset: a.remote_offset as u64,
        hdr_data: a.hdr_data,
        rlength: a.len as u64,
        data: payload,
    };
    let mut wire = std::mem::take(&mut st.wire_buf);
    wire.clear();
    msg.encode_into(&mut wire);
    let sent = st.fabric.send(a.target, &wire);
    st.wire_buf = wire;
    if sent.is_err() {
        if quiet {
            report_quiet_failure(st, op, a.target, NiFail::Undeliverable);
        } else {
            fail_op(st, op, NiFail::Undeliverable);
        }
        return false;
    }
    if quiet {
        send_event(st, &record);
    } else if inline {
        raise_send(st, op);
    }
    true
}

/// The message of an inline put that asks for no acknowledgement.
fn quiet_inline_msg<'a>(a: &PutArgs, bytes: &'a [u8]) -> Msg<'a> {
    Msg::Put {
        op: QUIET_OP | a.md.0 as u64,
        pt: a.pt,
        ack: AckReq::None,
        bits: a.match_bits,
        remote_offset: a.remote_offset as u64,
        hdr_data: a.hdr_data,
        rlength: bytes.len() as u64,
        data: PutData::Inline(bytes),
    }
}

/// A quiet put that never left: the failure on its descriptor (if that still exists).
pub(crate) fn report_put_failure(st: &mut State, a: &PutArgs) {
    report_quiet_failure(
        st,
        QUIET_OP | a.md.0 as u64,
        a.target,
        NiFail::Undeliverable,
    );
}

/// An inline put that asks for no acknowledgement (an eager message), encoded straight from
/// `bytes` into the wire buffer: no operation record, no region lookup. Returns whether the
/// header message left this rank; a failure is reported on the descriptor as for any quiet put.
pub(crate) fn put_quiet_inline(st: &mut State, a: &PutArgs, bytes: &[u8]) -> bool {
    let op = QUIET_OP | a.md.0 as u64;
    let msg = quiet_inline_msg(a, bytes);
    let mut wire = std::mem::take(&mut st.wire_buf);
    wire.clear();
    msg.encode_into(&mut wire);
    let sent = st.fabric.send(a.target, &wire);
    st.wire_buf = wire;
    if sent.is_err() {
        report_quiet_failure(st, op, a.target, NiFail::Undeliverable);
        return false;
    }
    let quiet_md = st
        .mds
        .get(a.md.0)
        .is_some_and(|m| m.opts.event_send_disable && !m.opts.ct_send);
    if !quiet_md {
        let record = InitOp {
            get: false,
            md: a.md,
            user_ptr: a.user_ptr,
            target: a.target,
            ack: AckReq::None,
            len: bytes.len(),
            send_owed: false,
            match_bits: a.match_bits,
        };
        send_event(st, &record);
    }
    true
}

/// A quiet put failed: an ACK event with the failure on its descriptor, and a failure count.
fn report_quiet_failure(st: &mut State, op: u64, target: Rank, fail: NiFail) {
    let Some(md) = st.mds.get((op & u32::MAX as u64) as u32) else {
        return;
    };
    let (eq, opts) = (md.eq, md.opts);
    let mut ev = Event::simple(EventKind::Ack, None, target, opts.quiet_user_ptr);
    ev.fail = fail;
    st.post(eq, ev);
    if opts.ct.is_some() {
        st.count(opts.ct, false, 1);
    }
}

/// A direct get in flight: what its completion reports to both sides.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirectGet {
    /// The operation, as for any get (`State::ops`).
    op: u64,
    target: Rank,
    pt: PtIndex,
    bits: u64,
    remote_offset: usize,
    len: usize,
}

/// Starts a get.
pub(crate) fn issue_get(st: &mut State, a: GetArgs) {
    if let Err(e) = check_md(st, a.md, a.local_offset, a.len) {
        tracing::warn!("triggered get dropped: {e}");
        return;
    }
    let op = new_op(
        st,
        InitOp {
            get: true,
            md: a.md,
            user_ptr: a.user_ptr,
            target: a.target,
            ack: AckReq::None,
            len: a.len,
            send_owed: false,
            match_bits: a.match_bits,
        },
    );
    let Some(md) = st.mds.get(a.md.0) else {
        return;
    };
    // A direct get where the fabric reads as fast as the target would write, or where the
    // target is as busy as this rank (`read_all`).
    let direct = a
        .published
        .filter(|_| a.read_all || a.len <= st.fabric.direct_get_max());
    if let Some(key) = direct {
        let g = DirectGet {
            op,
            target: a.target,
            pt: a.pt,
            bits: a.match_bits,
            remote_offset: a.remote_offset,
            len: a.len,
        };
        return issue_direct_get(st, g, md.region.clone(), a.local_offset, key);
    }
    let msg = Msg::Get {
        op,
        pt: a.pt,
        bits: a.match_bits,
        remote_offset: a.remote_offset as u64,
        rlength: a.len as u64,
        key: md.region.key().0,
        md_offset: a.local_offset as u64,
    };
    if st.fabric.send(a.target, &msg.encode()).is_err() {
        fail_op(st, op, NiFail::Undeliverable);
    }
}

/// Reads `g`'s bytes of the target's published region `key` into `region` at `offset`: the
/// fabric's one-sided get, no work for the target's agent on the way (SEMANTICS.md §12). Its
/// completion (`direct_get_done`) reports it here and notifies the target.
fn issue_direct_get(st: &mut State, g: DirectGet, region: Region, offset: usize, key: u64) {
    if g.len == 0 {
        // Nothing to read; the target still counts the get.
        return direct_get_done(st, g, true);
    }
    let src = RemoteAddr {
        rank: g.target,
        key: RegionKey(key),
        offset: g.remote_offset,
    };
    match st.fabric.get(&region, offset, g.len, src) {
        Ok(fop) => {
            st.direct_gets.insert(fop, g);
        }
        Err(_) => direct_get_done(st, g, false),
    }
}

/// A direct get finished (`ok`): the target is told (it counts its entry, which stands for
/// having served the get) and the initiator gets its REPLY and counts, as for any get.
pub(crate) fn direct_get_done(st: &mut State, g: DirectGet, ok: bool) {
    let fail = if ok {
        NiFail::Ok
    } else {
        NiFail::Undeliverable
    };
    let notice = Msg::GetNotice {
        pt: g.pt,
        bits: g.bits,
        remote_offset: g.remote_offset as u64,
        rlength: g.len as u64,
        fail,
    };
    // A dead target is reported by the transport; its entry has nobody left to count for.
    let _ = st.fabric.send(g.target, &notice.encode());
    let answer = Answer {
        fail,
        no_ack: false,
        list: Some(List::Priority),
        mlength: if ok { g.len as u64 } else { 0 },
        remote_offset: g.remote_offset as u64,
    };
    on_done(st, g.target, g.op, answer);
}

/// Raises SEND (and CT_SEND) for a put whose buffer may now be reused.
fn raise_send(st: &mut State, op: u64) {
    let Some(o) = st.ops.get_mut(&op) else { return };
    o.send_owed = false;
    let o = *o;
    send_event(st, &o);
}

fn send_event(st: &mut State, o: &InitOp) {
    let Some(md) = st.mds.get(o.md.0) else {
        return;
    };
    let (eq, opts) = (md.eq, md.opts);
    if !opts.event_send_disable {
        let mut ev = Event::simple(EventKind::Send, None, o.target, o.user_ptr);
        ev.match_bits = o.match_bits;
        ev.rlength = o.len as u64;
        st.post(eq, ev);
    }
    if opts.ct_send {
        let amount = if opts.ct_bytes { o.len as u64 } else { 1 };
        st.count(opts.ct, true, amount);
    }
}

/// What the target said about an operation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer {
    pub(crate) fail: NiFail,
    pub(crate) no_ack: bool,
    pub(crate) list: Option<List>,
    pub(crate) mlength: u64,
    pub(crate) remote_offset: u64,
}

impl Answer {
    fn failed(fail: NiFail) -> Answer {
        Answer {
            fail,
            no_ack: false,
            list: None,
            mlength: 0,
            remote_offset: 0,
        }
    }
}

/// The target's answer to operation `op`. A failure always reaches the initiator: as the
/// ACK or REPLY event when one was asked for, else as an ACK event anyway, and as a failure
/// count on the descriptor's counter.
pub(crate) fn on_done(st: &mut State, from: Rank, op: u64, a: Answer) {
    if op & QUIET_OP != 0 {
        if a.fail != NiFail::Ok {
            report_quiet_failure(st, op, from, a.fail);
        }
        return;
    }
    let Some(o) = st.ops.get(&op).copied() else {
        return;
    };
    if o.target != from {
        return;
    }
    if o.send_owed {
        raise_send(st, op);
    }
    st.ops.remove(&op);
    st.unuse_md(o.md);
    let Some(md) = st.mds.get(o.md.0) else {
        return;
    };
    let (eq, opts) = (md.eq, md.opts);
    let ok = a.fail == NiFail::Ok;
    let (kind, counted) = if o.get {
        (EventKind::Reply, opts.ct_reply)
    } else {
        (
            EventKind::Ack,
            opts.ct_ack && o.ack != AckReq::None && !(ok && a.no_ack),
        )
    };
    let wanted = o.get || (o.ack == AckReq::Ack && !a.no_ack);
    if wanted || !ok {
        let mut ev = Event::simple(kind, None, o.target, o.user_ptr);
        ev.fail = a.fail;
        ev.match_bits = o.match_bits;
        ev.rlength = o.len as u64;
        ev.mlength = a.mlength;
        ev.remote_offset = a.remote_offset;
        ev.list = a.list;
        st.post(eq, ev);
    }
    if counted || (!ok && opts.ct.is_some()) {
        let amount = if opts.ct_bytes { a.mlength } else { 1 };
        st.count(opts.ct, ok, amount);
    }
}

/// Completes `op` as failed without an answer from the target.
pub(crate) fn fail_op(st: &mut State, op: u64, fail: NiFail) {
    if let Some(o) = st.ops.get(&op).copied() {
        on_done(st, o.target, op, Answer::failed(fail));
    }
}

/// A target died: everything waiting on it fails as undeliverable.
pub(crate) fn on_peer_failed(st: &mut State, rank: Rank) {
    let mut dead: Vec<u64> = st
        .ops
        .iter()
        .filter(|(_, o)| o.target == rank)
        .map(|(&k, _)| k)
        .collect();
    dead.sort_unstable();
    for op in dead {
        fail_op(st, op, NiFail::Undeliverable);
    }
    // Transfers this rank serves for the dead peer complete through the transport (with an
    // error), and `target::finish` settles them. Direct gets from it failed with their
    // operations just now: their records go.
    st.direct_gets.retain(|_, g| g.target != rank);
}

/// Bytes of a put that travel inside its header message.
pub(crate) fn inline_capacity() -> usize {
    rdcoll_transport::MAX_MESSAGE_SIZE - PUT_HEADER
}

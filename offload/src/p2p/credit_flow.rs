//! Eager credit on the engine's side: the portal where credit comes back, returning what is
//! due, and receives that wait for a sender blocked behind its own messages (the bookkeeping is
//! `credits`), which the sender's notices tell of when it waits for a nonblocking send.

use rdcoll_transport::{Rank, Region};

use super::{recv, Engine, Inner, Req, ReqId, Source, CREDIT};
use crate::error::{OffloadError, Result};
use crate::types::{AckReq, EqHandle, List, MatchId, MeOptions, MeSpec, PtIndex, PutArgs};
use crate::{Event, Ni};

/// Header data of a notice on the credit portal that the sender now waits for the message
/// its match bits name (a credit return's header data is a running total, far below).
pub(super) const WAITS_NOTICE: u64 = 1 << 63;

/// The portal where receivers return eager credit, its events going to `eq`: one entry that
/// takes zero-byte puts from anyone (nothing is deposited in `empty`, the PUT event tells
/// who and how much). Portal indices are allocated alike on every rank, so this one's is the
/// peers' too.
pub(super) fn credit_portal(ni: &Ni, eq: EqHandle, empty: &Region) -> Result<PtIndex> {
    let pt = ni.pt_alloc(Some(eq), false)?;
    let entry = MeSpec {
        region: empty.clone(),
        match_bits: 0,
        ignore_bits: !0,
        match_id: MatchId::Any,
        options: MeOptions {
            op_get: false,
            ack_disable: true,
            event_link_disable: true,
            ..MeOptions::default()
        },
        user_ptr: CREDIT,
    };
    ni.me_append(pt, List::Priority, entry)?;
    Ok(pt)
}

impl Engine {
    /// Returns the eager credit that is due to senders (see `credits`): one zero-byte put
    /// each, its header data the running total received from that sender.
    #[inline]
    pub(super) fn return_credits(&self) {
        if self.credits.any_due() {
            self.send_credit_returns();
        }
    }

    #[cold]
    #[inline(never)]
    fn send_credit_returns(&self) {
        let mut due = Vec::new();
        self.credits.take_due(&mut due);
        for (peer, total) in due {
            let a = PutArgs {
                md: self.credit_md,
                local_offset: 0,
                len: 0,
                ack_req: AckReq::None,
                target: peer,
                pt: self.pt_credit,
                match_bits: 0,
                remote_offset: 0,
                user_ptr: CREDIT,
                hdr_data: total,
            };
            if let Err(e) = self.ni.put_inline_unsignalled(a, &[]) {
                // The peer is gone (its sends fail on their own) or the NI is closing.
                tracing::debug!("eager credit for rank {peer} not returned: {e}");
            }
        }
    }

    /// Tells the receiver of send `id` that its sender now waits for it, if it is a short
    /// `isend` that found no eager credit (its header did not say so, as a blocking send's
    /// does): a zero-byte put to the receiver's credit portal naming the message (its match
    /// bits, nonce included), once. The receiver's NI marks the queued header as a blocking
    /// send's as the notice arrives (`Ni::take_waits_notices`), so that a receive there that
    /// waits for a later message of this rank fails with `SenderBlocked` instead of waiting
    /// for ever.
    pub(super) fn notice_sender_waits(&self, inner: &mut Inner, id: ReqId) {
        let Some(Req::Send(s)) = inner.reqs.get_mut(id.0) else {
            return;
        };
        let Some((dest, bits)) = s.take_notice() else {
            return;
        };
        let a = PutArgs {
            md: self.credit_md,
            local_offset: 0,
            len: 0,
            ack_req: AckReq::None,
            target: dest,
            pt: self.pt_credit,
            match_bits: bits,
            remote_offset: 0,
            user_ptr: CREDIT,
            hdr_data: WAITS_NOTICE,
        };
        if let Err(e) = self.ni.put_inline_unsignalled(a, &[]) {
            // The peer is gone (the send fails on its own) or the NI is closing.
            tracing::debug!("notice that this rank waits not sent to rank {dest}: {e}");
        }
    }

    /// A put on the credit portal: returned credit (a sender's notice that it waits was
    /// applied by the NI as it arrived, `Ni::take_waits_notices`).
    pub(super) fn on_credit_put(&self, ev: &Event) {
        if ev.hdr_data & WAITS_NOTICE == 0 {
            self.credits.returned_by(ev.peer, ev.hdr_data);
        }
    }

    /// The sender that keeps a receive (or probe) from `source`, which matches none of the
    /// queued messages, waiting for ever: it waits in a blocking send for one of its messages
    /// queued here (`bits::SENDER_WAITS`, sent without eager credit), so it cannot send a later
    /// one. From any source: only if every other rank is so blocked (the last is named). A
    /// cheap look first, then the NI's books.
    pub(super) fn blocked_sender(&self, source: Source) -> Option<Rank> {
        let waiting = self
            .waiting_headers
            .load(std::sync::atomic::Ordering::Relaxed);
        let blocked = |p| self.ni.sender_waits_behind(self.pt_msg, p);
        match source {
            _ if waiting == 0 => None,
            Source::Rank(p) => blocked(p).then_some(p),
            Source::Any => {
                let me = self.rank();
                let mut others = (0..self.size() as Rank).filter(|&p| p != me);
                let all = waiting + 1 >= self.size() && others.clone().all(blocked);
                all.then(|| others.next_back()).flatten()
            }
        }
    }

    /// Withdraws receive `id` if it waits for a message its sender cannot send: the sender
    /// waits in a blocking send that found no eager credit, for a message queued here that
    /// this receive does not match (see `credits`). Its error then; `None` otherwise (or if
    /// the receive matched meanwhile).
    pub(super) fn withdraw_if_sender_blocked(&self, id: ReqId) -> Option<OffloadError> {
        if self
            .waiting_headers
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0
        {
            return None;
        }
        let mut inner = self.inner.lock();
        let Some(Req::Recv(r)) = inner.reqs.get_mut(id.0) else {
            return None;
        };
        let sender = self.blocked_sender(recv::waiting_for(r)?)?;
        recv::cancel(self, r)?.ok()?;
        inner.reqs.remove(id.0);
        Some(OffloadError::SenderBlocked {
            sender,
            limit: self.cfg.unexpected_max,
        })
    }
}

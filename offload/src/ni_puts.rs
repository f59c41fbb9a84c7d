//! The network interface's data movement calls from the initiator's side: puts (with
//! acknowledgements, inline, unsignalled) and plain RDMA puts and gets.

use rdcoll_transport::{Region, RemoteAddr};

use crate::error::{invalid, OffloadError, Result};
use crate::types::{CtHandle, PutArgs};
use crate::Mode;

use crate::{Ni, RdmaPut};

impl Ni {
    /// Puts `len` bytes of a memory descriptor to a target's portal table entry.
    pub fn put(&self, a: PutArgs) -> Result<()> {
        self.with(|st| {
            crate::initiator::check_md(st, a.md, a.local_offset, a.len)?;
            crate::initiator::issue_put(st, a);
            Ok(())
        })
    }

    /// Puts `bytes` (at most `inline_max` of them) to a target's portal table entry, copying
    /// them into the header message now: the caller's buffer is free again when this returns,
    /// and SEND is raised at once. `a.md` receives the operation's events and counts;
    /// `a.local_offset` and `a.len` are ignored. A target that cannot be reached is an error
    /// here (as well as a failed ACK on `a.md`).
    pub fn put_inline(&self, a: PutArgs, bytes: &[u8]) -> Result<()> {
        if a.ack_req == crate::types::AckReq::None {
            return self.put_inline_quiet(a, bytes);
        }
        self.with(|st| {
            if bytes.len() > st.cfg.inline_max {
                return Err(invalid(format!(
                    "{} bytes do not fit an inline put (at most {})",
                    bytes.len(),
                    st.cfg.inline_max
                )));
            }
            st.mds.must(a.md.0)?;
            let a = PutArgs {
                len: bytes.len(),
                local_offset: 0,
                ..a
            };
            if crate::initiator::issue_put_from(st, a, Some(bytes)) {
                Ok(())
            } else {
                Err(OffloadError::Transport(
                    rdcoll_transport::TransportError::PeerFailed(a.target),
                ))
            }
        })
    }

    /// An inline put with no acknowledgement whose descriptor raises no SEND event and counts
    /// no sends (the caller bound it so): nothing of the state changes unless it fails, so a
    /// short one is encoded on the stack and sent without taking the lock. A thread's messages
    /// still leave in its program order. A failure is reported on the descriptor, as for any
    /// quiet put, and returned.
    #[inline]
    pub fn put_inline_unsignalled(&self, a: PutArgs, bytes: &[u8]) -> Result<()> {
        if a.ack_req != crate::types::AckReq::None
            || a.remote_offset != 0
            || bytes.len() > self.inline_max
        {
            return self.put_inline(a, bytes);
        }
        // The header alone on the stack; the transport takes it and `bytes` as two parts
        // (a 32 KiB eager message was copied into a wire buffer first, under the state lock).
        let op = crate::initiator::QUIET_OP | a.md.0 as u64;
        let sent = match crate::wire::quiet_header_short(
            op,
            a.pt,
            a.match_bits,
            a.hdr_data,
            bytes.len(),
        ) {
            Some(header) => self.fabric.send_parts(a.target, &[&header, bytes]),
            None => return self.put_unsignalled_long(a, op, bytes),
        };
        if sent.is_ok() {
            return Ok(());
        }
        self.unsignalled_put_failed(&a)
    }

    /// [`put_inline_unsignalled`](Ni::put_inline_unsignalled) with the long header layout (a
    /// portal, descriptor or length past the short one's fields).
    #[inline(never)]
    fn put_unsignalled_long(&self, a: PutArgs, op: u64, bytes: &[u8]) -> Result<()> {
        let mut header = crate::wire::StackBuf::<{ crate::wire::PUT_HEADER }>::new();
        if !crate::wire::encode_quiet_header(
            &mut header,
            op,
            a.pt,
            a.match_bits,
            a.hdr_data,
            bytes.len(),
        ) {
            return self.put_inline(a, bytes);
        }
        match self.fabric.send_parts(a.target, &[header.bytes(), bytes]) {
            Ok(()) => Ok(()),
            Err(_) => self.unsignalled_put_failed(&a),
        }
    }

    /// [`put_inline_unsignalled`](Ni::put_inline_unsignalled) that also publishes `region`
    /// of this rank's to the target: the message says that `region` holds the rest of what
    /// the put is the start of, and gets that name it (`GetArgs::published`, from the
    /// target's `DirectDone::published`) read it directly instead of asking this NI to serve
    /// them (SEMANTICS.md §12). The caller keeps `region` registered, and a get entry over all
    /// of it appended, until those gets are counted there.
    pub fn put_inline_published(&self, a: PutArgs, bytes: &[u8], region: &Region) -> Result<()> {
        if a.ack_req != crate::types::AckReq::None
            || a.remote_offset != 0
            || bytes.len() > self.inline_max
        {
            return Err(invalid(
                "a publishing put is inline, at offset 0, and asks for no acknowledgement",
            ));
        }
        let op = crate::initiator::QUIET_OP | a.md.0 as u64;
        let mut header = crate::wire::StackBuf::<{ crate::wire::QUIET_HEADER_MAX }>::new();
        let key = region.key().0;
        if !crate::wire::encode_published_header(
            &mut header,
            op,
            a.pt,
            a.match_bits,
            a.hdr_data,
            key,
            bytes.len(),
        ) {
            return Err(invalid(
                "a publishing put's descriptor or length is out of range",
            ));
        }
        match self.fabric.send_parts(a.target, &[header.bytes(), bytes]) {
            Ok(()) => Ok(()),
            Err(_) => self.unsignalled_put_failed(&a),
        }
    }

    /// Reports a failed [`put_inline_unsignalled`](Ni::put_inline_unsignalled) on its
    /// descriptor; out of line, as the put's path is the latency path.
    #[cold]
    #[inline(never)]
    fn unsignalled_put_failed(&self, a: &PutArgs) -> Result<()> {
        let mut st = self.shared.state.lock();
        crate::initiator::report_put_failure(&mut st, a);
        Err(OffloadError::Transport(
            rdcoll_transport::TransportError::PeerFailed(a.target),
        ))
    }

    /// [`put_inline`](Ni::put_inline) without acknowledgement: no operation to track, so only
    /// the descriptor's own SEND event or count (if it asks for one) can change anything.
    fn put_inline_quiet(&self, a: PutArgs, bytes: &[u8]) -> Result<()> {
        let mut st = self.shared.state.lock();
        if bytes.len() > st.cfg.inline_max {
            return Err(invalid(format!(
                "{} bytes do not fit an inline put (at most {})",
                bytes.len(),
                st.cfg.inline_max
            )));
        }
        st.mds.must(a.md.0)?;
        let sent = crate::initiator::put_quiet_inline(&mut st, &a, bytes);
        self.release_fired(st)?;
        if sent {
            Ok(())
        } else {
            Err(OffloadError::Transport(
                rdcoll_transport::TransportError::PeerFailed(a.target),
            ))
        }
    }

    /// An RDMA write straight into a peer's region, with no matching and no work for the
    /// target's agent (the one-sided puts of the collectives): the fabric's `put`, or with
    /// `flag` its `put_flag` (the data, then the flag byte after it). Returns
    /// [`RdmaPut::Done`] when the backend is done with it at once (`Fabric::put_now`: `src`
    /// is free, the write lands before this rank's later writes to that peer; nothing to
    /// count, no lock taken), else [`RdmaPut::Counted`]: its completion, success or failure,
    /// will be counted on `ct`, and `src` must stay untouched until then.
    pub fn rdma_put(
        &self,
        src: &Region,
        src_offset: usize,
        len: usize,
        dst: RemoteAddr,
        flag: Option<u8>,
        ct: CtHandle,
    ) -> Result<RdmaPut> {
        let op = match self.fabric.put_now(src, src_offset, len, dst, flag)? {
            rdcoll_transport::PutStatus::Done => return Ok(RdmaPut::Done),
            rdcoll_transport::PutStatus::Pending(op) => op,
        };
        self.count_raw(op, ct, dst.rank)?;
        Ok(RdmaPut::Counted)
    }

    /// An RDMA read of `len` bytes at `src` in a peer's region into `dst` at `dst_offset`, with
    /// no matching and no work for the target's agent (the receiver-initiated pulls of the
    /// multicast): the fabric's `get`. Its completion, success or failure, is counted on `ct`;
    /// `dst` must stay untouched until then.
    pub fn rdma_get(
        &self,
        dst: &Region,
        dst_offset: usize,
        len: usize,
        src: RemoteAddr,
        ct: CtHandle,
    ) -> Result<()> {
        // Checked before the operation starts: a counter that is not there could count nothing.
        self.with(|st| st.cts.must(ct.0).map(|_| ()))?;
        let op = self.fabric.get(dst, dst_offset, len, src)?;
        self.count_raw(op, ct, src.rank)
    }

    /// Records that fabric operation `op` with `peer`'s memory is counted on `ct`, or counts
    /// it now if the agent has already seen it complete (or `peer` fail).
    fn count_raw(
        &self,
        op: rdcoll_transport::OpId,
        ct: CtHandle,
        peer: rdcoll_transport::Rank,
    ) -> Result<()> {
        let mut st = self.shared.state.lock();
        st.cts.must(ct.0)?;
        // The agent may have seen the completion (or the peer's failure) before this record
        // existed.
        let early = st.early_completions.remove(&op);
        let peer_failed = st.failed_peers.get(peer as usize).copied().unwrap_or(false);
        match early.or(peer_failed.then_some(false)) {
            Some(ok) => {
                st.count(Some(ct), ok, 1);
                let fired = st.fire_ready();
                drop(st);
                if self.shared.mode == Mode::Thread {
                    self.shared.changed.notify_all();
                }
                fired?;
            }
            None => {
                st.raw_ops.insert(op, (ct, peer));
            }
        }
        Ok(())
    }
}

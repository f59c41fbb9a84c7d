//! Completions and received messages: what an ofi rank does with each entry of its completion
//! queue (a message for the owner, a backend message to act on, a send slot or receive buffer
//! handed back, a one-sided operation finished or failed).

use std::time::Instant;

use rdcoll_ofi_sys as fi;

use super::keys::RemoteMr;
use super::post::Completion;
use super::state::{State, Waiting, RECV_BIT, SLOT_BIT};
use super::wire::{self, Kind, Parsed, STATUS_BAD_KEY, STATUS_OK, STATUS_OUT_OF_RANGE};
use crate::error::{Result, TransportError};
use crate::types::{Event, Payload, Rank, RegionKey};

/// A user's message left in a receive buffer, to be lent to the caller.
pub(crate) struct Lent {
    pub(crate) src: Rank,
    pub(crate) data: *const u8,
    pub(crate) len: usize,
    pub(crate) buffer: usize,
}

/// How far ahead of the next expected message one from a peer may be: messages that overtook
/// a large one (completed late by the provider) wait, copied, until its turn; a stream further
/// ahead than this fails the peer instead of holding up to this many copies.
const STASH_AHEAD: u64 = 1 << 16;

/// Most completions handled per call, so a flood cannot hold the lock for long.
const DRAIN_BUDGET: usize = 64;

impl State {
    /// Handles what the completion queue holds. With `lend`, stops at the first user message
    /// that can go straight to the caller (nothing older is waiting in the event queue) and
    /// returns it, its buffer held; every other user message is copied to the event queue.
    pub(crate) fn drain(&mut self, lend: bool) -> Result<Option<Lent>> {
        if self.stashed > 0 {
            for src in 0..self.size {
                self.release_stash(src);
            }
        }
        for _ in 0..DRAIN_BUDGET {
            let Some(c) = self.prov.next_completion()? else {
                // Everything that arrived is in: a peer found unreachable is failed now.
                self.fail_unreachable();
                break;
            };
            if let Some(lent) = self.on_completion(c, lend) {
                return Ok(Some(lent));
            }
        }
        self.flush();
        Ok(None)
    }

    fn on_completion(&mut self, c: Completion, lend: bool) -> Option<Lent> {
        if c.context.is_null() {
            return None;
        }
        // SAFETY: every operation this backend posts carries an OpContext it owns.
        let token = unsafe { (*(c.context as *const super::post::OpContext)).token };
        if token & RECV_BIT != 0 {
            return self.on_receive(c, (token & !RECV_BIT) as usize, lend);
        }
        if token & SLOT_BIT != 0 {
            let i = (token & !SLOT_BIT) as usize;
            self.free_slots.push(i);
            if c.err != 0 {
                let dest = self.slots[i].dest;
                self.lose_peer(dest);
            }
            self.flush();
            return None;
        }
        self.on_rma(token, c.err);
        None
    }

    fn on_receive(&mut self, c: Completion, buffer: usize, lend: bool) -> Option<Lent> {
        let mut lent = None;
        if c.err != 0 && c.err != libc::ECANCELED && !c.buf.is_null() {
            // A message this rank will never see: its sender's later ones wait behind it.
            tracing::warn!(
                rank = self.rank,
                error = c.err,
                len = c.len,
                "ofi: a receive completed with an error"
            );
        }
        if c.err == 0 && c.flags & fi::FI_RECV as u64 != 0 && !c.buf.is_null() && c.len > 0 {
            // SAFETY: the provider says `len` bytes of a message landed at `buf`, inside this
            // receive buffer, which is not reposted before the message is handled.
            let bytes = unsafe { std::slice::from_raw_parts(c.buf, c.len) };
            match wire::parse(bytes) {
                Some(m) if (m.src as usize) < self.size && !self.gone[m.src as usize] => {
                    let src = m.src as usize;
                    self.last_heard[src] = Instant::now();
                    if m.seq == self.recv_seq[src] {
                        self.recv_seq[src] += 1;
                        lent = self.accept(m, lend.then_some(buffer));
                        if lent.is_none() {
                            self.release_stash(src);
                        }
                    } else if m.seq > self.recv_seq[src] + STASH_AHEAD {
                        // Only a provider that lost a message, or a peer that does not follow
                        // the protocol, gets this far ahead: its stream cannot be put back in
                        // order, and holding it would grow without bound.
                        tracing::warn!(
                            rank = self.rank,
                            peer = m.src,
                            seq = m.seq,
                            expected = self.recv_seq[src],
                            "ofi: a message too far ahead of its turn"
                        );
                        self.fail_peer(m.src);
                    } else if m.seq > self.recv_seq[src]
                        && self.stash[src].insert(m.seq, bytes.to_vec()).is_none()
                    {
                        self.stashed += 1;
                    }
                }
                Some(_) => {}
                None => tracing::warn!(rank = self.rank, len = c.len, "ofi: unreadable message"),
            }
        }
        if c.flags & fi::FI_MULTI_RECV as u64 != 0 || (c.err != 0 && c.buf.is_null()) {
            self.recv[buffer].posted = false;
            let posted = self.recv.iter().filter(|b| b.posted).count();
            self.fewest_posted = self.fewest_posted.min(posted);
        }
        if lent.is_none() {
            self.maybe_repost(buffer);
        }
        lent
    }

    /// Acts on a message whose turn it is: a user's goes to the caller (lent from `buffer`
    /// when given and nothing older waits in the event queue) or to the event queue.
    fn accept(&mut self, m: Parsed<'_>, buffer: Option<usize>) -> Option<Lent> {
        if m.kind != Kind::User {
            self.on_control(m);
            return None;
        }
        match buffer {
            Some(buffer) if self.events.is_empty() => {
                self.recv[buffer].lent += 1;
                Some(Lent {
                    src: m.src,
                    data: m.payload.as_ptr(),
                    len: m.payload.len(),
                    buffer,
                })
            }
            _ => {
                self.events.push(Event::Message {
                    src: m.src,
                    data: Payload::from_slice(m.payload),
                });
                None
            }
        }
    }

    /// Acts on the messages from `src` that arrived early and whose turn has come.
    pub(crate) fn release_stash(&mut self, src: usize) {
        while let Some(bytes) = self.stash[src].remove(&self.recv_seq[src]) {
            self.stashed -= 1;
            self.recv_seq[src] += 1;
            if let Some(m) = wire::parse(&bytes) {
                self.accept(m, None);
            }
        }
    }

    /// Reposts a receive buffer the provider handed back once no message in it is lent.
    pub(crate) fn maybe_repost(&mut self, buffer: usize) {
        let b = &self.recv[buffer];
        if !b.posted && b.lent == 0 {
            if let Err(e) = self.repost(buffer) {
                tracing::warn!(rank = self.rank, error = %e, "ofi: reposting a receive buffer");
            }
        }
    }

    fn on_rma(&mut self, token: u64, err: i32) {
        let Some(p) = self.postings.remove(&token) else {
            return;
        };
        let req = p.request;
        let at = (req.dest, req.key);
        self.write_ended(&req);
        if let Some(e) = self.remote.get_mut(&at) {
            e.in_flight = e.in_flight.saturating_sub(1);
            if e.in_flight == 0 && (e.gone || e.transient) {
                let kind = if e.gone {
                    Kind::KeyGoneAck
                } else {
                    Kind::KeyRelease
                };
                let queued = self.retry.iter().any(|r| (r.dest, r.key) == at);
                if e.gone || !queued {
                    self.remote.remove(&at);
                    let _ = self.send_control(at.0, kind, [at.1, 0, 0, 0, 0, 0], &[], false);
                }
            }
        }
        let result = match err {
            0 => Ok(()),
            e if e == fi::FI_EACCES as i32 || e == fi::FI_EINVAL as i32 => {
                Err(TransportError::BadKey {
                    rank: req.dest,
                    key: req.key,
                })
            }
            _ => {
                self.lose_peer(req.dest);
                Err(TransportError::PeerFailed(req.dest))
            }
        };
        self.complete(req.op, result);
        self.graveyard.push(req.region);
        self.flush();
    }

    fn reply(&mut self, dest: Rank, kind: Kind, words: [u64; 6], payload: &[u8]) {
        let _ = self.send_control(dest, kind, words, payload, false);
    }

    fn on_control(&mut self, m: Parsed<'_>) {
        let w = m.words;
        match m.kind {
            Kind::User | Kind::Heartbeat => {}
            Kind::Bye => self.fail_peer(m.src),
            Kind::Put => {
                let (imm, flag) = wire::unpack_marks(w[3], w[4], w[5]);
                let (status, region_len) = self.land(w[1], w[2], m.payload, flag);
                if status == STATUS_OK {
                    if let Some(imm) = imm {
                        self.events.push(Event::Immediate { src: m.src, imm });
                    }
                }
                let words = [w[0], status, w[1], w[2], m.payload.len() as u64, region_len];
                self.reply(m.src, Kind::PutAck, words, &[]);
            }
            Kind::PutAck | Kind::GetData => {
                let result = status_result(m.src, w);
                if let (Ok(()), Kind::GetData) = (&result, m.kind) {
                    if let Some(op) = self.ops.get(&w[0]) {
                        if let Waiting::Data { region, offset } = &op.waiting {
                            let r = region.write(*offset, m.payload);
                            self.complete(w[0], r);
                            return;
                        }
                    }
                }
                self.complete(w[0], result);
            }
            Kind::Get => {
                let (status, region_len, data) = self.read_local(w[1], w[2], w[3]);
                let words = [w[0], status, w[1], w[2], w[3], region_len];
                self.reply(m.src, Kind::GetData, words, &data);
            }
            Kind::Notice => {
                let (imm, flag) = wire::unpack_marks(w[3], w[4], w[5]);
                if let Some(v) = flag {
                    if let Ok(r) = self.table.lookup(RegionKey(w[0])) {
                        let _ = r.store_flag((w[1] + w[2]) as usize, v);
                        self.graveyard.push(r);
                    }
                    self.events.wake_all();
                }
                if let Some(imm) = imm {
                    self.events.push(Event::Immediate { src: m.src, imm });
                }
            }
            Kind::KeyQuery => {
                let key = w[0];
                let live = self.table.lookup(RegionKey(key)).ok();
                let words = match (live, self.local.get_mut(&key)) {
                    (Some(r), Some(mr)) if !mr.dying => {
                        self.graveyard.push(r);
                        if !mr.holders.contains(&m.src) {
                            mr.holders.push(m.src);
                        }
                        [
                            key,
                            STATUS_OK,
                            mr.len as u64,
                            mr.remote_base,
                            mr.remote_key,
                            u64::from(mr.transient),
                        ]
                    }
                    (r, _) => {
                        self.graveyard.extend(r);
                        [key, STATUS_BAD_KEY, 0, 0, 0, 0]
                    }
                };
                self.reply(m.src, Kind::KeyInfo, words, &[]);
            }
            Kind::KeyInfo => {
                let at = (m.src, w[0]);
                if w[1] == STATUS_OK {
                    self.remote.insert(
                        at,
                        RemoteMr {
                            len: w[2],
                            remote_base: w[3],
                            remote_key: w[4],
                            in_flight: 0,
                            gone: false,
                            transient: w[5] != 0,
                        },
                    );
                }
                for req in self.parked.remove(&at).unwrap_or_default() {
                    // Without an entry the request fails with BadKey.
                    if !self.post_rma(req) {
                        break;
                    }
                }
            }
            Kind::KeyGone => {
                let at = (m.src, w[0]);
                match self.remote.get_mut(&at) {
                    Some(e) if e.in_flight > 0 => e.gone = true,
                    _ => {
                        self.remote.remove(&at);
                        self.reply(m.src, Kind::KeyGoneAck, [w[0], 0, 0, 0, 0, 0], &[]);
                    }
                }
            }
            Kind::KeyRelease => {
                if let Some(mr) = self.local.get_mut(&w[0]) {
                    mr.holders.retain(|&r| r != m.src);
                }
            }
            Kind::KeyGoneAck => {
                let key = w[0];
                if let Some(mr) = self.local.get_mut(&key) {
                    mr.awaiting.retain(|&r| r != m.src);
                    if mr.dying && mr.awaiting.is_empty() {
                        self.close_local(key);
                    }
                }
            }
        }
    }

    /// Writes an inline put's data (and flag) into this rank's region `key` at `offset`.
    fn land(&mut self, key: u64, offset: u64, data: &[u8], flag: Option<u8>) -> (u64, u64) {
        let Ok(region) = self.table.lookup(RegionKey(key)) else {
            return (STATUS_BAD_KEY, 0);
        };
        let region_len = region.len() as u64;
        let want = data.len() + usize::from(flag.is_some());
        let status = match usize::try_from(offset) {
            Ok(off) if region.check_range(off, want).is_ok() => {
                match region.write(off, data).and_then(|()| match flag {
                    Some(v) => region.store_flag(off + data.len(), v),
                    None => Ok(()),
                }) {
                    Ok(()) => STATUS_OK,
                    Err(_) => STATUS_BAD_KEY,
                }
            }
            _ => STATUS_OUT_OF_RANGE,
        };
        if flag.is_some() {
            self.events.wake_all();
        }
        self.graveyard.push(region);
        (status, region_len)
    }

    /// Reads an inline get's bytes out of this rank's region `key`.
    fn read_local(&mut self, key: u64, offset: u64, len: u64) -> (u64, u64, Vec<u8>) {
        let Ok(region) = self.table.lookup(RegionKey(key)) else {
            return (STATUS_BAD_KEY, 0, Vec::new());
        };
        let region_len = region.len() as u64;
        let mut data = vec![0u8; len.min(super::state::INLINE_MAX as u64) as usize];
        let status = match usize::try_from(offset) {
            Ok(off)
                if len as usize == data.len() && region.check_range(off, data.len()).is_ok() =>
            {
                match region.read(off, &mut data) {
                    Ok(()) => STATUS_OK,
                    Err(_) => STATUS_BAD_KEY,
                }
            }
            _ => STATUS_OUT_OF_RANGE,
        };
        self.graveyard.push(region);
        if status != STATUS_OK {
            data.clear();
        }
        (status, region_len, data)
    }
}

/// The outcome an acknowledgement `[token, status, key, offset, len, region_len]` reports.
fn status_result(src: Rank, w: [u64; 6]) -> Result<()> {
    match w[1] {
        STATUS_OK => Ok(()),
        STATUS_OUT_OF_RANGE => Err(TransportError::OutOfRange {
            rank: src,
            key: w[2],
            offset: w[3],
            len: w[4],
            region_len: w[5],
        }),
        _ => Err(TransportError::BadKey {
            rank: src,
            key: w[2],
        }),
    }
}

//! Runs an RDMC schedule (`crate::schedule`) with ready-for-block flow control (paper 000
//! Section 4.3, paper 001 Section 3).
//!
//! A node announces that it is ready for a block by writing the notice slot it will take it
//! in, how it wants the block moved, and its buffer's key into the sender's mailbox for it
//! (one per peer and receive, each with a flag byte). Only then does the sender act:
//! - [`BcastTransfer::Write`]: it writes the block straight into place in the receiver's
//!   buffer and, once that write has completed, a notice into the slot (message length, block
//!   number, block length, followed by a flag byte that says the block is there);
//! - [`BcastTransfer::Staged`]: it writes the block into the slot's staging buffer in the
//!   receiver's registered area, and the notice after it, without waiting; the receiver
//!   copies the block into place.
//!
//! The receiver checks the notice and frees the slot, which lets it announce its next
//! receive. A node announces at most `SLOTS` receives ahead, before it blocks on anything
//! else, so no transfer starts before its destination is posted, and only a few operations
//! are outstanding per node. Relayers forward blocks from their own buffer.
//!
//! The steps are run in order; a node whose target is not ready yet waits for it, one whose
//! block has not arrived yet waits for that, which is the asynchronous execution of RDMC (a
//! node runs ahead of its neighbours as far as the flow control allows).
//!
//! Why two ways (docs/ALGORITHMS.md, "Broadcast"): on shared
//! memory with a core per rank, a large write into registered memory is copied by both
//! processes at once (the target pulls half), so a direct write finishes first (2 ranks, 1
//! MiB: 0.66x Open MPI's time, staged 2x); where ranks outnumber cores, a direct write costs
//! the page pinning of `process_vm_readv` and a round trip through a descheduled target for
//! each block, and staging, two plain copies and no wait, was 1.3-1.5x faster (4 ranks on 2
//! cores). The receiver chooses, so ranks that see their host differently still agree.

use std::sync::atomic::Ordering;

use rdcoll_offload::p2p::Context;
use rdcoll_offload::CtHandle;
use rdcoll_transport::{
    Rank, Region, RemoteAddr, RemoteRegion, TransportError, REMOTE_REGION_BYTES,
};

use crate::area::Area;
use crate::config::BcastTransfer;
use crate::error::{CollError, Result};
use crate::progress::Waiter;
use crate::schedule::Schedule;
use crate::Puts;

/// Notice slots per rank (receives announced ahead).
pub(crate) const SLOTS: usize = 2;
/// Blocks this large are announced ahead only to the sender of the blocks already announced
/// (see [`Rdmc::run`]).
const ONE_SENDER_FROM: usize = 1 << 20;
/// Bytes of an announcement: the notice slot (with [`STAGED_BIT`]), then the receiver's
/// buffer.
const ANNOUNCEMENT: usize = 1 + REMOTE_REGION_BYTES;
/// Set in an announcement's first byte: write the block into the slot's staging buffer.
const STAGED_BIT: u8 = 0x80;
/// Distance between two mailbox entries (announcement and flag).
const MAILBOX_STRIDE: usize = (ANNOUNCEMENT + 1).next_multiple_of(8);
/// Bytes of a notice: message length, block number, block length.
const NOTICE: usize = 16;
/// Buffers this rank writes announcements and notices from, in turn.
const OUTGOING: usize = 8;
/// Size of one of them (an announcement is the larger record).
const OUTGOING_STRIDE: usize = ANNOUNCEMENT.next_multiple_of(8);
const _: () = assert!(SLOTS <= STAGED_BIT as usize);

/// One communicator's RDMC state: notice slots with their staging buffers, mailboxes, and
/// the counter of this rank's direct writes.
pub(crate) struct Rdmc {
    area: Area,
    /// Capacity of a staging buffer (the largest block).
    slot_cap: usize,
    /// Distance between two slots (staging buffer, notice, flag).
    slot_stride: usize,
    mailboxes: usize,
    outgoing: usize,
    /// For each outgoing buffer, the puts issued when it was last used.
    outgoing_used: [u64; OUTGOING],
    next_outgoing: usize,
    writes: Writes,
}

/// This rank's direct writes of blocks, counted on their own counter (a failed one fails the
/// broadcast, where a failed notification does not).
struct Writes {
    ct: CtHandle,
    issued: u64,
    /// Failures seen so far.
    failed: u64,
}

/// One broadcast's schedule and this rank's place in it.
#[derive(Clone, Copy)]
pub(crate) struct Job<'a> {
    pub(crate) schedule: &'a dyn Schedule,
    /// Node index to rank; node 0 holds the message.
    pub(crate) members: &'a [Rank],
    /// This rank's node.
    pub(crate) me: usize,
    /// Bytes per block.
    pub(crate) block: usize,
    /// How this rank wants its blocks moved.
    pub(crate) transfer: BcastTransfer,
}

/// Where a block goes and what it is.
#[derive(Clone, Copy)]
struct Block {
    index: usize,
    offset: usize,
    len: usize,
}

impl Block {
    /// The notice of this block in a `total`-byte message.
    fn notice(&self, total: usize) -> [u8; NOTICE] {
        let mut out = [0u8; NOTICE];
        out[..8].copy_from_slice(&(total as u64).to_le_bytes());
        out[8..12].copy_from_slice(&(self.index as u32).to_le_bytes());
        out[12..].copy_from_slice(&(self.len as u32).to_le_bytes());
        out
    }
}

impl Rdmc {
    /// Registers the slots (staging buffers of `slot_cap` bytes) and mailboxes, and a counter
    /// for this rank's direct writes. Collective.
    pub(crate) fn new(w: &Waiter, context: Context, slot_cap: usize) -> Result<Rdmc> {
        let n = w.size();
        let slot_stride = (slot_cap + NOTICE + 1).next_multiple_of(64);
        let mailboxes = SLOTS * slot_stride;
        let outgoing = (mailboxes + n * SLOTS * MAILBOX_STRIDE).next_multiple_of(64);
        let area = Area::new(w, context, outgoing + OUTGOING * OUTGOING_STRIDE)?;
        let ct = w.engine().ni().ct_alloc()?;
        Ok(Rdmc {
            area,
            slot_cap,
            slot_stride,
            mailboxes,
            outgoing,
            outgoing_used: [0; OUTGOING],
            next_outgoing: 0,
            writes: Writes {
                ct,
                issued: 0,
                failed: 0,
            },
        })
    }

    /// The largest block the staging buffers take.
    pub(crate) fn slot_cap(&self) -> usize {
        self.slot_cap
    }

    /// The counter this state's writes are counted on (freed with the communicator).
    pub(crate) fn counter(&self) -> CtHandle {
        self.writes.ct
    }

    fn staging(&self, slot: usize) -> usize {
        slot * self.slot_stride
    }
    fn notice_at(&self, slot: usize) -> usize {
        self.staging(slot) + self.slot_cap
    }
    /// The mailbox entry at this rank where `peer` announces its `nth` receive from us.
    fn mailbox(&self, peer: Rank, nth: u64) -> usize {
        self.mailboxes + (peer as usize * SLOTS + (nth % SLOTS as u64) as usize) * MAILBOX_STRIDE
    }

    /// Runs `job.schedule` for this rank over `buf`.
    pub(crate) fn run(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        job: &Job<'_>,
        buf: &mut [u8],
    ) -> Result<()> {
        let Job {
            schedule,
            members,
            me,
            block,
            transfer,
        } = *job;
        if block == 0 || block > self.slot_cap {
            return Err(CollError::InvalidArgument(format!(
                "a {block}-byte block does not fit the {}-byte staging buffers",
                self.slot_cap
            )));
        }
        let total = buf.len();
        let block_of = |index: usize| Block {
            index,
            offset: index * block,
            len: block.min(total.saturating_sub(index * block)),
        };
        // `buf` is borrowed mutably for this whole call and only touched through this region
        // from here on: transfers into it (each announced by this rank and complete before
        // its notice arrives) and out of it (complete before the puts are waited for below).
        // SAFETY: none is in flight when `mine` is dropped (after a failure its key fails them).
        let mine = unsafe { w.fabric().register_memory(buf.as_mut_ptr(), total)? };
        let steps: Vec<_> = (0..schedule.steps())
            .map(|s| schedule.step(me, s))
            .collect();
        let incoming: Vec<(Rank, u64)> = {
            let mut count = vec![0u64; members.len()];
            steps
                .iter()
                .filter_map(|s| s.recv)
                .map(|t| {
                    let nth = count[t.peer];
                    count[t.peer] += 1;
                    (members[t.peer], nth)
                })
                .collect()
        };
        let engine = w.engine();
        let one_sender = block >= ONE_SENDER_FROM && engine.ranks_here() < engine.size();
        let mut sent = vec![0u64; members.len()];
        let (mut received, mut announced) = (0usize, 0usize);
        for step in &steps {
            while announced < incoming.len() && announced < received + SLOTS {
                // Across hosts, large blocks: ahead only of blocks from the same sender.
                // Blocks from two senders at once share this rank's link, each arriving at
                // half speed, and the lag spreads (simulated binomial pipeline, 8-64 ranks,
                // 256 blocks of 1 MiB: 1.4-1.6 transfers' time with two ahead from anyone,
                // 1.06-1.08 like this; the bound is 1.01-1.02). On one host no link limits,
                // and the wait for the announcement only costs (tcp over loopback, 4 ranks:
                // 1.1-1.2x the time at 16-64 MiB); below [`ONE_SENDER_FROM`] a block is short
                // beside that wait.
                let other_sender =
                    announced > received && incoming[announced].0 != incoming[announced - 1].0;
                if other_sender && one_sender {
                    break;
                }
                let (from, nth) = incoming[announced];
                let slot = announced % SLOTS;
                self.announce(w, puts, &mine, (from, nth), slot, transfer)?;
                announced += 1;
            }
            if let Some(t) = step.send {
                let nth = sent[t.peer];
                sent[t.peer] += 1;
                self.send(w, puts, &mine, (members[t.peer], nth), block_of(t.block))?;
            }
            if let Some(t) = step.recv {
                let (from, nth) = incoming[received];
                let slot = received % SLOTS;
                self.receive(w, &mine, (from, nth), slot, block_of(t.block), transfer)?;
                received += 1;
            }
        }
        // Every write out of `buf` must be done before it is handed back.
        w.puts_done(puts.ct, puts.issued)?;
        drop(mine);
        Ok(())
    }

    /// Writes `data` from the next outgoing buffer to `at`, with `flag` after it.
    fn put_outgoing(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        data: &[u8],
        at: RemoteAddr,
        flag: u8,
    ) -> Result<()> {
        let h = self.next_outgoing;
        self.next_outgoing = (h + 1) % OUTGOING;
        w.puts_done(puts.ct, self.outgoing_used[h])?;
        let from = self.outgoing + h * OUTGOING_STRIDE;
        self.area.local().write(from, data)?;
        puts.put(w, self.area.local(), from, data.len(), at, Some(flag))?;
        self.outgoing_used[h] = puts.issued;
        Ok(())
    }

    /// Tells `from` that this rank is ready for its `nth` block, to be noticed in `slot` and
    /// moved as `transfer` says.
    fn announce(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        mine: &Region,
        (from, nth): (Rank, u64),
        slot: usize,
        transfer: BcastTransfer,
    ) -> Result<()> {
        let mut entry = [0u8; ANNOUNCEMENT];
        entry[0] = slot as u8;
        if transfer == BcastTransfer::Staged {
            entry[0] |= STAGED_BIT;
        }
        entry[1..].copy_from_slice(&mine.remote().to_bytes());
        let at = self.area.at(from, self.mailbox(w.rank(), nth));
        self.put_outgoing(w, puts, &entry, at, flag_of(nth))
    }

    /// Once `to` has announced a slot for `b` (our `nth` transfer to it), moves `b` as it asked
    /// and notices it.
    fn send(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        mine: &Region,
        (to, nth): (Rank, u64),
        b: Block,
    ) -> Result<()> {
        let entry = self.mailbox(to, nth);
        let flag = flag_of(nth);
        let ready = self.area.flag(entry + ANNOUNCEMENT);
        w.until(to, &|| ready.load(Ordering::Acquire) != 0)?;
        let got = ready.load(Ordering::Acquire);
        if got != flag {
            return Err(CollError::Mismatch(format!(
                "rank {to} announced receive {got}, expected {flag}: the ranks' broadcasts are \
                 out of step"
            )));
        }
        let mut bytes = [0u8; ANNOUNCEMENT];
        self.area.local().read(entry, &mut bytes)?;
        ready.store(0, Ordering::Relaxed);
        let slot = (bytes[0] & !STAGED_BIT) as usize;
        let dest = RemoteRegion::from_bytes(&bytes[1..])?;
        let total = mine.len();
        if slot >= SLOTS || dest.rank != w.fabric_rank(to) || dest.len != total {
            return Err(CollError::Mismatch(format!(
                "rank {to} announced slot {slot} of {SLOTS} in a {}-byte buffer of rank {}, \
                 expected a {total}-byte buffer",
                dest.len, dest.rank
            )));
        }
        if bytes[0] & STAGED_BIT != 0 {
            // The notice lands after the block put before it.
            let staging = self.area.at(to, self.staging(slot));
            puts.put(w, mine, b.offset, b.len, staging, None)?;
        } else if b.len > 0 {
            self.writes.block(w, mine, b, dest)?;
        }
        let at = self.area.at(to, self.notice_at(slot));
        self.put_outgoing(w, puts, &b.notice(total), at, flag)
    }

    /// Waits for the notice of block `b` in `slot` (our `nth` receive from `from`), checks it,
    /// and copies the block into place if it was staged.
    fn receive(
        &self,
        w: &Waiter,
        mine: &Region,
        (from, nth): (Rank, u64),
        slot: usize,
        b: Block,
        transfer: BcastTransfer,
    ) -> Result<()> {
        let arrived = self.area.flag(self.notice_at(slot) + NOTICE);
        let flag = flag_of(nth);
        w.until(from, &|| arrived.load(Ordering::Acquire) != 0)?;
        let got = arrived.load(Ordering::Acquire);
        if got != flag {
            return Err(CollError::Mismatch(format!(
                "block arrival {got} in slot {slot}, expected {flag}: the ranks' broadcasts are \
                 out of step"
            )));
        }
        let mut notice = [0u8; NOTICE];
        self.area.local().read(self.notice_at(slot), &mut notice)?;
        let total = mine.len();
        if notice != b.notice(total) {
            let word = |r: std::ops::Range<usize>| {
                let mut v = [0u8; 8];
                v[..r.len()].copy_from_slice(&notice[r]);
                u64::from_le_bytes(v)
            };
            return Err(CollError::Mismatch(format!(
                "received block {} ({} bytes of a {}-byte message), expected block {} ({} bytes \
                 of {total})",
                word(8..12),
                word(12..16),
                word(0..8),
                b.index,
                b.len
            )));
        }
        if transfer == BcastTransfer::Staged {
            mine.copy_from(b.offset, self.area.local(), self.staging(slot), b.len)?;
        }
        arrived.store(0, Ordering::Release);
        Ok(())
    }
}

impl Writes {
    /// Writes block `b` from `mine` into place in `dest`, and waits until it is there.
    fn block(&mut self, w: &Waiter, mine: &Region, b: Block, dest: RemoteRegion) -> Result<()> {
        let ni = w.engine().ni();
        let how = ni.rdma_put(mine, b.offset, b.len, dest.at(b.offset), None, self.ct)?;
        if how == rdcoll_offload::RdmaPut::Done {
            return Ok(());
        }
        self.issued += 1;
        w.puts_done(self.ct, self.issued)?;
        let failed = ni.ct_peek(self.ct)?.failure;
        if failed == self.failed {
            return Ok(());
        }
        self.failed = failed;
        let to = dest.rank;
        Err(CollError::Transport(if w.fabric().is_failed(to) {
            TransportError::PeerFailed(to)
        } else {
            TransportError::Io {
                context: "broadcast".into(),
                message: format!("writing block {} into rank {to} failed", b.index),
            }
        }))
    }
}

/// The flag byte of a peer's `n`th announcement or notice (never 0: 0 means "not yet").
fn flag_of(n: u64) -> u8 {
    (n % 255) as u8 + 1
}

//! Runs an RDMC schedule (`crate::schedule`) over RDMA writes, with ready-for-block flow
//! control (paper 000 Section 4.3, paper 001 Section 3).
//!
//! Each rank has `SLOTS` staging slots of the largest block size in its registered area. A
//! node announces that it is ready for a block by writing the slot it will take it in into the
//! sender's mailbox for it (one per peer and slot, each with a flag byte); only then does the
//! sender write the block into that slot, followed by a header (message length, block number,
//! block length) whose flag byte says it has arrived. The receiver checks the header, copies
//! the block into place in the user's buffer (from which it relays it later) and frees the
//! slot, which lets it announce its next receive. A node announces at most `SLOTS` receives
//! ahead, before it blocks on anything else, so no transfer starts before its destination is
//! posted, and only a few operations are outstanding per node.
//!
//! The steps are run in order; a node whose target is not ready yet waits for it, one whose
//! block has not arrived yet waits for that, which is the asynchronous execution of RDMC (a
//! node runs ahead of its neighbours as far as the flow control allows).

use std::sync::atomic::Ordering;

use rdcoll_offload::p2p::{Context, Engine};
use rdcoll_transport::Rank;

use crate::area::Area;
use crate::error::{CollError, Result};
use crate::progress::Waiter;
use crate::schedule::Schedule;
use crate::Puts;

/// Staging slots per rank (receives announced ahead).
pub(crate) const SLOTS: usize = 2;
/// Bytes of a block header: message length, block number, block length.
const HEADER: usize = 16;
/// Header buffers this rank writes from, in turn.
const HEADERS: usize = 8;

/// One communicator's RDMC state: the staging area.
pub(crate) struct Rdmc {
    area: Area,
    /// Capacity of a slot (the largest block).
    slot_cap: usize,
    stride: usize,
    mailboxes: usize,
    /// `SLOTS` bytes holding 0, 1, ...: what a readiness announcement writes.
    slot_ids: usize,
    headers: usize,
    /// For each header buffer, the puts issued when it was last used.
    header_used: [u64; HEADERS],
    next_header: usize,
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
}

/// Where a block goes and what it is.
#[derive(Clone, Copy)]
struct Block {
    index: usize,
    offset: usize,
    len: usize,
}

impl Rdmc {
    /// Registers the staging area for blocks of up to `slot_cap` bytes. Collective.
    pub(crate) fn new(engine: &Engine, context: Context, slot_cap: usize) -> Result<Rdmc> {
        let n = engine.size();
        let stride = (slot_cap + HEADER + 1).next_multiple_of(64);
        let mailboxes = SLOTS * stride;
        let slot_ids = mailboxes + n * SLOTS * 2;
        let headers = (slot_ids + SLOTS).next_multiple_of(16);
        let area = Area::new(engine, context, headers + HEADERS * HEADER)?;
        let ids: Vec<u8> = (0..SLOTS as u8).collect();
        area.local().write(slot_ids, &ids)?;
        Ok(Rdmc {
            area,
            slot_cap,
            stride,
            mailboxes,
            slot_ids,
            headers,
            header_used: [0; HEADERS],
            next_header: 0,
        })
    }

    /// The largest block this area takes.
    pub(crate) fn slot_cap(&self) -> usize {
        self.slot_cap
    }

    fn slot_data(&self, slot: usize) -> usize {
        slot * self.stride
    }
    fn slot_header(&self, slot: usize) -> usize {
        slot * self.stride + self.slot_cap
    }
    fn slot_flag(&self, slot: usize) -> usize {
        self.slot_header(slot) + HEADER
    }
    /// The mailbox entry at this rank where `peer` announces its `nth` receive from us.
    fn mailbox(&self, peer: Rank, nth: u64) -> usize {
        self.mailboxes + (peer as usize * SLOTS + (nth % SLOTS as u64) as usize) * 2
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
        } = *job;
        if block > self.slot_cap || block == 0 {
            return Err(CollError::InvalidArgument(format!(
                "a {block}-byte block does not fit the {}-byte staging slots",
                self.slot_cap
            )));
        }
        let fabric = w.fabric();
        let total = buf.len();
        let block_of = |index: usize| Block {
            index,
            offset: index * block,
            len: block.min(total.saturating_sub(index * block)),
        };
        // SAFETY: `buf` is borrowed mutably for this whole call and only touched through this
        // region from here on (the copies in, and the puts out of it, which complete before
        // the region is dropped at the end); its key is never given to a peer.
        let mine = unsafe { fabric.register_memory(buf.as_mut_ptr(), total)? };
        let steps: Vec<_> = (0..schedule.steps())
            .map(|s| schedule.step(me, s))
            .collect();
        let incoming: Vec<(Rank, usize, u64)> = {
            let mut count = vec![0u64; members.len()];
            steps
                .iter()
                .filter_map(|s| s.recv)
                .map(|t| {
                    let nth = count[t.peer];
                    count[t.peer] += 1;
                    (members[t.peer], t.block, nth)
                })
                .collect()
        };
        let mut sent = vec![0u64; members.len()];
        let (mut received, mut announced) = (0usize, 0usize);
        let mut result = Ok(());
        for step in &steps {
            self.announce(w, puts, &incoming, received, &mut announced)?;
            if let Some(t) = step.send {
                let nth = sent[t.peer];
                sent[t.peer] += 1;
                self.send(
                    w,
                    puts,
                    &mine,
                    members[t.peer],
                    nth,
                    block_of(t.block),
                    total,
                )?;
            }
            if let Some(t) = step.recv {
                let (from, _, nth) = incoming[received];
                let slot = received % SLOTS;
                let got = self.receive(w, &mine, from, slot, nth, block_of(t.block), total);
                received += 1;
                if let Err(e) = got {
                    result = Err(e);
                    break;
                }
            }
        }
        // Every write out of `buf` must be done before it is handed back.
        let done = w.puts_done(puts.ct, puts.issued);
        drop(mine);
        result.and(done)
    }

    /// Announces the receives that have a free slot, in order.
    fn announce(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        incoming: &[(Rank, usize, u64)],
        received: usize,
        announced: &mut usize,
    ) -> Result<()> {
        let me = w.fabric().rank();
        while *announced < incoming.len() && *announced < received + SLOTS {
            let (from, _, nth) = incoming[*announced];
            let slot = *announced % SLOTS;
            let flag = (nth % 255) as u8 + 1;
            let at = self.area.at(from, self.mailbox(me, nth));
            puts.put(
                w,
                self.area.local(),
                self.slot_ids + slot,
                1,
                at,
                Some(flag),
            )?;
            *announced += 1;
        }
        Ok(())
    }

    /// Sends `b` to `to` (our `nth` transfer to it) once it has announced a slot for it.
    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        mine: &rdcoll_transport::Region,
        to: Rank,
        nth: u64,
        b: Block,
        total: usize,
    ) -> Result<()> {
        let entry = self.mailbox(to, nth);
        let flag = (nth % 255) as u8 + 1;
        let ready = self.area.flag(entry + 1);
        w.until(to, &|| ready.load(Ordering::Acquire) != 0)?;
        let got = ready.load(Ordering::Acquire);
        if got != flag {
            return Err(CollError::Mismatch(format!(
                "rank {to} announced receive {got}, expected {flag}: the ranks' broadcasts are \
                 out of step"
            )));
        }
        let mut slot = [0u8];
        self.area.local().read(entry, &mut slot)?;
        ready.store(0, Ordering::Relaxed);
        let slot = slot[0] as usize;
        if slot >= SLOTS {
            return Err(CollError::Mismatch(format!(
                "rank {to} announced slot {slot} of {SLOTS}"
            )));
        }
        puts.put(
            w,
            mine,
            b.offset,
            b.len,
            self.area.at(to, self.slot_data(slot)),
            None,
        )?;
        // The header goes from one of a few buffers, reused once its last write completed.
        let h = self.next_header;
        self.next_header = (h + 1) % HEADERS;
        w.puts_done(puts.ct, self.header_used[h])?;
        let at = self.headers + h * HEADER;
        let mut header = [0u8; HEADER];
        header[..8].copy_from_slice(&(total as u64).to_le_bytes());
        header[8..12].copy_from_slice(&(b.index as u32).to_le_bytes());
        header[12..].copy_from_slice(&(b.len as u32).to_le_bytes());
        self.area.local().write(at, &header)?;
        // The flag lands after the header, and after the block put before it.
        let hdr = self.area.at(to, self.slot_header(slot));
        puts.put(w, self.area.local(), at, HEADER, hdr, Some(flag))?;
        self.header_used[h] = puts.issued;
        Ok(())
    }

    /// Waits for block `b` in `slot` (our `nth` receive from its sender), checks its header
    /// and copies it into place.
    #[allow(clippy::too_many_arguments)]
    fn receive(
        &self,
        w: &Waiter,
        mine: &rdcoll_transport::Region,
        from: Rank,
        slot: usize,
        nth: u64,
        b: Block,
        total: usize,
    ) -> Result<()> {
        let arrived = self.area.flag(self.slot_flag(slot));
        let flag = (nth % 255) as u8 + 1;
        w.until(from, &|| arrived.load(Ordering::Acquire) != 0)?;
        let got = arrived.load(Ordering::Acquire);
        if got != flag {
            return Err(CollError::Mismatch(format!(
                "block arrival {got} in slot {slot}, expected {flag}: the ranks' broadcasts are \
                 out of step"
            )));
        }
        let mut header = [0u8; HEADER];
        self.area
            .local()
            .read(self.slot_header(slot), &mut header)?;
        let word = |r: std::ops::Range<usize>| {
            let mut v = [0u8; 8];
            v[..r.len()].copy_from_slice(&header[r]);
            u64::from_le_bytes(v)
        };
        let (their_total, index, len) = (word(0..8), word(8..12), word(12..16));
        if their_total != total as u64 || index != b.index as u64 || len != b.len as u64 {
            return Err(CollError::Mismatch(format!(
                "received block {index} ({len} bytes of a {their_total}-byte message), expected \
                 block {} ({} bytes of {total})",
                b.index, b.len
            )));
        }
        mine.copy_from(b.offset, self.area.local(), self.slot_data(slot), b.len)?;
        arrived.store(0, Ordering::Release);
        Ok(())
    }
}

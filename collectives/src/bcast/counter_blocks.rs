//! Small broadcasts by RDMA writes with counter bytes (paper 004, Sections 3 and 4.1).
//!
//! Each rank owns a broadcast buffer of `BLOCKS` fixed blocks of `BLOCK` bytes and a
//! notification buffer of one byte per rank, registered once and known to every rank. A
//! message is cut into chunks of `BLOCK - 1` bytes; each chunk is written bottom-filled into a
//! block, with the communicator's broadcast counter in the block's last byte, down a binomial
//! tree: the counter byte lands after the data (`Fabric::put_flag`), so a receiver that sees
//! the current counter in the last byte of the block it expects knows the block is valid.
//! Blocks are used in order by every rank alike (the same cursor everywhere), and a node
//! forwards each block as soon as it is valid (the paper forwards whole messages; per block
//! keeps the pipeline of a multi-block message going). One-block messages among the ranks of
//! one host (shm, local) go down a flat tree instead when there are at most `FLAT_MAX` ranks
//! or more ranks than cores: there a write is a store into shared memory, cheaper than the
//! poll - or context switch - that each level of a tree costs.
//!
//! Lengths: a message longer than a block, an announcement of a large broadcast and a
//! message of unknown size carry a header ([`Heard`]) right before the first block's counter
//! byte, and the counter byte says so ([`HEADED`]). A one-block message carries its length
//! there instead, in 2 bytes written with it (the paper's blocks carry none; a full header's
//! 8 bytes and second copy cost 5-15 % of a small broadcast). Either way a receiver follows
//! the root's length whatever it expected (so every rank's block cursor stays the same), takes
//! as much of the message as fits, and reports the mismatch.
//!
//! Reuse (Section 3.3, 4.1.4): the buffer is split into `WINDOWS` epochs of blocks. A rank
//! that has consumed every block of an epoch (copied it out, forwarded it, its writes from it
//! completed) resets their counter bytes, and then writes the number of epochs it has
//! finished into its byte of every other rank's notification buffer. A sender writes into a
//! block of epoch `e` of a receiver only once that receiver has finished epoch `e - WINDOWS`,
//! the last one to use the same blocks. As blocks are reset before they are released, a
//! receiver never finds an old counter in a block it expects, whatever the counter's value,
//! also after it wraps (127 values, never 0: 0 is "empty"). A nonzero counter that is not
//! the current one means the ranks are out of step (a broadcast missing on a rank): an error.

use rdcoll_offload::p2p::Context;
use rdcoll_transport::Rank;

use crate::area::Area;
use crate::error::{CollError, Result};
use crate::progress::Waiter;
use crate::Puts;
use crate::{placement, tree};

pub(crate) use super::block_layout::ONE_BLOCK;
use super::block_layout::{Chunk, Layout, BLOCK, BLOCKS, EPOCH, HEADER, SHORT, WINDOWS};

/// Most ranks for which a one-block broadcast on one host goes flat even when every rank has
/// a core of its own (docs/ALGORITHMS.md, "Broadcast").
const FLAT_MAX: usize = 8;

/// The counter byte's bit that says the block carries the header; the counter is the other
/// seven bits.
const HEADED: u8 = 0x80;
/// The header's bit that says a large broadcast (RDMC or shared staging) of the header's
/// length follows.
const FOLLOWS: u64 = 1 << 63;

/// What the root sent. A header sits right before the first block's counter byte, where a
/// receiver finds it without knowing the length (the message's first chunk sits right before
/// it, `HEADER` bytes shorter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Heard {
    /// A message of this many bytes, in the counter blocks.
    Message(u64),
    /// A header alone: a large broadcast (RDMC or shared staging) of this many bytes follows.
    Follows(u64),
}

impl Heard {
    fn from_bytes(bytes: [u8; HEADER]) -> Heard {
        let word = u64::from_le_bytes(bytes);
        if word & FOLLOWS != 0 {
            Heard::Follows(word & !FOLLOWS)
        } else {
            Heard::Message(word)
        }
    }

    /// Bytes that travel in the counter blocks.
    fn payload(self) -> u64 {
        match self {
            Heard::Message(len) => len,
            Heard::Follows(_) => 0,
        }
    }
}

/// Where a receiver puts the root's bytes, and what it expects.
pub(crate) enum Sink<'a> {
    /// A message of this buffer's length. When the root's differs, the broadcast goes
    /// through a buffer of the root's length and as much as fits is copied in.
    Exact(&'a mut [u8]),
    /// An announcement of a large broadcast into this buffer; a message sent in the counter
    /// blocks instead is copied in as far as it fits.
    Announced(&'a mut [u8]),
    /// A message of any length (the root sends a header), into this vector, resized.
    Grow(&'a mut Vec<u8>),
}

impl Sink<'_> {
    /// Message bytes the receiver expects in the counter blocks, and whether with a header.
    #[inline]
    fn expects(&self) -> (usize, bool) {
        match self {
            Sink::Exact(buf) => (buf.len(), buf.len() > ONE_BLOCK),
            Sink::Announced(_) | Sink::Grow(_) => (0, true),
        }
    }
}

/// One communicator's counter-byte broadcast state.
pub(crate) struct CounterBcast {
    blocks: Blocks,
    /// Broadcasts so far.
    seq: u64,
    /// The tree of one-block broadcasts (longer ones go binomial, as in the paper, so that
    /// no rank writes every block to everyone). The same on every rank.
    one_block_shape: tree::Shape,
    /// This rank's place in the last broadcast's tree: most programs broadcast from one
    /// root, and collecting the children cost the root about 280 instructions per broadcast
    /// (callgrind), a quarter of a one-block broadcast.
    place: Option<Place>,
}

/// The broadcast buffer and its reuse state: what moving a broadcast's blocks changes. Apart
/// from [`Place`], so that a broadcast's result is returned straight from moving its blocks:
/// held in a local while the place was put back, it was copied with wider loads than the
/// stores that wrote it, and at the root such a load waits for every store before it,
/// including the one into the child's block that is still fetching its line from the child
/// (`perf annotate` put 84 % of the root's samples in `CounterBcast::bcast` on that load).
struct Blocks {
    area: Area,
    /// Offset of the notification bytes (after the blocks).
    notify: usize,
    /// Blocks used so far (the same on every rank).
    cursor: u64,
    /// Epochs this rank has finished.
    epochs_done: u64,
}

/// A rank's parent and children in the tree of one root and shape.
struct Place {
    root: Rank,
    shape: tree::Shape,
    /// Where the blocks come from (the root itself at the root, unused there).
    parent: Rank,
    /// Where they go, in order.
    children: Vec<Rank>,
}

impl Place {
    fn new(shape: tree::Shape, rel: usize, root: Rank, n: usize) -> Place {
        Place {
            root,
            shape,
            parent: shape
                .parent(rel)
                .map_or(root, |p| tree::absolute(p, root as usize, n) as Rank),
            children: shape
                .children(rel, n)
                .map(|c| tree::absolute(c, root as usize, n) as Rank)
                .collect(),
        }
    }
}

/// Whether one-block messages go down a flat tree (the same answer on every rank). On one host
/// (shm, local: every rank sees the same backend, size and host) with at most `FLAT_MAX` ranks
/// or more ranks than cores. Across hosts (tcp, ofi) with at most `FLAT_MAX` ranks where every
/// rank's host has more ranks than cores, as the ranks agree here (each may see another
/// host): there too each level of a tree costs a context switch (4 ranks over tcp on 2 vCPUs,
/// an 8-byte bcast: 15-29 us flat against 23-32 down the binomial tree; 8 ranks 37-65 against
/// 61-72). Not on a simulated fabric, whose ranks stand for ranks with cores of their own.
/// Collective.
fn flat_for_one_block(w: &Waiter, context: Context) -> Result<bool> {
    let n = w.size();
    if placement::one_host(w.engine()) {
        return Ok(n <= FLAT_MAX || w.crowded());
    }
    if !(3..=FLAT_MAX).contains(&n) || w.fabric().clock_is_virtual() {
        return Ok(false);
    }
    let crowded = crate::area::allgather(w, context, &[w.crowded() as u8])?;
    Ok(crowded.iter().all(|c| c.first() == Some(&1)))
}

impl CounterBcast {
    /// Registers the buffers and exchanges their addresses. Collective.
    pub(crate) fn new(w: &Waiter, context: Context) -> Result<CounterBcast> {
        let notify = BLOCKS * BLOCK;
        let area = Area::new(w, context, notify + w.size())?;
        let one_block_shape = if flat_for_one_block(w, context)? {
            tree::Shape::Flat
        } else {
            tree::Shape::Binomial
        };
        Ok(CounterBcast {
            blocks: Blocks {
                area,
                notify,
                cursor: 0,
                epochs_done: 0,
            },
            seq: 0,
            one_block_shape,
            place: None,
        })
    }

    /// At the root: broadcasts `data` (with a header if it is longer than a block, or if
    /// `sized`: for receivers that do not know the length), or with `follows`, only a header
    /// that announces a large broadcast of that many bytes (`data` then empty).
    pub(crate) fn send(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        data: &[u8],
        follows: Option<u64>,
        sized: bool,
    ) -> Result<()> {
        debug_assert!(follows.is_none() || data.is_empty());
        let header = match follows {
            Some(len) => len | FOLLOWS,
            None => data.len() as u64,
        }
        .to_le_bytes();
        let layout = Layout {
            len: data.len(),
            headed: follows.is_some() || sized || data.len() > ONE_BLOCK,
        };
        // Without a header the message fits one block: its length fits the 2 bytes.
        let short = (data.len() as u16).to_le_bytes();
        let (counter, tail): (u8, &[u8]) = match layout.headed {
            true => (self.next_counter() | HEADED, &header),
            false => (self.next_counter(), &short),
        };
        let me = w.rank();
        let place = Self::place_for(&mut self.place, self.one_block_shape, w, me, layout);
        self.blocks
            .send(w, puts, tail, data, layout, &place.children, counter)
    }

    /// Elsewhere: receives the broadcast from `root` into `sink` (see [`Sink`]) and returns
    /// what the root sent.
    pub(crate) fn receive(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        sink: Sink<'_>,
        root: Rank,
    ) -> Result<Heard> {
        let (expect, headed) = sink.expects();
        let counter = self.next_counter();
        let layout = Layout {
            len: expect,
            headed,
        };
        // The tree of the broadcast this rank expects (the root's may differ: the first
        // block lands in our own buffer either way, and only who is watched depends on it).
        let place = Self::place_for(&mut self.place, self.one_block_shape, w, root, layout);
        let first = self.blocks.first_block(w, place.parent, counter)?;
        match (first & HEADED != 0, sink) {
            (false, Sink::Exact(buf)) if !headed && self.blocks.short_len()? == expect => {
                // The length expected (the common case: the place is already this one).
                self.blocks.relay(w, puts, buf, layout, place, first)?;
                Ok(Heard::Message(expect as u64))
            }
            (false, sink) => {
                // Another length (the root's tree is the one of a one-block message): taken
                // whole, then as much as fits.
                let len = self.blocks.short_len()?;
                let layout = Layout { len, headed: false };
                let place = Self::place_for(&mut self.place, self.one_block_shape, w, root, layout);
                let mut whole = vec![0u8; len];
                self.blocks
                    .relay(w, puts, &mut whole, layout, place, first)?;
                match sink {
                    Sink::Exact(buf) | Sink::Announced(buf) => {
                        let n = len.min(buf.len());
                        buf[..n].copy_from_slice(&whole[..n]);
                    }
                    Sink::Grow(v) => *v = whole,
                }
                Ok(Heard::Message(len as u64))
            }
            (true, sink) => {
                let heard = self.blocks.header()?;
                let payload = host_len(heard.payload())?;
                let layout = Layout {
                    len: payload,
                    headed: true,
                };
                let place = Self::place_for(&mut self.place, self.one_block_shape, w, root, layout);
                match sink {
                    Sink::Exact(buf) | Sink::Announced(buf) if buf.len() == payload => {
                        self.blocks.relay(w, puts, buf, layout, place, first)?;
                    }
                    Sink::Exact(buf) | Sink::Announced(buf) => {
                        let mut whole = vec![0u8; payload];
                        self.blocks
                            .relay(w, puts, &mut whole, layout, place, first)?;
                        let n = payload.min(buf.len());
                        buf[..n].copy_from_slice(&whole[..n]);
                    }
                    Sink::Grow(v) => {
                        v.clear();
                        v.resize(payload, 0);
                        self.blocks.relay(w, puts, v, layout, place, first)?;
                    }
                }
                Ok(heard)
            }
        }
    }

    /// The counter of the next broadcast (1-127, never 0: 0 is "empty"; the root adds
    /// [`HEADED`] to its counter bytes where the first block carries the header).
    #[inline]
    fn next_counter(&mut self) -> u8 {
        self.seq += 1;
        ((self.seq - 1) % 127) as u8 + 1
    }

    /// This rank's place in the tree of a broadcast from `root` laid out as `layout`. (A
    /// function of the fields it uses, so that the place may be borrowed beside `blocks`.)
    #[inline]
    fn place_for<'p>(
        place: &'p mut Option<Place>,
        one_block_shape: tree::Shape,
        w: &Waiter,
        root: Rank,
        layout: Layout,
    ) -> &'p Place {
        let shape = if layout.blocks() == 1 {
            one_block_shape
        } else {
            tree::Shape::Binomial
        };
        if !matches!(place, Some(p) if p.root == root && p.shape == shape) {
            *place = None;
        }
        place.get_or_insert_with(|| {
            let (me, n) = (w.rank() as usize, w.size());
            Place::new(shape, tree::relative(me, root as usize, n), root, n)
        })
    }
}

impl Blocks {
    /// At the root: `data` (and `header`, if the layout has it), chunked into blocks,
    /// written to the children.
    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        tail: &[u8],
        data: &[u8],
        layout: Layout,
        children: &[Rank],
        counter: u8,
    ) -> Result<()> {
        debug_assert_eq!(tail.len(), layout.tail());
        let fabric = w.fabric();
        let blocks = layout.blocks();
        for i in 0..blocks {
            let c = Chunk::new(self.cursor, layout, i);
            let body = &data[c.body.clone()];
            let head: &[u8] = if c.tail > 0 { tail } else { &[] };
            let local = self.area.local();
            // The chunk goes from the caller's buffer straight into the children's blocks
            // where the fabric can store there directly; otherwise it is staged in our own
            // block, once.
            let mut staged = false;
            for &child in children {
                self.wait_released(w, child, c.epoch)?;
                if !staged {
                    let to = self.area.at(child, c.data);
                    if fabric.store_now(&[body, head], to, Some(counter))? {
                        continue;
                    }
                    local.write(c.data, body)?;
                    local.write(c.data + body.len(), head)?;
                    staged = true;
                }
                puts.put(
                    w,
                    local,
                    c.data,
                    c.len(),
                    self.area.at(child, c.data),
                    Some(counter),
                )?;
            }
            self.finish_block(w, puts, &c)?;
        }
        self.cursor += blocks as u64;
        Ok(())
    }

    /// Elsewhere: waits (watching `parent`) for the first block of the next broadcast;
    /// returns its counter byte (with [`HEADED`] if it carries the header).
    #[inline]
    fn first_block(&self, w: &Waiter, parent: Rank, counter: u8) -> Result<u8> {
        let c = self.first_chunk(ONE_BLOCK);
        until_counter(w, parent, self.area.flag(c.flag()), counter, c.slot)
    }

    /// The first chunk of the next broadcast, a one-block message of `len` bytes without
    /// a header (its block and counter byte are those of any broadcast's first chunk).
    #[inline]
    fn first_chunk(&self, len: usize) -> Chunk {
        let layout = Layout { len, headed: false };
        Chunk::new(self.cursor, layout, 0)
    }

    /// The length a one-block message carries in the next broadcast's first block (valid: see
    /// `first_block`; without [`HEADED`]).
    #[inline]
    fn short_len(&self) -> Result<usize> {
        let mut bytes = [0u8; SHORT];
        let at = self.first_chunk(ONE_BLOCK).flag() - SHORT;
        self.area.local().read(at, &mut bytes)?;
        match u16::from_le_bytes(bytes) as usize {
            len if len <= ONE_BLOCK => Ok(len),
            len => Err(CollError::Mismatch(format!(
                "a one-block broadcast says it holds {len} bytes, more than a block: the \
                 ranks' broadcasts are out of step"
            ))),
        }
    }

    /// The header of the next broadcast's first block (valid: see `first_block`).
    fn header(&self) -> Result<Heard> {
        let mut bytes = [0u8; HEADER];
        let at = self.first_chunk(ONE_BLOCK).flag() - HEADER;
        self.area.local().read(at, &mut bytes)?;
        Ok(Heard::from_bytes(bytes))
    }

    /// Elsewhere: the blocks of a broadcast laid out as `layout` (`buf.len()` message bytes),
    /// received from the parent into `buf` and written to the children; `first` is the
    /// counter byte of the first block, found valid by `first_block`.
    fn relay(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        buf: &mut [u8],
        layout: Layout,
        place: &Place,
        first: u8,
    ) -> Result<()> {
        debug_assert_eq!(layout.len, buf.len());
        let blocks = layout.blocks();
        for i in 0..blocks {
            let c = Chunk::new(self.cursor, layout, i);
            // Forwarded as it came (with or without `HEADED`).
            let got = match i {
                0 => first,
                _ => {
                    let byte = self.area.flag(c.flag());
                    until_counter(w, place.parent, byte, first & !HEADED, c.slot)?
                }
            };
            let local = self.area.local();
            for &child in &place.children {
                self.wait_released(w, child, c.epoch)?;
                puts.put(
                    w,
                    local,
                    c.data,
                    c.len(),
                    self.area.at(child, c.data),
                    Some(got),
                )?;
            }
            local.read(c.data, &mut buf[c.body.clone()])?;
            self.finish_block(w, puts, &c)?;
        }
        self.cursor += blocks as u64;
        Ok(())
    }

    /// After chunk `c` is consumed: ends its epoch if it was the epoch's last block.
    #[inline]
    fn finish_block(&mut self, w: &Waiter, puts: &mut Puts, c: &Chunk) -> Result<()> {
        if (c.at + 1).is_multiple_of(EPOCH as u64) {
            self.finish_epoch(w, puts, c.epoch)?;
        }
        Ok(())
    }

    /// Waits until `peer` has released the blocks that epoch `epoch` reuses.
    fn wait_released(&self, w: &Waiter, peer: Rank, epoch: u64) -> Result<()> {
        let Some(need) = (epoch + 1).checked_sub(WINDOWS as u64) else {
            return Ok(());
        };
        let byte = self.area.flag(self.notify + peer as usize);
        // Epoch counts travel as bytes; ranks are never 128 epochs apart (a rank waits for
        // its children within `WINDOWS` epochs, and the trees span every rank).
        w.until(peer, &|| {
            let done = byte.load(std::sync::atomic::Ordering::Acquire);
            done.wrapping_sub(need as u8) as i8 >= 0
        })
    }

    /// Resets the counter bytes of epoch `epoch`'s blocks and tells every rank they may be
    /// written again, once this rank's own writes from them have completed.
    #[inline(never)]
    fn finish_epoch(&mut self, w: &Waiter, puts: &mut Puts, epoch: u64) -> Result<()> {
        w.puts_done(puts.ct, puts.issued)?;
        let first = (epoch * EPOCH as u64 % BLOCKS as u64) as usize;
        for slot in first..first + EPOCH {
            self.area
                .flag(slot * BLOCK + BLOCK - 1)
                .store(0, std::sync::atomic::Ordering::Release);
        }
        self.epochs_done += 1;
        let me = w.rank();
        let done = self.epochs_done as u8;
        for peer in (0..w.size() as Rank).filter(|&p| p != me) {
            let at = self.area.at(peer, self.notify + me as usize);
            puts.notify(w, self.area.local(), at, done);
        }
        Ok(())
    }
}

/// A root's length as a buffer length on this host.
pub(crate) fn host_len(len: u64) -> Result<usize> {
    usize::try_from(len)
        .map_err(|_| CollError::InvalidArgument("the broadcast is too long for this host".into()))
}

/// Waits (watching `parent`) until `byte`, a block's counter byte, is set; returns it, or an
/// error if its counter (without [`HEADED`]) is not `counter`.
fn until_counter(
    w: &Waiter,
    parent: Rank,
    byte: &std::sync::atomic::AtomicU8,
    counter: u8,
    slot: usize,
) -> Result<u8> {
    w.until(parent, &|| {
        byte.load(std::sync::atomic::Ordering::Acquire) != 0
    })?;
    let got = byte.load(std::sync::atomic::Ordering::Acquire);
    if got & !HEADED != counter {
        return Err(out_of_step(slot, got & !HEADED, counter));
    }
    Ok(got)
}

/// The error of a block that carries another broadcast's counter (built out of line: the
/// formatting code would otherwise sit in every block's path).
#[cold]
#[inline(never)]
fn out_of_step(slot: usize, got: u8, counter: u8) -> CollError {
    CollError::Mismatch(format!(
        "broadcast block {slot} carries counter {got}, expected {counter}: the ranks' \
         broadcasts are out of step (different roots, or a broadcast missing on a rank)"
    ))
}

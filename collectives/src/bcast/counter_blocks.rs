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
//! Reuse (Section 3.3, 4.1.4): the buffer is split into `WINDOWS` epochs of blocks. A rank
//! that has consumed every block of an epoch (copied it out, forwarded it, its writes from it
//! completed) resets their counter bytes, and then writes the number of epochs it has
//! finished into its byte of every other rank's notification buffer. A sender writes into a
//! block of epoch `e` of a receiver only once that receiver has finished epoch `e - WINDOWS`,
//! the last one to use the same blocks. As blocks are reset before they are released, a
//! receiver never finds an old counter in a block it expects, whatever the counter's value,
//! also after it wraps (255 values, never 0: 0 is "empty"). A nonzero counter that is not
//! the current one means the ranks are out of step (different lengths or roots): an error.

use rdcoll_offload::p2p::Context;
use rdcoll_offload::p2p::Engine;
use rdcoll_transport::Rank;

use crate::area::Area;
use crate::error::{CollError, Result};
use crate::progress::Waiter;
use crate::Puts;
use crate::{placement, tree};

/// Bytes per block (the last is the counter byte): an 8 KiB message fits one block. With
/// 4 KiB blocks, 4 KiB and 8 KiB broadcasts took two and three blocks and were 1.2x and 1.9x
/// slower than MPICH at 2 ranks; with these, 1.1x and 1.1-1.3x (docs/PERFORMANCE.md,
/// "Broadcast").
pub(crate) const BLOCK: usize = 8192 + 64;
/// Blocks in the broadcast buffer.
pub(crate) const BLOCKS: usize = 32;
/// Epochs the buffer is split into.
const WINDOWS: usize = 2;
/// Blocks per epoch.
const EPOCH: usize = BLOCKS / WINDOWS;

/// Most ranks for which a one-block broadcast on one host goes flat even when every rank has
/// a core of its own (measured: docs/PERFORMANCE.md, "Broadcast").
const FLAT_MAX: usize = 8;

/// Blocks a message of `len` bytes takes: chunks of `block - 1` bytes, at least one.
pub(crate) fn blocks_for(len: usize, block: usize) -> usize {
    len.div_ceil(block - 1).max(1)
}

/// Chunk `i` of a message of `len` bytes in blocks of `block` bytes: where it starts in the
/// message, its length, and where it starts in its block (bottom-filled: it ends right before
/// the counter byte, the block's last).
pub(crate) fn chunk(len: usize, block: usize, i: usize) -> (usize, usize, usize) {
    let lo = i * (block - 1);
    let n = (block - 1).min(len.saturating_sub(lo));
    (lo, n, block - 1 - n)
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

impl CounterBcast {
    /// Registers the buffers and exchanges their addresses. Collective.
    pub(crate) fn new(engine: &Engine, context: Context) -> Result<CounterBcast> {
        let notify = BLOCKS * BLOCK;
        let area = Area::new(engine, context, notify + engine.size())?;
        // Every rank sees the same backend, size and host (shm and local span one host).
        let n = engine.size();
        let one_block_shape = if placement::one_host(engine) && (n <= FLAT_MAX || engine.crowded())
        {
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

    /// Broadcasts `buf` from `root` (every rank passes a buffer of the same length).
    pub(crate) fn bcast(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        buf: &mut [u8],
        root: Rank,
    ) -> Result<()> {
        let fabric = w.fabric();
        let (me, n) = (fabric.rank() as usize, fabric.size());
        self.seq += 1;
        let counter = ((self.seq - 1) % 255) as u8 + 1;
        let blocks = blocks_for(buf.len(), BLOCK);
        let rel = tree::relative(me, root as usize, n);
        let shape = if blocks == 1 {
            self.one_block_shape
        } else {
            tree::Shape::Binomial
        };
        if !matches!(&self.place, Some(p) if p.root == root && p.shape == shape) {
            self.place = None;
        }
        let place = self
            .place
            .get_or_insert_with(|| Place::new(shape, rel, root, n));
        self.blocks
            .move_blocks(w, puts, buf, rel != 0, place, counter, blocks)
    }
}

impl Blocks {
    /// The blocks of one broadcast: received from the parent (unless this rank is the root),
    /// written to the children.
    #[allow(clippy::too_many_arguments)]
    fn move_blocks(
        &mut self,
        w: &Waiter,
        puts: &mut Puts,
        buf: &mut [u8],
        receives: bool,
        place: &Place,
        counter: u8,
        blocks: usize,
    ) -> Result<()> {
        let fabric = w.fabric();
        let (parent, children) = (place.parent, &place.children);
        for i in 0..blocks {
            let at = self.cursor + i as u64;
            let (slot, epoch) = ((at % BLOCKS as u64) as usize, at / EPOCH as u64);
            let (lo, len, in_block) = chunk(buf.len(), BLOCK, i);
            let base = slot * BLOCK;
            let (data, flag) = (base + in_block, base + BLOCK - 1);
            let local = self.area.local();
            // At the root the chunk goes from `buf` straight into the children's blocks where
            // the fabric can store there directly; otherwise it is staged in our own block.
            let mut staged = false;
            if receives {
                let byte = self.area.flag(flag);
                w.until(parent, &|| {
                    byte.load(std::sync::atomic::Ordering::Acquire) != 0
                })?;
                let got = byte.load(std::sync::atomic::Ordering::Acquire);
                if got != counter {
                    return Err(out_of_step(slot, got, counter));
                }
            }
            for &child in children {
                self.wait_released(w, child, epoch)?;
                if !receives && !staged {
                    let to = self.area.at(child, data);
                    if fabric.store_now(&buf[lo..lo + len], to, Some(counter))? {
                        continue;
                    }
                    local.write(data, &buf[lo..lo + len])?;
                    staged = true;
                }
                puts.put(
                    w,
                    local,
                    data,
                    len,
                    self.area.at(child, data),
                    Some(counter),
                )?;
            }
            if receives {
                local.read(data, &mut buf[lo..lo + len])?;
            }
            if (at + 1).is_multiple_of(EPOCH as u64) {
                self.finish_epoch(w, puts, epoch)?;
            }
        }
        self.cursor += blocks as u64;
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
    fn finish_epoch(&mut self, w: &Waiter, puts: &mut Puts, epoch: u64) -> Result<()> {
        w.puts_done(puts.ct, puts.issued)?;
        let first = (epoch * EPOCH as u64 % BLOCKS as u64) as usize;
        for slot in first..first + EPOCH {
            self.area
                .flag(slot * BLOCK + BLOCK - 1)
                .store(0, std::sync::atomic::Ordering::Release);
        }
        self.epochs_done += 1;
        let fabric = w.fabric();
        let me = fabric.rank();
        let done = self.epochs_done as u8;
        for peer in (0..fabric.size() as Rank).filter(|&p| p != me) {
            let at = self.area.at(peer, self.notify + me as usize);
            puts.notify(w, self.area.local(), at, done);
        }
        Ok(())
    }
}

/// The error of a block that carries another broadcast's counter (built out of line: the
/// formatting code would otherwise sit in every block's path).
#[cold]
#[inline(never)]
fn out_of_step(slot: usize, got: u8, counter: u8) -> CollError {
    CollError::Mismatch(format!(
        "broadcast block {slot} carries counter {got}, expected {counter}: the ranks' \
         broadcasts are out of step (different lengths or roots)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Paper 004 Section 4.1.3: "to write 8 bytes in a 10-byte block in a bottom-fill manner,
    /// we start writing these 8 bytes from the 2nd byte onward" (the counter is the 10th).
    #[test]
    fn bottom_fill_matches_the_paper() {
        assert_eq!(blocks_for(8, 10), 1);
        assert_eq!(chunk(8, 10, 0), (0, 8, 1));
        // A message of half a block sits at the bottom, right before the counter byte.
        assert_eq!(chunk(5, 10, 0), (0, 5, 4));
        // An empty message still takes a block: just the counter byte.
        assert_eq!((blocks_for(0, 10), chunk(0, 10, 0)), (1, (0, 0, 9)));
    }

    /// Paper 004 Figure 2: a broadcast of 2 * block_size bytes is split into blocks of
    /// block_size - 1, block_size - 1 and 2 bytes, each with the counter appended.
    #[test]
    fn splitting_matches_the_papers_second_broadcast() {
        let b = BLOCK;
        assert_eq!(blocks_for(2 * b, b), 3);
        let sizes: Vec<usize> = (0..3).map(|i| chunk(2 * b, b, i).1).collect();
        assert_eq!(sizes, vec![b - 1, b - 1, 2]);
        assert_eq!(chunk(2 * b, b, 2), (2 * b - 2, 2, b - 3));
    }
}

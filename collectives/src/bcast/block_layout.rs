//! The layout of the counter-byte broadcast's blocks (paper 004, Section 4.1.3): how a message
//! (and its header, or a one-block message's length) is cut into bottom-filled chunks of
//! `BLOCK - 1` bytes, which block and epoch each chunk uses, where it starts. Pure arithmetic, shared by the root's and the
//! receivers' paths in `counter_blocks`.

/// Bytes per block (the last is the counter byte): an 8 KiB message fits one block. With
/// 4 KiB blocks, 4 KiB and 8 KiB broadcasts took two and three blocks and were 1.2x and 1.9x
/// slower than MPICH at 2 ranks; with these, 1.1x and 1.1-1.3x.
pub(crate) const BLOCK: usize = 8192 + 64;
/// Blocks in the broadcast buffer.
pub(crate) const BLOCKS: usize = 32;
/// Epochs the buffer is split into.
pub(crate) const WINDOWS: usize = 2;
/// Blocks per epoch.
pub(crate) const EPOCH: usize = BLOCKS / WINDOWS;

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

/// Bytes of the header (see [`Heard`]).
pub(crate) const HEADER: usize = 8;
/// Bytes of a one-block message's own length, where a longer message has its header (right
/// before the counter byte): paper 004's blocks carry no length, so a receiver that expected
/// another one could not tell; written in the same store as the message, it costs 2 bytes.
pub(crate) const SHORT: usize = 2;
/// Longest message that goes without a header: one block's worth, less its length.
pub(crate) const ONE_BLOCK: usize = BLOCK - 1 - SHORT;
/// The blocks of one broadcast: its message length and whether the first block carries the
/// header (then the message's first chunk is `HEADER` bytes shorter, the header after it;
/// without it, the message fits one block, its `SHORT` length after it).
#[derive(Clone, Copy)]
pub(crate) struct Layout {
    pub(crate) len: usize,
    pub(crate) headed: bool,
}

impl Layout {
    /// Bytes after the message in its first block: the header, or the message's length.
    #[inline]
    pub(crate) fn tail(self) -> usize {
        if self.headed {
            HEADER
        } else {
            SHORT
        }
    }

    /// Bytes in the blocks: the message and its tail.
    #[inline]
    pub(crate) fn stream(self) -> usize {
        self.len + self.tail()
    }

    #[inline]
    pub(crate) fn blocks(self) -> usize {
        blocks_for(self.stream(), BLOCK)
    }
}

/// One chunk of a broadcast: where it sits and which message bytes it holds.
pub(crate) struct Chunk {
    /// Its position in the block sequence (the cursor's count).
    pub(crate) at: u64,
    /// The block's slot in the buffer, and the epoch of that use of it.
    pub(crate) slot: usize,
    pub(crate) epoch: u64,
    /// Offset in the area where the chunk starts (bottom-filled: it ends at the counter byte).
    pub(crate) data: usize,
    /// Bytes of the message in this chunk (from `data` on; the tail, if any, after them).
    pub(crate) body: std::ops::Range<usize>,
    /// Bytes after the message bytes: the layout's tail in the first chunk, none after.
    pub(crate) tail: usize,
}

impl Chunk {
    /// Chunk `i` of a broadcast laid out as `layout` whose first block is block `cursor`.
    pub(crate) fn new(cursor: u64, layout: Layout, i: usize) -> Chunk {
        let at = cursor + i as u64;
        let (lo, n, in_block) = chunk(layout.stream(), BLOCK, i);
        let slot = (at % BLOCKS as u64) as usize;
        // The tail is the first chunk's last bytes: every later chunk starts that many bytes
        // earlier in the message than in the stream.
        let tail = layout.tail();
        Chunk {
            at,
            slot,
            epoch: at / EPOCH as u64,
            data: slot * BLOCK + in_block,
            body: lo.max(tail) - tail..lo + n - tail,
            tail: if i == 0 { tail } else { 0 },
        }
    }

    /// Bytes from `data` up to the counter byte.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.body.len() + self.tail
    }

    /// Offset of the block's counter byte.
    pub(crate) fn flag(&self) -> usize {
        self.slot * BLOCK + BLOCK - 1
    }
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

    /// With or without the header, the chunks cover the message once, in order, each
    /// ending at its block's counter byte; a header takes the first block's last bytes.
    #[test]
    fn chunks_cover_the_message_and_leave_room_for_the_header() {
        for len in [0, 1, 8247, 8248, 8253, 20_000, 3 * BLOCK] {
            for headed in [false, true] {
                let layout = Layout { len, headed };
                let mut next = 0;
                for i in 0..layout.blocks() {
                    let c = Chunk::new(5, layout, i);
                    assert_eq!(c.body.start, next, "{len} {headed} chunk {i}");
                    next = c.body.end;
                    assert_eq!(c.data + c.len(), c.flag());
                    assert_eq!(c.tail > 0, i == 0);
                    assert!(c.len() < BLOCK);
                }
                assert_eq!(next, len, "{len} {headed}");
            }
        }
        // One block carries 8253 bytes with their length, 8247 with the header.
        assert_eq!(
            Layout {
                len: ONE_BLOCK,
                headed: false
            }
            .blocks(),
            1
        );
        assert_eq!(
            Layout {
                len: BLOCK - 1 - HEADER,
                headed: true
            }
            .blocks(),
            1
        );
        assert_eq!(
            Layout {
                len: BLOCK - HEADER,
                headed: true
            }
            .blocks(),
            2
        );
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

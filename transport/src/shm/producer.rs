//! The sending side of one shared-memory ring: its words' raw addresses, computed once, and
//! the producer's backlog of records that did not fit.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64};

use super::layout::View;
use super::ring;

/// Raw addresses of one ring's data and control words, computed once: the message path should
/// not redo layout arithmetic and bounds checks for every record.
#[derive(Clone, Copy)]
pub(super) struct RingRef {
    pub(super) data: *mut u8,
    head: *const AtomicU64,
    waiting: *const AtomicU32,
    /// The sleeper count of the segment's owner (checked after every send).
    sleepers: *const AtomicU32,
}

// SAFETY: the pointers are into segments that `Inner` keeps mapped for its whole life; the
// words behind them are atomics and the data area follows the ring protocol.
unsafe impl Send for RingRef {}
// SAFETY: as above.
unsafe impl Sync for RingRef {}

impl RingRef {
    pub(super) fn new(v: &View<'_>, src: usize) -> RingRef {
        RingRef {
            data: v.ring_data(src),
            head: v.ring_head(src),
            waiting: v.ring_producer_waiting(src),
            sleepers: v.sleepers(),
        }
    }
    pub(super) fn head(&self) -> &AtomicU64 {
        // SAFETY: points into a segment mapped for as long as `Inner` (and so `self`) lives.
        unsafe { &*self.head }
    }
    pub(super) fn waiting(&self) -> &AtomicU32 {
        // SAFETY: as for `head`.
        unsafe { &*self.waiting }
    }
    pub(super) fn sleepers(&self) -> &AtomicU32 {
        // SAFETY: as for `head`.
        unsafe { &*self.sleepers }
    }
}

pub(super) struct ProducerSide {
    pub(super) ring: ring::Producer,
    pub(super) backlog: VecDeque<(u32, Vec<u8>)>,
    /// Buffers of records that left the backlog, kept for the next ones: a window of messages
    /// that overflows the ring would otherwise allocate and free one buffer per message, and
    /// the allocator's trimming then makes every fresh one page-fault (32 KiB osu_bibw ran at
    /// 6-8 GB/s this way, 30-42 without the churn).
    pub(super) spare: Vec<Vec<u8>>,
}

/// Most backlog buffers a producer keeps for reuse, and the largest it keeps (the largest
/// record: at most about 2 MiB per peer stays allocated after a burst).
const SPARE_BUFFERS: usize = 32;
const SPARE_MAX_BYTES: usize = crate::MAX_MESSAGE_SIZE;

impl ProducerSide {
    /// A backlog buffer holding the concatenation of `parts`.
    pub(super) fn backlog_buffer(&mut self, parts: &[&[u8]]) -> Vec<u8> {
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        for p in parts {
            buf.extend_from_slice(p);
        }
        buf
    }

    /// Keeps a buffer that left the backlog for reuse (within bounds).
    pub(super) fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS && buf.capacity() <= SPARE_MAX_BYTES {
            self.spare.push(buf);
        }
    }
}

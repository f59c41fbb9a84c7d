//! Full events and the bounded queues that hold them.

use std::collections::VecDeque;

use rdcoll_transport::{Rank, Region};

use crate::error::{OffloadError, Result};
use crate::types::{List, NiFail, PtIndex};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Target: a put was deposited into an entry (priority or overflow list).
    Put,
    /// Target: a get was served from an entry.
    Get,
    /// Target: an append (or search-delete) took an unexpected header; `start` points at the
    /// data already deposited in the overflow buffer.
    PutOverflow,
    /// Target: an append (or search-delete) took the header a get left on the overflow list.
    GetOverflow,
    /// Initiator: a get's data is in the memory descriptor.
    Reply,
    /// Initiator: a put's source buffer may be reused.
    Send,
    /// Initiator: the target processed a put.
    Ack,
    /// Target: an appended entry was linked on its list.
    Link,
    /// Target: an entry unlinked itself (use-once, or manage-local below `min_free`).
    AutoUnlink,
    /// Target: the result of a search-only (or a search-delete that found nothing).
    Search,
    /// Target: flow control disabled the portal table entry.
    PtDisabled,
}

/// Where an event's data lies.
#[derive(Debug, Clone)]
pub struct Location {
    /// The buffer.
    pub region: Region,
    /// Offset of the data in it.
    pub offset: usize,
}

/// A full event.
#[derive(Debug, Clone)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// Whether it succeeded, and if not why.
    pub fail: NiFail,
    /// The portal table entry (target events).
    pub pt: Option<PtIndex>,
    /// The rank that started the operation (target events) or its target (initiator events).
    pub peer: Rank,
    /// Match bits the message carried.
    pub match_bits: u64,
    /// Bytes requested.
    pub rlength: u64,
    /// Bytes moved.
    pub mlength: u64,
    /// Target: the offset requested; initiator: the offset used at the target.
    pub remote_offset: u64,
    /// Where the data lies (target deposit or get source; overflow buffer for overflow hits).
    pub start: Option<Location>,
    /// The entry's (target) or the operation's (initiator) user value.
    pub user_ptr: u64,
    /// The initiator's header data.
    pub hdr_data: u64,
    /// The list the entry was on.
    pub list: Option<List>,
}

impl Event {
    pub(crate) fn simple(kind: EventKind, pt: Option<PtIndex>, peer: Rank, user_ptr: u64) -> Event {
        Event {
            kind,
            fail: NiFail::Ok,
            pt,
            peer,
            match_bits: 0,
            rlength: 0,
            mlength: 0,
            remote_offset: 0,
            start: None,
            user_ptr,
            hdr_data: 0,
            list: None,
        }
    }
}

/// A bounded event queue. When full, further events are counted as dropped and the next
/// `pop` reports how many (Portals' `PTL_EQ_DROPPED`), so a loss is never silent.
#[derive(Debug)]
pub(crate) struct EventQueue {
    events: VecDeque<Event>,
    capacity: usize,
    dropped: u64,
}

impl EventQueue {
    pub(crate) fn new(capacity: usize) -> Self {
        EventQueue {
            events: VecDeque::new(),
            capacity,
            dropped: 0,
        }
    }

    pub(crate) fn push(&mut self, ev: Event) {
        if self.events.len() < self.capacity {
            self.events.push_back(ev);
        } else {
            self.dropped += 1;
        }
    }

    /// Queues `ev` even when the queue is full: for the one event per flow-control disable,
    /// which the application must not miss (Portals reserves a slot for it).
    pub(crate) fn push_reserved(&mut self, ev: Event) {
        self.events.push_back(ev);
    }

    pub(crate) fn pop(&mut self) -> Result<Option<Event>> {
        if self.dropped > 0 {
            let n = std::mem::take(&mut self.dropped);
            return Err(OffloadError::EventsDropped(n));
        }
        Ok(self.events.pop_front())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_is_reported_not_silent() {
        let mut q = EventQueue::new(1);
        q.push(Event::simple(EventKind::Link, None, 0, 1));
        q.push(Event::simple(EventKind::Link, None, 0, 2));
        assert_eq!(q.pop().unwrap_err(), OffloadError::EventsDropped(1));
        assert_eq!(q.pop().unwrap().map(|e| e.user_ptr), Some(1));
        assert!(q.pop().unwrap().is_none());
    }
}

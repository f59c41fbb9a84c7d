//! What the simulated network carries: the operations in flight and what happens, at virtual
//! times, as they move (the discrete events of the simulation).

use crate::error::Result;
use crate::types::{OpId, Payload, Rank, RegionKey, RemoteAddr};

/// One operation on its way.
pub(crate) struct Transfer {
    /// The rank that started it.
    pub(crate) initiator: Rank,
    /// The other end: receiver of a message or put, owner of the memory a get reads.
    pub(crate) target: Rank,
    /// Its number at the initiator (orders events of one time, names its flow).
    pub(crate) seq: u64,
    /// The latency of the route its bytes took (set when they go on the wire).
    pub(crate) latency: u64,
    pub(crate) what: What,
}

/// The kind of a [`Transfer`], with what it carries.
pub(crate) enum What {
    /// An active message.
    Message(Payload),
    /// A put: the bytes (`None` when payload-free), where they go, then an immediate or a
    /// flag byte.
    Put {
        bytes: Option<Vec<u8>>,
        len: usize,
        dst: RemoteAddr,
        imm: Option<u64>,
        flag: Option<u8>,
        op: OpId,
    },
    /// A get: `src` is read when the request reaches its owner (`bytes` then holds what was
    /// read, `None` when payload-free) and lands in the initiator's region `dst_key`.
    Get {
        src: RemoteAddr,
        len: usize,
        dst_key: RegionKey,
        dst_offset: usize,
        bytes: Option<Vec<u8>>,
        op: OpId,
    },
    /// The initiator failed: the target learns it after everything sent before.
    Farewell,
}

impl Transfer {
    /// Bytes this transfer puts on the wire, without headers.
    pub(crate) fn payload_len(&self) -> usize {
        match &self.what {
            What::Message(data) => data.len(),
            What::Put { len, .. } | What::Get { len, .. } => *len,
            What::Farewell => 0,
        }
    }

    /// Whether its bytes flow from the target to the initiator (a get's answer).
    pub(crate) fn is_read(&self) -> bool {
        matches!(self.what, What::Get { .. })
    }

    /// The ranks its bytes flow from and to.
    pub(crate) fn data_path(&self) -> (Rank, Rank) {
        if self.is_read() {
            (self.target, self.initiator)
        } else {
            (self.initiator, self.target)
        }
    }

    /// The ordered channel it travels on: initiator, target and direction.
    pub(crate) fn channel(&self) -> (Rank, Rank, bool) {
        (self.initiator, self.target, self.is_read())
    }
}

/// Something that happens at a virtual time.
pub(crate) enum Happening {
    /// The operation leaves its initiator and asks for its channel.
    Start(Transfer),
    /// A get's request reaches the owner of the memory.
    Request(Transfer),
    /// A packet's last byte has left.
    Sent(Transfer),
    /// The operation's bytes have all arrived at their destination.
    Arrive(Transfer),
    /// An operation's completion reaches its initiator.
    Complete {
        rank: Rank,
        op: OpId,
        result: Result<()>,
    },
    /// A link's capacity changes (bytes per nanosecond).
    Capacity { link: usize, bytes_per_ns: f64 },
}

/// A happening with its time and a key that orders happenings of one time the same way in
/// every run: the rank that caused it and a number that rank gave it.
pub(crate) struct Scheduled {
    pub(crate) at: u64,
    pub(crate) rank: Rank,
    pub(crate) seq: u64,
    pub(crate) what: Happening,
}

impl Scheduled {
    fn key(&self) -> (u64, Rank, u64) {
        (self.at, self.rank, self.seq)
    }
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// Reversed, so that a `BinaryHeap` pops the earliest first.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.key().cmp(&self.key())
    }
}

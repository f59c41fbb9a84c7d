//! Names shared by every backend: ranks, region descriptors, operation ids and events.

use smallvec::SmallVec;

use crate::error::{Result, TransportError};

/// A process (or thread, for `local`) in a job, numbered `0..size`.
pub type Rank = u32;

/// The largest active message, in bytes, that every backend carries: 64 KiB of payload and a
/// header of up to 64 bytes (so a 64 KiB eager message is one message). Larger data moves
/// with `put`/`get`.
pub const MAX_MESSAGE_SIZE: usize = 64 * 1024 + 64;

/// The bytes of an active message; short ones live inline, without an allocation.
pub type Payload = SmallVec<[u8; 64]>;

/// `MessageTooLarge` if the active message made of `parts` exceeds [`MAX_MESSAGE_SIZE`]
/// (every backend's `send_parts` checks it first).
#[inline]
pub(crate) fn check_message_len(parts: &[&[u8]]) -> Result<()> {
    let len = parts.iter().map(|p| p.len()).sum();
    if len > MAX_MESSAGE_SIZE {
        return Err(TransportError::MessageTooLarge {
            len,
            max: MAX_MESSAGE_SIZE,
        });
    }
    Ok(())
}

/// The concatenation of `parts` as a payload, copied once (for `Fabric::send_parts`).
pub(crate) fn payload_of(parts: &[&[u8]]) -> Payload {
    let mut data = Payload::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        data.extend_from_slice(part);
    }
    data
}

/// Key naming a registered region at its owner: slot index in the low 32 bits, the slot's
/// generation in the high 32, so a key of a deregistered region never names its successor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionKey(pub u64);

impl RegionKey {
    /// Builds a key from a slot index and generation.
    pub fn new(index: u32, generation: u32) -> Self {
        RegionKey(((generation as u64) << 32) | index as u64)
    }
    /// Slot index at the owner.
    pub fn index(self) -> u32 {
        self.0 as u32
    }
    /// Generation of the slot when the key was issued.
    pub fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// What a peer needs to name a region: owner, key and length. Exchange it as bytes with
/// [`RemoteRegion::to_bytes`] / [`RemoteRegion::from_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteRegion {
    /// The rank that owns the region.
    pub rank: Rank,
    /// The owner's key for it.
    pub key: RegionKey,
    /// Its length in bytes.
    pub len: usize,
}

/// Size of [`RemoteRegion::to_bytes`].
pub const REMOTE_REGION_BYTES: usize = 20;

impl RemoteRegion {
    /// The address `offset` bytes into this region.
    pub fn at(&self, offset: usize) -> RemoteAddr {
        RemoteAddr {
            rank: self.rank,
            key: self.key,
            offset,
        }
    }
    /// Serialises the descriptor (little endian).
    pub fn to_bytes(&self) -> [u8; REMOTE_REGION_BYTES] {
        let mut out = [0u8; REMOTE_REGION_BYTES];
        out[0..4].copy_from_slice(&self.rank.to_le_bytes());
        out[4..12].copy_from_slice(&self.key.0.to_le_bytes());
        out[12..20].copy_from_slice(&(self.len as u64).to_le_bytes());
        out
    }
    /// Parses what [`RemoteRegion::to_bytes`] wrote.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if bytes.len() != REMOTE_REGION_BYTES {
            return Err(TransportError::InvalidArgument(format!(
                "a remote region descriptor is {REMOTE_REGION_BYTES} bytes, got {}",
                bytes.len()
            )));
        }
        let word = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b[..r.len()].copy_from_slice(&bytes[r]);
            u64::from_le_bytes(b)
        };
        Ok(RemoteRegion {
            rank: word(0..4) as Rank,
            key: RegionKey(word(4..12)),
            len: usize::try_from(word(12..20)).map_err(|_| {
                TransportError::InvalidArgument("region length does not fit in usize".into())
            })?,
        })
    }
}

/// A byte address inside a peer's registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteAddr {
    /// Owner of the region.
    pub rank: Rank,
    /// Owner's key for the region.
    pub key: RegionKey,
    /// Byte offset into the region.
    pub offset: usize,
}

/// What [`crate::Fabric::put_now`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutStatus {
    /// The source is free and the write lands before this rank's later writes to that peer
    /// (in place already where the backend copied it directly); no completion event follows.
    Done,
    /// Started; its completion comes as [`Event::Completed`] with this id.
    Pending(OpId),
}

/// Identifies a posted `put` or `get` in its [`Event::Completed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// Something the fabric reports to its owner through `poll` / `wait`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An active message from `src`; messages from one sender arrive in the order sent.
    Message {
        /// Sender.
        src: Rank,
        /// The bytes sent.
        data: Payload,
    },
    /// A peer's `put` with an immediate value finished landing in one of our regions: the data
    /// is visible when this event is seen.
    Immediate {
        /// The rank that put.
        src: Rank,
        /// The immediate value it attached.
        imm: u64,
    },
    /// A `put` or `get` this rank posted finished: for a put, the data is at the target; for a
    /// get, in the local region.
    Completed {
        /// The id `put` / `get` returned.
        op: OpId,
        /// Success, or why it failed (bad key, peer failed, ...).
        result: Result<()>,
    },
    /// A peer failed (exited, crashed, link broke). Reported once per peer.
    PeerFailed {
        /// The failed rank.
        rank: Rank,
    },
}

/// An event lent to the callback of [`crate::Fabric::poll_with`]: a message's bytes borrow
/// straight from the transport's receive buffer (no copy); everything else is an owned event.
#[derive(Debug)]
pub enum EventRef<'a> {
    /// An active message from `src`, valid for the duration of the callback.
    Message {
        /// Sender.
        src: Rank,
        /// The bytes sent.
        data: &'a [u8],
    },
    /// Any other event.
    Owned(Event),
}

impl EventRef<'_> {
    /// The event as an owned value (copies a message's bytes).
    pub fn into_owned(self) -> Event {
        match self {
            EventRef::Message { src, data } => Event::Message {
                src,
                data: Payload::from_slice(data),
            },
            EventRef::Owned(ev) => ev,
        }
    }
}

/// Checks that `offset..offset+len` fits in `region_len` without overflow.
pub(crate) fn range_fits(offset: usize, len: usize, region_len: usize) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= region_len)
}

/// Traffic counters of one endpoint toward one peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerCounters {
    /// Bytes of puts issued toward the peer and not yet acknowledged by it.
    pub put_bytes_in_flight: u64,
    /// The most `put_bytes_in_flight` has been.
    pub put_bytes_in_flight_peak: u64,
    /// Bytes of gets issued toward the peer whose data has not all landed.
    pub get_bytes_in_flight: u64,
    /// The most `get_bytes_in_flight` has been.
    pub get_bytes_in_flight_peak: u64,
}

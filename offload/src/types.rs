//! Handles, options and small value types of the network interface.

use rdcoll_transport::{Rank, Region};

/// Index of a portal table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PtIndex(pub u32);

/// A counting event (success and failure counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CtHandle(pub(crate) u32);

/// An event queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EqHandle(pub(crate) u32);

/// A memory descriptor (initiator-side buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MdHandle(pub(crate) u32);

/// A match list entry, as linked on one list of one portal table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MeHandle {
    pub(crate) pt: PtIndex,
    pub(crate) list: List,
    pub(crate) seq: u64,
}

/// Which list of a portal table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum List {
    /// Searched first: receives the application posted.
    Priority,
    /// Searched when nothing on the priority list matches: bounce buffers for unexpected data.
    Overflow,
}

/// Which initiators an entry accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchId {
    /// Any rank.
    Any,
    /// Only this rank.
    Rank(Rank),
}

impl MatchId {
    pub(crate) fn accepts(self, initiator: Rank) -> bool {
        match self {
            MatchId::Any => true,
            MatchId::Rank(r) => r == initiator,
        }
    }
}

/// Value of a counting event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct CtValue {
    /// Operations (or bytes) that succeeded.
    pub success: u64,
    /// Operations that failed.
    pub failure: u64,
}

impl CtValue {
    /// What triggered operations compare with their threshold.
    pub fn total(&self) -> u64 {
        self.success.saturating_add(self.failure)
    }
}

/// Why an operation failed, as events and acknowledgements report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NiFail {
    /// It succeeded.
    Ok,
    /// The target could not be reached (it failed, or the link broke).
    Undeliverable,
    /// Nothing matched at the target and its entry has no flow control.
    Dropped,
    /// The target's portal table entry is disabled (flow control).
    PtDisabled,
    /// The matching entry does not allow this operation.
    OpViolation,
    /// A search found nothing.
    NoMatch,
}

impl NiFail {
    pub(crate) fn code(self) -> u8 {
        match self {
            NiFail::Ok => 0,
            NiFail::Undeliverable => 1,
            NiFail::Dropped => 2,
            NiFail::PtDisabled => 3,
            NiFail::OpViolation => 4,
            NiFail::NoMatch => 5,
        }
    }
    pub(crate) fn from_code(c: u8) -> Option<NiFail> {
        Some(match c {
            0 => NiFail::Ok,
            1 => NiFail::Undeliverable,
            2 => NiFail::Dropped,
            3 => NiFail::PtDisabled,
            4 => NiFail::OpViolation,
            5 => NiFail::NoMatch,
            _ => return None,
        })
    }
}

/// Counting-event attachment of a match list entry.
#[derive(Debug, Clone, Copy, Default)]
pub struct MeCounting {
    /// The counter to bump.
    pub ct: Option<CtHandle>,
    /// Count puts and gets that land on this entry.
    pub comm: bool,
    /// Count unexpected headers this entry takes when appended (or by a search-delete).
    pub overflow: bool,
    /// Count bytes (mlength) instead of operations; failures still count one each.
    pub bytes: bool,
}

/// Options of a match list entry.
#[derive(Debug, Clone, Copy)]
pub struct MeOptions {
    /// Unlink after the first match.
    pub use_once: bool,
    /// An entry too small for a message does not match it (the search goes on).
    pub no_truncate: bool,
    /// The entry keeps its own offset, advanced by each deposit.
    pub manage_local: bool,
    /// With `manage_local`: unlink once fewer than this many bytes remain (0: never).
    pub min_free: usize,
    /// Accept puts.
    pub op_put: bool,
    /// Accept gets.
    pub op_get: bool,
    /// Do not acknowledge puts into this entry.
    pub ack_disable: bool,
    /// Counting events.
    pub counting: MeCounting,
    /// No LINK event when the entry is linked (`PTL_ME_EVENT_LINK_DISABLE`).
    pub event_link_disable: bool,
    /// No AUTO_UNLINK event when it unlinks itself (`PTL_ME_EVENT_UNLINK_DISABLE`).
    pub event_unlink_disable: bool,
    /// No PUT / GET events for deposits into it (`PTL_ME_EVENT_COMM_DISABLE`); an append that
    /// takes its unexpected header still gets its PUT_OVERFLOW.
    pub event_comm_disable: bool,
    /// When the entry unlinks itself, the agent appends an identical one over a fresh region
    /// of the same size at the end of its list (bounce buffers that never run out while memory
    /// lasts; the old region lives on while events or unexpected headers point into it).
    pub renew: bool,
}

impl Default for MeOptions {
    fn default() -> Self {
        MeOptions {
            use_once: false,
            no_truncate: false,
            manage_local: false,
            min_free: 0,
            op_put: true,
            op_get: true,
            ack_disable: false,
            counting: MeCounting::default(),
            event_link_disable: false,
            event_unlink_disable: false,
            event_comm_disable: false,
            renew: false,
        }
    }
}

/// A match list entry to append: a buffer and the messages it accepts.
#[derive(Debug, Clone)]
pub struct MeSpec {
    /// Where deposits land (and gets read from).
    pub region: Region,
    /// Bits a message must carry, apart from `ignore_bits`.
    pub match_bits: u64,
    /// Bits that do not take part in matching.
    pub ignore_bits: u64,
    /// Which initiators may match.
    pub match_id: MatchId,
    /// Behaviour.
    pub options: MeOptions,
    /// Handed back in this entry's events.
    pub user_ptr: u64,
}

/// Counting-event attachment of a memory descriptor.
#[derive(Debug, Clone, Copy, Default)]
pub struct MdOptions {
    /// The counter to bump.
    pub ct: Option<CtHandle>,
    /// Count sends.
    pub ct_send: bool,
    /// Count acknowledgements.
    pub ct_ack: bool,
    /// Count replies (gets).
    pub ct_reply: bool,
    /// Count bytes instead of operations; failures still count one each.
    pub ct_bytes: bool,
    /// No SEND events (`PTL_MD_EVENT_SEND_DISABLE`); failures are still reported.
    pub event_send_disable: bool,
    /// The `user_ptr` of the ACK event that reports the failure of a put that asked for no
    /// acknowledgement: such a put leaves no record behind and the target's answer names only
    /// the descriptor, so the descriptor says whose puts it carries (0 by default).
    pub quiet_user_ptr: u64,
}

/// What acknowledgement a put asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckReq {
    /// An ACK event (and counter).
    Ack,
    /// The counter only.
    CtAck,
    /// Nothing beyond SEND.
    None,
}

impl AckReq {
    pub(crate) fn code(self) -> u8 {
        match self {
            AckReq::Ack => 0,
            AckReq::CtAck => 1,
            AckReq::None => 2,
        }
    }
    pub(crate) fn from_code(c: u8) -> Option<AckReq> {
        Some(match c {
            0 => AckReq::Ack,
            1 => AckReq::CtAck,
            2 => AckReq::None,
            _ => return None,
        })
    }
}

/// A put, as posted or as a triggered operation will issue it.
#[derive(Debug, Clone, Copy)]
pub struct PutArgs {
    /// The source buffer.
    pub md: MdHandle,
    /// Offset in the source buffer.
    pub local_offset: usize,
    /// Bytes to send.
    pub len: usize,
    /// Acknowledgement wanted.
    pub ack_req: AckReq,
    /// Target rank.
    pub target: Rank,
    /// Target portal table entry.
    pub pt: PtIndex,
    /// Match bits the message carries.
    pub match_bits: u64,
    /// Offset at the target (unless its entry manages its own).
    pub remote_offset: usize,
    /// Handed back in the initiator's events.
    pub user_ptr: u64,
    /// Handed to the target's events.
    pub hdr_data: u64,
}

/// A get, as posted or as a triggered operation will issue it.
#[derive(Debug, Clone, Copy)]
pub struct GetArgs {
    /// The destination buffer.
    pub md: MdHandle,
    /// Offset in the destination buffer.
    pub local_offset: usize,
    /// Bytes to fetch.
    pub len: usize,
    /// Target rank.
    pub target: Rank,
    /// Target portal table entry.
    pub pt: PtIndex,
    /// Match bits the request carries.
    pub match_bits: u64,
    /// Offset at the target (unless its entry manages its own).
    pub remote_offset: usize,
    /// Handed back in the initiator's events.
    pub user_ptr: u64,
    /// The key of the region the target published for the entry this get is for
    /// (`DirectDone::published`; the entry covers that whole region from its offset 0, and
    /// manages no offset of its own): the initiator reads the region itself, a direct get, and
    /// tells the target afterwards, which counts the entry as if it had served the get
    /// (SEMANTICS.md §12). `None`: the target serves the get.
    pub published: Option<u64>,
    /// With `published`: read the whole of `len` directly even past the fabric's
    /// [`direct_get_max`](rdcoll_transport::Fabric::direct_get_max), because the target's core
    /// is busy (it receives from this rank at the same time, an exchange), so a get it served
    /// by writing part of the data itself would wait for it.
    pub read_all: bool,
}

/// How a search over the unexpected headers treats what it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchOp {
    /// Report the first match; change nothing (MPI_Probe).
    Only,
    /// Take the matches (the first for a use-once entry, all otherwise).
    Delete,
}

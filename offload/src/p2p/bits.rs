//! How a message's envelope is laid out in Portals match bits and header data.
//!
//! Match bits: the matching crate's layout (`rdcoll_matching::envelope`), `context (16) | tag
//! (32) | nonce (16)`, most significant first; the context's top bit is the internal flag
//! ([`super::COLLECTIVE_CONTEXT_BIT`]). Receives ignore the nonce (and the tag for
//! `Tag::Any`); the sender's get entries match all 64 bits, so the nonce tells apart
//! rendezvous messages whose envelopes are identical (paper 002, Section 3.3).
//!
//! Header data: bit 63 marks a rendezvous; bits 48..62 carry the sender's chunk size in KiB;
//! bit 47 says that the sender waits in a blocking send for this message to be received (a
//! send that found no eager credit, see `credits`); bits 0..46 the message's total length.

use rdcoll_matching::envelope::{ContextId, Envelope, ReceiveSpec, Source as MatchSource};
use rdcoll_matching::TagPattern;

use super::{Source, TagSel};

const RENDEZVOUS: u64 = 1 << 63;
const CHUNK_SHIFT: u32 = 48;
const CHUNK_KIB_MAX: u64 = (1 << 15) - 1;
/// Longest message the header can describe (128 TiB - 1).
pub(crate) const MAX_LEN: u64 = (1 << 47) - 1;
/// Header bit: the sender waits in a blocking send until this message is received.
pub(crate) const SENDER_WAITS: u64 = 1 << 47;
/// Largest rendezvous chunk the header can carry.
pub(crate) const MAX_CHUNK: usize = (CHUNK_KIB_MAX as usize) << 10;

/// The match bits a message carries.
pub(crate) fn message_bits(context: u16, tag: u32, nonce: u16) -> u64 {
    let envelope = Envelope {
        nonce,
        ..Envelope::new(ContextId::from_field(context as u32), 0, tag)
    };
    envelope.match_bits()
}

/// The receive spec of a receive (or probe) for `tag` from `source` in `context`.
pub(crate) fn receive_spec(context: u16, tag: TagSel, source: Source) -> ReceiveSpec {
    let tag = match tag {
        TagSel::Value(t) => TagPattern::Exact(t),
        TagSel::Any => TagPattern::Any,
    };
    let source = match source {
        Source::Any => MatchSource::Any,
        Source::Rank(r) => MatchSource::Rank(r),
    };
    ReceiveSpec::new(ContextId::from_field(context as u32), source, tag)
}

/// Match and ignore bits of a receive (or probe) for `tag` in `context`.
pub(crate) fn receive_bits(context: u16, tag: TagSel) -> (u64, u64) {
    receive_spec(context, tag, Source::Any).match_bits()
}

/// The tag carried in `bits`.
pub(crate) fn tag_of(bits: u64) -> u32 {
    Envelope::from_match_bits(bits, 0).tag
}

/// The nonce carried in `bits`.
#[cfg(test)]
pub(crate) fn nonce_of(bits: u64) -> u16 {
    Envelope::from_match_bits(bits, 0).nonce
}

/// What the header data says about a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// Total length of the message.
    pub(crate) len: u64,
    /// `Some(chunk)`: a rendezvous whose rest is fetched in gets of `chunk` bytes.
    pub(crate) chunk: Option<usize>,
    /// The sender waits in a blocking send until the message is received.
    pub(crate) sender_waits: bool,
}

impl Header {
    pub(crate) fn eager(len: usize) -> u64 {
        len as u64 & MAX_LEN
    }

    /// `chunk` must be a positive multiple of 1 KiB, at most [`MAX_CHUNK`].
    pub(crate) fn rendezvous(len: usize, chunk: usize) -> u64 {
        debug_assert!(chunk & 1023 == 0 && chunk > 0 && chunk <= MAX_CHUNK);
        RENDEZVOUS | (((chunk as u64) >> 10) << CHUNK_SHIFT) | (len as u64 & MAX_LEN)
    }

    /// A rendezvous header whose sender waits for its receiver (`SENDER_WAITS`).
    pub(crate) fn rendezvous_waited(len: usize, chunk: usize) -> u64 {
        Header::rendezvous(len, chunk) | SENDER_WAITS
    }

    pub(crate) fn decode(hdr: u64) -> Header {
        let len = hdr & MAX_LEN;
        let chunk = (hdr & RENDEZVOUS != 0)
            .then_some((((hdr >> CHUNK_SHIFT) & CHUNK_KIB_MAX) as usize) << 10)
            .filter(|&c| c > 0);
        Header {
            len,
            chunk,
            sender_waits: hdr & SENDER_WAITS != 0,
        }
    }
}

/// The gets a rendezvous receive issues: `(remote offset, local offset, length)` of each,
/// for a message of `total` bytes whose first `first` arrived with the header, fetched in
/// `chunk`-byte pieces into a buffer of `capacity` bytes. Pieces past the buffer are zero
/// bytes long (so the sender's count of gets still completes); a piece the buffer cuts short
/// fetches what fits.
pub(crate) fn get_plan(
    total: usize,
    first: usize,
    chunk: usize,
    capacity: usize,
) -> impl Iterator<Item = (usize, usize, usize)> {
    (first..total).step_by(chunk.max(1)).map(move |off| {
        let len = chunk.min(total - off);
        if off >= capacity {
            (off, 0, 0)
        } else {
            (off, off, len.min(capacity - off))
        }
    })
}

/// How many gets fetch the rest of a message (the sender's expected count).
pub(crate) fn gets_for(total: usize, first: usize, chunk: usize) -> u64 {
    (total.saturating_sub(first)).div_ceil(chunk.max(1)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_round_trips_and_wildcards_mask_the_right_bits() {
        let b = message_bits(7, 0xdead_beef, 42);
        assert_eq!(tag_of(b), 0xdead_beef);
        assert_eq!(nonce_of(b), 42);
        let (m, i) = receive_bits(7, TagSel::Value(0xdead_beef));
        assert_eq!((b ^ m) & !i, 0);
        let (m, i) = receive_bits(7, TagSel::Any);
        assert_eq!((b ^ m) & !i, 0);
        let (m, i) = receive_bits(8, TagSel::Any);
        assert_ne!((b ^ m) & !i, 0, "another context never matches");
        let (m, i) = receive_bits(7, TagSel::Value(1));
        assert_ne!((b ^ m) & !i, 0);
    }

    #[test]
    fn header_says_eager_or_rendezvous() {
        assert_eq!(
            Header::decode(Header::eager(100)),
            Header {
                len: 100,
                chunk: None,
                sender_waits: false,
            }
        );
        let h = Header::decode(Header::rendezvous(5 << 20, 64 << 10));
        assert_eq!(
            h,
            Header {
                len: 5 << 20,
                chunk: Some(64 << 10),
                sender_waits: false,
            }
        );
        let h = Header::decode(Header::rendezvous_waited(MAX_LEN as usize, 1 << 10));
        assert_eq!(
            (h.len, h.chunk, h.sender_waits),
            (MAX_LEN, Some(1 << 10), true)
        );
    }

    #[test]
    fn plan_covers_the_message_once_and_never_writes_past_the_buffer() {
        let plan: Vec<_> = get_plan(10_000, 1000, 4096, 20_000).collect();
        assert_eq!(
            plan,
            vec![(1000, 1000, 4096), (5096, 5096, 4096), (9192, 9192, 808)]
        );
        assert_eq!(gets_for(10_000, 1000, 4096), 3);
        // A 6000-byte buffer: the second piece is cut short, the third fetches nothing.
        let plan: Vec<_> = get_plan(10_000, 1000, 4096, 6000).collect();
        assert_eq!(
            plan,
            vec![(1000, 1000, 4096), (5096, 5096, 904), (9192, 0, 0)]
        );
        for (_, local, len) in plan {
            assert!(local + len <= 6000);
        }
    }
}

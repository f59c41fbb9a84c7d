//! What ofi ranks send each other as libfabric messages: a user's active message, or one of
//! the backend's own (small puts and gets carried inline, the notice that follows a large
//! write, key lookups for one-sided access, key retirement, heartbeats, goodbye).
//!
//! Every message starts with a 16-byte header: kind, three zero bytes, the sender's rank, and
//! the message's number in the sequence from that sender to this receiver (little endian): a
//! provider may complete a large message after smaller ones sent later (`tcp;ofi_rxm` does,
//! for messages above its eager size), so the receiver puts them back in order. A backend
//! message then has six little-endian 64-bit words, then its payload.

use crate::types::Rank;

/// Bytes before a user's message.
pub(crate) const HEADER: usize = 16;
/// Bytes before a backend message's payload.
pub(crate) const CONTROL_HEADER: usize = HEADER + 6 * 8;

/// The kinds of message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// A user's active message; payload: its bytes.
    User = 1,
    /// A put carried in the message: [token, key, offset, imm, has_imm | has_flag << 1, flag];
    /// payload: the data.
    Put = 2,
    /// The target's answer to `Put`: [token, status, region_len, ..].
    PutAck = 3,
    /// A small get: [token, key, offset, len, ..].
    Get = 4,
    /// The target's answer to `Get`: [token, status, region_len, ..]; payload: the bytes.
    GetData = 5,
    /// After a one-sided write has landed: [key, offset, len, imm, has_imm | has_flag << 1,
    /// flag]: raise the immediate, or store the flag after the data.
    Notice = 6,
    /// Asks the owner how to reach a region one-sidedly: [key, ..].
    KeyQuery = 7,
    /// The owner's answer: [key, status, len, address, provider key, transient]; transient:
    /// memory the caller registered (released by the peer as soon as it is idle).
    KeyInfo = 8,
    /// The owner retires a key the receiver looked up: [key, ..].
    KeyGone = 9,
    /// The receiver has forgotten the key and has no access through it in flight: [key, ..].
    KeyGoneAck = 10,
    /// Still here.
    Heartbeat = 11,
    /// Leaving: fail me now.
    Bye = 12,
    /// The sender has no access in flight through a caller-registered region's key and
    /// forgot it, so the owner may let the region go without asking: [key, ..].
    KeyRelease = 13,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::User,
            2 => Kind::Put,
            3 => Kind::PutAck,
            4 => Kind::Get,
            5 => Kind::GetData,
            6 => Kind::Notice,
            7 => Kind::KeyQuery,
            8 => Kind::KeyInfo,
            9 => Kind::KeyGone,
            10 => Kind::KeyGoneAck,
            11 => Kind::Heartbeat,
            12 => Kind::Bye,
            13 => Kind::KeyRelease,
            _ => return None,
        })
    }
}

/// Outcome codes in acknowledgements.
pub(crate) const STATUS_OK: u64 = 0;
pub(crate) const STATUS_BAD_KEY: u64 = 1;
pub(crate) const STATUS_OUT_OF_RANGE: u64 = 2;

/// `imm` and `flag` packed as the `Put` and `Notice` words carry them.
pub(crate) fn pack_marks(imm: Option<u64>, flag: Option<u8>) -> [u64; 3] {
    let bits = u64::from(imm.is_some()) | u64::from(flag.is_some()) << 1;
    [imm.unwrap_or(0), bits, u64::from(flag.unwrap_or(0))]
}

/// The inverse of [`pack_marks`].
pub(crate) fn unpack_marks(imm: u64, bits: u64, flag: u64) -> (Option<u64>, Option<u8>) {
    (
        (bits & 1 != 0).then_some(imm),
        (bits & 2 != 0).then_some(flag as u8),
    )
}

/// Writes a user message: header, then `parts`.
pub(crate) fn user(src: Rank, seq: u64, parts: &[&[u8]], out: &mut Vec<u8>) {
    out.clear();
    header(Kind::User, src, seq, out);
    for p in parts {
        out.extend_from_slice(p);
    }
}

/// Writes a backend message.
pub(crate) fn control(
    kind: Kind,
    src: Rank,
    seq: u64,
    words: [u64; 6],
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    out.clear();
    header(kind, src, seq, out);
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out.extend_from_slice(payload);
}

fn header(kind: Kind, src: Rank, seq: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&[kind as u8, 0, 0, 0]);
    out.extend_from_slice(&src.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
}

/// A message as received.
#[derive(Debug)]
pub(crate) struct Parsed<'a> {
    pub(crate) kind: Kind,
    pub(crate) src: Rank,
    pub(crate) seq: u64,
    pub(crate) words: [u64; 6],
    pub(crate) payload: &'a [u8],
}

/// Parses a received message; `None` if it is not one of ours (too short, unknown kind).
pub(crate) fn parse(bytes: &[u8]) -> Option<Parsed<'_>> {
    if bytes.len() < HEADER || bytes[1..4] != [0, 0, 0] {
        return None;
    }
    let kind = Kind::from_u8(bytes[0])?;
    let src = Rank::from_le_bytes(bytes[4..8].try_into().ok()?);
    let seq = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    if kind == Kind::User {
        return Some(Parsed {
            kind,
            src,
            seq,
            words: [0; 6],
            payload: &bytes[HEADER..],
        });
    }
    if bytes.len() < CONTROL_HEADER {
        return None;
    }
    let mut words = [0u64; 6];
    for (i, w) in words.iter_mut().enumerate() {
        let at = HEADER + 8 * i;
        *w = u64::from_le_bytes(bytes[at..at + 8].try_into().ok()?);
    }
    Some(Parsed {
        kind,
        src,
        seq,
        words,
        payload: &bytes[CONTROL_HEADER..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_refused() {
        let mut out = Vec::new();
        user(7, 41, &[b"ab", b"cd"], &mut out);
        let p = parse(&out).unwrap();
        assert_eq!(
            (p.kind, p.src, p.seq, p.payload),
            (Kind::User, 7, 41, &b"abcd"[..])
        );
        let marks = pack_marks(Some(9), Some(3));
        control(
            Kind::Put,
            2,
            0,
            [1, 2, 3, marks[0], marks[1], marks[2]],
            b"xyz",
            &mut out,
        );
        let p = parse(&out).unwrap();
        assert_eq!((p.kind, p.src, p.payload), (Kind::Put, 2, &b"xyz"[..]));
        assert_eq!(
            unpack_marks(p.words[3], p.words[4], p.words[5]),
            (Some(9), Some(3))
        );
        assert!(parse(&out[..CONTROL_HEADER - 1]).is_none());
        assert!(parse(&[99, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_none());
        assert!(parse(&[1, 0, 0]).is_none());
    }
}

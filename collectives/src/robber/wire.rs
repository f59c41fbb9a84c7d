//! Robber's control messages (paper 003, Table 1), less `request` and `piece`: a node takes a
//! piece with a one-sided get from the holder's registered buffer instead, so the holder's
//! bitfield carries the descriptor of that buffer.

use rdcoll_transport::{RemoteRegion, REMOTE_REGION_BYTES};

use super::pieces::Pieces;

/// A control message between two peers of a multicast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    /// The pieces the sender wants from the receiver (answered by a `Bitfield`).
    Desire(Pieces),
    /// The pieces of the receiver's desire that the sender holds.
    Bitfield(Pieces),
    /// The sender now holds this piece.
    Have(u32),
    /// The sender has no work left and asks for some of the receiver's.
    Steal,
    /// Work handed over in answer to a `Steal` (empty: the sender has none either).
    Work(Pieces),
    /// The sender has work again (back into the receiver's labour force).
    FoundWork,
    /// The sender holds every piece.
    Done,
    /// The last message from the sender in this multicast.
    Stop,
}

const DESIRE: u8 = 1;
const BITFIELD: u8 = 2;
const HAVE: u8 = 3;
const STEAL: u8 = 4;
const WORK: u8 = 5;
const FOUND_WORK: u8 = 6;
const DONE: u8 = 7;
const STOP: u8 = 8;

/// The longest message of a multicast of `pieces` pieces.
pub(crate) fn max_len(pieces: usize) -> usize {
    1 + REMOTE_REGION_BYTES + pieces.div_ceil(8)
}

/// `msg`'s bytes; a bitfield carries `key`, the sender's buffer.
pub(crate) fn encode(msg: &Msg, key: &RemoteRegion) -> Vec<u8> {
    let mut out = Vec::with_capacity(8);
    match msg {
        Msg::Desire(p) => {
            out.push(DESIRE);
            out.extend(p.to_bytes());
        }
        Msg::Bitfield(p) => {
            out.push(BITFIELD);
            out.extend(key.to_bytes());
            out.extend(p.to_bytes());
        }
        Msg::Have(i) => {
            out.push(HAVE);
            out.extend(i.to_le_bytes());
        }
        Msg::Steal => out.push(STEAL),
        Msg::Work(p) => {
            out.push(WORK);
            out.extend(p.to_bytes());
        }
        Msg::FoundWork => out.push(FOUND_WORK),
        Msg::Done => out.push(DONE),
        Msg::Stop => out.push(STOP),
    }
    out
}

/// The message in `bytes` of a multicast of `pieces` pieces, with the key a bitfield
/// carries; `None` if it is not one.
pub(crate) fn decode(bytes: &[u8], pieces: usize) -> Option<(Msg, Option<RemoteRegion>)> {
    let (&op, rest) = bytes.split_first()?;
    let set = |b: &[u8]| Pieces::from_bytes(pieces, b);
    let msg = match op {
        DESIRE => Msg::Desire(set(rest)?),
        BITFIELD => {
            if rest.len() < REMOTE_REGION_BYTES {
                return None;
            }
            let (key, bits) = rest.split_at(REMOTE_REGION_BYTES);
            let key = RemoteRegion::from_bytes(key).ok()?;
            return Some((Msg::Bitfield(set(bits)?), Some(key)));
        }
        HAVE => {
            let i = u32::from_le_bytes(rest.try_into().ok()?);
            if i as usize >= pieces {
                return None;
            }
            Msg::Have(i)
        }
        WORK => Msg::Work(set(rest)?),
        STEAL | FOUND_WORK | DONE | STOP if !rest.is_empty() => return None,
        STEAL => Msg::Steal,
        FOUND_WORK => Msg::FoundWork,
        DONE => Msg::Done,
        STOP => Msg::Stop,
        _ => return None,
    };
    Some((msg, None))
}

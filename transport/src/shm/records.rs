//! The record kinds that travel in shm rings, and their fixed headers (little-endian u64s).
//!
//! Besides active messages and put immediates, the rings carry the target-served operations:
//! puts into memory the caller registered (the target pulls with `process_vm_readv`, or takes
//! bounce chunks when the kernel refuses cross-memory attach), split puts (the target pulls the
//! first part while the initiator writes the rest) and bounce gets.

/// An active message; payload = the message.
pub(crate) const K_MSG: u32 = 1;
/// A put with immediate landed; payload = imm.
pub(crate) const K_IMM: u32 = 2;
/// Pull request: [op, key, offset, len, src_addr, has_imm, imm].
pub(crate) const K_PUT_PULL: u32 = 3;
/// Bounce put chunk: [op, key, base, total, chunk_off, has_imm, imm] + data.
pub(crate) const K_PUT_CHUNK: u32 = 4;
/// Bounce get request: [op, key, offset, len].
pub(crate) const K_GET_REQ: u32 = 5;
/// Bounce get data: [op, chunk_off] + data.
pub(crate) const K_GET_CHUNK: u32 = 6;
/// End of a target-served operation: [op, status, region_len].
pub(crate) const K_DONE: u32 = 7;
/// Split put: as `K_PUT_PULL`, plus `pulled`; the target pulls only the first `pulled` bytes
/// while the initiator writes the rest itself, then sends `K_PUSHED`:
/// [op, key, offset, len, src_addr, tail_kind, tail_value, pulled].
pub(crate) const K_PUT_SPLIT: u32 = 8;
/// The initiator's part of a split put is in (status `ST_OK`) or was not written (any other
/// status: the target pulls it too): [op, status].
pub(crate) const K_PUSHED: u32 = 9;

/// Status: done.
pub(crate) const ST_OK: u64 = 0;
/// Status: unknown or stale key.
pub(crate) const ST_BAD_KEY: u64 = 1;
/// Status: range outside the region.
pub(crate) const ST_OUT_OF_RANGE: u64 = 2;
/// Status: the target could not attach to the initiator's memory; resend as bounce chunks.
pub(crate) const ST_CMA_REFUSED: u64 = 3;

/// Bytes of data in one bounce chunk.
pub(crate) const BOUNCE_CHUNK: usize = crate::MAX_MESSAGE_SIZE;

/// Encodes a fixed header.
pub(crate) fn header<const N: usize>(words: [u64; N]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Splits `N` words off the front of a record; `None` if it is too short.
pub(crate) fn parse<const N: usize>(payload: &[u8]) -> Option<([u64; N], &[u8])> {
    if payload.len() < N * 8 {
        return None;
    }
    let mut out = [0u64; N];
    for (i, w) in out.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(&payload[i * 8..i * 8 + 8]);
        *w = u64::from_le_bytes(b);
    }
    Some((out, &payload[N * 8..]))
}

/// What follows a put's data at the target: nothing, an immediate event, or a flag byte
/// stored after the data (`Fabric::put_flag`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PutTail {
    None,
    Imm(u64),
    Flag(u8),
}

impl PutTail {
    /// The two words a record carries it in.
    pub(crate) fn words(self) -> [u64; 2] {
        match self {
            PutTail::None => [0, 0],
            PutTail::Imm(v) => [1, v],
            PutTail::Flag(v) => [2, v as u64],
        }
    }
    /// Read back from a record (`None` for a malformed pair).
    pub(crate) fn from_words(kind: u64, value: u64) -> Option<PutTail> {
        match kind {
            0 => Some(PutTail::None),
            1 => Some(PutTail::Imm(value)),
            2 => u8::try_from(value).ok().map(PutTail::Flag),
            _ => None,
        }
    }
    /// Bytes the target range covers beyond the data.
    pub(crate) fn extra(self) -> usize {
        matches!(self, PutTail::Flag(_)) as usize
    }
}

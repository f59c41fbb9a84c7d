//! The quiet puts' compact layouts (eager messages and rendezvous headers, no acknowledgement,
//! inline data at offset 0), read in place by the receive fast path, and the buffers messages
//! are encoded into.

use crate::initiator::QUIET_OP;
use crate::types::PtIndex;

/// A put that asks for no acknowledgement, with inline data at offset 0 (an eager message), in
/// a compact layout: with a short payload the whole record fits one cache line of a ring.
pub(super) const K_PUT_QUIET: u8 = 5;
/// Bytes of a compact quiet put before its data.
pub(super) const PUT_QUIET_HEADER: usize = 1 + 4 + 4 + 4 + 8 + 8;
/// [`K_PUT_QUIET`] in a shorter layout, for a portal below 256, a descriptor below 65536, and
/// header data and length below 65536 (every eager message but one of exactly 64 KiB): kind,
/// portal (u8), descriptor, match bits, header data and length (u16), 16 bytes in all, so an
/// eager message of up to 32 bytes and the ring's 16-byte record header make one cache line
/// (19 in the long layout).
pub(super) const K_PUT_QUIET_SHORT: u8 = 6;
/// Bytes of a short quiet put before its data.
pub(super) const PUT_QUIET_SHORT_HEADER: usize = 1 + 1 + 2 + 8 + 2 + 2;
/// [`K_PUT_QUIET`] that also publishes a region of the initiator (its key after the header
/// data): the rest of a rendezvous message, which the target reads with direct gets
/// (SEMANTICS.md §12).
pub(super) const K_PUT_QUIET_PUBLISHED: u8 = 7;
/// Bytes of a publishing quiet put before its data.
pub(super) const PUT_QUIET_PUBLISHED_HEADER: usize = PUT_QUIET_HEADER + 8;

/// A quiet put (an eager message, or a rendezvous header) read in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QuietPut<'a> {
    pub(crate) pt: PtIndex,
    /// The initiator's memory descriptor (failures are reported on it).
    pub(crate) md: u32,
    pub(crate) bits: u64,
    pub(crate) hdr_data: u64,
    /// The key of a region of the initiator's that the target may read (a publishing put).
    pub(crate) published: Option<u64>,
    pub(crate) payload: &'a [u8],
}

/// A compact quiet put read in place, or `None` for any other message (or a malformed one).
/// The receive fast path's decoder: a few loads instead of a full decode.
#[inline]
pub(crate) fn peek_quiet_put(b: &[u8]) -> Option<QuietPut<'_>> {
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    match b.first() {
        Some(&K_PUT_QUIET_SHORT) if b.len() >= PUT_QUIET_SHORT_HEADER => {
            let payload = &b[PUT_QUIET_SHORT_HEADER..];
            if payload.len() != usize::from(u16_at(14)) {
                return None;
            }
            Some(QuietPut {
                pt: PtIndex(u32::from(b[1])),
                md: u32::from(u16_at(2)),
                bits: u64_at(4),
                hdr_data: u64::from(u16_at(12)),
                published: None,
                payload,
            })
        }
        Some(&k @ (K_PUT_QUIET | K_PUT_QUIET_PUBLISHED)) => {
            let published = k == K_PUT_QUIET_PUBLISHED;
            let header = match published {
                true => PUT_QUIET_PUBLISHED_HEADER,
                false => PUT_QUIET_HEADER,
            };
            if b.len() < header {
                return None;
            }
            let payload = &b[header..];
            if payload.len() != u32_at(9) as usize {
                return None;
            }
            Some(QuietPut {
                pt: PtIndex(u32_at(1)),
                md: u32_at(5),
                bits: u64_at(13),
                hdr_data: u64_at(21),
                published: published.then(|| u64_at(29)),
                payload,
            })
        }
        _ => None,
    }
}

/// Appends the header of a quiet put (`op` a quiet operation, no acknowledgement, inline data
/// at offset 0) of `len` bytes: what [`Msg::encode_into`] writes before the data, so a sender
/// can hand the header and the caller's bytes to the transport separately (no copy of the
/// data into a wire buffer). False, with nothing written, when no quiet layout fits.
pub(crate) fn encode_quiet_header<B: WireBuf>(
    v: &mut B,
    op: u64,
    pt: PtIndex,
    bits: u64,
    hdr_data: u64,
    len: usize,
) -> bool {
    if let Some(header) = quiet_header_short(op, pt, bits, hdr_data, len) {
        v.append_slice(&header);
        return true;
    }
    if op & QUIET_OP == 0 {
        return false;
    }
    let Ok(md) = u32::try_from(op & !QUIET_OP) else {
        return false;
    };
    let Ok(len) = u32::try_from(len) else {
        return false;
    };
    v.append_slice(&[K_PUT_QUIET]);
    v.append_slice(&pt.0.to_le_bytes());
    v.append_slice(&md.to_le_bytes());
    v.append_slice(&len.to_le_bytes());
    v.append_slice(&bits.to_le_bytes());
    v.append_slice(&hdr_data.to_le_bytes());
    true
}

/// The header of a quiet put of `len` bytes in the short layout (what
/// [`encode_quiet_header`] writes for it), or `None` when it needs the long one. Built in one
/// fixed array: the eager send path writes it with a few stores, not five appends.
#[inline]
pub(crate) fn quiet_header_short(
    op: u64,
    pt: PtIndex,
    bits: u64,
    hdr_data: u64,
    len: usize,
) -> Option<[u8; PUT_QUIET_SHORT_HEADER]> {
    if op & QUIET_OP == 0 {
        return None;
    }
    let md = u16::try_from(op & !QUIET_OP).ok()?;
    let pt = u8::try_from(pt.0).ok()?;
    let hdr = u16::try_from(hdr_data).ok()?;
    let len = u16::try_from(len).ok()?;
    let mut h = [0u8; PUT_QUIET_SHORT_HEADER];
    h[0] = K_PUT_QUIET_SHORT;
    h[1] = pt;
    h[2..4].copy_from_slice(&md.to_le_bytes());
    h[4..12].copy_from_slice(&bits.to_le_bytes());
    h[12..14].copy_from_slice(&hdr.to_le_bytes());
    h[14..16].copy_from_slice(&len.to_le_bytes());
    Some(h)
}

/// A buffer messages are encoded into.
pub(crate) trait WireBuf {
    /// Appends `b`.
    fn append_slice(&mut self, b: &[u8]);
}

impl WireBuf for Vec<u8> {
    fn append_slice(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
}

/// Appends the header of a quiet put of `len` bytes that publishes the initiator's region
/// `key` (see [`encode_quiet_header`]); false, with nothing written, when `op` is not a quiet
/// operation or `len` does not fit.
pub(crate) fn encode_published_header<B: WireBuf>(
    v: &mut B,
    op: u64,
    pt: PtIndex,
    bits: u64,
    hdr_data: u64,
    key: u64,
    len: usize,
) -> bool {
    if op & QUIET_OP == 0 {
        return false;
    }
    let (Ok(md), Ok(len)) = (u32::try_from(op & !QUIET_OP), u32::try_from(len)) else {
        return false;
    };
    v.append_slice(&[K_PUT_QUIET_PUBLISHED]);
    v.append_slice(&pt.0.to_le_bytes());
    v.append_slice(&md.to_le_bytes());
    v.append_slice(&len.to_le_bytes());
    v.append_slice(&bits.to_le_bytes());
    v.append_slice(&hdr_data.to_le_bytes());
    v.append_slice(&key.to_le_bytes());
    true
}

/// Bytes of the longest quiet header, for a stack buffer.
pub(crate) const QUIET_HEADER_MAX: usize = PUT_QUIET_PUBLISHED_HEADER;

/// A fixed buffer on the stack for short messages (not zeroed: only what was written is read).
pub(crate) struct StackBuf<const N: usize> {
    buf: [std::mem::MaybeUninit<u8>; N],
    len: usize,
}

impl<const N: usize> StackBuf<N> {
    pub(crate) fn new() -> Self {
        StackBuf {
            buf: [std::mem::MaybeUninit::uninit(); N],
            len: 0,
        }
    }
    /// What was written.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: the first `len` bytes were written by `append_slice`; `MaybeUninit<u8>` has
        // the layout of `u8`.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr() as *const u8, self.len) }
    }
}

impl<const N: usize> WireBuf for StackBuf<N> {
    /// Callers size `N` for what they encode; past it, the copy panics (a bug, not input).
    fn append_slice(&mut self, b: &[u8]) {
        let end = self.len + b.len();
        let dst = &mut self.buf[self.len..end];
        // SAFETY: `dst` and `b` have the same length (the slice index checked it), and
        // `MaybeUninit<u8>` has the layout of `u8`.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), dst.as_mut_ptr() as *mut u8, b.len()) };
        self.len = end;
    }
}

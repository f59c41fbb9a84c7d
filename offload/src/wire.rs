//! The network interface's messages between ranks, carried as transport active messages.
//! Little-endian, fixed layouts; decoding checks every length and never panics.

use crate::initiator::QUIET_OP;
use crate::types::{AckReq, List, NiFail, PtIndex};

const K_PUT: u8 = 1;
const K_GET: u8 = 2;
const K_ACK: u8 = 3;
const K_REPLY: u8 = 4;
/// A put that asks for no acknowledgement, with inline data at offset 0 (an eager message), in
/// a compact layout: with a short payload the whole record fits one cache line of a ring.
const K_PUT_QUIET: u8 = 5;
/// Bytes of a compact quiet put before its data.
const PUT_QUIET_HEADER: usize = 1 + 4 + 4 + 4 + 8 + 8;
/// [`K_PUT_QUIET`] in a shorter layout, for a portal below 256, a descriptor below 65536, and
/// header data and length below 65536 (every eager message): kind, portal (u8), descriptor,
/// match bits, header data and length (u16), 16 bytes in all, so an eager message of up to
/// 32 bytes and the ring's 16-byte record header make one cache line (19 in the long layout).
const K_PUT_QUIET_SHORT: u8 = 6;
/// Bytes of a short quiet put before its data.
const PUT_QUIET_SHORT_HEADER: usize = 1 + 1 + 2 + 8 + 2 + 2;
/// In a Done message's list byte: the entry disabled acknowledgement events.
const NO_ACK_BIT: u8 = 0x80;

/// Bytes of a put header before inline data.
pub(crate) const PUT_HEADER: usize = 3 + 4 + 8 * 5;

/// A compact quiet put (an eager message) read in place: `(pt, match bits, header data,
/// payload)`, or `None` for any other message (or a malformed one). The receive fast path's
/// decoder: a few loads instead of a full decode.
#[inline]
pub(crate) fn peek_quiet_put(b: &[u8]) -> Option<(PtIndex, u64, u64, &[u8])> {
    peek_quiet_put_md(b).map(|(pt, _, bits, hdr_data, payload)| (pt, bits, hdr_data, payload))
}

/// [`peek_quiet_put`] with the initiator's descriptor.
#[inline]
fn peek_quiet_put_md(b: &[u8]) -> Option<(PtIndex, u32, u64, u64, &[u8])> {
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    match b.first() {
        Some(&K_PUT_QUIET_SHORT) if b.len() >= PUT_QUIET_SHORT_HEADER => {
            let payload = &b[PUT_QUIET_SHORT_HEADER..];
            if payload.len() != usize::from(u16_at(14)) {
                return None;
            }
            let (pt, md) = (u32::from(b[1]), u32::from(u16_at(2)));
            Some((PtIndex(pt), md, u64_at(4), u64::from(u16_at(12)), payload))
        }
        Some(&K_PUT_QUIET) if b.len() >= PUT_QUIET_HEADER => {
            let payload = &b[PUT_QUIET_HEADER..];
            if payload.len() != u32_at(9) as usize {
                return None;
            }
            Some((
                PtIndex(u32_at(1)),
                u32_at(5),
                u64_at(13),
                u64_at(21),
                payload,
            ))
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

/// Where a put's data comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PutData<'a> {
    /// In the message.
    Inline(&'a [u8]),
    /// To be pulled by the target: the initiator's region key and offset.
    Pull { key: u64, offset: u64 },
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Msg<'a> {
    Put {
        op: u64,
        pt: PtIndex,
        ack: AckReq,
        bits: u64,
        remote_offset: u64,
        hdr_data: u64,
        rlength: u64,
        data: PutData<'a>,
    },
    Get {
        op: u64,
        pt: PtIndex,
        bits: u64,
        remote_offset: u64,
        rlength: u64,
        key: u64,
        md_offset: u64,
    },
    /// Completion of a put (`reply == false`) or a get (`reply == true`) at the target.
    Done {
        reply: bool,
        op: u64,
        fail: NiFail,
        /// The target's entry disabled acknowledgement events.
        no_ack: bool,
        list: Option<List>,
        mlength: u64,
        remote_offset: u64,
    },
}

fn list_code(l: Option<List>) -> u8 {
    match l {
        None => 0,
        Some(List::Priority) => 1,
        Some(List::Overflow) => 2,
    }
}

impl Msg<'_> {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64);
        self.encode_into(&mut v);
        v
    }

    /// Appends the encoding to `v` (a buffer reused across messages saves an allocation).
    pub(crate) fn encode_into<B: WireBuf>(&self, v: &mut B) {
        let u64s = |v: &mut B, xs: &[u64]| xs.iter().for_each(|x| v.append_slice(&x.to_le_bytes()));
        match self {
            Msg::Put {
                op,
                pt,
                ack,
                bits,
                remote_offset,
                hdr_data,
                rlength,
                data,
            } => {
                if let (AckReq::None, 0, PutData::Inline(d)) = (ack, *remote_offset, data) {
                    if *rlength == d.len() as u64
                        && encode_quiet_header(v, *op, *pt, *bits, *hdr_data, d.len())
                    {
                        v.append_slice(d);
                        return;
                    }
                }
                let mode = matches!(data, PutData::Pull { .. }) as u8;
                v.append_slice(&[K_PUT, ack.code(), mode]);
                v.append_slice(&pt.0.to_le_bytes());
                u64s(v, &[*op, *bits, *remote_offset, *hdr_data, *rlength]);
                match data {
                    PutData::Inline(d) => v.append_slice(d),
                    PutData::Pull { key, offset } => u64s(v, &[*key, *offset]),
                }
            }
            Msg::Get {
                op,
                pt,
                bits,
                remote_offset,
                rlength,
                key,
                md_offset,
            } => {
                v.append_slice(&[K_GET]);
                v.append_slice(&pt.0.to_le_bytes());
                u64s(v, &[*op, *bits, *remote_offset, *rlength, *key, *md_offset]);
            }
            Msg::Done {
                reply,
                op,
                fail,
                no_ack,
                list,
                mlength,
                remote_offset,
            } => {
                v.append_slice(&[
                    if *reply { K_REPLY } else { K_ACK },
                    fail.code(),
                    list_code(*list) | if *no_ack { NO_ACK_BIT } else { 0 },
                ]);
                u64s(v, &[*op, *mlength, *remote_offset]);
            }
        }
    }

    /// Decodes a message; `None` if it is malformed.
    pub(crate) fn decode(b: &[u8]) -> Option<Msg<'_>> {
        let mut r = Reader(b);
        match r.u8()? {
            K_PUT => {
                let ack = AckReq::from_code(r.u8()?)?;
                let mode = r.u8()?;
                let pt = PtIndex(r.u32()?);
                let [op, bits, remote_offset, hdr_data, rlength] = r.u64s::<5>()?;
                let data = match mode {
                    0 => {
                        let d = r.rest();
                        if d.len() as u64 != rlength {
                            return None;
                        }
                        PutData::Inline(d)
                    }
                    1 => {
                        let [key, offset] = r.u64s::<2>()?;
                        PutData::Pull { key, offset }
                    }
                    _ => return None,
                };
                Some(Msg::Put {
                    op,
                    pt,
                    ack,
                    bits,
                    remote_offset,
                    hdr_data,
                    rlength,
                    data,
                })
            }
            K_PUT_QUIET | K_PUT_QUIET_SHORT => {
                let (pt, md, bits, hdr_data, d) = peek_quiet_put_md(b)?;
                Some(Msg::Put {
                    op: QUIET_OP | md as u64,
                    pt,
                    ack: AckReq::None,
                    bits,
                    remote_offset: 0,
                    hdr_data,
                    rlength: d.len() as u64,
                    data: PutData::Inline(d),
                })
            }
            K_GET => {
                let pt = PtIndex(r.u32()?);
                let [op, bits, remote_offset, rlength, key, md_offset] = r.u64s::<6>()?;
                Some(Msg::Get {
                    op,
                    pt,
                    bits,
                    remote_offset,
                    rlength,
                    key,
                    md_offset,
                })
            }
            k @ (K_ACK | K_REPLY) => {
                let fail = NiFail::from_code(r.u8()?)?;
                let flags = r.u8()?;
                let no_ack = flags & NO_ACK_BIT != 0;
                let list = match flags & !NO_ACK_BIT {
                    0 => None,
                    1 => Some(List::Priority),
                    2 => Some(List::Overflow),
                    _ => return None,
                };
                let [op, mlength, remote_offset] = r.u64s::<3>()?;
                Some(Msg::Done {
                    reply: k == K_REPLY,
                    op,
                    fail,
                    no_ack,
                    list,
                    mlength,
                    remote_offset,
                })
            }
            _ => None,
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64s<const N: usize>(&mut self) -> Option<[u64; N]> {
        let mut out = [0u64; N];
        for x in &mut out {
            *x = u64::from_le_bytes(self.take(8)?.try_into().ok()?);
        }
        Some(out)
    }
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_truncation() {
        let msgs = [
            Msg::Put {
                op: 1,
                pt: PtIndex(2),
                ack: AckReq::Ack,
                bits: 3,
                remote_offset: 4,
                hdr_data: 5,
                rlength: 3,
                data: PutData::Inline(b"abc"),
            },
            Msg::Put {
                op: 1,
                pt: PtIndex(2),
                ack: AckReq::CtAck,
                bits: 3,
                remote_offset: 4,
                hdr_data: 5,
                rlength: 1 << 30,
                data: PutData::Pull { key: 9, offset: 7 },
            },
            Msg::Put {
                op: QUIET_OP | 7,
                pt: PtIndex(2),
                ack: AckReq::None,
                bits: 3,
                remote_offset: 0,
                hdr_data: 5,
                rlength: 8,
                data: PutData::Inline(b"abcdefgh"),
            },
            Msg::Get {
                op: 1,
                pt: PtIndex(0),
                bits: 2,
                remote_offset: 3,
                rlength: 4,
                key: 5,
                md_offset: 6,
            },
            Msg::Done {
                reply: true,
                op: 8,
                fail: NiFail::PtDisabled,
                no_ack: true,
                list: Some(List::Overflow),
                mlength: 2,
                remote_offset: 1,
            },
        ];
        // The eager message's short layout: header and 8 bytes in one 64-byte ring record.
        assert_eq!(msgs[2].encode()[0], K_PUT_QUIET_SHORT);
        assert_eq!(msgs[2].encode().len(), PUT_QUIET_SHORT_HEADER + 8);
        for m in msgs.iter() {
            let b = m.encode();
            assert_eq!(Msg::decode(&b), Some(m.clone()));
            for cut in 0..b.len() {
                if let Some(short) = Msg::decode(&b[..cut]) {
                    panic!("a truncated message decoded: {short:?}");
                }
            }
        }
        assert_eq!(Msg::decode(&[99]), None);
        let quiet = msgs[2].encode();
        assert_eq!(
            peek_quiet_put(&quiet),
            Some((PtIndex(2), 3, 5, &b"abcdefgh"[..]))
        );
        for cut in 0..quiet.len() {
            assert_eq!(peek_quiet_put(&quiet[..cut]), None);
        }
        assert_eq!(peek_quiet_put(&msgs[0].encode()), None);
    }

    fn quiet(md: u64, pt: u32, hdr_data: u64, data: &[u8]) -> Msg<'_> {
        Msg::Put {
            op: QUIET_OP | md,
            pt: PtIndex(pt),
            ack: AckReq::None,
            bits: u64::MAX - 1,
            remote_offset: 0,
            hdr_data,
            rlength: data.len() as u64,
            data: PutData::Inline(data),
        }
    }

    #[test]
    fn eager_messages_of_up_to_32_bytes_fit_one_ring_line() {
        // 16 bytes of ring record header, then the message: 64 bytes in all.
        for len in 0..=32usize {
            let data = vec![7u8; len];
            let b = quiet(3, 1, len as u64, &data).encode();
            assert!(16 + b.len() <= 64, "{len} bytes encode to {}", b.len());
        }
    }

    #[test]
    fn quiet_puts_take_the_short_layout_up_to_its_limits_and_the_long_one_beyond() {
        let data = [1u8, 2, 3];
        let cases = [
            (0, 0, 0, K_PUT_QUIET_SHORT),
            (65535, 255, 65535, K_PUT_QUIET_SHORT),
            (65536, 0, 0, K_PUT_QUIET),
            (0, 256, 0, K_PUT_QUIET),
            (0, 0, 65536, K_PUT_QUIET),
            (7, 9, u64::MAX, K_PUT_QUIET),
        ];
        for (md, pt, hdr, kind) in cases {
            let m = quiet(md, pt, hdr, &data);
            let b = m.encode();
            assert_eq!(b[0], kind);
            assert_eq!(Msg::decode(&b), Some(m.clone()));
            let peeked = (PtIndex(pt), u64::MAX - 1, hdr, &data[..]);
            assert_eq!(peek_quiet_put(&b), Some(peeked));
            for cut in 0..b.len() {
                assert_eq!(Msg::decode(&b[..cut]), None);
                assert_eq!(peek_quiet_put(&b[..cut]), None);
            }
        }
        // A payload of 65536 bytes does not fit the short layout's length.
        let big = vec![0u8; 65536];
        assert_eq!(quiet(1, 1, 1, &big).encode()[0], K_PUT_QUIET);
    }
}

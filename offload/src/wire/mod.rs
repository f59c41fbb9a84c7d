//! The network interface's messages between ranks, carried as transport active messages.
//! Little-endian, fixed layouts; decoding checks every length and never panics.

mod quiet;

use crate::initiator::QUIET_OP;
use crate::types::{AckReq, List, NiFail, PtIndex};
use quiet::*;
pub(crate) use quiet::{
    encode_published_header, encode_quiet_header, peek_quiet_put, quiet_header_short, QuietPut,
    StackBuf, WireBuf, QUIET_HEADER_MAX,
};

const K_PUT: u8 = 1;
const K_GET: u8 = 2;
const K_ACK: u8 = 3;
const K_REPLY: u8 = 4;
/// A direct get's notice to the target (`Msg::GetNotice`).
const K_GET_NOTICE: u8 = 8;
/// In a Done message's list byte: the entry disabled acknowledgement events.
const NO_ACK_BIT: u8 = 0x80;

/// Bytes of a put header before inline data (a publishing put has 8 more).
pub(crate) const PUT_HEADER: usize = 3 + 4 + 8 * 5;

/// Where a put's data comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PutData<'a> {
    /// In the message.
    Inline(&'a [u8]),
    /// To be pulled by the target: the initiator's region key and offset.
    Pull { key: u64, offset: u64 },
    /// In the message, and the initiator's region `key` published with it: the target may
    /// read that region with direct gets (the rest of a rendezvous message).
    Published { bytes: &'a [u8], key: u64 },
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
    /// A direct get has read `rlength` bytes at `remote_offset` of the region the target
    /// published (or failed to, `fail`): the target counts it on the entry `pt` and `bits`
    /// select, as if it had served a get (SEMANTICS.md §12). Not answered.
    GetNotice {
        pt: PtIndex,
        bits: u64,
        remote_offset: u64,
        rlength: u64,
        fail: NiFail,
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
                if let (AckReq::None, 0) = (ack, *remote_offset) {
                    let quiet = match data {
                        PutData::Inline(d) if *rlength == d.len() as u64 => {
                            encode_quiet_header(v, *op, *pt, *bits, *hdr_data, d.len()).then_some(d)
                        }
                        PutData::Published { bytes, key } if *rlength == bytes.len() as u64 => {
                            let (op, pt, bits, hdr) = (*op, *pt, *bits, *hdr_data);
                            encode_published_header(v, op, pt, bits, hdr, *key, bytes.len())
                                .then_some(bytes)
                        }
                        _ => None,
                    };
                    if let Some(d) = quiet {
                        v.append_slice(d);
                        return;
                    }
                }
                let mode = match data {
                    PutData::Inline(_) => 0,
                    PutData::Pull { .. } => 1,
                    PutData::Published { .. } => 2,
                };
                v.append_slice(&[K_PUT, ack.code(), mode]);
                v.append_slice(&pt.0.to_le_bytes());
                u64s(v, &[*op, *bits, *remote_offset, *hdr_data, *rlength]);
                match data {
                    PutData::Inline(d) => v.append_slice(d),
                    PutData::Pull { key, offset } => u64s(v, &[*key, *offset]),
                    PutData::Published { bytes, key } => {
                        u64s(v, &[*key]);
                        v.append_slice(bytes);
                    }
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
            Msg::GetNotice {
                pt,
                bits,
                remote_offset,
                rlength,
                fail,
            } => {
                v.append_slice(&[K_GET_NOTICE, fail.code()]);
                v.append_slice(&pt.0.to_le_bytes());
                u64s(v, &[*bits, *remote_offset, *rlength]);
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
                    2 => {
                        let [key] = r.u64s::<1>()?;
                        let bytes = r.rest();
                        if bytes.len() as u64 != rlength {
                            return None;
                        }
                        PutData::Published { bytes, key }
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
            K_PUT_QUIET | K_PUT_QUIET_SHORT | K_PUT_QUIET_PUBLISHED => {
                let q = peek_quiet_put(b)?;
                Some(Msg::Put {
                    op: QUIET_OP | q.md as u64,
                    pt: q.pt,
                    ack: AckReq::None,
                    bits: q.bits,
                    remote_offset: 0,
                    hdr_data: q.hdr_data,
                    rlength: q.payload.len() as u64,
                    data: match q.published {
                        None => PutData::Inline(q.payload),
                        Some(key) => PutData::Published {
                            bytes: q.payload,
                            key,
                        },
                    },
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
            K_GET_NOTICE => {
                let fail = NiFail::from_code(r.u8()?)?;
                let pt = PtIndex(r.u32()?);
                let [bits, remote_offset, rlength] = r.u64s::<3>()?;
                if !r.rest().is_empty() {
                    return None;
                }
                Some(Msg::GetNotice {
                    pt,
                    bits,
                    remote_offset,
                    rlength,
                    fail,
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
mod fuzz;
#[cfg(test)]
mod tests;

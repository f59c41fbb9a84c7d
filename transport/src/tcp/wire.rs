//! The tcp wire format. Every frame is `body_len:u32, kind:u8, body`, little endian; the body
//! length is checked against [`MAX_BODY`] before anything is allocated, and every field is read
//! with bounds checks, so a malformed or truncated frame is an error that closes the link.

use crate::types::Rank;

/// Largest data chunk one frame carries; larger puts and get replies are split.
pub const CHUNK: usize = 256 * 1024;
/// The `op` of a put whose sender wants no acknowledgement (`Fabric::put_now`); never an
/// operation id.
pub const UNACKNOWLEDGED: u64 = u64::MAX;
/// Largest frame body accepted.
pub const MAX_BODY: usize = CHUNK + 64;
/// Bytes before the body.
pub const HEADER: usize = 5;

/// Handshake magic and version, sent first by the connecting side with the job secret.
pub const MAGIC: [u8; 4] = *b"RDCL";
/// Wire protocol version.
pub const VERSION: u16 = 1;
/// Size of the hello: magic, version, rank, secret.
pub const HELLO_LEN: usize = 4 + 2 + 4 + 16;

/// Remote-access status carried in acknowledgements.
pub const ST_OK: u8 = 0;
/// The key is unknown or stale.
pub const ST_BAD_KEY: u8 = 1;
/// The range does not fit the region.
pub const ST_OUT_OF_RANGE: u8 = 2;

/// One decoded frame; `data` borrows from the read buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// An active message.
    Message {
        /// Its bytes.
        data: &'a [u8],
    },
    /// One chunk of a put: `chunk_off` within the range `base..base+total` of region `key`.
    Put {
        /// The initiator's operation id, echoed in the [`Frame::PutAck`].
        op: u64,
        /// The target's region key.
        key: u64,
        /// Where the whole put starts in the region.
        base: u64,
        /// The whole put's length.
        total: u64,
        /// Where this chunk starts within the put.
        chunk_off: u64,
        /// The immediate delivered to the target once the last chunk is in.
        imm: Option<u64>,
        /// The flag byte of `Fabric::put_flag`, stored after the data (at `base + total`)
        /// once the last chunk is in. A put has an immediate or a flag, not both.
        flag: Option<u8>,
        /// This chunk's bytes.
        data: &'a [u8],
    },
    /// The target's answer to a put.
    PutAck {
        /// The put's operation id.
        op: u64,
        /// [`ST_OK`], [`ST_BAD_KEY`] or [`ST_OUT_OF_RANGE`].
        status: u8,
        /// The region's length (for the initiator's error message).
        region_len: u64,
    },
    /// A request to read `len` bytes at `offset` of region `key`.
    Get {
        /// The initiator's operation id, echoed in each [`Frame::GetData`].
        op: u64,
        /// The target's region key.
        key: u64,
        /// Where the read starts in the region.
        offset: u64,
        /// How many bytes.
        len: u64,
    },
    /// One chunk of a get's reply (or its failure, with no data).
    GetData {
        /// The get's operation id.
        op: u64,
        /// Where this chunk starts within the read.
        chunk_off: u64,
        /// [`ST_OK`], [`ST_BAD_KEY`] or [`ST_OUT_OF_RANGE`].
        status: u8,
        /// The region's length (for the initiator's error message).
        region_len: u64,
        /// This chunk's bytes.
        data: &'a [u8],
    },
    /// Keeps the link's liveness timer fed.
    Heartbeat,
    /// The peer is closing its endpoint.
    Bye,
}

const K_MESSAGE: u8 = 1;
const K_PUT: u8 = 2;
const K_PUT_ACK: u8 = 3;
const K_GET: u8 = 4;
const K_GET_DATA: u8 = 5;
const K_HEARTBEAT: u8 = 6;
const K_BYE: u8 = 7;

struct Writer(Vec<u8>);
impl Writer {
    fn new(kind: u8, body_hint: usize) -> Self {
        let mut v = Vec::with_capacity(HEADER + body_hint);
        v.extend_from_slice(&[0, 0, 0, 0, kind]);
        Writer(v)
    }
    fn u8(mut self, x: u8) -> Self {
        self.0.push(x);
        self
    }
    fn u64(mut self, x: u64) -> Self {
        self.0.extend_from_slice(&x.to_le_bytes());
        self
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    fn finish(mut self) -> Vec<u8> {
        let body = (self.0.len() - HEADER) as u32;
        self.0[..4].copy_from_slice(&body.to_le_bytes());
        self.0
    }
}

/// A message frame carrying the concatenation of `parts` (header included), the one copy.
pub fn message_frame(parts: &[&[u8]]) -> Vec<u8> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut v = Vec::with_capacity(HEADER + len);
    v.extend_from_slice(&message_head(len));
    for p in parts {
        v.extend_from_slice(p);
    }
    v
}

/// The header of a message frame whose body (the message) is `len` bytes.
pub fn message_head(len: usize) -> [u8; HEADER] {
    let b = (len as u32).to_le_bytes();
    [b[0], b[1], b[2], b[3], K_MESSAGE]
}

impl Frame<'_> {
    /// Encodes the frame, header included.
    pub fn encode(&self) -> Vec<u8> {
        match *self {
            Frame::Message { data } => message_frame(&[data]),
            Frame::Put {
                op,
                key,
                base,
                total,
                chunk_off,
                imm,
                flag,
                data,
            } => Writer::new(K_PUT, 49 + data.len())
                .u64(op)
                .u64(key)
                .u64(base)
                .u64(total)
                .u64(chunk_off)
                // What follows: nothing (0), an immediate (1) or a flag (2).
                .u8(match (imm, flag) {
                    (Some(_), _) => 1,
                    (None, Some(_)) => 2,
                    (None, None) => 0,
                })
                .u64(imm.or(flag.map(u64::from)).unwrap_or(0))
                .bytes(data)
                .finish(),
            Frame::PutAck {
                op,
                status,
                region_len,
            } => Writer::new(K_PUT_ACK, 17)
                .u64(op)
                .u8(status)
                .u64(region_len)
                .finish(),
            Frame::Get {
                op,
                key,
                offset,
                len,
            } => Writer::new(K_GET, 32)
                .u64(op)
                .u64(key)
                .u64(offset)
                .u64(len)
                .finish(),
            Frame::GetData {
                op,
                chunk_off,
                status,
                region_len,
                data,
            } => Writer::new(K_GET_DATA, 25 + data.len())
                .u64(op)
                .u64(chunk_off)
                .u8(status)
                .u64(region_len)
                .bytes(data)
                .finish(),
            Frame::Heartbeat => Writer::new(K_HEARTBEAT, 0).finish(),
            Frame::Bye => Writer::new(K_BYE, 0).finish(),
        }
    }
}

/// Encodes `frame` (a `Put` or `GetData` with empty `data`) followed by `len` bytes read from
/// `src`: region memory that peers may be writing at the same time, so it is copied as raw
/// bytes and never seen as a Rust slice.
///
/// # Safety
/// `src` must be valid for reads of `len` bytes for the duration of the call.
pub unsafe fn encode_with_raw_data(frame: &Frame<'_>, src: *const u8, len: usize) -> Vec<u8> {
    debug_assert!(matches!(
        frame,
        Frame::Put { data: &[], .. } | Frame::GetData { data: &[], .. }
    ));
    let mut v = frame.encode();
    v.reserve_exact(len);
    // SAFETY: `reserve_exact` made room for `len` more bytes; the caller vouches for `src`.
    unsafe {
        std::ptr::copy_nonoverlapping(src, v.as_mut_ptr().add(v.len()), len);
        v.set_len(v.len() + len);
    }
    let body = (v.len() - HEADER) as u32;
    v[..4].copy_from_slice(&body.to_le_bytes());
    v
}

/// The encoding of `frame` (a [`Frame::Put`] or [`Frame::GetData`] without data) as the head
/// of a frame whose `len` payload bytes follow it on the stream: its length counts them.
pub fn encode_head(frame: &Frame<'_>, len: usize) -> Vec<u8> {
    debug_assert!(matches!(
        frame,
        Frame::Put { data: &[], .. } | Frame::GetData { data: &[], .. }
    ));
    let mut v = frame.encode();
    let body = (v.len() - HEADER + len) as u32;
    v[..4].copy_from_slice(&body.to_le_bytes());
    v
}

struct Reader<'a>(&'a [u8]);
impl<'a> Reader<'a> {
    fn u8(&mut self) -> Result<u8, String> {
        let (&b, rest) = self.0.split_first().ok_or("frame too short")?;
        self.0 = rest;
        Ok(b)
    }
    fn u64(&mut self) -> Result<u64, String> {
        if self.0.len() < 8 {
            return Err("frame too short".into());
        }
        let (a, rest) = self.0.split_at(8);
        self.0 = rest;
        let mut b = [0u8; 8];
        b.copy_from_slice(a);
        Ok(u64::from_le_bytes(b))
    }
    fn end(&self) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(format!("{} trailing bytes", self.0.len()))
        }
    }
}

/// Splits one complete frame off the front of `buf`: `Ok(None)` if more bytes are needed,
/// `Ok(Some((frame, consumed)))`, or an error for a frame that can never be valid.
pub fn decode(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, String> {
    if buf.len() < HEADER {
        return Ok(None);
    }
    let body_len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if body_len > MAX_BODY {
        return Err(format!("frame body of {body_len} bytes exceeds {MAX_BODY}"));
    }
    if buf.len() < HEADER + body_len {
        return Ok(None);
    }
    let kind = buf[4];
    let mut r = Reader(&buf[HEADER..HEADER + body_len]);
    let frame = match kind {
        K_MESSAGE => {
            if body_len > crate::MAX_MESSAGE_SIZE {
                return Err(format!("message of {body_len} bytes exceeds the limit"));
            }
            Frame::Message { data: r.0 }
        }
        K_PUT => {
            let (op, key, base, total, chunk_off) =
                (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            let extra = r.u8()?;
            let value = r.u64()?;
            let (imm, flag) = match extra {
                0 => (None, None),
                1 => (Some(value), None),
                2 => (
                    None,
                    Some(u8::try_from(value).map_err(|_| "flag value out of range")?),
                ),
                _ => return Err("bad immediate/flag marker".into()),
            };
            Frame::Put {
                op,
                key,
                base,
                total,
                chunk_off,
                imm,
                flag,
                data: r.0,
            }
        }
        K_PUT_ACK => {
            let f = Frame::PutAck {
                op: r.u64()?,
                status: r.u8()?,
                region_len: r.u64()?,
            };
            r.end()?;
            f
        }
        K_GET => {
            let f = Frame::Get {
                op: r.u64()?,
                key: r.u64()?,
                offset: r.u64()?,
                len: r.u64()?,
            };
            r.end()?;
            f
        }
        K_GET_DATA => {
            let (op, chunk_off, status, region_len) = (r.u64()?, r.u64()?, r.u8()?, r.u64()?);
            Frame::GetData {
                op,
                chunk_off,
                status,
                region_len,
                data: r.0,
            }
        }
        K_HEARTBEAT => Frame::Heartbeat,
        K_BYE => Frame::Bye,
        other => return Err(format!("unknown frame kind {other}")),
    };
    if matches!(kind, K_HEARTBEAT | K_BYE) && body_len != 0 {
        return Err("control frame with a body".into());
    }
    Ok(Some((frame, HEADER + body_len)))
}

/// Bytes of a put frame's body before its data.
const PUT_FIXED: usize = 49;
/// Bytes of a get-data frame's body before its data.
const GET_DATA_FIXED: usize = 25;

/// The head of a put or get-data frame at the start of `buf` once its fixed fields are all
/// there, whether or not its data is: the frame with empty `data`, the length of its head
/// (header and fixed fields) and of its data. `None` for other frames and shorter input;
/// errors as [`decode`] has them.
pub fn decode_head(buf: &[u8]) -> Result<Option<(Frame<'static>, usize, usize)>, String> {
    if buf.len() < HEADER {
        return Ok(None);
    }
    let body_len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if body_len > MAX_BODY {
        return Err(format!("frame body of {body_len} bytes exceeds {MAX_BODY}"));
    }
    let fixed = match buf[4] {
        K_PUT => PUT_FIXED,
        K_GET_DATA => GET_DATA_FIXED,
        _ => return Ok(None),
    };
    // A body shorter than its fixed fields is reported by `decode` once it is all in.
    if body_len < fixed || buf.len() < HEADER + fixed {
        return Ok(None);
    }
    // The head alone, its length saying so, decodes as the frame without data.
    let mut head = [0u8; HEADER + PUT_FIXED];
    head[..HEADER + fixed].copy_from_slice(&buf[..HEADER + fixed]);
    head[..4].copy_from_slice(&(fixed as u32).to_le_bytes());
    let frame = match decode(&head[..HEADER + fixed])? {
        Some((
            Frame::Put {
                op,
                key,
                base,
                total,
                chunk_off,
                imm,
                flag,
                ..
            },
            _,
        )) => Frame::Put {
            op,
            key,
            base,
            total,
            chunk_off,
            imm,
            flag,
            data: &[],
        },
        Some((
            Frame::GetData {
                op,
                chunk_off,
                status,
                region_len,
                ..
            },
            _,
        )) => Frame::GetData {
            op,
            chunk_off,
            status,
            region_len,
            data: &[],
        },
        _ => return Err("a frame head that does not decode".into()),
    };
    Ok(Some((frame, HEADER + fixed, body_len - fixed)))
}

/// The hello a connecting rank sends.
pub fn hello(rank: Rank, secret: &[u8; 16]) -> [u8; HELLO_LEN] {
    let mut h = [0u8; HELLO_LEN];
    h[0..4].copy_from_slice(&MAGIC);
    h[4..6].copy_from_slice(&VERSION.to_le_bytes());
    h[6..10].copy_from_slice(&rank.to_le_bytes());
    h[10..26].copy_from_slice(secret);
    h
}

/// Checks a hello against the job secret; returns the peer's rank.
pub fn check_hello(h: &[u8; HELLO_LEN], secret: &[u8; 16]) -> Result<Rank, String> {
    if h[0..4] != MAGIC {
        return Err("not an rdcoll connection".into());
    }
    if u16::from_le_bytes([h[4], h[5]]) != VERSION {
        return Err("wire protocol version mismatch".into());
    }
    // Compare in constant time: the secret is the job's only credential.
    let diff = h[10..26]
        .iter()
        .zip(secret)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if diff != 0 {
        return Err("wrong job secret".into());
    }
    Ok(u32::from_le_bytes([h[6], h[7], h[8], h[9]]))
}

#[cfg(test)]
mod tests;

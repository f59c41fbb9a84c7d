//! The wire layouts round-trip, refuse truncation, and take the compact forms where they fit.

use super::quiet::*;
use super::*;

/// One message of each kind and layout (the fuzz tests mutate these too).
pub(super) fn sample_msgs() -> Vec<Msg<'static>> {
    vec![
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
        Msg::Put {
            op: QUIET_OP | 9,
            pt: PtIndex(3),
            ack: AckReq::None,
            bits: 4,
            remote_offset: 0,
            hdr_data: 1 << 63,
            rlength: 2,
            data: PutData::Published {
                bytes: b"xy",
                key: 77,
            },
        },
        Msg::Put {
            op: 2,
            pt: PtIndex(3),
            ack: AckReq::Ack,
            bits: 4,
            remote_offset: 0,
            hdr_data: 6,
            rlength: 2,
            data: PutData::Published {
                bytes: b"xy",
                key: 78,
            },
        },
        Msg::GetNotice {
            pt: PtIndex(1),
            bits: 2,
            remote_offset: 3,
            rlength: 4,
            fail: NiFail::Undeliverable,
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
    ]
}

#[test]
fn round_trips_and_rejects_truncation() {
    let msgs = sample_msgs();
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
    let q = peek_quiet_put(&quiet).expect("a quiet put");
    assert_eq!((q.pt, q.md, q.bits, q.hdr_data), (PtIndex(2), 7, 3, 5));
    assert_eq!((q.published, q.payload), (None, &b"abcdefgh"[..]));
    for cut in 0..quiet.len() {
        assert_eq!(peek_quiet_put(&quiet[..cut]), None);
    }
    assert_eq!(peek_quiet_put(&msgs[0].encode()), None);
    // The publishing put: the quiet layout, its key read in place.
    let published = msgs[4].encode();
    assert_eq!(published[0], K_PUT_QUIET_PUBLISHED);
    let q = peek_quiet_put(&published).expect("a publishing quiet put");
    assert_eq!((q.md, q.published, q.payload), (9, Some(77), &b"xy"[..]));
    assert_eq!(msgs[5].encode()[0], K_PUT);
    assert_eq!(peek_quiet_put(&msgs[5].encode()), None);
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
        let q = peek_quiet_put(&b).expect("a quiet put");
        assert_eq!((q.pt, q.bits, q.hdr_data, q.payload), peeked);
        for cut in 0..b.len() {
            assert_eq!(Msg::decode(&b[..cut]), None);
            assert_eq!(peek_quiet_put(&b[..cut]), None);
        }
    }
    // A payload of 65536 bytes does not fit the short layout's length.
    let big = vec![0u8; 65536];
    assert_eq!(quiet(1, 1, 1, &big).encode()[0], K_PUT_QUIET);
}

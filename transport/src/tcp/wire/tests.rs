//! The wire format: round trips, heads read before their data, malformed input.

use super::*;

#[test]
fn frames_round_trip() {
    let frames = [
        Frame::Message { data: b"hello" },
        Frame::Put {
            op: 1,
            key: 2,
            base: 3,
            total: 4,
            chunk_off: 0,
            imm: Some(9),
            flag: None,
            data: b"abcd",
        },
        Frame::Put {
            op: 1,
            key: 2,
            base: 3,
            total: 4,
            chunk_off: 0,
            imm: None,
            flag: Some(200),
            data: b"abcd",
        },
        Frame::Put {
            op: 1,
            key: 2,
            base: 3,
            total: 0,
            chunk_off: 0,
            imm: None,
            flag: None,
            data: b"",
        },
        Frame::PutAck {
            op: 5,
            status: ST_OUT_OF_RANGE,
            region_len: 64,
        },
        Frame::Get {
            op: 6,
            key: 7,
            offset: 8,
            len: 9,
        },
        Frame::GetData {
            op: 6,
            chunk_off: 0,
            status: ST_OK,
            region_len: 0,
            data: b"xyz",
        },
        Frame::Heartbeat,
        Frame::Bye,
    ];
    let mut stream = Vec::new();
    for f in &frames {
        stream.extend_from_slice(&f.encode());
    }
    let mut at = 0;
    for f in &frames {
        let (got, used) = decode(&stream[at..]).unwrap().unwrap();
        assert_eq!(&got, f);
        at += used;
    }
    assert_eq!(at, stream.len());
}

#[test]
fn a_data_frame_head_decodes_before_its_data() {
    let data = vec![3u8; 1000];
    let frames = [
        Frame::Put {
            op: 1,
            key: 2,
            base: 3,
            total: 5000,
            chunk_off: 4000,
            imm: None,
            flag: Some(9),
            data: &data,
        },
        Frame::GetData {
            op: 7,
            chunk_off: 8,
            status: ST_OK,
            region_len: 0,
            data: &data,
        },
    ];
    for f in &frames {
        let enc = f.encode();
        let (head, head_len, len) = decode_head(&enc[..enc.len() - 999]).unwrap().unwrap();
        assert_eq!((head_len + len, len), (enc.len(), 1000));
        assert_eq!(encode_head(&head, len), enc[..head_len]);
        let whole = decode(&enc).unwrap().unwrap().0;
        match (head, whole) {
            (Frame::Put { data: d, .. }, Frame::Put { .. })
            | (Frame::GetData { data: d, .. }, Frame::GetData { .. }) => assert!(d.is_empty()),
            other => panic!("decoded as {other:?}"),
        }
        // Not yet all of the fixed fields: nothing.
        assert!(decode_head(&enc[..head_len - 1]).unwrap().is_none());
    }
    let msg = Frame::Message { data: &data }.encode();
    assert!(decode_head(&msg).unwrap().is_none());
}

#[test]
fn truncated_and_malformed_frames() {
    let enc = Frame::Get {
        op: 1,
        key: 2,
        offset: 3,
        len: 4,
    }
    .encode();
    for cut in 0..enc.len() {
        assert_eq!(decode(&enc[..cut]).unwrap(), None, "prefix of {cut} bytes");
    }
    // A lying length is refused before any allocation.
    assert!(decode(&[0xff, 0xff, 0xff, 0x7f, K_MESSAGE]).is_err());
    // Short body for its kind.
    assert!(decode(&[3, 0, 0, 0, K_GET, 1, 2, 3]).is_err());
    assert!(decode(&[0, 0, 0, 0, 99]).is_err());
    assert!(decode(&[1, 0, 0, 0, K_HEARTBEAT, 0]).is_err());
    // Random bytes never panic.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20_000 {
        let mut buf = [0u8; 40];
        for b in buf.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        buf[1] = 0;
        buf[2] = 0;
        buf[3] = 0;
        let _ = decode(&buf);
    }
}

#[test]
fn hello_checks_the_secret() {
    let s = [7u8; 16];
    assert_eq!(check_hello(&hello(3, &s), &s), Ok(3));
    assert!(check_hello(&hello(3, &[8u8; 16]), &s).is_err());
    let mut bad = hello(3, &s);
    bad[0] = b'X';
    assert!(check_hello(&bad, &s).is_err());
}

//! Fuzzing the tcp wire decoder: mutated frames, alone and as a byte stream cut anywhere, never
//! panic, hang, read past the buffer or decode differently with more bytes behind them; a
//! frame decoded and encoded again decodes to itself (`crate::fuzzing`).

use super::wire::{decode, decode_head, Frame, HEADER, MAX_BODY};
use crate::fuzzing::{inputs, Rng};

fn seeds() -> Vec<Vec<u8>> {
    let data = [7u8; 40];
    [
        Frame::Message { data: &data },
        Frame::Put {
            op: 1,
            key: 2,
            base: 3,
            total: 40,
            chunk_off: 0,
            imm: Some(9),
            flag: None,
            data: &data,
        },
        Frame::Put {
            op: 1,
            key: 2,
            base: 0,
            total: 80,
            chunk_off: 40,
            imm: None,
            flag: Some(1),
            data: &data,
        },
        Frame::PutAck {
            op: 5,
            status: 1,
            region_len: 4096,
        },
        Frame::Get {
            op: 6,
            key: 2,
            offset: 8,
            len: 4088,
        },
        Frame::GetData {
            op: 6,
            chunk_off: 0,
            status: 0,
            region_len: 4096,
            data: &data,
        },
        Frame::Heartbeat,
        Frame::Bye,
    ]
    .iter()
    .map(Frame::encode)
    .collect()
}

/// Decodes `buf` as the link's reader does (frame after frame until more bytes are needed or
/// one is refused), checking each step; the bytes consumed.
fn read_stream(buf: &[u8]) -> usize {
    let mut at = 0;
    loop {
        match decode(&buf[at..]) {
            Ok(None) => {
                let rest = &buf[at..];
                let need = rest.len() >= HEADER
                    && HEADER + u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize
                        > rest.len();
                assert!(rest.len() < HEADER || need, "Ok(None) with a whole frame");
                return at;
            }
            Err(_) => return at,
            Ok(Some((frame, n))) => {
                assert!(n >= HEADER && n <= buf.len() - at && n <= HEADER + MAX_BODY);
                heads_agree(&buf[at..at + n], &frame);
                let again = frame.encode();
                let (back, m) = decode(&again).expect("re-encoded").expect("whole");
                assert_eq!((back, m), (frame, again.len()), "encode/decode round trip");
                at += n;
            }
        }
    }
}

/// A whole frame's head, read alone by `decode_head` (as a landing does) at every cut of the
/// frame, is the frame without its data, and says where the data ends.
fn heads_agree(whole: &[u8], frame: &Frame<'_>) {
    for cut in [
        HEADER,
        HEADER + 25,
        HEADER + 49,
        whole.len() - 1,
        whole.len(),
    ] {
        let Some(part) = whole.get(..cut) else {
            continue;
        };
        let Some((head, head_len, len)) = decode_head(part).expect("a whole frame's head") else {
            continue;
        };
        assert_eq!(head_len + len, whole.len());
        assert!(head_len <= cut);
        let data = &whole[head_len..];
        match (head, frame) {
            (Frame::Put { data: d, .. }, Frame::Put { data: full, .. })
            | (Frame::GetData { data: d, .. }, Frame::GetData { data: full, .. }) => {
                assert!(d.is_empty());
                assert_eq!(data, *full);
            }
            (head, frame) => panic!("head {head:?} of {frame:?}"),
        }
    }
}

#[test]
fn mutated_frames_and_streams_decode_safely() {
    let seeds = seeds();
    let near: Vec<u64> = vec![HEADER as u64, MAX_BODY as u64, 40, 80, 4096];
    let mut rng = Rng::new(0x07c9_f00d);
    let mut decoded = 0u64;
    for _ in 0..inputs() {
        let a = &seeds[rng.below(seeds.len() as u64) as usize];
        let b = &seeds[rng.below(seeds.len() as u64) as usize];
        let input = rng.mutate(a, b, &near);
        let whole = read_stream(&input);
        // A head read alone never reads past the input, whatever the bytes.
        if let Ok(Some((_, head_len, _))) = decode_head(&input) {
            assert!(head_len <= input.len());
        }
        decoded += u64::from(whole > 0);
        // The same bytes with more behind them: what was decoded does not change.
        let mut longer = input.clone();
        longer.extend_from_slice(b);
        assert!(read_stream(&longer) >= whole);
        if let Ok(Some((f, n))) = decode(&input) {
            assert_eq!(decode(&longer), Ok(Some((f, n))));
        }
    }
    // Enough inputs stay valid to exercise the decoder past its checks.
    assert!(decoded * 10 > inputs(), "{decoded} of {} decoded", inputs());
}

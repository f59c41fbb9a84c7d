//! Fuzzing the NI's message decoders: mutated messages never panic; whatever decodes encodes
//! to something that decodes to the same message; and the receive fast path's in-place reader
//! (`peek_quiet_put`) never sees a message other than the one the agent's full decoder sees,
//! so the two paths cannot disagree on what arrived.

use rdcoll_transport::fuzzing::{inputs, Rng};

use super::quiet::peek_quiet_put;
use super::tests::sample_msgs;
use super::{Msg, PutData};
use crate::types::AckReq;

#[test]
fn mutated_messages_decode_safely_and_both_readers_agree() {
    let seeds: Vec<Vec<u8>> = sample_msgs().iter().map(Msg::encode).collect();
    let near = [0u64, 8, 16, 65535, 65536, 1 << 30];
    let mut rng = Rng::new(0x001a_9e77);
    let (mut decoded, mut both) = (0u64, 0u64);
    for _ in 0..inputs() {
        let a = &seeds[rng.below(seeds.len() as u64) as usize];
        let b = &seeds[rng.below(seeds.len() as u64) as usize];
        let input = rng.mutate(a, b, &near);
        let full = Msg::decode(&input);
        if let Some(m) = &full {
            decoded += 1;
            let again = m.encode();
            assert_eq!(
                Msg::decode(&again).as_ref(),
                Some(m),
                "round trip of {input:?}"
            );
        }
        let Some(q) = peek_quiet_put(&input) else {
            continue;
        };
        both += 1;
        let Some(Msg::Put {
            pt,
            ack,
            bits,
            remote_offset,
            hdr_data,
            rlength,
            data,
            ..
        }) = full
        else {
            panic!("the fast path read a put the agent does not: {input:?}");
        };
        let (bytes, published) = match data {
            PutData::Inline(b) => (b, None),
            PutData::Published { bytes, key } => (bytes, Some(key)),
            PutData::Pull { .. } => panic!("a quiet put read as a pull: {input:?}"),
        };
        assert_eq!(
            (q.pt, q.bits, q.hdr_data, q.published, q.payload),
            (pt, bits, hdr_data, published, bytes),
            "the two readers disagree on {input:?}"
        );
        assert_eq!(
            (ack, remote_offset, rlength),
            (AckReq::None, 0, bytes.len() as u64)
        );
    }
    // The mutations keep enough inputs valid to exercise the decoders past their checks.
    let n = inputs();
    assert!(
        decoded * 10 > n && both * 50 > n,
        "{decoded} decoded, {both} quiet of {n}"
    );
}

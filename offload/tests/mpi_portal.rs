//! MPI portals (SEMANTICS.md §12): priority entries and direct receives in the matching
//! engine, in post order, with unexpected headers taken at append and post time.

mod common;

use common::*;
use rdcoll_matching::{ContextId, Envelope};
use rdcoll_offload::*;

const NONCE: u64 = 0xffff;

fn bits(tag: u32) -> u64 {
    Envelope::new(ContextId::user(3).unwrap(), 0, tag).match_bits()
}

fn once() -> MeOptions {
    MeOptions {
        use_once: true,
        op_get: false,
        ..MeOptions::default()
    }
}

#[test]
fn entries_and_direct_receives_share_one_order_and_take_unexpected_headers() {
    let j = job_on(Backend::Local, NiConfig::default(), false);
    let pt = j.tgt.pt_alloc_mpi(Some(j.tgt_eq)).unwrap();
    let j = Job { pt, ..j };
    let bounce = MeOptions {
        manage_local: true,
        ..MeOptions::default()
    };
    j.append(List::Overflow, j.tgt_region(4096), 0, !0, bounce, 100);

    // An entry and a direct receive for the same tag: the older one takes the first message.
    let a = j.tgt_region(8);
    j.append(List::Priority, a.clone(), bits(7), NONCE, once(), 1);
    let mut buf = [0u8; 8];
    // SAFETY: `buf` outlives the receive, which completes below.
    let posted = unsafe {
        j.tgt
            .post_direct(pt, bits(7), NONCE, MatchId::Any, 2, buf.as_mut_ptr(), 8)
            .unwrap()
    };
    assert!(matches!(posted, DirectPost::Posted(_)));
    j.put(b"first", bits(7), 0);
    j.put(b"second", bits(7), 0);
    let evs: Vec<_> = j
        .tgt_events()
        .into_iter()
        .filter(|e| e.kind == EventKind::Put)
        .collect();
    assert_eq!(evs.len(), 1, "the direct receive raises no event");
    assert_eq!((evs[0].user_ptr, evs[0].list), (1, Some(List::Priority)));
    assert_eq!(read(&a, 0, 5), b"first");
    let (mut events, mut directs) = (Vec::new(), Vec::new());
    j.tgt
        .progress_and_collect(j.tgt_eq, &mut events, &mut directs)
        .unwrap();
    assert_eq!(directs.len(), 1);
    assert_eq!((directs[0].user_ptr, directs[0].mlength), (2, 6));
    assert_eq!(&buf[..6], b"second");

    // Unexpected: an append takes the header (PUT_OVERFLOW), a direct receive copies it out.
    j.put(b"late", bits(9), 0);
    j.put(b"later", bits(9), 0);
    j.append(List::Priority, j.tgt_region(8), bits(9), NONCE, once(), 3);
    let over: Vec<_> = j
        .tgt_events()
        .into_iter()
        .filter(|e| e.kind == EventKind::PutOverflow)
        .collect();
    assert_eq!((over.len(), over[0].user_ptr, over[0].mlength), (1, 3, 4));
    let mut buf2 = [0u8; 8];
    // SAFETY: as above.
    let posted = unsafe {
        j.tgt
            .post_direct(
                pt,
                bits(9),
                NONCE,
                MatchId::Rank(0),
                4,
                buf2.as_mut_ptr(),
                8,
            )
            .unwrap()
    };
    assert_eq!(posted, DirectPost::Matched);
    directs.clear();
    j.tgt
        .progress_and_collect(j.tgt_eq, &mut events, &mut directs)
        .unwrap();
    assert_eq!((directs[0].user_ptr, directs[0].mlength), (4, 5));
    assert_eq!(&buf2[..5], b"later");

    // Unlink and cancel withdraw; a second time they report it.
    let c = j.append(List::Priority, j.tgt_region(8), bits(11), NONCE, once(), 5);
    j.tgt.me_unlink(c).unwrap();
    assert!(j.tgt.me_unlink(c).is_err());
    let mut buf3 = [0u8; 4];
    // SAFETY: cancelled before `buf3` goes away.
    let DirectPost::Posted(h) = (unsafe {
        j.tgt
            .post_direct(pt, bits(11), NONCE, MatchId::Any, 6, buf3.as_mut_ptr(), 4)
            .unwrap()
    }) else {
        panic!("nothing queued for tag 11");
    };
    assert!(j.tgt.cancel_direct(pt, h).unwrap());
    assert!(!j.tgt.cancel_direct(pt, h).unwrap());
}

#[test]
fn entries_of_no_mpi_shape_are_refused() {
    let j = job_on(Backend::Local, NiConfig::default(), false);
    let pt = j.tgt.pt_alloc_mpi(Some(j.tgt_eq)).unwrap();
    let spec = |ignore: u64, options: MeOptions| MeSpec {
        region: j.tgt_region(8),
        match_bits: bits(1),
        ignore_bits: ignore,
        match_id: MatchId::Any,
        options,
        user_ptr: 1,
    };
    let persistent = MeOptions::default();
    assert!(j
        .tgt
        .me_append(pt, List::Priority, spec(NONCE, persistent))
        .is_err());
    assert!(
        j.tgt
            .me_append(pt, List::Priority, spec(0, once()))
            .is_err(),
        "nonce matched"
    );
    assert!(
        j.tgt
            .me_append(pt, List::Priority, spec(!0, once()))
            .is_err(),
        "context ignored"
    );
    assert!(j
        .tgt
        .me_append(pt, List::Priority, spec(NONCE, once()))
        .is_ok());
}

//! The matcher against its contract: queues, cancellation, probes, contexts, sender order,
//! Portals masks, footprint.

use super::*;
use crate::envelope::{ContextId, Source, TagPattern};

fn ctx(id: u32) -> ContextId {
    ContextId::user(id).expect("small id")
}

fn spec(context: ContextId, source: Source, tag: TagPattern) -> ReceiveSpec {
    ReceiveSpec::new(context, source, tag)
}

fn posted_handle<R, M>(outcome: PostOutcome<R, M>) -> ReceiveHandle {
    match outcome {
        PostOutcome::Posted(handle) => handle,
        PostOutcome::Matched { .. } => panic!("expected the receive to be posted"),
    }
}

fn matched_receive<R, M>(outcome: ArrivalOutcome<R, M>) -> Option<R> {
    match outcome {
        ArrivalOutcome::Matched { receive, .. } => Some(receive),
        ArrivalOutcome::Queued { .. } => None,
    }
}

#[test]
fn split_arrival_queues_updates_and_withdraws() {
    for padding in [0u32, 40] {
        let mut engine: Matcher<u32, u32> = Matcher::new();
        let c = ctx(1);
        for i in 0..padding {
            engine.queue_unexpected(Envelope::new(c, 9, 1000 + i), 1000 + i);
        }
        engine.post(spec(c, Source::Rank(0), TagPattern::Exact(1)), 7);
        assert_eq!(engine.take_posted(&Envelope::new(c, 0, 2)), None);
        assert_eq!(engine.posted_len(), 1, "a miss leaves the receive posted");
        assert_eq!(engine.take_posted(&Envelope::new(c, 0, 1)), Some(7));
        let first = engine.queue_unexpected(Envelope::new(c, 0, 5), 1);
        let second = engine.queue_unexpected(Envelope::new(c, 0, 5), 2);
        *engine.unexpected_mut(second).expect("queued") = 22;
        assert_eq!(
            engine.withdraw_unexpected(first),
            Some((Envelope::new(c, 0, 5), 1))
        );
        assert_eq!(engine.withdraw_unexpected(first), None, "stale handle");
        let any = spec(c, Source::Any, TagPattern::Exact(5));
        assert_eq!(engine.matched_probe(&any).map(|(_, m)| m), Some(22));
        assert!(engine.unexpected_mut(second).is_none(), "taken");
        assert_eq!(engine.unexpected_len(), padding as usize);
    }
}

#[test]
fn cancel_withdraws_and_stale_handles_are_errors() {
    let mut engine: Matcher<u32, u32> = Matcher::new();
    let c = ctx(1);
    let first = posted_handle(engine.post(spec(c, Source::Rank(0), TagPattern::Exact(1)), 1));
    let second = posted_handle(engine.post(spec(c, Source::Rank(0), TagPattern::Exact(1)), 2));
    assert_eq!(engine.cancel(first), Ok(1));
    assert_eq!(
        engine.cancel(first),
        Err(MatchError::StaleHandle { handle: first })
    );
    assert_eq!(
        matched_receive(engine.arrive(Envelope::new(c, 0, 1), 10)),
        Some(2),
        "cancelled receive is skipped"
    );
    assert_eq!(
        engine.cancel(second),
        Err(MatchError::StaleHandle { handle: second }),
        "a matched receive cannot be cancelled"
    );
    let bogus = ReceiveHandle {
        index: 12345,
        generation: 0,
    };
    assert!(engine.cancel(bogus).is_err());
}

#[test]
fn cancel_in_the_middle_of_a_deep_queue() {
    let mut engine: Matcher<u32, ()> = Matcher::new();
    let c = ctx(1);
    let handles: Vec<_> = (0..1000)
        .map(|i| posted_handle(engine.post(spec(c, Source::Any, TagPattern::Exact(i % 7)), i)))
        .collect();
    for i in (0..1000).step_by(2) {
        assert_eq!(engine.cancel(handles[i as usize]), Ok(i));
    }
    for i in (1..1000).step_by(2) {
        // Every earlier odd receive with this tag was taken by an earlier arrival.
        let got = matched_receive(engine.arrive(Envelope::new(c, 3, i % 7), ()));
        assert_eq!(got, Some(i));
    }
    assert_eq!(engine.posted_len(), 0);
}

#[test]
fn probe_looks_and_matched_probe_takes() {
    let mut engine: Matcher<u32, &str> = Matcher::new();
    let c = ctx(2);
    assert!(matches!(
        engine.arrive(Envelope::new(c, 4, 9), "first"),
        ArrivalOutcome::Queued { .. }
    ));
    engine.arrive(Envelope::new(c, 4, 9), "second");
    let any = spec(c, Source::Any, TagPattern::Any);
    assert_eq!(engine.probe(&any), Some((Envelope::new(c, 4, 9), &"first")));
    assert_eq!(
        engine.probe(&any).map(|(_, m)| *m),
        Some("first"),
        "probe leaves it"
    );
    assert_eq!(
        engine.matched_probe(&spec(c, Source::Rank(4), TagPattern::Exact(9))),
        Some((Envelope::new(c, 4, 9), "first"))
    );
    assert_eq!(engine.probe(&any).map(|(_, m)| *m), Some("second"));
    assert_eq!(engine.matched_probe_if(&any, |_, m| *m == "first"), None);
    assert_eq!(
        engine.probe(&any).map(|(_, m)| *m),
        Some("second"),
        "refused: left"
    );
    assert_eq!(
        engine.probe(&spec(c, Source::Rank(5), TagPattern::Any)),
        None
    );
    match engine.post(any, 7) {
        PostOutcome::Matched {
            message, receive, ..
        } => assert_eq!((message, receive), ("second", 7)),
        PostOutcome::Posted(_) => panic!("should have matched"),
    }
    assert_eq!(engine.matched_probe(&any), None);
}

#[test]
fn contexts_never_cross_match() {
    let mut engine: Matcher<u32, u32> = Matcher::new();
    for context in 0..5 {
        engine.post(spec(ctx(context), Source::Any, TagPattern::Any), context);
    }
    for context in (0..5).rev() {
        let got = matched_receive(engine.arrive(Envelope::new(ctx(context), 1, 1), 0));
        assert_eq!(got, Some(context));
    }
    engine.arrive(Envelope::new(ctx(6), 1, 1), 60);
    for context in 0..5 {
        let probe = spec(ctx(context), Source::Any, TagPattern::Any);
        assert_eq!(engine.probe(&probe), None);
    }
}

#[test]
fn internal_traffic_is_never_taken_by_user_any_tag() {
    for depth in [0u32, 100] {
        let mut engine: Matcher<&str, &str> = Matcher::new();
        let user = ctx(3);
        let internal = user.internal_twin();
        for i in 0..depth {
            engine.post(
                spec(user, Source::Rank(99), TagPattern::Exact(i)),
                "padding",
            );
        }
        engine.post(spec(user, Source::Any, TagPattern::Any), "user any-any");
        engine.post(spec(user, Source::Rank(1), TagPattern::Any), "user any-tag");
        // Collective traffic on the internal twin, same source, any tag: must queue.
        for tag in [0, 1, u32::MAX] {
            let outcome = engine.arrive(Envelope::new(internal, 1, tag), "collective");
            assert!(matches!(outcome, ArrivalOutcome::Queued { .. }), "{tag}");
        }
        // A user ANY_TAG receive or probe does not see it either.
        assert_eq!(
            engine.probe(&spec(user, Source::Any, TagPattern::Any)),
            None
        );
        // The internal receive does.
        match engine.post(
            spec(internal, Source::Rank(1), TagPattern::Exact(1)),
            "coll",
        ) {
            PostOutcome::Matched { message, .. } => assert_eq!(message, "collective"),
            PostOutcome::Posted(_) => panic!("internal receive must match"),
        }
        // And user traffic still goes to the user receives, in post order.
        let got = matched_receive(engine.arrive(Envelope::new(user, 1, 5), "user"));
        assert_eq!(got, Some("user any-any"));
    }
}

#[test]
fn sequenced_arrivals_match_in_sender_order() {
    let mut engine: Matcher<u32, u32> = Matcher::new();
    let c = ctx(1);
    // Two ANY_TAG receives from rank 0: must take message 0 then message 1.
    engine.post(spec(c, Source::Rank(0), TagPattern::Any), 100);
    engine.post(spec(c, Source::Rank(0), TagPattern::Any), 101);
    let mut outcomes = Vec::new();
    engine
        .arrive_sequenced(1, Envelope::new(c, 0, 8), 1, &mut outcomes)
        .expect("held");
    assert!(outcomes.is_empty(), "message 1 waits for message 0");
    assert_eq!(engine.probe(&spec(c, Source::Any, TagPattern::Any)), None);
    engine
        .arrive_sequenced(0, Envelope::new(c, 0, 7), 0, &mut outcomes)
        .expect("in order");
    let pairs: Vec<_> = outcomes
        .into_iter()
        .map(|o| match o {
            ArrivalOutcome::Matched {
                receive, message, ..
            } => (message, receive),
            ArrivalOutcome::Queued { .. } => panic!("should match"),
        })
        .collect();
    assert_eq!(pairs, vec![(0, 100), (1, 101)]);
    let rejected = engine
        .arrive_sequenced(1, Envelope::new(c, 0, 8), 5, &mut Vec::new())
        .expect_err("duplicate");
    assert_eq!(rejected.message, 5);
}

#[test]
fn portals_masks_of_no_mpi_shape_match_by_the_portals_rule() {
    use crate::envelope::{NONCE_MASK, TAG_SHIFT};
    for padding in [0u32, 50] {
        let mut engine: Matcher<u32, u32> = Matcher::new();
        let c = ctx(4);
        for i in 0..padding {
            engine.post(
                spec(c, Source::Rank(9), TagPattern::Exact(1000 + i)),
                1000 + i,
            );
        }
        // Tag layout of the application: high byte = phase, low byte = step; receive any
        // step of phase 3 from rank 2, posted between two exact receives.
        let phase_bits = Envelope::new(c, 0, 0x0300).match_bits();
        let any_step = ReceiveSpec::from_match_bits(
            phase_bits,
            (0xFF << TAG_SHIFT) | NONCE_MASK,
            Source::Rank(2),
        )
        .expect("tag bits only");
        engine.post(spec(c, Source::Rank(2), TagPattern::Exact(0x0305)), 1);
        engine.post(any_step, 2);
        engine.post(spec(c, Source::Rank(2), TagPattern::Exact(0x0307)), 3);
        let arrive = |engine: &mut Matcher<u32, u32>, tag, nonce| {
            let envelope = Envelope {
                nonce,
                ..Envelope::new(c, 2, tag)
            };
            matched_receive(engine.arrive(Envelope::from_match_bits(envelope.match_bits(), 2), 0))
        };
        assert_eq!(
            arrive(&mut engine, 0x0307, 0xAA),
            Some(2),
            "mask posted before exact"
        );
        assert_eq!(arrive(&mut engine, 0x0307, 0), Some(3));
        assert_eq!(arrive(&mut engine, 0x0407, 0), None, "phase 4 differs");
        assert_eq!(arrive(&mut engine, 0x0305, 0), Some(1));
        // The queued phase-4 message is found by a masked probe for phase 4 only.
        let phase_4 = ReceiveSpec::new(
            c,
            Source::Any,
            TagPattern::Masked {
                tag: 0x0400,
                ignore: 0xFF,
            },
        );
        let phase_3 = ReceiveSpec {
            tag: TagPattern::Masked {
                tag: 0x0300,
                ignore: 0xFF,
            },
            ..phase_4
        };
        assert_eq!(engine.probe(&phase_3), None);
        assert_eq!(
            engine.matched_probe(&phase_4).map(|(e, _)| e.tag),
            Some(0x0407)
        );
    }
}

#[test]
fn footprint_returns_to_empty_after_a_burst() {
    let mut engine: Matcher<u32, u32> = Matcher::new();
    let c = ctx(1);
    for tag in 0..10_000 {
        engine.post(spec(c, Source::Rank(1), TagPattern::Exact(tag)), tag);
    }
    let full = engine.footprint();
    assert_eq!(full.posted, 10_000);
    assert_eq!(full.live_buckets, 10_000);
    for tag in 0..10_000 {
        engine.arrive(Envelope::new(c, 1, tag), tag);
    }
    let empty = engine.footprint();
    assert_eq!(
        (empty.posted, empty.live_buckets, empty.map_capacity),
        (0, 0, 0)
    );
    assert_eq!(
        empty.node_slots, 10_000,
        "slab keeps its high-water mark of slots"
    );
}

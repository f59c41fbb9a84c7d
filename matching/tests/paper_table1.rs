//! Paper 002, Table 1: two sends `send(t1); send(t2)` from one rank, and the seven ways to post
//! two receives. `sx <-> ry` means the x-th send matches the y-th receive.
//!
//! Each row is its own test. Every row is checked in all six interleavings of the two sends
//! with the two receives (the paper assumes the sends come first "without loss of generality";
//! MPI's non-overtaking rule makes the pairing the same for every interleaving), with the
//! receives naming the sender or ANY_SOURCE, on the engine and on the reference model, with
//! in-order and with reversed (reorder-stage) delivery, and with queues short and deep.
//!
//! Row 7 (`recv(t2); recv(*)`) is printed in the paper as `s1<->r1; s2<->r2`. That pairing is
//! impossible: r1 accepts only tag t2 and s1 carries t1 (Section 1.1, rule 3). MPI requires
//! `s2<->r1; s1<->r2`, the same pairing as row 2, and that is what we assert; the test
//! `row_7_as_printed_violates_the_matching_rule` records why.

use rdcoll_matching::reference::ReferenceMatcher;
use rdcoll_matching::{
    ArrivalOutcome, ContextId, Envelope, Matcher, Matching, PostOutcome, ReceiveSpec, Source,
    TagPattern,
};

const T1: u32 = 11;
const T2: u32 = 22;
const SENDER: u32 = 0;

/// A receive's tag in the table's notation.
#[derive(Clone, Copy, Debug)]
enum Recv {
    T1,
    T2,
    Star,
}

/// Expected result: for each send (s1, s2), the receive (1 or 2) it matches, or `None`.
type Pairing = [Option<usize>; 2];

fn context() -> ContextId {
    ContextId::user(5).expect("small id")
}

fn send_envelope(send: usize) -> Envelope {
    Envelope::new(context(), SENDER, [T1, T2][send])
}

fn recv_spec(recv: Recv, any_source: bool) -> ReceiveSpec {
    let source = if any_source {
        Source::Any
    } else {
        Source::Rank(SENDER)
    };
    let tag = match recv {
        Recv::T1 => TagPattern::Exact(T1),
        Recv::T2 => TagPattern::Exact(T2),
        Recv::Star => TagPattern::Any,
    };
    ReceiveSpec::new(context(), source, tag)
}

#[derive(Clone, Copy, Debug)]
struct Variant {
    any_source: bool,
    reversed_delivery: bool,
    deep: bool,
}

/// Notes the pairing an arrival made, if it matched.
fn record(outcome: ArrivalOutcome<usize, usize>, pairing: &mut Pairing) {
    if let ArrivalOutcome::Matched {
        receive, message, ..
    } = outcome
    {
        pairing[message] = Some(receive + 1);
    }
}

/// Runs one interleaving; `sends_at[k]` is the event position of send k (0..4).
fn run<E: Matching<usize, usize>>(
    mut model: E,
    receives: [Recv; 2],
    sends_at: [usize; 2],
    variant: Variant,
) -> Pairing {
    if variant.deep {
        // Unrelated traffic so both queues are in their indexed form: receives for another
        // sender in this context, messages in another context.
        let other = ContextId::user(6).expect("small id");
        for i in 0..40 {
            let spec = ReceiveSpec::new(context(), Source::Rank(9), TagPattern::Exact(i));
            assert!(matches!(
                model.post(spec, 100 + i as usize),
                PostOutcome::Posted(_)
            ));
            model.arrive(Envelope::new(other, 9, i), 100 + i as usize);
        }
    }
    let mut pairing: Pairing = [None, None];
    let mut next_recv = 0;
    let mut next_send = 0;
    for position in 0..4 {
        if sends_at.contains(&position) {
            let send = next_send;
            next_send += 1;
            if variant.reversed_delivery {
                // s2 reaches the engine first (sequence 1) and is held until s1 (sequence 0).
                let physical = 1 - send;
                let mut outcomes = Vec::new();
                model
                    .arrive_sequenced(
                        physical as u64,
                        send_envelope(physical),
                        physical,
                        &mut outcomes,
                    )
                    .expect("valid sequence numbers");
                for outcome in outcomes {
                    record(outcome, &mut pairing);
                }
            } else {
                let outcome = model.arrive(send_envelope(send), send);
                record(outcome, &mut pairing);
            }
        } else {
            let recv = next_recv;
            next_recv += 1;
            if let PostOutcome::Matched { message, .. } =
                model.post(recv_spec(receives[recv], variant.any_source), recv)
            {
                pairing[message] = Some(recv + 1);
            }
        }
    }
    pairing
}

/// Checks one table row in every interleaving and variant, on both models.
fn check_row(receives: [Recv; 2], expected: Pairing) {
    let interleavings = [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]];
    for sends_at in interleavings {
        for any_source in [false, true] {
            for reversed_delivery in [false, true] {
                for deep in [false, true] {
                    let variant = Variant {
                        any_source,
                        reversed_delivery,
                        deep,
                    };
                    let engine = run(Matcher::new(), receives, sends_at, variant);
                    let reference = run(ReferenceMatcher::new(), receives, sends_at, variant);
                    assert_eq!(
                        engine, expected,
                        "engine: {receives:?}, sends at {sends_at:?}, {variant:?}"
                    );
                    assert_eq!(
                        reference, expected,
                        "reference: {receives:?}, sends at {sends_at:?}, {variant:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn row_1_recv_t1_recv_t2_gives_s1r1_s2r2() {
    check_row([Recv::T1, Recv::T2], [Some(1), Some(2)]);
}

#[test]
fn row_2_recv_t2_recv_t1_gives_s1r2_s2r1() {
    check_row([Recv::T2, Recv::T1], [Some(2), Some(1)]);
}

#[test]
fn row_3_recv_star_recv_star_gives_s1r1_s2r2() {
    check_row([Recv::Star, Recv::Star], [Some(1), Some(2)]);
}

#[test]
fn row_4_recv_star_recv_t2_gives_s1r1_s2r2() {
    check_row([Recv::Star, Recv::T2], [Some(1), Some(2)]);
}

#[test]
fn row_5_recv_star_recv_t1_gives_s1r1_and_no_match() {
    // s2 (tag t2) stays unexpected and r2 (tag t1) stays posted: the deadlock case.
    check_row([Recv::Star, Recv::T1], [Some(1), None]);
}

#[test]
fn row_6_recv_t1_recv_star_gives_s1r1_s2r2() {
    check_row([Recv::T1, Recv::Star], [Some(1), Some(2)]);
}

#[test]
fn row_7_recv_t2_recv_star_gives_s2r1_s1r2() {
    // The paper prints s1<->r1; s2<->r2 here; see the module comment.
    check_row([Recv::T2, Recv::Star], [Some(2), Some(1)]);
}

#[test]
fn row_7_as_printed_violates_the_matching_rule() {
    for any_source in [false, true] {
        let r1 = recv_spec(Recv::T2, any_source);
        assert!(
            !r1.matches(&send_envelope(0)),
            "recv(t2) cannot take send(t1), so s1<->r1 is impossible in row 7"
        );
        assert!(r1.matches(&send_envelope(1)));
    }
}

#[test]
fn row_5_leaves_exactly_one_message_and_one_receive_queued() {
    let mut engine: Matcher<usize, usize> = Matcher::new();
    engine.arrive(send_envelope(0), 0);
    engine.arrive(send_envelope(1), 1);
    engine.post(recv_spec(Recv::Star, false), 0);
    engine.post(recv_spec(Recv::T1, false), 1);
    assert_eq!((engine.posted_len(), engine.unexpected_len()), (1, 1));
    let probe = ReceiveSpec::new(context(), Source::Any, TagPattern::Any);
    assert_eq!(engine.probe(&probe), Some((send_envelope(1), &1)));
}

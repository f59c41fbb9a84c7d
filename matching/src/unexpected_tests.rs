//! Unit tests of the unexpected-message queue.

use super::*;
use crate::envelope::{ContextId, ReceiveSpec, Source, TagPattern};

fn ctx() -> ContextId {
    ContextId::user(3).expect("small id")
}

fn sel(source: Source, tag: TagPattern) -> Selector {
    Selector::compile(&ReceiveSpec::new(ctx(), source, tag))
}

fn take_value(queue: &mut UnexpectedQueue<u32>, selector: Selector) -> Option<u32> {
    let found = queue.find(selector)?;
    Some(queue.take(found).1)
}

/// `exact_mut` finds the message with the nonce asked for among equal envelopes, in both
/// forms, and nothing once it is taken.
#[test]
fn exact_lookup_tells_nonces_apart() {
    for n in [3u16, 100] {
        let mut queue = UnexpectedQueue::new();
        for nonce in 0..n {
            let envelope = Envelope {
                nonce,
                ..Envelope::new(ctx(), 1, 5)
            };
            queue.push(envelope, u32::from(nonce));
        }
        queue.push(Envelope::new(ctx(), 2, 5), 999);
        let want = Envelope {
            nonce: n - 2,
            ..Envelope::new(ctx(), 1, 5)
        };
        *queue.exact_mut(&want).expect("queued") += 1000;
        let missing = Envelope {
            nonce: n,
            ..Envelope::new(ctx(), 1, 5)
        };
        assert!(queue.exact_mut(&missing).is_none());
        let any = sel(Source::Rank(1), TagPattern::Exact(5));
        let taken: Vec<u32> = std::iter::from_fn(|| take_value(&mut queue, any)).collect();
        let mut expect: Vec<u32> = (0..u32::from(n)).collect();
        expect[usize::from(n) - 2] += 1000;
        assert_eq!(taken, expect);
        assert!(queue.exact_mut(&want).is_none());
    }
}

/// Two queued messages with the same envelope and nonce (a sender never has two in
/// flight, but the queue must not lose track if one does): the lookup finds the earlier,
/// then, once it is taken, the later; the index is empty afterwards.
#[test]
fn a_repeated_nonce_is_found_in_arrival_order() {
    for filler in [0u32, 40] {
        let mut queue = UnexpectedQueue::new();
        let twin = Envelope {
            nonce: 7,
            ..Envelope::new(ctx(), 1, 5)
        };
        for t in 0..filler {
            queue.push(Envelope::new(ctx(), 2, 100 + t), 0);
        }
        queue.push(twin, 1);
        queue.push(twin, 2);
        assert_eq!(queue.exact_mut(&twin).copied(), Some(1));
        let exact = sel(Source::Rank(1), TagPattern::Exact(5));
        assert_eq!(take_value(&mut queue, exact), Some(1));
        assert_eq!(queue.exact_mut(&twin).copied(), Some(2));
        assert_eq!(take_value(&mut queue, exact), Some(2));
        assert!(queue.exact_mut(&twin).is_none());
        assert_eq!((queue.by_nonce.len(), queue.nonce_repeats), (0, 0));
    }
}

/// Messages (source, tag): (1,5) (2,5) (1,6) (2,6) repeated; each receive shape must take
/// the earliest it matches, in both forms.
fn check_each_shape_takes_earliest(rounds: u32) {
    let mut queue = UnexpectedQueue::new();
    let mut value = 0;
    for _ in 0..rounds {
        for (source, tag) in [(1, 5), (2, 5), (1, 6), (2, 6)] {
            queue.push(Envelope::new(ctx(), source, tag), value);
            value += 1;
        }
    }
    assert_eq!(queue.is_indexed(), rounds * 4 > PROMOTE_ABOVE as u32);
    assert_eq!(
        take_value(&mut queue, sel(Source::Rank(2), TagPattern::Exact(6))),
        Some(3)
    );
    assert_eq!(
        take_value(&mut queue, sel(Source::Rank(2), TagPattern::Any)),
        Some(1)
    );
    assert_eq!(
        take_value(&mut queue, sel(Source::Any, TagPattern::Exact(6))),
        Some(2)
    );
    assert_eq!(
        take_value(&mut queue, sel(Source::Any, TagPattern::Any)),
        Some(0)
    );
    assert_eq!(
        take_value(&mut queue, sel(Source::Any, TagPattern::Exact(7))),
        None
    );
    let other_context = Selector::compile(&ReceiveSpec::new(
        ctx().internal_twin(),
        Source::Any,
        TagPattern::Any,
    ));
    assert!(queue.find(other_context).is_none());
}

#[test]
fn each_shape_takes_earliest_arrival_short() {
    check_each_shape_takes_earliest(1);
}

#[test]
fn each_shape_takes_earliest_arrival_indexed() {
    check_each_shape_takes_earliest(50);
}

/// The wildcard lanes are kept from the first receive of their shape, linked in arrival
/// order with the messages queued before, kept across the short form while used, and
/// dropped after an indexed stretch that did not use them: every cycle of indexed form
/// (each shape first after an exact receive, then after the others, with arrivals between)
/// takes the earliest match, as a scan of arrival order would.
#[test]
fn wildcard_lanes_kept_on_demand_take_the_earliest() {
    let mut queue = UnexpectedQueue::new();
    let mut model: Vec<(Envelope, u32)> = Vec::new();
    let mut value = 0;
    let shapes = [
        (Source::Rank(1), TagPattern::Exact(2)),
        (Source::Rank(2), TagPattern::Any),
        (Source::Any, TagPattern::Exact(1)),
        (Source::Any, TagPattern::Any),
        (Source::Rank(0), TagPattern::Masked { tag: 0, ignore: 1 }),
        (Source::Any, TagPattern::Masked { tag: 2, ignore: 1 }),
    ];
    for cycle in 0..6 {
        for step in 0..40 {
            let envelope = Envelope::new(ctx(), (step * 7 + cycle) % 3, step % 4);
            queue.push(envelope, value);
            model.push((envelope, value));
            value += 1;
        }
        assert!(queue.is_indexed());
        // Each shape in a cycle-dependent order, with an arrival after each receive.
        for k in 0..shapes.len() {
            let (source, tag) = shapes[(k + cycle as usize) % shapes.len()];
            let selector = sel(source, tag);
            let want = model.iter().position(|(e, _)| selector.matches(e));
            let got = take_value(&mut queue, selector);
            assert_eq!(
                got,
                want.map(|i| model.remove(i).1),
                "cycle {cycle} shape {k}"
            );
            let envelope = Envelope::new(ctx(), k as u32 % 3, 3);
            queue.push(envelope, value);
            model.push((envelope, value));
            value += 1;
        }
        // Drain until the queue is short again, mostly by exact receives.
        for i in 0.. {
            if model.len() <= 2 {
                break;
            }
            let (envelope, _) = model[model.len() / 2];
            let (source, tag) = match i % 3 {
                0 => shapes[(i / 3) % shapes.len()],
                _ => (
                    Source::Rank(envelope.source),
                    TagPattern::Exact(envelope.tag),
                ),
            };
            let selector = sel(source, tag);
            let want = model.iter().position(|(e, _)| selector.matches(e));
            let got = take_value(&mut queue, selector);
            assert_eq!(got, want.map(|i| model.remove(i).1));
        }
        assert!(!queue.is_indexed());
        assert_eq!(
            queue.kept_lanes,
            (1 << BY_SOURCE) | (1 << BY_TAG) | (1 << BY_CONTEXT)
        );
    }
    // An indexed stretch of exact receives only: the lanes are not kept afterwards.
    for step in 0..40 {
        queue.push(Envelope::new(ctx(), step % 3, 100 + step), value);
        value += 1;
    }
    for step in 0..40 {
        let selector = sel(Source::Rank(step % 3), TagPattern::Exact(100 + step));
        assert!(take_value(&mut queue, selector).is_some());
    }
    assert_eq!(queue.kept_lanes, 0);
}

#[test]
fn taking_from_one_lane_leaves_the_others_consistent() {
    let mut queue = UnexpectedQueue::new();
    for value in 0..100u32 {
        queue.push(Envelope::new(ctx(), value % 3, value % 5), value);
    }
    // Take every message via a different lane in turn; order must stay arrival order.
    let mut taken = Vec::new();
    for value in 0..100u32 {
        let selector = match value % 4 {
            0 => sel(Source::Rank(value % 3), TagPattern::Exact(value % 5)),
            1 => sel(Source::Rank(value % 3), TagPattern::Any),
            2 => sel(Source::Any, TagPattern::Exact(value % 5)),
            _ => sel(Source::Any, TagPattern::Any),
        };
        taken.push(take_value(&mut queue, selector));
    }
    assert_eq!(taken, (0..100).map(Some).collect::<Vec<_>>());
    assert_eq!(queue.len(), 0);
    assert!(!queue.is_indexed());
    let (live, slots, _) = queue.table_sizes();
    assert_eq!((live, slots), (0, 0));
}

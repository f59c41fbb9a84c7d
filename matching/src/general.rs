//! The general class: Portals 4 ignore masks of no MPI shape (paper 002, Section 1.2).
//!
//! A receive whose tag mask ignores some but not all tag bits cannot be found by key, so the
//! fast path does not index it. Posted general receives sit in one post-order FIFO per context;
//! an arrival walks it only up to the post sequence of the best fast-path candidate, so the
//! merged result is still the earliest posted match. A general receive looking for an unexpected
//! message walks the arrival-order FIFO it can narrow to: by `(context, source)` when it names a
//! source, by context otherwise. Cost is linear in those FIFOs; MPI-shaped traffic never pays it.

use crate::bucket_queue::next_on;
use crate::envelope::{Envelope, Selector};
use crate::posted::{pair_key, PostedQueue, BUCKET};
use crate::slab::NIL;
use crate::unexpected::{UnexpectedQueue, BY_CONTEXT, BY_SOURCE};

/// The earliest posted general receive of `envelope`'s context that matches it and was posted
/// before sequence `before`: `(seq, slot index)`.
pub(crate) fn first_posted_match<R>(
    queue: &PostedQueue<R>,
    envelope: &Envelope,
    before: u64,
) -> Option<(u64, u32)> {
    let bucket = queue.general.find(&envelope.context.field())?;
    let mut at = queue.general.ends(bucket).head;
    while at != NIL {
        let node = queue.nodes.node(at);
        if node.seq >= before {
            return None;
        }
        if node.selector.matches(envelope) {
            return Some((node.seq, at));
        }
        at = next_on(&queue.nodes, at, BUCKET);
    }
    None
}

/// The earliest arrived unexpected message a general-class `selector` matches (slot index).
pub(crate) fn first_unexpected_match<M>(
    queue: &UnexpectedQueue<M>,
    selector: Selector,
) -> Option<u32> {
    let (bucket, lane) = if selector.any_source() {
        (queue.by_context.find(&selector.context)?, BY_CONTEXT)
    } else {
        let key = pair_key(selector.context, selector.source);
        (queue.by_source.find(&key)?, BY_SOURCE)
    };
    let ends = if lane == BY_CONTEXT {
        queue.by_context.ends(bucket)
    } else {
        queue.by_source.ends(bucket)
    };
    let mut at = ends.head;
    while at != NIL {
        let node = queue.nodes.node(at);
        if selector.matches(&node.envelope) {
            return Some(at);
        }
        at = next_on(&queue.nodes, at, lane);
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::envelope::{ContextId, Envelope, ReceiveSpec, Selector, Source, TagPattern};
    use crate::posted::PostedQueue;
    use crate::unexpected::UnexpectedQueue;

    fn ctx() -> ContextId {
        ContextId::user(9).expect("small id")
    }

    fn masked(source: Source, tag: u32, ignore: u32) -> Selector {
        Selector::compile(&ReceiveSpec::new(
            ctx(),
            source,
            TagPattern::Masked { tag, ignore },
        ))
    }

    fn exact(source: u32, tag: u32) -> Selector {
        Selector::compile(&ReceiveSpec::new(
            ctx(),
            Source::Rank(source),
            TagPattern::Exact(tag),
        ))
    }

    #[test]
    fn general_receive_merges_with_fast_path_by_post_order() {
        for padding in [0u32, 64] {
            let mut queue = PostedQueue::new();
            for i in 0..padding {
                queue.post(exact(50, i), 1000 + i);
            }
            // Tag high nibble 0x30, low nibble ignored.
            queue.post(exact(1, 0x35), 1);
            queue.post(masked(Source::Any, 0x30, 0x0F), 2);
            queue.post(exact(1, 0x36), 3);
            queue.post(masked(Source::Rank(1), 0x30, 0x0F), 4);
            let arrive =
                |q: &mut PostedQueue<u32>, tag| q.take_match(&Envelope::new(ctx(), 1, tag));
            assert_eq!(
                arrive(&mut queue, 0x36),
                Some(2),
                "general posted before exact 0x36"
            );
            assert_eq!(arrive(&mut queue, 0x36), Some(3));
            assert_eq!(arrive(&mut queue, 0x35), Some(1));
            assert_eq!(arrive(&mut queue, 0x3F), Some(4));
            assert_eq!(arrive(&mut queue, 0x3F), None);
            assert_eq!(
                arrive(&mut queue, 0x40),
                None,
                "0x40 differs on a compared bit"
            );
        }
    }

    #[test]
    fn general_receive_takes_earliest_unexpected() {
        for extra in [0u32, 64] {
            let mut queue = UnexpectedQueue::new();
            for i in 0..extra {
                queue.push(Envelope::new(ctx(), 7, 0x100 + i), 1000 + i);
            }
            for (value, (source, tag)) in [(1, 0x21), (2, 0x12), (1, 0x13), (2, 0x1F)]
                .into_iter()
                .enumerate()
            {
                queue.push(Envelope::new(ctx(), source, tag), value as u32);
            }
            let mut take = |selector| {
                let found = queue.find(selector)?;
                Some(queue.take(found).1)
            };
            assert_eq!(take(masked(Source::Rank(1), 0x10, 0x0F)), Some(2));
            assert_eq!(take(masked(Source::Any, 0x10, 0x0F)), Some(1));
            assert_eq!(take(masked(Source::Any, 0x10, 0x0F)), Some(3));
            assert_eq!(take(masked(Source::Rank(1), 0x10, 0x0F)), None);
            assert_eq!(take(masked(Source::Any, 0x01, 0xF0)), Some(0));
        }
    }
}

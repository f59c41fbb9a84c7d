//! Ten million operations with ever-new tags: memory follows what is queued, not what passed.
//!
//! Every receive and every message uses a tag never used before (like a tag that is an
//! iteration number), so every exact and by-tag bucket is created once and must be released
//! when it empties. Phases grow the queues to a few thousand entries and drain them again;
//! cancels and ANY_SOURCE receives (keyed by tag) are mixed in, and all messages go through the
//! reorder stage. At checkpoints and at the end, the engine's slabs, bucket tables and hash maps
//! must be bounded by a small multiple of the most entries ever queued at once — which stays in
//! the thousands while ten million distinct tags pass through.
//!
//! Release builds run 10,000,000 operations. Debug builds (`cfg(debug_assertions)`, the plain
//! `cargo test`) run 1,000,000 so the suite stays quick; the bounds checked are the same.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdcoll_matching::{
    ArrivalOutcome, ContextId, Envelope, Footprint, Matcher, PostOutcome, ReceiveHandle,
    ReceiveSpec, Source, TagPattern,
};

#[cfg(not(debug_assertions))]
const OPERATIONS: u64 = 10_000_000;
#[cfg(debug_assertions)]
const OPERATIONS: u64 = 1_000_000;

const SOURCES: u32 = 8;
/// Hash maps smaller than this are kept (not freed) when a queue returns to its short form;
/// there are nine of them (five posted shapes, four unexpected lanes).
const KEPT_MAP_CAPACITY: usize = 9 * 256;

struct Churn {
    rng: StdRng,
    engine: Matcher<u64, u64>,
    contexts: [ContextId; 2],
    next_tag: u32,
    next_seq: [[u64; SOURCES as usize]; 2],
    /// Posted receives the test can still match or cancel: (context index, source, tag, handle).
    open_receives: Vec<(usize, Source, u32, ReceiveHandle)>,
    /// Unexpected messages the test can still match: (context index, source, tag).
    open_messages: Vec<(usize, u32, u32)>,
    max_queued: usize,
}

impl Churn {
    fn fresh_tag(&mut self) -> u32 {
        self.next_tag += 1;
        self.next_tag
    }

    fn send(&mut self, context: usize, source: u32, tag: u32) -> ArrivalOutcome<u64, u64> {
        let envelope = Envelope::new(self.contexts[context], source, tag);
        let seq = &mut self.next_seq[context][source as usize];
        let mut outcomes = Vec::with_capacity(1);
        self.engine
            .arrive_sequenced(*seq, envelope, tag as u64, &mut outcomes)
            .expect("in-order sequence numbers");
        *seq += 1;
        outcomes
            .pop()
            .expect("an in-order envelope is released at once")
    }

    fn post_new(&mut self) {
        let (context, tag) = (self.rng.gen_range(0..2), self.fresh_tag());
        let source = if self.rng.gen_bool(0.3) {
            Source::Any
        } else {
            Source::Rank(self.rng.gen_range(0..SOURCES))
        };
        let spec = ReceiveSpec::new(self.contexts[context], source, TagPattern::Exact(tag));
        match self.engine.post(spec, tag as u64) {
            PostOutcome::Posted(handle) => self.open_receives.push((context, source, tag, handle)),
            PostOutcome::Matched { .. } => panic!("a fresh tag cannot match"),
        }
    }

    fn send_new(&mut self) {
        let (context, source, tag) = (
            self.rng.gen_range(0..2),
            self.rng.gen_range(0..SOURCES),
            self.fresh_tag(),
        );
        let outcome = self.send(context, source, tag);
        assert!(matches!(outcome, ArrivalOutcome::Queued { .. }));
        self.open_messages.push((context, source, tag));
    }

    fn match_posted(&mut self) {
        let at = self.rng.gen_range(0..self.open_receives.len());
        let (context, source, tag, _) = self.open_receives.swap_remove(at);
        let source = match source {
            Source::Rank(rank) => rank,
            Source::Any => self.rng.gen_range(0..SOURCES),
        };
        match self.send(context, source, tag) {
            ArrivalOutcome::Matched { receive, .. } => assert_eq!(receive, tag as u64),
            ArrivalOutcome::Queued { .. } => panic!("receive for tag {tag} should be posted"),
        }
    }

    fn match_unexpected(&mut self) {
        let at = self.rng.gen_range(0..self.open_messages.len());
        let (context, source, tag) = self.open_messages.swap_remove(at);
        let source = if self.rng.gen_bool(0.5) {
            Source::Any
        } else {
            Source::Rank(source)
        };
        let spec = ReceiveSpec::new(self.contexts[context], source, TagPattern::Exact(tag));
        match self.engine.post(spec, 0) {
            PostOutcome::Matched { message, .. } => assert_eq!(message, tag as u64),
            PostOutcome::Posted(_) => panic!("message with tag {tag} should be queued"),
        }
    }

    fn cancel(&mut self) {
        let at = self.rng.gen_range(0..self.open_receives.len());
        let (_, _, tag, handle) = self.open_receives.swap_remove(at);
        assert_eq!(self.engine.cancel(handle), Ok(tag as u64));
        assert!(self.engine.cancel(handle).is_err());
    }

    fn step(&mut self, grow: bool) {
        let roll: f64 = self.rng.gen();
        let (open_r, open_m) = (self.open_receives.is_empty(), self.open_messages.is_empty());
        let grow_bias = if grow { 0.6 } else { 0.2 };
        if roll < grow_bias / 2.0 || (open_r && open_m) {
            self.post_new();
        } else if roll < grow_bias {
            self.send_new();
        } else if roll < 0.95 && !open_r && (open_m || self.rng.gen_bool(0.5)) {
            self.match_posted();
        } else if !open_m {
            self.match_unexpected();
        } else if !open_r {
            self.cancel();
        } else {
            self.post_new();
        }
        let queued = self.engine.posted_len() + self.engine.unexpected_len();
        self.max_queued = self.max_queued.max(queued);
    }
}

/// The bounds: everything is a small multiple of the most entries ever queued at once.
fn check_bounds(footprint: &Footprint, max_queued: usize, passed: u64) {
    let bound = |factor: usize, slack: usize| factor * max_queued + slack;
    let report = format!("{footprint:?}, max queued {max_queued}, tags passed {passed}");
    // Each slab grows only when it has no free slot, so its slots are its own high-water mark.
    assert!(footprint.node_slots <= bound(2, 0), "node slots: {report}");
    assert!(
        footprint.node_capacity <= bound(4, 16),
        "node capacity: {report}"
    );
    // A posted receive is on one bucket, an unexpected message on four.
    assert!(
        footprint.live_buckets <= footprint.posted + 4 * footprint.unexpected,
        "live buckets: {report}"
    );
    assert!(
        footprint.bucket_slots <= bound(5, 0),
        "bucket slots: {report}"
    );
    assert!(
        footprint.map_capacity <= bound(10, KEPT_MAP_CAPACITY),
        "map capacity: {report}"
    );
    assert!(footprint.reorder_streams <= 2 * SOURCES as usize);
    assert_eq!(footprint.held, 0);
}

#[test]
fn ten_million_ever_new_tags_keep_memory_proportional_to_queued() {
    let user = ContextId::user(1).expect("small id");
    let mut churn = Churn {
        rng: StdRng::seed_from_u64(0xC0FFEE),
        engine: Matcher::new(),
        contexts: [user, user.internal_twin()],
        next_tag: 0,
        next_seq: [[0; SOURCES as usize]; 2],
        open_receives: Vec::new(),
        open_messages: Vec::new(),
        max_queued: 0,
    };
    let mut operations = 0u64;
    let (mut grow, mut target) = (true, 1000);
    let mut checkpoint = 1_000_000;
    while operations < OPERATIONS {
        // Grow to a random size of up to a few thousand entries, then drain to near zero.
        let queued = churn.engine.posted_len() + churn.engine.unexpected_len();
        if grow && queued > target {
            grow = false;
        } else if !grow && queued < 5 {
            grow = true;
            target = churn.rng.gen_range(20..4000);
        }
        churn.step(grow);
        operations += 1;
        if operations == checkpoint {
            check_bounds(
                &churn.engine.footprint(),
                churn.max_queued,
                churn.next_tag as u64,
            );
            checkpoint += 1_000_000;
        }
    }
    let footprint = churn.engine.footprint();
    eprintln!(
        "{operations} operations, {} distinct tags, max queued {}: {footprint:?}",
        churn.next_tag, churn.max_queued
    );
    check_bounds(&footprint, churn.max_queued, churn.next_tag as u64);
    assert!(
        churn.next_tag as u64 >= OPERATIONS / 3,
        "the run must push millions of distinct tags through"
    );
    assert!(churn.max_queued < 6000, "queues stayed in the thousands");

    // Drain: everything the tables held goes, and large maps are freed.
    while !churn.open_receives.is_empty() {
        churn.match_posted();
    }
    while !churn.open_messages.is_empty() {
        churn.match_unexpected();
    }
    let drained = churn.engine.footprint();
    assert_eq!((drained.posted, drained.unexpected), (0, 0));
    assert_eq!(drained.live_buckets, 0);
    assert!(drained.map_capacity <= KEPT_MAP_CAPACITY, "{drained:?}");
}

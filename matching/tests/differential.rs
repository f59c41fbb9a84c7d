//! Differential test: the engine against the linear reference model, decision by decision.
//!
//! Seeded random operation lists — posts (exact, the three MPI wildcard shapes, and general
//! Portals masks), in-order arrivals, out-of-order sequenced deliveries through the reorder stage
//! (with duplicates and out-of-window numbers), probes, matched probes and cancels (including
//! stale handles), over four contexts one of which is the internal twin of another — are run
//! through [`Matcher`] and [`ReferenceMatcher`]. Every outcome and both queue lengths must be
//! identical after every operation. Six wildcard mixes from 0% to 90%, four seeds each,
//! 1,008,000 operations in all. On a divergence the failing prefix is shrunk (the first
//! divergent operation ends the shortest failing prefix, then chunks are deleted while it still
//! fails) and the panic message lists the remaining operations.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdcoll_matching::reference::ReferenceMatcher;
use rdcoll_matching::{
    ArrivalOutcome, ContextId, Envelope, Matcher, Matching, PostOutcome, ReceiveHandle,
    ReceiveSpec, ReorderError, ReorderStage, Source, TagPattern,
};

/// Operations per seed; 6 mixes x 4 seeds x 42,000 = 1,008,000. `RDCOLL_DIFF_OPS_PER_SEED`
/// raises it for a longer soak.
const OPS_PER_SEED: usize = 42_000;

fn ops_per_seed() -> usize {
    std::env::var("RDCOLL_DIFF_OPS_PER_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(OPS_PER_SEED, |n: usize| n.max(OPS_PER_SEED))
}
const SEEDS: [u64; 4] = [1, 2, 3, 0x5EED_CAFE];
/// Reorder window of both models; the generator sometimes sends beyond it.
const WINDOW: u64 = 64;

#[derive(Clone, Debug)]
enum Op {
    Post {
        spec: ReceiveSpec,
        id: u64,
    },
    Arrive {
        envelope: Envelope,
        id: u64,
    },
    Deliver {
        seq: u64,
        envelope: Envelope,
        id: u64,
    },
    Probe {
        spec: ReceiveSpec,
    },
    MatchedProbe {
        spec: ReceiveSpec,
    },
    Cancel {
        receive: u64,
    },
}

#[derive(Clone, Copy, Debug)]
struct Mix {
    /// Chance that a receive or probe uses an MPI wildcard (ANY_SOURCE, ANY_TAG or both).
    wildcard: f64,
    /// Chance that it uses a general Portals tag mask instead.
    general: f64,
}

fn contexts() -> [ContextId; 4] {
    let a = ContextId::user(1).expect("small id");
    let b = ContextId::user(2).expect("small id");
    let far = ContextId::user(ContextId::MAX_ID).expect("max id");
    [a, a.internal_twin(), b, far]
}

/// Contexts 0 and 1 go through the reorder stage; 2 and 3 arrive in order.
fn is_sequenced(context_index: usize) -> bool {
    context_index < 2
}

struct Generator {
    rng: StdRng,
    mix: Mix,
    next_id: u64,
    next_seq: HashMap<(usize, u32), u64>,
    network: Vec<(u64, Envelope, u64)>,
    posted_ids: Vec<u64>,
}

impl Generator {
    fn tag(&mut self) -> u32 {
        if self.rng.gen_bool(0.01) {
            1000 + self.rng.gen_range(0..1000)
        } else {
            self.rng.gen_range(0..8)
        }
    }

    fn spec(&mut self) -> ReceiveSpec {
        let context = contexts()[self.rng.gen_range(0..4)];
        let source = Source::Rank(self.rng.gen_range(0..5));
        let tag = TagPattern::Exact(self.tag());
        let roll: f64 = self.rng.gen();
        let (source, tag) = if roll < self.mix.wildcard {
            match self.rng.gen_range(0..3) {
                0 => (Source::Any, tag),
                1 => (source, TagPattern::Any),
                _ => (Source::Any, TagPattern::Any),
            }
        } else if roll < self.mix.wildcard + self.mix.general {
            let ignore = match self.rng.gen_range(0..6) {
                0 => 0b1,
                1 => 0b11,
                2 => 0b110,
                3 => 0xFFFF_FFF8,
                4 => self.rng.gen::<u32>() & 0x0F0F_0F07,
                _ => self.rng.gen::<u32>(),
            };
            let source = if self.rng.gen_bool(0.5) {
                Source::Any
            } else {
                source
            };
            let tag = TagPattern::Masked {
                tag: self.tag(),
                ignore,
            };
            (source, tag)
        } else {
            (source, tag)
        };
        ReceiveSpec::new(context, source, tag)
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn send(&mut self) -> Option<Op> {
        let context_index = self.rng.gen_range(0..4);
        let source = self.rng.gen_range(0..5);
        let envelope = Envelope {
            context: contexts()[context_index],
            source,
            tag: self.tag(),
            nonce: self.rng.gen(),
        };
        let id = self.id();
        if !is_sequenced(context_index) {
            return Some(Op::Arrive { envelope, id });
        }
        let seq = self.next_seq.entry((context_index, source)).or_insert(0);
        if self.rng.gen_bool(0.003) {
            // Out of window (refused) or a duplicate of one already sent: consumes no number.
            let bad = if self.rng.gen_bool(0.5) || *seq == 0 {
                *seq + WINDOW + self.rng.gen_range(0..10)
            } else {
                self.rng.gen_range(0..*seq)
            };
            return Some(Op::Deliver {
                seq: bad,
                envelope,
                id,
            });
        }
        self.network.push((*seq, envelope, id));
        *seq += 1;
        None
    }

    fn generate(seed: u64, mix: Mix, count: usize) -> Vec<Op> {
        let mut gen = Generator {
            rng: StdRng::seed_from_u64(seed),
            mix,
            next_id: 0,
            next_seq: HashMap::new(),
            network: Vec::new(),
            posted_ids: Vec::new(),
        };
        let mut ops = Vec::with_capacity(count);
        let (mut phase_left, mut post_bias) = (0u32, 0.5);
        while ops.len() < count {
            if phase_left == 0 {
                phase_left = gen.rng.gen_range(50..2000);
                post_bias = [0.3, 0.5, 0.7][gen.rng.gen_range(0..3)];
            }
            phase_left -= 1;
            if !gen.network.is_empty() && (gen.network.len() > 24 || gen.rng.gen_bool(0.4)) {
                // The network delivers the oldest envelope or one of the next few: reordering.
                let limit = gen.network.len().min(12);
                let at = if gen.rng.gen_bool(0.3) {
                    0
                } else {
                    gen.rng.gen_range(0..limit)
                };
                let (seq, envelope, id) = gen.network.remove(at);
                ops.push(Op::Deliver { seq, envelope, id });
                continue;
            }
            let roll: f64 = gen.rng.gen();
            let op = if roll < 0.05 {
                Some(Op::Probe { spec: gen.spec() })
            } else if roll < 0.09 {
                Some(Op::MatchedProbe { spec: gen.spec() })
            } else if roll < 0.14 && !gen.posted_ids.is_empty() {
                let recent = gen.posted_ids.len().saturating_sub(200);
                let receive = gen.posted_ids[gen.rng.gen_range(recent..gen.posted_ids.len())];
                Some(Op::Cancel { receive })
            } else if gen.rng.gen_bool(post_bias) {
                let id = gen.id();
                gen.posted_ids.push(id);
                Some(Op::Post {
                    spec: gen.spec(),
                    id,
                })
            } else {
                gen.send()
            };
            ops.extend(op);
        }
        ops
    }
}

/// What one operation showed, with both queue lengths after it.
#[derive(Debug, PartialEq)]
enum Seen {
    Post(Option<(Envelope, u64, u64)>),
    Arrive(ArrivalOutcome<u64, u64>),
    Deliver(Result<Vec<ArrivalOutcome<u64, u64>>, (ReorderError, Envelope, u64)>),
    Probe(Option<(Envelope, u64)>),
    MatchedProbe(Option<(Envelope, u64)>),
    /// `None` when the receive never got a handle (it matched when posted, or was not posted).
    Cancel(Option<Result<u64, ()>>),
}

struct Side<E> {
    model: E,
    handles: HashMap<u64, ReceiveHandle>,
}

impl<E: Matching<u64, u64>> Side<E> {
    fn step(&mut self, op: &Op) -> (Seen, usize, usize) {
        let seen = match *op {
            Op::Post { spec, id } => match self.model.post(spec, id) {
                PostOutcome::Posted(handle) => {
                    self.handles.insert(id, handle);
                    Seen::Post(None)
                }
                PostOutcome::Matched {
                    envelope,
                    message,
                    receive,
                } => Seen::Post(Some((envelope, message, receive))),
            },
            Op::Arrive { envelope, id } => Seen::Arrive(self.model.arrive(envelope, id)),
            Op::Deliver { seq, envelope, id } => {
                let mut outcomes = Vec::new();
                let result = self
                    .model
                    .arrive_sequenced(seq, envelope, id, &mut outcomes);
                Seen::Deliver(
                    result
                        .map(|()| outcomes)
                        .map_err(|r| (r.reason, r.envelope, r.message)),
                )
            }
            Op::Probe { spec } => Seen::Probe(self.model.probe(&spec).map(|(e, m)| (e, *m))),
            Op::MatchedProbe { spec } => Seen::MatchedProbe(self.model.matched_probe(&spec)),
            Op::Cancel { receive } => Seen::Cancel(
                self.handles
                    .get(&receive)
                    .map(|&handle| self.model.cancel(handle).map_err(|_| ())),
            ),
        };
        (seen, self.model.posted_len(), self.model.unexpected_len())
    }
}

struct Divergence {
    at: usize,
    engine: (Seen, usize, usize),
    reference: (Seen, usize, usize),
}

/// Runs `ops` through both models; the first operation where they disagree, if any.
fn first_divergence(ops: &[Op]) -> Option<Divergence> {
    let mut engine = Side {
        model: Matcher::<u64, u64>::with_reorder_stage(ReorderStage::with_window(WINDOW)),
        handles: HashMap::new(),
    };
    let mut reference = Side {
        model: ReferenceMatcher::<u64, u64>::with_reorder_window(WINDOW),
        handles: HashMap::new(),
    };
    for (at, op) in ops.iter().enumerate() {
        let (e, r) = (engine.step(op), reference.step(op));
        if e != r {
            return Some(Divergence {
                at,
                engine: e,
                reference: r,
            });
        }
    }
    None
}

/// Shortest failing prefix, then greedy deletion of chunks that keeps it failing.
fn shrink(ops: &[Op], first: &Divergence) -> Vec<Op> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut current: Vec<Op> = ops[..=first.at].to_vec();
    let mut chunk = current.len() / 2;
    while chunk >= 1 && Instant::now() < deadline {
        let mut start = 0;
        while start < current.len() && Instant::now() < deadline {
            let end = (start + chunk).min(current.len());
            let candidate: Vec<Op> = current[..start]
                .iter()
                .chain(&current[end..])
                .cloned()
                .collect();
            match first_divergence(&candidate) {
                Some(d) => current = candidate[..=d.at].to_vec(),
                None => start += chunk,
            }
        }
        chunk /= 2;
    }
    current
}

fn check_mix(name: &str, mix: Mix) {
    let mut total = 0;
    for seed in SEEDS {
        let ops = Generator::generate(seed, mix, ops_per_seed());
        total += ops.len();
        if let Some(divergence) = first_divergence(&ops) {
            let shrunk = shrink(&ops, &divergence);
            let last = first_divergence(&shrunk).expect("shrunk list still fails");
            let listing: Vec<String> = shrunk
                .iter()
                .enumerate()
                .map(|(i, op)| format!("  {i:>4}: {op:?}"))
                .collect();
            panic!(
                "mix {name}, seed {seed}: engine and reference diverge at op {} of {}.\n\
                 Shortest failing sequence found ({} ops):\n{}\n\
                 at its last op the engine saw    {:?}\n\
                 and the reference saw           {:?}",
                divergence.at,
                ops.len(),
                shrunk.len(),
                listing.join("\n"),
                last.engine,
                last.reference,
            );
        }
    }
    assert!(total >= SEEDS.len() * OPS_PER_SEED);
}

#[test]
fn differential_wildcards_0_percent() {
    check_mix(
        "0%",
        Mix {
            wildcard: 0.0,
            general: 0.0,
        },
    );
}

#[test]
fn differential_wildcards_10_percent() {
    check_mix(
        "10%",
        Mix {
            wildcard: 0.10,
            general: 0.02,
        },
    );
}

#[test]
fn differential_wildcards_30_percent() {
    check_mix(
        "30%",
        Mix {
            wildcard: 0.30,
            general: 0.05,
        },
    );
}

#[test]
fn differential_wildcards_50_percent() {
    check_mix(
        "50%",
        Mix {
            wildcard: 0.50,
            general: 0.05,
        },
    );
}

#[test]
fn differential_wildcards_70_percent() {
    check_mix(
        "70%",
        Mix {
            wildcard: 0.70,
            general: 0.10,
        },
    );
}

#[test]
fn differential_wildcards_90_percent() {
    check_mix(
        "90%",
        Mix {
            wildcard: 0.90,
            general: 0.05,
        },
    );
}

/// The generator must reach the situations the test is meant to cover; otherwise a green run
/// would prove little. Counts what the engine actually did over one seed of a middle mix.
#[test]
fn differential_generator_covers_deep_queues_and_every_path() {
    let ops = Generator::generate(
        7,
        Mix {
            wildcard: 0.3,
            general: 0.05,
        },
        OPS_PER_SEED,
    );
    let mut engine = Side {
        model: Matcher::<u64, u64>::with_reorder_stage(ReorderStage::with_window(WINDOW)),
        handles: HashMap::new(),
    };
    let (mut max_posted, mut max_unexpected, mut held_releases) = (0, 0, 0);
    let (mut rejected, mut cancelled, mut stale, mut mprobed) = (0, 0, 0, 0);
    for op in &ops {
        let (seen, posted, unexpected) = engine.step(op);
        max_posted = max_posted.max(posted);
        max_unexpected = max_unexpected.max(unexpected);
        match seen {
            Seen::Deliver(Ok(outcomes)) if outcomes.len() > 1 => held_releases += 1,
            Seen::Deliver(Err(_)) => rejected += 1,
            Seen::Cancel(Some(Ok(_))) => cancelled += 1,
            Seen::Cancel(Some(Err(()))) => stale += 1,
            Seen::MatchedProbe(Some(_)) => mprobed += 1,
            _ => {}
        }
    }
    assert!(
        max_posted > 100,
        "posted queue never got deep: {max_posted}"
    );
    assert!(
        max_unexpected > 100,
        "unexpected queue never got deep: {max_unexpected}"
    );
    assert!(
        held_releases > 100,
        "reorder stage rarely released a held run"
    );
    assert!(rejected > 10 && cancelled > 100 && stale > 100 && mprobed > 100);
}

//! Criterion benchmark of the matching engine against the linear reference: the cases of
//! `rdcoll-bench match` (issue 3), with short measurement times.
//!
//! At depth d the entry the measured operation hits sits at the back of its queue, behind d - 1
//! non-matching entries (distinct tags, 64 sources). Cases: an arrival that hits a posted
//! receive, and a post that hits an unexpected message; mixes: exact receives only, and every
//! other receive ANY_SOURCE. Each benchmark id is `<model>/<timing>/<depth>`: `cycle` times the
//! hit plus the operation that puts a new target back (steady state, one queue); `hit` times the
//! hit alone (one hit on each of several queues per timed batch, refills untimed, clock overhead
//! subtracted).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rdcoll_matching::reference::ReferenceMatcher;
use rdcoll_matching::{
    ArrivalOutcome, ContextId, Envelope, Matcher, Matching, PostOutcome, ReceiveSpec, Source,
    TagPattern,
};

const DEPTHS: [usize; 6] = [1, 10, 100, 1_000, 10_000, 100_000];
const BLOCKER_TAG_BASE: u32 = 1_000_000;

#[derive(Clone, Copy)]
enum Case {
    ArrivalHitsPosted,
    PostHitsUnexpected,
}

#[derive(Clone, Copy)]
struct Cell {
    case: Case,
    half_any_source: bool,
    depth: usize,
}

fn context() -> ContextId {
    ContextId::user(1).expect("1 fits in 15 bits")
}

fn source(cell: Cell, i: u64, rank: u32) -> Source {
    if cell.half_any_source && i.is_multiple_of(2) {
        Source::Any
    } else {
        Source::Rank(rank)
    }
}

fn target_spec(cell: Cell, i: u64) -> ReceiveSpec {
    ReceiveSpec::new(context(), source(cell, i, 7), TagPattern::Exact(7))
}

fn target_envelope() -> Envelope {
    Envelope::new(context(), 7, 7)
}

fn refill<E: Matching<u64, u64>>(model: &mut E, cell: Cell, i: u64) {
    let queued = match cell.case {
        Case::ArrivalHitsPosted => {
            matches!(model.post(target_spec(cell, i), i), PostOutcome::Posted(_))
        }
        Case::PostHitsUnexpected => matches!(
            model.arrive(target_envelope(), i),
            ArrivalOutcome::Queued { .. }
        ),
    };
    assert!(queued, "the refill must queue");
}

fn hit<E: Matching<u64, u64>>(model: &mut E, cell: Cell, i: u64) -> u64 {
    let matched = match cell.case {
        Case::ArrivalHitsPosted => match model.arrive(target_envelope(), i) {
            ArrivalOutcome::Matched { receive, .. } => Some(receive),
            ArrivalOutcome::Queued { .. } => None,
        },
        Case::PostHitsUnexpected => match model.post(target_spec(cell, i + 1), i) {
            PostOutcome::Matched { message, .. } => Some(message),
            PostOutcome::Posted(_) => None,
        },
    };
    matched.expect("the hit must match")
}

fn filled<E: Matching<u64, u64>>(mut model: E, cell: Cell) -> E {
    for i in 0..cell.depth as u64 - 1 {
        let (rank, tag) = ((i % 64) as u32, BLOCKER_TAG_BASE + i as u32);
        match cell.case {
            Case::ArrivalHitsPosted => {
                let spec =
                    ReceiveSpec::new(context(), source(cell, i, rank), TagPattern::Exact(tag));
                model.post(spec, i);
            }
            Case::PostHitsUnexpected => {
                model.arrive(Envelope::new(context(), rank, tag), i);
            }
        }
    }
    refill(&mut model, cell, 0);
    model
}

fn instances(depth: usize) -> usize {
    match depth {
        0..=16 => 64,
        17..=10_000 => 8,
        _ => 2,
    }
}

/// The smallest observed cost of reading the clock twice, subtracted from each timed batch.
fn timer_overhead() -> Duration {
    (0..2_000)
        .map(|_| {
            let start = Instant::now();
            black_box(());
            start.elapsed()
        })
        .min()
        .unwrap_or(Duration::ZERO)
}

fn bench_model<E: Matching<u64, u64>>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    make: impl Fn() -> E,
    cell: Cell,
) {
    let overhead = timer_overhead();
    let mut model = filled(make(), cell);
    let mut i = 1u64;
    group.bench_function(BenchmarkId::new(format!("{name}/cycle"), cell.depth), |b| {
        b.iter(|| {
            black_box(hit(&mut model, cell, i));
            refill(&mut model, cell, i);
            i += 1;
        })
    });
    let mut models: Vec<E> = (0..instances(cell.depth))
        .map(|_| filled(make(), cell))
        .collect();
    group.bench_function(BenchmarkId::new(format!("{name}/hit"), cell.depth), |b| {
        b.iter_custom(|iterations| {
            let mut spent = Duration::ZERO;
            let mut done = 0;
            while done < iterations {
                let start = Instant::now();
                for model in models.iter_mut() {
                    black_box(hit(model, cell, i));
                }
                spent += start.elapsed().saturating_sub(overhead);
                for model in models.iter_mut() {
                    refill(model, cell, i);
                }
                i += 1;
                done += models.len() as u64;
            }
            // Scale to the iterations asked for (the last batch may overshoot).
            spent.mul_f64(iterations as f64 / done as f64)
        })
    });
}

fn matching(c: &mut Criterion) {
    for (case, case_name) in [
        (Case::ArrivalHitsPosted, "arrival_hits_posted"),
        (Case::PostHitsUnexpected, "post_hits_unexpected"),
    ] {
        for (half_any_source, mix) in [(false, "exact"), (true, "half_any_source")] {
            let mut group = c.benchmark_group(format!("{case_name}/{mix}"));
            group
                .sample_size(10)
                .warm_up_time(Duration::from_millis(50))
                .measurement_time(Duration::from_millis(200));
            for depth in DEPTHS {
                let cell = Cell {
                    case,
                    half_any_source,
                    depth,
                };
                bench_model(&mut group, "engine", Matcher::<u64, u64>::new, cell);
                bench_model(
                    &mut group,
                    "reference",
                    ReferenceMatcher::<u64, u64>::new,
                    cell,
                );
            }
            group.finish();
        }
    }
}

criterion_group!(benches, matching);
criterion_main!(benches);

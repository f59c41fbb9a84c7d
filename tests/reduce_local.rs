//! Reduce and allreduce on ranks that are threads of this process: every op and type, group
//! sizes 1-9 and 16, counts 0, 1, 7, 1000 and 1,000,000, in place and not, reproducibility,
//! and the degree-k trees for k = 1, 3, 7 and n - 1.

#[allow(dead_code)]
mod reduce_cases;

use rdcoll::{CollConfig, ReduceDegree};

fn run<R: Send>(n: usize, case: impl Fn(&rdcoll::Comm) -> Result<R, String> + Sync) -> Vec<R> {
    let results = rdcoll::local::run(n, |c| case(&c)).unwrap();
    let failures: Vec<String> = results
        .iter()
        .enumerate()
        .filter_map(|(rank, r)| r.as_ref().err().map(|why| format!("rank {rank}: {why}")))
        .collect();
    assert!(failures.is_empty(), "{n} ranks: {failures:#?}");
    results.into_iter().flatten().collect()
}

#[test]
fn every_op_type_and_group_size() {
    for n in (1..=9).chain([16]) {
        run(n, |c| {
            reduce_cases::every_type(c, &[0, 1, 7, 1000], &[0, (n as u32) / 2])
        });
    }
}

#[test]
fn operations_that_do_not_commute_combine_in_rank_order() {
    for n in 1..=9 {
        run(n, reduce_cases::not_commutative);
    }
    for k in [1, 3] {
        let cfg = CollConfig {
            allreduce_degree: ReduceDegree::Fixed(k),
            ..CollConfig::default()
        };
        run(7, |c| {
            let c = c
                .with_collectives_config(cfg.clone())
                .map_err(|e| e.to_string())?;
            reduce_cases::not_commutative(&c)
        });
    }
}

#[test]
fn a_million_elements() {
    for n in [1, 2, 3, 5, 8] {
        run(n, reduce_cases::million);
    }
}

#[test]
fn every_degree() {
    for n in [2, 4, 5, 8, 9] {
        for k in [1, 3, 7, n - 1] {
            let cfg = CollConfig {
                allreduce_degree: ReduceDegree::Fixed(k),
                ..CollConfig::default()
            };
            run(n, |c| {
                let c = c
                    .with_collectives_config(cfg.clone())
                    .map_err(|e| e.to_string())?;
                let got = c.allreduce_degree(64).map_err(|e| e.to_string())?;
                if got != k.min(n - 1) {
                    return Err(format!("degree {got}, asked for {k}"));
                }
                reduce_cases::every_op::<f64>(&c, &[1, 1000], &[0, 1])?;
                reduce_cases::every_op::<i32>(&c, &[7], &[n as u32 - 1])
            });
        }
    }
}

#[test]
fn float_sums_are_bitwise_reproducible_under_random_delays() {
    for count in [1000, 100_000] {
        let results = run(8, |c| reduce_cases::reproducible(c, 50, count));
        let first = &results[0][0];
        for (rank, runs) in results.iter().enumerate() {
            for (run, r) in runs.iter().enumerate() {
                assert!(r == first, "count {count}: rank {rank}, run {run} differs");
            }
        }
    }
}

#[test]
fn lengths_that_differ_are_an_error() {
    run(3, reduce_cases::length_mismatch);
}

/// Settings that must agree (here the reduction tree's degree, and the broadcast algorithm)
/// but differ between ranks: the first collective fails with `Mismatch` on every rank, naming
/// the setting, instead of the ranks taking different paths and hanging.
#[test]
fn settings_that_differ_between_ranks_are_a_mismatch_on_every_rank() {
    type PerRank = fn(u32) -> CollConfig;
    let cases: [(&str, PerRank); 2] = [
        ("RDCOLL_ALLREDUCE_DEGREE", |rank| CollConfig {
            allreduce_degree: ReduceDegree::Fixed(if rank == 0 { 1 } else { 3 }),
            ..CollConfig::default()
        }),
        ("RDCOLL_BCAST_ALGORITHM", |rank| CollConfig {
            bcast_algorithm: if rank == 2 {
                rdcoll::BcastAlgorithm::Counter
            } else {
                rdcoll::BcastAlgorithm::Auto
            },
            ..CollConfig::default()
        }),
    ];
    for (name, cfg) in cases {
        let errors = rdcoll::local::run(3, |world| {
            let comm = world.with_collectives_config(cfg(world.rank())).unwrap();
            let mut sum = [0u64; 4];
            comm.allreduce(&[1u64; 4], &mut sum, rdcoll::Op::Sum)
                .err()
                .map(|e| e.to_string())
        })
        .unwrap();
        for (rank, e) in errors.iter().enumerate() {
            let e = e.as_deref().unwrap_or("Ok");
            assert!(
                e.contains("disagree") && e.contains(name),
                "rank {rank}: {e}"
            );
        }
    }
}

/// An element aligned to 128 bytes (more than the collectives' own copies give).
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(128))]
struct Wide {
    value: u64,
    rest: [u64; 15],
}

/// A reduce and an ireduce of over-aligned elements (small vectors: each non-root combines
/// in a copy of its own type) give the sum at the root on every group size.
#[test]
fn over_aligned_elements_reduce() {
    for n in [2, 3, 5] {
        run(n, |c| {
            let me = u64::from(c.rank());
            let mine: Vec<Wide> = (0..10)
                .map(|i| Wide {
                    value: me * 100 + i,
                    rest: [0; 15],
                })
                .collect();
            let root = (n as u32) - 1;
            let want: Vec<u64> = (0..10u64)
                .map(|i| (0..n as u64).map(|r| r * 100 + i).sum())
                .collect();
            let add = |a: &mut Wide, b: &Wide| a.value += b.value;
            let mut out = vec![bytemuck::Zeroable::zeroed(); 10];
            c.reduce_with(&mine, &mut out, add, root)
                .map_err(|e| format!("reduce_with: {e}"))?;
            let mut nb: Vec<Wide> = vec![bytemuck::Zeroable::zeroed(); 10];
            c.scope(|s| s.ireduce_with(&mine, &mut nb, add, root)?.wait())
                .map_err(|e| format!("ireduce_with: {e}"))?;
            if c.rank() == root {
                for (what, got) in [("reduce_with", &out), ("ireduce_with", &nb)] {
                    let got: Vec<u64> = got.iter().map(|w| w.value).collect();
                    if got != want {
                        return Err(format!("{what}: {got:?}, not {want:?}"));
                    }
                }
            }
            Ok(())
        });
    }
}

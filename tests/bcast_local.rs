//! Broadcast on ranks that are threads of this process (`local` transport), group sizes 1-9
//! and 16, every root, sizes 0 B to 1 MiB, every algorithm.

// The cases that need processes (a rank that dies, 64 MiB) run in `bcast_processes`.
#[allow(dead_code)]
mod bcast_cases;

use rdcoll::{BcastAlgorithm, BcastTransfer, CollConfig};

fn run(n: usize, case: impl Fn(&rdcoll::Comm) -> Result<(), String> + Sync) {
    for (rank, r) in rdcoll::local::run(n, |c| case(&c))
        .unwrap()
        .into_iter()
        .enumerate()
    {
        if let Err(why) = r {
            panic!("{n} ranks, rank {rank}: {why}");
        }
    }
}

#[test]
fn every_group_size_root_and_size() {
    for n in (1..=9).chain([16]) {
        run(n, |c| {
            bcast_cases::every_root_and_size(c, bcast_cases::SIZES)
        });
    }
}

#[test]
fn back_to_back_broadcasts_reuse_blocks_and_wrap_the_counter() {
    for n in [2, 3, 5] {
        run(n, |c| bcast_cases::back_to_back(c, 700));
    }
}

#[test]
fn receivers_that_do_not_know_the_size() {
    for n in [1, 2, 5] {
        run(n, bcast_cases::any_size);
    }
}

#[test]
fn a_buffer_of_another_length_is_an_error_not_an_overrun() {
    run(3, bcast_cases::length_mismatch);
}

#[test]
fn every_rdmc_algorithm_with_small_blocks() {
    for (name, transfer) in bcast_cases::algorithms()
        .into_iter()
        .flat_map(|name| [(name, BcastTransfer::Write), (name, BcastTransfer::Staged)])
    {
        let cfg = CollConfig {
            bcast_algorithm: BcastAlgorithm::from_name(name).unwrap(),
            bcast_block: Some(3000),
            bcast_transfer: Some(transfer),
            ..CollConfig::default()
        };
        for n in [2, 3, 6, 8] {
            run(n, |c| {
                let c = c
                    .with_collectives_config(cfg.clone())
                    .map_err(|e| e.to_string())?;
                bcast_cases::every_root_and_size(&c, &[0, 1, 2999, 3000, 3001, 50_000])
                    .map_err(|e| format!("{name}, {transfer:?}: {e}"))
            });
        }
    }
}

#[test]
fn shared_staging_with_small_chunks() {
    for n in [2, 3, 6, 9] {
        run(n, |c| bcast_cases::shared_staging(c, 3000));
    }
}

#[test]
fn nobody_leaves_a_barrier_before_everyone_entered_it() {
    use rdcoll::BarrierAlgorithm;
    use std::sync::atomic::{AtomicUsize, Ordering};
    for algorithm in [
        BarrierAlgorithm::Auto,
        BarrierAlgorithm::Dissemination,
        BarrierAlgorithm::Flat,
    ] {
        for n in [1, 2, 3, 5, 8] {
            let arrived = AtomicUsize::new(0);
            let cfg = CollConfig {
                barrier_algorithm: algorithm,
                ..CollConfig::default()
            };
            run(n, |c| {
                let c = c
                    .with_collectives_config(cfg.clone())
                    .map_err(|e| e.to_string())?;
                // 300 rounds wrap the one-byte barrier numbers.
                for round in 0..300usize {
                    arrived.fetch_add(1, Ordering::SeqCst);
                    c.barrier().map_err(|e| e.to_string())?;
                    let seen = arrived.load(Ordering::SeqCst);
                    if seen < n * (round + 1) {
                        return Err(format!(
                            "{algorithm:?}, {n} ranks, round {round}: left with {seen} arrivals"
                        ));
                    }
                    // A second barrier keeps the next round's arrivals out of this check.
                    c.barrier().map_err(|e| e.to_string())?;
                }
                Ok(())
            });
        }
    }
}

//! The library over the simulated fabric (`rdcoll::sim`): the same cases as on in-process
//! ranks, now with a modelled network and virtual time, and the simulation's own promises
//! (the same program gives the same times every run; a job where every rank waits for
//! nothing ends with errors, not a hang).

#[allow(dead_code, unused_imports)]
mod bcast_cases;
#[allow(dead_code, unused_imports)]
mod blocks_cases;
#[allow(dead_code, unused_imports)]
mod p2p_cases;
#[allow(dead_code, unused_imports)]
mod reduce_cases;

use std::time::Duration;

use rdcoll::sim::{self, SimConfig, Topology};
use rdcoll::Comm;

/// Runs `case` on a simulated job; panics listing each rank whose case failed.
fn run(cfg: SimConfig, case: impl Fn(&Comm) -> Result<(), String> + Sync) {
    let n = cfg.ranks;
    let failures: Vec<String> = sim::run(cfg, |c| case(&c))
        .unwrap()
        .into_iter()
        .enumerate()
        .filter_map(|(rank, r)| r.err().map(|why| format!("rank {rank}: {why}")))
        .collect();
    assert!(
        failures.is_empty(),
        "{n} simulated ranks: {}",
        failures.join("; ")
    );
}

/// Two clusters joined by a slow, distant WAN link.
fn two_clusters(ranks: usize) -> SimConfig {
    SimConfig {
        topology: Topology::Clusters {
            cluster_ranks: ranks.div_ceil(2),
            wan_bandwidth: 1.25e9,
            wan_latency: Duration::from_millis(5),
            wan_changes: Vec::new(),
        },
        ..SimConfig::switch(ranks)
    }
}

#[test]
fn point_to_point_matching_and_traffic() {
    run(SimConfig::switch(2), p2p_cases::table_one);
    run(SimConfig::switch(2), p2p_cases::truncation_and_zero_length);
    run(SimConfig::switch(4), |c| p2p_cases::random_traffic(c, 1000));
    run(two_clusters(4), |c| p2p_cases::random_traffic(c, 300));
}

#[test]
fn broadcast_every_root_and_size() {
    for n in [3, 8] {
        run(SimConfig::switch(n), |c| {
            bcast_cases::every_root_and_size(c, bcast_cases::SIZES)
        });
    }
    run(two_clusters(6), bcast_cases::every_algorithm);
}

#[test]
fn reductions_and_the_other_collectives() {
    for n in [2, 5] {
        run(SimConfig::switch(n), |c| {
            reduce_cases::every_type(c, &[0, 1, 7, 1000], &[0, c.size() / 2])
        });
        run(SimConfig::switch(n), |c| {
            blocks_cases::every_collective(c, &[0, 1, 3, 100, 20_000])
        });
    }
}

/// The same program, run three times, gives every rank the same virtual times.
#[test]
fn the_same_program_gives_the_same_times() {
    let program = |c: Comm| -> Vec<f64> {
        let me = c.rank() as usize;
        let mut times = Vec::new();
        let mut buf = vec![me as u8; 300_000];
        c.bcast(&mut buf, 1).unwrap();
        times.push(c.wtime());
        let mut sum = vec![0u64; 5000];
        c.allreduce(&vec![me as u64; 5000], &mut sum, rdcoll::Op::Sum)
            .unwrap();
        times.push(c.wtime());
        // Irregular point-to-point traffic, with wildcards.
        let n = c.size();
        for round in 0..20u32 {
            let dest = (c.rank() + 1 + round % (n - 1)) % n;
            let len = (round as usize * 7919 + me * 131) % 100_000;
            let mut got = vec![0u8; 100_000];
            c.sendrecv(
                &vec![round as u8; len],
                dest,
                round,
                &mut got,
                rdcoll::Source::Any,
                round,
            )
            .unwrap();
            times.push(c.wtime());
        }
        times
    };
    let cfg = two_clusters(7);
    let first = sim::run(cfg.clone(), program).unwrap();
    assert!(first.iter().all(|t| t.iter().all(|&x| x > 0.0)));
    for _ in 0..2 {
        assert_eq!(sim::run(cfg.clone(), program).unwrap(), first);
    }
}

/// Every rank waits for a message nobody sends: the job ends with errors.
#[test]
fn a_job_where_everyone_waits_for_nothing_ends() {
    let cfg = SimConfig {
        stall_limit: Duration::from_millis(20),
        ..SimConfig::switch(3)
    };
    let got = sim::run(cfg, |c| {
        c.recv(&mut [0u8; 8], rdcoll::Source::Any, 9).map(drop)
    })
    .unwrap();
    assert!(got.iter().all(|r| r.is_err()), "{got:?}");
}

/// A rank that panics ends the simulated job as it ends a local one.
#[test]
fn a_panic_is_reported_by_rank() {
    let err = sim::run(SimConfig::switch(3), |c| {
        if c.rank() == 1 {
            panic!("rank 1 gives up");
        }
        c.barrier()
    })
    .unwrap_err();
    assert!(
        matches!(err, rdcoll::Error::RankPanicked { rank: 1, .. }),
        "{err}"
    );
}

/// Nonblocking collectives need a thread of their own per rank, which the simulation cannot
/// account for yet: they are refused with a clear error instead of stopping virtual time.
#[test]
fn nonblocking_collectives_are_refused_not_hung() {
    let got = sim::run(SimConfig::switch(2), |c| {
        c.scope(|s| s.ibarrier().map(drop).map_err(|e| e.to_string()))
    })
    .unwrap();
    for r in got {
        let e = r.unwrap_err();
        assert!(e.contains("simulated fabric"), "{e}");
    }
}

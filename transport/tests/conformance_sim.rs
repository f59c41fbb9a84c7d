//! The conformance suite on the `sim` backend (ranks as threads, a modelled network and
//! virtual time).

mod common;

use common::cases::{run_case, CASES, CROWDED_CASES};

fn run_sim(case: &str, n: usize) {
    let fabrics = rdcoll_transport::sim::create(rdcoll_transport::sim::SimConfig::switch(n))
        .expect("create sim job");
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = fabrics
            .into_iter()
            .map(|f| {
                s.spawn(move || {
                    // The victim dies at once, as a crash would, then unwinds.
                    let die = || {
                        f.fail();
                        std::panic::panic_any("rank died on purpose")
                    };
                    run_case(case, &f, &die)
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, h)| match h.join() {
                Ok(r) => r,
                Err(p) if p.downcast_ref::<&str>() == Some(&"rank died on purpose") => Ok(()),
                Err(_) => Err(format!("rank {rank} panicked")),
            })
            .collect()
    });
    let errors: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(
        errors.is_empty(),
        "{case} on {n} simulated ranks: {errors:#?}"
    );
}

#[test]
fn every_case_on_simulated_ranks() {
    for &(case, min) in CASES {
        let crowded = if CROWDED_CASES.contains(&case) { 8 } else { 4 };
        for n in [min.max(1), 4, crowded] {
            run_sim(case, n);
        }
    }
}

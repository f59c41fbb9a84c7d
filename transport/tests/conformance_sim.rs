//! The conformance suite on the `sim` backend (ranks as threads, a modelled network and
//! virtual time).

mod common;

use common::cases::{CASES, CROWDED_CASES};
use common::threads::run_threads;
use rdcoll_transport::sim::{SimConfig, SimFabric};

#[test]
fn every_case_on_simulated_ranks() {
    for &(case, min) in CASES {
        let crowded = if CROWDED_CASES.contains(&case) { 8 } else { 4 };
        for n in [min.max(1), 4, crowded] {
            let fabrics = rdcoll_transport::sim::create(SimConfig::switch(n)).expect("sim job");
            run_threads(case, fabrics, SimFabric::fail, "simulated");
        }
    }
}

//! The conformance suite on the `local` backend (ranks as threads).

mod common;

use common::cases::{CASES, CROWDED_CASES};
use common::threads::run_threads;
use rdcoll_transport::local::LocalFabric;

#[test]
fn every_case_on_local_ranks() {
    for &(case, min) in CASES {
        let crowded = if CROWDED_CASES.contains(&case) { 8 } else { 4 };
        for n in [min.max(1), 4, crowded] {
            let fabrics = rdcoll_transport::local::create(n).expect("create local job");
            run_threads(case, fabrics, LocalFabric::fail, "local");
        }
    }
}

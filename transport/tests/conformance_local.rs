//! The conformance suite on the `local` backend (ranks as threads).

mod common;

use common::cases::{rank_counts, CASES};
use common::threads::run_threads;
use rdcoll_transport::local::LocalFabric;

#[test]
fn every_case_on_local_ranks() {
    for &(case, min) in CASES {
        for n in rank_counts(case, min, 1, true) {
            let fabrics = rdcoll_transport::local::create(n).expect("create local job");
            run_threads(case, fabrics, LocalFabric::fail, "local");
        }
    }
}

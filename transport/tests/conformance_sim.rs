//! The conformance suite on the `sim` backend (ranks as threads, a modelled network and
//! virtual time).

mod common;

use common::cases::{rank_counts, CASES};
use common::threads::run_threads;
use rdcoll_transport::sim::{NetworkModel, SimConfig, SimFabric};

#[test]
fn every_case_on_simulated_ranks() {
    for &(case, min) in CASES {
        for n in rank_counts(case, min, 1, true) {
            let fabrics = rdcoll_transport::sim::create(SimConfig::switch(n)).expect("sim job");
            run_threads(case, fabrics, SimFabric::fail, "simulated");
        }
    }
}

/// The same cases on the packet-level network: small buffers, so that packets wait for
/// credits and in their buffers' turn.
#[test]
fn every_case_on_simulated_ranks_over_packets() {
    for &(case, min) in CASES {
        for n in rank_counts(case, min, 1, true) {
            let cfg = SimConfig {
                network: NetworkModel::Packets {
                    mtu: 1024,
                    buffer: 4096,
                },
                ..SimConfig::switch(n)
            };
            let fabrics = rdcoll_transport::sim::create(cfg).expect("sim job");
            run_threads(case, fabrics, SimFabric::fail, "simulated over packets");
        }
    }
}

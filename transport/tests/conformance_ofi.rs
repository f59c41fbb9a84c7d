//! The conformance suite over the `ofi` backend (libfabric), every rank a process, on the
//! providers that work without RDMA hardware: `tcp` (tcp;ofi_rxm) and `sockets`.
#![cfg(feature = "ofi")]

mod common;

use common::cases::{rank_counts, CASES};
use common::procs::{run_procs, worker_entry};

#[test]
fn worker_process_entry() {
    worker_entry();
}

/// Every case on `provider`, at 2 and 4 ranks, and with `crowded` also at 8 (more ranks than
/// this machine's cores).
fn every_case_on(provider: &str, crowded: bool) {
    let env = [
        ("FI_PROVIDER", provider),
        ("FI_TCP_IFACE", "lo"),
        ("FI_SOCKETS_IFACE", "lo"),
    ];
    let only = std::env::var("RDCOLL_CONFORMANCE_ONLY").ok();
    let mut failures = Vec::new();
    for &(case, min) in CASES {
        if only.as_deref().is_some_and(|o| o != case) {
            continue;
        }
        for n in rank_counts(case, min, 2, crowded) {
            if let Err(e) = run_procs("ofi", n, case, &env) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn every_case_over_ofi_tcp() {
    every_case_on("tcp", true);
}

/// Not crowded: the sockets provider takes milliseconds per large message (its own progress
/// threads), and 8 ranks of it on 2 cores ran past the cases' deadline.
#[test]
fn every_case_over_ofi_sockets() {
    every_case_on("sockets", false);
}

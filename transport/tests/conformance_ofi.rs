//! The conformance suite over the `ofi` backend (libfabric), every rank a process, on the
//! providers that work without RDMA hardware: `tcp` (tcp;ofi_rxm) and `sockets`.
#![cfg(feature = "ofi")]

mod common;

use common::cases::{CASES, CROWDED_CASES};
use common::procs::{run_procs, worker_entry};

#[test]
fn worker_process_entry() {
    worker_entry();
}

fn every_case_on(provider: &str) {
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
        let crowded = if CROWDED_CASES.contains(&case) { 8 } else { 4 };
        for n in [min.max(2), 4, crowded] {
            if let Err(e) = run_procs("ofi", n, case, &env) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn every_case_over_ofi_tcp() {
    every_case_on("tcp");
}

#[test]
fn every_case_over_ofi_sockets() {
    every_case_on("sockets");
}

//! The conformance suite over the `tcp` backend, every rank a process.

mod common;

use common::cases::{CASES, CROWDED_CASES};
use common::procs::{run_procs, worker_entry};

#[test]
fn worker_process_entry() {
    worker_entry();
}

#[test]
fn every_case_over_tcp_processes() {
    let mut failures = Vec::new();
    for &(case, min) in CASES {
        let crowded = if CROWDED_CASES.contains(&case) { 8 } else { 4 };
        for n in [min.max(2), 4, crowded] {
            if let Err(e) = run_procs("tcp", n, case, &[]) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

//! The conformance suite over the `tcp` backend, every rank a process.

mod common;

use common::cases::{rank_counts, CASES};
use common::procs::{run_procs, worker_entry, CROWDED_VAR};

#[test]
fn worker_process_entry() {
    worker_entry();
}

#[test]
fn every_case_over_tcp_processes() {
    let mut failures = Vec::new();
    for &(case, min) in CASES {
        for n in rank_counts(case, min, 2, true) {
            if let Err(e) = run_procs("tcp", n, case, &[]) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every case with the fabric told that its host is crowded, as the engine tells it where ranks
/// outnumber cores: the I/O thread then stops reading while the host polls, and reads again
/// when the host sleeps or leaves the sockets alone (`tcp::aside`). 4 ranks: on a 2-core host
/// they take turns on the cores, as in a crowded job.
#[test]
fn every_case_over_tcp_processes_with_the_io_thread_standing_aside() {
    let mut failures = Vec::new();
    for &(case, _) in CASES {
        if let Err(e) = run_procs("tcp", 4, case, &[(CROWDED_VAR, "1")]) {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

//! The conformance suite over the `shm` backend, every rank a process: once with cross-memory
//! attach (`process_vm_readv`), once forced through the bounce path, once with a heap too
//! small for the test regions (so fabric-allocated regions fall back to private memory), and
//! once without the asymmetric (membarrier) fence.

mod common;

use common::cases::{rank_counts, CASES};
use common::procs::{run_procs, worker_entry};

#[test]
fn worker_process_entry() {
    worker_entry();
}

fn all_cases(env: &[(&str, &str)]) {
    let mut failures = Vec::new();
    for &(case, min) in CASES {
        for n in rank_counts(case, min, 2, true) {
            if let Err(e) = run_procs("shm", n, case, env) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{env:?}: {failures:#?}");
}

#[test]
fn every_case_over_shm_processes() {
    all_cases(&[]);
}

#[test]
fn every_case_over_shm_with_private_regions_and_cma() {
    all_cases(&[("RDCOLL_SHM_HEAP_BYTES", "65536")]);
}

#[test]
fn every_case_over_shm_with_private_regions_and_bounce() {
    all_cases(&[("RDCOLL_SHM_HEAP_BYTES", "65536"), ("RDCOLL_SHM_CMA", "0")]);
}

/// Without membarriers (refused by the kernel, a seccomp filter or valgrind, or turned off)
/// senders fence before they look for sleepers, and copies into peers' heaps are counted in
/// the shared table instead of announced in per-thread slots.
#[test]
fn every_case_over_shm_with_full_fences() {
    all_cases(&[("RDCOLL_SHM_MEMBARRIER", "0")]);
}

/// A put into registered memory whose initiator could not write its part (here: wrote half of
/// it, then failed), whole below 32 KiB or split above, still completes with every byte right:
/// the target pulls that part itself. Split puts need every rank to have a core, so 2 ranks.
#[test]
fn puts_into_user_memory_complete_when_the_initiator_cannot_write_its_part() {
    let env = [("RDCOLL_SHM_FAIL_PUSHES", "1")];
    run_procs("shm", 2, "large_puts_to_user_memory", &env).unwrap();
}

#[test]
fn segments_are_mapped_by_all_unlinked_and_private() {
    run_procs("shm", 3, "shm_segments", &[]).unwrap();
}

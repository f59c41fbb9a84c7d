//! MPI's progress rule on ranks that are threads of this process (`local` transport).

// `while_computing` needs thread mode: tests/progress_thread_mode.rs.
#[allow(dead_code)]
mod progress_cases;

fn run(n: usize, case: fn(&rdcoll::Comm) -> progress_cases::Outcome) {
    let failures: Vec<String> = rdcoll::local::run(n, |c| case(&c))
        .unwrap()
        .into_iter()
        .enumerate()
        .filter_map(|(rank, r)| r.err().map(|why| format!("rank {rank}: {why}")))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("; "));
}

#[test]
fn a_posted_receive_completes_in_every_wait_on_two_ranks() {
    run(2, progress_cases::library_waits);
}

#[test]
fn a_posted_receive_completes_in_every_wait_on_four_ranks() {
    run(4, progress_cases::library_waits);
}

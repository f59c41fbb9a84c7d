//! MPI's progress rule on ranks that are threads of this process (`local` transport).

mod local_ranks;
// `while_computing` needs thread mode: tests/progress_thread_mode.rs.
#[allow(dead_code)]
mod progress_cases;

use local_ranks::run;

#[test]
fn a_posted_receive_completes_in_every_wait_on_two_ranks() {
    run(2, progress_cases::library_waits);
}

#[test]
fn a_posted_receive_completes_in_every_wait_on_four_ranks() {
    run(4, progress_cases::library_waits);
}

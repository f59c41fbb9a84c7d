//! Resource limits on ranks that are threads of this process (`local` transport).

mod local_ranks;
// The many-sends cases need a small eager limit: p2p_processes runs them.
#[allow(dead_code)]
mod limits_cases;

use local_ranks::run;

#[test]
fn two_hundred_thousand_dups_and_drops() {
    run(3, |c| limits_cases::dup_and_drop(c, 200_000));
}

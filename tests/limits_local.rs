//! Resource limits on ranks that are threads of this process (`local` transport).

// The many-sends cases need a small eager limit: p2p_processes runs them.
#[allow(dead_code)]
mod limits_cases;

fn run(n: usize, case: impl Fn(&rdcoll::Comm) -> limits_cases::Outcome + Sync) {
    let failures: Vec<String> = rdcoll::local::run(n, |c| case(&c))
        .unwrap()
        .into_iter()
        .enumerate()
        .filter_map(|(rank, r)| r.err().map(|why| format!("rank {rank}: {why}")))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("; "));
}

#[test]
fn two_hundred_thousand_dups_and_drops() {
    run(3, |c| limits_cases::dup_and_drop(c, 200_000));
}

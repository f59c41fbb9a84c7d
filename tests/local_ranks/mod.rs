//! Runs a case on ranks that are threads of this process (`local` transport) and fails with
//! every failing rank's reason: the first is often only "peer failed" for another's.

/// Runs `case` on `n` in-process ranks; panics listing each rank whose case failed.
pub fn run(n: usize, case: impl Fn(&rdcoll::Comm) -> Result<(), String> + Sync) {
    let failures: Vec<String> = rdcoll::local::run(n, |c| case(&c))
        .unwrap()
        .into_iter()
        .enumerate()
        .filter_map(|(rank, r)| r.err().map(|why| format!("rank {rank}: {why}")))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("; "));
}

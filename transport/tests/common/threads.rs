//! Runs a conformance case on a job whose ranks are threads of this process (the `local` and
//! `sim` backends).

use rdcoll_transport::Fabric;

use super::cases::run_case;

/// Runs `case` on every endpoint of `fabrics`, each on its own thread; `fail` makes a rank
/// dead to its peers at once (the victim of a case dies that way, then unwinds). Panics
/// listing every rank's failure.
pub fn run_threads<F: Fabric + Send>(case: &str, fabrics: Vec<F>, fail: fn(&F), what: &str) {
    let n = fabrics.len();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = fabrics
            .into_iter()
            .map(|f| {
                s.spawn(move || {
                    let die = || {
                        fail(&f);
                        std::panic::panic_any("rank died on purpose")
                    };
                    run_case(case, &f, &die)
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, h)| match h.join() {
                Ok(r) => r,
                Err(p) if p.downcast_ref::<&str>() == Some(&"rank died on purpose") => Ok(()),
                Err(_) => Err(format!("rank {rank} panicked")),
            })
            .collect()
    });
    let errors: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    assert!(errors.is_empty(), "{case} on {n} {what} ranks: {errors:#?}");
}

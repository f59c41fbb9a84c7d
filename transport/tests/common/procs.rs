//! Running a conformance case as a job of processes: the test binary re-launches itself as
//! each rank (through the same launcher `rdcoll-run` uses), and the parent judges the exits.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;

use rdcoll_transport::launch::{describe, run_job, JobSpec};

use super::cases::run_case;

/// Environment variable that turns a test binary into a conformance rank.
pub const CASE_VAR: &str = "RDCOLL_CONFORMANCE_CASE";

/// Body of the `worker_process_entry` test: does nothing unless started as a rank.
/// Set in a worker's environment: the fabric is told its host is crowded.
pub const CROWDED_VAR: &str = "RDCOLL_CONFORMANCE_CROWDED";

pub fn worker_entry() {
    let Ok(case) = std::env::var(CASE_VAR) else {
        return;
    };
    let fabric = match rdcoll_transport::bootstrap::init_from_env() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("bootstrap failed: {e}");
            std::process::exit(3);
        }
    };
    if std::env::var_os(CROWDED_VAR).is_some() {
        // As the offload engine says where ranks outnumber cores (tcp's I/O thread then
        // stands aside from reading while the host polls).
        fabric.note_crowded(true);
    }
    let die = || {
        // SAFETY: sending SIGKILL to ourselves; nothing runs after it.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    };
    let code = match run_case(&case, fabric.as_ref(), &die) {
        Ok(()) => {
            println!(
                "conformance {case}: rank {} of {} passed over {}",
                fabric.rank(),
                fabric.size(),
                fabric.backend()
            );
            0
        }
        Err(e) => {
            eprintln!("{case}: {e}");
            1
        }
    };
    let rank = fabric.rank();
    let victim = fabric.size() as u32 - 1;
    drop(fabric);
    if rank == victim && super::cases::LINGERING_CASES.contains(&case.as_str()) {
        std::thread::sleep(super::cases::LINGER);
    }
    std::process::exit(code);
}

/// Runs `case` as `n` processes over `transport`; `Err` describes every rank that misbehaved.
pub fn run_procs(
    transport: &str,
    n: usize,
    case: &str,
    extra_env: &[(&str, &str)],
) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut spec = JobSpec::new(
        n,
        vec![
            exe.into(),
            "worker_process_entry".into(),
            "--exact".into(),
            "--nocapture".into(),
            "--test-threads=1".into(),
        ],
    );
    spec.transport = Some(transport.to_string());
    spec.prefix_output = true;
    spec.stop_on_failure = false;
    spec.env.push((CASE_VAR.into(), case.into()));
    spec.env
        .push(("RDCOLL_PEER_TIMEOUT_MS".into(), "3000".into()));
    for (k, v) in extra_env {
        spec.env.push((OsString::from(k), OsString::from(v)));
    }
    let report = run_job(&spec).map_err(|e| e.to_string())?;
    let mut problems = Vec::new();
    for e in &report.exits {
        let victim = super::cases::killed_on_purpose(case, e.rank, n);
        let ok = if victim {
            e.status.signal() == Some(libc::SIGKILL)
        } else {
            e.status.success()
        };
        if !ok {
            problems.push(format!("rank {} {}", e.rank, describe(e.status)));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{case} over {transport} with {n} ranks: {}",
            problems.join("; ")
        ))
    }
}

//! `rdcoll-bench faults`: kill -9 trials. Each trial starts a job (`--ranks`, default 4) under
//! the launcher `rdcoll-run` uses, running one workload in a loop (an eager ring, a 64 MiB
//! rendezvous ring, bcast, allreduce or barrier loops), kills one random rank with SIGKILL at a
//! random moment, and measures how long each survivor took to get an error (each writes the
//! moment it did, then exits) and how long the launcher took to end. A trial whose job has not
//! ended 30 s after the kill is a hang (its ranks are then killed). The launcher is left to
//! let the survivors fail on their own (`stop_on_failure` off): what is measured is the
//! library's detection, not the launcher's clean-up.
//!
//! `rdcoll-bench faults [--trials N] [--ranks N] [--transports shm,tcp] [--seed S]`

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdcoll_transport::launch::{run_job, JobSpec};

/// The workloads, as `fault-rank` takes them.
const WORKLOADS: [&str; 5] = ["eager", "rendezvous", "bcast", "allreduce", "barrier"];
/// Where a rank writes its pid and its error moment.
const DIR_VAR: &str = "RDCOLL_FAULT_DIR";
/// How long after the kill a job may take before the trial counts as a hang.
const HANG: Duration = Duration::from_secs(30);

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A rank of a trial: runs `workload` until an operation fails, then records when.
pub fn rank(args: &[String]) -> i32 {
    let workload = args.first().map(String::as_str).unwrap_or("eager");
    let Some(dir) = std::env::var_os(DIR_VAR).map(PathBuf::from) else {
        eprintln!("fault-rank: {DIR_VAR} is not set");
        return 2;
    };
    let world = match rdcoll::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("fault-rank: init: {e}");
            return 3;
        }
    };
    let me = world.rank();
    let _ = std::fs::write(
        dir.join(format!("pid.{me}")),
        std::process::id().to_string(),
    );
    let err = run_workload(&world, workload);
    let _ = std::fs::write(dir.join(format!("err.{me}")), format!("{} {err}", now_ns()));
    1
}

/// Loops `workload` until an operation fails; the error.
fn run_workload(world: &rdcoll::Comm, workload: &str) -> rdcoll::Error {
    let (me, n) = (world.rank(), world.size());
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    let len = match workload {
        "rendezvous" => 64 << 20,
        "bcast" => 64 << 10,
        _ => 1024,
    };
    let out = vec![me as u8; len];
    let mut inbox = vec![0u8; len];
    let mut sum = vec![0u64; 1024];
    loop {
        let r = match workload {
            "eager" | "rendezvous" => world.sendrecv(&out, next, 1, &mut inbox, prev, 1).map(drop),
            "bcast" => world.bcast(&mut inbox, 0),
            "allreduce" => world.allreduce(&[1u64; 1024], &mut sum, rdcoll::Op::Sum),
            _ => world.barrier(),
        };
        if let Err(e) = r {
            return e;
        }
    }
}

/// One trial's outcome.
struct Trial {
    transport: String,
    workload: &'static str,
    victim: usize,
    /// Each survivor's time from the kill to its error (`None`: it never reported one).
    survivors: Vec<Option<Duration>>,
    /// From the kill to the launcher's return (`None`: a hang).
    launcher: Option<Duration>,
}

/// The experiment.
pub fn run(args: &[String]) -> i32 {
    let mut trials = 200usize;
    let mut ranks = 4usize;
    let mut transports = vec!["shm".to_string(), "tcp".to_string()];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ now_ns() as u64;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = it.next().cloned().unwrap_or_default();
        match a.as_str() {
            "--trials" => trials = value.parse().unwrap_or(trials),
            "--ranks" => ranks = value.parse().unwrap_or(ranks).max(2),
            "--transports" => transports = value.split(',').map(str::to_string).collect(),
            "--seed" => seed = value.parse().unwrap_or(seed),
            other => {
                eprintln!("rdcoll-bench faults: unknown option {other}");
                return 2;
            }
        }
    }
    let mut rng = seed | 1;
    let mut next_random = move |below: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % below.max(1)
    };
    println!("# rdcoll-bench faults: {trials} trials, {ranks} ranks, transports {transports:?}, seed {seed}");
    println!("# trial transport workload victim launcher_ms survivors_ms");
    let mut done = Vec::new();
    for t in 0..trials {
        let transport = transports[next_random(transports.len() as u64) as usize].clone();
        let workload = WORKLOADS[next_random(WORKLOADS.len() as u64) as usize];
        let victim = next_random(ranks as u64) as usize;
        let delay = Duration::from_millis(100 + next_random(500));
        match trial(t, &transport, workload, ranks, victim, delay) {
            Ok(trial) => {
                let ms = |d: &Option<Duration>| {
                    d.map_or("none".to_string(), |d| {
                        format!("{:.1}", d.as_secs_f64() * 1e3)
                    })
                };
                let survivors: Vec<String> = trial.survivors.iter().map(ms).collect();
                println!(
                    "{t} {} {} {} {} {}",
                    trial.transport,
                    trial.workload,
                    trial.victim,
                    ms(&trial.launcher),
                    survivors.join(",")
                );
                done.push(trial);
            }
            Err(e) => {
                eprintln!("rdcoll-bench faults: trial {t}: {e}");
                return 1;
            }
        }
    }
    summarize(&done);
    0
}

/// Runs one trial in a fresh directory.
fn trial(
    t: usize,
    transport: &str,
    workload: &'static str,
    ranks: usize,
    victim: usize,
    delay: Duration,
) -> Result<Trial, String> {
    let dir = std::env::temp_dir().join(format!("rdcoll-faults-{}-{t}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut spec = JobSpec::new(
        ranks,
        vec![exe.into(), OsString::from("fault-rank"), workload.into()],
    );
    spec.transport = Some(transport.to_string());
    spec.stop_on_failure = false;
    spec.env.push((DIR_VAR.into(), dir.clone().into()));
    let job = std::thread::spawn(move || {
        let r = run_job(&spec);
        (Instant::now(), r.map(drop).map_err(|e| e.to_string()))
    });
    // Every rank started (its pid written), then the random moment.
    let pids = wait_for_pids(&dir, ranks, Duration::from_secs(60))?;
    std::thread::sleep(delay);
    let killed_ns = now_ns();
    let killed_at = Instant::now();
    // SAFETY: kill sends a signal to a process id this trial's job started.
    unsafe { libc::kill(pids[victim] as libc::pid_t, libc::SIGKILL) };
    let mut launcher = None;
    while killed_at.elapsed() < HANG {
        if job.is_finished() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if job.is_finished() {
        let (ended, _) = job.join().map_err(|_| "the job thread panicked")?;
        launcher = Some(ended.saturating_duration_since(killed_at));
    } else {
        for &p in &pids {
            // SAFETY: as above; the hung job's ranks are ended so the trial can go on.
            unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) };
        }
        let _ = job.join();
    }
    let survivors = (0..ranks)
        .filter(|&r| r != victim)
        .map(|r| error_after(&dir, r, killed_ns))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Trial {
        transport: transport.to_string(),
        workload,
        victim,
        survivors,
        launcher,
    })
}

fn wait_for_pids(dir: &Path, ranks: usize, limit: Duration) -> Result<Vec<u32>, String> {
    let start = Instant::now();
    loop {
        let pids: Vec<Option<u32>> = (0..ranks)
            .map(|r| {
                std::fs::read_to_string(dir.join(format!("pid.{r}")))
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
            })
            .collect();
        if pids.iter().all(Option::is_some) {
            return Ok(pids.into_iter().flatten().collect());
        }
        if start.elapsed() > limit {
            return Err("the ranks did not start".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// From the kill to survivor `r`'s error, if it recorded one.
fn error_after(dir: &Path, r: usize, killed_ns: u128) -> Option<Duration> {
    let text = std::fs::read_to_string(dir.join(format!("err.{r}"))).ok()?;
    let at: u128 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(at.saturating_sub(killed_ns) as u64))
}

/// p50 and max of `v` in ms.
fn p50_max(v: &mut [f64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.sort_by(f64::total_cmp);
    format!("{:.1} / {:.1}", v[v.len() / 2], v[v.len() - 1])
}

fn summarize(trials: &[Trial]) {
    println!("# transport workload trials hangs survivors_without_error error_ms_p50/max launcher_ms_p50/max");
    let mut keys: Vec<(String, &str)> = trials
        .iter()
        .map(|t| (t.transport.clone(), t.workload))
        .collect();
    keys.sort();
    keys.dedup();
    keys.push(("all".into(), "all"));
    for (transport, workload) in keys {
        let of: Vec<&Trial> = trials
            .iter()
            .filter(|t| transport == "all" || (t.transport == transport && t.workload == workload))
            .collect();
        let hangs = of.iter().filter(|t| t.launcher.is_none()).count();
        let silent = of
            .iter()
            .flat_map(|t| &t.survivors)
            .filter(|s| s.is_none())
            .count();
        let mut errors: Vec<f64> = of
            .iter()
            .flat_map(|t| t.survivors.iter().flatten())
            .map(|d| d.as_secs_f64() * 1e3)
            .collect();
        let mut launcher: Vec<f64> = of
            .iter()
            .filter_map(|t| t.launcher)
            .map(|d| d.as_secs_f64() * 1e3)
            .collect();
        println!(
            "{transport} {workload} {} {hangs} {silent} {} {}",
            of.len(),
            p50_max(&mut errors),
            p50_max(&mut launcher)
        );
    }
}

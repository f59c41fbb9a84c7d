//! `rdcoll-run` end to end: a real job over each transport, argument pass-through, exit status,
//! and a rank killed mid-job.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn launcher() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rdcoll-run"))
}

fn example(name: &str) -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rdcoll-run"));
    bin.parent()
        .expect("target dir")
        .join("examples")
        .join(name)
}

#[test]
fn ring_example_runs_on_four_ranks_over_each_transport() {
    for transport in ["shm", "tcp", "auto"] {
        let out = launcher()
            .args(["-n", "4", "--transport", transport])
            .arg(example("ring"))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{transport}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let backend = if transport == "auto" {
            "shm"
        } else {
            transport
        };
        for r in 0..4 {
            assert!(
                stdout.contains(&format!("rank {r} of 4 over {backend}: token passed")),
                "{transport}: {stdout}"
            );
        }
    }
}

/// The complete programs of `examples/` (halo exchange, parallel reduction, broadcast of a
/// model) each check their own result against one process's and fail otherwise.
#[test]
fn the_user_examples_run_and_check_themselves() {
    let cases: [(&str, &[&str], &str); 6] = [
        ("halo", &["4096", "300"], "shm"),
        ("halo", &["1000", "200"], "tcp"),
        ("reduce", &["1000000"], "shm"),
        ("reduce", &["100000"], "tcp"),
        ("model_bcast", &["8"], "shm"),
        ("model_bcast", &["2"], "tcp"),
    ];
    for (name, args, transport) in cases {
        let out = launcher()
            .args(["-n", "4", "--transport", transport])
            .arg(example(name))
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("{name}: 4 ranks")),
            "{name} over {transport}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn program_arguments_pass_through_untouched() {
    let out = launcher()
        .args([
            "-n",
            "3",
            "--tag-output",
            "sh",
            "-c",
            "echo \"$RDCOLL_RANK/$RDCOLL_SIZE $0 $1\"",
            "-n",
            "--transport",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    for r in 0..3 {
        assert!(
            stdout.contains(&format!("[{r}] {r}/3 -n --transport")),
            "{stdout}"
        );
    }
}

#[test]
fn every_line_of_output_is_forwarded() {
    let out = launcher()
        .args([
            "-n",
            "2",
            "--tag-output",
            "sh",
            "-c",
            "seq 1 20000; seq 1 500 >&2",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for r in 0..2 {
        let lines = |text: &str| {
            text.lines()
                .filter(|l| l.starts_with(&format!("[{r}] ")))
                .count()
        };
        assert_eq!(lines(&stdout), 20000, "rank {r} stdout");
        assert_eq!(lines(&stderr), 500, "rank {r} stderr");
        assert!(stdout.contains(&format!("[{r}] 20000\n")));
    }
}

#[test]
fn exit_status_of_the_failing_rank_is_returned() {
    let out = launcher()
        .args([
            "-n",
            "3",
            "sh",
            "-c",
            "[ $RDCOLL_RANK = 1 ] && exit 7; exit 0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rank 1 exited with status 7"));
}

#[test]
fn killing_one_rank_stops_the_job_and_names_the_rank() {
    let start = Instant::now();
    let out = launcher()
        .args([
            "-n",
            "4",
            "sh",
            "-c",
            "if [ $RDCOLL_RANK = 2 ]; then sleep 0.5; kill -9 $$; fi; sleep 60",
        ])
        .output()
        .unwrap();
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + 9), "{stderr}");
    assert!(stderr.contains("rank 2 was killed by signal 9"), "{stderr}");
    // Liveness, not speed: the other ranks sleep 60 s, so finishing at all means they were stopped.
    println!("rdcoll-run ended {took:?} after start (the victim died at 0.5 s)");
    assert!(
        took < Duration::from_secs(30),
        "the job was not stopped: {took:?}"
    );
}

#[test]
fn bad_usage_is_refused() {
    for args in [
        &["sh"][..],
        &["-n", "0", "true"],
        &["-n", "2", "--transport", "carrier-pigeon", "true"],
        &["-n", "2"],
    ] {
        let out = launcher().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn ctrl_c_stops_the_job() {
    let start = Instant::now();
    let child = launcher()
        .args(["-n", "3", "sh", "-c", "sleep 60"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signalling the launcher we just started.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGINT), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    // The ranks the launcher stopped did not fail on their own.
    assert!(!stderr.contains("was killed"), "{stderr}");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "the job was not stopped"
    );
}

/// Start-up mistakes that used to show only as the 60 s bootstrap timeout: a rank started
/// twice, a job size or a transport that differs from rank 0's. The rank that is wrong fails
/// at once, naming the cause. Ranks are started by hand around a store this test serves.
#[test]
fn start_up_mistakes_are_named_at_once() {
    use rdcoll::transport::bootstrap::{publish_job_identity, Store, StoreServer, TcpStore};
    // (rank 0's size and transport, the second process's rank, size and transport, the words
    // its error must hold)
    let cases = [
        ((2, "shm"), (0, 2, "shm"), "started twice"),
        ((2, "shm"), (1, 3, "shm"), "size/transport"),
        ((2, "shm"), (1, 2, "tcp"), "size/transport"),
    ];
    for ((size0, t0), (rank1, size1, t1), words) in cases {
        let server = StoreServer::start("127.0.0.1:0").unwrap();
        let addr = server.addr().to_string();
        let store = TcpStore::connect(&addr, Duration::from_secs(5)).unwrap();
        publish_job_identity(&store).unwrap();
        let start = |rank: usize, size: usize, transport: &str| {
            Command::new(example("ring"))
                .env("RDCOLL_RANK", rank.to_string())
                .env("RDCOLL_SIZE", size.to_string())
                .env("RDCOLL_TRANSPORT", transport)
                .env("RDCOLL_STORE", &addr)
                .env("RDCOLL_STORE_SERVER", "launcher")
                .env("RDCOLL_BOOTSTRAP_TIMEOUT_MS", "20000")
                .env_remove("RDCOLL_JOB_SECRET")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let mut first = start(0, size0, t0);
        // The first has joined before the second starts.
        store
            .wait_at_least("roll/0", 1, Duration::from_secs(20))
            .unwrap();
        let second = start(rank1, size1, t1);
        let out = second.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{words}: {stderr}");
        assert!(stderr.contains(words), "{words}: {stderr}");
        let _ = first.kill();
        let _ = first.wait();
        // Killed while it waited for its peer to map its shared memory: no launcher of
        // ours removes what it left (rdcoll-run does, `a_rank_killed_at_start_up...`).
        let job = store
            .get(
                rdcoll::transport::bootstrap::JOB_ID_KEY,
                Duration::from_secs(5),
            )
            .unwrap();
        remove_segments(&String::from_utf8_lossy(&job));
    }
}

/// Names in /dev/shm of job `job`'s shared-memory segments.
fn segments_of(job: &str) -> Vec<String> {
    let prefix = format!("rdcoll-{job}-");
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

fn remove_segments(job: &str) {
    for name in segments_of(job) {
        let _ = std::fs::remove_file(format!("/dev/shm/{name}"));
    }
}

/// A rank stopped by the launcher while it still waits for a peer that never came (it exited
/// at once) could not unlink its shared memory: the launcher removes the job's segments once
/// every rank has ended.
#[test]
fn a_rank_killed_at_start_up_leaves_no_shared_memory() {
    use rdcoll::transport::launch::{run_job, JobSpec};
    let ring = example("ring").display().to_string();
    let script = format!("[ $RDCOLL_RANK = 1 ] && exit 3; exec {ring}");
    let mut spec = JobSpec::new(2, vec!["sh".into(), "-c".into(), script.into()]);
    spec.transport = Some("shm".into());
    let report = run_job(&spec).unwrap();
    assert_eq!(report.exit_code(), 3);
    assert!(!report.job.is_empty());
    assert_eq!(segments_of(&report.job), Vec::<String>::new());
}

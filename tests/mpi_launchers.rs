//! Jobs started by MPI's own launchers with no rdcoll setting: MPICH's `mpiexec` (Hydra, PMI-1
//! over `PMI_FD`, and PMI-2 with `RDCOLL_PMI=2`), Open MPI's `mpirun` (PMIx) and Slurm's `srun` (`--mpi=pmi2`, and
//! `--mpi=pmix`; a one-node Slurm started by the test) on 2 and 4 ranks, over shm and tcp. The
//! test binary re-launches itself as the ranks. Skipped, saying so, where the launcher is not
//! installed.

mod slurm;

#[allow(dead_code)]
mod progress_cases;

use std::process::Command;

/// Set on the ranks: run the job's work instead of launching.
const RANK_VAR: &str = "RDCOLL_TEST_UNDER_MPI";

/// The ranks' work: point-to-point round a ring (eager and rendezvous), collectives, and a
/// posted receive that must progress through a barrier.
#[test]
fn rank_entry() {
    let Ok(mode) = std::env::var(RANK_VAR) else {
        return;
    };
    if mode != "work" {
        fail_on_rank_1(&mode);
    }
    let outcome = (|| -> Result<String, String> {
        let world = rdcoll::init().map_err(|e| format!("init: {e}"))?;
        let (me, n) = (world.rank(), world.size() as u32);
        for len in [8usize, 200_000] {
            let out = vec![me as u8; len];
            let mut got = vec![0u8; len];
            world
                .sendrecv(&out, (me + 1) % n, 1, &mut got, (me + n - 1) % n, 1)
                .map_err(|e| e.to_string())?;
            if got.iter().any(|&b| b != ((me + n - 1) % n) as u8) {
                return Err(format!("ring of {len} bytes: wrong data"));
            }
        }
        let mut sum = [0u64; 3];
        world
            .allreduce(&[me as u64; 3], &mut sum, rdcoll::Op::Sum)
            .map_err(|e| e.to_string())?;
        let want = (n as u64) * (n as u64 - 1) / 2;
        if sum != [want; 3] {
            return Err(format!("allreduce gave {sum:?}"));
        }
        progress_cases::posted_receive_completes_during(
            &world,
            progress_cases::WaitIn::Barrier,
            100_000,
        )?;
        Ok(format!("rank {me} of {n} over {}", world.backend()))
    })();
    match outcome {
        Ok(who) => {
            println!("{who}: ok");
            std::process::exit(0)
        }
        Err(why) => {
            eprintln!("{why}");
            std::process::exit(1)
        }
    }
}

/// Rank 1 ends the job (`abort`: `rdcoll::abort(7)`; `panic`: a panic; `early`: it returns
/// with status 0; `kill`: SIGKILL, as `kill -9` or the kernel's out-of-memory killer would,
/// with no chance to say goodbye) while the others wait in a barrier that can never complete.
fn fail_on_rank_1(mode: &str) -> ! {
    let world = rdcoll::init().expect("init");
    if world.rank() == 1 {
        match mode {
            "abort" => rdcoll::abort(7),
            "early" => {
                eprintln!("rank 1 leaves early");
                drop(world);
                std::process::exit(0)
            }
            "kill" => {
                eprintln!("rank 1 is killed");
                // SAFETY: raising a signal has no memory-safety precondition; SIGKILL ends
                // the process here.
                unsafe { libc::raise(libc::SIGKILL) };
                unreachable!("SIGKILL returned")
            }
            _ => panic!("rank 1 fails on purpose"),
        }
    }
    let r = world.barrier();
    eprintln!("rank {}: the barrier returned {r:?}", world.rank());
    std::process::exit(3)
}

fn installed(launcher: &str) -> bool {
    Command::new(launcher)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// This binary's `rank_entry` on `n` ranks under `launcher` with `args`, with no rdcoll
/// setting but the transport.
fn under(launcher: &str, args: &[&str], n: usize, transport: &str) -> Command {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(launcher);
    cmd.args(args)
        .arg(n.to_string())
        .arg(exe)
        .args(["rank_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(RANK_VAR, "work")
        .env("RDCOLL_TRANSPORT", transport)
        // Open MPI refuses root without these (CI runs as root).
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    // Nothing of rdcoll-run's: the launcher alone must be enough.
    for (k, _) in std::env::vars() {
        if k.starts_with("RDCOLL_") && k != "RDCOLL_OFFLOAD" && k != "RDCOLL_SHM_FAIL_PUSHES" {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Runs [`under`] and checks that every rank passed.
fn run_under(launcher: &str, args: &[&str], n: usize, transport: &str) {
    run_under_with(launcher, args, n, transport, &[]);
}

/// [`run_under`] with `env` set for the launcher.
fn run_under_with(launcher: &str, args: &[&str], n: usize, transport: &str, env: &[(&str, &str)]) {
    let mut cmd = under(launcher, args, n, transport);
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{launcher} -n {n} over {transport}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for r in 0..n {
        assert!(
            stdout.contains(&format!("rank {r} of {n} over {transport}: ok")),
            "{launcher} -n {n} over {transport}: {stdout}"
        );
    }
}

#[test]
fn mpiexec_of_mpich_needs_no_setting() {
    if !installed("mpiexec.mpich") {
        eprintln!("mpiexec.mpich is not installed: not checked");
        return;
    }
    for n in [2, 4] {
        for transport in ["shm", "tcp"] {
            run_under("mpiexec.mpich", &["-n"], n, transport);
        }
    }
}

/// Open MPI's `mpirun` is a PMIx launcher: rdcoll speaks PMIx only with the `pmix` feature
/// (`cargo test --features pmix`); without it, `init` must say so instead of timing out.
#[test]
fn mpirun_of_open_mpi_needs_no_setting() {
    if !installed("mpirun.openmpi") {
        eprintln!("mpirun.openmpi is not installed: not checked");
        return;
    }
    let args = ["--oversubscribe", "--mca", "btl", "self,tcp", "-np"];
    if cfg!(feature = "pmix") {
        for n in [2, 4] {
            for transport in ["shm", "tcp"] {
                run_under("mpirun.openmpi", &args, n, transport);
            }
        }
    } else {
        let out = under("mpirun.openmpi", &args, 2, "shm").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains("`pmix` feature"), "{stderr}");
    }
}

/// MPICH's `mpiexec` serves PMI-2 on the same socket: with `RDCOLL_PMI=2` rdcoll speaks it.
#[test]
fn mpiexec_of_mpich_over_pmi_2() {
    if !installed("mpiexec.mpich") {
        eprintln!("mpiexec.mpich is not installed: not checked");
        return;
    }
    let env = [("RDCOLL_PMI", "2")];
    for n in [2, 4] {
        run_under_with("mpiexec.mpich", &["-n"], n, "shm", &env);
    }
    run_under_with("mpiexec.mpich", &["-n"], 3, "tcp", &env);
    for mode in ["abort", "panic", "early", "kill"] {
        failing_rank_ends_the_job("mpiexec.mpich", &["-n"], mode, &env);
    }
}

/// A rank that calls `abort`, panics, leaves early or is killed ends the job under each launcher
/// (`rdcoll-run` too) with a non-zero status
/// (the others wait in a barrier that cannot complete); the time each took is printed.
#[test]
fn a_failing_rank_ends_the_job_under_each_launcher() {
    let mut launchers: Vec<(&str, Vec<&str>)> =
        vec![(env!("CARGO_BIN_EXE_rdcoll-run"), vec!["-n"])];
    if installed("mpiexec.mpich") {
        launchers.push(("mpiexec.mpich", vec!["-n"]));
    }
    if cfg!(feature = "pmix") && installed("mpirun.openmpi") {
        launchers.push(("mpirun.openmpi", vec!["--oversubscribe", "-np"]));
    }
    for (launcher, args) in launchers {
        for mode in ["abort", "panic", "early", "kill"] {
            failing_rank_ends_the_job(launcher, &args, mode, &[]);
        }
    }
}

/// Rank 1 of 3 calls `abort`, panics, leaves early or is killed (`mode`) under `launcher args` (with `env`)
/// while the others wait in a barrier: the job must end with a non-zero status that names it.
fn failing_rank_ends_the_job(launcher: &str, args: &[&str], mode: &str, env: &[(&str, &str)]) {
    let start = std::time::Instant::now();
    let mut child = under(launcher, args, 3, "shm")
        .env(RANK_VAR, mode)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A hang is a failure; its bound is generous (this is not a timing test).
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(120) {
            let _ = child.kill();
            panic!("{launcher}, rank 1 {mode}: the job did not end");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    eprintln!(
        "{launcher}, rank 1 {mode}: ended in {:?} with {status}",
        start.elapsed()
    );
    assert!(
        !status.success(),
        "{launcher}, rank 1 {mode}: {status}\n{stderr}"
    );
    let named = match mode {
        "abort" => "rank 1 called abort(7)",
        "early" => "rank 1 leaves early",
        "kill" => "rank 1 is killed",
        _ => "rank 1 fails on purpose",
    };
    assert!(
        stderr.contains(named),
        "{launcher}, rank 1 {mode}: {stderr}"
    );
    // srun exits with the highest status of its tasks: 137 where it killed a survivor (after
    // the abort cancelled the step) before that survivor exited on its own. Hydra's PMI-2
    // abort carries no exit code (the job ends with 255).
    let pmi2 = env.contains(&("RDCOLL_PMI", "2"));
    if mode == "abort" && launcher != "srun" && !pmi2 {
        assert_eq!(status.code(), Some(7), "{launcher}: {stderr}");
    }
    if launcher.ends_with("rdcoll-run") && mode != "early" {
        // The rank that failed first, not a survivor that saw it go.
        assert!(stderr.contains("rdcoll-run: rank 1 "), "{stderr}");
    }
    if launcher.ends_with("rdcoll-run") {
        // The survivors' last lines: they end on their own before the launcher stops them.
        for r in [0, 2] {
            assert!(
                stderr.contains(&format!("rank {r}: the barrier returned")),
                "{launcher}, rank 1 {mode}: rank {r}'s last line is missing:\n{stderr}"
            );
        }
    }
    if launcher.ends_with("rdcoll-run") && mode == "early" {
        // A survivor failed, and the launcher says rank 1 had left before.
        assert!(
            stderr.contains("after rank(s) 1 had already exited"),
            "{stderr}"
        );
    }
}

/// Slurm's `srun` with no rdcoll setting: over PMI-1 where Slurm's `pmi2` plug-in serves it
/// (`--mpi=pmi2`), and over PMIx (`--mpi=pmix`) with the `pmix` feature; 2 and 4 ranks over
/// shm and tcp, then a rank that aborts, panics or leaves early. The test starts a one-node
/// Slurm of its own (root, `auth/none`); skipped, saying so, without Slurm or root.
#[test]
fn srun_of_slurm_needs_no_setting() {
    let Some(slurm) = slurm::Slurm::start() else {
        return;
    };
    let env = [("SLURM_CONF", slurm.conf())];
    let mut plugins = vec!["--mpi=pmi2"];
    if cfg!(feature = "pmix") {
        plugins.push("--mpi=pmix");
    }
    for plugin in plugins {
        for n in [2, 4] {
            for transport in ["shm", "tcp"] {
                run_under_with("srun", &[plugin, "-n"], n, transport, &env);
            }
        }
        for mode in ["abort", "panic", "early", "kill"] {
            failing_rank_ends_the_job("srun", &[plugin, "-n"], mode, &env);
        }
    }
    // Slurm's pmi2 plug-in in its own protocol.
    let env = [("SLURM_CONF", slurm.conf()), ("RDCOLL_PMI", "2")];
    run_under_with("srun", &["--mpi=pmi2", "-n"], 3, "shm", &env);
    failing_rank_ends_the_job("srun", &["--mpi=pmi2", "-n"], "abort", &env);
}

//! Starting a job of processes on this host (the engine of `rdcoll-run`): serves the bootstrap
//! store, sets each rank's environment, forwards output (optionally prefixed with the rank),
//! and when a rank dies, stops the others and says which rank died and how.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::bootstrap::{publish_job_id, secret_hex, Secret, StoreServer, TcpStore, SECRET_VAR};
use crate::error::{Result, TransportError};

/// What to start.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Number of ranks.
    pub ranks: usize,
    /// The program and its arguments, passed through untouched.
    pub command: Vec<OsString>,
    /// `RDCOLL_TRANSPORT` for the ranks (`None`: leave the environment's).
    pub transport: Option<String>,
    /// Prefix each output line with `[rank]`.
    pub prefix_output: bool,
    /// Extra environment for every rank.
    pub env: Vec<(OsString, OsString)>,
    /// When a rank fails, stop the others (the default). Tests of failure handling turn it off
    /// to see what the survivors do.
    pub stop_on_failure: bool,
}

impl JobSpec {
    /// `ranks` copies of `command` with the defaults.
    pub fn new(ranks: usize, command: Vec<OsString>) -> Self {
        JobSpec {
            ranks,
            command,
            transport: None,
            prefix_output: false,
            env: Vec::new(),
            stop_on_failure: true,
        }
    }
}

/// How one rank ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankExit {
    /// The rank.
    pub rank: usize,
    /// Its process id (and process group).
    pub pid: u32,
    /// Its exit status.
    pub status: ExitStatus,
    /// Whether the launcher stopped it because another rank failed first.
    pub stopped_by_launcher: bool,
}

/// How the job ended.
#[derive(Debug, Clone)]
pub struct JobReport {
    /// Every rank's end, by rank.
    pub exits: Vec<RankExit>,
    /// The first rank that failed on its own (non-zero exit or a signal), if any.
    pub first_failure: Option<RankExit>,
    /// The signal that interrupted the launcher (Ctrl-C: SIGINT), if one did.
    pub interrupted: Option<i32>,
    /// The job's id (it names the job's shared-memory segments, removed once the job ended).
    pub job: String,
}

impl JobReport {
    /// The launcher's exit code: the first failed rank's code (128 + signal for a signal), else 0.
    pub fn exit_code(&self) -> i32 {
        if let Some(sig) = self.interrupted {
            return 128 + sig;
        }
        self.first_failure.map_or(0, |f| exit_code_of(f.status))
    }
}

/// The shell-style exit code of a status.
pub fn exit_code_of(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Says how a rank ended, for people: "exited with status 3", "was killed by signal 9 (SIGKILL)".
pub fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    let sig = status.signal().unwrap_or(0);
    // SAFETY: strsignal returns a pointer to a static or thread-local string, or null.
    let name = unsafe {
        let p = libc::strsignal(sig);
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    let core = if status.core_dumped() {
        ", core dumped"
    } else {
        ""
    };
    format!("was killed by signal {sig} ({name}{core})")
}

/// How long a rank gets between SIGTERM and SIGKILL when the job is being stopped.
const TERM_GRACE: Duration = Duration::from_millis(700);

/// How long the other ranks get, after the first failure, to end on their own (they see the
/// failed peer and report it, and their buffered output is flushed as they exit) before the
/// launcher stops them with SIGTERM, which would cut what they had not written yet. Ranks
/// that notice at once end within milliseconds (4 ranks over shm, a panic: the job ends in
/// 0.14 s), so the grace costs only a rank that does not call the library.
const LEAVE_GRACE: Duration = Duration::from_secs(1);

/// Copies a rank's output to the launcher's, a whole line per write (prefixed with `[rank]`
/// if `prefix`), so that lines of different ranks never interleave: a rank's unbuffered
/// stderr reaches the pipe in pieces (Rust's `eprintln!` writes each formatted argument on
/// its own), and ranks sharing the launcher's stderr mixed them within lines.
fn forward(
    rank: usize,
    stream: impl std::io::Read + Send + 'static,
    to_stderr: bool,
    prefix: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let reader = BufReader::new(stream);
        for line in reader.split(b'\n') {
            let Ok(line) = line else { return };
            let mut out = Vec::with_capacity(line.len() + 8);
            if prefix {
                out.extend_from_slice(format!("[{rank}] ").as_bytes());
            }
            out.extend_from_slice(&line);
            out.push(b'\n');
            let _ = if to_stderr {
                std::io::stderr().write_all(&out)
            } else {
                std::io::stdout().write_all(&out)
            };
        }
    })
}

/// How long, after the last rank ended, the launcher waits for their output to drain (a
/// descendant that escaped its group could hold the pipe open forever).
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// libfabric's rxm buffer size variable, and the value `rdcoll-run` gives it: an eager
/// message of [`crate::MAX_MESSAGE_SIZE`] plus headers.
pub const OFI_RXM_BUFFER_VAR: &str = "FI_OFI_RXM_BUFFER_SIZE";
const OFI_RXM_BUFFER_BYTES: &str = "66560";

fn spawn_rank(
    spec: &JobSpec,
    rank: usize,
    store_addr: &str,
    secret: &str,
    forwarders: &mut Vec<std::thread::JoinHandle<()>>,
) -> Result<Child> {
    let (program, args) = spec
        .command
        .split_first()
        .ok_or_else(|| TransportError::InvalidArgument("no program to run".into()))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("RDCOLL_RANK", rank.to_string())
        .env("RDCOLL_SIZE", spec.ranks.to_string())
        .env("RDCOLL_STORE", store_addr)
        .env("RDCOLL_STORE_SERVER", "launcher")
        .env(SECRET_VAR, secret)
        .envs(spec.env.iter().map(|(k, v)| (k, v)));
    if let Some(t) = &spec.transport {
        cmd.env("RDCOLL_TRANSPORT", t);
    }
    // libfabric's rxm (tcp, verbs) sends messages above its buffer size (16 KiB by default)
    // by its own rendezvous: room for rdcoll's largest eager message keeps them one copy each
    // way (ofi `bw` 16-32 KiB: 0.5 -> 1.2 GB/s here). Set before exec, as the ranks' libfabric
    // reads it at start-up; a value the user set wins.
    // libfabric loads the Omni-Path libraries (libpsm2, libpsm_infinipath) where they are
    // installed, even when another provider is used, and they catch fatal signals to write a
    // `*.btr` backtrace file into the working directory: a rank that aborts should just die.
    for (var, value) in [
        (OFI_RXM_BUFFER_VAR, OFI_RXM_BUFFER_BYTES),
        ("HFI_NO_BACKTRACE", "1"),
        ("IPATH_NO_BACKTRACE", "1"),
    ] {
        if std::env::var_os(var).is_none() && !spec.env.iter().any(|(k, _)| k == var) {
            cmd.env(var, value);
        }
    }
    // Standard error always goes through the launcher, a whole line per write: it is
    // unbuffered in the ranks, so lines written in pieces (Rust's `eprintln!` writes each
    // formatted argument on its own) mixed with other ranks' lines. Standard output keeps the
    // launcher's own (a terminal stays a terminal, C's stdio keeps its buffering) unless
    // lines are prefixed; Rust and C write a line of it in one piece when it is buffered.
    if spec.prefix_output {
        cmd.stdout(Stdio::piped());
    }
    cmd.stderr(Stdio::piped());
    // SAFETY: the closure only calls async-signal-safe prctl and setpgid between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            // If the launcher dies, take the rank with it.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            // Each rank leads a process group, so stopping it stops what it started too.
            libc::setpgid(0, 0);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| TransportError::io(format!("starting {}", program.to_string_lossy()), e))?;
    if let Some(o) = child.stdout.take() {
        forwarders.push(forward(rank, o, false, spec.prefix_output));
    }
    if let Some(e) = child.stderr.take() {
        forwarders.push(forward(rank, e, true, spec.prefix_output));
    }
    Ok(child)
}

/// Whether `child` has ended, without reaping it (so its pid stays reserved).
/// How long the launcher waits for a rank that reported failing to exit before it names
/// another (the first to exit) as the first failure.
const REPORT_GRACE: Duration = Duration::from_secs(2);

/// The first rank that reported failing of its own accord, if any did.
fn reported_first(store: &TcpStore, ranks: usize) -> Option<usize> {
    use crate::bootstrap::{Store, FAILED_KEY};
    let v = store.get(&format!("{FAILED_KEY}/1"), Duration::ZERO).ok()?;
    let r: usize = String::from_utf8_lossy(&v).parse().ok()?;
    (r < ranks).then_some(r)
}

/// How long the launcher waits, once a rank has failed, for ranks that exited at about the same
/// moment to show before it decides which failed first.
const SAME_MOMENT: Duration = Duration::from_millis(20);

/// For each child, when it exited (since the job started), set by a thread of its own that
/// waits for it without reaping it.
fn exit_watchers(children: &[Option<Child>]) -> Vec<Arc<OnceLock<Duration>>> {
    let start = Instant::now();
    children
        .iter()
        .map(|c| {
            let at = Arc::new(OnceLock::new());
            if let Some(c) = c {
                let (pid, at2) = (c.id(), at.clone());
                let _ = std::thread::Builder::new()
                    .name("rdcoll-run-watch".into())
                    .spawn(move || {
                        // `waitid` with WNOWAIT on our own child leaves it waitable for
                        // the main loop; `info` is a zeroed local.
                        // SAFETY: as just said.
                        let r = unsafe {
                            let mut info: libc::siginfo_t = std::mem::zeroed();
                            libc::waitid(
                                libc::P_PID,
                                pid as libc::id_t,
                                &mut info,
                                libc::WEXITED | libc::WNOWAIT,
                            )
                        };
                        if r == 0 {
                            let _ = at2.set(start.elapsed());
                        }
                    });
            }
            at
        })
        .collect()
}

fn has_exited(child: &Child) -> bool {
    // `waitid` on our own child with WNOWAIT leaves it waitable; `info` is zeroed first
    // so `si_pid` reads 0 when nothing changed.
    // SAFETY: as just said.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            child.id() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        // An error (ECHILD: already reaped) is treated as ended, so try_wait reports it.
        r != 0 || info.si_pid() != 0
    }
}

/// Signals a rank's whole process group (the rank and anything it started).
fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on the process group our unreaped child leads.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), sig);
    }
}

static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    INTERRUPTED.store(sig, Ordering::SeqCst);
}

/// Ranks run in their own process groups, so the terminal's Ctrl-C reaches only the launcher:
/// catch it (and SIGTERM, SIGHUP) and stop the job.
fn catch_interrupts() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
}

/// Runs the job to its end.
pub fn run_job(spec: &JobSpec) -> Result<JobReport> {
    if spec.ranks == 0 {
        return Err(TransportError::InvalidArgument(
            "a job needs at least one rank".into(),
        ));
    }
    catch_interrupts();
    // The job's secret goes to the ranks in their environment; the store answers only them.
    let secret: Secret = rand::random();
    let server = StoreServer::start_secured("127.0.0.1:0", secret)?;
    let addr = server.addr().to_string();
    let client = TcpStore::connect_secured(&addr, Duration::from_secs(5), &secret)?;
    let job = publish_job_id(&client)?;
    let secret = secret_hex(&secret);
    let mut children: Vec<Option<Child>> = Vec::with_capacity(spec.ranks);
    let mut forwarders = Vec::new();
    for rank in 0..spec.ranks {
        match spawn_rank(spec, rank, &addr, &secret, &mut forwarders) {
            Ok(c) => children.push(Some(c)),
            Err(e) => {
                for c in children.iter_mut().flatten() {
                    signal(c, libc::SIGKILL);
                    let _ = c.wait();
                }
                crate::shm::remove_job_segments(&job);
                return Err(e);
            }
        }
    }
    let mut exits: Vec<Option<RankExit>> = vec![None; spec.ranks];
    let mut first_failure: Option<RankExit> = None;
    let mut stopping: Option<Instant> = None;
    // When the others are to be stopped after a failure (`LEAVE_GRACE` after it).
    let mut stop_at: Option<Instant> = None;
    let mut interrupted: Option<i32> = None;
    // When each rank exited, as its own watcher saw it: the first failure is the one that
    // exited first, not the lowest rank found in a sweep (a survivor that reacts to a peer's
    // death within the same sweep is not the cause).
    let exit_times = exit_watchers(&children);
    // Failed ranks seen while no first failure is named yet, and since when.
    let mut failed_seen: Vec<usize> = Vec::new();
    let mut deciding_since: Option<Instant> = None;
    while exits.iter().any(Option::is_none) {
        let mut failed_now: Vec<usize> = Vec::new();
        for rank in 0..spec.ranks {
            let Some(child) = children[rank].as_mut() else {
                continue;
            };
            if !has_exited(child) {
                continue;
            }
            if first_failure.is_none() && failed_now.is_empty() && interrupted.is_none() {
                // Let ranks that exited at about the same time show, then order by time.
                std::thread::sleep(SAME_MOMENT);
            }
            // The rank is a zombie, so its pid (= its group's id) cannot be reused yet: stop
            // whatever it left running in its group, then reap it.
            signal(child, libc::SIGKILL);
            match child.try_wait() {
                Ok(Some(status)) => {
                    let e = RankExit {
                        rank,
                        pid: child.id(),
                        status,
                        stopped_by_launcher: stopping.is_some(),
                    };
                    if !status.success() {
                        failed_now.push(rank);
                    }
                    exits[rank] = Some(e);
                    children[rank] = None;
                }
                Ok(None) => {}
                Err(e) => {
                    // Ranks may still run (and map segments): their names stay.
                    return Err(TransportError::io(format!("waiting for rank {rank}"), e));
                }
            }
        }
        // Ranks ended by an interrupt are not failures of their own. The first failure is the
        // rank that reported failing (a panic, an abort: `bootstrap::report_failure`, before
        // its peers could see it go), else the first to exit.
        failed_seen.extend(failed_now);
        let mut first_now = None;
        if first_failure.is_none() && interrupted.is_none() && !failed_seen.is_empty() {
            let since = *deciding_since.get_or_insert_with(Instant::now);
            let by_time = || {
                failed_seen
                    .iter()
                    .copied()
                    .min_by_key(|&r| exit_times[r].get().copied().unwrap_or(Duration::MAX))
            };
            first_now = match reported_first(&client, spec.ranks) {
                Some(r) if failed_seen.contains(&r) => Some(r),
                // It reported and is still exiting (a panic's message, a test harness's
                // report): wait for it a little.
                Some(r) if exits[r].is_none() && since.elapsed() < REPORT_GRACE => None,
                _ => by_time(),
            };
        }
        if let (Some(rank), None, None) = (first_now, first_failure, interrupted) {
            let e = exits[rank].expect("a failed rank has exited");
            let e = RankExit {
                stopped_by_launcher: false,
                ..e
            };
            exits[rank] = Some(e);
            first_failure = Some(e);
            // Ranks that had already ended cleanly: one that left early (returned from main
            // while the others still needed it) is often why the rest failed.
            let ended: Vec<String> = (0..spec.ranks)
                .filter(|&r| r != rank && exits[r].is_some_and(|x| x.status.success()))
                .map(|r| r.to_string())
                .collect();
            let after = if ended.is_empty() {
                String::new()
            } else {
                format!(
                    " (after rank(s) {} had already exited with status 0)",
                    ended.join(", ")
                )
            };
            eprintln!("rdcoll-run: rank {rank} {}{after}", describe(e.status));
            if spec.stop_on_failure {
                stop_at = Some(Instant::now() + LEAVE_GRACE);
            }
        }
        if stop_at.is_some_and(|t| Instant::now() >= t) && stopping.is_none() {
            stopping = Some(Instant::now());
            for c in children.iter().flatten() {
                signal(c, libc::SIGTERM);
            }
        }
        let sig = INTERRUPTED.swap(0, Ordering::SeqCst);
        if sig != 0 && stopping.is_none() {
            eprintln!("rdcoll-run: interrupted (signal {sig}), stopping the job");
            stopping = Some(Instant::now());
            interrupted = Some(sig);
            for c in children.iter().flatten() {
                signal(c, libc::SIGTERM);
            }
        }
        if let Some(t) = stopping {
            if t.elapsed() >= TERM_GRACE {
                for c in children.iter().flatten() {
                    signal(c, libc::SIGKILL);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(server);
    // A rank killed before its peers mapped its shared memory left the segment's name.
    crate::shm::remove_job_segments(&job);
    let drain_until = Instant::now() + OUTPUT_DRAIN;
    for t in forwarders {
        while !t.is_finished() && Instant::now() < drain_until {
            std::thread::sleep(Duration::from_millis(5));
        }
        if t.is_finished() {
            let _ = t.join();
        }
    }
    let exits: Vec<RankExit> = exits.into_iter().flatten().collect();
    Ok(JobReport {
        exits,
        first_failure,
        interrupted,
        job,
    })
}

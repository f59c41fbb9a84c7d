//! `rdcoll-bench wan`: large broadcasts across emulated clusters whose wide-area links differ
//! and change during the run (paper 003's Table 2 scenarios, scaled to this machine), with
//! Robber, MOB, RDMC's hybrid and the binomial pipeline side by side. Each run is a fresh job
//! of `--clusters` x `--nodes` ranks (tcp, one network namespace per node, see [`netns`]),
//! rank 0 the root; its throughput (size / time from the root's start to the last rank's
//! completion) is printed beside the scenario's theoretical maximum. Needs root.
//!
//! `rdcoll-bench wan [--clusters 4] [--nodes 3] [--size 40M] [--fast 4M] [--slow 400K]
//!  [--switch-after 3] [--mayhem-every 1] [--scenarios fast,slow,fast-slow,slow-fast,mayhem,hetero]
//!  [--algorithms robber,mob,hybrid,binomial_pipeline] [--repeats 1] [--seed 1] [--verbose]`

mod netns;
mod rank;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use netns::Wan;
pub use rank::run as rank;
use rdcoll_bench::wan_scenario::{self as scenario, Caps, Scale, Scenario};

/// The ranks running now (their launchers' pids), for the signal thread.
static RANKS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// A run that has not ended after this long is stopped and reported as such.
const LIMIT: Duration = Duration::from_secs(600);

struct Options {
    scale: Scale,
    size: usize,
    scenarios: Vec<String>,
    algorithms: Vec<String>,
    repeats: usize,
    verbose: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        scale: Scale::default(),
        size: 40_000_000,
        scenarios: scenario::SCENARIOS.map(String::from).to_vec(),
        algorithms: scenario::ALGORITHMS.map(String::from).to_vec(),
        repeats: 1,
        verbose: false,
    };
    let mut it = args.iter();
    let size = |v: &str| {
        let (num, mul) = match v.chars().last() {
            Some('K' | 'k') => (&v[..v.len() - 1], 1_000),
            Some('M' | 'm') => (&v[..v.len() - 1], 1_000_000),
            _ => (v, 1),
        };
        num.parse::<u64>()
            .map(|n| n * mul)
            .map_err(|_| format!("{v:?} is not a size (decimal K and M)"))
    };
    let secs = |v: &str| {
        v.parse::<f64>()
            .ok()
            .filter(|s| *s > 0.0)
            .map(Duration::from_secs_f64)
            .ok_or(format!("{v:?} is not a number of seconds"))
    };
    while let Some(a) = it.next() {
        if a == "--verbose" {
            o.verbose = true;
            continue;
        }
        let v = it.next().ok_or(format!("{a} needs a value"))?.as_str();
        let count = || v.parse::<usize>().map_err(|_| format!("{a} {v:?}"));
        match a.as_str() {
            "--clusters" => o.scale.clusters = count()?,
            "--nodes" => o.scale.nodes = count()?,
            "--size" => o.size = size(v)? as usize,
            "--fast" => o.scale.fast = size(v)?,
            "--slow" => o.scale.slow = size(v)?,
            "--switch-after" => o.scale.switch_after = secs(v)?,
            "--mayhem-every" => o.scale.mayhem_every = secs(v)?,
            "--seed" => o.scale.seed = v.parse().map_err(|_| format!("--seed {v:?}"))?,
            "--repeats" => o.repeats = count()?.max(1),
            "--scenarios" => o.scenarios = v.split(',').map(String::from).collect(),
            "--algorithms" => o.algorithms = v.split(',').map(String::from).collect(),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if o.scale.clusters < 2 {
        return Err("--clusters must be at least 2".into());
    }
    for s in &o.scenarios {
        o.scale.scenario(s).ok_or(format!(
            "no scenario {s:?} (fast, slow, fast-slow, slow-fast, mayhem, hetero)"
        ))?;
    }
    Ok(o)
}

pub fn run(args: &[String]) -> i32 {
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rdcoll-bench wan: {e}");
            return 2;
        }
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("rdcoll-bench wan: the emulated WAN needs root (network namespaces, tc)");
        return 1;
    }
    // SIGINT / SIGTERM go to a thread that stops the ranks and removes the namespaces (a
    // process killed in the middle would leave them behind).
    // SAFETY: plain libc calls on a local signal set; the mask is set before any thread starts.
    let signals = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let wan = match Wan::new(o.scale.clusters, o.scale.nodes) {
        Ok(w) => std::sync::Arc::new(w),
        Err(e) => {
            eprintln!("rdcoll-bench wan: setting up the emulated WAN: {e}");
            return 1;
        }
    };
    {
        let wan = wan.clone();
        std::thread::spawn(move || {
            let mut sig = 0;
            // SAFETY: `signals` is an initialised set; `sig` is writable.
            unsafe { libc::sigwait(&signals, &mut sig) };
            for pid in RANKS.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
                // SAFETY: kill has no memory preconditions; the pids are our children.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
            wan.remove();
            std::process::exit(130);
        });
    }
    let s = &o.scale;
    println!(
        "# rdcoll-bench wan: {} clusters x {} nodes, {} MB from rank 0, links {} / {} MB/s, \
         switch after {:?}, mayhem every {:?}, seed {}",
        s.clusters,
        s.nodes,
        o.size as f64 / 1e6,
        s.fast as f64 / 1e6,
        s.slow as f64 / 1e6,
        s.switch_after,
        s.mayhem_every,
        s.seed
    );
    println!("# scenario | algorithm | run | MB/s | theoretical max MB/s | % of max");
    let mut failed = false;
    for name in &o.scenarios {
        let scenario = o.scale.scenario(name).expect("checked in parse");
        let max = scenario::max_throughput(&scenario, 0, o.size as f64);
        for alg in &o.algorithms {
            for r in 0..o.repeats {
                match one_run(&wan, &o, &scenario, alg) {
                    Ok(secs) => {
                        let mbs = o.size as f64 / secs;
                        println!(
                            "{} | {alg} | {r} | {:.2} | {:.2} | {:.0}",
                            scenario.name,
                            mbs / 1e6,
                            max / 1e6,
                            100.0 * mbs / max
                        );
                    }
                    Err(e) => {
                        failed = true;
                        println!("{} | {alg} | {r} | failed: {e}", scenario.name);
                    }
                }
            }
        }
    }
    // The signal thread holds the other reference for ever: no drop would remove them.
    wan.remove();
    i32::from(failed)
}

/// Sets `caps` on every link and node.
fn apply(wan: &Wan, caps: &Caps) -> Result<(), String> {
    for (from, row) in caps.links.iter().enumerate() {
        for (to, &rate) in row.iter().enumerate().filter(|&(to, _)| to != from) {
            wan.set_link(from, to, rate)?;
        }
    }
    for (c, row) in caps.nodes.iter().enumerate() {
        for (n, &rate) in row.iter().enumerate() {
            wan.set_node(c, n, rate)?;
        }
    }
    Ok(())
}

/// One job: the scenario's first caps, the ranks started, later caps applied at their moments
/// after the root starts. The seconds from the root's start to the last rank's completion.
fn one_run(wan: &Wan, o: &Options, scenario: &Scenario, alg: &str) -> Result<f64, String> {
    apply(wan, &scenario.steps[0].1)?;
    let dir: PathBuf =
        std::env::temp_dir().join(format!("rdcoll-wan-{}-{alg}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let (k, m) = (o.scale.clusters, o.scale.nodes);
    let port = 20_000 + std::process::id() % 20_000;
    let secret: String = format!("{:032x}", rand_u128());
    let mut children = Vec::new();
    for r in 0..k * m {
        let (c, n) = (r / m, r % m);
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &wan.node_ns(c, n)])
            .arg(&exe)
            .args(["wan-rank", &o.size.to_string()])
            .arg(&dir)
            .env("RDCOLL_RANK", r.to_string())
            .env("RDCOLL_SIZE", (k * m).to_string())
            // Every rank shares this machine's cores: waits must not spin.
            .env("RDCOLL_LOCAL_SIZE", (k * m).to_string())
            .env("RDCOLL_STORE", format!("{}:{port}", Wan::node_ip(0, 0)))
            .env("RDCOLL_JOB_SECRET", &secret)
            .env("RDCOLL_TRANSPORT", "tcp")
            .env("RDCOLL_CLUSTER", format!("c{c}"))
            .env("RDCOLL_BCAST_ALGORITHM", alg)
            // Heartbeats share the connections with the data: behind a few MB queued on a
            // 0.4 MB/s link they arrive seconds late, and 5 s (the default) would call a live
            // peer dead. A WAN deployment sets this alike.
            .env("RDCOLL_PEER_TIMEOUT_MS", "120000")
            .stdout(if r == 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let child = cmd.spawn().map_err(|e| format!("starting rank {r}: {e}"))?;
        RANKS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(child.id());
        children.push(child);
    }
    // Later caps, timed from the root's start.
    let done = AtomicBool::new(false);
    let schedule: Vec<(Duration, Caps)> = scenario.steps[1..].to_vec();
    let changer = {
        let start_file = dir.join("start");
        let done = &done;
        std::thread::scope(|scope| {
            let h = scope.spawn(move || -> Result<(), String> {
                while !start_file.exists() {
                    if done.load(Ordering::Acquire) {
                        return Ok(());
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                let t0 = Instant::now();
                for (at, caps) in &schedule {
                    while t0.elapsed() < *at {
                        if done.load(Ordering::Acquire) {
                            return Ok(());
                        }
                        std::thread::sleep(Duration::from_millis(5).min(*at - t0.elapsed()));
                    }
                    apply(wan, caps)?;
                }
                Ok(())
            });
            let waited = wait_all(&mut children);
            done.store(true, Ordering::Release);
            let changed = h.join().unwrap_or(Err("the cap changer panicked".into()));
            waited.and(changed)
        })
    };
    if o.verbose {
        print_finishes(&dir, k * m);
    }
    let result = changer.and_then(|()| {
        let mut out = String::new();
        use std::io::Read;
        if let Some(mut s) = children[0].stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        out.lines()
            .find_map(|l| l.strip_prefix("elapsed_ns="))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|ns| ns as f64 / 1e9)
            .ok_or_else(|| "rank 0 printed no time".to_string())
    });
    RANKS.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Each rank's completion, in seconds after the root's start (`--verbose`).
fn print_finishes(dir: &std::path::Path, ranks: usize) {
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let Some(start) = read("start") else {
        return;
    };
    let ends: Vec<String> = (0..ranks)
        .map(|r| {
            read(&format!("end.{r}")).map_or("?".into(), |e| {
                format!("{r}:{:.2}", e.saturating_sub(start) as f64 / 1e9)
            })
        })
        .collect();
    println!(
        "#   ranks done (s after the root's start): {}",
        ends.join(" ")
    );
}

/// Waits for every rank (stopping them all past [`LIMIT`]); an error if one failed.
fn wait_all(children: &mut [std::process::Child]) -> Result<(), String> {
    let start = Instant::now();
    let mut failed = None;
    for (r, child) in children.iter_mut().enumerate() {
        loop {
            match child.try_wait() {
                Ok(Some(st)) => {
                    if !st.success() && failed.is_none() {
                        failed = Some(format!("rank {r} exited with {st}"));
                    }
                    break;
                }
                Ok(None) if start.elapsed() > LIMIT => {
                    let _ = child.kill();
                    failed.get_or_insert(format!("rank {r} still running after {LIMIT:?}"));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => {
                    failed.get_or_insert(e.to_string());
                    break;
                }
            }
        }
    }
    failed.map_or(Ok(()), Err)
}

fn rand_u128() -> u128 {
    let mut b = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    u128::from_le_bytes(b)
}

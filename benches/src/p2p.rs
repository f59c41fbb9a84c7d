//! `rdcoll-bench latency|bw|bibw`: the OSU point-to-point benchmarks on rdcoll, in OSU's output
//! layout and with OSU's options (`-m [MIN:]MAX`, `-i`, `-x`, `-W`).
//!
//! - Under `rdcoll-run` (or `srun`, `mpirun`, `mpiexec`) each process is a rank.
//! - `--ranks 2 [--transport shm|tcp]` starts its own ranks.
//! - `--vs-mpi` runs the same benchmark on rdcoll and, built on the `mpi` crate
//!   (`scripts/build-mpi-bench`), under Open MPI's `mpirun` and MPICH's `mpiexec` (whichever
//!   are installed), one after the other, and prints the tables side by side with the ratio of
//!   rdcoll to the better MPI.
//! - `--vs-single-get` runs rdcoll twice, as configured and with a single-get rendezvous
//!   (one chunk as large as the message, one credit), and prints both with their ratio.

use std::path::PathBuf;
use std::process::Command;

use rdcoll::{Comm, Rank};
use rdcoll_bench::osu::{self, Kind, Messenger, Options, Row};
use rdcoll_transport::launch::{run_job, JobSpec};

struct RdcollMessenger(Comm);

fn s(e: rdcoll::Error) -> String {
    e.to_string()
}

impl Messenger for RdcollMessenger {
    fn rank(&self) -> u32 {
        self.0.rank()
    }
    fn send(&self, buf: &[u8], peer: u32, tag: u32) -> Result<(), String> {
        self.0.send(buf, peer, tag).map_err(s)
    }
    fn recv(&self, buf: &mut [u8], peer: u32, tag: u32) -> Result<(), String> {
        self.0.recv(buf, peer, tag).map(drop).map_err(s)
    }
    fn send_window(&self, buf: &[u8], window: usize, peer: Rank, tag: u32) -> Result<(), String> {
        self.0.scope(|sc| {
            let reqs = (0..window)
                .map(|_| sc.isend(buf, peer, tag))
                .collect::<Result<Vec<_>, _>>()
                .map_err(s)?;
            rdcoll::wait_all(reqs).map(drop).map_err(s)
        })
    }
    fn recv_window(&self, bufs: &mut [Vec<u8>], peer: u32, tag: u32) -> Result<(), String> {
        self.0.scope(|sc| {
            let reqs = bufs
                .iter_mut()
                .map(|b| sc.irecv(b, peer, tag))
                .collect::<Result<Vec<_>, _>>()
                .map_err(s)?;
            rdcoll::wait_all(reqs).map(drop).map_err(s)
        })
    }
    fn exchange_window(
        &self,
        buf: &[u8],
        bufs: &mut [Vec<u8>],
        peer: u32,
        tag: u32,
    ) -> Result<(), String> {
        self.0.scope(|sc| {
            let mut reqs = Vec::with_capacity(bufs.len() * 2);
            let n = bufs.len();
            for b in bufs.iter_mut() {
                reqs.push(sc.irecv(b, peer, tag).map_err(s)?);
            }
            for _ in 0..n {
                reqs.push(sc.isend(buf, peer, tag).map_err(s)?);
            }
            rdcoll::wait_all(reqs).map(drop).map_err(s)
        })
    }
    fn wtime(&self) -> f64 {
        self.0.wtime()
    }
}

struct Extra {
    ranks: Option<usize>,
    transport: Option<String>,
    vs_mpi: bool,
    vs_single_get: bool,
    /// Times each column is run, interleaved; each size reports the median.
    rounds: usize,
}

fn parse_extra(rest: &[String]) -> Result<Extra, String> {
    let mut e = Extra {
        ranks: None,
        transport: None,
        vs_mpi: false,
        vs_single_get: false,
        rounds: 3,
    };
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--ranks" => {
                let n = it.next().and_then(|v| v.parse().ok());
                e.ranks = Some(n.filter(|&n| n >= 2).ok_or("--ranks needs a number >= 2")?);
            }
            "--transport" => {
                e.transport = Some(it.next().ok_or("--transport needs a value")?.clone())
            }
            "--vs-mpi" => e.vs_mpi = true,
            "--vs-single-get" => e.vs_single_get = true,
            "--rounds" => {
                let n = it.next().and_then(|v| v.parse().ok());
                e.rounds = n
                    .filter(|&n| n >= 1)
                    .ok_or("--rounds needs a number >= 1")?;
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(e)
}

/// Runs `rdcoll-bench <kind> ...`; returns the exit code.
pub fn run(kind: Kind, args: &[String]) -> i32 {
    match run_inner(kind, args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("rdcoll-bench {}: {e}", kind.name());
            1
        }
    }
}

fn run_inner(kind: Kind, args: &[String]) -> Result<(), String> {
    let (opts, rest) = Options::parse(args)?;
    let extra = parse_extra(&rest)?;
    if extra.vs_mpi || extra.vs_single_get {
        return compare(kind, &opts, &extra);
    }
    if let Some(n) = extra.ranks {
        return launch(kind, &opts, n, extra.transport.as_deref(), &[]);
    }
    let world = rdcoll::init().map_err(s)?;
    let what = format!("rdcoll over {}", world.backend());
    let m = RdcollMessenger(world);
    let rows = osu::run(&m, kind, &opts)?;
    if m.rank() == 0 {
        print!("{}", osu::format_table(kind, &what, &rows));
    }
    Ok(())
}

/// Starts `n` ranks of this benchmark on this host.
fn launch(
    kind: Kind,
    opts: &Options,
    n: usize,
    transport: Option<&str>,
    env: &[(&str, &str)],
) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = vec![exe.into_os_string(), kind.name().into()];
    command.extend(opts.to_args().into_iter().map(Into::into));
    let mut spec = JobSpec::new(n, command);
    spec.transport = Some(transport.unwrap_or("shm").to_string());
    spec.env = env.iter().map(|(k, v)| (k.into(), v.into())).collect();
    let report = run_job(&spec).map_err(|e| e.to_string())?;
    match report.exits.iter().find(|e| !e.status.success()) {
        Some(e) => Err(format!(
            "rank {} {}",
            e.rank,
            rdcoll_transport::launch::describe(e.status)
        )),
        None => Ok(()),
    }
}

/// Runs `cmd` and returns the table it printed.
fn capture(mut cmd: Command) -> Result<Vec<Row>, String> {
    let out = cmd.output().map_err(|e| format!("starting {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(osu::parse_table(&String::from_utf8_lossy(&out.stdout)))
}

fn self_command(kind: Kind, opts: &Options, transport: Option<&str>) -> Result<Command, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut c = Command::new(exe);
    c.arg(kind.name())
        .args(opts.to_args())
        .args(["--ranks", "2"]);
    c.args(["--transport", transport.unwrap_or("shm")]);
    Ok(c)
}

/// Where `scripts/build-mpi-bench` put the benchmark built against `mpi` (`openmpi`, `mpich`).
fn mpi_binary(mpi: &str) -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("RDCOLL_BENCH_MPI_DIR") {
        let p = PathBuf::from(dir)
            .join(mpi)
            .join("release/rdcoll-bench-mpi");
        return p.exists().then_some(p);
    }
    let exe = std::env::current_exe().ok()?;
    let target = exe.parent()?.parent()?;
    let p = target
        .join("mpi")
        .join(mpi)
        .join("release/rdcoll-bench-mpi");
    p.exists().then_some(p)
}

fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn mpi_command(mpi: &str, kind: Kind, opts: &Options, ranks: usize) -> Option<Command> {
    let bin = mpi_binary(mpi)?;
    let mut c = match mpi {
        "openmpi" if installed("mpirun.openmpi") => {
            let mut c = Command::new("mpirun.openmpi");
            c.args(["-n", &ranks.to_string(), "--oversubscribe"])
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            c
        }
        "mpich" if installed("mpiexec.mpich") => {
            let mut c = Command::new("mpiexec.mpich");
            c.args(["-n", &ranks.to_string()]);
            c
        }
        _ => return None,
    };
    c.arg(bin).arg(kind.name()).args(opts.to_args());
    Some(c)
}

fn compare(kind: Kind, opts: &Options, extra: &Extra) -> Result<(), String> {
    let transport = extra.transport.as_deref();
    // Each column is a way to build its command; all are run once per round, interleaved,
    // so that a change of where the hypervisor puts the two vCPUs hits every column alike.
    type Build<'a> = Box<dyn Fn() -> Result<Command, String> + 'a>;
    let mut columns: Vec<(String, Build)> = Vec::new();
    columns.push((
        format!("rdcoll/{}", transport.unwrap_or("shm")),
        Box::new(move || self_command(kind, opts, transport)),
    ));
    if extra.vs_single_get {
        columns.push((
            "single-get".into(),
            Box::new(move || {
                let mut c = self_command(kind, opts, transport)?;
                // One chunk as large as any message the header can describe, one get in flight.
                c.env(
                    "RDCOLL_RNDV_CHUNK",
                    rdcoll_offload::p2p::MAX_RNDV_CHUNK.to_string(),
                );
                c.env("RDCOLL_RNDV_CREDITS", "1");
                Ok(c)
            }),
        ));
    }
    if extra.vs_mpi {
        let mut any = false;
        for (mpi, label) in [("openmpi", "Open MPI"), ("mpich", "MPICH")] {
            if mpi_command(mpi, kind, opts, 2).is_some() {
                columns.push((
                    label.into(),
                    Box::new(move || {
                        mpi_command(mpi, kind, opts, 2).ok_or(format!("{label} went away"))
                    }),
                ));
                any = true;
            } else {
                eprintln!("# {label}: not compared (install it and run scripts/build-mpi-bench)");
            }
        }
        if !any {
            return Err("no MPI to compare with: run scripts/build-mpi-bench first".into());
        }
    }
    let mut runs: Vec<Vec<Vec<Row>>> = vec![Vec::new(); columns.len()];
    for _ in 0..extra.rounds {
        for (i, (_, build)) in columns.iter().enumerate() {
            runs[i].push(capture(build()?)?);
        }
    }
    let merged: Vec<(String, Vec<Row>)> = columns
        .iter()
        .zip(&runs)
        .map(|((label, _), r)| (label.clone(), osu::median_rows(r)))
        .collect();
    print!("{}", side_by_side(kind, &merged, extra.rounds));
    Ok(())
}

/// The tables side by side; the last column is rdcoll's value over the best of the others.
fn side_by_side(kind: Kind, columns: &[(String, Vec<Row>)], rounds: usize) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
    let _ = writeln!(
        out,
        "# OSU MPI {} v6.1 layout, {}; same run, {rounds} interleaved rounds, median per size",
        kind.title(),
        names.join(" vs ")
    );
    let _ = write!(out, "{:<10}", "# Size");
    for n in &names {
        let _ = write!(out, "{:>18}", format!("{n} {}", short_unit(kind)));
    }
    let better = if kind.higher_is_better() {
        "higher"
    } else {
        "lower"
    };
    let _ = writeln!(out, "{:>26}", format!("rdcoll/best ({better} wins)"));
    for (i, &(size, ours)) in columns[0].1.iter().enumerate() {
        let _ = write!(out, "{size:<10}{ours:>18.2}");
        let mut best: Option<f64> = None;
        for (_, rows) in &columns[1..] {
            let v = rows.get(i).filter(|r| r.0 == size).map(|r| r.1);
            match v {
                Some(v) => {
                    let _ = write!(out, "{v:>18.2}");
                    best = Some(match best {
                        None => v,
                        Some(b) if kind.higher_is_better() => b.max(v),
                        Some(b) => b.min(v),
                    });
                }
                None => {
                    let _ = write!(out, "{:>18}", "-");
                }
            }
        }
        match best {
            Some(b) if b > 0.0 => {
                let _ = writeln!(out, "{:>26.2}", ours / b);
            }
            _ => {
                let _ = writeln!(out, "{:>26}", "-");
            }
        }
    }
    out
}

fn short_unit(kind: Kind) -> &'static str {
    if kind.higher_is_better() {
        "MB/s"
    } else {
        "us"
    }
}

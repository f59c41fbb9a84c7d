//! `rdcoll-bench bcast|allreduce|reduce|barrier`: osu_bcast, osu_allreduce, osu_reduce and
//! osu_barrier on rdcoll, in OSU's output layout
//! and with OSU's options (`-m [MIN:]MAX`, `-i`, `-x`).
//!
//! - Under `rdcoll-run` (or `srun`, `mpirun`, `mpiexec`) each process is a rank; `--ranks N
//!   [--transport shm|tcp]` starts its own.
//! - `--algorithm NAME` picks the broadcast (`counter`, `sequential`, `chain`,
//!   `binomial_tree`, `binomial_pipeline`, `hybrid`; default `auto`), as
//!   `RDCOLL_BCAST_ALGORITHM` does.
//! - `--large` measures 16-256 MiB (the RDMC range); `--rdmc` adds paper 001's metric
//!   (message size / time from the root's call until the last rank has it).
//! - `rdcoll-bench allreduce --calibrate --ranks 2` measures the allreduce model's parameters
//!   and writes them for the library (`RDCOLL_ALLREDUCE_MODEL`).
//! - `--vs-mpi` runs the same loops built on the `mpi` crate under Open MPI and MPICH in the
//!   same run (`--rounds N` interleaved rounds, median per size) and prints them side by side;
//!   `--vs-algorithms` does the same for every broadcast algorithm of rdcoll.

use std::process::Command;

use rdcoll::Comm;
use rdcoll_bench::coll::{self, CollKind, Collective};
use rdcoll_bench::osu::Options;
use rdcoll_transport::launch::JobSpec;

use crate::compare::{self, Column};

struct RdcollCollective(Comm);

fn s(e: rdcoll::Error) -> String {
    e.to_string()
}

impl Collective for RdcollCollective {
    fn rank(&self) -> u32 {
        self.0.rank()
    }
    fn size(&self) -> usize {
        self.0.size() as usize
    }
    fn bcast(&self, buf: &mut [u8], root: u32) -> Result<(), String> {
        self.0.bcast(buf, root).map_err(s)
    }
    fn barrier(&self) -> Result<(), String> {
        self.0.barrier().map_err(s)
    }
    fn allreduce_f32(&self, send: &[f32], recv: &mut [f32]) -> Result<(), String> {
        self.0.allreduce(send, recv, rdcoll::Op::Sum).map_err(s)
    }
    fn reduce_f32(&self, send: &[f32], recv: &mut [f32], root: u32) -> Result<(), String> {
        self.0.reduce(send, recv, rdcoll::Op::Sum, root).map_err(s)
    }
    fn note(&self, bytes: usize) -> Option<String> {
        let small = self.0.collectives_config().allreduce_small_max;
        if bytes > small {
            return Some("reduce-scatter + allgather".into());
        }
        let k = self.0.allreduce_degree(bytes).ok()?;
        Some(format!("degree-k tree, k = {k}"))
    }
    fn allgather(&self, send: &[u8], recv: &mut [u8]) -> Result<(), String> {
        self.0.allgather(send, recv).map_err(s)
    }
    fn allgatherv(&self, send: &[u8], recv: &mut [u8], counts: &[usize]) -> Result<(), String> {
        self.0.allgatherv(send, recv, counts).map_err(s)
    }
    fn gather(&self, send: &[u8], recv: &mut [u8], root: u32) -> Result<(), String> {
        let recv = if self.0.rank() == root { recv } else { &mut [] };
        self.0.gather(send, recv, root).map_err(s)
    }
    fn scatter(&self, send: &[u8], recv: &mut [u8], root: u32) -> Result<(), String> {
        self.0.scatter(send, recv, root).map_err(s)
    }
    fn alltoall(&self, send: &[u8], recv: &mut [u8]) -> Result<(), String> {
        self.0.alltoall(send, recv).map_err(s)
    }
    fn alltoallv(&self, send: &[u8], recv: &mut [u8], counts: &[usize]) -> Result<(), String> {
        self.0.alltoallv(send, counts, recv, counts).map_err(s)
    }
    fn reduce_scatter_f32(&self, send: &[f32], recv: &mut [f32]) -> Result<(), String> {
        self.0
            .reduce_scatter_block(send, recv, rdcoll::Op::Sum)
            .map_err(s)
    }
    fn scan_f32(&self, send: &[f32], recv: &mut [f32]) -> Result<(), String> {
        self.0.scan(send, recv, rdcoll::Op::Sum).map_err(s)
    }
    fn iallreduce_f32(
        &self,
        send: &[f32],
        recv: &mut [f32],
        during: &mut dyn FnMut(),
    ) -> Result<(), String> {
        self.0.scope(|sc| {
            let r = sc.iallreduce(send, recv, rdcoll::Op::Sum).map_err(s)?;
            during();
            r.wait().map_err(s)
        })
    }
    fn ibcast(&self, buf: &mut [u8], root: u32, during: &mut dyn FnMut()) -> Result<(), String> {
        self.0.scope(|sc| {
            let r = sc.ibcast(buf, root).map_err(s)?;
            during();
            r.wait().map_err(s)
        })
    }
    fn send(&self, buf: &[u8], peer: u32, tag: u32) -> Result<(), String> {
        self.0.send(buf, peer, tag).map_err(s)
    }
    fn recv(&self, buf: &mut [u8], peer: u32, tag: u32) -> Result<(), String> {
        self.0.recv(buf, peer, tag).map(drop).map_err(s)
    }
    fn wtime(&self) -> f64 {
        self.0.wtime()
    }
}

struct Extra {
    launch: compare::Launch,
    algorithm: Option<String>,
    large: bool,
    rdmc: bool,
    vs_algorithms: bool,
    calibrate: bool,
    /// Nonblocking collectives: the computation's length (else the pure collective's).
    compute_ms: Option<f64>,
}

fn parse_extra(rest: &[String]) -> Result<Extra, String> {
    let mut e = Extra {
        launch: compare::Launch::new(),
        algorithm: None,
        large: false,
        rdmc: false,
        vs_algorithms: false,
        calibrate: false,
        compute_ms: None,
    };
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        if e.launch.take(a, &mut it, 1)? {
            continue;
        }
        match a.as_str() {
            "--algorithm" => {
                let v = it.next().ok_or("--algorithm needs a value")?.clone();
                rdcoll::BcastAlgorithm::from_name(&v)
                    .ok_or(format!("unknown broadcast algorithm {v:?}"))?;
                e.algorithm = Some(v);
            }
            "--large" => e.large = true,
            "--rdmc" => e.rdmc = true,
            "--vs-algorithms" => e.vs_algorithms = true,
            "--calibrate" => e.calibrate = true,
            "--compute-ms" => {
                let v = it.next().ok_or("--compute-ms needs a value")?;
                e.compute_ms = Some(v.parse().map_err(|_| format!("bad --compute-ms {v:?}"))?);
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(e)
}

/// Runs `rdcoll-bench bcast|barrier ...`; returns the exit code.
pub fn run(kind: CollKind, args: &[String]) -> i32 {
    compare::exit_code(kind.name(), run_inner(kind, args))
}

fn run_inner(kind: CollKind, args: &[String]) -> Result<(), String> {
    let (mut opts, rest) = Options::parse(args)?;
    let extra = parse_extra(&rest)?;
    if !args.iter().any(|a| a == "-m" || a == "--message-size") {
        // osu_bcast walks 1 B .. 1 MiB; the issue asks for 4 MiB, and --large for 16-256 MiB;
        // osu_allreduce and osu_reduce 4 B .. 1 MiB.
        (opts.min, opts.max) = match (kind, extra.large) {
            (CollKind::Allreduce | CollKind::Reduce | CollKind::ReduceScatter, _) => (4, 1 << 20),
            (CollKind::Scan | CollKind::Iallreduce, _) => (4, 1 << 20),
            (CollKind::Ibcast, _) => (1, 1 << 20),
            (
                CollKind::Allgather
                | CollKind::Allgatherv
                | CollKind::Gather
                | CollKind::Scatter
                | CollKind::Alltoall
                | CollKind::Alltoallv,
                _,
            ) => (1, 1 << 20),
            (_, true) => (16 << 20, 256 << 20),
            (_, false) => (1, 4 << 20),
        };
    }
    if extra.launch.vs_mpi || extra.vs_algorithms {
        return compare(kind, &opts, &extra);
    }
    if let Some(n) = extra.launch.ranks {
        if let Some(cfg) = extra.launch.sim_job(n) {
            return simulated(kind, &opts, &extra, cfg);
        }
        return launch(kind, &opts, &extra, n);
    }
    let world = rdcoll::init().map_err(s)?;
    let what = format!(
        "rdcoll over {}, {} ranks, algorithm {}{}",
        world.backend(),
        world.size(),
        std::env::var("RDCOLL_BCAST_ALGORITHM").unwrap_or_else(|_| "auto".into()),
        match world.collectives_config().check_collectives {
            true => ", arguments checked",
            false => "",
        }
    );
    let c = RdcollCollective(world);
    if extra.calibrate {
        return calibrate(&c);
    }
    if kind.nonblocking() {
        let rows = rdcoll_bench::overlap::run(&c, kind, &opts, extra.compute_ms)?;
        if c.rank() == 0 {
            print!("{}", rdcoll_bench::overlap::format(kind, &what, &rows));
        }
        return Ok(());
    }
    let notes = coll::notes(&c, kind, &opts);
    let rows = coll::run(&c, kind, &opts, extra.rdmc)?;
    if c.rank() == 0 {
        print!("{}", coll::format(kind, &what, &rows, &notes, opts.full));
    }
    Ok(())
}

/// Runs the benchmark on a simulated job (`--transport sim`): the same loops, the network
/// and the clock modelled.
fn simulated(
    kind: CollKind,
    opts: &Options,
    extra: &Extra,
    cfg: rdcoll::sim::SimConfig,
) -> Result<(), String> {
    if kind.nonblocking() || extra.calibrate {
        return Err("--transport sim runs the blocking collectives".into());
    }
    let n = cfg.ranks;
    let mut coll_cfg = rdcoll::CollConfig::default();
    if let Some(a) = &extra.algorithm {
        coll_cfg.bcast_algorithm =
            rdcoll::BcastAlgorithm::from_name(a).ok_or(format!("unknown algorithm {a:?}"))?;
    }
    let out = rdcoll::sim::run(cfg, |world| -> Result<String, String> {
        let c = RdcollCollective(world.with_collectives_config(coll_cfg.clone()).map_err(s)?);
        let notes = coll::notes(&c, kind, opts);
        let rows = coll::run(&c, kind, opts, extra.rdmc)?;
        let what = format!("rdcoll over sim, {n} ranks");
        Ok(coll::format(kind, &what, &rows, &notes, opts.full))
    })
    .map_err(s)?;
    print!("{}", out.into_iter().next().expect("rank 0")?);
    Ok(())
}

/// The arguments that reproduce `opts` and the per-run parts of `extra`.
fn pass_on(kind: CollKind, opts: &Options, extra: &Extra) -> Vec<String> {
    let mut v = vec![kind.name().to_string()];
    v.extend(opts.to_args());
    if extra.rdmc {
        v.push("--rdmc".into());
    }
    if extra.calibrate {
        v.push("--calibrate".into());
    }
    if let Some(ms) = extra.compute_ms {
        v.extend(["--compute-ms".into(), ms.to_string()]);
    }
    v
}

/// Measures the allreduce model's parameters on this fabric between ranks 0 and 1 (the time
/// of a degree-1 reduce of 8 bytes and of 64 KiB, and of combining 64 KiB locally) and
/// writes them where the library looks for them.
fn calibrate(c: &RdcollCollective) -> Result<(), String> {
    use rdcoll::{CollConfig, Model, ReduceDegree};
    let cfg = CollConfig {
        allreduce_degree: ReduceDegree::Fixed(1),
        allreduce_small_max: 256 << 10,
        ..c.0.collectives_config().clone()
    };
    let comm = c.0.with_collectives_config(cfg).map_err(s)?;
    let time = |bytes: usize| -> Result<f64, String> {
        let send = vec![1f32; bytes / 4];
        let mut recv = vec![0f32; bytes / 4];
        let iters = if bytes > 4096 { 200 } else { 5000 };
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            comm.barrier().map_err(s)?;
            let t0 = comm.wtime();
            for _ in 0..iters {
                comm.reduce(&send, &mut recv, rdcoll::Op::Sum, 0)
                    .map_err(s)?;
            }
            best = best.min((comm.wtime() - t0) / iters as f64);
        }
        Ok(best * 1e9)
    };
    let (small, large) = (time(8)?, time(64 << 10)?);
    // Combining alone: 64 KiB of floats, this rank, many times.
    let mut acc = vec![1f32; 16 << 10];
    let other = vec![2f32; 16 << 10];
    let t0 = std::time::Instant::now();
    for _ in 0..2000 {
        for (a, b) in acc.iter_mut().zip(&other) {
            *a += *b;
        }
        std::hint::black_box(&mut acc);
    }
    let gamma = t0.elapsed().as_nanos() as f64 / 2000.0 / (64 << 10) as f64;
    let slope = ((large - small) / (64 << 10) as f64).max(0.0);
    let model = Model {
        per_message_ns: small,
        per_byte_ns: (slope - gamma).max(slope / 4.0),
        reduce_per_byte_ns: gamma,
    };
    if c.rank() == 0 {
        let path = Model::path()
            .ok_or("no place for the calibration (set HOME or RDCOLL_ALLREDUCE_MODEL)")?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::write(&path, model.to_text()).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("{}# written to {}", model.to_text(), path.display());
    }
    Ok(())
}

/// Starts `n` ranks of this benchmark on this host.
fn launch(kind: CollKind, opts: &Options, extra: &Extra, n: usize) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = vec![exe.into_os_string()];
    command.extend(pass_on(kind, opts, extra).into_iter().map(Into::into));
    let mut spec = JobSpec::new(n, command);
    spec.transport = Some(
        extra
            .launch
            .transport
            .clone()
            .unwrap_or_else(|| "shm".into()),
    );
    if let Some(a) = &extra.algorithm {
        spec.env
            .push(("RDCOLL_BCAST_ALGORITHM".into(), a.clone().into()));
    }
    compare::run_ranks(&spec)
}

fn self_command(
    kind: CollKind,
    opts: &Options,
    extra: &Extra,
    n: usize,
    algorithm: Option<&str>,
) -> Result<Command, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut c = Command::new(exe);
    c.args(pass_on(kind, opts, extra))
        .args(["--ranks", &n.to_string()])
        .args([
            "--transport",
            extra.launch.transport.as_deref().unwrap_or("shm"),
        ]);
    if let Some(a) = algorithm {
        c.args(["--algorithm", a]);
    }
    Ok(c)
}

fn compare(kind: CollKind, opts: &Options, extra: &Extra) -> Result<(), String> {
    let n = extra.launch.ranks.unwrap_or(4);
    let mut columns: Vec<Column> = Vec::new();
    if extra.vs_algorithms {
        let mut names = vec!["counter"];
        names.extend(rdcoll::BcastSchedule::ALL.iter().map(|a| a.name()));
        for name in names {
            columns.push(Column {
                label: name.into(),
                build: Box::new(move || self_command(kind, opts, extra, n, Some(name))),
            });
        }
    } else {
        columns.push(Column {
            label: format!(
                "rdcoll/{}",
                extra.launch.transport.as_deref().unwrap_or("shm")
            ),
            build: Box::new(move || self_command(kind, opts, extra, n, extra.algorithm.as_deref())),
        });
    }
    if extra.launch.vs_mpi {
        let path = compare::MpiPath::for_transport(extra.launch.transport.as_deref());
        columns.extend(compare::mpi_columns(pass_on(kind, opts, extra), n, path)?);
    }
    // With --rdmc the comparison is of paper 001's bandwidth (the second value column).
    let (value, unit, higher) = if extra.rdmc && kind == CollKind::Bcast {
        (1, "MB/s", true)
    } else if kind.nonblocking() {
        // The share of the collective hidden behind the computation.
        (3, "% overlap", true)
    } else {
        (0, "us", false)
    };
    if opts.first_call {
        return compare_first_calls(kind, &columns, n, extra.launch.rounds);
    }
    let (merged, remarks) = compare::run_columns(&columns, extra.launch.rounds, value)?;
    println!("# {n} ranks");
    for r in remarks {
        println!("# {} {r}", columns[0].label);
    }
    print!(
        "{}",
        compare::side_by_side(kind.title(), unit, higher, &merged, extra.launch.rounds)
    );
    Ok(())
}

/// `--first-call --vs-mpi`: each library's first call and steady state side by side, and its
/// first call over its own steady state.
fn compare_first_calls(
    kind: CollKind,
    columns: &[Column],
    n: usize,
    rounds: usize,
) -> Result<(), String> {
    let (mut merged, _) = compare::run_columns_at(columns, rounds, &[1, 0])?;
    let steady = merged.pop().unwrap_or_default();
    let first = merged.pop().unwrap_or_default();
    println!("# {n} ranks; each round a fresh job: its first call, then the steady state");
    let title = format!("{} first call", kind.title());
    print!(
        "{}",
        compare::side_by_side(&title, "us", false, &first, rounds)
    );
    let title = format!("{} steady state", kind.title());
    print!(
        "{}",
        compare::side_by_side(&title, "us", false, &steady, rounds)
    );
    println!("# first call / steady state");
    for ((label, f), (_, s)) in first.iter().zip(&steady) {
        let ratios: Vec<String> = f
            .iter()
            .zip(s)
            .map(|(a, b)| format!("{}: {:.2}", a.0, a.1 / b.1))
            .collect();
        println!("#   {label:<12} {}", ratios.join("  "));
    }
    Ok(())
}

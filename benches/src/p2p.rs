//! `rdcoll-bench latency|bw|bibw|sendrecv`: the OSU point-to-point benchmarks on rdcoll, in OSU's output
//! layout and with OSU's options (`-m [MIN:]MAX`, `-i`, `-x`, `-W`).
//!
//! - Under `rdcoll-run` (or `srun`, `mpirun`, `mpiexec`) each process is a rank.
//! - `--ranks 2 [--transport shm|tcp]` starts its own ranks.
//! - `--vs-mpi` runs the same benchmark on rdcoll and, built on the `mpi` crate
//!   (`scripts/build-mpi-bench`), under Open MPI's `mpirun` and MPICH's `mpiexec` (whichever
//!   are installed), one after the other, and prints the tables side by side with the ratio of
//!   rdcoll to the better MPI.
//! - `--vs-single-get` compares the configured rendezvous with a single-get one (one chunk as
//!   large as the message, one credit) in the same two rank processes, batch by batch
//!   (`paired`).

use std::process::Command;

use rdcoll::{Comm, Rank};
use rdcoll_bench::osu::{self, Kind, Messenger, Options};

use crate::compare::{self, Column};
use rdcoll_transport::launch::JobSpec;

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
    fn sendrecv(&self, buf: &[u8], into: &mut [u8], peer: u32, tag: u32) -> Result<(), String> {
        self.0
            .sendrecv(buf, peer, tag, into, peer, tag)
            .map(drop)
            .map_err(s)
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
    launch: compare::Launch,
    vs_single_get: bool,
}

fn parse_extra(rest: &[String]) -> Result<Extra, String> {
    let mut e = Extra {
        launch: compare::Launch::new(),
        vs_single_get: false,
    };
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        if e.launch.take(a, &mut it, 2)? {
            continue;
        }
        match a.as_str() {
            "--vs-single-get" => e.vs_single_get = true,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(e)
}

/// Runs `rdcoll-bench <kind> ...`; returns the exit code.
pub fn run(kind: Kind, args: &[String]) -> i32 {
    compare::exit_code(kind.name(), run_inner(kind, args))
}

fn run_inner(kind: Kind, args: &[String]) -> Result<(), String> {
    let (opts, rest) = Options::parse(args)?;
    let extra = parse_extra(&rest)?;
    if extra.vs_single_get {
        if extra.launch.vs_mpi {
            return Err("--vs-single-get and --vs-mpi are separate runs".into());
        }
        let rounds = extra.launch.rounds.to_string();
        let transport = extra.launch.transport.as_deref();
        return launch(
            kind,
            &opts,
            2,
            transport,
            &[(crate::paired::ROUNDS_VAR, &rounds)],
        );
    }
    if extra.launch.vs_mpi {
        return compare(kind, &opts, &extra);
    }
    if let Some(n) = extra.launch.ranks {
        if let Some(cfg) = extra.launch.sim_job(n) {
            return simulated(kind, &opts, cfg);
        }
        return launch(kind, &opts, n, extra.launch.transport.as_deref(), &[]);
    }
    let world = rdcoll::init().map_err(s)?;
    let what = format!("rdcoll over {}", world.backend());
    let m = RdcollMessenger(world);
    if let Ok(rounds) = std::env::var(crate::paired::ROUNDS_VAR) {
        let rounds = rounds
            .parse()
            .map_err(|_| format!("bad {rounds:?} rounds"))?;
        return crate::paired::run(&m.0, &m, kind, &opts, rounds);
    }
    let rows = osu::run(&m, kind, &opts)?;
    if m.rank() == 0 {
        print!("{}", osu::format_table(kind, &what, &rows));
    }
    Ok(())
}

/// Runs the benchmark on a simulated job (`--transport sim`): the same loops, the network
/// and the clock modelled.
fn simulated(kind: Kind, opts: &Options, cfg: rdcoll::sim::SimConfig) -> Result<(), String> {
    let rows = rdcoll::sim::run(cfg, |comm| osu::run(&RdcollMessenger(comm), kind, opts))
        .map_err(s)?
        .into_iter()
        .next()
        .expect("rank 0")?;
    print!("{}", osu::format_table(kind, "rdcoll over sim", &rows));
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
    compare::run_ranks(&spec)
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

fn compare(kind: Kind, opts: &Options, extra: &Extra) -> Result<(), String> {
    let transport = extra.launch.transport.as_deref();
    let mut columns = vec![Column {
        label: format!("rdcoll/{}", transport.unwrap_or("shm")),
        build: Box::new(move || self_command(kind, opts, transport)),
    }];
    if extra.launch.vs_mpi {
        let mut args = vec![kind.name().to_string()];
        args.extend(opts.to_args());
        columns.extend(compare::mpi_columns(
            args,
            2,
            compare::MpiPath::for_transport(transport),
        )?);
    }
    let (merged, _) = compare::run_columns(&columns, extra.launch.rounds, 0)?;
    let unit = if kind.higher_is_better() {
        "MB/s"
    } else {
        "us"
    };
    print!(
        "{}",
        compare::side_by_side(
            kind.title(),
            unit,
            kind.higher_is_better(),
            &merged,
            extra.launch.rounds
        )
    );
    Ok(())
}

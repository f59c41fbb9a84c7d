//! `rdcoll-bench match --through-comm`: matching at depth through the product's receive path
//! (`Comm::recv`, `Scope::irecv`), two rank processes over shm (or `--transport tcp`), with
//! `--vs-mpi` the same pattern on Open MPI and MPICH (`rdcoll-bench-mpi match-depth`) side by
//! side. The pattern is `rdcoll_bench::depth`'s.
//!
//! Options: `--case unexpected|posted` and `--any` (every other receive ANY_SOURCE) pick one
//! table (all four without them); `--max-depth N` leaves out deeper queues (the MPIs' linear
//! queues take minutes at 100,000); `--rounds N`, `--transport`, `--vs-mpi` as elsewhere.

use std::process::Command;

use rdcoll::{Comm, Source};
use rdcoll_bench::depth::{self, DepthCase, DepthComm};
use rdcoll_transport::launch::JobSpec;

use crate::compare::{self, Column, Launch};

/// Environment variable marking a rank process of this benchmark: `case,max_depth[,any]`.
const RANK_VAR: &str = "RDCOLL_BENCH_MATCH_DEPTH";

struct Through(Comm);

impl DepthComm for Through {
    fn rank(&self) -> u32 {
        self.0.rank()
    }
    fn send(&self, buf: &[u8], peer: u32, tag: u32) -> Result<(), String> {
        self.0.send(buf, peer, tag).map_err(|e| e.to_string())
    }
    fn recv(&self, buf: &mut [u8], from: Option<u32>, tag: u32) -> Result<(), String> {
        let source = from.map_or(Source::Any, Source::Rank);
        self.0
            .recv(buf, source, tag)
            .map(drop)
            .map_err(|e| e.to_string())
    }
    fn recv_all(
        &self,
        bufs: &mut [[u8; 8]],
        specs: &[(Option<u32>, u32)],
        between: &mut dyn FnMut() -> Result<(), String>,
    ) -> Result<(), String> {
        self.0.scope(|s| {
            let mut reqs = Vec::with_capacity(specs.len());
            for (buf, &(from, tag)) in bufs.iter_mut().zip(specs) {
                let source = from.map_or(Source::Any, Source::Rank);
                reqs.push(
                    s.irecv(&mut buf[..], source, tag)
                        .map_err(|e| e.to_string())?,
                );
            }
            between()?;
            rdcoll::wait_all(reqs).map(drop).map_err(|e| e.to_string())
        })
    }
    fn wtime(&self) -> f64 {
        self.0.wtime()
    }
}

/// Whether `rdcoll-bench match ARGS` is this benchmark (or one of its rank processes).
pub fn wanted(args: &[String]) -> bool {
    args.iter().any(|a| a == "--through-comm") || std::env::var_os(RANK_VAR).is_some()
}

/// Runs the benchmark; the exit code.
pub fn run(args: &[String]) -> i32 {
    compare::exit_code("match --through-comm", run_inner(args))
}

fn run_inner(args: &[String]) -> Result<(), String> {
    if let Ok(mode) = std::env::var(RANK_VAR) {
        return rank_main(&mode);
    }
    if let [flag, job_flag, mode, transport] = args {
        if flag == "--through-comm" && job_flag == "--job" {
            return job(mode, transport);
        }
    }
    let mut launch = Launch::new();
    let (mut case, mut any, mut max_depth) = (None, None, usize::MAX);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--through-comm" => {}
            "--case" => {
                let v = it.next().ok_or("--case needs unexpected or posted")?;
                case = Some(DepthCase::from_name(v).ok_or(format!("unknown case {v}"))?);
            }
            "--any" => any = Some(true),
            "--max-depth" => {
                let v = it.next().and_then(|v| v.parse().ok());
                max_depth = v.ok_or("--max-depth needs a number")?;
            }
            other => {
                if !launch.take(other, &mut it, 2)? {
                    return Err(format!("unknown option {other}"));
                }
            }
        }
    }
    let cases = case.map_or(vec![DepthCase::Unexpected, DepthCase::Posted], |c| vec![c]);
    let mixes = any.map_or(vec![false, true], |a| vec![a]);
    for &case in &cases {
        for &any in &mixes {
            table(&launch, case, any, max_depth)?;
        }
    }
    Ok(())
}

/// One table: rdcoll (and the MPIs) for `case` and `any`.
fn table(launch: &Launch, case: DepthCase, any: bool, max_depth: usize) -> Result<(), String> {
    let transport = launch.transport.clone().unwrap_or_else(|| "shm".into());
    let mode = format!(
        "{},{max_depth}{}",
        case.name(),
        if any { ",any" } else { "" }
    );
    let t = transport.clone();
    let m = mode.clone();
    let mut columns = vec![Column {
        label: format!("rdcoll/{transport}"),
        build: Box::new(move || self_command(&m, &t)),
    }];
    if launch.vs_mpi {
        let mut args = vec!["match-depth".to_string(), case.name().to_string()];
        if any {
            args.push("--any".into());
        }
        args.extend(["--max-depth".to_string(), max_depth.to_string()]);
        columns.extend(compare::mpi_columns(
            args,
            2,
            compare::MpiPath::for_transport(Some(transport.as_str())),
        )?);
    }
    let (merged, _) = compare::run_columns(&columns, launch.rounds, 0)?;
    let title = format!(
        "match depth ({}, {})",
        case.name(),
        if any { "50% any-src" } else { "exact" }
    );
    print!(
        "{}",
        compare::side_by_side(&title, "ns", false, &merged, launch.rounds)
    );
    Ok(())
}

/// This benchmark as a two-rank job printing one table (rank 1 prints).
fn self_command(mode: &str, transport: &str) -> Result<Command, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut c = Command::new(exe);
    c.args(["match", "--through-comm", "--job", mode, transport]);
    Ok(c)
}

/// `--job MODE TRANSPORT`: starts the two ranks.
fn job(mode: &str, transport: &str) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut spec = JobSpec::new(2, vec![exe.into_os_string(), "match".into()]);
    spec.transport = Some(transport.to_string());
    spec.env = vec![(RANK_VAR.into(), mode.into())];
    compare::run_ranks(&spec)
}

fn rank_main(mode: &str) -> Result<(), String> {
    // `case,max_depth[,any]`.
    let mut parts = mode.split(',');
    let bad = || format!("bad {RANK_VAR}={mode}");
    let case = parts
        .next()
        .and_then(DepthCase::from_name)
        .ok_or_else(bad)?;
    let max_depth = parts.next().and_then(|d| d.parse().ok()).ok_or_else(bad)?;
    let any = parts.next() == Some("any");
    let world = rdcoll::init().map_err(|e| e.to_string())?;
    if world.size() != 2 {
        return Err("the depth pattern runs on exactly 2 ranks".into());
    }
    let what = format!("rdcoll over {}", world.backend());
    let c = Through(world);
    let rows = depth::run(&c, case, any, max_depth)?;
    if c.rank() == 1 {
        print!("{}", depth::format(&what, case, any, &rows));
    }
    Ok(())
}

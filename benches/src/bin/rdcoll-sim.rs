//! `rdcoll-sim`: runs an experiment of the simulated fabric and writes its figure (CSV and
//! SVG) under a directory.
//!
//! ```text
//! rdcoll-sim rdmc  [--out DIR] [--ranks 4,8,...,512] [--bytes 256M] [--block 1M]
//! rdcoll-sim scale [--out DIR] [--ranks 16,64,256,1024]
//! rdcoll-sim my-network.scenario [--out DIR]   # see `rdcoll_bench::sim::scenario`
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use rdcoll_bench::sim::scenario::{self, size};
use rdcoll_bench::sim::{rdmc, rendezvous, robber, scale, validate};

const USAGE: &str =
    "usage: rdcoll-sim EXPERIMENT|SCENARIO_FILE [--out DIR] [--ranks N,N,...] [--bytes SIZE] [--block SIZE]
a scenario file (lines of `key = value`: ranks, topology, network, link_bandwidth,
  hop_latency_us, overhead_us, slow_receivers, payload_free_above, operations, repeat)
  times its operations at each job size; docs/results/sim/example.scenario shows them all.
experiments:
  rdmc   sequential, chain, binomial tree and binomial pipeline broadcasts (papers 000, 001)
  scale  broadcast and allreduce on up to 1,024 ranks, byte-accurate
  robber Robber, MOB, RDMC hybrid and binomial pipeline across 4 clusters of 16 (paper 003)
         [--scenarios fast,slow,fast-slow,slow-fast,mayhem,hetero] [--algorithms robber,...]
  rendezvous  push against receiver-driven gets, slow receivers, on a Dragonfly (paper 002)
         [--dragonfly P,A,H] [--bytes SIZE] [--block CHUNK] [--credits 1,2,4,...]
         [--network packets|flows] [--routing valiant|adaptive|minimal] [--slowdowns 1,2,4,8]
  validate  the OSU loops over tcp here and over the model fitted to them, side by side
         [--ranks N] [--bytes MAX]";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdcoll-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `a,b,c`, each parsed and kept by `ok`; `None` if any is not.
fn list<T: std::str::FromStr>(text: &str, ok: impl Fn(&T) -> bool) -> Option<Vec<T>> {
    text.split(',')
        .map(|x| x.trim().parse::<T>().ok().filter(&ok))
        .collect()
}

fn run(args: Vec<String>) -> Result<(), String> {
    let mut it = args.into_iter();
    let experiment = it.next().ok_or(USAGE)?;
    let mut out = PathBuf::from("sim-results");
    let mut ranks: Option<Vec<usize>> = None;
    let (mut bytes, mut block) = (None, None);
    let mut dragonfly = None;
    let (mut credits, mut slowdowns, mut network, mut routing) = (None, None, None, None);
    let (mut scenarios, mut algorithms): (Option<Vec<String>>, Option<Vec<String>>) = (None, None);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--out" => out = PathBuf::from(value()?),
            "--ranks" => {
                let list = list(&value()?, |n: &usize| *n >= 2)
                    .ok_or("--ranks takes a list of job sizes of 2 or more")?;
                ranks = Some(list);
            }
            "--bytes" => bytes = Some(size(&value()?)?),
            "--block" => block = Some(size(&value()?)?),
            "--dragonfly" => {
                let v: Vec<usize> = list(&value()?, |x: &usize| *x > 0)
                    .filter(|v| v.len() == 3)
                    .ok_or("--dragonfly takes P,A,H: ranks per router, routers per group, global links per router")?;
                dragonfly = Some((v[0], v[1], v[2]));
            }
            "--credits" => {
                let list = list(&value()?, |c: &usize| *c > 0)
                    .ok_or("--credits takes a list of positive counts")?;
                credits = Some(list);
            }
            "--slowdowns" => {
                let list = list(&value()?, |x: &f64| *x >= 1.0)
                    .ok_or("--slowdowns takes a list of factors of 1 or more")?;
                slowdowns = Some(list);
            }
            "--network" => {
                network = Some(match value()?.as_str() {
                    "flows" => rdcoll::sim::NetworkModel::Flows,
                    "packets" => rendezvous::Rendezvous::default().network,
                    other => {
                        return Err(format!("--network takes packets or flows, not {other:?}"))
                    }
                });
            }
            "--routing" => {
                use rdcoll::sim::DragonflyRouting as R;
                routing = Some(match value()?.as_str() {
                    "adaptive" => R::Adaptive,
                    "valiant" => R::Valiant,
                    "minimal" => R::Minimal,
                    other => {
                        return Err(format!(
                            "--routing takes adaptive, valiant or minimal, not {other:?}"
                        ))
                    }
                });
            }
            "--scenarios" => scenarios = Some(value()?.split(',').map(String::from).collect()),
            "--algorithms" => algorithms = Some(value()?.split(',').map(String::from).collect()),
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
    }
    let mut say = |line: &str| eprintln!("{line}");
    let figure = match experiment.as_str() {
        "rdmc" => {
            let mut e = rdmc::Rdmc::default();
            e.ranks = ranks.unwrap_or(e.ranks);
            e.bytes = bytes.unwrap_or(e.bytes);
            e.block = block.unwrap_or(e.block);
            rdmc::run(&e, &mut say)?
        }
        "scale" => {
            let mut e = scale::Scale::default();
            e.ranks = ranks.unwrap_or(e.ranks);
            e.bcast_bytes = bytes.unwrap_or(e.bcast_bytes);
            scale::run(&e, &mut say)?
        }
        "robber" => {
            let mut e = robber::Robber::default();
            e.bytes = bytes.unwrap_or(e.bytes);
            e.scenarios = scenarios.unwrap_or(e.scenarios);
            e.algorithms = algorithms.unwrap_or(e.algorithms);
            robber::run(&e, &mut say)?
        }
        "rendezvous" => {
            let mut e = rendezvous::Rendezvous::default();
            e.shape = dragonfly.unwrap_or(e.shape);
            e.bytes = bytes.unwrap_or(e.bytes);
            e.chunk = block.unwrap_or(e.chunk);
            e.credits = credits.unwrap_or(e.credits);
            e.slowdowns = slowdowns.unwrap_or(e.slowdowns);
            e.network = network.unwrap_or(e.network);
            e.routing = routing.unwrap_or(e.routing);
            rendezvous::run(&e, &mut say)?
        }
        "validate" => {
            let mut e = validate::Validate::default();
            e.ranks = ranks.and_then(|r| r.first().copied()).unwrap_or(e.ranks);
            e.max = bytes.unwrap_or(e.max);
            validate::run(&e, &mut say)?
        }
        file if std::path::Path::new(file).is_file() => {
            scenario::run(&scenario::load(std::path::Path::new(file))?, &mut say)?
        }
        other => return Err(format!("no experiment or scenario file {other:?}\n{USAGE}")),
    };
    figure.write(&out)?;
    print!("{}", figure.csv());
    eprintln!("wrote {}/{}.csv and .svg", out.display(), figure.name);
    Ok(())
}

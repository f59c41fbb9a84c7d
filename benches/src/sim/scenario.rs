//! Scenario files: a network and a list of operations, each timed at the job sizes given, for
//! what-if questions no named experiment asks. Lines of `key = value`; `#` starts a comment.
//!
//! ```text
//! name = my-cluster                  # the figure's file name (default: the file's stem)
//! ranks = 16, 64, 256                # job sizes, the x axis
//! topology = dragonfly 4,8,4 adaptive  # or: switch | fattree LEAF_RANKS OVERSUBSCRIPTION
//!                                    #     | clusters RANKS WAN_MB/s WAN_LATENCY_MS
//! network = packets 4096 65536       # or: flows (the default)
//! link_bandwidth = 12500             # MB/s of every link (default 100 Gb/s)
//! hop_latency_us = 0.5
//! overhead_us = 0.2
//! slow_receivers = 0.01 8            # fraction of ranks, times slower than their link
//! payload_free_above = 4096          # puts and gets above this move no bytes
//! operations = barrier, bcast 1M, allreduce 1024, allgather 64K, alltoall 4K, pairs 1M
//! repeat = 3                         # each operation's last call is timed
//! ```
//!
//! `allreduce N` sums N doubles; `allgather` and `alltoall` take each rank's block size;
//! `pairs` is paper 002's pattern (random pairs exchange that many bytes). Broadcasts and
//! allreduces are checked on every rank unless payload-free.

use std::path::Path;
use std::time::Duration;

use rdcoll::sim::{self, DragonflyRouting, NetworkModel, SimConfig, Topology};
use rdcoll::{Comm, Op, Source};

use super::{Figure, Series};

/// One operation of a scenario.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Operation {
    /// `Comm::barrier`.
    Barrier,
    /// `Comm::bcast` of that many bytes from rank 0.
    Bcast(usize),
    /// `Comm::allreduce` of that many doubles.
    Allreduce(usize),
    /// `Comm::allgather` of that many bytes per rank.
    Allgather(usize),
    /// `Comm::alltoall` of that many bytes per pair.
    Alltoall(usize),
    /// Random pairs exchanging that many bytes with `Comm::sendrecv`.
    Pairs(usize),
}

impl Operation {
    fn label(&self) -> String {
        let kib = |b: &usize| {
            if b.is_multiple_of(1024) {
                format!("{} KiB", b >> 10)
            } else {
                format!("{b} B")
            }
        };
        match self {
            Operation::Barrier => "barrier".into(),
            Operation::Bcast(b) => format!("bcast {}", kib(b)),
            Operation::Allreduce(n) => format!("allreduce {n} f64"),
            Operation::Allgather(b) => format!("allgather {}", kib(b)),
            Operation::Alltoall(b) => format!("alltoall {}", kib(b)),
            Operation::Pairs(b) => format!("pairs {}", kib(b)),
        }
    }
}

/// A parsed scenario file.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The figure's name.
    pub name: String,
    /// Job sizes.
    pub ranks: Vec<usize>,
    /// The network (its `ranks` replaced by each job size).
    pub network: SimConfig,
    /// Fraction of ranks draining slower than their link, and how many times slower.
    pub slow: Option<(f64, f64)>,
    /// What each job runs, in order.
    pub operations: Vec<Operation>,
    /// Calls of each operation; the last is timed.
    pub repeat: usize,
}

/// Reads and parses a scenario file.
pub fn load(path: &Path) -> Result<Scenario, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "scenario".into());
    parse(&text, &stem).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses a scenario's text; `name` unless it names itself.
pub fn parse(text: &str, name: &str) -> Result<Scenario, String> {
    let mut s = Scenario {
        name: name.into(),
        ranks: Vec::new(),
        network: SimConfig::switch(2),
        slow: None,
        operations: Vec::new(),
        repeat: 3,
    };
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |e: String| format!("line {}: {e}", i + 1);
        let (key, value) = line
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .ok_or_else(|| at(format!("{line:?} is not `key = value`")))?;
        set(&mut s, key, value).map_err(at)?;
    }
    if s.ranks.is_empty() || s.operations.is_empty() {
        return Err("a scenario needs `ranks` and `operations`".into());
    }
    for &n in &s.ranks {
        SimConfig {
            ranks: n,
            ..s.network.clone()
        }
        .validate()
        .map_err(|e| format!("{n} ranks: {e}"))?;
    }
    Ok(s)
}

fn set(s: &mut Scenario, key: &str, value: &str) -> Result<(), String> {
    let words: Vec<&str> = value.split_whitespace().collect();
    let number = |w: &str| -> Result<f64, String> {
        w.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or(format!("{key}: {w:?} is not a number"))
    };
    let us = |w: &str| number(w).map(|x| Duration::from_nanos((x * 1e3) as u64));
    match key {
        "name" => s.name = value.into(),
        "ranks" => {
            s.ranks = value
                .split(',')
                .map(|n| n.trim().parse::<usize>().ok().filter(|&n| n >= 2))
                .collect::<Option<_>>()
                .ok_or("ranks: a list of job sizes of 2 or more")?;
        }
        "topology" => s.network.topology = topology(&words)?,
        "network" => {
            s.network.network = match words[..] {
                ["flows"] => NetworkModel::Flows,
                ["packets", mtu, buffer] => NetworkModel::Packets {
                    mtu: size(mtu)?,
                    buffer: size(buffer)?,
                },
                _ => return Err("network: flows, or packets MTU BUFFER".into()),
            }
        }
        "link_bandwidth" => s.network.link_bandwidth = number(value)? * 1e6,
        "hop_latency_us" => s.network.hop_latency = us(value)?,
        "overhead_us" => s.network.overhead = us(value)?,
        "payload_free_above" => s.network.payload_free_above = Some(size(value)?),
        "slow_receivers" => match words[..] {
            [fraction, times] if number(fraction)? <= 1.0 && number(times)? >= 1.0 => {
                s.slow = Some((number(fraction)?, number(times)?));
            }
            _ => return Err("slow_receivers: FRACTION (0-1) SLOWDOWN (1 or more)".into()),
        },
        "operations" => {
            s.operations = value
                .split(',')
                .map(|op| operation(op.trim()))
                .collect::<Result<_, _>>()?;
        }
        "repeat" => {
            s.repeat = value
                .parse()
                .ok()
                .filter(|&r| r >= 1)
                .ok_or("repeat: a count of 1 or more")?;
        }
        other => return Err(format!("no setting {other:?}")),
    }
    Ok(())
}

/// `256M`, `1K`, `4096`.
pub fn size(s: &str) -> Result<usize, String> {
    let (digits, unit) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1 << 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{s:?} is not a size"))
}

fn topology(words: &[&str]) -> Result<Topology, String> {
    let count = |w: &str| w.parse::<usize>().ok().filter(|&n| n > 0);
    let t = match words {
        ["switch"] => Some(Topology::Switch),
        ["fattree", leaf, over] => {
            count(leaf)
                .zip(over.parse::<f64>().ok())
                .map(|(l, o)| Topology::FatTree {
                    leaf_ranks: l,
                    oversubscription: o,
                })
        }
        ["dragonfly", shape, rest @ ..] if rest.len() <= 1 => {
            let v: Option<Vec<usize>> = shape.split(',').map(count).collect();
            let routing = match rest.first().copied().unwrap_or("adaptive") {
                "minimal" => Some(DragonflyRouting::Minimal),
                "valiant" => Some(DragonflyRouting::Valiant),
                "adaptive" => Some(DragonflyRouting::Adaptive),
                _ => None,
            };
            v.filter(|v| v.len() == 3)
                .zip(routing)
                .map(|(v, routing)| Topology::Dragonfly {
                    ranks_per_router: v[0],
                    routers_per_group: v[1],
                    globals_per_router: v[2],
                    routing,
                })
        }
        ["clusters", ranks, mbps, ms] => {
            let bw = mbps.parse::<f64>().ok().filter(|b| *b > 0.0);
            let ms = ms.parse::<f64>().ok().filter(|m| *m >= 0.0);
            match (count(ranks), bw, ms) {
                (Some(r), Some(bw), Some(ms)) => Some(Topology::Clusters {
                    cluster_ranks: r,
                    wan_bandwidth: bw * 1e6,
                    wan_latency: Duration::from_nanos((ms * 1e6) as u64),
                    wan_changes: Vec::new(),
                }),
                _ => None,
            }
        }
        _ => None,
    };
    t.ok_or_else(|| {
        format!(
            "topology {:?}: switch | fattree LEAF_RANKS OVERSUBSCRIPTION | dragonfly P,A,H \
             [minimal|valiant|adaptive] | clusters RANKS WAN_MB/s WAN_LATENCY_MS",
            words.join(" ")
        )
    })
}

fn operation(text: &str) -> Result<Operation, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let op = match words[..] {
        ["barrier"] => Operation::Barrier,
        ["bcast", b] => Operation::Bcast(size(b)?),
        ["allreduce", n] => Operation::Allreduce(size(n)?),
        ["allgather", b] => Operation::Allgather(size(b)?),
        ["alltoall", b] => Operation::Alltoall(size(b)?),
        ["pairs", b] => Operation::Pairs(size(b)?),
        _ => {
            return Err(format!(
                "operation {text:?}: barrier | bcast SIZE | allreduce COUNT | allgather SIZE \
                 | alltoall SIZE | pairs SIZE"
            ))
        }
    };
    Ok(op)
}

/// Runs the scenario: one job per size, each operation `repeat` times after a barrier, the
/// last call timed from the first rank's call to the last rank's return (virtual time).
pub fn run(s: &Scenario, progress: &mut dyn FnMut(&str)) -> Result<Figure, String> {
    let mut series: Vec<Series> = s
        .operations
        .iter()
        .map(|o| Series::new(&o.label()))
        .collect();
    for &n in &s.ranks {
        let cfg = job(s, n);
        let check = cfg.payload_free_above.is_none();
        let to = super::rendezvous::pairing(n);
        let (ops, repeat) = (&s.operations, s.repeat);
        let wall = std::time::Instant::now();
        let per_rank = sim::run(cfg, |comm| -> Result<Vec<(f64, f64)>, String> {
            let mut spans = Vec::with_capacity(ops.len());
            for &op in ops {
                let mut span = (0.0, 0.0);
                for _ in 0..repeat {
                    comm.barrier().map_err(|e| e.to_string())?;
                    let start = comm.wtime();
                    call(&comm, op, check, &to)?;
                    span = (start, comm.wtime());
                }
                spans.push(span);
            }
            part(&comm)?;
            Ok(spans)
        })
        .map_err(|e| e.to_string())?;
        let per_rank: Vec<Vec<(f64, f64)>> = per_rank.into_iter().collect::<Result<_, _>>()?;
        let mut line = format!("{n} ranks:");
        for (k, series) in series.iter_mut().enumerate() {
            let first = per_rank.iter().map(|r| r[k].0).fold(f64::MAX, f64::min);
            let last = per_rank.iter().map(|r| r[k].1).fold(0.0, f64::max);
            let us = (last - first) * 1e6;
            line += &format!(" {} {us:.1} us,", series.name);
            series.points.push((n as f64, us));
        }
        progress(&format!(
            "{} (virtual); simulated in {:.1} s",
            line.trim_end_matches(','),
            wall.elapsed().as_secs_f64()
        ));
    }
    Ok(figure(s, series))
}

/// One timed call of `op` on `comm`; checks what it can.
fn call(comm: &Comm, op: Operation, check: bool, to: &[usize]) -> Result<(), String> {
    let err = |e: rdcoll::Error| e.to_string();
    let (me, n) = (comm.rank() as usize, comm.size() as usize);
    match op {
        Operation::Barrier => comm.barrier().map_err(err),
        Operation::Bcast(bytes) => {
            let mut buf = vec![0u8; bytes];
            if me == 0 {
                buf.iter_mut()
                    .enumerate()
                    .for_each(|(i, b)| *b = (i % 251) as u8);
            }
            comm.bcast(&mut buf, 0).map_err(err)?;
            if check && buf.iter().enumerate().any(|(i, &b)| b != (i % 251) as u8) {
                return Err(format!("rank {me}: wrong broadcast data"));
            }
            Ok(())
        }
        Operation::Allreduce(len) => {
            let mine: Vec<f64> = (0..len).map(|i| (me + i) as f64).collect();
            let mut sum = vec![0.0f64; len];
            comm.allreduce(&mine, &mut sum, Op::Sum).map_err(err)?;
            let base = (n * (n - 1) / 2) as f64;
            let wrong = sum
                .iter()
                .enumerate()
                .any(|(i, &s)| s != base + (n * i) as f64);
            if check && wrong {
                return Err(format!("rank {me}: wrong allreduce sum"));
            }
            Ok(())
        }
        Operation::Allgather(bytes) => {
            let send = vec![me as u8; bytes];
            let mut recv = vec![0u8; bytes * n];
            comm.allgather(&send, &mut recv).map_err(err)
        }
        Operation::Alltoall(bytes) => {
            let send = vec![me as u8; bytes * n];
            let mut recv = vec![0u8; bytes * n];
            comm.alltoall(&send, &mut recv).map_err(err)
        }
        Operation::Pairs(bytes) => {
            let from = to.iter().position(|&t| t == me).expect("a permutation") as u32;
            let out = vec![0u8; bytes];
            let mut inbox = vec![0u8; bytes];
            comm.sendrecv(&out, to[me] as u32, 7, &mut inbox, from, 7)
                .map_err(err)
                .map(drop)
        }
    }
}

/// Ends a job's ranks together: a rank that leaves tells every other, and that must not queue
/// ahead of a slower rank's last data.
fn part(comm: &Comm) -> Result<(), String> {
    let err = |e: rdcoll::Error| e.to_string();
    let (me, n) = (comm.rank(), comm.size());
    if me == 0 {
        for _ in 1..n {
            comm.recv(&mut [0u8; 0], Source::Any, 8).map_err(err)?;
        }
        for r in 1..n {
            comm.send(&[0u8; 0], r, 8).map_err(err)?;
        }
    } else {
        comm.send(&[0u8; 0], 0, 8).map_err(err)?;
        comm.recv(&mut [0u8; 0], 0, 8).map_err(err)?;
    }
    Ok(())
}

/// A figure of each operation's virtual time against the job size.
fn figure(s: &Scenario, series: Vec<Series>) -> Figure {
    Figure {
        name: s.name.clone(),
        title: format!("Scenario {}", s.name),
        x_label: "ranks".into(),
        y_label: "virtual time (us)".into(),
        series,
        log_y: true,
    }
}

/// The job of `n` ranks: the scenario's network with its slow receivers spread evenly.
fn job(s: &Scenario, n: usize) -> SimConfig {
    let slow_receivers = match s.slow {
        Some((fraction, times)) if fraction > 0.0 => {
            let count = ((n as f64 * fraction).round() as usize).clamp(1, n);
            (0..count)
                .map(|i| ((i * n / count) as u32, 1.0 / times))
                .collect()
        }
        _ => Vec::new(),
    };
    SimConfig {
        ranks: n,
        slow_receivers,
        ..s.network.clone()
    }
}

#[cfg(test)]
#[path = "scenario_tests.rs"]
mod tests;

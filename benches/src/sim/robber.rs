//! Paper 003's Table 2 at the paper's scale: four clusters of 16 ranks joined by WAN links of
//! 10 ms one-way delay, the root broadcasting 600 MB (payload-free) with Robber, MOB, RDMC's
//! hybrid and the binomial pipeline, in the five scenarios (fast links, slow links, fast ->
//! slow, slow -> fast, mayhem) and the heterogeneous-nodes case; each throughput as a
//! percentage of the scenario's theoretical maximum (`wan_scenario::max_throughput`, the
//! same as the emulated runs of `rdcoll-bench wan` use).

use std::time::Duration;

use rdcoll::sim::{SimConfig, Topology, WanChange, WanLink};
use rdcoll::{BcastAlgorithm, BcastSchedule, CollConfig, Multicast};

use super::{Figure, Series};
use crate::wan_scenario::{max_throughput, Scale, Scenario, ALGORITHMS, SCENARIOS};

/// What to run.
pub struct Robber {
    /// Bytes broadcast.
    pub bytes: usize,
    /// The scenarios' scale: clusters, ranks per cluster, link rates, when things change.
    pub scale: Scale,
    /// One-way WAN delay.
    pub wan_latency: Duration,
    /// Scenarios by name (`wan_scenario::Scale::scenario`).
    pub scenarios: Vec<String>,
    /// Algorithms by name: robber, mob, hybrid, binomial_pipeline.
    pub algorithms: Vec<String>,
}

impl Default for Robber {
    /// The paper's setting: 4 x 16 ranks, 600 MB, 10 ms; slow links at 0.8 MB/s (its text),
    /// fast ones at 4 MB/s so that the 30 s switch falls within the transfer; mayhem every
    /// 5 s.
    fn default() -> Self {
        Robber {
            bytes: 600_000_000,
            scale: Scale {
                clusters: 4,
                nodes: 16,
                fast: 4_000_000,
                slow: 800_000,
                switch_after: Duration::from_secs(30),
                mayhem_every: Duration::from_secs(5),
                seed: 1,
            },
            wan_latency: Duration::from_millis(10),
            scenarios: SCENARIOS.map(String::from).to_vec(),
            algorithms: ALGORITHMS.map(String::from).to_vec(),
        }
    }
}

/// The scenario's caps as WAN changes of the simulated network.
fn changes(scenario: &Scenario, nodes: usize) -> Vec<WanChange> {
    let mut out = Vec::new();
    for (at, caps) in &scenario.steps {
        for (from, row) in caps.links.iter().enumerate() {
            for (to, &bw) in row.iter().enumerate().filter(|&(to, _)| to != from) {
                let link = WanLink::Between { from, to };
                out.push(WanChange {
                    at: *at,
                    link,
                    bandwidth: bw as f64,
                });
            }
        }
        for (c, row) in caps.nodes.iter().enumerate() {
            for (n, &bw) in row.iter().enumerate() {
                let link = WanLink::Into((c * nodes + n) as u32);
                out.push(WanChange {
                    at: *at,
                    link,
                    bandwidth: bw as f64,
                });
            }
        }
    }
    out
}

fn algorithm(name: &str) -> Result<BcastAlgorithm, String> {
    Ok(match name {
        "robber" => BcastAlgorithm::Multicast(Multicast::Robber),
        "mob" => BcastAlgorithm::Multicast(Multicast::Mob),
        "hybrid" => BcastAlgorithm::Rdmc(BcastSchedule::Hybrid),
        "binomial_pipeline" => BcastAlgorithm::Rdmc(BcastSchedule::BinomialPipeline),
        other => return Err(format!("no algorithm {other:?}")),
    })
}

/// `scenario` as seen from `t0` on: the caps in force then from time 0, later changes
/// moved earlier by `t0`.
fn from(scenario: &Scenario, t0: Duration) -> Scenario {
    let current = scenario
        .steps
        .iter()
        .rposition(|(at, _)| *at <= t0)
        .unwrap_or(0);
    let mut steps = vec![(Duration::ZERO, scenario.steps[current].1.clone())];
    steps.extend(
        scenario.steps[current + 1..]
            .iter()
            .map(|(at, caps)| (*at - t0, caps.clone())),
    );
    Scenario {
        name: scenario.name,
        steps,
    }
}

/// One broadcast of `e.bytes` from rank 0 in `scenario`: its throughput in bytes per second
/// and the scenario's maximum from the root's start (the changes run on the simulation's
/// clock, and the root starts once the collectives are set up).
pub fn throughput(e: &Robber, scenario: &Scenario, how: &str) -> Result<(f64, f64), String> {
    let s = &e.scale;
    let cfg = SimConfig {
        topology: Topology::Clusters {
            cluster_ranks: s.nodes,
            wan_bandwidth: s.fast as f64,
            wan_latency: e.wan_latency,
            wan_changes: changes(scenario, s.nodes),
        },
        payload_free_above: Some(4096),
        stall_limit: Duration::from_secs(60),
        ..SimConfig::switch(s.clusters * s.nodes)
    };
    let alg = algorithm(how)?;
    let bytes = e.bytes;
    let nodes = s.nodes;
    let cluster = |rank: u32| CollConfig {
        bcast_algorithm: alg,
        cluster: Some(format!("cluster{}", rank as usize / nodes)),
        ..CollConfig::default()
    };
    let (start, end) = super::bcast_span(cfg, bytes, &cluster)?;
    let max = max_throughput(
        &from(scenario, Duration::from_secs_f64(start)),
        0,
        bytes as f64,
    );
    Ok((bytes as f64 / (end - start), max))
}

/// Runs the experiment: per algorithm, the percentage of each scenario's maximum (x is the
/// scenario's position in `e.scenarios`).
pub fn run(e: &Robber, progress: &mut dyn FnMut(&str)) -> Result<Figure, String> {
    let mut series: Vec<Series> = e.algorithms.iter().map(|a| Series::new(a)).collect();
    for (i, name) in e.scenarios.iter().enumerate() {
        let scenario = e
            .scale
            .scenario(name)
            .ok_or_else(|| format!("no scenario {name:?}"))?;
        for (how, s) in e.algorithms.iter().zip(series.iter_mut()) {
            let wall = std::time::Instant::now();
            let (got, max) = throughput(e, &scenario, how)?;
            progress(&format!(
                "{}: {how} {:.2} MB/s of {:.2} ({:.0} %; simulated in {:.1} s)",
                scenario.name,
                got / 1e6,
                max / 1e6,
                100.0 * got / max,
                wall.elapsed().as_secs_f64()
            ));
            s.points.push(((i + 1) as f64, 100.0 * got / max));
        }
    }
    Ok(Figure {
        name: "robber".into(),
        title: format!(
            "Paper 003 Table 2, simulated: {} clusters x {}, {} MB, % of the maximum (x: {})",
            e.scale.clusters,
            e.scale.nodes,
            e.bytes / 1_000_000,
            e.scenarios.join(", ")
        ),
        x_label: "scenario".into(),
        y_label: "% of theoretical maximum".into(),
        series,
        log_y: false,
    })
}

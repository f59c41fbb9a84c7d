//! The emulated WAN scenarios of paper 003 §4.2.1 (Table 2) scaled to this machine, the
//! heterogeneous-node case of §4.3.2, and each scenario's theoretical maximum throughput: the
//! broadcast capacity (the minimum over receiving clusters of the max-flow from the root's
//! cluster, Edmonds' theorem); where the caps change, over the time-expanded network, in
//! which a cluster may keep what it received during one step and pass it on in a later one.

use std::time::Duration;

/// "Unlimited": what a link or node gets when nothing caps it (bytes per second).
pub const UNCAPPED: u64 = 1_250_000_000;

/// Every scenario's name, in the paper's order (Table 2, then the heterogeneous nodes).
pub const SCENARIOS: [&str; 6] = ["fast", "slow", "fast-slow", "slow-fast", "mayhem", "hetero"];

/// The broadcasts compared across clusters.
pub const ALGORITHMS: [&str; 4] = ["robber", "mob", "hybrid", "binomial_pipeline"];

/// Link and node caps in force, bytes per second.
#[derive(Clone, Debug)]
pub struct Caps {
    /// `links[from][to]`: the wide-area link from cluster `from` to cluster `to`.
    pub links: Vec<Vec<u64>>,
    /// `nodes[c][n]`: what node `n` of cluster `c` receives from other clusters.
    pub nodes: Vec<Vec<u64>>,
}

/// A named scenario: caps from time 0, then changes at the given moments after the root
/// starts.
pub struct Scenario {
    pub name: &'static str,
    pub steps: Vec<(Duration, Caps)>,
}

/// How the scenarios are scaled.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub clusters: usize,
    pub nodes: usize,
    /// A fast link's bandwidth (bytes/s).
    pub fast: u64,
    /// A slow link's.
    pub slow: u64,
    /// When fast → slow and slow → fast switch.
    pub switch_after: Duration,
    /// How often mayhem redraws every link.
    pub mayhem_every: Duration,
    pub seed: u64,
}

impl Default for Scale {
    /// 4 clusters of 3, links of 4 MB/s (slow ones 0.4), switching after 3 s, mayhem every 1 s.
    fn default() -> Scale {
        Scale {
            clusters: 4,
            nodes: 3,
            fast: 4_000_000,
            slow: 400_000,
            switch_after: Duration::from_secs(3),
            mayhem_every: Duration::from_secs(1),
            seed: 1,
        }
    }
}

impl Scale {
    fn uniform(&self, link: u64, node: u64) -> Caps {
        let k = self.clusters;
        Caps {
            links: (0..k)
                .map(|a| (0..k).map(|b| if a == b { 0 } else { link }).collect())
                .collect(),
            nodes: vec![vec![node; self.nodes]; k],
        }
    }

    fn fast(&self) -> Caps {
        self.uniform(self.fast, UNCAPPED)
    }

    /// Like fast, with the links between clusters `i` and `k - 1 - i` (A-D and B-C of four)
    /// slow, both ways.
    fn slow(&self) -> Caps {
        let mut c = self.fast();
        let k = self.clusters;
        for i in 0..k / 2 {
            let j = k - 1 - i;
            c.links[i][j] = self.slow;
            c.links[j][i] = self.slow;
        }
        c
    }

    /// Every scenario by name: fast, slow, fast-slow, slow-fast, mayhem, hetero.
    pub fn scenario(&self, name: &str) -> Option<Scenario> {
        let at = |d: Duration, c: Caps| (d, c);
        let steps = match name {
            "fast" => vec![at(Duration::ZERO, self.fast())],
            "slow" => vec![at(Duration::ZERO, self.slow())],
            "fast-slow" => vec![
                at(Duration::ZERO, self.fast()),
                at(self.switch_after, self.slow()),
            ],
            "slow-fast" => vec![
                at(Duration::ZERO, self.slow()),
                at(self.switch_after, self.fast()),
            ],
            "mayhem" => {
                let mut rng = self.seed | 1;
                let mut draw = move || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                (0..2000u32)
                    .map(|i| {
                        let mut c = self.fast();
                        for row in &mut c.links {
                            for l in row.iter_mut().filter(|l| **l != 0) {
                                // 10-100 % of nominal.
                                *l = *l * (10 + draw() % 91) / 100;
                            }
                        }
                        at(self.mayhem_every * i, c)
                    })
                    .collect()
            }
            "hetero" => {
                // Links wide open; nodes' wide-area NICs at the fast rate, one node per
                // cluster at a quarter of it.
                let mut c = self.uniform(UNCAPPED, self.fast);
                for row in &mut c.nodes {
                    if let Some(last) = row.last_mut() {
                        *last = self.fast / 4;
                    }
                }
                vec![at(Duration::ZERO, c)]
            }
            _ => return None,
        };
        Some(Scenario {
            name: match name {
                "fast" => "fast links",
                "slow" => "slow links",
                "fast-slow" => "fast -> slow",
                "slow-fast" => "slow -> fast",
                "mayhem" => "mayhem",
                _ => "heterogeneous nodes",
            },
            steps,
        })
    }
}

/// The broadcast capacity (bytes/s) from cluster `root` under `caps`.
pub fn capacity(caps: &Caps, root: usize) -> f64 {
    let k = caps.links.len();
    (0..k)
        .filter(|&d| d != root)
        .map(|d| max_flow(caps, root, d))
        .fold(f64::INFINITY, f64::min)
}

/// Max-flow from cluster `root` into cluster `dest`: each cluster is an intake vertex and an
/// out vertex joined by the sum of its nodes' caps (the root's unlimited), the links join out
/// vertices to intake vertices.
fn max_flow(caps: &Caps, root: usize, dest: usize) -> f64 {
    let n = 2 * caps.links.len();
    let mut cap = vec![vec![0f64; n]; n];
    place_step(&mut cap, caps, root, 0, 1.0);
    flow_between(cap, 2 * root + 1, 2 * dest + 1)
}

/// Adds one step's edges (each cap times `seconds`) among the vertices from `base` on: cluster
/// `c`'s intake `base + 2c` to its out vertex `base + 2c + 1` (the root's unlimited), out
/// vertices to the other clusters' intakes.
fn place_step(cap: &mut [Vec<f64>], caps: &Caps, root: usize, base: usize, seconds: f64) {
    let k = caps.links.len();
    for c in 0..k {
        cap[base + 2 * c][base + 2 * c + 1] = if c == root {
            f64::INFINITY
        } else {
            caps.nodes[c].iter().map(|&x| x as f64).sum::<f64>() * seconds
        };
        for d in (0..k).filter(|&d| d != c) {
            cap[base + 2 * c + 1][base + 2 * d] = caps.links[c][d] as f64 * seconds;
        }
    }
}

/// The most bytes that can reach cluster `dest` from `root` by `until` seconds: a max-flow in
/// the time-expanded network, one copy of the clusters per step (up to `until`), each cluster's
/// out vertex joined to its copy in the next step (what it holds, it keeps).
fn delivered_by(scenario: &Scenario, root: usize, dest: usize, until: f64) -> f64 {
    let k = 2 * scenario.steps[0].1.links.len();
    let steps: Vec<(f64, &Caps)> = scenario
        .steps
        .iter()
        .enumerate()
        .filter(|(_, (start, _))| start.as_secs_f64() < until)
        .map(|(i, (start, caps))| {
            let end = scenario
                .steps
                .get(i + 1)
                .map_or(until, |(t, _)| t.as_secs_f64().min(until));
            (end - start.as_secs_f64(), caps)
        })
        .collect();
    let mut cap = vec![vec![0f64; k * steps.len()]; k * steps.len()];
    for (i, (seconds, caps)) in steps.iter().enumerate() {
        place_step(&mut cap, caps, root, i * k, *seconds);
        if i + 1 < steps.len() {
            for c in 0..k / 2 {
                cap[i * k + 2 * c + 1][(i + 1) * k + 2 * c + 1] = f64::INFINITY;
            }
        }
    }
    let last = (steps.len() - 1) * k;
    flow_between(cap, 2 * root + 1, last + 2 * dest + 1)
}

/// The max-flow from `s` to `t` over the capacities `cap` (dense; Edmonds-Karp).
fn flow_between(mut cap: Vec<Vec<f64>>, s: usize, t: usize) -> f64 {
    let n = cap.len();
    let mut flow = 0.0;
    loop {
        // Breadth-first search for a shortest augmenting path (Edmonds-Karp).
        let mut prev = vec![usize::MAX; n];
        prev[s] = s;
        let mut queue = std::collections::VecDeque::from([s]);
        while let Some(u) = queue.pop_front() {
            for v in 0..n {
                if prev[v] == usize::MAX && cap[u][v] > 1e-9 {
                    prev[v] = u;
                    queue.push_back(v);
                }
            }
        }
        if prev[t] == usize::MAX {
            return flow;
        }
        let mut push = f64::INFINITY;
        let mut v = t;
        while v != s {
            push = push.min(cap[prev[v]][v]);
            v = prev[v];
        }
        let mut v = t;
        while v != s {
            let u = prev[v];
            cap[u][v] -= push;
            cap[v][u] += push;
            v = u;
        }
        flow += push;
    }
}

/// The highest throughput (bytes/s) any multicast of `size` bytes from cluster `root` can
/// reach in `scenario`: `size` over the shortest time in which every cluster can have it all.
/// With one step, the time the broadcast capacity takes to carry it; where the caps change,
/// clusters may also keep data through a slow step for a later fast one, so the time is
/// found in the time-expanded network (no longer than the capacity integrated step by step).
pub fn max_throughput(scenario: &Scenario, root: usize, size: f64) -> f64 {
    let stepwise = integrated_time(scenario, root, size);
    if scenario.steps.len() == 1 {
        return size / stepwise;
    }
    let k = scenario.steps[0].1.links.len();
    let everyone_by = |t: f64| {
        (0..k)
            .filter(|&d| d != root)
            .all(|d| delivered_by(scenario, root, d, t) >= size * (1.0 - 1e-9))
    };
    let (mut early, mut late) = (0.0, stepwise);
    if !late.is_finite() {
        // Step by step it never gets there; keeping data may.
        late = scenario
            .steps
            .last()
            .map_or(1.0, |s| s.0.as_secs_f64().max(1.0));
        let mut doublings = 0;
        while !everyone_by(late) {
            late *= 2.0;
            doublings += 1;
            if doublings > 64 {
                return 0.0;
            }
        }
    }
    for _ in 0..40 {
        let mid = (early + late) / 2.0;
        if everyone_by(mid) {
            late = mid;
        } else {
            early = mid;
        }
    }
    size / late
}

/// The time the broadcast capacity, integrated step by step, takes to carry `size` bytes
/// (what an ideal broadcast that keeps nothing for later needs).
fn integrated_time(scenario: &Scenario, root: usize, size: f64) -> f64 {
    let mut left = size;
    for (i, (start, caps)) in scenario.steps.iter().enumerate() {
        let rate = capacity(caps, root);
        let end = scenario.steps.get(i + 1).map(|(t, _)| t.as_secs_f64());
        match end {
            Some(end) if rate * (end - start.as_secs_f64()) < left => {
                left -= rate * (end - start.as_secs_f64());
            }
            _ => return start.as_secs_f64() + left / rate,
        }
    }
    f64::INFINITY
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scale() -> Scale {
        Scale::default()
    }

    #[test]
    fn capacities_by_hand() {
        let s = scale();
        // Fast: every cluster has three 4 MB/s links in.
        let fast = s.scenario("fast").unwrap();
        assert!((capacity(&fast.steps[0].1, 0) - 12e6).abs() < 1.0);
        // Slow (A-D and B-C at 0.4): into B, 4 from A, 4 from D (fed by A-C-D) and 0.4 from C.
        let slow = s.scenario("slow").unwrap();
        assert!((capacity(&slow.steps[0].1, 0) - 8.4e6).abs() < 1.0);
        // Fast for 3 s (36 MB), then the rest at 8.4 MB/s.
        let t = max_throughput(&s.scenario("fast-slow").unwrap(), 0, 60e6);
        assert!((t - 60e6 / (3.0 + 24.0 / 8.4)).abs() < 1.0, "{t}");
        // Heterogeneous: each receiving cluster takes in 4 + 4 + 1 MB/s.
        let het = s.scenario("hetero").unwrap();
        assert!((capacity(&het.steps[0].1, 0) - 9e6).abs() < 1.0);
        let mayhem = s.scenario("mayhem").unwrap();
        let c = capacity(&mayhem.steps[1].1, 0);
        assert!(c > 1.2e6 && c < 12e6, "{c}");
    }

    /// A cluster may keep what it received and pass it on later: 10 MB reach B in the first
    /// second (nothing can reach C then), then B may send to C at 10 MB/s while the root's
    /// links are down. Step by step the broadcast never ends; kept, it takes 2 s.
    #[test]
    fn data_kept_through_a_step_counts() {
        let caps = |ab: u64, bc: u64| Caps {
            links: vec![vec![0, ab, 0], vec![0, 0, bc], vec![0, 0, 0]],
            nodes: vec![vec![UNCAPPED]; 3],
        };
        let scenario = Scenario {
            name: "relay",
            steps: vec![
                (Duration::ZERO, caps(10_000_000, 0)),
                (Duration::from_secs(1), caps(0, 10_000_000)),
            ],
        };
        let t = max_throughput(&scenario, 0, 10e6);
        assert!((t - 5e6).abs() < 1.0, "{t}");
        // And never more than the step-by-step bound where nothing is worth keeping.
        let one = Scenario {
            name: "one",
            steps: vec![(Duration::ZERO, caps(10_000_000, 10_000_000))],
        };
        assert!((max_throughput(&one, 0, 10e6) - 10e6).abs() < 1.0);
    }
}

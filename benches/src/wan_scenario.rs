//! The emulated WAN scenarios of paper 003 §4.2.1 (Table 2) scaled to this machine, the
//! heterogeneous-node case of §4.3.2, and each scenario's theoretical maximum throughput: the
//! broadcast capacity (the minimum over receiving clusters of the max-flow from the root's
//! cluster, Edmonds' theorem), integrated over the scenario's changes as if an ideal algorithm
//! adapted at once.

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
    let k = caps.links.len();
    let n = 2 * k;
    let mut cap = vec![vec![0f64; n]; n];
    for c in 0..k {
        cap[2 * c][2 * c + 1] = if c == root {
            f64::INFINITY
        } else {
            caps.nodes[c].iter().map(|&x| x as f64).sum()
        };
        for d in (0..k).filter(|&d| d != c) {
            cap[2 * c + 1][2 * d] = caps.links[c][d] as f64;
        }
    }
    let (s, t) = (2 * root + 1, 2 * dest + 1);
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
/// reach in `scenario`: `size` over the time the capacity, integrated, takes to carry it.
pub fn max_throughput(scenario: &Scenario, root: usize, size: f64) -> f64 {
    let mut left = size;
    for (i, (start, caps)) in scenario.steps.iter().enumerate() {
        let rate = capacity(caps, root);
        let end = scenario.steps.get(i + 1).map(|(t, _)| t.as_secs_f64());
        match end {
            Some(end) if rate * (end - start.as_secs_f64()) < left => {
                left -= rate * (end - start.as_secs_f64());
            }
            _ => return size / (start.as_secs_f64() + left / rate),
        }
    }
    0.0
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
}

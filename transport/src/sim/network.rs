//! The flow-level network: transfers in progress share the bandwidth of every link they cross
//! max-min fairly (progressive filling), recomputed whenever a transfer starts or ends or a
//! link's capacity changes. Times are whole nanoseconds of virtual time, capacities bytes per
//! nanosecond. Flows are kept in their key's order, so the same run computes the same rates
//! in the same order (the simulation is deterministic).

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};

/// Names a flow: the rank that started the transfer and its sequence number there.
pub(crate) type FlowKey = (u32, u64);

struct Flow {
    links: Vec<u32>,
    /// Bytes still to send, as of `Network::updated_at`.
    remaining: f64,
    /// Bytes per nanosecond.
    rate: f64,
    /// When the last byte leaves, at the current rate.
    finish_at: u64,
}

/// Every flow in progress and the links they share.
pub(crate) struct Network {
    capacity: Vec<f64>,
    flows: BTreeMap<FlowKey, Flow>,
    /// When `remaining` was last brought up to date.
    updated_at: u64,
    /// The rates need recomputing (a flow started or ended, a capacity changed).
    dirty: bool,
    // Scratch space of the rate computation, kept between runs.
    left: Vec<f64>,
    unfixed: Vec<u32>,
    through: Vec<Vec<usize>>,
}

/// A link's fair share in the progressive filling, ordered for a min-heap.
#[derive(PartialEq)]
struct Share(f64, u32);

impl Eq for Share {}
impl PartialOrd for Share {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Share {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

impl Network {
    /// A network of links with these capacities (bytes per nanosecond).
    pub(crate) fn new(capacity: Vec<f64>) -> Network {
        let links = capacity.len();
        Network {
            capacity,
            flows: BTreeMap::new(),
            updated_at: 0,
            dirty: false,
            left: vec![0.0; links],
            unfixed: vec![0; links],
            through: vec![Vec::new(); links],
        }
    }

    /// Flows in progress.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.flows.len()
    }

    /// Starts a flow of `bytes` over `links` at `now` (not before the last update).
    pub(crate) fn start(&mut self, now: u64, key: FlowKey, links: Vec<u32>, bytes: f64) {
        self.progress(now);
        self.flows.insert(
            key,
            Flow {
                links,
                remaining: bytes.max(1.0),
                rate: 0.0,
                finish_at: u64::MAX,
            },
        );
        self.dirty = true;
    }

    /// A link's capacity now, bytes per nanosecond.
    pub(crate) fn capacity(&self, link: u32) -> f64 {
        self.capacity[link as usize]
    }

    /// Changes a link's capacity from `now` on.
    pub(crate) fn set_capacity(&mut self, now: u64, link: usize, bytes_per_ns: f64) {
        self.progress(now);
        self.capacity[link] = bytes_per_ns;
        self.dirty = true;
    }

    /// When the next flow finishes, if any flows are in progress.
    pub(crate) fn next_finish(&mut self) -> Option<u64> {
        self.recompute();
        self.flows.values().map(|f| f.finish_at).min()
    }

    /// Brings every flow up to `now` and removes those whose last byte has left, in key order.
    pub(crate) fn finish_until(&mut self, now: u64) -> Vec<FlowKey> {
        self.recompute();
        self.progress(now);
        let done: Vec<FlowKey> = self
            .flows
            .iter()
            .filter(|(_, f)| f.finish_at <= now)
            .map(|(k, _)| *k)
            .collect();
        for k in &done {
            self.flows.remove(k);
        }
        if !done.is_empty() {
            self.dirty = true;
        }
        done
    }

    /// Drains each flow's bytes at its rate up to `now`.
    fn progress(&mut self, now: u64) {
        let dt = now.saturating_sub(self.updated_at) as f64;
        if dt > 0.0 {
            for f in self.flows.values_mut() {
                f.remaining = (f.remaining - f.rate * dt).max(0.0);
            }
        }
        self.updated_at = self.updated_at.max(now);
    }

    /// Max-min fair rates by progressive filling: the link with the smallest fair share fixes
    /// the rate of every flow through it; their bandwidth is taken off their other links; and
    /// so on. A link's share only grows as flows are fixed, so a stale heap entry is one whose
    /// share is now larger: it is pushed again.
    fn recompute(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        let keys: Vec<FlowKey> = self.flows.keys().copied().collect();
        let mut used = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            for &l in &self.flows[k].links {
                let l = l as usize;
                if self.unfixed[l] == 0 {
                    used.push(l);
                    self.left[l] = self.capacity[l];
                }
                self.unfixed[l] += 1;
                self.through[l].push(i);
            }
        }
        let mut rates = vec![f64::INFINITY; keys.len()];
        let mut fixed = vec![false; keys.len()];
        let mut heap: BinaryHeap<Reverse<Share>> = used
            .iter()
            .map(|&l| Reverse(Share(self.left[l] / self.unfixed[l] as f64, l as u32)))
            .collect();
        while let Some(Reverse(Share(share, l))) = heap.pop() {
            let l = l as usize;
            if self.unfixed[l] == 0 {
                continue;
            }
            let now_share = self.left[l] / self.unfixed[l] as f64;
            if now_share > share {
                heap.push(Reverse(Share(now_share, l as u32)));
                continue;
            }
            for idx in std::mem::take(&mut self.through[l]) {
                if fixed[idx] {
                    continue;
                }
                fixed[idx] = true;
                rates[idx] = now_share;
                for &other in &self.flows[&keys[idx]].links {
                    let o = other as usize;
                    self.left[o] = (self.left[o] - now_share).max(0.0);
                    self.unfixed[o] -= 1;
                    if o != l && self.unfixed[o] > 0 {
                        heap.push(Reverse(Share(self.left[o] / self.unfixed[o] as f64, other)));
                    }
                }
            }
        }
        for &l in &used {
            self.unfixed[l] = 0;
            self.through[l].clear();
        }
        let now = self.updated_at;
        for (k, rate) in keys.iter().zip(rates) {
            let f = self.flows.get_mut(k).expect("flow of the key list");
            f.rate = rate;
            f.finish_at = if rate.is_infinite() || f.remaining <= 0.0 {
                now
            } else if rate <= 0.0 {
                u64::MAX
            } else {
                now.saturating_add((f.remaining / rate).ceil() as u64)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two flows out of one link split it; a third on other links runs at full rate; when one
    /// of the two ends, the other speeds up.
    #[test]
    fn flows_share_a_link_fairly_and_speed_up_when_one_ends() {
        // Links 0..4, each 1 byte/ns.
        let mut net = Network::new(vec![1.0; 4]);
        net.start(0, (0, 0), vec![0, 1], 1000.0);
        net.start(0, (0, 1), vec![0, 2], 2000.0);
        net.start(0, (1, 0), vec![3], 500.0);
        assert_eq!(net.next_finish(), Some(500));
        assert_eq!(net.finish_until(500), vec![(1, 0)]);
        // Both shared flows ran at 0.5 byte/ns: the first ends at 2000.
        assert_eq!(net.next_finish(), Some(2000));
        assert_eq!(net.finish_until(2000), vec![(0, 0)]);
        // The second has 1000 bytes left, now at 1 byte/ns.
        assert_eq!(net.next_finish(), Some(3000));
        assert_eq!(net.finish_until(3000), vec![(0, 1)]);
        assert_eq!(net.next_finish(), None);
    }

    /// Max-min, not proportional: a flow held back elsewhere leaves its share to the others.
    #[test]
    fn a_flow_limited_elsewhere_leaves_bandwidth_to_the_rest() {
        // Link 0: 1 byte/ns shared by flows A and B; B also crosses link 1 of 0.2 byte/ns.
        let mut net = Network::new(vec![1.0, 0.2]);
        net.start(0, (0, 0), vec![0], 800.0);
        net.start(0, (0, 1), vec![0, 1], 200.0);
        // B gets 0.2, A the remaining 0.8: both end at 1000.
        assert_eq!(net.next_finish(), Some(1000));
        assert_eq!(net.finish_until(1000), vec![(0, 0), (0, 1)]);
    }

    #[test]
    fn a_capacity_change_changes_the_finish() {
        let mut net = Network::new(vec![1.0]);
        net.start(0, (0, 0), vec![0], 1000.0);
        assert_eq!(net.next_finish(), Some(1000));
        net.set_capacity(500, 0, 0.5);
        assert_eq!(net.next_finish(), Some(1500));
        assert!(net.finish_until(1499).is_empty());
        assert_eq!(net.finish_until(1500).len(), 1);
        assert_eq!(net.len(), 0);
    }
}

//! What a simulated network looks like ([`SimConfig`], [`Topology`]) and the routes through it.

use std::time::Duration;

use crate::error::{Result, TransportError};
use crate::types::Rank;

/// A simulated job: how many ranks, the network between them and what each operation costs.
///
/// The model is LogGP-shaped: an operation leaves its initiator `overhead` after the call,
/// waits for the earlier operations on its channel (one per ordered pair of ranks and
/// direction, as a reliable-connected queue pair orders them), then carries its bytes plus
/// `header_bytes` over the links of its route as `network` says: by default a flow sharing
/// each link's bandwidth max-min fairly with every other transfer on it, landing the route's
/// latency after its last byte left.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Ranks in the job.
    pub ranks: usize,
    /// How the ranks are connected.
    pub topology: Topology,
    /// How transfers cross the network: flows (fast) or packets through finite buffers.
    pub network: NetworkModel,
    /// Bytes per second of every rank's link into and out of the network.
    pub link_bandwidth: f64,
    /// Latency of one hop (rank to switch, switch to switch, switch to rank).
    pub hop_latency: Duration,
    /// Initiator time per operation before it enters the network (LogGP's `o`); a rank's
    /// operations pay it one after another, so it also bounds the rank's message rate.
    pub overhead: Duration,
    /// Bytes every transfer carries besides its payload (headers, the request of a get).
    pub header_bytes: usize,
    /// Transfers up to this many bytes (with headers) are packets: each holds every link of
    /// its route for its bytes' time at that link's rate, one after another (LogGP's gap
    /// per byte; many small messages into one rank queue at its link). Longer transfers are
    /// flows that share links max-min fairly. Packets and flows do not slow each other.
    pub flow_above: usize,
    /// Puts and gets longer than this move no bytes (their length still costs the network):
    /// for runs whose algorithms do not read their payload, at sizes no memory could hold.
    /// Messages and shorter transfers (notices, flags) always carry their bytes.
    pub payload_free_above: Option<usize>,
    /// Ranks whose memory takes data slower than their link (paper 002's slow receivers):
    /// each its rate as a fraction of `link_bandwidth` (0.5: twice as slow).
    pub slow_receivers: Vec<(Rank, f64)>,
    /// Most live regions per rank.
    pub max_regions: usize,
    /// How much virtual time may pass with nothing in the network and every rank asleep
    /// before the job is declared stalled and every rank's peers are failed (so that a program
    /// waiting for something no rank will ever send ends with errors instead of hanging).
    pub stall_limit: Duration,
}

/// How the simulated ranks are connected. Ranks are numbered group by group.
#[derive(Debug, Clone, PartialEq)]
pub enum Topology {
    /// One switch, every rank on it: full bisection bandwidth.
    Switch,
    /// Leaf switches of `leaf_ranks` ranks each under a spine; each leaf's uplink carries
    /// `leaf_ranks * link_bandwidth / oversubscription` (1.0: full bisection).
    FatTree {
        /// Ranks per leaf switch.
        leaf_ranks: usize,
        /// Ratio of the leaf's rank links to its uplink.
        oversubscription: f64,
    },
    /// Clusters of `cluster_ranks` ranks on a switch each, joined by WAN links: one from each
    /// cluster to each other with `wan_bandwidth` bytes per second and `wan_latency` (paper
    /// 003's emulation), and a cap on what each rank takes in from other clusters (its WAN
    /// NIC), open unless a change sets it. `wan_changes` change either at given times.
    Clusters {
        /// Ranks per cluster.
        cluster_ranks: usize,
        /// Bytes per second of each directed link between two clusters.
        wan_bandwidth: f64,
        /// One-way latency across the WAN.
        wan_latency: Duration,
        /// Changes of WAN links at given virtual times.
        wan_changes: Vec<WanChange>,
    },
    /// A balanced Dragonfly of `routers_per_group * globals_per_router + 1` groups (paper
    /// 002's network): every link at `link_bandwidth`, every hop `hop_latency`. Ranks fill
    /// the routers in order; the job may leave the last ones empty.
    Dragonfly {
        /// Ranks per router.
        ranks_per_router: usize,
        /// Routers per group, all linked to each other.
        routers_per_group: usize,
        /// Global links per router.
        globals_per_router: usize,
        /// How traffic between groups is routed.
        routing: DragonflyRouting,
    },
}

/// How the simulated network carries transfers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkModel {
    /// Flow level: a transfer longer than [`SimConfig::flow_above`] shares every link of its
    /// route max-min fairly with the others on it; shorter ones are packets holding each link
    /// in turn. Buffers are unlimited: a slow receiver slows only what goes to it. Fast enough
    /// for runs of hundreds of megabytes.
    Flows,
    /// Packet level, lossless: transfers cut into packets of at most `mtu` bytes cross input-
    /// queued switches whose buffers hold `buffer` bytes per link and virtual channel (one
    /// channel per hop of a route), with credit-based flow control; a packet that cannot move
    /// blocks those behind it in its buffer. A receiver slower than its link backs up the
    /// buffers on its senders' routes and slows traffic that shares them (paper 002). Not for
    /// WAN links (`Topology::Clusters`).
    Packets {
        /// Most bytes of one packet.
        mtu: usize,
        /// Bytes of each buffer; at least `mtu`.
        buffer: usize,
    },
}

/// How a Dragonfly routes between groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DragonflyRouting {
    /// Straight to the destination's group over their global link.
    Minimal,
    /// Through a random intermediate group first (Valiant): twice the global hops, but no
    /// single global link carries a whole group's traffic to another.
    Valiant,
    /// Each packet minimally unless the queue toward the minimal route, times its hops, is
    /// longer than toward a Valiant one (UGAL with the source router's queues), on the
    /// packet-level network; on the flow-level one, as Valiant.
    Adaptive,
}

/// A WAN link of [`Topology::Clusters`] changes its bandwidth at a given virtual time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WanChange {
    /// When, in virtual time since the start.
    pub at: Duration,
    /// Which link.
    pub link: WanLink,
    /// Its new bandwidth, bytes per second.
    pub bandwidth: f64,
}

/// A link of the WAN between clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WanLink {
    /// The link from one cluster to another.
    Between {
        /// Sending cluster.
        from: usize,
        /// Receiving cluster.
        to: usize,
    },
    /// What a rank takes in from other clusters.
    Into(Rank),
}

impl SimConfig {
    /// `ranks` on one switch with 100 Gb/s links, 0.5 us hops and 0.2 us per operation: an
    /// InfiniBand-class cluster.
    pub fn switch(ranks: usize) -> SimConfig {
        SimConfig {
            ranks,
            topology: Topology::Switch,
            network: NetworkModel::Flows,
            link_bandwidth: 12.5e9,
            hop_latency: Duration::from_nanos(500),
            overhead: Duration::from_nanos(200),
            header_bytes: 64,
            flow_above: 32 << 10,
            payload_free_above: None,
            slow_receivers: Vec::new(),
            max_regions: crate::FabricConfig::default().max_regions,
            stall_limit: Duration::from_secs(1),
        }
    }

    /// Checks the settings against each other.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(TransportError::InvalidArgument(what));
        if self.ranks == 0 || self.ranks > u32::MAX as usize {
            return bad(format!("a simulated job of {} ranks", self.ranks));
        }
        if !(self.link_bandwidth.is_finite() && self.link_bandwidth > 0.0) {
            return bad(format!("link bandwidth {}", self.link_bandwidth));
        }
        for &(rank, rate) in &self.slow_receivers {
            if rank as usize >= self.ranks || !(rate.is_finite() && rate > 0.0) {
                return bad(format!("slow receiver {rank} at rate {rate}"));
            }
        }
        if let NetworkModel::Packets { mtu, buffer } = self.network {
            if mtu == 0 || mtu > u32::MAX as usize || buffer < mtu {
                return bad(format!("packets of {mtu} bytes in buffers of {buffer}"));
            }
            if matches!(self.topology, Topology::Clusters { .. }) {
                return bad("the packet-level network over WAN links".into());
            }
        }
        match &self.topology {
            Topology::Switch => Ok(()),
            Topology::Dragonfly { .. } => {
                let d = self.dragonfly().expect("a Dragonfly");
                if d.p == 0 || d.a == 0 || d.h == 0 || d.ranks() < self.ranks {
                    return bad(format!(
                        "a Dragonfly of {} ranks for a job of {}",
                        d.ranks(),
                        self.ranks
                    ));
                }
                Ok(())
            }
            Topology::FatTree {
                leaf_ranks,
                oversubscription,
            } => {
                if *leaf_ranks == 0 || !(oversubscription.is_finite() && *oversubscription > 0.0) {
                    return bad(format!(
                        "fat tree of {leaf_ranks}-rank leaves, oversubscribed {oversubscription}"
                    ));
                }
                Ok(())
            }
            Topology::Clusters {
                cluster_ranks,
                wan_bandwidth,
                wan_changes,
                ..
            } => {
                let clusters = self.groups();
                let bad_bw = |b: f64| !(b.is_finite() && b > 0.0);
                if *cluster_ranks == 0 || bad_bw(*wan_bandwidth) {
                    return bad(format!(
                        "clusters of {cluster_ranks} ranks with {wan_bandwidth} B/s WAN links"
                    ));
                }
                for c in wan_changes {
                    if self.wan_link(c.link).is_none() || bad_bw(c.bandwidth) {
                        return bad(format!("WAN change {c:?} ({clusters} clusters)"));
                    }
                }
                Ok(())
            }
        }
    }

    /// The Dragonfly's shape, if the topology is one.
    fn dragonfly(&self) -> Option<super::dragonfly::Dragonfly> {
        match self.topology {
            Topology::Dragonfly {
                ranks_per_router,
                routers_per_group,
                globals_per_router,
                ..
            } => Some(super::dragonfly::Dragonfly {
                p: ranks_per_router,
                a: routers_per_group,
                h: globals_per_router,
            }),
            _ => None,
        }
    }

    /// Ranks per group (leaf switch or cluster).
    fn group_ranks(&self) -> usize {
        match &self.topology {
            Topology::Switch | Topology::Dragonfly { .. } => self.ranks,
            Topology::FatTree { leaf_ranks, .. } => *leaf_ranks,
            Topology::Clusters { cluster_ranks, .. } => *cluster_ranks,
        }
    }

    /// Groups (leaf switches or clusters); one for a single switch.
    pub(crate) fn groups(&self) -> usize {
        self.ranks.div_ceil(self.group_ranks().max(1))
    }

    /// The links of the network and their capacities in bytes per nanosecond: each rank's
    /// link in (`r`) and out (`ranks + r`); then for a fat tree each leaf's uplink
    /// (`2 * ranks + g`) and downlink (`2 * ranks + groups + g`); for clusters each directed
    /// link between two (`2 * ranks + from * groups + to`), then each rank's intake from
    /// other clusters (`2 * ranks + groups^2 + r`).
    pub(crate) fn link_capacities(&self) -> Vec<f64> {
        let (n, groups) = (self.ranks, self.groups());
        let per_ns = |bytes_per_s: f64| bytes_per_s / 1e9;
        let link = per_ns(self.link_bandwidth);
        let mut caps = vec![link; 2 * n];
        for &(rank, rate) in &self.slow_receivers {
            caps[n + rank as usize] = link * rate;
        }
        match &self.topology {
            Topology::Switch => {}
            Topology::Dragonfly { .. } => {
                let d = self.dragonfly().expect("a Dragonfly");
                caps.extend(vec![link; d.links()]);
            }
            Topology::FatTree {
                leaf_ranks,
                oversubscription,
            } => caps.extend(vec![
                link * *leaf_ranks as f64 / oversubscription;
                2 * groups
            ]),
            Topology::Clusters { wan_bandwidth, .. } => {
                caps.extend(vec![per_ns(*wan_bandwidth); groups * groups]);
                caps.extend(vec![f64::INFINITY; n]);
            }
        }
        caps
    }

    /// Per link, whether it joins groups (a Dragonfly's global links).
    pub(crate) fn global_links(&self) -> Vec<bool> {
        let mut global = vec![false; self.link_capacities().len()];
        if let Some(d) = self.dragonfly() {
            let first = 2 * self.ranks + d.groups() * d.a * d.a;
            global[first..].iter_mut().for_each(|g| *g = true);
        }
        global
    }

    /// The minimal route from `from` to `to` where packets choose between it and Valiant's
    /// (adaptive Dragonfly routing), with the ranks' own links.
    pub(crate) fn adaptive_minimal(&self, from: Rank, to: Rank) -> Option<Vec<u32>> {
        let routing = match self.topology {
            Topology::Dragonfly { routing, .. } => routing,
            _ => return None,
        };
        if routing != DragonflyRouting::Adaptive || from == to {
            return None;
        }
        self.dragonfly_route(from, to, DragonflyRouting::Minimal, 0)
    }

    /// A Dragonfly's route from `from` to `to` with the ranks' own links (`None` on another
    /// topology).
    fn dragonfly_route(
        &self,
        from: Rank,
        to: Rank,
        routing: DragonflyRouting,
        salt: u64,
    ) -> Option<Vec<u32>> {
        let d = self.dragonfly()?;
        let n = self.ranks;
        let mut links = vec![from];
        links.extend(d.route(2 * n, from as usize, to as usize, routing, salt));
        links.push((n + to as usize) as u32);
        Some(links)
    }

    /// The index of a WAN link (`None` if the topology has no such link).
    pub(crate) fn wan_link(&self, link: WanLink) -> Option<usize> {
        if !matches!(self.topology, Topology::Clusters { .. }) {
            return None;
        }
        let (n, groups) = (self.ranks, self.groups());
        match link {
            WanLink::Between { from, to } if from < groups && to < groups && from != to => {
                Some(2 * n + from * groups + to)
            }
            WanLink::Into(r) if (r as usize) < n => Some(2 * n + groups * groups + r as usize),
            _ => None,
        }
    }

    /// The links a transfer from `from` to `to` crosses and its latency in nanoseconds;
    /// `salt` (the transfer's ids) picks among routes where routing is random.
    pub(crate) fn route(&self, from: Rank, to: Rank, salt: u64) -> (Vec<u32>, u64) {
        if from == to {
            return (Vec::new(), 0);
        }
        let n = self.ranks;
        let hop = self.hop_latency.as_nanos() as u64;
        if let Topology::Dragonfly { routing, .. } = self.topology {
            let links = self
                .dragonfly_route(from, to, routing, salt)
                .expect("a Dragonfly");
            let latency = hop * links.len() as u64;
            return (links, latency);
        }
        let (from, to) = (from as usize, to as usize);
        let (gf, gt) = (from / self.group_ranks(), to / self.group_ranks());
        if gf == gt || self.topology == Topology::Switch {
            return (vec![from as u32, (n + to) as u32], 2 * hop);
        }
        let groups = self.groups();
        match &self.topology {
            Topology::Clusters { wan_latency, .. } => (
                vec![
                    from as u32,
                    (2 * n + gf * groups + gt) as u32,
                    (2 * n + groups * groups + to) as u32,
                    (n + to) as u32,
                ],
                2 * hop + wan_latency.as_nanos() as u64,
            ),
            _ => (
                vec![
                    from as u32,
                    (2 * n + gf) as u32,
                    (2 * n + groups + gt) as u32,
                    (n + to) as u32,
                ],
                4 * hop,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_cross_the_links_their_topology_has() {
        let mut cfg = SimConfig::switch(8);
        assert_eq!(cfg.route(1, 6, 0), (vec![1, 14], 1000));
        assert_eq!(cfg.route(3, 3, 0), (vec![], 0));
        cfg.topology = Topology::Clusters {
            cluster_ranks: 4,
            wan_bandwidth: 1e9,
            wan_latency: Duration::from_millis(10),
            wan_changes: vec![],
        };
        cfg.validate().unwrap();
        assert_eq!(cfg.groups(), 2);
        assert_eq!(cfg.route(1, 2, 0).0, vec![1, 10]);
        let (links, latency) = cfg.route(1, 6, 0);
        // Rank 1 out, cluster 0 to 1, rank 6's intake, rank 6 in.
        assert_eq!(links, vec![1, 17, 26, 14]);
        assert_eq!(latency, 10_001_000);
        let caps = cfg.link_capacities();
        assert_eq!(caps.len(), 16 + 4 + 8);
        assert_eq!(caps[17], 1.0);
        assert!(caps[26].is_infinite());
        assert_eq!(cfg.wan_link(WanLink::Between { from: 1, to: 0 }), Some(18));
        assert_eq!(cfg.wan_link(WanLink::Into(6)), Some(26));
        assert_eq!(cfg.wan_link(WanLink::Between { from: 1, to: 1 }), None);
        assert_eq!(cfg.wan_link(WanLink::Into(8)), None);
    }

    #[test]
    fn bad_settings_are_refused() {
        let mut cfg = SimConfig::switch(4);
        cfg.slow_receivers = vec![(4, 0.5)];
        assert!(cfg.validate().is_err());
        cfg.slow_receivers = vec![(3, 0.0)];
        assert!(cfg.validate().is_err());
        let cfg = SimConfig::switch(0);
        assert!(cfg.validate().is_err());
        let mut cfg = SimConfig::switch(4);
        cfg.network = NetworkModel::Packets {
            mtu: 4096,
            buffer: 1024,
        };
        assert!(cfg.validate().is_err());
        cfg.network = NetworkModel::Packets {
            mtu: 1024,
            buffer: 4096,
        };
        cfg.validate().unwrap();
        cfg.topology = Topology::Clusters {
            cluster_ranks: 2,
            wan_bandwidth: 1e9,
            wan_latency: Duration::from_millis(10),
            wan_changes: vec![],
        };
        assert!(cfg.validate().is_err());
    }
}

//! Who talks to whom (paper 003 §3.1, phases 1 and 2): each node picks up to [`PEERS`] local
//! peers at random in its cluster, and one potential global peer in every other cluster (the
//! node with the matching share of collective ranks), of which it keeps up to [`PEERS`].
//! Connections are two-way, so a node's peers are those it chose and those that chose it.
//! Every rank computes the same graphs from the same seed, so no message sets them up; a graph
//! that is not connected (locally within a cluster, or between clusters) is drawn again, as
//! the paper does before connecting.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// Peers a node picks (the paper's N, as in BitTorrent).
pub(crate) const PEERS: usize = 5;

/// Draws before giving up on a connected graph (the paper: usually one suffices).
const DRAWS: usize = 1000;

/// One peer of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Peer {
    /// The peer's node index (communicator rank).
    pub(crate) node: usize,
    /// In the same cluster.
    pub(crate) local: bool,
}

/// The peer graph of one multicast.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Each node's cluster (an index into `members`).
    pub(crate) cluster_of: Vec<usize>,
    /// Each cluster's nodes in ascending order (a node's place is its collective rank).
    pub(crate) members: Vec<Vec<usize>>,
    /// Each node's peers, ascending by node.
    pub(crate) peers: Vec<Vec<Peer>>,
}

impl Plan {
    /// The graph for nodes whose groups are `groups` (equal values: same cluster), drawn from
    /// `seed`.
    pub(crate) fn new(groups: &[u64], seed: u64) -> Plan {
        let n = groups.len();
        let mut ids: Vec<u64> = groups.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let cluster_of: Vec<usize> = groups
            .iter()
            .map(|g| ids.binary_search(g).unwrap_or(0))
            .collect();
        let mut members = vec![Vec::new(); ids.len()];
        for (node, &c) in cluster_of.iter().enumerate() {
            members[c].push(node);
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let mut adjacent = vec![std::collections::BTreeSet::new(); n];
        for nodes in &members {
            let edges = draw_connected(&mut rng, nodes.len(), |rng, edges| {
                local_edges(rng, nodes.len(), edges)
            });
            for (a, b) in edges {
                adjacent[nodes[a]].insert(nodes[b]);
                adjacent[nodes[b]].insert(nodes[a]);
            }
        }
        let global = draw_connected(&mut rng, members.len(), |rng, edges| {
            global_edges(rng, &members, edges)
        });
        for (a, b) in global {
            adjacent[a].insert(b);
            adjacent[b].insert(a);
        }
        let peers = adjacent
            .iter()
            .enumerate()
            .map(|(me, set)| {
                set.iter()
                    .map(|&node| Peer {
                        node,
                        local: cluster_of[node] == cluster_of[me],
                    })
                    .collect()
            })
            .collect();
        Plan {
            cluster_of,
            members,
            peers,
        }
    }

    /// `node`'s place in its cluster (its collective rank) and the cluster's size.
    pub(crate) fn place(&self, node: usize) -> (usize, usize) {
        let nodes = &self.members[self.cluster_of[node]];
        (nodes.binary_search(&node).unwrap_or(0), nodes.len())
    }
}

/// Draws edges with `draw` until the graph they make over `vertices` is connected (edges are
/// vertex pairs of the drawn graph; for the global graph, node pairs whose clusters are the
/// vertices, see `global_edges`).
fn draw_connected(
    rng: &mut StdRng,
    vertices: usize,
    mut draw: impl FnMut(&mut StdRng, &mut Vec<(usize, usize)>) -> Vec<(usize, usize)>,
) -> Vec<(usize, usize)> {
    let mut last = Vec::new();
    for _ in 0..DRAWS {
        let mut vertex_edges = Vec::new();
        last = draw(rng, &mut vertex_edges);
        if connected(vertices, &vertex_edges) {
            return last;
        }
    }
    // Beyond belief for the sizes this runs at (the paper: > 0.9999 per draw); the last draw
    // is kept, and a multicast over it may not complete, as the paper's would not.
    tracing::warn!("robber: no connected peer graph in {DRAWS} draws");
    last
}

/// Phase 1: each of `size` nodes of a cluster picks `min(size - 1, PEERS)` others.
fn local_edges(
    rng: &mut StdRng,
    size: usize,
    vertex_edges: &mut Vec<(usize, usize)>,
) -> Vec<(usize, usize)> {
    let mut edges = Vec::new();
    for me in 0..size {
        let mut others: Vec<usize> = (0..size).filter(|&o| o != me).collect();
        others.shuffle(rng);
        for &o in others.iter().take(PEERS) {
            edges.push((me, o));
        }
    }
    vertex_edges.extend(edges.iter().copied());
    edges
}

/// Phase 2: each node x picks, in every other cluster y, one node whose collective rank falls
/// in x's share of y's ranks, then keeps `PEERS` of those at random. Returns node pairs and
/// fills `cluster_edges` with the cluster pairs they join.
fn global_edges(
    rng: &mut StdRng,
    members: &[Vec<usize>],
    cluster_edges: &mut Vec<(usize, usize)>,
) -> Vec<(usize, usize)> {
    let mut edges = Vec::new();
    for (cx, xs) in members.iter().enumerate() {
        for (rx, &x) in xs.iter().enumerate() {
            let mut potential: Vec<(usize, usize)> = Vec::new();
            for (cy, ys) in members.iter().enumerate().filter(|&(cy, _)| cy != cx) {
                let lo = rx * ys.len() / xs.len();
                let hi = ((rx + 1) * ys.len() / xs.len()).max(lo + 1);
                let ry = lo + (rng_below(rng, hi - lo));
                potential.push((cy, ys[ry]));
            }
            potential.shuffle(rng);
            for &(cy, y) in potential.iter().take(PEERS) {
                edges.push((x, y));
                cluster_edges.push((cx, cy));
            }
        }
    }
    edges
}

fn rng_below(rng: &mut StdRng, n: usize) -> usize {
    use rand::Rng;
    rng.gen_range(0..n.max(1))
}

/// Whether `edges` connect all `vertices`.
fn connected(vertices: usize, edges: &[(usize, usize)]) -> bool {
    if vertices <= 1 {
        return true;
    }
    let mut parent: Vec<usize> = (0..vertices).collect();
    fn root(parent: &mut [usize], mut v: usize) -> usize {
        while parent[v] != v {
            parent[v] = parent[parent[v]];
            v = parent[v];
        }
        v
    }
    let mut parts = vertices;
    for &(a, b) in edges {
        let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
        if ra != rb {
            parent[ra] = rb;
            parts -= 1;
        }
    }
    parts == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graphs_are_symmetric_connected_and_spread() {
        for seed in 0..50 {
            // 3 clusters of 4, 1 and 12 nodes, interleaved ranks.
            let groups: Vec<u64> = (0..17)
                .map(|i| match i {
                    0..=3 => 10,
                    4 => 20,
                    _ => 30,
                })
                .collect();
            let plan = Plan::new(&groups, seed);
            assert_eq!(plan.members.len(), 3);
            for (me, peers) in plan.peers.iter().enumerate() {
                for p in peers {
                    assert!(plan.peers[p.node].iter().any(|q| q.node == me));
                    assert_eq!(p.local, plan.cluster_of[p.node] == plan.cluster_of[me]);
                }
                let locals = peers.iter().filter(|p| p.local).count();
                let (_, size) = plan.place(me);
                assert!(locals >= (size - 1).min(PEERS), "{me}: {locals} of {size}");
                // One peer in every other cluster at least from its own choice (3 < PEERS).
                let clusters: std::collections::BTreeSet<usize> = peers
                    .iter()
                    .filter(|p| !p.local)
                    .map(|p| plan.cluster_of[p.node])
                    .collect();
                assert_eq!(clusters.len(), 2, "node {me}");
            }
            // Every cluster is connected within itself.
            for nodes in &plan.members {
                let edges: Vec<(usize, usize)> = nodes
                    .iter()
                    .enumerate()
                    .flat_map(|(i, &a)| {
                        plan.peers[a]
                            .iter()
                            .filter_map(|p| nodes.iter().position(|&b| b == p.node))
                            .map(move |j| (i, j))
                    })
                    .collect();
                assert!(connected(nodes.len(), &edges));
            }
        }
        // The same seed, the same graph; a single node has no peers.
        let g = [1u64, 1, 2, 2, 3];
        assert_eq!(Plan::new(&g, 9).peers, Plan::new(&g, 9).peers);
        assert!(Plan::new(&[5], 1).peers[0].is_empty());
    }
}

//! The protocol alone, run to completion over a simulated network: messages between two
//! nodes arrive in order, everything else in a random order drawn from a seed (gets and
//! messages interleaved arbitrarily). Checks what the paper proves (every node ends with
//! every piece, §3.3) and what it designs for (each piece crosses into each cluster once).

use std::collections::{BTreeMap, VecDeque};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::node::{Action, Node, Params};
use super::pieces::Pieces;
use super::plan::Plan;
use super::wire::{decode, encode, Msg};

struct Outcome {
    /// Gets between clusters, per (piece, receiving cluster).
    crossings: BTreeMap<(usize, usize), usize>,
    /// Pieces each node got from global peers.
    fetched_globally: Vec<usize>,
    steps: usize,
}

/// Runs a multicast of `pieces` pieces from `root` over nodes in `groups`; `slow` nodes see
/// their gets complete `slowness` times less often.
fn simulate(
    groups: &[u64],
    root: usize,
    pieces: usize,
    steal: bool,
    seed: u64,
    slow: &[usize],
    slowness: u32,
) -> Outcome {
    let n = groups.len();
    let plan = Plan::new(groups, seed);
    let params = Params {
        pieces,
        steal,
        gets_per_peer: 2,
    };
    let root_cluster = plan.cluster_of[root];
    let key = rdcoll_transport::RemoteRegion {
        rank: 0,
        key: rdcoll_transport::RegionKey(0),
        len: 0,
    };
    let mut nodes: Vec<Node> = (0..n)
        .map(|me| {
            let have = if me == root {
                Pieces::all(pieces)
            } else {
                Pieces::none(pieces)
            };
            let cluster_has = if plan.cluster_of[me] == root_cluster {
                Pieces::all(pieces)
            } else {
                Pieces::none(pieces)
            };
            let stagger = super::driver::stagger(&plan, root, me);
            Node::new(me, &plan, have, &cluster_has, stagger, params, seed)
        })
        .collect();
    let mut channels: BTreeMap<(usize, usize), VecDeque<Vec<u8>>> = BTreeMap::new();
    let mut gets: Vec<(usize, usize, usize)> = Vec::new(); // (node, from, piece)
    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(1));
    let mut outcome = Outcome {
        crossings: BTreeMap::new(),
        fetched_globally: vec![0; n],
        steps: 0,
    };
    let run = |me: usize,
               actions: Vec<Action>,
               channels: &mut BTreeMap<_, VecDeque<_>>,
               gets: &mut Vec<(usize, usize, usize)>,
               nodes: &[Node]| {
        for a in actions {
            match a {
                Action::Send { to, msg } => {
                    // Through the wire format, as the driver sends it.
                    channels
                        .entry((me, to))
                        .or_default()
                        .push_back(encode(&msg, &key));
                }
                Action::Get { from, piece } => {
                    assert!(
                        nodes[from].have().contains(piece),
                        "node {me} got piece {piece} from {from}, which does not hold it"
                    );
                    gets.push((me, from, piece));
                }
            }
        }
    };
    for me in 0..n {
        let a = nodes[me].start();
        run(me, a, &mut channels, &mut gets, &nodes);
    }
    loop {
        outcome.steps += 1;
        assert!(outcome.steps < 10_000_000, "no end in sight");
        let busy: Vec<(usize, usize)> = channels
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&k, _)| k)
            .collect();
        if busy.is_empty() && gets.is_empty() {
            break;
        }
        let take_get = !gets.is_empty() && (busy.is_empty() || rng.gen_bool(0.5));
        if take_get {
            let i = rng.gen_range(0..gets.len());
            let (me, from, piece) = gets[i];
            if slow.contains(&me) && rng.gen_range(0..slowness) != 0 {
                continue;
            }
            gets.swap_remove(i);
            if plan.cluster_of[me] != plan.cluster_of[from] {
                *outcome
                    .crossings
                    .entry((piece, plan.cluster_of[me]))
                    .or_default() += 1;
                outcome.fetched_globally[me] += 1;
            }
            let a = nodes[me].on_piece(from, piece).expect("a piece asked for");
            run(me, a, &mut channels, &mut gets, &nodes);
        } else {
            let (from, to) = busy[rng.gen_range(0..busy.len())];
            let bytes = channels
                .get_mut(&(from, to))
                .and_then(|q| q.pop_front())
                .unwrap();
            let (msg, _) = decode(&bytes, pieces).expect("a well-formed message");
            let a = nodes[to]
                .on_message(from, msg)
                .unwrap_or_else(|e| panic!("node {to}: {e:?}"));
            run(to, a, &mut channels, &mut gets, &nodes);
        }
    }
    for (me, node) in nodes.iter().enumerate() {
        assert!(node.have().is_full(), "node {me} ends without every piece");
        assert!(node.finished(), "node {me} did not finish");
    }
    outcome
}

fn groups_of(sizes: &[usize]) -> Vec<u64> {
    sizes
        .iter()
        .enumerate()
        .flat_map(|(c, &s)| std::iter::repeat_n(c as u64 + 100, s))
        .collect()
}

#[test]
fn every_node_gets_every_piece_and_each_piece_crosses_once_per_cluster() {
    let mut seed = 0;
    for sizes in [
        vec![1, 1],
        vec![3, 2],
        vec![1, 6, 4],
        vec![2, 2, 2, 2],
        vec![6, 1, 5, 3, 2],
        vec![4, 4, 4, 4, 4, 4],
    ] {
        let groups = groups_of(&sizes);
        let n = groups.len();
        for pieces in [1, 7, 13, 64, 101] {
            for steal in [true, false] {
                seed += 1;
                let root = (seed as usize * 7) % n;
                let out = simulate(&groups, root, pieces, steal, seed, &[], 1);
                let root_cluster = Plan::new(&groups, seed).cluster_of[root];
                for c in (0..sizes.len()).filter(|&c| c != root_cluster) {
                    for piece in 0..pieces {
                        assert_eq!(
                            out.crossings.get(&(piece, c)),
                            Some(&1),
                            "sizes {sizes:?}, piece {piece} into cluster {c}, steal {steal}"
                        );
                    }
                }
                assert!(out.steps > 0);
            }
        }
    }
}

#[test]
fn slow_nodes_fetch_less_with_stealing_than_without() {
    // The root alone, and a cluster of four in which one node's gets are 8x slower. MOB
    // gives it a fixed quarter; Robber's faster nodes steal most of it.
    let groups = groups_of(&[1, 4]);
    let (mut robber, mut mob) = (0, 0);
    for seed in 0..10 {
        robber += simulate(&groups, 0, 200, true, seed, &[4], 8).fetched_globally[4];
        mob += simulate(&groups, 0, 200, false, seed, &[4], 8).fetched_globally[4];
    }
    assert_eq!(mob, 10 * 50, "MOB's work is fixed: a quarter of 200 pieces");
    // Here the fast nodes' own local exchange competes with their stealing (10 seeds: the
    // slow node fetched 26-30 % of MOB's share under Robber).
    assert!(
        robber < mob * 3 / 4,
        "robber's slow node fetched {robber}, MOB's {mob}"
    );
}

#[test]
fn messages_out_of_step_are_refused() {
    let groups = groups_of(&[2, 1]);
    let plan = Plan::new(&groups, 1);
    let params = Params {
        pieces: 4,
        steal: true,
        gets_per_peer: 2,
    };
    let mut node = Node::new(
        1,
        &plan,
        Pieces::none(4),
        &Pieces::all(4),
        (0, 1),
        params,
        1,
    );
    node.start();
    // Node 2 is in another cluster: it may not steal; a piece never asked for is refused.
    assert!(node.on_message(2, Msg::Steal).is_err());
    assert!(node.on_piece(0, 3).is_err());
    assert!(node.on_message(7, Msg::Done).is_err());
    node.on_message(0, Msg::Stop).unwrap();
    assert!(node.on_message(0, Msg::Have(1)).is_err());
    // Malformed bytes do not decode.
    assert!(decode(&[3, 9, 0, 0, 0], 4).is_none());
    assert!(decode(&[4, 0], 4).is_none());
    assert!(decode(&[99], 4).is_none());
    assert!(decode(&[], 4).is_none());
}

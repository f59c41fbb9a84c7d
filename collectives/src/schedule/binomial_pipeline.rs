//! The binomial pipeline (paper 000 Section 4.4; paper 001 Section 3 and Appendix A).
//!
//! With `n = 2^l` nodes each node is a vertex of an `l`-dimensional hypercube. At step `j`
//! every vertex exchanges with its neighbour along direction `j % l`; the root (vertex 0)
//! sends block `j` (then, once out of blocks, the last block), every other vertex sends the
//! highest-numbered block it received before step `j`, and nobody sends to the root. Which
//! block that is follows from the receiver's id alone: rotate the receiver right by `j % l`
//! (the paper's `σ`); if the result is 1 the sender is the root (block `min(j, k-1)`); if its
//! lowest bit is 0 the sender sends block `j - l`; otherwise, with `r` the position of its
//! lowest set bit above bit 0, block `min(j + r - l, k - 1)` (nothing when negative). Every
//! node has every block after exactly `l + k - 1` steps.
//!
//! When `n` is not a power of two, `l = floor(log2 n)` and the `n - 2^l` nodes above `2^l`
//! share vertices with nodes `1..=n-2^l` (node `2^l + v - 1` is the twin of vertex `v`). A
//! vertex still sends and receives at most one block per step to and from other vertices:
//! the twin that holds the block to send sends it, the other receives the incoming block for
//! the vertex and, in the same step, passes its partner the highest block only it has
//! (Appendix A). When the vertex has nothing to send, the twin with fewer blocks receives and
//! hands its partner what only it has. After the hypercube's `l + k - 1` steps one more step
//! lets the twins trade the block each is missing: `l + k` steps in all.
//!
//! Everything a node needs is computed from (node, n, step, k): its own vertex's history
//! (which twin holds which block) and, for the twins it sends to or receives from, theirs.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use super::{floor_log2, Schedule, Step, Transfer};

/// The binomial-pipeline schedule.
#[derive(Debug)]
pub struct BinomialPipeline {
    n: usize,
    k: usize,
    /// `floor(log2 n)`: the hypercube's dimension.
    l: usize,
    /// `2^l`: vertices.
    vertices: usize,
    /// Each twin vertex's history, computed when first needed.
    histories: RefCell<HashMap<usize, Rc<Vec<TwinStep>>>>,
}

/// What the two nodes of a shared vertex do at one step.
#[derive(Debug, Clone, Copy, Default)]
struct TwinStep {
    /// Which twin sends the vertex's outgoing block (`true`: the primary, node `v`).
    sender_is_primary: bool,
    /// Which twin receives the vertex's incoming block.
    receiver_is_primary: bool,
    /// Block the primary passes its twin, and block the twin passes the primary.
    primary_to_twin: Option<usize>,
    twin_to_primary: Option<usize>,
}

impl BinomialPipeline {
    /// For `n` nodes and `k` blocks.
    pub fn new(n: usize, k: usize) -> Self {
        let l = floor_log2(n.max(1));
        BinomialPipeline {
            n,
            k: k.max(1),
            l,
            vertices: 1 << l,
            histories: RefCell::new(HashMap::new()),
        }
    }

    /// Steps of the hypercube part.
    fn vertex_steps(&self) -> usize {
        if self.n < 2 {
            0
        } else {
            self.l + self.k - 1
        }
    }

    fn vertex_of(&self, node: usize) -> usize {
        if node < self.vertices {
            node
        } else {
            node + 1 - self.vertices
        }
    }

    /// The twin node sharing vertex `v`, if it has one.
    fn twin_of_vertex(&self, v: usize) -> Option<usize> {
        let t = v + self.vertices - 1;
        (v >= 1 && t < self.n).then_some(t)
    }

    /// The block vertex `v` sends at step `j`, and to which vertex.
    fn vertex_send(&self, v: usize, j: usize) -> Option<(usize, usize)> {
        if self.l == 0 || j >= self.vertex_steps() {
            return None;
        }
        let (l, k) = (self.l, self.k);
        let dir = j % l;
        let to = v ^ (1 << dir);
        if to == 0 {
            return None;
        }
        // The receiver rotated right by `dir` (l-bit): the paper's σ.
        let mask = (1usize << l) - 1;
        let rotated = ((to >> dir) | (to << (l - dir))) & mask;
        let block = if rotated == 1 {
            j.min(k - 1)
        } else if rotated & 1 == 0 {
            j.checked_sub(l)?
        } else {
            let r = (rotated >> 1).trailing_zeros() as usize + 1;
            (j + r).checked_sub(l)?.min(k - 1)
        };
        Some((to, block))
    }

    /// The block vertex `v` receives at step `j`, and from which vertex.
    fn vertex_recv(&self, v: usize, j: usize) -> Option<(usize, usize)> {
        if self.l == 0 {
            return None;
        }
        let from = v ^ (1 << (j % self.l));
        match self.vertex_send(from, j) {
            Some((to, block)) if to == v => Some((from, block)),
            _ => None,
        }
    }

    /// Vertex `v`'s twin history, one entry per step (the last is the final trade).
    fn history(&self, v: usize) -> Rc<Vec<TwinStep>> {
        if let Some(h) = self.histories.borrow().get(&v) {
            return h.clone();
        }
        let h = Rc::new(self.simulate(v));
        self.histories.borrow_mut().insert(v, h.clone());
        h
    }

    fn simulate(&self, v: usize) -> Vec<TwinStep> {
        let k = self.k;
        let (mut p, mut t) = (vec![false; k], vec![false; k]);
        let highest_only = |a: &[bool], b: &[bool]| (0..k).rev().find(|&i| a[i] && !b[i]);
        let count = |a: &[bool]| a.iter().filter(|&&x| x).count();
        let mut out = Vec::with_capacity(self.vertex_steps() + 1);
        for j in 0..self.vertex_steps() {
            let send = self.vertex_send(v, j).map(|(_, b)| b);
            let recv = self.vertex_recv(v, j).map(|(_, b)| b);
            // The twin holding the outgoing block sends it; the other one receives.
            let sender_is_primary = send.is_none_or(|b| p[b] || !t[b]);
            let receiver_is_primary = match send {
                Some(_) => !sender_is_primary,
                None => count(&t) >= count(&p),
            };
            let mut s = TwinStep {
                sender_is_primary,
                receiver_is_primary,
                ..TwinStep::default()
            };
            match (send.is_some(), recv.is_some()) {
                (true, _) => {
                    // The receiver (free to send) passes the sender what only it has.
                    if receiver_is_primary {
                        s.primary_to_twin = highest_only(&p, &t);
                    } else {
                        s.twin_to_primary = highest_only(&t, &p);
                    }
                }
                (false, true) => {
                    // The receiver takes the incoming block and passes its partner one.
                    if receiver_is_primary {
                        s.primary_to_twin = highest_only(&p, &t);
                    } else {
                        s.twin_to_primary = highest_only(&t, &p);
                    }
                }
                (false, false) => {
                    s.primary_to_twin = highest_only(&p, &t);
                    s.twin_to_primary = highest_only(&t, &p);
                }
            }
            // Blocks received in a step can be sent from the next one on.
            if let Some(b) = recv {
                if receiver_is_primary {
                    p[b] = true;
                } else {
                    t[b] = true;
                }
            }
            if let Some(b) = s.primary_to_twin {
                t[b] = true;
            }
            if let Some(b) = s.twin_to_primary {
                p[b] = true;
            }
            out.push(s);
        }
        // The final trade: each passes the other the highest block only it has.
        out.push(TwinStep {
            primary_to_twin: highest_only(&p, &t),
            twin_to_primary: highest_only(&t, &p),
            ..TwinStep::default()
        });
        out
    }

    /// The node of vertex `v` that sends (`sending`) or receives its external block at `j`.
    fn node_of(&self, v: usize, j: usize, sending: bool) -> usize {
        match self.twin_of_vertex(v) {
            None => v,
            Some(twin) => {
                let s = self.history(v)[j];
                let primary = if sending {
                    s.sender_is_primary
                } else {
                    s.receiver_is_primary
                };
                if primary {
                    v
                } else {
                    twin
                }
            }
        }
    }
}

impl Schedule for BinomialPipeline {
    fn size(&self) -> usize {
        self.n
    }
    fn blocks(&self) -> usize {
        self.k
    }
    fn steps(&self) -> usize {
        if self.n < 2 {
            0
        } else if self.n == self.vertices {
            self.vertex_steps()
        } else {
            self.vertex_steps() + 1
        }
    }

    fn step(&self, node: usize, j: usize) -> Step {
        if node >= self.n || j >= self.steps() {
            return Step::default();
        }
        let v = self.vertex_of(node);
        let twin = self.twin_of_vertex(v);
        let mut step = Step::default();
        if j < self.vertex_steps() {
            if let Some((to, block)) = self.vertex_send(v, j) {
                if self.node_of(v, j, true) == node {
                    let peer = self.node_of(to, j, false);
                    step.send = Some(Transfer { peer, block });
                }
            }
            if let Some((from, block)) = self.vertex_recv(v, j) {
                if self.node_of(v, j, false) == node {
                    let peer = self.node_of(from, j, true);
                    step.recv = Some(Transfer { peer, block });
                }
            }
        }
        if let Some(t) = twin {
            let s = self.history(v)[j];
            let primary = node == v;
            let (mine, theirs) = if primary {
                (s.primary_to_twin, s.twin_to_primary)
            } else {
                (s.twin_to_primary, s.primary_to_twin)
            };
            let partner = if primary { t } else { v };
            if let Some(block) = mine {
                debug_assert!(step.send.is_none(), "a twin sends twice in one step");
                step.send = Some(Transfer {
                    peer: partner,
                    block,
                });
            }
            if let Some(block) = theirs {
                debug_assert!(step.recv.is_none(), "a twin receives twice in one step");
                step.recv = Some(Transfer {
                    peer: partner,
                    block,
                });
            }
        }
        step
    }
}

//! Binomial tree (paper 000 Figure 3 left, paper 001 Section 3): whole messages, block by
//! block. In stage `t` (steps `t*k .. (t+1)*k`) every node below `2^t` sends all `k` blocks to
//! the node `2^t` above it: `k * ceil(log2 n)` steps.

use super::{ceil_log2, Schedule, Step, Transfer};

/// The binomial-tree schedule.
#[derive(Debug, Clone)]
pub struct BinomialTree {
    n: usize,
    k: usize,
}

impl BinomialTree {
    /// For `n` nodes and `k` blocks.
    pub fn new(n: usize, k: usize) -> Self {
        BinomialTree { n, k: k.max(1) }
    }
}

impl Schedule for BinomialTree {
    fn size(&self) -> usize {
        self.n
    }
    fn blocks(&self) -> usize {
        self.k
    }
    fn steps(&self) -> usize {
        self.k * ceil_log2(self.n)
    }
    fn step(&self, node: usize, step: usize) -> Step {
        if step >= self.steps() {
            return Step::default();
        }
        let (stage, block) = (step / self.k, step % self.k);
        let half = 1usize << stage;
        let send = (node < half && node + half < self.n).then_some(Transfer {
            peer: node + half,
            block,
        });
        let recv = (node >= half && node < 2 * half).then(|| Transfer {
            peer: node - half,
            block,
        });
        Step { send, recv }
    }
}

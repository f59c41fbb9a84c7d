//! Chain send (paper 001 Section 3), a bucket brigade: at step `s` node `i` relays block
//! `s - i` to node `i + 1`: `k + n - 2` steps.

use super::{Schedule, Step, Transfer};

/// The chain schedule.
#[derive(Debug, Clone)]
pub struct Chain {
    n: usize,
    k: usize,
}

impl Chain {
    /// For `n` nodes and `k` blocks.
    pub fn new(n: usize, k: usize) -> Self {
        Chain { n, k: k.max(1) }
    }
}

impl Schedule for Chain {
    fn size(&self) -> usize {
        self.n
    }
    fn blocks(&self) -> usize {
        self.k
    }
    fn steps(&self) -> usize {
        if self.n < 2 {
            0
        } else {
            self.k + self.n - 2
        }
    }
    fn step(&self, node: usize, step: usize) -> Step {
        if step >= self.steps() {
            return Step::default();
        }
        // Node i sends block s - i (to i + 1) and receives block s - i + 1 (from i - 1).
        let send = (node + 1 < self.n && step >= node && step - node < self.k).then(|| Transfer {
            peer: node + 1,
            block: step - node,
        });
        let recv = (node >= 1 && step + 1 >= node && step + 1 - node < self.k).then(|| Transfer {
            peer: node - 1,
            block: step + 1 - node,
        });
        Step { send, recv }
    }
}

//! Sequential send (paper 001 Section 3): the root sends every block to node 1, then every
//! block to node 2, and so on: `(n - 1) * k` steps, all of them the root's.

use super::{Schedule, Step, Transfer};

/// The sequential-send schedule.
#[derive(Debug, Clone)]
pub struct Sequential {
    n: usize,
    k: usize,
}

impl Sequential {
    /// For `n` nodes and `k` blocks.
    pub fn new(n: usize, k: usize) -> Self {
        Sequential { n, k: k.max(1) }
    }
}

impl Schedule for Sequential {
    fn size(&self) -> usize {
        self.n
    }
    fn blocks(&self) -> usize {
        self.k
    }
    fn steps(&self) -> usize {
        self.n.saturating_sub(1) * self.k
    }
    fn step(&self, node: usize, step: usize) -> Step {
        if step >= self.steps() {
            return Step::default();
        }
        let (target, block) = (1 + step / self.k, step % self.k);
        Step {
            send: (node == 0).then_some(Transfer {
                peer: target,
                block,
            }),
            recv: (node == target).then_some(Transfer { peer: 0, block }),
        }
    }
}

//! Broadcast schedules of the RDMC family (paper 000 Section 4.3-4.4, paper 001 Section 3 and
//! Appendix A): who sends which block to whom at which step. Each is a pure function of the
//! node's index (0 is the root), the group size, the step and the number of blocks, kept apart
//! from its execution (`crate::bcast::rdmc`) so that it can be checked exhaustively
//! ([`check`]) and later driven by a simulated fabric.

mod binomial_pipeline;
mod binomial_tree;
mod chain;
mod check;
mod hybrid;
mod sequential;

pub use binomial_pipeline::BinomialPipeline;
pub use binomial_tree::BinomialTree;
pub use chain::Chain;
pub use check::{check, Violation};
pub use hybrid::Hybrid;
pub use sequential::Sequential;

/// One block moving between two nodes of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// The other node: the target of a send, the source of a receive.
    pub peer: usize,
    /// Which block.
    pub block: usize,
}

/// What a node does at one step: at most one send and one receive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Step {
    /// The block this node sends, and to whom.
    pub send: Option<Transfer>,
    /// The block this node receives, and from whom.
    pub recv: Option<Transfer>,
}

/// A broadcast schedule over nodes `0..size` (node 0 holds the message) of `blocks` blocks.
pub trait Schedule {
    /// Nodes in the group.
    fn size(&self) -> usize;
    /// Blocks in the message (at least 1).
    fn blocks(&self) -> usize;
    /// Steps until every node has every block.
    fn steps(&self) -> usize;
    /// What `node` does at `step` (nothing past the last step).
    fn step(&self, node: usize, step: usize) -> Step;
}

/// `ceil(log2(n))` for `n >= 1`.
pub(crate) fn ceil_log2(n: usize) -> usize {
    (usize::BITS - n.saturating_sub(1).leading_zeros()) as usize
}

/// `floor(log2(n))` for `n >= 1`.
pub(crate) fn floor_log2(n: usize) -> usize {
    (usize::BITS - 1 - n.max(1).leading_zeros()) as usize
}

/// The algorithms, by the names `RDCOLL_BCAST_ALGORITHM` and `--algorithm` use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// The root sends every block to every node in turn.
    Sequential,
    /// A bucket brigade: each node relays each block to the next.
    Chain,
    /// Whole messages down a binomial tree.
    BinomialTree,
    /// Blocks pipelined over a hypercube (the default for large messages).
    BinomialPipeline,
    /// A binomial pipeline among group leaders, then one inside each group.
    Hybrid,
}

impl Algorithm {
    /// Every algorithm, in the order the papers introduce them.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::Sequential,
        Algorithm::Chain,
        Algorithm::BinomialTree,
        Algorithm::BinomialPipeline,
        Algorithm::Hybrid,
    ];

    /// The name used in settings and output.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sequential => "sequential",
            Algorithm::Chain => "chain",
            Algorithm::BinomialTree => "binomial_tree",
            Algorithm::BinomialPipeline => "binomial_pipeline",
            Algorithm::Hybrid => "hybrid",
        }
    }

    /// The algorithm with this name (also `tree` and `pipeline`).
    pub fn from_name(s: &str) -> Option<Algorithm> {
        Some(match s {
            "sequential" => Algorithm::Sequential,
            "chain" => Algorithm::Chain,
            "binomial_tree" | "tree" => Algorithm::BinomialTree,
            "binomial_pipeline" | "pipeline" => Algorithm::BinomialPipeline,
            "hybrid" => Algorithm::Hybrid,
            _ => return None,
        })
    }

    /// This algorithm's schedule for `size` nodes and `blocks` blocks; `groups` gives each
    /// node's group for [`Algorithm::Hybrid`] (ignored by the others).
    pub fn schedule(self, size: usize, blocks: usize, groups: &[usize]) -> Box<dyn Schedule> {
        match self {
            Algorithm::Sequential => Box::new(Sequential::new(size, blocks)),
            Algorithm::Chain => Box::new(Chain::new(size, blocks)),
            Algorithm::BinomialTree => Box::new(BinomialTree::new(size, blocks)),
            Algorithm::BinomialPipeline => Box::new(BinomialPipeline::new(size, blocks)),
            Algorithm::Hybrid => Box::new(Hybrid::new(groups, blocks)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs() {
        assert_eq!(
            (ceil_log2(1), ceil_log2(2), ceil_log2(3), ceil_log2(8)),
            (0, 1, 2, 3)
        );
        assert_eq!(
            (floor_log2(1), floor_log2(3), floor_log2(8), floor_log2(9)),
            (0, 1, 3, 3)
        );
    }

    #[test]
    fn names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::from_name(a.name()), Some(a));
        }
        assert_eq!(Algorithm::from_name("nonsense"), None);
    }
}

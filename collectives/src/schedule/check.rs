//! The exhaustive check every schedule must pass (run in CI for group sizes 2-64 and 1-32
//! blocks): sender and receiver agree on each transfer, a node only sends a block it already
//! has, no node receives a block twice, and every node ends with every block.

use super::Schedule;

/// The first way a schedule went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// `node`'s send at `step` names a peer that does not expect it (or a node outside the
    /// group, or itself).
    Disagree {
        /// The step.
        step: usize,
        /// The sender.
        node: usize,
    },
    /// `node` sends `block` at `step` before it has it.
    SendsMissing {
        /// The step.
        step: usize,
        /// The sender.
        node: usize,
        /// The block it does not have yet.
        block: usize,
    },
    /// `node` receives `block` a second time at `step`.
    Twice {
        /// The step.
        step: usize,
        /// The receiver.
        node: usize,
        /// The block it already had.
        block: usize,
    },
    /// `node` lacks `block` when the schedule ends.
    Incomplete {
        /// The node.
        node: usize,
        /// The block it never got.
        block: usize,
    },
    /// `node` does something after the last step.
    PastTheEnd {
        /// The node.
        node: usize,
    },
}

/// Runs `s` step by step over all nodes and reports the first violation.
pub fn check(s: &dyn Schedule) -> Result<(), Violation> {
    let (n, k) = (s.size(), s.blocks());
    let mut has = vec![vec![false; k]; n];
    if n > 0 {
        has[0].iter_mut().for_each(|b| *b = true);
    }
    for step in 0..s.steps() {
        let plans: Vec<_> = (0..n).map(|node| s.step(node, step)).collect();
        for (node, plan) in plans.iter().enumerate() {
            if let Some(t) = plan.send {
                let agreed = t.peer < n
                    && t.peer != node
                    && plans[t.peer]
                        .recv
                        .is_some_and(|r| r.peer == node && r.block == t.block);
                if !agreed {
                    return Err(Violation::Disagree { step, node });
                }
                if t.block >= k || !has[node][t.block] {
                    return Err(Violation::SendsMissing {
                        step,
                        node,
                        block: t.block,
                    });
                }
            }
            if let Some(r) = plan.recv {
                let agreed = r.peer < n
                    && plans[r.peer]
                        .send
                        .is_some_and(|t| t.peer == node && t.block == r.block);
                if !agreed {
                    return Err(Violation::Disagree { step, node: r.peer });
                }
            }
        }
        for (node, plan) in plans.iter().enumerate() {
            if let Some(r) = plan.recv {
                if has[node][r.block] {
                    return Err(Violation::Twice {
                        step,
                        node,
                        block: r.block,
                    });
                }
                has[node][r.block] = true;
            }
        }
    }
    for (node, held) in has.iter().enumerate() {
        let after = s.step(node, s.steps());
        if after.send.is_some() || after.recv.is_some() {
            return Err(Violation::PastTheEnd { node });
        }
        if let Some(block) = held.iter().position(|&b| !b) {
            return Err(Violation::Incomplete { node, block });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;

    fn all_sizes(
        name: &str,
        make: impl Fn(usize, usize) -> Box<dyn Schedule>,
        steps: impl Fn(usize, usize) -> usize,
    ) {
        for n in 1..=64 {
            for k in 1..=32 {
                let s = make(n, k);
                assert_eq!(s.steps(), steps(n, k), "{name}: steps for n={n}, k={k}");
                if let Err(v) = check(s.as_ref()) {
                    panic!("{name}, n={n}, k={k}: {v:?}");
                }
            }
        }
    }

    #[test]
    fn sequential_is_sound_for_every_size() {
        all_sizes(
            "sequential",
            |n, k| Box::new(Sequential::new(n, k)),
            |n, k| (n - 1) * k,
        );
    }

    #[test]
    fn chain_is_sound_for_every_size() {
        all_sizes(
            "chain",
            |n, k| Box::new(Chain::new(n, k)),
            |n, k| if n < 2 { 0 } else { k + n - 2 },
        );
    }

    #[test]
    fn binomial_tree_is_sound_for_every_size() {
        all_sizes(
            "binomial tree",
            |n, k| Box::new(BinomialTree::new(n, k)),
            |n, k| k * ceil_log2(n),
        );
    }

    /// Exactly `l + k - 1` steps for `n = 2^l`, one more otherwise (paper 000 Section 4.4,
    /// paper 001 Appendix A).
    #[test]
    fn binomial_pipeline_is_sound_and_takes_l_plus_k_minus_1_steps() {
        all_sizes(
            "binomial pipeline",
            |n, k| Box::new(BinomialPipeline::new(n, k)),
            |n, k| match n {
                1 => 0,
                n if n.is_power_of_two() => floor_log2(n) + k - 1,
                n => floor_log2(n) + k,
            },
        );
    }

    #[test]
    fn hybrid_is_sound_for_every_grouping_shape() {
        for n in 1..=40 {
            for k in [1, 2, 3, 7, 16] {
                for g in 1..=n {
                    // Contiguous groups of `g`, and the same count dealt round robin.
                    let contiguous: Vec<usize> = (0..n).map(|i| i / g).collect();
                    let dealt: Vec<usize> = (0..n).map(|i| i % g).collect();
                    for groups in [contiguous, dealt] {
                        let s = Hybrid::new(&groups, k);
                        if let Err(v) = check(&s) {
                            panic!("hybrid, groups {groups:?}, k={k}: {v:?}");
                        }
                    }
                }
            }
        }
    }

    /// Paper 000 Figure 3 (centre), 8 nodes and 3 blocks: the root sends blocks 0, 1, 2 in
    /// the first three steps along directions 0, 1, 2, and all finish in 3 + 3 - 1 = 5 steps.
    #[test]
    fn binomial_pipeline_matches_the_papers_eight_node_example() {
        let s = BinomialPipeline::new(8, 3);
        assert_eq!(s.steps(), 5);
        let root: Vec<_> = (0..5).map(|j| s.step(0, j).send).collect();
        assert_eq!(root[0], Some(Transfer { peer: 1, block: 0 }));
        assert_eq!(root[1], Some(Transfer { peer: 2, block: 1 }));
        assert_eq!(root[2], Some(Transfer { peer: 4, block: 2 }));
        // Step 1: node 1 relays block 0 along direction 1 to node 3.
        assert_eq!(s.step(1, 1).send, Some(Transfer { peer: 3, block: 0 }));
        // With one block the pipeline is a binomial tree: log2(8) = 3 steps.
        assert_eq!(BinomialPipeline::new(8, 1).steps(), 3);
    }

    #[test]
    fn the_check_catches_broken_schedules() {
        /// Chain without its last step.
        struct Short(Chain);
        impl Schedule for Short {
            fn size(&self) -> usize {
                self.0.size()
            }
            fn blocks(&self) -> usize {
                self.0.blocks()
            }
            fn steps(&self) -> usize {
                self.0.steps() - 1
            }
            fn step(&self, node: usize, step: usize) -> Step {
                if step < self.steps() {
                    self.0.step(node, step)
                } else {
                    Step::default()
                }
            }
        }
        assert!(matches!(
            check(&Short(Chain::new(4, 3))),
            Err(Violation::Incomplete { .. })
        ));
    }
}

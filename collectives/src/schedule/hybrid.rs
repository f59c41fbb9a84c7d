//! Hybrid (paper 000 Section 4.3, paper 001 Section 3): nodes are grouped (by host, or by
//! `RDCOLL_CLUSTER`); a binomial pipeline among the group leaders (the root leads its own
//! group) seeds every group, then a binomial pipeline inside each group, all groups at once.
//! Steps: the leaders' pipeline, then the longest group pipeline.

use super::{BinomialPipeline, Schedule, Step, Transfer};

/// The hybrid schedule.
#[derive(Debug)]
pub struct Hybrid {
    n: usize,
    k: usize,
    /// Group leaders, the root's first; `leaders[i]` is node index.
    leaders: Vec<usize>,
    leaders_pipeline: BinomialPipeline,
    /// Each group's members, leader first.
    members: Vec<Vec<usize>>,
    group_pipelines: Vec<BinomialPipeline>,
    /// Each node's group (index into `members`) and place in it.
    place: Vec<(usize, usize)>,
    /// Steps of the leaders' pipeline.
    first: usize,
}

impl Hybrid {
    /// For nodes whose groups are `groups[node]` (any ids; node 0 is the root) and `k` blocks.
    pub fn new(groups: &[usize], k: usize) -> Self {
        let n = groups.len();
        let k = k.max(1);
        let mut ids: Vec<usize> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut place = vec![(0, 0); n];
        for (node, &g) in groups.iter().enumerate() {
            let gi = match ids.iter().position(|&x| x == g) {
                Some(i) => i,
                None => {
                    ids.push(g);
                    members.push(Vec::new());
                    ids.len() - 1
                }
            };
            place[node] = (gi, members[gi].len());
            members[gi].push(node);
        }
        // Groups appear in order of their smallest node, so the root's group is first and
        // every leader (first member) is its group's smallest node.
        let leaders: Vec<usize> = members.iter().map(|m| m[0]).collect();
        let leaders_pipeline = BinomialPipeline::new(leaders.len(), k);
        let first = leaders_pipeline.steps();
        let group_pipelines = members
            .iter()
            .map(|m| BinomialPipeline::new(m.len(), k))
            .collect();
        Hybrid {
            n,
            k,
            leaders,
            leaders_pipeline,
            members,
            group_pipelines,
            place,
            first,
        }
    }

    fn map(step: Step, ids: &[usize]) -> Step {
        let m = |t: Transfer| Transfer {
            peer: ids[t.peer],
            block: t.block,
        };
        Step {
            send: step.send.map(m),
            recv: step.recv.map(m),
        }
    }
}

impl Schedule for Hybrid {
    fn size(&self) -> usize {
        self.n
    }
    fn blocks(&self) -> usize {
        self.k
    }
    fn steps(&self) -> usize {
        let second = self
            .group_pipelines
            .iter()
            .map(Schedule::steps)
            .max()
            .unwrap_or(0);
        self.first + second
    }
    fn step(&self, node: usize, j: usize) -> Step {
        if node >= self.n || j >= self.steps() {
            return Step::default();
        }
        let (g, at) = self.place[node];
        if j < self.first {
            if at != 0 {
                return Step::default();
            }
            return Hybrid::map(self.leaders_pipeline.step(g, j), &self.leaders);
        }
        Hybrid::map(
            self.group_pipelines[g].step(at, j - self.first),
            &self.members[g],
        )
    }
}

//! The binomial tree over ranks relative to a root (paper 004 Figure 1): the node at relative
//! rank `r > 0` hears from `r` with its lowest set bit cleared, and passes on to `r + 2^j` for
//! every `2^j` below that bit (the root: every `2^j < n`), largest subtree first.

/// The parent of relative rank `rel`.
pub(crate) fn parent(rel: usize) -> Option<usize> {
    (rel != 0).then(|| rel & (rel - 1))
}

/// The children of relative rank `rel` in a tree of `n`, largest subtree first.
pub(crate) fn children(rel: usize, n: usize) -> impl Iterator<Item = usize> {
    // Steps below the lowest set bit of `rel` (every step below `n` for the root).
    let top = if rel == 0 {
        n.next_power_of_two()
    } else {
        1 << rel.trailing_zeros()
    };
    let mut step = top >> 1;
    std::iter::from_fn(move || {
        while step > 0 {
            let child = rel + step;
            step >>= 1;
            if child < n {
                return Some(child);
            }
        }
        None
    })
}

/// Which tree a counter-byte broadcast goes down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// The binomial tree above (paper 004): depth log2(n), the root writes log2(n) times.
    Binomial,
    /// The root writes to every rank itself: depth 1. For one-block messages among ranks of one
    /// host, where a write is a store into shared memory (tens of ns) but every level of a
    /// tree costs a peer's poll, or a context switch when ranks outnumber cores.
    Flat,
}

impl Shape {
    /// The parent of relative rank `rel` (none for the root).
    pub(crate) fn parent(self, rel: usize) -> Option<usize> {
        match self {
            Shape::Binomial => parent(rel),
            Shape::Flat => (rel != 0).then_some(0),
        }
    }

    /// The children of relative rank `rel` in a tree of `n`, in the order to write them.
    pub(crate) fn children(self, rel: usize, n: usize) -> impl Iterator<Item = usize> {
        let (binomial, flat) = match self {
            Shape::Binomial => (Some(children(rel, n)), None),
            Shape::Flat => (None, Some(if rel == 0 { 1..n } else { 0..0 })),
        };
        binomial
            .into_iter()
            .flatten()
            .chain(flat.into_iter().flatten())
    }
}

/// `rank` relative to `root` in a group of `n`.
pub(crate) fn relative(rank: usize, root: usize, n: usize) -> usize {
    (rank + n - root) % n
}

/// The rank at relative rank `rel`.
pub(crate) fn absolute(rel: usize, root: usize, n: usize) -> usize {
    (rel + root) % n
}

/// The other ranks of `n`, from `me`'s successor on, wrapping: the order in which a rank
/// writes or sends to every other. In rank order every rank would write to rank 0 first, then
/// all to rank 1, one rank's link taking everything at once while the others idle.
pub(crate) fn successors(me: usize, n: usize) -> impl Iterator<Item = usize> {
    (1..n).map(move |i| (me + i) % n)
}

/// The other ranks of `n`, from `me`'s predecessor back, wrapping: the order in which their
/// writes to `me` come when each writes in [`successors`] order, so the order to wait in.
pub(crate) fn predecessors(me: usize, n: usize) -> impl Iterator<Item = usize> {
    (1..n).map(move |i| (me + n - i) % n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_has_one_parent_that_lists_it() {
        for n in 1..=70 {
            for rel in 1..n {
                let p = parent(rel).unwrap();
                assert!(p < rel);
                assert!(children(p, n).any(|c| c == rel), "n={n} rel={rel}");
            }
            let mut reached = vec![false; n];
            let mut stack = vec![0];
            while let Some(x) = stack.pop() {
                assert!(!reached[x]);
                reached[x] = true;
                stack.extend(children(x, n));
            }
            assert!(reached.iter().all(|&r| r), "n={n}");
        }
    }

    #[test]
    fn flat_tree_is_one_level() {
        assert_eq!(
            Shape::Flat.children(0, 5).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
        assert_eq!(Shape::Flat.children(3, 5).count(), 0);
        assert_eq!(Shape::Flat.parent(3), Some(0));
        assert_eq!(Shape::Flat.parent(0), None);
        assert_eq!(
            Shape::Binomial.children(0, 8).collect::<Vec<_>>(),
            children(0, 8).collect::<Vec<_>>()
        );
    }

    /// Paper 004 Figure 1, 8 nodes: the root sends to 4, 2, 1; node 4 to 6 and 5; 2 to 3; 6 to 7.
    #[test]
    fn matches_the_papers_eight_node_tree() {
        assert_eq!(children(0, 8).collect::<Vec<_>>(), vec![4, 2, 1]);
        assert_eq!(children(4, 8).collect::<Vec<_>>(), vec![6, 5]);
        assert_eq!(children(2, 8).collect::<Vec<_>>(), vec![3]);
        assert_eq!(children(6, 8).collect::<Vec<_>>(), vec![7]);
        assert_eq!(children(7, 8).count(), 0);
    }
}

//! Sets of piece indices (possession, work, desire, what a peer is known to hold), one bit per
//! piece, as the paper's bitfield, desire and work messages carry them.

use rand::Rng;

/// A set of piece indices below a fixed count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pieces {
    words: Vec<u64>,
    count: usize,
}

impl Pieces {
    /// The empty set over `count` pieces.
    pub(crate) fn none(count: usize) -> Pieces {
        Pieces {
            words: vec![0; count.div_ceil(64)],
            count,
        }
    }

    /// Every piece below `count`.
    pub(crate) fn all(count: usize) -> Pieces {
        let mut p = Pieces::none(count);
        p.insert_range(0..count);
        p
    }

    /// Pieces `range` (within the count).
    pub(crate) fn insert_range(&mut self, range: std::ops::Range<usize>) {
        for i in range {
            self.insert(i);
        }
    }

    pub(crate) fn contains(&self, i: usize) -> bool {
        i < self.count && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Adds `i` (below the count); whether it was new.
    pub(crate) fn insert(&mut self, i: usize) -> bool {
        debug_assert!(i < self.count);
        let (w, bit) = (i / 64, 1u64 << (i % 64));
        let new = self.words[w] & bit == 0;
        self.words[w] |= bit;
        new
    }

    /// Removes `i`; whether it was there.
    pub(crate) fn remove(&mut self, i: usize) -> bool {
        if i >= self.count {
            return false;
        }
        let (w, bit) = (i / 64, 1u64 << (i % 64));
        let was = self.words[w] & bit != 0;
        self.words[w] &= !bit;
        was
    }

    pub(crate) fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len() == self.count
    }

    /// The pieces in ascending order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(w, &bits)| {
            let mut bits = bits;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    w * 64 + b
                })
            })
        })
    }

    /// The pieces of `self` that are also in `other`.
    pub(crate) fn and(&self, other: &Pieces) -> Pieces {
        self.zip(other, |a, b| a & b)
    }

    /// The pieces of `self` that are not in `other`.
    pub(crate) fn minus(&self, other: &Pieces) -> Pieces {
        self.zip(other, |a, b| a & !b)
    }

    /// Adds every piece of `other`.
    pub(crate) fn add(&mut self, other: &Pieces) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    fn zip(&self, other: &Pieces, f: impl Fn(u64, u64) -> u64) -> Pieces {
        let words = self
            .words
            .iter()
            .zip(other.words.iter().chain(std::iter::repeat(&0)))
            .map(|(&a, &b)| f(a, b))
            .collect();
        Pieces {
            words,
            count: self.count,
        }
    }

    /// A piece of `self & want` not in `except`, chosen uniformly at random.
    pub(crate) fn pick(&self, want: &Pieces, except: &Pieces, rng: &mut impl Rng) -> Option<usize> {
        let word = |w: usize| {
            self.words[w]
                & want.words.get(w).copied().unwrap_or(0)
                & !except.words.get(w).copied().unwrap_or(0)
        };
        let total: usize = (0..self.words.len())
            .map(|w| word(w).count_ones() as usize)
            .sum();
        if total == 0 {
            return None;
        }
        let mut k = rng.gen_range(0..total);
        for w in 0..self.words.len() {
            let mut bits = word(w);
            let n = bits.count_ones() as usize;
            if k >= n {
                k -= n;
                continue;
            }
            for _ in 0..k {
                bits &= bits - 1;
            }
            return Some(w * 64 + bits.trailing_zeros() as usize);
        }
        None
    }

    /// The first piece of `self & want` not in `except` at or after `start`, wrapping round.
    pub(crate) fn first_from(&self, want: &Pieces, except: &Pieces, start: usize) -> Option<usize> {
        let word = |w: usize| {
            self.words[w]
                & want.words.get(w).copied().unwrap_or(0)
                & !except.words.get(w).copied().unwrap_or(0)
        };
        let n = self.words.len();
        if n == 0 {
            return None;
        }
        let start = start % self.count.max(1);
        let (sw, sb) = (start / 64, start % 64);
        // The start word from its bit on, the other words, then the start word below its bit.
        let first = word(sw) & (!0u64 << sb);
        if first != 0 {
            return Some(sw * 64 + first.trailing_zeros() as usize);
        }
        for i in 1..n {
            let w = (sw + i) % n;
            let bits = word(w);
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
        }
        let last = word(sw) & !(!0u64 << sb);
        (last != 0).then(|| sw * 64 + last.trailing_zeros() as usize)
    }

    /// The first `n` pieces, removed from the set.
    pub(crate) fn take_first(&mut self, n: usize) -> Pieces {
        let mut out = Pieces::none(self.count);
        let first: Vec<usize> = self.iter().take(n).collect();
        for i in first {
            self.remove(i);
            out.insert(i);
        }
        out
    }

    /// The bytes of the set (little-endian words, `count.div_ceil(8)` bytes).
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut out: Vec<u8> = self.words.iter().flat_map(|w| w.to_le_bytes()).collect();
        out.truncate(self.count.div_ceil(8));
        out
    }

    /// The set of `count` pieces in `bytes` (as [`to_bytes`](Pieces::to_bytes) wrote it);
    /// `None` if the length is not that count's or a bit past the count is set.
    pub(crate) fn from_bytes(count: usize, bytes: &[u8]) -> Option<Pieces> {
        if bytes.len() != count.div_ceil(8) {
            return None;
        }
        let mut p = Pieces::none(count);
        for (w, chunk) in bytes.chunks(8).enumerate() {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            p.words[w] = u64::from_le_bytes(b);
        }
        let tail = count % 64;
        if tail != 0 && p.words.last().is_some_and(|&w| w >> tail != 0) {
            return None;
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn sets_pick_split_and_encode() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut a = Pieces::none(130);
        a.insert_range(3..10);
        a.insert(129);
        assert_eq!(a.len(), 8);
        assert!(a.contains(129) && !a.contains(130) && !a.contains(2));
        let b = Pieces::all(130);
        let mut except = Pieces::none(130);
        except.insert_range(3..9);
        for _ in 0..50 {
            let p = a.pick(&b, &except, &mut rng).unwrap();
            assert!(p == 9 || p == 129, "{p}");
        }
        except.insert(9);
        except.insert(129);
        assert_eq!(a.pick(&b, &except, &mut rng), None);
        // In order from a start, wrapping round.
        except.remove(9);
        assert_eq!(a.first_from(&b, &except, 0), Some(9));
        assert_eq!(a.first_from(&b, &except, 10), Some(9));
        except.remove(129);
        assert_eq!(a.first_from(&b, &except, 10), Some(129));
        assert_eq!(a.first_from(&b, &except, 129), Some(129));
        assert_eq!(a.first_from(&b, &except, 130), Some(9));
        let first = a.take_first(a.len().div_ceil(2));
        assert_eq!(first.iter().collect::<Vec<_>>(), vec![3, 4, 5, 6]);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![7, 8, 9, 129]);
        let bytes = a.to_bytes();
        assert_eq!(bytes.len(), 17);
        assert_eq!(Pieces::from_bytes(130, &bytes), Some(a.clone()));
        assert_eq!(
            Pieces::from_bytes(131, &bytes),
            Some({
                let mut x = Pieces::none(131);
                x.add(&a);
                x
            })
        );
        assert_eq!(Pieces::from_bytes(129, &bytes[..17]), None);
        assert_eq!(Pieces::from_bytes(130, &bytes[..16]), None);
        assert_eq!(b.minus(&a).len(), 126);
        assert_eq!(b.and(&a), a);
    }
}

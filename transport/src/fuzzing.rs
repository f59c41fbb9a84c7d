//! Seeded input mutation for the decoders' fuzz tests (the tcp wire decoder, the shm ring and
//! its records, the store protocol, the NI's messages): dependency-free and deterministic, so
//! a failing input is reproduced by its seed and index. Inputs start from valid encodings and
//! are mutated where decoders are most likely wrong: lengths and offsets set to boundary values,
//! bytes flipped, frames cut short or extended, two inputs spliced.
//!
//! How many inputs each test runs: `RDCOLL_FUZZ_INPUTS` (default 20,000, a few seconds in all;
//! docs/RELIABILITY.md gives the figures of a run with 10^7).

/// Inputs per fuzz test: `RDCOLL_FUZZ_INPUTS`, else 20,000.
pub fn inputs() -> u64 {
    std::env::var("RDCOLL_FUZZ_INPUTS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(20_000)
}

/// A splitmix64 generator: fast, seeded, and good enough to pick mutations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A value decoders must handle at their edges: 0, 1, powers of two and their
    /// neighbours, all-ones, or one of `near` (known lengths, keys, offsets) give or take one.
    pub fn edge(&mut self, near: &[u64]) -> u64 {
        match self.below(6) {
            0 => [
                0,
                1,
                u64::MAX,
                u64::MAX - 1,
                i64::MAX as u64,
                u32::MAX as u64,
            ][self.below(6) as usize],
            1 => {
                let p = 1u64 << self.below(64);
                p.wrapping_add(self.below(3)).wrapping_sub(1)
            }
            2 | 3 if !near.is_empty() => {
                let v = near[self.below(near.len() as u64) as usize];
                v.wrapping_add(self.below(3)).wrapping_sub(1)
            }
            4 => self.below(256),
            _ => self.next_u64(),
        }
    }

    /// `input` mutated one to four times (see the module's text); `other` is spliced in by
    /// some mutations, `near` feeds boundary values.
    pub fn mutate(&mut self, input: &[u8], other: &[u8], near: &[u64]) -> Vec<u8> {
        let mut v = input.to_vec();
        for _ in 0..1 + self.below(4) {
            match self.below(8) {
                // A little-endian field (8, 4, 2 or 1 bytes) set to an edge value.
                0..=2 if !v.is_empty() => {
                    let width = [8usize, 4, 2, 1][self.below(4) as usize].min(v.len());
                    let at = self.below((v.len() - width + 1) as u64) as usize;
                    let bytes = self.edge(near).to_le_bytes();
                    v[at..at + width].copy_from_slice(&bytes[..width]);
                }
                3 if !v.is_empty() => {
                    let at = self.below(v.len() as u64) as usize;
                    v[at] ^= 1 << self.below(8);
                }
                4 if !v.is_empty() => {
                    let at = self.below(v.len() as u64) as usize;
                    v[at] = self.next_u64() as u8;
                }
                5 => v.truncate(self.below(v.len() as u64 + 1) as usize),
                6 => {
                    let extra = self.below(64);
                    v.extend((0..extra).map(|_| self.next_u64() as u8));
                }
                _ => {
                    let cut = self.below(v.len() as u64 + 1) as usize;
                    let from = self.below(other.len() as u64 + 1) as usize;
                    v.truncate(cut);
                    v.extend_from_slice(&other[from..]);
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_inputs() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let seed = b"some valid frame".to_vec();
        for _ in 0..1000 {
            assert_eq!(a.mutate(&seed, &seed, &[16]), b.mutate(&seed, &seed, &[16]));
        }
    }

    #[test]
    fn mutations_change_lengths_and_contents() {
        let mut r = Rng::new(1);
        let seed = vec![0u8; 32];
        let outs: Vec<Vec<u8>> = (0..1000).map(|_| r.mutate(&seed, &seed, &[])).collect();
        assert!(outs.iter().any(|o| o.len() < 32));
        assert!(outs.iter().any(|o| o.len() > 32));
        assert!(outs.iter().any(|o| o.len() == 32 && o != &seed));
    }
}

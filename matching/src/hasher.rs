//! A small multiplicative hasher for the bucket maps.
//!
//! Bucket keys are packed integers (context, source, tag) chosen by the application, not by an
//! adversary on the network, so a keyed SipHash buys nothing here and costs about 3x per lookup.
//! Each 64-bit word is xored in and multiplied by an odd constant; `finish` folds the well mixed
//! high half onto the low half, where hashbrown takes its bucket index (it takes its 7-bit tag
//! from the top bits, which the fold leaves alone). A plain FxHash finish (a rotation) left
//! lattice patterns in keys that vary in both source and tag: some 16-slot groups overflowed
//! with 20 keys while others held one, and deep-queue operations got 30% slower.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The multiplier of rustc-hash 2 (an odd constant with well spread bits).
const MULTIPLIER: u64 = 0xf135_7aea_2e62_a9c5;

/// Xor-multiply hasher with a high-onto-low fold at the end.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct FastHasher {
    hash: u64,
}

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash ^ word).wrapping_mul(MULTIPLIER);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(n as u64);
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_u128(&mut self, n: u128) {
        self.add(n as u64);
        self.add((n >> 64) as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash ^ (self.hash >> 32)
    }
}

/// A `HashMap` using [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash_of<T: Hash>(value: T) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(value)
    }

    /// Distinct bucket indices (hashbrown takes the low bits) of `keys` in a table sized as
    /// hashbrown would size it, against what a random function would give.
    fn spread<T: Hash + Copy>(keys: &[T]) -> f64 {
        let n = keys.len();
        let buckets = (n * 8 / 7).next_power_of_two();
        let distinct: std::collections::HashSet<u64> = keys
            .iter()
            .map(|&k| hash_of(k) & (buckets as u64 - 1))
            .collect();
        let random = buckets as f64 * (1.0 - (-(n as f64) / buckets as f64).exp());
        distinct.len() as f64 / random
    }

    #[test]
    fn sequential_keys_spread_at_least_like_random() {
        for n in [1000u32, 4096, 100_000] {
            let tags: Vec<u64> = (0..n as u64).map(|t| (5 << 32) | t).collect();
            let exact: Vec<u128> = (0..n as u128).map(|t| (5 << 64) | (3 << 32) | t).collect();
            let sources: Vec<u128> = (0..n as u128).map(|s| (5 << 64) | (s << 32) | 7).collect();
            let grid: Vec<u128> = (0..n as u128)
                .map(|i| (1 << 64) | ((i % 64) << 32) | (1_000_000 + i))
                .collect();
            for (name, ratio) in [
                ("tag", spread(&tags)),
                ("exact", spread(&exact)),
                ("source", spread(&sources)),
                ("source x tag", spread(&grid)),
            ] {
                assert!(
                    ratio > 0.95,
                    "{name} keys, n={n}: {ratio:.2} of random spread"
                );
            }
        }
    }

    #[test]
    fn wide_keys_use_both_halves() {
        assert_ne!(hash_of(1u128), hash_of(1u128 << 64));
        assert_ne!(hash_of(0u128), hash_of(1u128 << 100));
    }

    #[test]
    fn map_works_as_a_map() {
        let mut map: FastMap<u128, u32> = FastMap::default();
        for i in 0..1000u32 {
            map.insert((i as u128) << 70 | i as u128, i);
        }
        for i in 0..1000u32 {
            assert_eq!(map.get(&((i as u128) << 70 | i as u128)), Some(&i));
        }
    }
}

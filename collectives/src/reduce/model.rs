//! Choosing the degree `k` (paper 004, Section 5.2): a receiver in a degree-k step takes up
//! to `k` writes one after the other and combines each, so one step costs about
//! `α + k·m·(β + γ)` for `m` bytes (α per message, β per byte moved, γ per byte reduced), and
//! the tree has `ceil(log_{k+1} n)` steps. The model picks the `k` (of `2^j - 1` and `n - 1`)
//! with the least total; small vectors favour few steps (large `k`), large ones few bytes per
//! step (small `k`).
//!
//! The parameters are this machine's unless a calibration says otherwise: `rdcoll-bench
//! allreduce --calibrate` measures them on the fabric and writes them where
//! `RDCOLL_ALLREDUCE_MODEL` points (default `~/.cache/rdcoll/allreduce-model`). Rank 0's
//! parameters are broadcast when a communicator's reductions are set up, so every rank picks
//! the same `k`, and the same `k` in every run (bitwise-identical results).

use std::path::PathBuf;

use crate::error::{CollError, Result};
use crate::reduce::degree_k::{degrees, DegreeK};

/// The model's parameters, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Model {
    /// Cost of one RDMA write regardless of size (α).
    pub per_message_ns: f64,
    /// Cost per byte written (β).
    pub per_byte_ns: f64,
    /// Cost per byte combined (γ).
    pub reduce_per_byte_ns: f64,
}

impl Model {
    /// Measured on the project machine (2-vCPU VM, shm).
    pub const DEFAULT: Model = Model {
        per_message_ns: 250.0,
        per_byte_ns: 0.08,
        reduce_per_byte_ns: 0.12,
    };

    /// Estimated time of the degree-`k` reduce of `m` bytes over `n` ranks.
    pub fn time(&self, n: usize, k: usize, m: usize) -> f64 {
        let steps = DegreeK::new(n, k).steps() as f64;
        let per_step =
            self.per_message_ns + (k * m) as f64 * (self.per_byte_ns + self.reduce_per_byte_ns);
        steps * per_step
    }

    /// The degree with the least estimated time (the smaller on a tie).
    pub fn choose(&self, n: usize, m: usize) -> usize {
        let mut best = (1, f64::INFINITY);
        for k in degrees(n) {
            let t = self.time(n, k, m);
            if t < best.1 {
                best = (k, t);
            }
        }
        best.0
    }

    /// The parameters as bytes (for broadcasting them).
    pub fn to_bytes(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[..8].copy_from_slice(&self.per_message_ns.to_le_bytes());
        b[8..16].copy_from_slice(&self.per_byte_ns.to_le_bytes());
        b[16..].copy_from_slice(&self.reduce_per_byte_ns.to_le_bytes());
        b
    }

    /// Back from [`to_bytes`](Model::to_bytes).
    pub fn from_bytes(b: &[u8; 24]) -> Model {
        let f = |r: std::ops::Range<usize>| f64::from_le_bytes(b[r].try_into().unwrap_or([0; 8]));
        Model {
            per_message_ns: f(0..8),
            per_byte_ns: f(8..16),
            reduce_per_byte_ns: f(16..24),
        }
    }

    /// Where the calibration lives: `RDCOLL_ALLREDUCE_MODEL`, else under the home directory.
    pub fn path() -> Option<PathBuf> {
        if let Some(p) = rdcoll_transport::settings::given("RDCOLL_ALLREDUCE_MODEL") {
            return Some(PathBuf::from(p));
        }
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/rdcoll/allreduce-model"))
    }

    /// The calibration at [`path`](Model::path), or the default when there is none. A file
    /// that exists but does not parse is an error.
    pub fn load() -> Result<Model> {
        let Some(path) = Model::path() else {
            return Ok(Model::DEFAULT);
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => Model::parse(&text).ok_or_else(|| {
                CollError::InvalidArgument(format!(
                    "{} is not an allreduce calibration (per_message_ns=, per_byte_ns=, \
                     reduce_per_byte_ns= lines)",
                    path.display()
                ))
            }),
            Err(_) => Ok(Model::DEFAULT),
        }
    }

    /// Parses `key=value` lines.
    pub fn parse(text: &str) -> Option<Model> {
        let mut m = (None, None, None);
        for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let v: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)?;
            match k.trim() {
                "per_message_ns" => m.0 = Some(v),
                "per_byte_ns" => m.1 = Some(v),
                "reduce_per_byte_ns" => m.2 = Some(v),
                _ => {}
            }
        }
        Some(Model {
            per_message_ns: m.0?,
            per_byte_ns: m.1?,
            reduce_per_byte_ns: m.2?,
        })
    }

    /// The calibration file's text.
    pub fn to_text(&self) -> String {
        format!(
            "# rdcoll allreduce model (rdcoll-bench allreduce --calibrate)\n\
             per_message_ns={}\nper_byte_ns={}\nreduce_per_byte_ns={}\n",
            self.per_message_ns, self.per_byte_ns, self.reduce_per_byte_ns
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_vectors_take_few_steps_large_ones_small_degrees() {
        let m = Model::DEFAULT;
        assert_eq!(m.choose(8, 4), 7);
        assert_eq!(m.choose(8, 1 << 20), 1);
        assert_eq!(m.choose(1, 4), 1);
        // With free messages the binomial tree always wins on bytes.
        let cheap = Model {
            per_message_ns: 0.0,
            ..Model::DEFAULT
        };
        assert_eq!(cheap.choose(16, 64), 1);
    }

    #[test]
    fn round_trips() {
        let m = Model {
            per_message_ns: 1.5,
            per_byte_ns: 0.25,
            reduce_per_byte_ns: 3.0,
        };
        assert_eq!(Model::from_bytes(&m.to_bytes()), m);
        assert_eq!(Model::parse(&m.to_text()), Some(m));
        assert_eq!(Model::parse("per_message_ns=nan\n"), None);
        assert_eq!(Model::parse("per_byte_ns=1\n"), None);
    }
}

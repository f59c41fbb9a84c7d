//! A parallel reduction: the ranks integrate 4 / (1 + x^2) over [0, 1] (which is pi) by the
//! midpoint rule, each over its share of the intervals, and an allreduce adds the shares; then
//! a histogram of a pseudo-random sample, counted by every rank over its own part, is summed
//! at rank 0 by a reduce, and rank 0 checks both results. Run it with
//! `rdcoll-run -n 4 target/release/examples/reduce [INTERVALS]`.

use rdcoll::Op;

const BINS: usize = 16;
const SAMPLES: u64 = 1 << 20;

/// A small deterministic generator (SplitMix64): sample `i` is the same on every rank.
fn sample(i: u64) -> u64 {
    let mut z = i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn histogram(range: std::ops::Range<u64>) -> [u64; BINS] {
    let mut h = [0u64; BINS];
    for i in range {
        h[(sample(i) % BINS as u64) as usize] += 1;
    }
    h
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let comm = rdcoll::init()?;
    let intervals: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000_000);
    let (rank, size) = (comm.rank() as u64, comm.size() as u64);
    let t0 = comm.wtime();
    // This rank's intervals, and its part of the integral.
    let width = 1.0 / intervals as f64;
    let part: f64 = (intervals * rank / size..intervals * (rank + 1) / size)
        .map(|i| {
            let x = (i as f64 + 0.5) * width;
            4.0 / (1.0 + x * x) * width
        })
        .sum();
    let mut pi = [0.0f64];
    comm.allreduce(&[part], &mut pi, Op::Sum)?;
    // This rank's samples, counted; the counts summed at rank 0.
    let mine = histogram(SAMPLES * rank / size..SAMPLES * (rank + 1) / size);
    let mut counts = [0u64; BINS];
    comm.reduce(&mine, &mut counts, Op::Sum, 0)?;
    let elapsed = comm.wtime() - t0;
    if rank == 0 {
        let error = (pi[0] - std::f64::consts::PI).abs();
        println!(
            "reduce: {size} ranks, pi = {:.12} (error {error:.1e}) from {intervals} intervals \
             in {elapsed:.3} s; histogram of {SAMPLES} samples: {counts:?}",
            pi[0]
        );
        if error > 1e-9 {
            return Err("the integral is off".into());
        }
        if counts != histogram(0..SAMPLES) {
            return Err("the summed histogram differs from one process's count".into());
        }
    }
    Ok(())
}

//! The OSU nonblocking-collective loops (osu_iallreduce, osu_ibcast 6.x): how much of a
//! collective's time the caller can spend computing. Per size: the pure time of start + wait;
//! then start, compute for that long (or `--compute-ms`) without calling the library, wait;
//! overlap = 100 (1 - (overall - compute) / pure), floored at 0. Also the wait alone after the
//! computation (overall - compute), the figure a program that computes sees.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::coll::{counts, over_ranks, CollKind, Collective};
use crate::osu::Options;

/// One row (µs, averaged over ranks).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverlapRow {
    /// Message size in bytes.
    pub size: usize,
    /// Start, compute, wait.
    pub overall: f64,
    /// The computation alone.
    pub compute: f64,
    /// Start and wait with nothing between.
    pub pure: f64,
    /// Percentage of `pure` hidden behind the computation.
    pub overlap: f64,
}

/// Spins for `d` without calling any library (a computation that does not give the library
/// a chance to progress).
fn compute(d: Duration) {
    let end = Instant::now() + d;
    let mut x = 1u64;
    while Instant::now() < end {
        for _ in 0..64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

/// Runs `kind` (`Iallreduce` or `Ibcast`) over the sizes of `o`; `compute_ms` fixes the
/// computation (else it lasts as long as the pure collective). Rank 0's rows mean anything.
pub fn run(
    c: &dyn Collective,
    kind: CollKind,
    o: &Options,
    compute_ms: Option<f64>,
) -> Result<Vec<OverlapRow>, String> {
    let sizes: Vec<usize> = match kind {
        CollKind::Iallreduce => o.sizes().into_iter().filter(|&s| s >= 4).collect(),
        _ => o.sizes(),
    };
    let floats = o.max / 4;
    let send: Vec<f32> = (0..floats).map(|i| (i % 100) as f32).collect();
    let mut recv = vec![0f32; floats];
    let mut buf = vec![0u8; o.max.max(1)];
    let mut rows = Vec::new();
    for size in sizes {
        let (iters, skip) = counts(o, size);
        let mut once = |during: &mut dyn FnMut()| -> Result<(), String> {
            match kind {
                CollKind::Iallreduce => {
                    c.iallreduce_f32(&send[..size / 4], &mut recv[..size / 4], during)
                }
                _ => c.ibcast(&mut buf[..size], 0, during),
            }
        };
        let mut pure = 0.0;
        for i in 0..iters + skip {
            c.barrier()?;
            let t0 = c.wtime();
            once(&mut || {})?;
            if i >= skip {
                pure += c.wtime() - t0;
            }
        }
        let pure = pure / iters as f64;
        let target = Duration::from_secs_f64(compute_ms.map_or(pure, |ms| ms / 1e3));
        let (mut overall, mut computing) = (0.0, 0.0);
        for i in 0..iters + skip {
            c.barrier()?;
            let t0 = c.wtime();
            let mut spent = 0.0;
            once(&mut || {
                let t = c.wtime();
                compute(target);
                spent = c.wtime() - t;
            })?;
            if i >= skip {
                overall += c.wtime() - t0;
                computing += spent;
            }
        }
        let (overall, computing) = (overall / iters as f64, computing / iters as f64);
        let overlap = (100.0 * (1.0 - (overall - computing) / pure)).clamp(0.0, 100.0);
        rows.push(OverlapRow {
            size,
            overall: over_ranks(c, overall * 1e6)?.0,
            compute: over_ranks(c, computing * 1e6)?.0,
            pure: over_ranks(c, pure * 1e6)?.0,
            overlap: over_ranks(c, overlap)?.0,
        });
    }
    Ok(rows)
}

/// OSU's layout for the nonblocking tests, plus the wait after the computation.
pub fn format(kind: CollKind, what: &str, rows: &[OverlapRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# OSU MPI Non-blocking {} v6.1 ({what})", kind.title());
    let _ = writeln!(
        s,
        "{:<10}{:>14}{:>14}{:>18}{:>14}{:>14}",
        "# Size", "Overall(us)", "Compute(us)", "Pure Comm.(us)", "Overlap(%)", "Wait(us)"
    );
    let d = crate::osu::digits();
    for r in rows {
        let _ = writeln!(
            s,
            "{:<10}{:>14.d$}{:>14.d$}{:>18.d$}{:>14.2}{:>14.d$}",
            r.size,
            r.overall,
            r.compute,
            r.pure,
            r.overlap,
            (r.overall - r.compute).max(0.0)
        );
    }
    s
}

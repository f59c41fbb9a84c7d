//! Scale: broadcast and allreduce on up to 1,024 simulated ranks, byte-accurate (every rank
//! checks what it got), timed in virtual time; the wall time each run took is reported too.

use rdcoll::sim::{self, SimConfig};
use rdcoll::Op;

use super::{Figure, Series};

/// What to run.
pub struct Scale {
    /// Job sizes.
    pub ranks: Vec<usize>,
    /// Broadcast size in bytes.
    pub bcast_bytes: usize,
    /// Allreduce length in `f64`s.
    pub allreduce_len: usize,
    /// The network.
    pub network: SimConfig,
}

impl Default for Scale {
    fn default() -> Self {
        Scale {
            ranks: vec![16, 64, 256, 1024],
            bcast_bytes: 1 << 20,
            allreduce_len: 1024,
            network: SimConfig::switch(2),
        }
    }
}

/// One job: a broadcast and an allreduce, each three times after a barrier and checked on every
/// rank. Returns the virtual seconds of each one's third call (from the first rank's call to
/// the last rank's return; the first calls set the collective up) and the wall seconds of the
/// whole run.
pub fn one_job(e: &Scale, ranks: usize) -> Result<(f64, f64, f64), String> {
    let cfg = SimConfig {
        ranks,
        ..e.network.clone()
    };
    let wall = std::time::Instant::now();
    let (bcast_bytes, len) = (e.bcast_bytes, e.allreduce_len);
    type Span = (f64, f64);
    let per_rank = sim::run(cfg, |comm| -> Result<(Span, Span), String> {
        let err = |e: rdcoll::Error| e.to_string();
        let me = comm.rank() as usize;
        let mut buf = vec![0u8; bcast_bytes];
        if me == 0 {
            buf.iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = (i % 251) as u8);
        }
        // The first call sets the broadcast up (an exchange of descriptors with every rank,
        // whose messages may still hold the links during the second); the third is timed.
        let mut bcast = (0.0, 0.0);
        for _ in 0..3 {
            comm.barrier().map_err(err)?;
            let start = comm.wtime();
            comm.bcast(&mut buf, 0).map_err(err)?;
            bcast = (start, comm.wtime());
        }
        if buf.iter().enumerate().any(|(i, &b)| b != (i % 251) as u8) {
            return Err(format!("rank {me}: wrong broadcast data"));
        }
        let mine: Vec<f64> = (0..len).map(|i| (me + i) as f64).collect();
        let mut sum = vec![0.0f64; len];
        let mut allreduce = (0.0, 0.0);
        for _ in 0..3 {
            comm.barrier().map_err(err)?;
            let start = comm.wtime();
            comm.allreduce(&mine, &mut sum, Op::Sum).map_err(err)?;
            allreduce = (start, comm.wtime());
        }
        let n = comm.size() as usize;
        let base = (n * (n - 1) / 2) as f64;
        if sum
            .iter()
            .enumerate()
            .any(|(i, &s)| s != base + (n * i) as f64)
        {
            return Err(format!("rank {me}: wrong allreduce sum"));
        }
        // Not the last call: a rank that leaves tells every other (a message to each), and
        // those would queue ahead of a slower rank's last data.
        comm.barrier().map_err(err)?;
        Ok((bcast, allreduce))
    })
    .map_err(|e| e.to_string())?;
    if let Some(e) = per_rank
        .iter()
        .find_map(|r| r.as_ref().err().filter(|e| !e.contains("failed on rank")))
    {
        return Err(e.clone());
    }
    let per_rank: Vec<(Span, Span)> = per_rank.into_iter().collect::<Result<_, _>>()?;
    // From the first rank's call to the last rank's return.
    let span = |f: fn(&(Span, Span)) -> Span| {
        let first = per_rank.iter().map(|p| f(p).0).fold(f64::MAX, f64::min);
        let last = per_rank.iter().map(|p| f(p).1).fold(0.0, f64::max);
        last - first
    };
    Ok((span(|p| p.0), span(|p| p.1), wall.elapsed().as_secs_f64()))
}

/// Runs the experiment: virtual microseconds of each operation against the job size.
pub fn run(e: &Scale, progress: &mut dyn FnMut(&str)) -> Result<Figure, String> {
    let mut bcast = Series::new(&format!("bcast {} KiB", e.bcast_bytes >> 10));
    let mut allreduce = Series::new(&format!("allreduce {} f64", e.allreduce_len));
    for &n in &e.ranks {
        let (b, a, wall) = one_job(e, n)?;
        progress(&format!(
            "{n} ranks: bcast {:.1} us, allreduce {:.1} us (virtual); simulated in {wall:.1} s",
            b * 1e6,
            a * 1e6
        ));
        bcast.points.push((n as f64, b * 1e6));
        allreduce.points.push((n as f64, a * 1e6));
    }
    Ok(Figure {
        name: "scale".into(),
        title: "Broadcast and allreduce at scale, simulated single switch".into(),
        x_label: "ranks".into(),
        y_label: "virtual time (us)".into(),
        series: vec![bcast, allreduce],
        log_y: true,
    })
}

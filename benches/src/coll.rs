//! The OSU collective loops (osu_bcast, osu_allreduce, osu_reduce, osu_barrier 6.x), written
//! once for any library that
//! offers the [`Collective`] calls, with OSU's options and output layout, plus the RDMC
//! broadcast metric (paper 001: bandwidth = message size / time from the root's call until
//! the last rank has the message).

use std::fmt::Write as _;

use crate::osu::Options;

/// What the loops need from a library.
pub trait Collective {
    /// This rank.
    fn rank(&self) -> u32;
    /// Ranks in the job.
    fn size(&self) -> usize;
    /// Broadcast of `buf` from `root`.
    fn bcast(&self, buf: &mut [u8], root: u32) -> Result<(), String>;
    /// Barrier.
    fn barrier(&self) -> Result<(), String>;
    /// Sum of every rank's `send` into every rank's `recv`.
    fn allreduce_f32(&self, send: &[f32], recv: &mut [f32]) -> Result<(), String>;
    /// Sum of every rank's `send` into `root`'s `recv`.
    fn reduce_f32(&self, send: &[f32], recv: &mut [f32], root: u32) -> Result<(), String>;
    /// A note on how a `bytes`-byte reduction is done (rdcoll: the degree `k` its model chose).
    fn note(&self, bytes: usize) -> Option<String> {
        let _ = bytes;
        None
    }
    /// Every rank's `send` into every rank's `recv`, in rank order.
    fn allgather(&self, send: &[u8], recv: &mut [u8]) -> Result<(), String>;
    /// [`allgather`](Collective::allgather) with rank `r`'s block `counts[r]` bytes.
    fn allgatherv(&self, send: &[u8], recv: &mut [u8], counts: &[usize]) -> Result<(), String>;
    /// Every rank's `send` into `root`'s `recv`, in rank order.
    fn gather(&self, send: &[u8], recv: &mut [u8], root: u32) -> Result<(), String>;
    /// `root`'s `send`, block `r` to rank `r`'s `recv`.
    fn scatter(&self, send: &[u8], recv: &mut [u8], root: u32) -> Result<(), String>;
    /// Block `j` of `send` to rank `j`, rank `i`'s block for this rank into block `i`.
    fn alltoall(&self, send: &[u8], recv: &mut [u8]) -> Result<(), String>;
    /// [`alltoall`](Collective::alltoall) with blocks of `counts[r]` bytes both ways.
    fn alltoallv(&self, send: &[u8], recv: &mut [u8], counts: &[usize]) -> Result<(), String>;
    /// Float sums of every rank's `send`, block `r` (`recv.len()` floats) to rank `r`.
    fn reduce_scatter_f32(&self, send: &[f32], recv: &mut [f32]) -> Result<(), String>;
    /// Inclusive prefix float sums.
    fn scan_f32(&self, send: &[f32], recv: &mut [f32]) -> Result<(), String>;
    /// Starts a float-sum allreduce, runs `during`, waits for it.
    fn iallreduce_f32(
        &self,
        send: &[f32],
        recv: &mut [f32],
        during: &mut dyn FnMut(),
    ) -> Result<(), String>;
    /// Starts a broadcast from `root`, runs `during`, waits for it.
    fn ibcast(&self, buf: &mut [u8], root: u32, during: &mut dyn FnMut()) -> Result<(), String>;
    /// Blocking send (for collecting timings).
    fn send(&self, buf: &[u8], peer: u32, tag: u32) -> Result<(), String>;
    /// Blocking receive (for collecting timings).
    fn recv(&self, buf: &mut [u8], peer: u32, tag: u32) -> Result<(), String>;
    /// Seconds on a monotonic clock.
    fn wtime(&self) -> f64;
}

/// Which collective benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CollKind {
    /// osu_bcast.
    Bcast,
    /// osu_barrier.
    Barrier,
    /// osu_allreduce (float sums).
    Allreduce,
    /// osu_reduce (float sums to rank 0).
    Reduce,
    /// osu_allgather (bytes per rank).
    Allgather,
    /// osu_allgatherv (bytes per rank, counts given).
    Allgatherv,
    /// osu_gather (bytes per rank, to rank 0).
    Gather,
    /// osu_scatter (bytes per rank, from rank 0).
    Scatter,
    /// osu_alltoall (bytes per pair of ranks).
    Alltoall,
    /// osu_alltoallv (bytes per pair of ranks, counts given).
    Alltoallv,
    /// osu_reduce_scatter (float sums; the size is the whole vector).
    ReduceScatter,
    /// Inclusive prefix float sums (the size is each rank's vector).
    Scan,
    /// osu_iallreduce: float sums started, computed over, waited for.
    Iallreduce,
    /// osu_ibcast.
    Ibcast,
}

/// Every collective benchmark, by name.
pub const ALL: [CollKind; 14] = [
    CollKind::Bcast,
    CollKind::Barrier,
    CollKind::Allreduce,
    CollKind::Reduce,
    CollKind::Allgather,
    CollKind::Allgatherv,
    CollKind::Gather,
    CollKind::Scatter,
    CollKind::Alltoall,
    CollKind::Alltoallv,
    CollKind::ReduceScatter,
    CollKind::Scan,
    CollKind::Iallreduce,
    CollKind::Ibcast,
];

impl CollKind {
    /// From the subcommand name.
    pub fn from_name(s: &str) -> Option<CollKind> {
        ALL.into_iter().find(|k| k.name() == s)
    }

    /// The subcommand name.
    pub fn name(self) -> &'static str {
        match self {
            CollKind::Bcast => "bcast",
            CollKind::Barrier => "barrier",
            CollKind::Allreduce => "allreduce",
            CollKind::Reduce => "reduce",
            CollKind::Allgather => "allgather",
            CollKind::Allgatherv => "allgatherv",
            CollKind::Gather => "gather",
            CollKind::Scatter => "scatter",
            CollKind::Alltoall => "alltoall",
            CollKind::Alltoallv => "alltoallv",
            CollKind::ReduceScatter => "reduce_scatter",
            CollKind::Scan => "scan",
            CollKind::Iallreduce => "iallreduce",
            CollKind::Ibcast => "ibcast",
        }
    }

    /// OSU's title.
    pub fn title(self) -> &'static str {
        match self {
            CollKind::Bcast => "Broadcast Latency Test",
            CollKind::Barrier => "Barrier Latency Test",
            CollKind::Allreduce => "Allreduce Latency Test",
            CollKind::Reduce => "Reduce Latency Test",
            CollKind::Allgather => "Allgather Latency Test",
            CollKind::Allgatherv => "Allgatherv Latency Test",
            CollKind::Gather => "Gather Latency Test",
            CollKind::Scatter => "Scatter Latency Test",
            CollKind::Alltoall => "All-to-All Personalized Exchange Latency Test",
            CollKind::Alltoallv => "All-to-Allv Personalized Exchange Latency Test",
            CollKind::ReduceScatter => "Reduce_scatter Latency Test",
            CollKind::Scan => "Scan Latency Test",
            CollKind::Iallreduce => "Allreduce Latency Test",
            CollKind::Ibcast => "Broadcast Latency Test",
        }
    }

    /// A nonblocking collective (its loop is `overlap::run`).
    pub fn nonblocking(self) -> bool {
        matches!(self, CollKind::Iallreduce | CollKind::Ibcast)
    }

    /// Sums of floats: sizes are whole floats (4 B and up).
    fn floats(self) -> bool {
        matches!(
            self,
            CollKind::Allreduce | CollKind::Reduce | CollKind::ReduceScatter | CollKind::Scan
        )
    }
}

/// One row: the average over ranks of each rank's mean latency, the smallest and largest of
/// those means, and (with `--rdmc`) the RDMC bandwidth in MB/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CollRow {
    /// Message size in bytes (0 for the barrier).
    pub size: usize,
    /// Average latency, µs.
    pub avg: f64,
    /// Smallest rank mean, µs.
    pub min: f64,
    /// Largest rank mean, µs.
    pub max: f64,
    /// Timed iterations.
    pub iterations: usize,
    /// Bytes per second from the root's call to the last rank's completion, MB/s.
    pub rdmc_mbs: Option<f64>,
    /// With `--first-call`: the first call's time, averaged over the ranks as `avg` is, µs.
    pub first: Option<f64>,
}

/// What the library says of how it does `kind` at each size (rdcoll: the model's `k`).
pub fn notes(c: &dyn Collective, kind: CollKind, o: &Options) -> Vec<String> {
    let mut notes = Vec::new();
    if o.back_to_back {
        notes.push("back to back: no barrier between calls; each rank's whole loop".into());
    }
    if !matches!(kind, CollKind::Allreduce | CollKind::Reduce) {
        return notes;
    }
    notes.extend(
        o.sizes()
            .into_iter()
            .filter(|&s| s >= 4)
            .filter_map(|s| c.note(s).map(|n| format!("{s} B: {n}"))),
    );
    notes
}

/// OSU's iteration counts for a collective of `size` bytes, fewer for the very large sizes.
pub(crate) fn counts(o: &Options, size: usize) -> (usize, usize) {
    let (iters, skip) = match size {
        s if s <= 8192 => (1000, 200),
        s if s <= 1 << 20 => (100, 10),
        s => (((100 << 20) / s).max(3), 1),
    };
    (o.iterations.unwrap_or(iters), o.warmup.unwrap_or(skip))
}

/// Tag of the timing messages.
const TAG_TIMES: u32 = 0x7117;

/// Every rank's `value` at rank 0: (average, min, max); meaningless elsewhere.
pub(crate) fn over_ranks(c: &dyn Collective, value: f64) -> Result<(f64, f64, f64), String> {
    if c.rank() != 0 {
        c.send(&value.to_le_bytes(), 0, TAG_TIMES)?;
        return Ok((value, value, value));
    }
    let (mut sum, mut min, mut max) = (value, value, value);
    for r in 1..c.size() as u32 {
        let mut b = [0u8; 8];
        c.recv(&mut b, r, TAG_TIMES)?;
        let v = f64::from_le_bytes(b);
        sum += v;
        min = min.min(v);
        max = max.max(v);
    }
    Ok((sum / c.size() as f64, min, max))
}

/// Runs `kind` over sizes of `o` (the barrier once); `rdmc` adds the RDMC metric to each
/// broadcast size. Only rank 0's rows mean anything.
pub fn run(
    c: &dyn Collective,
    kind: CollKind,
    o: &Options,
    rdmc: bool,
) -> Result<Vec<CollRow>, String> {
    let n = c.size();
    let sizes = match kind {
        CollKind::Barrier => vec![0],
        // Whole floats, as osu_allreduce: 4 B and up; osu_reduce_scatter: a float per rank.
        CollKind::ReduceScatter => o.sizes().into_iter().filter(|&s| s >= 4 * n).collect(),
        k if k.floats() => o.sizes().into_iter().filter(|&s| s >= 4).collect(),
        _ => o.sizes(),
    };
    let mut buf = vec![0u8; o.max.max(1)];
    let floats = o.max / 4;
    let send: Vec<f32> = (0..floats).map(|i| (i % 100) as f32 * 0.5).collect();
    let mut recv = vec![0f32; floats];
    let mut blocks = crate::coll_blocks::Buffers::new(kind, n, o.max);
    let mut rows = Vec::new();
    if o.first_call {
        // Written, as OSU writes its buffers when it allocates them: what the first call
        // costs is the library's own, not the kernel's first mapping of the program's
        // pages (which every library pays alike).
        buf.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        recv.fill(1.0);
        blocks.touch();
    }
    for size in sizes {
        let (iters, skip) = counts(o, size);
        // The first call is timed on its own: at least 10 more for the steady state.
        let iters = if o.first_call { iters.max(10) } else { iters };
        let skip = if o.first_call { skip.max(1) } else { skip };
        let mut first = None;
        c.barrier()?;
        let mut timer = 0.0;
        let mut loop_start = 0.0;
        for i in 0..iters + skip {
            if i == skip {
                o.timed_loop_starts();
                loop_start = c.wtime();
            }
            let t0 = c.wtime();
            match kind {
                CollKind::Bcast => c.bcast(&mut buf[..size], 0)?,
                CollKind::Barrier => c.barrier()?,
                CollKind::Allreduce => c.allreduce_f32(&send[..size / 4], &mut recv[..size / 4])?,
                CollKind::Reduce => c.reduce_f32(&send[..size / 4], &mut recv[..size / 4], 0)?,
                CollKind::ReduceScatter => {
                    let block = size / 4 / n;
                    c.reduce_scatter_f32(&send[..block * n], &mut recv[..block])?
                }
                CollKind::Scan => c.scan_f32(&send[..size / 4], &mut recv[..size / 4])?,
                _ => blocks.step(c, kind, size)?,
            }
            if i >= skip {
                timer += c.wtime() - t0;
            } else if i == 0 && o.first_call {
                first = Some(c.wtime() - t0);
            }
            if kind != CollKind::Barrier && !o.back_to_back {
                c.barrier()?;
            }
        }
        if o.back_to_back {
            timer = c.wtime() - loop_start;
        }
        let (avg, min, max) = over_ranks(c, timer * 1e6 / iters as f64)?;
        let first = match first {
            Some(t) => Some(over_ranks(c, t * 1e6)?.0),
            None => None,
        };
        let rdmc_mbs = match (rdmc, kind) {
            (true, CollKind::Bcast) => Some(rdmc_metric(c, &mut buf[..size], iters.min(50))?),
            _ => None,
        };
        rows.push(CollRow {
            size,
            avg,
            min,
            max,
            iterations: iters,
            rdmc_mbs,
            first,
        });
    }
    Ok(rows)
}

/// Paper 001's measure: the root starts the clock at its call and stops it when every rank
/// has told it (one small message each) that its broadcast returned; MB/s of the mean time.
fn rdmc_metric(c: &dyn Collective, buf: &mut [u8], iters: usize) -> Result<f64, String> {
    let mut total = 0.0;
    for _ in 0..iters {
        c.barrier()?;
        let t0 = c.wtime();
        c.bcast(buf, 0)?;
        if c.rank() == 0 {
            for r in 1..c.size() as u32 {
                c.recv(&mut [0u8], r, TAG_TIMES + 1)?;
            }
            total += c.wtime() - t0;
        } else {
            c.send(&[1u8], 0, TAG_TIMES + 1)?;
        }
    }
    let mean = total / iters as f64;
    Ok(if mean > 0.0 {
        buf.len() as f64 / mean / 1e6
    } else {
        0.0
    })
}

/// The table in OSU's layout (`# Size  Avg Latency(us)`, and the RDMC column if measured),
/// after `notes` as comment lines.
pub fn format(
    kind: CollKind,
    what: &str,
    rows: &[CollRow],
    notes: &[String],
    full: bool,
) -> String {
    let mut s = String::new();
    for n in notes {
        let _ = writeln!(s, "# {n}");
    }
    let _ = writeln!(s, "# OSU MPI {} v6.1 ({what})", kind.title());
    let rdmc = kind != CollKind::Barrier && rows.iter().any(|r| r.rdmc_mbs.is_some());
    let first = rows.iter().any(|r| r.first.is_some());
    let _ = write!(s, "{:<10}{:>18}", "# Size", "Avg Latency(us)");
    if first {
        let _ = write!(s, "{:>18}", "First call(us)");
    }
    if full {
        let _ = write!(
            s,
            "{:>18}{:>18}{:>12}",
            "Min Latency(us)", "Max Latency(us)", "Iterations"
        );
    }
    if rdmc {
        let _ = write!(s, "{:>18}", "RDMC MB/s");
    }
    let _ = writeln!(s);
    let d = crate::osu::digits();
    for r in rows {
        let _ = write!(s, "{:<10}{:>18.d$}", r.size, r.avg);
        if let Some(f) = r.first.filter(|_| first) {
            let _ = write!(s, "{f:>18.d$}");
        }
        if full {
            let _ = write!(s, "{:>18.d$}{:>18.d$}{:>12}", r.min, r.max, r.iterations);
        }
        if let Some(bw) = r.rdmc_mbs {
            let _ = write!(s, "{bw:>18.2}");
        }
        let _ = writeln!(s);
    }
    s
}

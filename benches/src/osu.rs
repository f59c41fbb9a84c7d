//! The OSU point-to-point loops (osu_latency, osu_bw, osu_bibw 6.x), written once for any
//! messaging layer, with OSU's options and output layout, and one of rdcoll's own in the same
//! layout: `sendrecv`, both ranks exchanging a message with each other (OSU has no such test).

use std::fmt::Write as _;

/// What the loops need from a messaging layer (two ranks, 0 and 1).
pub trait Messenger {
    /// This rank.
    fn rank(&self) -> u32;
    /// Blocking send of `buf` to `peer`.
    fn send(&self, buf: &[u8], peer: u32, tag: u32) -> Result<(), String>;
    /// Blocking receive from `peer` into `buf`.
    fn recv(&self, buf: &mut [u8], peer: u32, tag: u32) -> Result<(), String>;
    /// Starts one send of `buf` per window slot to `peer`, then waits for all.
    fn send_window(&self, buf: &[u8], window: usize, peer: u32, tag: u32) -> Result<(), String>;
    /// Posts a receive into each buffer of `bufs` from `peer`, then waits for all.
    fn recv_window(&self, bufs: &mut [Vec<u8>], peer: u32, tag: u32) -> Result<(), String>;
    /// Sends `buf` to `peer` and receives into `into` from `peer`, at once (`MPI_Sendrecv`).
    fn sendrecv(&self, buf: &[u8], into: &mut [u8], peer: u32, tag: u32) -> Result<(), String>;
    /// Both at once: receives into `bufs` and sends `buf` once per receive buffer.
    fn exchange_window(
        &self,
        buf: &[u8],
        bufs: &mut [Vec<u8>],
        peer: u32,
        tag: u32,
    ) -> Result<(), String>;
    /// Seconds on a monotonic clock.
    fn wtime(&self) -> f64;
}

/// Which benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// osu_latency: ping-pong, half the round trip.
    Latency,
    /// osu_bw: a window of sends one way, then a short acknowledgement.
    Bandwidth,
    /// osu_bibw: windows both ways at once.
    BiBandwidth,
    /// Both ranks exchange a message with each other (sendrecv), time per exchange: a halo
    /// exchange's or a ring step's cost.
    SendRecv,
}

impl Kind {
    /// From the subcommand name.
    pub fn from_name(s: &str) -> Option<Kind> {
        Some(match s {
            "latency" => Kind::Latency,
            "bw" => Kind::Bandwidth,
            "bibw" => Kind::BiBandwidth,
            "sendrecv" => Kind::SendRecv,
            _ => return None,
        })
    }

    /// The subcommand name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Latency => "latency",
            Kind::Bandwidth => "bw",
            Kind::BiBandwidth => "bibw",
            Kind::SendRecv => "sendrecv",
        }
    }

    /// OSU's title line.
    pub fn title(self) -> &'static str {
        match self {
            Kind::Latency => "Latency Test",
            Kind::Bandwidth => "Bandwidth Test",
            Kind::BiBandwidth => "Bi-Directional Bandwidth Test",
            Kind::SendRecv => "Sendrecv Latency Test",
        }
    }

    /// The value column's heading.
    pub fn unit(self) -> &'static str {
        match self {
            Kind::Latency | Kind::SendRecv => "Latency (us)",
            _ => "Bandwidth (MB/s)",
        }
    }

    /// Whether a larger value is better.
    pub fn higher_is_better(self) -> bool {
        !matches!(self, Kind::Latency | Kind::SendRecv)
    }
}

/// OSU's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Smallest message size (`-m MIN:MAX`).
    pub min: usize,
    /// Largest message size.
    pub max: usize,
    /// Iterations per size (`-i`); `None`: OSU's defaults.
    pub iterations: Option<usize>,
    /// Warm-up iterations per size (`-x`); `None`: OSU's defaults.
    pub warmup: Option<usize>,
    /// Messages per window for bw and bibw (`-W`, default 64).
    pub window: usize,
    /// Collectives: also the smallest and largest rank's mean latency and the iterations
    /// (`-f`, OSU's full format).
    pub full: bool,
    /// `--start-on-one-core`: as each size's timed loop starts, every rank moves onto the
    /// first core it may run on and is then free to run anywhere again: the state the
    /// scheduler now and then leaves two busy ranks in, reproduced at will.
    pub start_on_one_core: bool,
    /// `--first-call` (collectives): also report each size's first call on its own, every
    /// buffer written beforehand (run one size per launch to see a cold start).
    pub first_call: bool,
    /// `--back-to-back` (collectives): no barrier between calls; a rank's figure is its whole
    /// timed loop over the iterations (the rate of a program that calls one collective after
    /// another; OSU's figure has a barrier after each call, outside the timing).
    pub back_to_back: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            min: 0,
            max: 4 << 20,
            iterations: None,
            warmup: None,
            window: 64,
            full: false,
            start_on_one_core: false,
            first_call: false,
            back_to_back: false,
        }
    }
}

/// OSU's boundary between small and large messages (fewer iterations above it).
const LARGE: usize = 8192;

impl Options {
    /// Parses `-m [MIN:]MAX`, `-i N`, `-x N`, `-W N`, `-f` from `args`; returns the options and the
    /// arguments it did not recognise.
    pub fn parse(args: &[String]) -> Result<(Options, Vec<String>), String> {
        let mut o = Options::default();
        let mut rest = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = || it.next().ok_or(format!("{a} needs a value"));
            let number = |v: &String| {
                rdcoll_offload::p2p::parse_size(v).ok_or(format!("{a}: {v:?} is not a number"))
            };
            match a.as_str() {
                "-m" | "--message-size" => {
                    let v = value()?;
                    match v.split_once(':') {
                        Some((lo, hi)) => {
                            o.min = number(&lo.to_string())?;
                            o.max = number(&hi.to_string())?;
                        }
                        None => o.max = number(v)?,
                    }
                    if o.min > o.max {
                        return Err(format!("-m {v}: the smallest size exceeds the largest"));
                    }
                }
                "-i" | "--iterations" => o.iterations = Some(number(value()?)?.max(1)),
                "-x" | "--warmup" => o.warmup = Some(number(value()?)?),
                "-W" | "--window-size" => o.window = number(value()?)?.max(1),
                "-f" | "--full" => o.full = true,
                "--start-on-one-core" => o.start_on_one_core = true,
                "--first-call" => o.first_call = true,
                "--back-to-back" => o.back_to_back = true,
                _ => rest.push(a.clone()),
            }
        }
        Ok((o, rest))
    }

    /// The same options as arguments.
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec!["-m".into(), format!("{}:{}", self.min, self.max)];
        if let Some(i) = self.iterations {
            v.extend(["-i".into(), i.to_string()]);
        }
        if let Some(x) = self.warmup {
            v.extend(["-x".into(), x.to_string()]);
        }
        v.extend(["-W".into(), self.window.to_string()]);
        if self.full {
            v.push("-f".into());
        }
        if self.start_on_one_core {
            v.push("--start-on-one-core".into());
        }
        if self.first_call {
            v.push("--first-call".into());
        }
        if self.back_to_back {
            v.push("--back-to-back".into());
        }
        v
    }

    /// Called by every rank as a timed loop starts: with `--start-on-one-core`, moves the
    /// calling thread onto the first core it may run on and lets it run anywhere again.
    pub fn timed_loop_starts(&self) {
        if self.start_on_one_core {
            crowd_onto_first_core();
        }
    }

    /// The sizes OSU walks: 0 if in range, then powers of two from 1.
    pub fn sizes(&self) -> Vec<usize> {
        let mut v = Vec::new();
        if self.min == 0 {
            v.push(0);
        }
        let mut s = 1usize;
        while s <= self.max {
            if s >= self.min {
                v.push(s);
            }
            s = match s.checked_mul(2) {
                Some(n) => n,
                None => break,
            };
        }
        v
    }

    fn counts(&self, kind: Kind, size: usize) -> (usize, usize) {
        let large = size > LARGE;
        let (iters, skip) = match (kind, large) {
            (Kind::Latency | Kind::SendRecv, false) => (10_000, 100),
            (Kind::Latency | Kind::SendRecv, true) => (1_000, 10),
            (_, false) => (100, 10),
            (_, true) => (20, 2),
        };
        (
            self.iterations.unwrap_or(iters),
            self.warmup.unwrap_or(skip),
        )
    }
}

/// Moves the calling thread onto the first core of those it may run on, then lets it run on
/// all of them again (where it stays until the scheduler moves it).
fn crowd_onto_first_core() {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `cpu_set_t` is plain data; zeroed is an empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid set of `size` bytes, for the calling thread.
    if unsafe { libc::sched_getaffinity(0, size, &mut allowed) } != 0 {
        return;
    }
    let is_set = |c: usize| {
        // SAFETY: CPU_ISSET reads the set within its fixed size.
        unsafe { libc::CPU_ISSET(c, &allowed) }
    };
    let Some(first) = (0..libc::CPU_SETSIZE as usize).find(|&c| is_set(c)) else {
        return;
    };
    // SAFETY: as above.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `first` is below CPU_SETSIZE.
    unsafe { libc::CPU_SET(first, &mut one) };
    // SAFETY: valid sets of `size` bytes, for the calling thread.
    unsafe {
        if libc::sched_setaffinity(0, size, &one) == 0 {
            libc::sched_setaffinity(0, size, &allowed);
        }
    }
}

/// One row: size and value (µs or MB/s); only rank 0's rows mean anything.
pub type Row = (usize, f64);

/// Runs benchmark `kind` between ranks 0 and 1 of `m`.
pub fn run(m: &dyn Messenger, kind: Kind, o: &Options) -> Result<Vec<Row>, String> {
    let rank = m.rank();
    if rank > 1 {
        return Ok(Vec::new());
    }
    let peer = 1 - rank;
    let max = o.max;
    let sbuf = vec![b'a'; max];
    let mut rbuf = vec![b'b'; max];
    let window = o.window;
    let mut rows = Vec::new();
    for size in o.sizes() {
        let (iters, skip) = o.counts(kind, size);
        let mut t0 = 0.0;
        let elapsed = match kind {
            Kind::Latency => {
                for i in 0..iters + skip {
                    if i == skip {
                        o.timed_loop_starts();
                        t0 = m.wtime();
                    }
                    if rank == 0 {
                        m.send(&sbuf[..size], peer, 1)?;
                        m.recv(&mut rbuf[..size], peer, 1)?;
                    } else {
                        m.recv(&mut rbuf[..size], peer, 1)?;
                        m.send(&sbuf[..size], peer, 1)?;
                    }
                }
                m.wtime() - t0
            }
            Kind::Bandwidth => {
                let mut bufs = vec![vec![0u8; size]; window];
                let mut ack = [0u8; 4];
                for i in 0..iters + skip {
                    if i == skip {
                        t0 = m.wtime();
                    }
                    if rank == 0 {
                        m.send_window(&sbuf[..size], window, peer, 100)?;
                        m.recv(&mut ack, peer, 101)?;
                    } else {
                        m.recv_window(&mut bufs, peer, 100)?;
                        m.send(&ack, peer, 101)?;
                    }
                }
                m.wtime() - t0
            }
            Kind::BiBandwidth => {
                let mut bufs = vec![vec![0u8; size]; window];
                for i in 0..iters + skip {
                    if i == skip {
                        t0 = m.wtime();
                    }
                    m.exchange_window(&sbuf[..size], &mut bufs, peer, 100)?;
                }
                m.wtime() - t0
            }
            Kind::SendRecv => {
                for i in 0..iters + skip {
                    if i == skip {
                        o.timed_loop_starts();
                        t0 = m.wtime();
                    }
                    m.sendrecv(&sbuf[..size], &mut rbuf[..size], peer, 1)?;
                }
                m.wtime() - t0
            }
        };
        let value = match kind {
            Kind::Latency => elapsed * 1e6 / (2.0 * iters as f64),
            Kind::Bandwidth => (size * iters * window) as f64 / 1e6 / elapsed,
            Kind::BiBandwidth => (size * iters * window * 2) as f64 / 1e6 / elapsed,
            Kind::SendRecv => elapsed * 1e6 / iters as f64,
        };
        rows.push((size, value));
    }
    Ok(rows)
}

/// Decimals printed in the tables: OSU's 2 unless `RDCOLL_BENCH_DIGITS` (0-6) asks for more,
/// for telling apart latencies that differ by a few nanoseconds.
pub fn digits() -> usize {
    std::env::var("RDCOLL_BENCH_DIGITS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(2, |d| d.min(6))
}

/// The table in OSU's layout: a title line, a heading, and `%-10d%18.2f` rows.
pub fn format_table(kind: Kind, what: &str, rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# OSU MPI {} v6.1 ({what})", kind.title());
    let _ = writeln!(s, "{:<10}{:>18}", "# Size", kind.unit());
    let d = digits();
    for (size, v) in rows {
        let _ = writeln!(s, "{size:<10}{v:>18.d$}");
    }
    s
}

/// Per size, the median of several runs' values (sizes missing from a run are skipped).
pub fn median_rows(runs: &[Vec<Row>]) -> Vec<Row> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|&(size, _)| {
            let mut v: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.iter().find(|row| row.0 == size).map(|row| row.1))
                .collect();
            v.sort_by(|a, b| a.total_cmp(b));
            (size, v[v.len() / 2])
        })
        .collect()
}

/// Reads the rows back from a table in OSU's layout (lines that are not rows are skipped).
pub fn parse_table(text: &str) -> Vec<Row> {
    parse_table_column(text, 0)
}

/// Like [`parse_table`], taking value column `column` (0: the first after the size).
pub fn parse_table_column(text: &str, column: usize) -> Vec<Row> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let size = f.next()?.parse().ok()?;
            let values: Vec<f64> = f.map(|x| x.parse().ok()).collect::<Option<_>>()?;
            Some((size, *values.get(column)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_follow_osu() {
        let args: Vec<String> = ["-m", "4:64", "-i", "50", "-x", "5", "--ranks", "2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (o, rest) = Options::parse(&args).unwrap();
        assert_eq!(o.sizes(), vec![4, 8, 16, 32, 64]);
        assert_eq!(o.counts(Kind::Latency, 4), (50, 5));
        assert_eq!(rest, vec!["--ranks".to_string(), "2".to_string()]);
        let (d, _) = Options::parse(&[]).unwrap();
        assert_eq!(d.sizes().first(), Some(&0));
        assert_eq!(d.sizes().last(), Some(&(4 << 20)));
        assert_eq!(d.counts(Kind::Bandwidth, 1 << 20), (20, 2));
        assert!(Options::parse(&["-m".into(), "9:3".into()]).is_err());
        assert_eq!(Options::parse(&o.to_args()).unwrap().0, o);
    }

    #[test]
    fn tables_round_trip_in_osu_layout() {
        let t = format_table(Kind::Latency, "rdcoll", &[(0, 0.25), (8, 1.5)]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[1], "# Size          Latency (us)");
        assert_eq!(lines[3], "8                       1.50");
        assert_eq!(parse_table(&t), vec![(0, 0.25), (8, 1.5)]);
    }
}

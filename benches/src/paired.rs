//! `--vs-single-get`: the configured chunked rendezvous against a single-get rendezvous (one
//! chunk as large as the message, one credit), measured in the same two rank processes.
//!
//! The ranks switch their rendezvous settings (`Comm::set_rendezvous`) between batches: for
//! each size, `rounds` pairs of one OSU measurement with each setting, the order alternating
//! from pair to pair. Each pair runs within a second or so on the same cores, so the ratio of
//! a pair is not moved by where the hypervisor placed the processes, which changes from one
//! launch to the next and moved separately launched runs by ±10 %. A size reports the median of each setting and the
//! median of the per-pair ratios.

use rdcoll::Comm;
use rdcoll_bench::osu::{self, Kind, Messenger, Options};

/// The environment variable through which the launcher asks the ranks for paired rounds.
pub const ROUNDS_VAR: &str = "RDCOLL_BENCH_PAIRED_ROUNDS";

/// One size: the chunked and single-get measurements and their per-pair ratios.
struct Pairs {
    size: usize,
    chunked: Vec<f64>,
    single: Vec<f64>,
    ratios: Vec<f64>,
}

/// Runs the paired rounds on this rank (ranks 0 and 1 measure; rank 0 prints).
pub fn run(
    comm: &Comm,
    m: &dyn Messenger,
    kind: Kind,
    opts: &Options,
    rounds: usize,
) -> Result<(), String> {
    let s = |e: rdcoll::Error| e.to_string();
    let chunked = comm.rendezvous().map_err(s)?;
    let single = (rdcoll_offload::p2p::MAX_RNDV_CHUNK, 1);
    let mut all = Vec::new();
    for size in opts.sizes() {
        let one = Options {
            min: size,
            max: size,
            ..opts.clone()
        };
        let mut p = Pairs {
            size,
            chunked: Vec::new(),
            single: Vec::new(),
            ratios: Vec::new(),
        };
        for round in 0..rounds.max(1) {
            let mut pair = [0.0f64; 2];
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                let (chunk, credits) = if which == 0 { chunked } else { single };
                comm.set_rendezvous(chunk, credits).map_err(s)?;
                // Both ranks have switched before either starts the batch.
                comm.barrier().map_err(s)?;
                let rows = osu::run(m, kind, &one)?;
                pair[which] = rows.first().map_or(0.0, |r| r.1);
            }
            p.chunked.push(pair[0]);
            p.single.push(pair[1]);
            if pair[1] > 0.0 {
                p.ratios.push(pair[0] / pair[1]);
            }
        }
        all.push(p);
    }
    comm.set_rendezvous(chunked.0, chunked.1).map_err(s)?;
    if comm.rank() == 0 {
        print!("{}", format(kind, comm.backend(), chunked, rounds, &all));
    }
    Ok(())
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn format(
    kind: Kind,
    backend: &str,
    (chunk, credits): (usize, usize),
    rounds: usize,
    all: &[Pairs],
) -> String {
    use std::fmt::Write as _;
    let d = osu::digits();
    let unit = if kind.higher_is_better() {
        "MB/s"
    } else {
        "us"
    };
    let better = if kind.higher_is_better() {
        "higher"
    } else {
        "lower"
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# OSU MPI {} v6.1 layout, rdcoll/{backend} ({} KiB chunks, {credits} credits) vs \
         single-get; same processes, {rounds} paired rounds in alternating order",
        kind.title(),
        chunk >> 10
    );
    let _ = writeln!(
        out,
        "{:<10}{:>22}{:>22}{:>26}{:>16}",
        "# Size",
        format!("rdcoll/{backend} {unit}"),
        format!("single-get {unit}"),
        format!("pair ratio ({better} wins)"),
        "pair range"
    );
    for p in all {
        let lo = p.ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = p.ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let _ = writeln!(
            out,
            "{:<10}{:>22.d$}{:>22.d$}{:>26.2}{:>16}",
            p.size,
            median(&p.chunked),
            median(&p.single),
            median(&p.ratios),
            format!("{lo:.2}-{hi:.2}")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(super::median(&[]).is_nan());
    }
}

//! `rdcoll-bench stability [--launches N] BENCH [OPTIONS]`: how much one launch can differ
//! from the next. Launches `rdcoll-bench BENCH OPTIONS` N times (default 40), each launch
//! alternated with the same OSU loop under Open MPI's `mpirun` and MPICH's `mpiexec`, and
//! prints per library the median, p90 and worst launch and worst/median, for one size (the
//! first of the table, or `--size S`).
//!
//! `rdcoll-bench stability latency -m 8:8 --ranks 2` is 40 fresh jobs of each library, each
//! reporting its mean over OSU's default iterations and warm-up: what a user who launches a
//! job once sees, not what a long warm-up hides.

use std::process::Command;

use rdcoll_bench::osu;

use crate::compare::{self, Column};

/// The options stability takes for itself; the rest go to the benchmark.
struct Plan {
    launches: usize,
    size: Option<usize>,
    mpi: bool,
    bench: String,
    /// The benchmark's arguments, for rdcoll (with `--ranks`, `--transport`).
    args: Vec<String>,
    /// The same without rdcoll's launch options, for the MPI binary.
    mpi_args: Vec<String>,
    ranks: usize,
    /// rdcoll's `--transport` (the MPIs are run over the same: tcp or their default).
    transport: Option<String>,
}

fn parse(args: &[String]) -> Result<Plan, String> {
    let mut launches = 40;
    let mut size = None;
    let mut mpi = true;
    let mut it = args.iter();
    let bench = loop {
        let a = it
            .next()
            .ok_or("which benchmark? (latency, bcast, allreduce, ...)")?;
        let mut number = |what: &str| {
            it.next()
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|&n| n >= 1)
                .ok_or(format!("{what} needs a number >= 1"))
        };
        match a.as_str() {
            "--launches" => launches = number("--launches")?,
            "--size" => size = Some(number("--size")?),
            "--no-mpi" => mpi = false,
            other if other.starts_with('-') => return Err(format!("unknown option {other}")),
            other => break other.to_string(),
        }
    };
    let args: Vec<String> = it.cloned().collect();
    let mut mpi_args = vec![bench.clone()];
    let mut ranks = None;
    let mut transport = None;
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--ranks" => {
                let v = rest.next().ok_or("--ranks needs a value")?;
                ranks = Some(v.parse().map_err(|_| format!("bad --ranks {v:?}"))?);
            }
            "--transport" => {
                transport = Some(rest.next().ok_or("--transport needs a value")?.clone());
            }
            "--vs-mpi" | "--vs-algorithms" | "--rounds" => {
                return Err(format!("{a}: stability does its own comparing"))
            }
            _ => mpi_args.push(a.clone()),
        }
    }
    let ranks = ranks.ok_or("give the benchmark --ranks N (stability starts every job)")?;
    Ok(Plan {
        launches,
        size,
        mpi,
        bench,
        args,
        mpi_args,
        ranks,
        transport,
    })
}

/// Runs `rdcoll-bench stability ...`; returns the exit code.
pub fn run(args: &[String]) -> i32 {
    compare::exit_code("stability", run_inner(args))
}

fn run_inner(args: &[String]) -> Result<(), String> {
    let plan = parse(args)?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut columns = vec![Column {
        label: "rdcoll".into(),
        build: Box::new(|| {
            let mut c = Command::new(&exe);
            c.arg(&plan.bench).args(&plan.args);
            Ok(c)
        }),
    }];
    if plan.mpi {
        columns.extend(compare::mpi_columns(
            plan.mpi_args.clone(),
            plan.ranks,
            compare::MpiPath::for_transport(plan.transport.as_deref()),
        )?);
    }
    let mut values: Vec<Vec<f64>> = vec![Vec::new(); columns.len()];
    let mut size = plan.size;
    for _ in 0..plan.launches {
        for (i, c) in columns.iter().enumerate() {
            let (rows, _) = compare::capture((c.build)()?, 0)?;
            let wanted =
                *size.get_or_insert(rows.first().ok_or("the benchmark printed no rows")?.0);
            let row = rows
                .iter()
                .find(|r| r.0 == wanted)
                .ok_or(format!("{} printed no row for size {wanted}", c.label))?;
            values[i].push(row.1);
        }
    }
    let labels: Vec<&str> = columns.iter().map(|c| c.label.as_str()).collect();
    print!("{}", report(&plan, size.unwrap_or(0), &labels, &mut values));
    Ok(())
}

/// One library's launches, summarized.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The middle launch.
    pub median: f64,
    /// The launch 90 % of launches are at or below (nearest rank).
    pub p90: f64,
    /// The slowest launch.
    pub worst: f64,
}

impl Spread {
    /// The spread of `values` (sorted in place); `None` if there are none.
    pub fn of(values: &mut [f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(|a, b| a.total_cmp(b));
        let n = values.len();
        let p90 = values[(n * 9).div_ceil(10).max(1) - 1];
        Some(Spread {
            median: values[n / 2],
            p90,
            worst: values[n - 1],
        })
    }
}

fn report(plan: &Plan, size: usize, labels: &[&str], values: &mut [Vec<f64>]) -> String {
    use std::fmt::Write as _;
    let unit = match osu::Kind::from_name(&plan.bench) {
        Some(k) if k.higher_is_better() => "MB/s",
        _ => "us",
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# stability: `rdcoll-bench {} {}`, size {size}, {} launches of each library alternated",
        plan.bench,
        plan.args.join(" "),
        plan.launches
    );
    let _ = writeln!(
        out,
        "# {:<10} {:>10} {:>10} {:>10} {:>13}   ({unit}; every launch's figure is its mean)",
        "library", "median", "p90", "worst", "worst/median"
    );
    let d = osu::digits();
    let mut spreads = Vec::new();
    for (label, v) in labels.iter().zip(values.iter_mut()) {
        let Some(s) = Spread::of(v) else { continue };
        let _ = writeln!(
            out,
            "{:<12} {:>10.d$} {:>10.d$} {:>10.d$} {:>13.2}",
            label.replace(' ', "_"),
            s.median,
            s.p90,
            s.worst,
            s.worst / s.median
        );
        spreads.push(s);
    }
    for (label, v) in labels.iter().zip(values.iter()) {
        let list: Vec<String> = v.iter().map(|x| format!("{x:.d$}")).collect();
        let _ = writeln!(out, "# {label}, sorted: {}", list.join(" "));
    }
    if unit == "us" && spreads.len() > 1 {
        let ours = spreads[0];
        let best_p90 = spreads[1..].iter().map(|s| s.p90).fold(f64::MAX, f64::min);
        let _ = writeln!(
            out,
            "# rdcoll worst/median {:.2} (target <= 1.5), p90 / better MPI's p90 {:.2} (target <= 1)",
            ours.worst / ours.median,
            ours.p90 / best_p90
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn spread_takes_nearest_rank_percentiles() {
        let mut v: Vec<f64> = (1..=20).rev().map(f64::from).collect();
        let s = Spread::of(&mut v).unwrap();
        assert_eq!((s.median, s.p90, s.worst), (11.0, 18.0, 20.0));
        let s = Spread::of(&mut [3.0]).unwrap();
        assert_eq!((s.median, s.p90, s.worst), (3.0, 3.0, 3.0));
        assert!(Spread::of(&mut []).is_none());
    }

    #[test]
    fn launch_options_stay_with_rdcoll() {
        let p = parse(&strings(&[
            "--launches",
            "5",
            "bcast",
            "-m",
            "8:8",
            "--ranks",
            "4",
            "--transport",
            "shm",
        ]))
        .unwrap();
        assert_eq!((p.launches, p.ranks, p.bench.as_str()), (5, 4, "bcast"));
        assert_eq!(
            p.args,
            strings(&["-m", "8:8", "--ranks", "4", "--transport", "shm"])
        );
        assert_eq!(p.mpi_args, strings(&["bcast", "-m", "8:8"]));
        assert!(parse(&strings(&["latency", "-m", "8:8"])).is_err());
        let tcp = parse(&strings(&["latency", "--ranks", "2", "--transport", "tcp"])).unwrap();
        assert_eq!(tcp.transport.as_deref(), Some("tcp"));
        assert_eq!(tcp.mpi_args, strings(&["latency"]));
        assert!(parse(&strings(&["latency", "--ranks", "2", "--vs-mpi"])).is_err());
    }
}

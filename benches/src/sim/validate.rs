//! Does the model predict this machine? The OSU loops of `rdcoll-bench` run over tcp here and
//! over the simulated fabric with the model's three parameters measured from those tcp runs
//! (the overhead: the time per 8-byte message in the bandwidth test; the latency: the 8-byte
//! one-way latency less that; the bandwidth of 4 MiB), and each size's simulated time is set
//! beside the measured one.

use std::process::Command;

use super::{Figure, Series};
use crate::osu::{parse_table, Row};

/// What to compare.
pub struct Validate {
    /// Ranks of the collectives (latency and bandwidth use 2).
    pub ranks: usize,
    /// Largest message.
    pub max: usize,
}

impl Default for Validate {
    fn default() -> Self {
        Validate {
            ranks: 4,
            max: 1 << 20,
        }
    }
}

/// Runs `rdcoll-bench` (beside this binary) with `args`; its table's rows.
fn bench(args: &[String]) -> Result<Vec<Row>, String> {
    let exe = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name("rdcoll-bench");
    let out = Command::new(&exe)
        .args(args)
        .output()
        .map_err(|e| format!("{}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!(
            "rdcoll-bench {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(parse_table(&String::from_utf8_lossy(&out.stdout)))
}

fn args(kind: &str, ranks: usize, max: usize, transport: &[String]) -> Vec<String> {
    let min = if matches!(kind, "allreduce") { 4 } else { 1 };
    let mut v: Vec<String> = [kind, "--ranks", &ranks.to_string(), "-m"]
        .map(String::from)
        .to_vec();
    v.push(format!("{min}:{max}"));
    v.extend(transport.iter().cloned());
    v
}

/// Runs the comparison: per benchmark, simulated over measured time (bandwidth: measured
/// over simulated, so that above 1 the model is optimistic in both).
pub fn run(e: &Validate, progress: &mut dyn FnMut(&str)) -> Result<Figure, String> {
    let tcp = ["--transport".to_string(), "tcp".to_string()];
    let latency = bench(&args("latency", 2, e.max, &tcp))?;
    let bw = bench(&args("bw", 2, 4 << 20, &tcp))?;
    let one_way = latency
        .iter()
        .find(|r| r.0 == 8)
        .ok_or("no 8-byte latency")?
        .1;
    let mbs = bw.last().ok_or("no bandwidth")?.1;
    // The time per 8-byte message of the bandwidth test's window: the sender's overhead.
    let small = bw.iter().find(|r| r.0 == 8).ok_or("no 8-byte bandwidth")?.1;
    let overhead = 8.0 / small;
    progress(&format!(
        "measured over tcp: 8-byte latency {one_way:.2} us, 8-byte messages every \
         {overhead:.2} us, 4 MiB bandwidth {mbs:.0} MB/s"
    ));
    let sim: Vec<String> = [
        "--transport",
        "sim",
        "--sim-latency-us",
        &(one_way - overhead).max(0.0).to_string(),
        "--sim-bandwidth",
        &mbs.to_string(),
        "--sim-overhead-us",
        &overhead.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let mut series = Vec::new();
    for (kind, ranks, measured) in [
        ("latency", 2, Some(latency)),
        ("bw", 2, Some(bw)),
        ("bcast", e.ranks, None),
        ("allreduce", e.ranks, None),
    ] {
        let max = if kind == "bw" { 4 << 20 } else { e.max };
        let measured = match measured {
            Some(rows) => rows,
            None => bench(&args(kind, ranks, max, &tcp))?,
        };
        let simulated = bench(&args(kind, ranks, max, &sim))?;
        let mut s = Series::new(&format!("{kind} ({ranks} ranks)"));
        for (size, m) in &measured {
            if let Some((_, p)) = simulated.iter().find(|r| r.0 == *size) {
                let ratio = if kind == "bw" { m / p } else { p / m };
                s.points.push((*size as f64, ratio));
                progress(&format!(
                    "{kind} {size} B: measured {m:.2}, simulated {p:.2} (ratio {ratio:.2})"
                ));
            }
        }
        series.push(s);
    }
    Ok(Figure {
        name: "validate".into(),
        title: "Simulated / measured time, tcp on this host (1.0: exact)".into(),
        x_label: "message size (bytes)".into(),
        y_label: "simulated / measured".into(),
        series,
        log_y: true,
    })
}

//! `rdcoll-bench suite [--out DIR] [--rounds N] [--quick] [--only NAME,...]`: runs the
//! comparisons of docs/PERFORMANCE.md on this machine, each side by side with Open MPI and
//! MPICH where `scripts/build-mpi-bench` built them (else rdcoll alone), and writes under DIR
//! (default `docs/results`) a CSV and an SVG chart per comparison and a README.md with every
//! table, the host and the commit. The 4-rank runs take 100 timed iterations per size after
//! 50 untimed ones (`-i 100 -x 50`): MPICH with more ranks than cores takes milliseconds per
//! small collective. About 13 minutes on a 2-vCPU VM; `--quick` takes a few
//! sizes of each (7 minutes there beside both MPIs, most of it MPICH's 4-rank runs).

mod plot;
mod table;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::compare::{self, MpiPath};

/// One comparison: its file name, what it is, and the benchmark's arguments.
struct Entry {
    name: &'static str,
    what: &'static str,
    args: &'static [&'static str],
    /// The sizes `--quick` takes.
    quick: &'static str,
}

const ENTRIES: &[Entry] = &[
    Entry {
        name: "latency",
        what: "point-to-point latency (osu_latency), 2 ranks",
        args: &["latency", "--ranks", "2"],
        quick: "1:4096",
    },
    Entry {
        name: "bw",
        what: "point-to-point bandwidth (osu_bw), 2 ranks",
        args: &["bw", "--ranks", "2"],
        quick: "1:65536",
    },
    Entry {
        name: "bcast-2",
        what: "broadcast (osu_bcast), 2 ranks",
        args: &["bcast", "--ranks", "2"],
        quick: "1:65536",
    },
    Entry {
        name: "bcast-4",
        what: "broadcast (osu_bcast), 4 ranks",
        args: &["bcast", "--ranks", "4", "-i", "100", "-x", "50"],
        quick: "1:65536",
    },
    Entry {
        name: "allreduce-2",
        what: "allreduce of floats (osu_allreduce), 2 ranks",
        args: &["allreduce", "--ranks", "2"],
        quick: "4:65536",
    },
    Entry {
        name: "allreduce-4",
        what: "allreduce of floats (osu_allreduce), 4 ranks",
        args: &["allreduce", "--ranks", "4", "-i", "100", "-x", "50"],
        quick: "4:65536",
    },
    Entry {
        name: "barrier-2",
        what: "barrier (osu_barrier), 2 ranks",
        args: &["barrier", "--ranks", "2"],
        quick: "0:0",
    },
    Entry {
        name: "barrier-4",
        what: "barrier (osu_barrier), 4 ranks",
        args: &["barrier", "--ranks", "4", "-i", "100", "-x", "50"],
        quick: "0:0",
    },
    Entry {
        name: "allgather-4",
        what: "allgather (osu_allgather), 4 ranks",
        args: &["allgather", "--ranks", "4", "-i", "100", "-x", "50"],
        quick: "1:4096",
    },
    Entry {
        name: "alltoall-4",
        what: "alltoall (osu_alltoall), 4 ranks",
        args: &["alltoall", "--ranks", "4", "-i", "100", "-x", "50"],
        quick: "1:4096",
    },
    Entry {
        name: "reduce_scatter-4",
        what: "reduce_scatter (osu_reduce_scatter), 4 ranks",
        args: &["reduce_scatter", "--ranks", "4", "-i", "100", "-x", "50"],
        quick: "16:4096",
    },
    Entry {
        name: "first-call-bcast",
        what: "a fresh job's first 64 MiB broadcast, then the steady state, 2 ranks",
        args: &["bcast", "--ranks", "2", "--first-call", "-m", "64M:64M"],
        quick: "1M:1M",
    },
    Entry {
        name: "first-call-allreduce",
        what: "a fresh job's first 64 MiB allreduce, then the steady state, 4 ranks",
        args: &["allreduce", "--ranks", "4", "--first-call", "-m", "64M:64M"],
        quick: "1M:1M",
    },
];

struct Plan {
    out: PathBuf,
    rounds: usize,
    quick: bool,
    only: Option<Vec<String>>,
}

fn parse(args: &[String]) -> Result<Plan, String> {
    let mut plan = Plan {
        out: PathBuf::from("docs/results"),
        rounds: 3,
        quick: false,
        only: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--out" => plan.out = PathBuf::from(value()?),
            "--rounds" => {
                plan.rounds = value()?
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or("--rounds needs a number >= 1")?
            }
            "--quick" => plan.quick = true,
            "--only" => {
                let names: Vec<String> = value()?.split(',').map(str::to_string).collect();
                if let Some(n) = names.iter().find(|n| !ENTRIES.iter().any(|e| e.name == *n)) {
                    let known: Vec<&str> = ENTRIES.iter().map(|e| e.name).collect();
                    return Err(format!("--only {n}: not one of {}", known.join(", ")));
                }
                plan.only = Some(names);
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(plan)
}

/// Runs `rdcoll-bench suite ...`; returns the exit code.
pub fn run(args: &[String]) -> i32 {
    compare::exit_code("suite", parse(args).and_then(|p| run_plan(&p)))
}

fn run_plan(plan: &Plan) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let with_mpi = ["openmpi", "mpich"]
        .iter()
        .any(|m| compare::mpi_command(m, &[], 2, MpiPath::Default).is_some());
    if !with_mpi {
        eprintln!("# suite: no MPI build found (scripts/build-mpi-bench): rdcoll alone");
    }
    std::fs::create_dir_all(&plan.out).map_err(|e| format!("{}: {e}", plan.out.display()))?;
    let mut report = header(with_mpi, plan);
    let started = std::time::Instant::now();
    for e in ENTRIES {
        if plan
            .only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| n == e.name))
        {
            continue;
        }
        let mut cmd = Command::new(&exe);
        cmd.args(e.args);
        if plan.quick {
            cmd.args(["-m", e.quick]);
        }
        if with_mpi {
            cmd.args(["--vs-mpi", "--rounds", &plan.rounds.to_string()]);
        }
        eprintln!(
            "# suite: {} ({:.0} s so far)",
            e.name,
            started.elapsed().as_secs_f64()
        );
        let out = cmd.output().map_err(|err| format!("{}: {err}", e.name))?;
        if !out.status.success() {
            return Err(format!(
                "{} failed: {}",
                e.name,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let tables = table::parse(&String::from_utf8_lossy(&out.stdout));
        if tables.is_empty() {
            return Err(format!("{} printed no table", e.name));
        }
        report.push_str(&format!("\n## {}\n\n", e.what));
        report.push_str(&format!("`rdcoll-bench {}`\n", e.args.join(" ")));
        for (i, t) in tables.iter().enumerate() {
            let stem = if tables.len() > 1 {
                format!("{}-{}", e.name, i + 1)
            } else {
                e.name.to_string()
            };
            write(&plan.out, &format!("{stem}.csv"), &csv(t))?;
            report.push('\n');
            if let Some(svg) = plot::svg(t, &format!("{}: {}", e.name, t.title))? {
                write(&plan.out, &format!("{stem}.svg"), &svg)?;
                report.push_str(&format!("![{stem}]({stem}.svg)\n\n"));
            }
            report.push_str(&markdown(t));
        }
    }
    write(&plan.out, "README.md", &report)?;
    eprintln!(
        "# suite: wrote {} in {:.0} s",
        plan.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn write(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    let p = dir.join(name);
    std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))
}

/// The size, each library's value and rdcoll's ratio to the best other.
fn csv(t: &table::Table) -> String {
    let mut out = format!("size,{},rdcoll/best\n", t.columns.join(","));
    for (i, (size, values)) in t.rows.iter().enumerate() {
        let cells: Vec<String> = values
            .iter()
            .map(|v| v.map_or(String::new(), |v| v.to_string()))
            .collect();
        let ratio = t.ratio(i).map_or(String::new(), |r| format!("{r:.3}"));
        out.push_str(&format!("{size},{},{ratio}\n", cells.join(",")));
    }
    out
}

fn markdown(t: &table::Table) -> String {
    let unit = &t.unit;
    let better = if t.higher_is_better() {
        "higher"
    } else {
        "lower"
    };
    let heads: Vec<String> = t.columns.iter().map(|c| format!("{c} ({unit})")).collect();
    let mut out = format!(
        "{}\n\n| size | {} | rdcoll / best other ({better} is better for rdcoll) |\n|---:|{}---:|\n",
        t.title,
        heads.join(" | "),
        "---:|".repeat(t.columns.len())
    );
    for (i, (size, values)) in t.rows.iter().enumerate() {
        let cells: Vec<String> = values
            .iter()
            .map(|v| v.map_or("-".into(), |v| format!("{v:.2}")))
            .collect();
        let ratio = t.ratio(i).map_or("-".into(), |r| format!("{r:.2}"));
        out.push_str(&format!("| {size} | {} | {ratio} |\n", cells.join(" | ")));
    }
    out
}

/// What ran where: host, commit, libraries, the command.
fn header(with_mpi: bool, plan: &Plan) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_default();
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let date = Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d %H:%M UTC")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let against = if with_mpi {
        format!(
            "side by side with Open MPI and MPICH (where built), {} interleaved rounds, median per size",
            plan.rounds
        )
    } else {
        "rdcoll alone (no MPI build found)".into()
    };
    format!(
        "# rdcoll-bench suite\n\nGenerated by `rdcoll-bench suite{}` on {date}: {cpu}, {cores} \
         cores, {os}; rdcoll at commit {commit}; {against}. Times in microseconds (lower is \
         better), bandwidth in MB/s (higher is better); the last column of each table is \
         rdcoll's figure over the best other library's.\n",
        if plan.quick { " --quick" } else { "" }
    )
}

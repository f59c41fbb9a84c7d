//! Side-by-side runs: rdcoll and the same benchmark built on the `mpi` crate under Open MPI's
//! `mpirun` and MPICH's `mpiexec` (whichever `scripts/build-mpi-bench` built), each column run
//! once per round, interleaved, and each size reported as the median of the rounds, so that a
//! change of where the hypervisor puts the vCPUs hits every column alike.

use std::path::PathBuf;
use std::process::Command;

use rdcoll_bench::osu::{self, Row};

/// The options every comparing benchmark takes besides OSU's own: where its ranks run and
/// what it is compared with.
pub struct Launch {
    /// `--ranks N`: the binary starts its own ranks.
    pub ranks: Option<usize>,
    /// `--transport shm|tcp`.
    pub transport: Option<String>,
    /// `--vs-mpi`: side by side with Open MPI and MPICH.
    pub vs_mpi: bool,
    /// `--rounds N`: times each column is run, interleaved; each size reports the median.
    pub rounds: usize,
    /// With `--transport sim`: the simulated network (`--sim-latency-us`, `--sim-bandwidth`
    /// in MB/s, `--sim-overhead-us`, `--sim-packets MTU,BUFFER` for the packet-level network;
    /// a 100 Gb/s switch by default).
    pub sim: rdcoll::sim::SimConfig,
}

impl Launch {
    /// No options given: three rounds.
    pub fn new() -> Launch {
        Launch {
            ranks: None,
            transport: None,
            vs_mpi: false,
            rounds: 3,
            sim: rdcoll::sim::SimConfig::switch(2),
        }
    }

    /// The simulated job of `n` ranks when `--transport sim` was given.
    pub fn sim_job(&self, n: usize) -> Option<rdcoll::sim::SimConfig> {
        (self.transport.as_deref() == Some("sim")).then(|| rdcoll::sim::SimConfig {
            ranks: n,
            ..self.sim.clone()
        })
    }

    /// Takes option `a` (and its value from `rest`) if it is one of these; `Ok(false)` if it
    /// is not. `--ranks` takes at least `min_ranks`.
    pub fn take<'a>(
        &mut self,
        a: &str,
        rest: &mut impl Iterator<Item = &'a String>,
        min_ranks: usize,
    ) -> Result<bool, String> {
        let mut number = |at_least: usize| {
            rest.next()
                .and_then(|v| v.parse().ok())
                .filter(|&n| n >= at_least)
                .ok_or(format!("{a} needs a number >= {at_least}"))
        };
        match a {
            "--ranks" => self.ranks = Some(number(min_ranks)?),
            "--rounds" => self.rounds = number(1)?,
            "--transport" => {
                self.transport = Some(rest.next().ok_or("--transport needs a value")?.clone())
            }
            "--vs-mpi" => self.vs_mpi = true,
            "--sim-latency-us" | "--sim-overhead-us" | "--sim-bandwidth" => {
                let v: f64 = rest
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                    .ok_or(format!("{a} needs a number >= 0"))?;
                let us = std::time::Duration::from_nanos((v * 1e3) as u64);
                match a {
                    // One-way latency: two hops.
                    "--sim-latency-us" => self.sim.hop_latency = us / 2,
                    "--sim-overhead-us" => self.sim.overhead = us,
                    _ => self.sim.link_bandwidth = v.max(1e-3) * 1e6,
                }
            }
            "--sim-packets" => {
                let sizes: Vec<usize> = rest
                    .next()
                    .and_then(|v| v.split(',').map(|x| x.parse().ok()).collect())
                    .filter(|v: &Vec<usize>| v.len() == 2 && v[0] > 0 && v[1] >= v[0])
                    .ok_or(format!("{a} needs MTU,BUFFER in bytes (BUFFER >= MTU > 0)"))?;
                self.sim.network = rdcoll::sim::NetworkModel::Packets {
                    mtu: sizes[0],
                    buffer: sizes[1],
                };
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// The exit code of benchmark `name`'s `result`, saying what went wrong.
pub fn exit_code(name: &str, result: Result<(), String>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("rdcoll-bench {name}: {e}");
            1
        }
    }
}

/// Runs the job `spec` on this host and waits for it: an error naming the first rank that did
/// not exit cleanly.
pub fn run_ranks(spec: &rdcoll_transport::launch::JobSpec) -> Result<(), String> {
    let report = rdcoll_transport::launch::run_job(spec).map_err(|e| e.to_string())?;
    match report.exits.iter().find(|e| !e.status.success()) {
        Some(e) => Err(format!(
            "rank {} {}",
            e.rank,
            rdcoll_transport::launch::describe(e.status)
        )),
        None => Ok(()),
    }
}

/// Builds one column's command (anew for every round).
pub type Build<'a> = Box<dyn Fn() -> Result<Command, String> + 'a>;

/// A column of the comparison.
pub struct Column<'a> {
    /// Its heading.
    pub label: String,
    /// Its command.
    pub build: Build<'a>,
}

/// Runs `cmd` and returns the table it printed (value column `column`) and its remarks.
pub fn capture(cmd: Command, column: usize) -> Result<(Vec<Row>, Vec<String>), String> {
    let (mut tables, remarks) = capture_columns(cmd, &[column])?;
    Ok((tables.pop().unwrap_or_default(), remarks))
}

/// Runs `cmd` and returns the table it printed once per value column of `columns`, and its
/// remarks.
fn capture_columns(
    mut cmd: Command,
    columns: &[usize],
) -> Result<(Vec<Vec<Row>>, Vec<String>), String> {
    let out = cmd.output().map_err(|e| format!("starting {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let tables = columns
        .iter()
        .map(|&c| osu::parse_table_column(&text, c))
        .collect();
    Ok((tables, remarks(&text)))
}

/// The comment lines a run printed before its table (rdcoll: the reduce tree's degree per
/// size), without their `# `.
fn remarks(text: &str) -> Vec<String> {
    text.lines()
        .take_while(|l| !l.starts_with("# OSU"))
        .filter_map(|l| l.strip_prefix("# "))
        .map(str::to_string)
        .collect()
}

/// Where `scripts/build-mpi-bench` put the benchmark built against `mpi` (`openmpi`, `mpich`).
fn mpi_binary(mpi: &str) -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("RDCOLL_BENCH_MPI_DIR") {
        let p = PathBuf::from(dir)
            .join(mpi)
            .join("release/rdcoll-bench-mpi");
        return p.exists().then_some(p);
    }
    let exe = std::env::current_exe().ok()?;
    let target = exe.parent()?.parent()?;
    let p = target
        .join("mpi")
        .join(mpi)
        .join("release/rdcoll-bench-mpi");
    p.exists().then_some(p)
}

fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// How the MPI side moves its messages: as it likes on one host (shared memory), or over
/// TCP sockets like `rdcoll ... --transport tcp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpiPath {
    /// The MPI's own choice (shared memory between ranks on one host).
    Default,
    /// TCP for every message: Open MPI's `ob1` with the `tcp` and `self` BTLs; MPICH (ch4 over
    /// UCX) with local ranks sent through the network module and UCX on `tcp` only.
    Tcp,
    /// libfabric, like `rdcoll ... --transport ofi`: Open MPI's `cm` PML over its `ofi` MTL on
    /// the provider named by `FI_PROVIDER` (default `tcp`). Debian's MPICH is built on UCX
    /// only, so it is not compared.
    Ofi,
}

impl MpiPath {
    /// The path matching rdcoll's `--transport` (`None`: shm).
    pub fn for_transport(transport: Option<&str>) -> MpiPath {
        match transport {
            Some("tcp") => MpiPath::Tcp,
            Some("ofi") => MpiPath::Ofi,
            _ => MpiPath::Default,
        }
    }
}

/// `rdcoll-bench-mpi ARGS` on `ranks` ranks under `mpi` (`openmpi` or `mpich`), moving its
/// messages by `path`, if built and installed.
pub fn mpi_command(mpi: &str, args: &[String], ranks: usize, path: MpiPath) -> Option<Command> {
    let bin = mpi_binary(mpi)?;
    let mut c = match mpi {
        "openmpi" if installed("mpirun.openmpi") => {
            let mut c = Command::new("mpirun.openmpi");
            c.args(["-n", &ranks.to_string(), "--oversubscribe"])
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            if path == MpiPath::Tcp {
                c.args(["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]);
            }
            if path == MpiPath::Ofi {
                let provider = std::env::var("FI_PROVIDER").unwrap_or_else(|_| "tcp".into());
                c.args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"]).args([
                    "--mca",
                    "mtl_ofi_provider_include",
                    &provider,
                ]);
            }
            c
        }
        "mpich" if path == MpiPath::Ofi => return None,
        "mpich" if installed("mpiexec.mpich") => {
            let mut c = Command::new("mpiexec.mpich");
            c.args(["-n", &ranks.to_string()]);
            if path == MpiPath::Tcp {
                c.env("MPIR_CVAR_NOLOCAL", "1").env("UCX_TLS", "tcp,self");
            }
            c
        }
        _ => return None,
    };
    c.arg(bin).args(args);
    Some(c)
}

/// The Open MPI and MPICH columns for `rdcoll-bench-mpi ARGS` on `ranks` ranks, moving their
/// messages by `path`; an error if neither is there.
pub fn mpi_columns<'a>(
    args: Vec<String>,
    ranks: usize,
    path: MpiPath,
) -> Result<Vec<Column<'a>>, String> {
    let mut out = Vec::new();
    for (mpi, name) in [("openmpi", "Open MPI"), ("mpich", "MPICH")] {
        let label = match path {
            MpiPath::Default => name.to_string(),
            MpiPath::Tcp => format!("{name}/tcp"),
            MpiPath::Ofi => format!("{name}/ofi"),
        };
        if mpi_command(mpi, &args, ranks, path).is_some() {
            let args = args.clone();
            let gone = format!("{label} went away");
            out.push(Column {
                label,
                build: Box::new(move || mpi_command(mpi, &args, ranks, path).ok_or(gone.clone())),
            });
        } else {
            eprintln!("# {label}: not compared (install it and run scripts/build-mpi-bench)");
        }
    }
    if out.is_empty() {
        return Err("no MPI to compare with: run scripts/build-mpi-bench first".into());
    }
    Ok(out)
}

/// A column's label and its rows.
pub type Labelled = (String, Vec<Row>);

/// Runs every column `rounds` times, interleaved; each size's value (value column `value`
/// of the tables) is the median. Also returns the remarks the first column's first run
/// printed before its table.
pub fn run_columns(
    columns: &[Column],
    rounds: usize,
    value: usize,
) -> Result<(Vec<Labelled>, Vec<String>), String> {
    let (mut merged, remarks) = run_columns_at(columns, rounds, &[value])?;
    Ok((merged.pop().unwrap_or_default(), remarks))
}

/// [`run_columns`] for several value columns of the same runs: one set of medians per entry
/// of `values`.
pub fn run_columns_at(
    columns: &[Column],
    rounds: usize,
    values: &[usize],
) -> Result<(Vec<Vec<Labelled>>, Vec<String>), String> {
    // runs[value][column][round]
    let mut runs: Vec<Vec<Vec<Vec<Row>>>> = vec![vec![Vec::new(); columns.len()]; values.len()];
    let mut first_remarks = None;
    for _ in 0..rounds.max(1) {
        for (i, c) in columns.iter().enumerate() {
            let (tables, remarks) = capture_columns((c.build)()?, values)?;
            if i == 0 {
                first_remarks.get_or_insert(remarks);
            }
            for (v, rows) in tables.into_iter().enumerate() {
                runs[v][i].push(rows);
            }
        }
    }
    let merged = runs
        .iter()
        .map(|per_column| {
            columns
                .iter()
                .zip(per_column)
                .map(|(c, r)| (c.label.clone(), osu::median_rows(r)))
                .collect()
        })
        .collect();
    Ok((merged, first_remarks.unwrap_or_default()))
}

/// The tables side by side; the last column is the first column's value over the best of
/// the others.
pub fn side_by_side(
    title: &str,
    unit: &str,
    higher_is_better: bool,
    columns: &[(String, Vec<Row>)],
    rounds: usize,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
    let _ = writeln!(
        out,
        "# OSU MPI {title} v6.1 layout, {}; same run, {rounds} interleaved rounds, median per size",
        names.join(" vs ")
    );
    let _ = write!(out, "{:<10}", "# Size");
    let heads: Vec<String> = names.iter().map(|n| format!("{n} {unit}")).collect();
    let width = heads
        .iter()
        .map(|h| h.len() + 2)
        .max()
        .unwrap_or(18)
        .max(18);
    for h in &heads {
        let _ = write!(out, "{h:>width$}");
    }
    let better = if higher_is_better { "higher" } else { "lower" };
    let _ = writeln!(
        out,
        " {:>25}",
        format!(
            "{}/best ({better} wins)",
            names
                .first()
                .map_or("rdcoll", |n| n.split('/').next().unwrap_or(n))
        )
    );
    let Some((_, first)) = columns.first() else {
        return out;
    };
    let d = rdcoll_bench::osu::digits();
    for (i, &(size, ours)) in first.iter().enumerate() {
        let _ = write!(out, "{size:<10}{ours:>width$.d$}");
        let mut best: Option<f64> = None;
        for (_, rows) in &columns[1..] {
            match rows.get(i).filter(|r| r.0 == size).map(|r| r.1) {
                Some(v) => {
                    let _ = write!(out, "{v:>width$.d$}");
                    best = Some(match best {
                        None => v,
                        Some(b) if higher_is_better => b.max(v),
                        Some(b) => b.min(v),
                    });
                }
                None => {
                    let _ = write!(out, "{:>width$}", "-");
                }
            }
        }
        match best {
            Some(b) if b > 0.0 => {
                let _ = writeln!(out, "{:>26.2}", ours / b);
            }
            _ => {
                let _ = writeln!(out, "{:>26}", "-");
            }
        }
    }
    out
}

//! `rdcoll-bench transport`: per backend, 8-byte one-way message latency (ping-pong / 2) and get
//! bandwidth from 64 KiB to 64 MiB, beside the floors they are judged against, measured in the
//! same run: a bare shared-memory cache-line ping-pong between two processes, and single-thread
//! `memcpy` bandwidth; for tcp, a bare busy-polled TCP loopback ping-pong.

use std::io::Write;
use std::time::{Duration, Instant};

use rdcoll_transport::launch::{run_job, JobSpec};
use rdcoll_transport::{Event, EventRef, Fabric, RemoteRegion};

mod floors;
use floors::{cacheline_floor_ns, cma_bw, memcpy_bw, placement, tcp_floor_ns, PairedFloor};

/// A backend to measure: label, `RDCOLL_TRANSPORT`, extra environment.
type BackendJob = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const GET_SIZES: &[usize] = &[64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];
const WORKER_FLAG: &str = "--worker";
/// Latency is timed in this many batches; the median batch is reported.
const BATCHES: u64 = 20;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Options parsed from the command line.
struct Opts {
    pingpongs: u64,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts { pingpongs: 50_000 };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--pingpongs" => {
                o.pingpongs = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n| n > 0)
                    .ok_or("--pingpongs needs a positive number")?
            }
            WORKER_FLAG => {}
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

/// One backend's results.
#[derive(Debug, Default, Clone)]
struct Row {
    name: String,
    latency_ns: f64,
    /// For process backends: the cache-line floor measured by the same two rank processes,
    /// batch by batch between the message batches (median ns), and the median of the
    /// per-batch ratios. Immune to the vCPU placement changing between measurements.
    paired: Option<(f64, f64)>,
    /// (size, bytes per second)
    get_bw: Vec<(usize, f64)>,
}

impl Row {
    fn encode(&self) -> String {
        let bw: Vec<String> = self
            .get_bw
            .iter()
            .map(|(s, b)| format!("{s}:{b}"))
            .collect();
        let (pf, pr) = self.paired.unwrap_or((f64::NAN, f64::NAN));
        format!(
            "{}|{}|{pf}|{pr}|{}",
            self.name,
            self.latency_ns,
            bw.join(",")
        )
    }
    fn decode(s: &str) -> Option<Row> {
        let mut f = s.trim().split('|');
        let name = f.next()?.to_string();
        let latency_ns = f.next()?.parse().ok()?;
        let pf: f64 = f.next()?.parse().ok()?;
        let pr: f64 = f.next()?.parse().ok()?;
        let paired = (pf.is_finite() && pr.is_finite()).then_some((pf, pr));
        let get_bw = f
            .next()?
            .split(',')
            .filter(|x| !x.is_empty())
            .map(|p| {
                let (a, b) = p.split_once(':')?;
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Row {
            name,
            latency_ns,
            paired,
            get_bw,
        })
    }
}

/// Entry point; returns the exit code.
pub fn run(args: &[String]) -> i32 {
    let opts = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rdcoll-bench transport: {e}");
            return 2;
        }
    };
    if args.iter().any(|a| a == WORKER_FLAG) {
        return worker(&opts);
    }
    driver(&opts)
}

/// Rank code for process backends: measure, and rank 0 writes the row to RDCOLL_BENCH_OUT.
fn worker(opts: &Opts) -> i32 {
    let fabric = match rdcoll_transport::bootstrap::init_from_env() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("bootstrap: {e}");
            return 1;
        }
    };
    let registered = std::env::var("RDCOLL_BENCH_REGION").is_ok_and(|v| v == "registered");
    let mut name = fabric.backend().to_string();
    if registered {
        name.push_str(" (user memory)");
    } else if fabric.backend() == "shm" && std::env::var("RDCOLL_SHM_CMA").is_ok_and(|v| v == "0") {
        name.push_str(" (bounce)");
    }
    match measure(fabric.as_ref(), opts, registered, name) {
        Ok(Some(row)) => {
            if let Ok(path) = std::env::var("RDCOLL_BENCH_OUT") {
                if std::fs::write(path, row.encode()).is_err() {
                    return 1;
                }
            }
            0
        }
        Ok(None) => 0,
        Err(e) => {
            eprintln!("rank {}: {e}", fabric.rank());
            1
        }
    }
}

fn wait_message(f: &dyn Fabric) -> Result<Vec<u8>, String> {
    loop {
        match f
            .wait(Some(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?
        {
            Some(Event::Message { data, .. }) => return Ok(data.to_vec()),
            Some(Event::PeerFailed { rank }) => return Err(format!("rank {rank} failed")),
            Some(_) => {}
            None => return Err("timed out".into()),
        }
    }
}

/// Waits for the next message: busy-polling on shm (its fast path), through `wait` elsewhere
/// (their events come from another thread, which a spinning rank would starve on 2 cores).
fn spin_message(f: &dyn Fabric) -> Result<(), String> {
    if f.backend() != "shm" {
        return wait_message(f).map(drop);
    }
    // `poll_with` lends the message bytes from the ring: the zero-copy receive path.
    let mut got: Option<Result<(), String>> = None;
    loop {
        let mut on_event = |ev: EventRef<'_>| match ev {
            EventRef::Message { .. } => got = Some(Ok(())),
            EventRef::Owned(Event::PeerFailed { rank }) => {
                got = Some(Err(format!("rank {rank} failed")))
            }
            EventRef::Owned(_) => {}
        };
        match f.poll_with(&mut on_event) {
            Ok(true) => {
                if let Some(r) = got.take() {
                    return r;
                }
            }
            Ok(false) => std::hint::spin_loop(),
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn wait_op(f: &dyn Fabric, op: rdcoll_transport::OpId) -> Result<(), String> {
    loop {
        match f.poll().map_err(|e| e.to_string())? {
            Some(Event::Completed { op: o, result }) if o == op => {
                return result.map_err(|e| e.to_string())
            }
            Some(Event::PeerFailed { rank }) => return Err(format!("rank {rank} failed")),
            Some(_) => {}
            None => {
                if matches!(f.backend(), "tcp" | "ofi") {
                    f.block(Duration::from_millis(1));
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

/// Ping-pong and gets between ranks 0 and 1; rank 0 returns the row.
fn measure(
    f: &dyn Fabric,
    opts: &Opts,
    registered: bool,
    name: String,
) -> Result<Option<Row>, String> {
    let me = f.rank();
    let peer = 1 - me;
    let msg = [0u8; 8];
    // Latency: warm up, then time round trips in batches and keep the median batch, so a
    // rank preempted for a few milliseconds on this shared 2-core machine skews nothing.
    let pingpongs = if matches!(f.backend(), "tcp" | "ofi") {
        (opts.pingpongs / 5).max(BATCHES)
    } else {
        opts.pingpongs.max(BATCHES)
    };
    let per_batch = pingpongs / BATCHES;
    let mut batches = Vec::with_capacity(BATCHES as usize);
    let mut floor = PairedFloor::open(f)?;
    let mut floor_batches = Vec::with_capacity(BATCHES as usize);
    let mut ratios = Vec::with_capacity(BATCHES as usize);
    for b in 0..=BATCHES {
        let floor_ns = floor.as_mut().map(|fl| fl.batch(me, per_batch));
        let t0 = Instant::now();
        for _ in 0..per_batch {
            if me == 0 {
                f.send(peer, &msg).map_err(|e| e.to_string())?;
                spin_message(f)?;
            } else {
                spin_message(f)?;
                f.send(peer, &msg).map_err(|e| e.to_string())?;
            }
        }
        // Batch 0 is the warm-up.
        if b > 0 {
            let ns = t0.elapsed().as_nanos() as f64 / per_batch as f64 / 2.0;
            batches.push(ns);
            if let Some(fl) = floor_ns {
                floor_batches.push(fl);
                ratios.push(ns / fl);
            }
        }
    }
    let latency_ns = median(&mut batches);
    let paired = floor
        .is_some()
        .then(|| (median(&mut floor_batches), median(&mut ratios)));
    // Bandwidth: rank 1 exposes 64 MiB, rank 0 gets from it.
    let max = *GET_SIZES.last().unwrap_or(&0);
    let mut backing = Vec::new();
    let region = if registered {
        backing = vec![7u8; max];
        // SAFETY: `backing` outlives the region: the region is dropped before `backing` below.
        unsafe { f.register_memory(backing.as_mut_ptr(), max) }
    } else {
        f.alloc_region(max)
    }
    .map_err(|e| e.to_string())?;
    region.fill(0, max, 7).map_err(|e| e.to_string())?;
    f.send(peer, &region.remote().to_bytes())
        .map_err(|e| e.to_string())?;
    let remote = RemoteRegion::from_bytes(&wait_message(f)?).map_err(|e| e.to_string())?;
    let mut row = Row {
        name,
        latency_ns,
        paired,
        get_bw: Vec::new(),
    };
    if me == 0 {
        for &size in GET_SIZES {
            let iters = ((512usize << 20) / size).clamp(4, 2000);
            let op = f
                .get(&region, 0, size, remote.at(0))
                .map_err(|e| e.to_string())?;
            wait_op(f, op)?;
            let t = Instant::now();
            for _ in 0..iters {
                let op = f
                    .get(&region, 0, size, remote.at(0))
                    .map_err(|e| e.to_string())?;
                wait_op(f, op)?;
            }
            row.get_bw
                .push((size, (size * iters) as f64 / t.elapsed().as_secs_f64()));
        }
        f.send(peer, b"done").map_err(|e| e.to_string())?;
    } else {
        wait_message(f)?;
    }
    region.deregister();
    drop(region);
    drop(backing);
    Ok((me == 0).then_some(row))
}

fn job_row(opts: &Opts, transport: &str, env: &[(&str, &str)]) -> Result<Row, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::env::temp_dir().join(format!("rdcoll-bench-{}-{transport}", std::process::id()));
    let mut spec = JobSpec::new(
        2,
        vec![
            exe.into(),
            "transport".into(),
            WORKER_FLAG.into(),
            "--pingpongs".into(),
            opts.pingpongs.to_string().into(),
        ],
    );
    spec.transport = Some(transport.into());
    spec.env
        .push(("RDCOLL_BENCH_OUT".into(), out.clone().into()));
    for (k, v) in env {
        spec.env.push(((*k).into(), (*v).into()));
    }
    let report = run_job(&spec).map_err(|e| e.to_string())?;
    if report.exit_code() != 0 {
        return Err(format!(
            "{transport} job failed with {}",
            report.exit_code()
        ));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&out);
    Row::decode(&text).ok_or_else(|| "malformed result".into())
}

fn local_row(opts: &Opts) -> Result<Row, String> {
    let fabrics = rdcoll_transport::local::create(2).map_err(|e| e.to_string())?;
    std::thread::scope(|s| {
        let hs: Vec<_> = fabrics
            .into_iter()
            .map(|f| s.spawn(move || measure(&f, opts, false, "local".into())))
            .collect();
        let mut row = None;
        for h in hs {
            if let Some(r) = h.join().map_err(|_| "rank panicked".to_string())?? {
                row = Some(r);
            }
        }
        row.ok_or_else(|| "no result".into())
    })
}

fn gbs(b: f64) -> String {
    format!("{:.2}", b / 1e9)
}

fn driver(opts: &Opts) -> i32 {
    let mut floors = vec![cacheline_floor_ns(opts.pingpongs * 4)];
    let memcpy: Vec<(usize, f64)> = GET_SIZES.iter().map(|&s| (s, memcpy_bw(s))).collect();
    let cma = cma_bw();
    let mut rows = Vec::new();
    let mut jobs: Vec<BackendJob> = vec![
        ("local", "", &[]),
        ("shm", "shm", &[]),
        (
            "shm-registered",
            "shm",
            &[("RDCOLL_BENCH_REGION", "registered")],
        ),
        ("tcp", "tcp", &[]),
    ];
    if cfg!(feature = "ofi") {
        jobs.push((
            "ofi (libfabric tcp;ofi_rxm)",
            "ofi",
            &[("FI_PROVIDER", "tcp")],
        ));
    }
    for (label, transport, env) in jobs {
        let r = if label == "local" {
            local_row(opts)
        } else {
            job_row(opts, transport, env)
        };
        match r {
            Ok(r) => rows.push(r),
            Err(e) => {
                eprintln!("rdcoll-bench transport: {label}: {e}");
                return 1;
            }
        }
    }
    // The floor moves with where the hypervisor places the two vCPUs: take it before and
    // after the backends and judge against the mean.
    floors.push(cacheline_floor_ns(opts.pingpongs * 4));
    let floor = (floors[0] + floors[1]) / 2.0;
    let tcp_floor = tcp_floor_ns(opts.pingpongs / 5);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "# rdcoll-bench transport ({} ping-pongs per backend)",
        opts.pingpongs
    );
    let _ = writeln!(out, "\n## 8-byte one-way latency (ping-pong / 2)\n");
    let _ = writeln!(
        out,
        "| backend | one-way ns | vs cache-line floor | paired floor ns | vs paired floor |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|");
    let _ = writeln!(out, "| bare cache-line ping-pong (2 processes; before/after: {:.0}/{:.0}) | {floor:.0} | 1.00x | | |", floors[0], floors[1]);
    for r in &rows {
        let (pf, pr) = match r.paired {
            Some((pf, pr)) => (format!("{pf:.0}"), format!("{pr:.2}x")),
            None => (String::new(), String::new()),
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.2}x | {pf} | {pr} |",
            r.name,
            r.latency_ns,
            r.latency_ns / floor
        );
    }
    let _ = writeln!(
        out,
        "| bare TCP loopback ping-pong (2 processes, busy-polled, TCP_NODELAY) | {tcp_floor:.0} | {:.2}x | | |",
        tcp_floor / floor
    );
    let _ = writeln!(
        out,
        "\nThe paired floor is the same ping-pong run by the backend's own two rank processes,\n\
         one floor batch before each message batch; its ratio is the median of per-batch ratios."
    );
    if let Some(tcp) = rows.iter().find(|r| r.name == "tcp") {
        let _ = writeln!(
            out,
            "tcp: {:.2}x the bare TCP loopback ping-pong.",
            tcp.latency_ns / tcp_floor
        );
    }
    let _ = writeln!(out, "\n## get bandwidth, GB/s\n");
    let header: Vec<String> = GET_SIZES
        .iter()
        .map(|s| {
            if *s >= 1 << 20 {
                format!("{} MiB", s >> 20)
            } else {
                format!("{} KiB", s >> 10)
            }
        })
        .collect();
    let _ = writeln!(out, "| backend | {} |", header.join(" | "));
    let _ = writeln!(out, "|---|{}", "---:|".repeat(GET_SIZES.len()));
    let cells: Vec<String> = memcpy.iter().map(|(_, b)| gbs(*b)).collect();
    let _ = writeln!(out, "| memcpy, one thread | {} |", cells.join(" | "));
    if let Some(cma) = &cma {
        let cells: Vec<String> = cma.iter().map(|(_, b)| gbs(*b)).collect();
        let _ = writeln!(
            out,
            "| bare process_vm_readv, one thread | {} |",
            cells.join(" | ")
        );
    }
    for r in &rows {
        let cells: Vec<String> = r.get_bw.iter().map(|(_, b)| gbs(*b)).collect();
        let _ = writeln!(out, "| {} | {} |", r.name, cells.join(" | "));
    }
    let at4 = |v: &[(usize, f64)]| {
        v.iter()
            .find(|(s, _)| *s == 4 << 20)
            .map(|x| x.1)
            .unwrap_or(f64::NAN)
    };
    let _ = writeln!(out, "\n## targets\n");
    for r in rows.iter().filter(|r| r.name.starts_with("shm")) {
        // Judged against the paired floor where there is one (same processes, same moment).
        let lat = r.paired.map_or(r.latency_ns / floor, |p| p.1);
        let placement = placement(r.paired.map_or(floor, |p| p.0));
        let bw = at4(&r.get_bw) / at4(&memcpy);
        // User memory moves by process_vm_readv/writev: say what that mechanism allows.
        let ceiling = match (&cma, r.name.contains("user")) {
            (Some(cma), true) => format!(
                "; {:.2}x a bare process_vm_readv, itself {:.0}% of memcpy",
                at4(&r.get_bw) / at4(cma),
                at4(cma) / at4(&memcpy) * 100.0
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "- {}: latency {lat:.2}x the floor, {placement} (target <= 1.5x: {}); get at 4 MiB {:.0}% of memcpy (target >= 80%: {}){ceiling}",
            r.name,
            if lat <= 1.5 { "met" } else { "NOT met" },
            bw * 100.0,
            if bw >= 0.8 { "met" } else { "NOT met" }
        );
    }
    0
}

//! Collectives across processes: the test binary re-launches itself as the ranks of a job over
//! shm (2-8 processes) and tcp, and across two network namespaces over tcp.

mod barrier_cases;
mod bcast_cases;
mod blocks_cases;
mod mistakes_cases;
mod multicast_cases;
mod progress_cases;
#[allow(dead_code)]
mod reduce_cases;

use std::process::Command;
use std::time::{Duration, Instant};

use rdcoll_transport::launch::{describe, run_job, JobSpec};

const CASES_VAR: &str = "RDCOLL_COLL_CASES";
/// A directory every rank of a job can write into (the barrier cases' arrival records).
const DIR_VAR: &str = "RDCOLL_COLL_TEST_DIR";

/// Runs the cases named in `RDCOLL_BCAST_CASES` (comma-separated) when started as a rank.
#[test]
fn rank_entry() {
    let Ok(cases) = std::env::var(CASES_VAR) else {
        return;
    };
    let world = match rdcoll::init() {
        Ok(w) => w,
        Err(err) => {
            eprintln!("init failed: {err}");
            std::process::exit(3);
        }
    };
    for case in cases.split(',') {
        let r = match case {
            "sizes" => bcast_cases::every_root_and_size(&world, bcast_cases::SIZES),
            "back_to_back" => bcast_cases::back_to_back(&world, 600),
            "any_size" => bcast_cases::any_size(&world),
            "mismatch" => bcast_cases::length_mismatch(&world),
            "algorithms" => bcast_cases::every_algorithm(&world),
            "shared" => bcast_cases::shared_staging(&world, 64 << 10),
            "shared_refused" => bcast_cases::shared_refused(&world),
            "huge" => bcast_cases::huge(&world),
            "peer_death" => bcast_cases::peer_death(&world),
            "multicast" => multicast_cases::shapes_and_roots(&world),
            "multicast_death" => multicast_cases::node_death(&world),
            "reduce" => {
                let last = world.size() as u32 - 1;
                reduce_cases::every_type(&world, &[0, 1, 7, 1000], &[0, last])
            }
            "million" => reduce_cases::million(&world),
            "reproducible" => reproducible(&world),
            "reduce_mismatch" => reduce_cases::length_mismatch(&world),
            "not_commutative" => reduce_cases::not_commutative(&world),
            "barrier" => match std::env::var_os(DIR_VAR) {
                Some(dir) => barrier_cases::nobody_leaves_early(&world, dir.as_ref(), 300),
                None => Err(format!("{DIR_VAR} is not set")),
            },
            "barrier_death" => barrier_cases::peer_death(&world),
            "set_up_failure" => barrier_cases::set_up_failure_on_one_rank(&world),
            "long_waits" => barrier_cases::long_waits_sleep(&world),
            "blocks" => blocks_cases::every_collective(&world, &[0, 1, 100, 20_000]),
            "blocks_large" => blocks_cases::large(&world, 16 << 20),
            "blocks_wrong" => blocks_cases::wrong_arguments(&world),
            "splits" => blocks_cases::splits(&world),
            "nonblocking" => blocks_cases::nonblocking(&world),
            "mistakes" => mistakes_cases::every_mistake(&world),
            "progress" => progress_cases::library_waits(&world),
            "progress_computing" => progress_cases::while_computing(&world),
            other => Err(format!("no case {other:?}")),
        };
        if let Err(why) = r {
            eprintln!(
                "rank {} over {}: {case}: {why}",
                world.rank(),
                world.backend()
            );
            std::process::exit(1);
        }
    }
    println!(
        "collectives: rank {} passed {cases} over {}",
        world.rank(),
        world.backend()
    );
    drop(world);
    std::process::exit(0);
}

/// Fifty f32 sums with random delays: the same bits in every run and on every rank (ranks
/// compare a hash of their results with the largest and smallest over all ranks).
fn reproducible(world: &rdcoll::Comm) -> Result<(), String> {
    let runs = reduce_cases::reproducible(world, 50, 1000)?;
    if runs.iter().any(|r| r != &runs[0]) {
        return Err("runs differ on this rank".into());
    }
    let hash = runs[0]
        .iter()
        .fold(0u64, |h, &x| reduce_cases::mix(h ^ x as u64));
    let (mut lo, mut hi) = ([0u64], [0u64]);
    world
        .allreduce(&[hash], &mut lo, rdcoll::Op::Min)
        .map_err(|e| e.to_string())?;
    world
        .allreduce(&[hash], &mut hi, rdcoll::Op::Max)
        .map_err(|e| e.to_string())?;
    if lo != hi {
        return Err("ranks got different results".into());
    }
    Ok(())
}

fn rank_command() -> Vec<std::ffi::OsString> {
    let exe = std::env::current_exe().unwrap();
    vec![
        exe.into(),
        "rank_entry".into(),
        "--exact".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ]
}

fn job(ranks: usize, transport: &str, cases: &str) {
    job_with(ranks, transport, cases, &[]);
}

/// [`job`] with extra environment for every rank.
fn job_with(ranks: usize, transport: &str, cases: &str, env: &[(&str, &str)]) {
    let report = run_job(&spec(ranks, transport, cases, env)).unwrap();
    for e in &report.exits {
        assert!(
            e.status.success(),
            "{transport}, {ranks} ranks, {env:?}: rank {} {}",
            e.rank,
            describe(e.status)
        );
    }
}

/// A job of `ranks` copies of this test binary over `transport`, running `cases`, with `env`.
fn spec(ranks: usize, transport: &str, cases: &str, env: &[(&str, &str)]) -> JobSpec {
    let mut spec = JobSpec::new(ranks, rank_command());
    spec.transport = Some(transport.into());
    spec.prefix_output = true;
    spec.env.push((CASES_VAR.into(), cases.into()));
    for (k, v) in env {
        spec.env.push(((*k).into(), (*v).into()));
    }
    spec
}

/// MPI's progress rule: a posted receive (eager and rendezvous) completes while its rank waits
/// in a collective, a probe or another request, over shm and tcp, in both offload modes, and in
/// thread mode while its rank computes without calling the library.
#[test]
fn posted_receives_progress_in_every_wait() {
    for transport in ["shm", "tcp"] {
        for ranks in [2, 4] {
            job_with(
                ranks,
                transport,
                "progress",
                &[("RDCOLL_OFFLOAD", "inline")],
            );
        }
        job_with(
            3,
            transport,
            "progress,progress_computing",
            &[("RDCOLL_OFFLOAD", "thread")],
        );
    }
}

/// With no eager messages at all (`RDCOLL_EAGER_LIMIT=0`: every message, the collectives'
/// set-up records included, goes by rendezvous) collectives and receives still work; the
/// set-up used to send before receiving and hung below 20 bytes. The same with no eager
/// credit (`RDCOLL_UNEXPECTED_MAX=0`).
#[test]
fn everything_works_without_eager_messages() {
    for transport in ["shm", "tcp"] {
        job_with(
            3,
            transport,
            "progress,reduce",
            &[("RDCOLL_EAGER_LIMIT", "0")],
        );
        // No eager credit: short messages by rendezvous, blocking sends waited for.
        job_with(
            3,
            transport,
            "progress,reduce,blocks,nonblocking",
            &[("RDCOLL_UNEXPECTED_MAX", "0")],
        );
    }
}

/// The mistakes suite across processes: with `RDCOLL_CHECK_COLLECTIVES` on, ranks that pass
/// different lengths, roots, operations, element types or counts, or call different
/// collectives, get `Mismatch` on every rank, over shm and tcp.
#[test]
fn collective_mistakes_are_a_mismatch_on_every_rank() {
    for (transport, ranks) in [("shm", 2), ("shm", 5), ("tcp", 3), ("tcp", 8)] {
        job(ranks, transport, "mistakes");
    }
}

/// A collective whose set-up fails on one rank (out of registered regions) fails on every
/// rank instead of leaving the others waiting.
#[test]
fn a_set_up_failure_on_one_rank_fails_everywhere() {
    for transport in ["shm", "tcp"] {
        job(3, transport, "set_up_failure");
    }
}

/// A fresh empty directory for one job's barrier records.
fn records_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rdcoll-barrier-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every barrier algorithm, over shm (2-8 processes) and tcp: nobody leaves a barrier before
/// every rank has entered it, 300 times in a row (the one-byte barrier numbers wrap).
#[test]
fn barriers_across_processes() {
    let runs: &[(usize, &str, &str)] = &[
        (2, "shm", "auto"),
        (3, "shm", "auto"),
        (4, "shm", "auto"),
        (8, "shm", "auto"),
        (5, "shm", "flat"),
        (5, "shm", "dissemination"),
        (3, "tcp", "auto"),
        (3, "tcp", "flat"),
    ];
    for &(n, transport, algorithm) in runs {
        let dir = records_dir(&format!("{n}-{transport}-{algorithm}"));
        let dir_s = dir.to_str().unwrap();
        job_with(
            n,
            transport,
            "barrier",
            &[(DIR_VAR, dir_s), ("RDCOLL_BARRIER_ALGORITHM", algorithm)],
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn every_size_and_root_over_shm_for_2_to_8_processes() {
    for n in 2..=8 {
        job(n, "shm", "sizes");
    }
}

#[test]
fn reuse_any_size_and_mismatch_over_shm() {
    job(3, "shm", "back_to_back,any_size,mismatch");
    job(8, "shm", "back_to_back");
}

#[test]
fn every_algorithm_over_shm() {
    job(5, "shm", "algorithms");
}

#[test]
fn shared_staging_over_shm() {
    job(2, "shm", "shared");
    job(5, "shm", "shared");
}

#[test]
fn sixty_four_mib_over_shm() {
    job(4, "shm", "huge");
}

#[test]
fn over_tcp() {
    job(
        3,
        "tcp",
        "sizes,back_to_back,any_size,mismatch,huge,shared_refused",
    );
    job(4, "tcp", "algorithms");
    // Binomial one-block trees: rank 2 relays to rank 3, also a block it cannot use. Each
    // rank told it is alone on its host, as across hosts: where the ranks of a host
    // outnumber its cores, one-block messages go flat instead (as the default run below does
    // on a 2-core host).
    let alone = [("RDCOLL_LOCAL_SIZE", "1"), ("RDCOLL_OFFLOAD", "inline")];
    job_with(4, "tcp", "mismatch", &alone);
    job(4, "tcp", "mismatch");
}

#[test]
fn reductions_over_shm_for_2_to_8_processes() {
    for n in 2..=8 {
        job(n, "shm", "reduce,million");
    }
    job(8, "shm", "reproducible");
    job(3, "shm", "reduce_mismatch");
    job(5, "shm", "not_commutative");
}

/// Gather, scatter, allgather, alltoall (and `v` forms), reduce_scatter, scan and exscan, with
/// wrong arguments on one rank, and split communicators, over shm and tcp.
#[test]
fn block_collectives_and_splits_across_processes() {
    for n in [2, 5] {
        job(n, "shm", "blocks,blocks_wrong,splits,nonblocking");
    }
    job_with(3, "shm", "nonblocking", &[("RDCOLL_OFFLOAD", "thread")]);
    job(3, "shm", "blocks_large");
    job(
        3,
        "tcp",
        "blocks,blocks_wrong,splits,blocks_large,nonblocking",
    );
}

#[test]
fn reductions_over_tcp() {
    job(3, "tcp", "reduce,million,reproducible,not_commutative");
}

/// The last rank dies; the survivors must fail their broadcasts (or barriers: `case`), not
/// hang.
fn death(transport: &str, case: &str, env: &[(&str, &str)]) {
    let mut spec = spec(4, transport, case, env);
    spec.stop_on_failure = false;
    spec.env
        .push(("RDCOLL_PEER_TIMEOUT_MS".into(), "1000".into()));
    let report = run_job(&spec).unwrap();
    for e in &report.exits {
        if e.rank == 3 {
            assert!(!e.status.success(), "rank 3 was meant to die");
        } else {
            assert!(
                e.status.success(),
                "{transport}: rank {} {}",
                e.rank,
                describe(e.status)
            );
        }
    }
}

#[test]
fn a_dead_rank_fails_the_broadcast_over_shm() {
    // Blocks staged (the default where ranks outnumber cores), then written straight into
    // the receivers' buffers.
    death("shm", "peer_death", &[]);
    death("shm", "peer_death", &[("RDCOLL_BCAST_TRANSFER", "write")]);
}

#[test]
fn a_dead_rank_fails_the_barrier() {
    for algorithm in ["flat", "dissemination"] {
        death(
            "shm",
            "barrier_death",
            &[("RDCOLL_BARRIER_ALGORITHM", algorithm)],
        );
    }
    death("tcp", "barrier_death", &[]);
}

#[test]
fn a_dead_rank_fails_the_broadcast_over_tcp() {
    death("tcp", "peer_death", &[]);
    death("tcp", "peer_death", &[("RDCOLL_BCAST_TRANSFER", "write")]);
}

/// Robber and MOB across processes: every cluster shape of the job's size, every root, over
/// shm and tcp, and with every control message by rendezvous (eager limit 0).
#[test]
fn multicast_across_processes() {
    job(5, "shm", "multicast");
    job(6, "shm", "multicast");
    job(4, "tcp", "multicast");
    job_with(3, "tcp", "multicast", &[("RDCOLL_EAGER_LIMIT", "0")]);
}

#[test]
fn a_dead_rank_fails_the_multicast() {
    death("shm", "multicast_death", &[]);
    death("tcp", "multicast_death", &[]);
}

/// Ranks in two network namespaces joined by a veth pair (tcp chosen automatically, as for
/// two hosts); the hybrid broadcast groups them by namespace. Needs root and iproute2, else
/// skips with a note.
#[test]
fn tcp_across_network_namespaces() {
    let Some(hosts) = Hosts::for_test() else {
        return;
    };
    let failures = across_namespaces(&hosts, NETNS_CASES, &[], None);
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The same over libfabric's tcp provider (the `ofi` feature), each rank on the interface
/// that reaches the store (no `FI_TCP_IFACE`); then the last rank is killed during a
/// broadcast and the others must fail it (`PeerFailed`) within the peer timeout, not hang.
#[cfg(feature = "ofi")]
#[test]
fn ofi_across_network_namespaces() {
    let Some(hosts) = Hosts::for_test() else {
        return;
    };
    // Started without rdcoll-run, so without its settings: no backtrace files from the
    // Omni-Path libraries libfabric loads (the killed rank would leave one).
    let ofi = [
        ("RDCOLL_TRANSPORT", "ofi"),
        ("FI_PROVIDER", "tcp"),
        ("HFI_NO_BACKTRACE", "1"),
        ("IPATH_NO_BACKTRACE", "1"),
    ];
    let mut failures = across_namespaces(&hosts, NETNS_CASES, &ofi, None);
    let with_timeout = [
        ofi[0],
        ofi[1],
        ofi[2],
        ofi[3],
        ("RDCOLL_PEER_TIMEOUT_MS", "1000"),
    ];
    failures.extend(across_namespaces(
        &hosts,
        "peer_death",
        &with_timeout,
        Some(3),
    ));
    assert!(failures.is_empty(), "{failures:#?}");
}

const NETNS_CASES: &str = "sizes,any_size,algorithms,reduce,million,barrier,progress";

/// Runs `cases` as 4 ranks, alternating between the two namespaces, with `env`; `victim` is
/// the rank meant to die. Returns what went wrong with each other rank.
fn across_namespaces(
    hosts: &Hosts,
    cases: &str,
    env: &[(&str, &str)],
    victim: Option<usize>,
) -> Vec<String> {
    let port = 24_000 + (std::process::id() % 20_000) as u16 + victim.map_or(0, |_| 7);
    let n = 4;
    let records = records_dir(&format!("netns-{}", victim.is_some()));
    let mut children: Vec<_> = (0..n)
        .map(|rank| {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &hosts.ns[rank % 2]])
                .args(rank_command())
                .env("RDCOLL_RANK", rank.to_string())
                .env("RDCOLL_SIZE", n.to_string())
                .env("RDCOLL_STORE", format!("{}:{port}", ADDR[0]))
                .env(CASES_VAR, cases)
                .env(DIR_VAR, &records)
                .env("RDCOLL_BCAST_SMALL_MAX", "4096")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            for (k, v) in env {
                c.env(k, v);
            }
            c.spawn().expect("spawn a rank")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut failures = Vec::new();
    for c in children.iter_mut() {
        while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
    }
    for (rank, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().expect("rank output");
        if victim == Some(rank) {
            continue;
        }
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() || !text.contains(&format!("collectives: rank {rank} passed")) {
            failures.push(format!(
                "{cases} {env:?}: rank {rank} ({}): {text}",
                out.status
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&records);
    failures
}

const ADDR: [&str; 2] = ["10.250.9.1", "10.250.9.2"];

struct Hosts {
    ns: [String; 2],
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

impl Hosts {
    /// Two namespaces, or `None` with a note where this process may not make them.
    fn for_test() -> Option<Hosts> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            println!("skipped: creating network namespaces needs root");
            return None;
        }
        let hosts = Hosts::create();
        if hosts.is_none() {
            println!("skipped: cannot create network namespaces here");
        }
        hosts
    }

    fn create() -> Option<Hosts> {
        let id = std::process::id() % 100_000;
        let h = Hosts {
            ns: [format!("rdb{id}a"), format!("rdb{id}b")],
        };
        let veth = [format!("rdw{id}a"), format!("rdw{id}b")];
        let mut ok = ip(&["netns", "add", &h.ns[0]]) && ip(&["netns", "add", &h.ns[1]]);
        ok = ok
            && ip(&[
                "link", "add", &veth[0], "type", "veth", "peer", "name", &veth[1],
            ]);
        for i in 0..2 {
            ok = ok
                && ip(&["link", "set", &veth[i], "netns", &h.ns[i]])
                && ip(&[
                    "-n",
                    &h.ns[i],
                    "addr",
                    "add",
                    &format!("{}/24", ADDR[i]),
                    "dev",
                    &veth[i],
                ])
                && ip(&["-n", &h.ns[i], "link", "set", &veth[i], "up"])
                && ip(&["-n", &h.ns[i], "link", "set", "lo", "up"]);
        }
        ok.then_some(h)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// Long collective waits give their core back, in both modes and with more ranks than cores.
#[test]
fn long_collective_waits_sleep() {
    for mode in ["inline", "thread"] {
        job_with(2, "shm", "long_waits", &[("RDCOLL_OFFLOAD", mode)]);
    }
    job(4, "shm", "long_waits");
}

/// The collectives over libfabric (the `ofi` feature), on its tcp provider (tcp;ofi_rxm)
/// over loopback.
#[cfg(feature = "ofi")]
mod over_ofi {
    use super::*;

    /// libfabric's settings for the ranks: the provider (tcp unless
    /// `RDCOLL_TEST_OFI_PROVIDER` names another) on loopback.
    fn ofi_env() -> Vec<(&'static str, &'static str)> {
        let provider = std::env::var("RDCOLL_TEST_OFI_PROVIDER").unwrap_or_else(|_| "tcp".into());
        vec![
            ("FI_PROVIDER", Box::leak(provider.into_boxed_str())),
            ("FI_TCP_IFACE", "lo"),
            ("FI_NET_IFACE", "lo"),
        ]
    }

    fn ofi_job(ranks: usize, cases: &str, extra: &[(&str, &str)]) {
        let env: Vec<_> = ofi_env().into_iter().chain(extra.iter().copied()).collect();
        job_with(ranks, "ofi", cases, &env);
    }

    #[test]
    fn broadcasts_reductions_and_blocks_over_ofi() {
        ofi_job(3, "sizes,back_to_back,any_size,mismatch,huge", &[]);
        ofi_job(4, "algorithms", &[]);
        ofi_job(3, "reduce,million,reproducible", &[]);
        ofi_job(
            3,
            "blocks,blocks_wrong,splits,blocks_large,nonblocking",
            &[],
        );
    }

    #[test]
    fn posted_receives_progress_in_every_wait_over_ofi() {
        ofi_job(2, "progress", &[("RDCOLL_OFFLOAD", "inline")]);
        ofi_job(
            3,
            "progress,progress_computing",
            &[("RDCOLL_OFFLOAD", "thread")],
        );
        ofi_job(3, "progress,reduce", &[("RDCOLL_EAGER_LIMIT", "0")]);
    }

    #[test]
    fn barriers_over_ofi() {
        let dir = records_dir("ofi");
        let dir_s = dir.to_str().unwrap();
        ofi_job(3, "barrier", &[(DIR_VAR, dir_s)]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_dead_rank_fails_the_broadcast_and_barrier_over_ofi() {
        death("ofi", "peer_death", &ofi_env());
        death("ofi", "barrier_death", &ofi_env());
    }

    #[test]
    fn multicast_over_ofi() {
        ofi_job(4, "multicast", &[]);
        death("ofi", "multicast_death", &ofi_env());
    }
}

//! Multi-host behaviour for real: ranks in two network namespaces joined by a veth pair, talking
//! tcp (chosen automatically: the namespaces differ), with rank 0 serving the bootstrap store.
//! Runs the whole conformance suite, then breaks the link and checks both sides report it.
//! Needs root and iproute2; where namespaces cannot be created the test says so and skips.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::cases::CASES;
use common::procs::{worker_entry, CASE_VAR};

#[test]
fn worker_process_entry() {
    worker_entry();
}

struct Hosts {
    ns: [String; 2],
    veth: [String; 2],
}

const ADDR: [&str; 2] = ["10.250.7.1", "10.250.7.2"];

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Hosts {
    fn create() -> Result<Hosts, String> {
        let id = std::process::id() % 100_000;
        let h = Hosts {
            ns: [format!("rdc{id}a"), format!("rdc{id}b")],
            veth: [format!("rdv{id}a"), format!("rdv{id}b")],
        };
        ip(&["netns", "add", &h.ns[0]])?;
        ip(&["netns", "add", &h.ns[1]])?;
        ip(&[
            "link", "add", &h.veth[0], "type", "veth", "peer", "name", &h.veth[1],
        ])?;
        for (i, addr) in ADDR.iter().enumerate() {
            ip(&["link", "set", &h.veth[i], "netns", &h.ns[i]])?;
            ip(&[
                "-n",
                &h.ns[i],
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                &h.veth[i],
            ])?;
            ip(&["-n", &h.ns[i], "link", "set", &h.veth[i], "up"])?;
            ip(&["-n", &h.ns[i], "link", "set", "lo", "up"])?;
        }
        Ok(h)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

fn spawn_rank(hosts: &Hosts, rank: usize, size: usize, case: &str, port: u16) -> Child {
    let exe = std::env::current_exe().expect("test binary path");
    Command::new("ip")
        .args(["netns", "exec", &hosts.ns[rank % 2]])
        .arg(exe)
        .args([
            "worker_process_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RDCOLL_RANK", rank.to_string())
        .env("RDCOLL_SIZE", size.to_string())
        .env("RDCOLL_STORE", format!("{}:{port}", ADDR[0]))
        .env("RDCOLL_PEER_TIMEOUT_MS", "2000")
        .env(CASE_VAR, case)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a rank")
}

/// Waits for every rank (killing all after `limit`); returns (rank, exit, stdout+stderr).
fn collect(
    children: Vec<Child>,
    limit: Duration,
) -> Vec<(usize, std::process::ExitStatus, String)> {
    let deadline = Instant::now() + limit;
    let mut children: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    let mut out = Vec::new();
    while out.len() < children.len() {
        for (rank, slot) in children.iter_mut().enumerate() {
            let Some(c) = slot.as_mut() else { continue };
            if Instant::now() > deadline {
                let _ = c.kill();
            }
            if let Ok(Some(_)) = c.try_wait() {
                let done = slot
                    .take()
                    .expect("child")
                    .wait_with_output()
                    .expect("output");
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&done.stdout),
                    String::from_utf8_lossy(&done.stderr)
                );
                out.push((rank, done.status, text));
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    out.sort_by_key(|o| o.0);
    out
}

#[test]
fn tcp_across_network_namespaces() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: creating network namespaces needs root");
        return;
    }
    let hosts = match Hosts::create() {
        Ok(h) => h,
        Err(e) => {
            println!("skipped: cannot create network namespaces here: {e}");
            return;
        }
    };
    let mut port = 20_000 + (std::process::id() % 20_000) as u16;
    let mut failures = Vec::new();
    for &(case, _) in CASES {
        port += 1;
        let children = (0..4)
            .map(|r| spawn_rank(&hosts, r, 4, case, port))
            .collect();
        for (rank, status, text) in collect(children, Duration::from_secs(180)) {
            use std::os::unix::process::ExitStatusExt;
            let victim = common::cases::killed_on_purpose(case, rank, 4);
            let ok = if victim {
                status.signal() == Some(libc::SIGKILL)
            } else {
                status.success()
                    && text.contains(&format!(
                        "conformance {case}: rank {rank} of 4 passed over tcp"
                    ))
            };
            if !ok {
                failures.push(format!("{case}, rank {rank} ({status}): {text}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");

    // Break the link under a running job: both namespaces' ranks must report PeerFailed.
    port += 1;
    let children: Vec<Child> = (0..2)
        .map(|r| spawn_rank(&hosts, r, 2, "link_break", port))
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    ip(&["-n", &hosts.ns[0], "link", "set", &hosts.veth[0], "down"]).expect("take the link down");
    for (rank, status, text) in collect(children, Duration::from_secs(90)) {
        println!(
            "link_break rank {rank}: {}",
            text.lines()
                .filter(|l| l.contains("link_break"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        assert!(
            status.success() && text.contains("saw PeerFailed") || text.contains("passed over tcp"),
            "link_break rank {rank} ({status}): {text}"
        );
    }
}

//! How much CPU time an 8-byte `send` + `recv` costs through the whole stack (Comm, p2p
//! engine, offload NI, shm transport), with no cache line crossing cores: both ranks live in
//! one process and one thread drives both, so every line stays in one core's cache. Set against
//! the transport's own figure (`transport/tests/shm_software_cost.rs`) it shows what the layers
//! above the rings add to the latency path. Run by hand:
//! `cargo test --release --test p2p_software_cost -- --ignored --nocapture`

use std::time::{Duration, Instant};

use rdcoll::transport::shm::ShmFabric;
use rdcoll::transport::FabricConfig;
use rdcoll::{Comm, Source, Tag};

/// Nanoseconds per message of the fastest of `rounds` runs of `round`, which moves `messages`.
fn best_ns_per_message(rounds: u32, messages: u32, mut round: impl FnMut()) -> f64 {
    let best = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            round();
            t.elapsed()
        })
        .min()
        .unwrap_or(Duration::ZERO);
    best.as_nanos() as f64 / messages as f64
}

fn pair() -> (Comm, Comm) {
    let mut job = ShmFabric::job_in_process(2, &FabricConfig::default()).expect("shm job");
    let b = Comm::from_fabric(Box::new(job.pop().expect("rank 1")));
    (Comm::from_fabric(Box::new(job.pop().expect("rank 0"))), b)
}

#[test]
#[ignore]
fn send_recv_cost_on_one_core() {
    let (a, b) = pair();
    let msg = [7u8; 8];
    let mut buf = [0u8; 8];
    const N: u32 = 200_000;
    let ns = best_ns_per_message(10, 2 * N, || {
        for _ in 0..N {
            a.send(&msg, 1, 1).unwrap();
            b.recv(&mut buf, Source::Rank(0), Tag::Value(1)).unwrap();
            b.send(&msg, 0, 1).unwrap();
            a.recv(&mut buf, Source::Rank(1), Tag::Value(1)).unwrap();
        }
    });
    assert_eq!(buf, msg);
    println!("send + recv of one 8-byte message through Comm: {ns:.1} ns");
}

/// The same for osu_bw's pattern: a window of 64 nonblocking receives posted before the
/// sends arrive (rank 1), 64 nonblocking sends (rank 0), both waited for.
#[test]
#[ignore]
fn windowed_nonblocking_cost_on_one_core() {
    let (a, b) = pair();
    const WINDOW: usize = 64;
    const ROUNDS: u32 = 2_000;
    let msg = [7u8; 8];
    let mut bufs = vec![[0u8; 8]; WINDOW];
    let ns = best_ns_per_message(5, WINDOW as u32 * ROUNDS, || {
        for _ in 0..ROUNDS {
            b.scope(|rs| {
                let recvs: Vec<_> = bufs
                    .iter_mut()
                    .map(|buf| rs.irecv(buf, Source::Rank(0), Tag::Value(1)).unwrap())
                    .collect();
                a.scope(|ss| {
                    let sends: Vec<_> =
                        (0..WINDOW).map(|_| ss.isend(&msg, 1, 1).unwrap()).collect();
                    rdcoll::wait_all(sends).unwrap();
                });
                rdcoll::wait_all(recvs).unwrap();
            });
        }
    });
    assert!(bufs.iter().all(|b| *b == msg));
    println!("isend + irecv + waits of one 8-byte message in windows of {WINDOW}: {ns:.1} ns");
}

/// A rank sending 8 bytes to itself and receiving them, one rank of the `local` transport: in
/// thread mode (`RDCOLL_OFFLOAD=thread`) every message goes through the progress agent's
/// thread, which has the other core to itself here, so this shows the agent's hand-over cost
/// (compare `RDCOLL_AGENT_POLL_US=0`, an agent that sleeps between messages, with the default).
#[test]
#[ignore]
fn self_send_through_the_agent() {
    let per_message = rdcoll::local::run(1, |c| {
        let msg = [7u8; 8];
        let mut buf = [0u8; 8];
        const N: u32 = 20_000;
        let ns = best_ns_per_message(5, N, || {
            for _ in 0..N {
                c.send(&msg, 0, 1).unwrap();
                c.recv(&mut buf, Source::Rank(0), Tag::Value(1)).unwrap();
            }
        });
        assert_eq!(buf, msg);
        ns
    })
    .unwrap()[0];
    println!(
        "self send + recv of 8 bytes (RDCOLL_OFFLOAD={}, RDCOLL_AGENT_POLL_US={}): {per_message:.0} ns",
        std::env::var("RDCOLL_OFFLOAD").unwrap_or_else(|_| "auto".into()),
        std::env::var("RDCOLL_AGENT_POLL_US").unwrap_or_else(|_| "default".into()),
    );
}

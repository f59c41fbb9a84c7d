//! How much CPU time the shm message path costs, with no cache line crossing cores: both
//! ranks' endpoints live in one process and one thread drives both, so every line stays in one
//! core's cache. Run by hand:
//! `cargo test --release -p rdcoll-transport --test shm_software_cost -- --ignored --nocapture`

use std::time::{Duration, Instant};

use rdcoll_transport::shm::ShmFabric;
use rdcoll_transport::{EventRef, Fabric, FabricConfig};

fn pair() -> (ShmFabric, ShmFabric) {
    let mut job = ShmFabric::job_in_process(2, &FabricConfig::default()).expect("shm job");
    let b = job.pop().expect("rank 1");
    (job.pop().expect("rank 0"), b)
}

fn recv(f: &dyn Fabric) {
    let mut got = false;
    while !got {
        f.poll_with(&mut |ev| got = matches!(ev, EventRef::Message { .. }))
            .expect("poll");
    }
}

#[test]
#[ignore]
fn message_path_cost_on_one_core() {
    let (a, b) = pair();
    let (a, b): (&dyn Fabric, &dyn Fabric) = (&a, &b);
    let msg = [0u8; 8];
    let mut best = Duration::MAX;
    const N: u32 = 200_000;
    for _ in 0..10 {
        let t = Instant::now();
        for _ in 0..N {
            a.send(1, &msg).unwrap();
            recv(b);
            b.send(0, &msg).unwrap();
            recv(a);
        }
        best = best.min(t.elapsed());
    }
    let idle = Instant::now();
    for _ in 0..N {
        let _ = a.poll_with(&mut |_| {});
    }
    let idle = idle.elapsed();
    println!(
        "send + receive of one 8-byte message: {:.1} ns; an idle poll: {:.1} ns",
        best.as_nanos() as f64 / (2 * N) as f64,
        idle.as_nanos() as f64 / N as f64
    );
}

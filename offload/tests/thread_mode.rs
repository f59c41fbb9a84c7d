//! Thread mode: the host posts a receive entry and a chain of triggered gets, then leaves the
//! library alone; the agents move all the data, and the host checks the counter afterwards.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rdcoll_offload::*;

const CHUNK: usize = 64 << 10;
const CHUNKS: usize = 12;
const CREDITS: usize = 3;

fn chain_of_triggered_gets(backend: Backend) {
    let cfg = NiConfig {
        mode: Mode::Thread,
        ..NiConfig::default()
    };
    let j = job_on(backend, cfg, false);
    let total = CHUNK * CHUNKS;
    let source: Vec<u8> = (0..total).map(|i| (i * 31 % 253) as u8).collect();
    let exposed = j.tgt_region(total);
    exposed.write(0, &source).unwrap();
    j.append(List::Priority, exposed, 0x77, 0, MeOptions::default(), 0);

    let ct = j.ini.ct_alloc().unwrap();
    let dest = j.ini.fabric().alloc_region(total).unwrap();
    let md = j
        .ini
        .md_bind(
            dest.clone(),
            None,
            MdOptions {
                ct: Some(ct),
                ct_reply: true,
                ..MdOptions::default()
            },
        )
        .unwrap();
    // The receiver-driven rendezvous of paper 002 §3.3: `CREDITS` gets at once, and each
    // reply releases the next one.
    for i in 0..CHUNKS {
        let threshold = i.saturating_sub(CREDITS - 1) as u64;
        let get = GetArgs {
            md,
            local_offset: i * CHUNK,
            len: CHUNK,
            target: 1,
            pt: j.pt,
            match_bits: 0x77,
            remote_offset: i * CHUNK,
            user_ptr: i as u64,
        };
        j.ini.triggered_get(get, ct, threshold).unwrap();
    }
    // Hands off: no call into either network interface until the data is all there (read
    // straight from the destination memory, which drives no progress).
    let start = Instant::now();
    let mut seen = vec![0u8; total];
    loop {
        dest.read(0, &mut seen).unwrap();
        if seen == source {
            break;
        }
        assert!(
            start.elapsed() < WAIT,
            "the agents did not finish the chain on their own"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let value = j.ini.ct_wait(ct, CHUNKS as u64, WAIT).unwrap();
    assert_eq!(
        value,
        CtValue {
            success: CHUNKS as u64,
            failure: 0
        }
    );
}

#[test]
fn triggered_gets_complete_with_no_host_involvement() {
    chain_of_triggered_gets(Backend::Local);
}

#[test]
fn triggered_gets_complete_with_no_host_involvement_over_shm() {
    chain_of_triggered_gets(Backend::Shm);
}

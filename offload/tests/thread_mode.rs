//! Thread mode: the host posts a receive entry and a chain of triggered gets, then leaves the
//! library alone; the agents move all the data, and the host checks the counters afterwards.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rdcoll_offload::*;

const CHUNK: usize = 64 << 10;
const CHUNKS: usize = 12;
const CREDITS: usize = 3;

/// The receiver-driven rendezvous of paper 002 §3.3 with the receiver's host out of the loop:
/// it posts a receive entry for the sender's first message and a chain of triggered gets (the
/// first `CREDITS` released by that message's arrival, each later one by a reply), then only
/// reads its own memory until everything is there.
fn chain_of_triggered_gets(backend: Backend) {
    let cfg = NiConfig {
        mode: Mode::Thread,
        ..NiConfig::default()
    };
    // `ini` is the receiver (it issues the gets), `tgt` the sender exposing its buffer.
    let j = job_on(backend, cfg, false);
    let total = CHUNK * CHUNKS;
    let source: Vec<u8> = (0..total).map(|i| (i * 31 % 253) as u8).collect();
    let exposed = j.tgt_region(total);
    exposed.write(0, &source).unwrap();
    j.append(List::Priority, exposed, 0x77, 0, MeOptions::default(), 0);
    let sender_pt = j.pt;

    // The receiver's side: a portal entry with the receive entry for the sender's header.
    let recv_pt = j.ini.pt_alloc(None, false).unwrap();
    let header_ct = j.ini.ct_alloc().unwrap();
    let header_buf = j.ini.fabric().alloc_region(64).unwrap();
    let receive = MeSpec {
        region: header_buf.clone(),
        match_bits: 0x5E,
        ignore_bits: 0,
        match_id: MatchId::Rank(1),
        options: MeOptions {
            use_once: true,
            counting: MeCounting {
                ct: Some(header_ct),
                comm: true,
                ..MeCounting::default()
            },
            ..MeOptions::default()
        },
        user_ptr: 0,
    };
    j.ini.me_append(recv_pt, List::Priority, receive).unwrap();
    let reply_ct = j.ini.ct_alloc().unwrap();
    let dest = j.ini.fabric().alloc_region(total).unwrap();
    let md = j
        .ini
        .md_bind(
            dest.clone(),
            None,
            MdOptions {
                ct: Some(reply_ct),
                ct_reply: true,
                ..MdOptions::default()
            },
        )
        .unwrap();
    for i in 0..CHUNKS {
        let get = GetArgs {
            md,
            local_offset: i * CHUNK,
            len: CHUNK,
            target: 1,
            pt: sender_pt,
            match_bits: 0x77,
            remote_offset: i * CHUNK,
            user_ptr: i as u64,
            published: None,
            read_all: false,
        };
        if i < CREDITS {
            j.ini.triggered_get(get, header_ct, 1).unwrap();
        } else {
            j.ini
                .triggered_get(get, reply_ct, (i - CREDITS + 1) as u64)
                .unwrap();
        }
    }
    // Hands off the receiver from here. The sender announces the message (its header put
    // carries the size) from a thread of its own.
    let sender = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            let hdr = j.tgt.fabric().alloc_region(8).unwrap();
            hdr.write(0, &(total as u64).to_le_bytes()).unwrap();
            let md = j.tgt.md_bind(hdr, None, MdOptions::default()).unwrap();
            j.tgt
                .put(PutArgs {
                    md,
                    local_offset: 0,
                    len: 8,
                    ack_req: AckReq::None,
                    target: 0,
                    pt: recv_pt,
                    match_bits: 0x5E,
                    remote_offset: 0,
                    user_ptr: 0,
                    hdr_data: 0,
                })
                .unwrap();
        });
        let start = Instant::now();
        let mut seen = vec![0u8; total];
        loop {
            dest.read(0, &mut seen).unwrap();
            if seen == source {
                return Ok(());
            }
            if start.elapsed() > WAIT {
                return Err("the agents did not finish the chain on their own");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    sender.unwrap();
    // Checked afterwards through the counters.
    let one = CtValue {
        success: 1,
        failure: 0,
    };
    assert_eq!(j.ini.ct_get(header_ct).unwrap(), one);
    let value = j.ini.ct_wait(reply_ct, CHUNKS as u64, WAIT).unwrap();
    assert_eq!(
        value,
        CtValue {
            success: CHUNKS as u64,
            failure: 0
        }
    );
    let mut size = [0u8; 8];
    header_buf.read(0, &mut size).unwrap();
    assert_eq!(u64::from_le_bytes(size), total as u64);
}

#[test]
fn triggered_gets_complete_with_no_host_involvement() {
    chain_of_triggered_gets(Backend::Local);
}

#[test]
fn triggered_gets_complete_with_no_host_involvement_over_shm() {
    chain_of_triggered_gets(Backend::Shm);
}

/// A host thread that polls an event queue with `eq_get` (no waits) leaves the progress to the
/// agent in thread mode: the acknowledgement of its put must arrive although the host keeps
/// calling into the NI (a host call that noted itself as polling would keep the agent aside
/// forever).
fn eq_get_loop_sees_the_ack(backend: Backend) {
    let cfg = NiConfig {
        mode: Mode::Thread,
        // Long, so that a host thread that noted itself would keep the agent aside for the
        // whole test even when it is descheduled for a while (2 vCPUs).
        agent_grace: Duration::from_secs(1),
        ..NiConfig::default()
    };
    let j = job_on(backend, cfg, false);
    let landing = j.tgt_region(64);
    j.append(
        List::Priority,
        landing.clone(),
        0x42,
        0,
        MeOptions::default(),
        0,
    );
    let data = [7u8; 64];
    let md = j.md(&data, None);
    std::thread::scope(|s| {
        // The put goes out while the host has been polling for a while already.
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            j.ini.put(j.put_args(md, data.len(), 0x42, 0)).unwrap();
        });
        let start = Instant::now();
        let mut kinds_seen = Vec::new();
        loop {
            if let Some(ev) = j.ini.eq_get(j.ini_eq).unwrap() {
                kinds_seen.push(ev.kind);
                if ev.kind == EventKind::Ack {
                    break;
                }
            }
            assert!(
                start.elapsed() < WAIT,
                "no acknowledgement while the host polled eq_get (events seen: {kinds_seen:?})"
            );
        }
    });
    assert_eq!(read(&landing, 0, 64), data.to_vec());
}

#[test]
fn an_eq_get_loop_gets_its_ack_from_the_agent() {
    eq_get_loop_sees_the_ack(Backend::Local);
}

#[test]
fn an_eq_get_loop_gets_its_ack_from_the_agent_over_shm() {
    eq_get_loop_sees_the_ack(Backend::Shm);
}

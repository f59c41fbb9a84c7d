//! The offload engine end to end across processes: the test binary re-launches itself as two
//! ranks (through the launcher `rdcoll-run` uses) over shm and over tcp. Rank 1 exposes a
//! buffer on a match list entry; rank 0 pulls it with a credit-limited chain of triggered gets
//! (paper 002 §3.3) on its agent thread and checks every byte.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdcoll_offload::*;
use rdcoll_transport::launch::{describe, run_job, JobSpec};
use rdcoll_transport::Fabric;

const CASE_VAR: &str = "RDCOLL_OFFLOAD_PROCESS_CASE";
const CHUNK: usize = 64 << 10;
const CHUNKS: usize = 16;
const CREDITS: usize = 4;
const READY: u64 = 0xF1;
const DONE: u64 = 0xD0;
const DATA: u64 = 0x42;
const WAIT: Duration = Duration::from_secs(30);

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Puts 8 bytes with `bits` to `target` until its entry is there (an early put is dropped).
fn signal(ni: &Ni, eq: EqHandle, target: u32, bits: u64) -> Result<(), String> {
    let r = ni.fabric().alloc_region(8).map_err(|e| e.to_string())?;
    let md = ni
        .md_bind(r, Some(eq), MdOptions::default())
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    loop {
        let put = PutArgs {
            md,
            local_offset: 0,
            len: 8,
            ack_req: AckReq::Ack,
            target,
            pt: PtIndex(0),
            match_bits: bits,
            remote_offset: 0,
            user_ptr: bits,
            hdr_data: 0,
        };
        ni.put(put).map_err(|e| e.to_string())?;
        loop {
            let ev = ni.eq_wait(eq, WAIT).map_err(|e| e.to_string())?;
            if ev.kind == EventKind::Ack && ev.user_ptr == bits {
                if ev.fail == NiFail::Ok {
                    return Ok(());
                }
                break;
            }
        }
        if start.elapsed() > WAIT {
            return Err(format!("rank {target} never took signal {bits:#x}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// An entry for a signal; returns the counter it bumps.
fn expect_signal(ni: &Ni, pt: PtIndex, bits: u64) -> Result<CtHandle, String> {
    let ct = ni.ct_alloc().map_err(|e| e.to_string())?;
    let spec = MeSpec {
        region: ni.fabric().alloc_region(8).map_err(|e| e.to_string())?,
        match_bits: bits,
        ignore_bits: 0,
        match_id: MatchId::Any,
        options: MeOptions {
            use_once: true,
            counting: MeCounting {
                ct: Some(ct),
                comm: true,
                ..MeCounting::default()
            },
            ..MeOptions::default()
        },
        user_ptr: bits,
    };
    ni.me_append(pt, List::Priority, spec)
        .map_err(|e| e.to_string())?;
    Ok(ct)
}

fn rank_main(ni: &Ni) -> Result<(), String> {
    let e = |x: OffloadError| x.to_string();
    let eq = ni.eq_alloc(1024).map_err(e)?;
    let pt = ni.pt_alloc(None, false).map_err(e)?;
    let total = CHUNK * CHUNKS;
    if ni.rank() == 1 {
        let data = ni.fabric().alloc_region(total).map_err(|x| x.to_string())?;
        let bytes: Vec<u8> = (0..total).map(pattern).collect();
        data.write(0, &bytes).map_err(|x| x.to_string())?;
        let exposed = MeSpec {
            region: data,
            match_bits: DATA,
            ignore_bits: 0,
            match_id: MatchId::Rank(0),
            options: MeOptions {
                op_put: false,
                ..MeOptions::default()
            },
            user_ptr: 0,
        };
        ni.me_append(pt, List::Priority, exposed).map_err(e)?;
        let done = expect_signal(ni, pt, DONE)?;
        signal(ni, eq, 0, READY)?;
        ni.ct_wait(done, 1, WAIT).map_err(e)?;
        return Ok(());
    }
    let ready = expect_signal(ni, pt, READY)?;
    ni.ct_wait(ready, 1, WAIT).map_err(e)?;
    let ct = ni.ct_alloc().map_err(e)?;
    let dest = ni.fabric().alloc_region(total).map_err(|x| x.to_string())?;
    let opts = MdOptions {
        ct: Some(ct),
        ct_reply: true,
        ..MdOptions::default()
    };
    let md = ni.md_bind(dest.clone(), None, opts).map_err(e)?;
    for i in 0..CHUNKS {
        let get = GetArgs {
            md,
            local_offset: i * CHUNK,
            len: CHUNK,
            target: 1,
            pt: PtIndex(0),
            match_bits: DATA,
            remote_offset: i * CHUNK,
            user_ptr: i as u64,
            published: None,
            read_all: false,
        };
        let threshold = i.saturating_sub(CREDITS - 1) as u64;
        ni.triggered_get(get, ct, threshold).map_err(e)?;
    }
    let v = ni.ct_wait(ct, CHUNKS as u64, WAIT).map_err(e)?;
    if v != (CtValue {
        success: CHUNKS as u64,
        failure: 0,
    }) {
        return Err(format!("the get chain ended at {v:?}"));
    }
    let mut got = vec![0u8; total];
    dest.read(0, &mut got).map_err(|x| x.to_string())?;
    if let Some(i) = (0..total).find(|&i| got[i] != pattern(i)) {
        return Err(format!("byte {i} of the pulled data is wrong"));
    }
    signal(ni, eq, 1, DONE)
}

#[test]
fn worker_process_entry() {
    if std::env::var(CASE_VAR).is_err() {
        return;
    }
    let fabric: Arc<dyn Fabric> = match rdcoll_transport::bootstrap::init_from_env() {
        Ok(f) => Arc::from(f),
        Err(e) => {
            eprintln!("bootstrap failed: {e}");
            std::process::exit(3);
        }
    };
    let cfg = NiConfig {
        mode: Mode::Thread,
        ..NiConfig::default()
    };
    let code = match Ni::new(fabric.clone(), cfg)
        .map_err(|e| e.to_string())
        .and_then(|ni| {
            let r = rank_main(&ni);
            drop(ni);
            r
        }) {
        Ok(()) => {
            println!(
                "offload rank {} passed over {}",
                fabric.rank(),
                fabric.backend()
            );
            0
        }
        Err(e) => {
            eprintln!("offload rank {}: {e}", fabric.rank());
            1
        }
    };
    drop(fabric);
    std::process::exit(code);
}

fn run(transport: &str) {
    let exe = std::env::current_exe().unwrap();
    let mut spec = JobSpec::new(
        2,
        vec![
            exe.into(),
            "worker_process_entry".into(),
            "--exact".into(),
            "--nocapture".into(),
            "--test-threads=1".into(),
        ],
    );
    spec.transport = Some(transport.into());
    spec.prefix_output = true;
    spec.env.push((CASE_VAR.into(), "chain".into()));
    let report = run_job(&spec).unwrap();
    for e in &report.exits {
        assert!(
            e.status.success(),
            "{transport}: rank {} {}",
            e.rank,
            describe(e.status)
        );
    }
}

#[test]
fn triggered_get_chain_between_processes_over_shm() {
    run("shm");
}

#[test]
fn triggered_get_chain_between_processes_over_tcp() {
    run("tcp");
}

//! `rdcoll-bench offload`: what the emulated NIC costs per operation at the target, in both
//! agent modes, over the local transport (two ranks as threads of this process):
//!
//! - an incoming 8-byte put that hits the first priority entry;
//! - an incoming 8-byte put that misses the priority list (holding `--depth` non-matching
//!   entries, default 0) and lands on the overflow list, leaving an unexpected header;
//! - one triggered counter increment released by a counter update.
//!
//! Each figure is the median of 9 batches of `--ops` operations (default 20000). For puts in
//! inline mode the batch is timed from the moment all its puts are queued at the target until
//! the target's counter has counted them all, with this thread driving the target's agent. In
//! thread mode the agent thread works while the puts are being posted, so the batch is timed
//! from the first post: the figure is the time per put of the whole pipeline (posting on this
//! thread, matching on the agent's), an upper bound of the target's cost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdcoll_offload::*;
use rdcoll_transport::Fabric;

const BATCHES: usize = 9;

struct Opts {
    ops: usize,
    depth: usize,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        ops: 20_000,
        depth: 0,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = || -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0 || a == "--depth")
                .ok_or(format!("{a} needs a number"))
        };
        match a.as_str() {
            "--ops" => o.ops = num()?,
            "--depth" => o.depth = num()?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Pair {
    ini: Ni,
    tgt: Ni,
    pt: PtIndex,
    md: MdHandle,
    ct: CtHandle,
}

fn pair(mode: Mode, ops: usize) -> Result<Pair, OffloadError> {
    let mut f: Vec<Arc<dyn Fabric>> = rdcoll_transport::local::create(2)?
        .into_iter()
        .map(|f| Arc::new(f) as Arc<dyn Fabric>)
        .collect();
    let cfg = NiConfig {
        mode,
        max_unexpected: ops * (BATCHES + 1) + 1,
        max_triggered: ops,
        ..NiConfig::default()
    };
    let tgt = Ni::new(f.pop().expect("two"), cfg.clone())?;
    let ini = Ni::new(f.pop().expect("two"), cfg)?;
    let pt = tgt.pt_alloc(None, false)?;
    let ct = tgt.ct_alloc()?;
    let src = ini.fabric().alloc_region(8)?;
    let md = ini.md_bind(src, None, MdOptions::default())?;
    Ok(Pair {
        ini,
        tgt,
        pt,
        md,
        ct,
    })
}

fn counted(ct: CtHandle) -> MeOptions {
    MeOptions {
        counting: MeCounting {
            ct: Some(ct),
            comm: true,
            ..MeCounting::default()
        },
        ..MeOptions::default()
    }
}

fn spec(region: rdcoll_transport::Region, bits: u64, ignore: u64, options: MeOptions) -> MeSpec {
    MeSpec {
        region,
        match_bits: bits,
        ignore_bits: ignore,
        match_id: MatchId::Any,
        options,
        user_ptr: 0,
    }
}

/// ns per incoming put at the target; `overflow` sends them past the priority list.
fn incoming_puts(mode: Mode, o: &Opts, overflow: bool) -> Result<f64, OffloadError> {
    let p = pair(mode, o.ops)?;
    let f = p.tgt.fabric().clone();
    for d in 0..o.depth {
        let other = spec(
            f.alloc_region(8)?,
            1_000_000 + d as u64,
            0,
            MeOptions::default(),
        );
        p.tgt.me_append(p.pt, List::Priority, other)?;
    }
    if overflow {
        let bounce = MeOptions {
            manage_local: true,
            ..counted(p.ct)
        };
        let len = 8 * o.ops * (BATCHES + 1);
        p.tgt.me_append(
            p.pt,
            List::Overflow,
            spec(f.alloc_region(len)?, 0, !0, bounce),
        )?;
    } else {
        p.tgt.me_append(
            p.pt,
            List::Priority,
            spec(f.alloc_region(8)?, 7, 0, counted(p.ct)),
        )?;
    }
    let put = PutArgs {
        md: p.md,
        local_offset: 0,
        len: 8,
        ack_req: AckReq::None,
        target: 1,
        pt: p.pt,
        match_bits: 7,
        remote_offset: 0,
        user_ptr: 0,
        hdr_data: 0,
    };
    let mut batches = Vec::new();
    for b in 0..=BATCHES {
        // Inline: the target does nothing until this thread drives it, so the clock starts
        // once every put is queued. Thread: the agent works while the puts are posted, so the
        // clock starts with the first post (the figure is then the pipeline's time per put).
        let mut t = Instant::now();
        for _ in 0..o.ops {
            p.ini.put(put)?;
        }
        let goal = ((b + 1) * o.ops) as u64;
        if mode == Mode::Inline {
            t = Instant::now();
        }
        match mode {
            Mode::Inline => {
                while p.tgt.ct_get(p.ct)?.success < goal {
                    p.tgt.progress();
                }
            }
            Mode::Thread => {
                p.tgt.ct_wait(p.ct, goal, Duration::from_secs(60))?;
            }
        }
        let ns = t.elapsed().as_nanos() as f64 / o.ops as f64;
        // The initiator's acknowledgements are not part of the target's cost.
        while p.ini.progress() > 0 {}
        if b > 0 {
            batches.push(ns);
        }
    }
    Ok(median(&mut batches))
}

/// ns per triggered counter increment released by one counter update.
fn triggered_fire(mode: Mode, o: &Opts) -> Result<f64, OffloadError> {
    let p = pair(mode, o.ops)?;
    let one = CtValue {
        success: 1,
        failure: 0,
    };
    let mut batches = Vec::new();
    for b in 0..=BATCHES {
        let (trig, target) = (p.tgt.ct_alloc()?, p.tgt.ct_alloc()?);
        for i in 0..o.ops {
            p.tgt.triggered_ct_inc(target, one, trig, 1 + i as u64)?;
        }
        let t = Instant::now();
        p.tgt.ct_set(
            trig,
            CtValue {
                success: o.ops as u64,
                failure: 0,
            },
        )?;
        let ns = t.elapsed().as_nanos() as f64 / o.ops as f64;
        if p.tgt.ct_get(target)?.success != o.ops as u64 {
            return Err(OffloadError::InvalidArgument(
                "not every triggered increment fired".into(),
            ));
        }
        p.tgt.ct_free(trig)?;
        p.tgt.ct_free(target)?;
        if b > 0 {
            batches.push(ns);
        }
    }
    Ok(median(&mut batches))
}

/// Entry point; returns the exit code.
pub fn run(args: &[String]) -> i32 {
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rdcoll-bench offload: {e}");
            return 2;
        }
    };
    println!(
        "# rdcoll-bench offload ({} operations per batch, median of {BATCHES} batches, {} non-matching priority entries)\n",
        o.ops, o.depth
    );
    println!("| operation at the target | inline ns | thread ns |");
    println!("|---|---:|---:|");
    type Case<'a> = (&'a str, Box<dyn Fn(Mode) -> Result<f64, OffloadError> + 'a>);
    let cases: Vec<Case> = vec![
        (
            "incoming 8 B put, priority hit",
            Box::new(|m| incoming_puts(m, &o, false)),
        ),
        (
            "incoming 8 B put, overflow hit (unexpected header)",
            Box::new(|m| incoming_puts(m, &o, true)),
        ),
        (
            "triggered ct-inc released by a counter update",
            Box::new(|m| triggered_fire(m, &o)),
        ),
    ];
    for (name, f) in cases {
        let mut cells = Vec::new();
        for mode in [Mode::Inline, Mode::Thread] {
            match f(mode) {
                Ok(ns) => cells.push(format!("{ns:.0}")),
                Err(e) => {
                    eprintln!("rdcoll-bench offload: {name}: {e}");
                    return 1;
                }
            }
        }
        println!("| {name} | {} | {} |", cells[0], cells[1]);
    }
    0
}

//! `rdcoll-bench soak`: point-to-point traffic with every receive checked, for minutes. Each
//! round, every rank sends each other rank 0-3 messages (sizes 0 B-8 MiB, mostly small;
//! tags from a small set), drawn from a schedule every rank computes from the seed, and
//! receives what it is owed with a random mix of exact receives, ANY_TAG, ANY_SOURCE and both,
//! blocking and nonblocking. Every message's bytes follow from its sender and sequence number,
//! so a receiver checks each byte, the length, and that the message is the one MPI's matching
//! rules say the receive must take (the earliest from its sender with its tag; with ANY_TAG
//! the earliest from its sender): a lost, duplicated, reordered or corrupted message is an
//! error that ends the job non-zero. Rounds end with an allreduce that also says whether to go
//! on.
//!
//! `rdcoll-bench soak [--ranks N] [--transport shm|tcp|ofi|local] [--seconds S] [--seed X]`
//! (`--inject-corruption`: rank 0 flips a byte of one message it sends, to show that the
//! checks catch it).

use std::ffi::OsString;
use std::time::Instant;

use rdcoll::{Comm, Op, Source, Tag};
use rdcoll_transport::fuzzing::Rng;
use rdcoll_transport::launch::{run_job, JobSpec};

/// Tags the messages use: few, so that receives of one tag find several messages.
const TAGS: u64 = 3;
/// Largest message.
const MAX_LEN: usize = 8 << 20;

/// One scheduled message.
#[derive(Clone, Copy, Debug)]
struct Planned {
    src: u32,
    seq: u64,
    tag: u32,
    len: usize,
}

/// The messages of `round` from every rank to every other, in each sender's send order.
fn schedule(seed: u64, round: u64, size: u32, next_seq: &mut [Vec<u64>]) -> Vec<Vec<Planned>> {
    let mut rng = Rng::new(seed ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut to: Vec<Vec<Planned>> = vec![Vec::new(); size as usize];
    for src in 0..size {
        for dst in (0..size).filter(|&d| d != src) {
            for _ in 0..rng.below(4) {
                let len = match rng.below(100) {
                    0 => rng.below(MAX_LEN as u64 + 1),
                    1..=9 => rng.below(256 << 10),
                    _ => rng.below(4096),
                } as usize;
                let seq = &mut next_seq[src as usize][dst as usize];
                *seq += 1;
                to[dst as usize].push(Planned {
                    src,
                    seq: *seq,
                    tag: rng.below(TAGS) as u32,
                    len,
                });
            }
        }
    }
    to
}

/// Byte `i` of the message `seq` from `src`.
fn byte(src: u32, seq: u64, i: usize) -> u8 {
    (seq.wrapping_mul(131) ^ (i as u64).wrapping_mul(7) ^ (u64::from(src) * 29)) as u8
}

fn payload(m: &Planned) -> Vec<u8> {
    (0..m.len).map(|i| byte(m.src, m.seq, i)).collect()
}

/// Starts a soak job; its exit code.
pub fn run(args: &[String]) -> i32 {
    let (mut ranks, mut transport, mut seconds, mut seed) =
        (4usize, "shm".to_string(), 60u64, 1u64);
    let mut inject = false;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--inject-corruption" {
            inject = true;
            continue;
        }
        let Some(value) = it.next() else {
            eprintln!("rdcoll-bench soak: {flag} needs a value");
            return 2;
        };
        let bad = || eprintln!("rdcoll-bench soak: {flag} {value}: not a number");
        match flag.as_str() {
            "--ranks" => match value.parse() {
                Ok(v) if v >= 2 => ranks = v,
                _ => return (bad(), 2).1,
            },
            "--seconds" => match value.parse() {
                Ok(v) => seconds = v,
                _ => return (bad(), 2).1,
            },
            "--seed" => match value.parse() {
                Ok(v) => seed = v,
                _ => return (bad(), 2).1,
            },
            "--transport" => transport = value.clone(),
            _ => {
                eprintln!("rdcoll-bench soak: unknown option {flag}");
                return 2;
            }
        }
    }
    if transport == "local" {
        return in_process(ranks, seed, seconds, inject);
    }
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("rdcoll-bench soak: cannot find this program");
        return 2;
    };
    let command: Vec<OsString> = vec![
        exe.into(),
        "soak-rank".into(),
        seed.to_string().into(),
        seconds.to_string().into(),
        if inject { "inject" } else { "clean" }.into(),
    ];
    let mut spec = JobSpec::new(ranks, command);
    spec.transport = Some(transport.clone());
    println!("# rdcoll-bench soak: {ranks} ranks over {transport}, {seconds} s, seed {seed}");
    match run_job(&spec) {
        Ok(report) => report.exit_code(),
        Err(e) => {
            eprintln!("rdcoll-bench soak: {e}");
            1
        }
    }
}

/// The soak on ranks that are threads of this process (`--transport local`); the exit code.
fn in_process(ranks: usize, seed: u64, seconds: u64, inject: bool) -> i32 {
    println!("# rdcoll-bench soak: {ranks} ranks over local, {seconds} s, seed {seed}");
    match rdcoll::local::run(ranks, |world| soak(&world, seed, seconds, inject)) {
        Ok(results) => {
            let mut code = 0;
            for (r, result) in results.into_iter().enumerate() {
                if let Err(e) = result {
                    eprintln!("soak-rank {r}: {e}");
                    code = 1;
                }
            }
            code
        }
        Err(e) => {
            eprintln!("rdcoll-bench soak: {e}");
            1
        }
    }
}

/// A rank of a soak job (`soak-rank SEED SECONDS`); its exit code.
pub fn rank(args: &[String]) -> i32 {
    let number = |i: usize| args.get(i).and_then(|v| v.parse::<u64>().ok());
    let (Some(seed), Some(seconds)) = (number(0), number(1)) else {
        eprintln!("soak-rank: expected SEED SECONDS");
        return 2;
    };
    let world = match rdcoll::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("soak-rank: init: {e}");
            return 3;
        }
    };
    let inject = args.get(2).is_some_and(|a| a == "inject");
    match soak(&world, seed, seconds, inject) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("soak-rank {}: {e}", world.rank());
            1
        }
    }
}

/// What one rank counted.
#[derive(Default)]
struct Counts {
    messages: u64,
    bytes: u64,
}

fn soak(world: &Comm, seed: u64, seconds: u64, inject: bool) -> Result<(), String> {
    let (me, size) = (world.rank(), world.size());
    let start = Instant::now();
    let mut next_seq = vec![vec![0u64; size as usize]; size as usize];
    let mut rng = Rng::new(seed.wrapping_add(u64::from(me) << 32));
    let mut counts = Counts::default();
    let mut round = 0u64;
    loop {
        let plan = schedule(seed, round, size, &mut next_seq);
        let mine: Vec<Planned> = (0..size)
            .flat_map(|dst| plan[dst as usize].iter().filter(|m| m.src == me).copied())
            .collect();
        let dests: Vec<u32> = (0..size)
            .flat_map(|dst| {
                plan[dst as usize]
                    .iter()
                    .filter(|m| m.src == me)
                    .map(move |_| dst)
            })
            .collect();
        let mut outgoing: Vec<Vec<u8>> = mine.iter().map(payload).collect();
        if inject && me == 0 && round == 1 {
            if let Some(m) = outgoing.iter_mut().find(|m| !m.is_empty()) {
                m[0] ^= 1;
            }
        }
        let mut owed = plan[me as usize].clone();
        world
            .scope(|s| -> Result<(), String> {
                let mut sends = Vec::with_capacity(mine.len());
                for ((m, data), &dst) in mine.iter().zip(&outgoing).zip(&dests) {
                    sends.push(s.isend(&data[..], dst, m.tag).map_err(|e| e.to_string())?);
                }
                while !owed.is_empty() {
                    receive_one(world, &mut rng, &mut owed, &mut counts)?;
                }
                rdcoll::wait_all(sends).map(drop).map_err(|e| e.to_string())
            })
            .map_err(|e| format!("round {round}: {e}"))?;
        // Everyone is done with this round: go on while rank 0's clock allows.
        let go_on = u64::from(me == 0 && start.elapsed().as_secs() < seconds);
        let mut total = [0u64; 3];
        world
            .allreduce(&[go_on, counts.messages, counts.bytes], &mut total, Op::Sum)
            .map_err(|e| format!("round {round}: allreduce: {e}"))?;
        round += 1;
        if total[0] == 0 {
            if me == 0 {
                let secs = start.elapsed().as_secs_f64();
                println!(
                    "soak: {round} rounds, {} messages, {:.1} MB in {secs:.0} s over {size} ranks: 0 lost, 0 duplicated, 0 reordered, 0 corrupted",
                    total[1],
                    total[2] as f64 / 1e6
                );
            }
            return Ok(());
        }
    }
}

/// Receives one of the messages `owed` this rank with a random kind of receive, and checks it.
fn receive_one(
    world: &Comm,
    rng: &mut Rng,
    owed: &mut Vec<Planned>,
    counts: &mut Counts,
) -> Result<(), String> {
    // The earliest message owed from `src` with `tag` (any tag for `None`).
    let earliest = |owed: &[Planned], src: u32, tag: Option<u32>| {
        owed.iter()
            .position(|m| m.src == src && tag.is_none_or(|t| m.tag == t))
    };
    let pick = owed[rng.below(owed.len() as u64) as usize];
    let (source, tag) = match rng.below(4) {
        0 => (Source::Rank(pick.src), Tag::Value(pick.tag)),
        1 => (Source::Rank(pick.src), Tag::Any),
        2 => (Source::Any, Tag::Value(pick.tag)),
        _ => (Source::Any, Tag::Any),
    };
    // Room for any message the receive may take: the earliest of each sender it matches.
    let capacity = owed
        .iter()
        .filter(|m| matches!(source, Source::Rank(s) if s == m.src) || source == Source::Any)
        .filter(|m| matches!(tag, Tag::Value(t) if t == m.tag) || tag == Tag::Any)
        .map(|m| m.len)
        .max()
        .unwrap_or(0)
        + rng.below(64) as usize;
    let mut buf = vec![0xEEu8; capacity];
    let status = if rng.below(2) == 0 {
        world.recv(&mut buf, source, tag)
    } else {
        world.scope(|s| s.irecv(&mut buf[..], source, tag)?.wait())
    }
    .map_err(|e| format!("receive ({source:?}, {tag:?}): {e}"))?;
    let src = status.source;
    let Some(at) = earliest(owed, src, Some(status.tag)) else {
        return Err(format!(
            "took a message from {src} with tag {} that was not owed (duplicated or stray)",
            status.tag
        ));
    };
    let m = owed[at];
    if tag == Tag::Any && earliest(owed, src, None) != Some(at) {
        return Err(format!(
            "ANY_TAG from {src} overtook an earlier message (reordered)"
        ));
    }
    if status.len != m.len {
        return Err(format!(
            "message {} from {src}: {} bytes, sent {}",
            m.seq, status.len, m.len
        ));
    }
    if let Some(i) = (0..m.len).find(|&i| buf[i] != byte(src, m.seq, i)) {
        return Err(format!(
            "message {} from {src}: byte {i} of {} corrupted",
            m.seq, m.len
        ));
    }
    if buf[m.len..].iter().any(|&b| b != 0xEE) {
        return Err(format!(
            "message {} from {src}: written past its length",
            m.seq
        ));
    }
    owed.remove(at);
    counts.messages += 1;
    counts.bytes += m.len as u64;
    Ok(())
}

//! The transport conformance suite: the same cases run on every backend, on every rank of a
//! job. Each returns `Err` with what went wrong instead of panicking, so a process-based run
//! can report it.

use std::time::{Duration, Instant};

use rdcoll_transport::{
    Event, Fabric, PutStatus, Rank, RegionKey, RemoteAddr, RemoteRegion, TransportError,
    MAX_MESSAGE_SIZE,
};

use super::harness::Harness;

/// Cases also run with 8 ranks (more ranks than this machine's cores: the blocking wait path).
pub const CROWDED_CASES: &[&str] = &["messages_fifo_all_pairs", "put_many_peers", "flagged_puts"];

/// The job sizes a case runs at, each once: its smallest job (at least `floor` ranks), 4, and
/// 8 for a crowded case when `crowded` (more ranks than this machine's cores).
pub fn rank_counts(case: &str, min: usize, floor: usize, crowded: bool) -> Vec<usize> {
    let most = if crowded && CROWDED_CASES.contains(&case) {
        8
    } else {
        4
    };
    let mut sizes = vec![min.max(floor), 4, most];
    sizes.dedup();
    sizes
}

/// Every case, by name, with the smallest job it needs.
pub const CASES: &[(&str, usize)] = &[
    ("messages_fifo_all_pairs", 1),
    ("message_limits", 1),
    ("put_get_sizes", 2),
    ("put_many_peers", 2),
    ("flagged_puts", 2),
    ("bad_keys_and_offsets", 2),
    ("large_puts_to_user_memory", 2),
    ("reuse_under_fire", 2),
    ("peer_death", 3),
    ("last_words", 2),
    ("last_words_closed", 2),
];

/// Cases whose victim returns instead of dying: its process must drop the fabric and then
/// stay alive for [`LINGER`], so peers learn of the departure from the fabric, not the exit.
pub const LINGERING_CASES: &[&str] = &["last_words_closed"];
/// How long a lingering victim stays alive after dropping its fabric.
pub const LINGER: Duration = Duration::from_millis(1500);

/// Whether `rank` of an `n`-rank job of `case` is meant to end killed by SIGKILL.
pub fn killed_on_purpose(case: &str, rank: usize, n: usize) -> bool {
    matches!(case, "peer_death" | "last_words") && rank == n - 1
}

/// Runs one case on this rank. `die` ends this rank abruptly (the victim in `peer_death`).
pub fn run_case(name: &str, f: &dyn Fabric, die: &dyn Fn()) -> Result<(), String> {
    let mut h = Harness::new(f);
    match name {
        "messages_fifo_all_pairs" => messages_fifo_all_pairs(&mut h),
        "message_limits" => message_limits(&mut h),
        "put_get_sizes" => put_get_sizes(&mut h),
        "put_many_peers" => put_many_peers(&mut h),
        "flagged_puts" => flagged_puts(&mut h),
        "bad_keys_and_offsets" => bad_keys_and_offsets(&mut h),
        "large_puts_to_user_memory" => large_puts_to_user_memory(&mut h),
        "reuse_under_fire" => reuse_under_fire(&mut h),
        "peer_death" => peer_death(&mut h, die),
        "last_words" => last_words(&mut h, Some(die)),
        "last_words_closed" => last_words(&mut h, None),
        "link_break" => link_break(&mut h),
        "shm_segments" => shm_segments(&mut h),
        _ => Err(format!("no conformance case named {name}")),
    }
}

/// The byte at `i` of rank `r`'s test pattern.
fn pattern(r: Rank, i: usize) -> u8 {
    ((i as u64).wrapping_mul(0x9E37_79B9) >> 7) as u8 ^ (r as u8).wrapping_mul(37) ^ (i as u8)
}

fn pattern_vec(r: Rank, start: usize, len: usize) -> Vec<u8> {
    (start..start + len).map(|i| pattern(r, i)).collect()
}

fn fail<T>(h: &Harness, what: impl std::fmt::Display) -> Result<T, String> {
    Err(format!("rank {}: {what}", h.f.rank()))
}

fn messages_fifo_all_pairs(h: &mut Harness) -> Result<(), String> {
    const PER_PEER: usize = 300;
    let (me, n) = (h.f.rank(), h.f.size());
    let body = |src: Rank, seq: usize| -> Vec<u8> {
        let len = match seq % 5 {
            0 => 0,
            1 => 8,
            2 => 100,
            3 => 4000,
            _ => MAX_MESSAGE_SIZE,
        };
        let mut v = pattern_vec(src, seq, len);
        if len >= 8 {
            v[..8].copy_from_slice(&(seq as u64).to_le_bytes());
        }
        v
    };
    // Interleave destinations so every pair is busy at once.
    for seq in 0..PER_PEER {
        for k in 0..n {
            let dest = ((me as usize + k) % n) as Rank;
            h.f.send(dest, &body(me, seq))
                .map_err(|e| format!("send to {dest}: {e}"))?;
        }
        // Drain as we go so bounded rings cannot fill up on every side at once; through
        // `poll_with`, so the lent-bytes receive path is held to the same order and content.
        let mut got = Vec::new();
        while let Ok(true) = h.f.poll_with(&mut |ev| got.push(ev.into_owned())) {}
        for ev in got {
            h.file(ev);
        }
    }
    for src in 0..n as Rank {
        for seq in 0..PER_PEER {
            let got = h.message_from(src)?;
            if got != body(src, seq) {
                return fail(
                    h,
                    format!("message {seq} from {src} is wrong or out of order"),
                );
            }
        }
    }
    h.barrier()
}

fn message_limits(h: &mut Harness) -> Result<(), String> {
    let (me, n) = (h.f.rank(), h.f.size());
    let big = vec![1u8; MAX_MESSAGE_SIZE + 1];
    match h.f.send(me, &big) {
        Err(TransportError::MessageTooLarge { len, max })
            if len == big.len() && max == MAX_MESSAGE_SIZE => {}
        other => return fail(h, format!("oversized message gave {other:?}")),
    }
    match h.f.send(n as Rank, b"x") {
        Err(TransportError::InvalidRank { .. }) => {}
        other => return fail(h, format!("send to rank {n} gave {other:?}")),
    }
    h.f.send(me, &big[..MAX_MESSAGE_SIZE])
        .map_err(|e| e.to_string())?;
    h.f.send(me, b"").map_err(|e| e.to_string())?;
    if h.message_from(me)?.len() != MAX_MESSAGE_SIZE || !h.message_from(me)?.is_empty() {
        return fail(h, "self messages came back wrong");
    }
    h.barrier()
}

const SIZES: &[usize] = &[0, 1, 7, 64, 4096, 65_537, (1 << 20) + 3, 64 << 20];

fn put_get_sizes(h: &mut Harness) -> Result<(), String> {
    let (me, n) = (h.f.rank(), h.f.size() as Rank);
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let max = *SIZES.last().unwrap_or(&0);
    let src = h.f.alloc_region(max + 64).map_err(|e| e.to_string())?;
    src.write(0, &pattern_vec(me, 0, max + 64))
        .map_err(|e| e.to_string())?;
    let dst = h.f.alloc_region(max + 64).map_err(|e| e.to_string())?;
    let srcs = h.exchange(&src.remote())?;
    let dsts = h.exchange(&dst.remote())?;
    let mut got = vec![0u8; max];
    for &size in SIZES {
        let off = size % 13;
        let op =
            h.f.put(
                &src,
                0,
                size,
                dsts[right as usize].at(off),
                Some(size as u64 + 1),
            )
            .map_err(|e| format!("put {size}: {e}"))?;
        h.op_ok(op, &format!("put of {size} bytes"))?;
        let imm = h.imm_from(left)?;
        if imm != size as u64 + 1 {
            return fail(
                h,
                format!("immediate {imm} from {left}, expected {}", size + 1),
            );
        }
        dst.read(off, &mut got[..size]).map_err(|e| e.to_string())?;
        if got[..size] != pattern_vec(left, 0, size)[..] {
            return fail(h, format!("put of {size} bytes from {left} landed wrong"));
        }
        h.barrier()?;
        let op =
            h.f.get(&dst, 1, size, srcs[right as usize].at(off))
                .map_err(|e| format!("get {size}: {e}"))?;
        h.op_ok(op, &format!("get of {size} bytes"))?;
        dst.read(1, &mut got[..size]).map_err(|e| e.to_string())?;
        if got[..size] != pattern_vec(right, off, size)[..] {
            return fail(
                h,
                format!("get of {size} bytes from {right} read wrong data"),
            );
        }
        // The same as a load into unregistered memory, where the backend reaches it at once
        // (shm, local); elsewhere nothing is read.
        let mut loaded = vec![0xEEu8; size];
        let at = srcs[right as usize].at(off);
        match h.f.load_now(&mut loaded, at) {
            Ok(true) if loaded != pattern_vec(right, off, size) => {
                return fail(
                    h,
                    format!("load_now of {size} bytes from {right} read wrong data"),
                )
            }
            Ok(false) if loaded.iter().any(|&b| b != 0xEE) => {
                return fail(h, format!("load_now of {size} bytes said no but wrote"))
            }
            Ok(_) => {}
            Err(e) => return fail(h, format!("load_now of {size} bytes: {e}")),
        }
        // Past the end of the peer's region: an error or nothing, never its neighbour's bytes.
        let mut past = vec![0u8; 65];
        match h.f.load_now(&mut past, srcs[right as usize].at(max)) {
            Err(_) | Ok(false) => {}
            Ok(true) => return fail(h, "load_now past the end of a region succeeded"),
        }
        h.barrier()?;
    }
    Ok(())
}

fn put_many_peers(h: &mut Harness) -> Result<(), String> {
    const SLOT: usize = 3 * 4096 + 5;
    const ROUNDS: usize = 20;
    let (me, n) = (h.f.rank(), h.f.size());
    let inbox = h.f.alloc_region(SLOT * n).map_err(|e| e.to_string())?;
    let outbox = h.f.alloc_region(SLOT).map_err(|e| e.to_string())?;
    let inboxes = h.exchange(&inbox.remote())?;
    for round in 0..ROUNDS {
        outbox
            .write(0, &pattern_vec(me, round, SLOT))
            .map_err(|e| e.to_string())?;
        let mut ops = Vec::new();
        for inbox in &inboxes {
            let at = inbox.at(SLOT * me as usize);
            ops.push(
                h.f.put(&outbox, 0, SLOT, at, Some(round as u64))
                    .map_err(|e| e.to_string())?,
            );
        }
        for op in ops {
            h.op_ok(op, "put to a peer")?;
        }
        let mut slot = vec![0u8; SLOT];
        for src in 0..n as Rank {
            let imm = h.imm_from(src)?;
            if imm != round as u64 {
                return fail(h, format!("round {round}: immediate {imm} from {src}"));
            }
            inbox
                .read(SLOT * src as usize, &mut slot)
                .map_err(|e| e.to_string())?;
            if slot != pattern_vec(src, round, SLOT) {
                return fail(h, format!("round {round}: slot of {src} is wrong"));
            }
        }
        h.barrier()?;
    }
    Ok(())
}

/// `put_flag` (and `put_now` with a flag): the flag byte lands after the data, a reader that
/// sees it (acquire) sees the data, a reader asleep in `block_unless` is woken by it, and the
/// flag byte counts in the target's range check.
fn flagged_puts(h: &mut Harness) -> Result<(), String> {
    const SIZES: &[usize] = &[0, 1, 7, 100, 4096, 70_000, 1 << 20];
    let (me, n) = (h.f.rank(), h.f.size() as Rank);
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let max = *SIZES.last().unwrap_or(&0);
    let src = h.f.alloc_region(max).map_err(|e| e.to_string())?;
    let inbox = h.f.alloc_region(max + 64).map_err(|e| e.to_string())?;
    let inboxes = h.exchange(&inbox.remote())?;
    for (round, &size) in SIZES.iter().enumerate() {
        let flag = round as u8 + 1;
        let off = 3 + round;
        src.write(0, &pattern_vec(me, round, size))
            .map_err(|e| e.to_string())?;
        h.barrier()?;
        // Half the rounds the reader is already asleep when the flag comes.
        if round % 2 == 1 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let dst = inboxes[right as usize].at(off);
        // Every third round from unregistered memory, where the backend stores directly.
        let stored = round % 3 == 2
            && h.f
                .store_now(&[&pattern_vec(me, round, size)], dst, Some(flag))
                .map_err(|e| format!("store_now {size}: {e}"))?;
        // Every third round from `put_now`, which may be done on return (shm: a direct copy;
        // tcp: a put of one frame that asks no acknowledgement): the flag must still show
        // after the data.
        let op = if stored {
            None
        } else if round % 3 == 1 {
            match h.f.put_now(&src, 0, size, dst, Some(flag)) {
                Ok(PutStatus::Done) => None,
                Ok(PutStatus::Pending(op)) => Some(op),
                Err(e) => return fail(h, format!("put_now {size}: {e}")),
            }
        } else {
            Some(
                h.f.put_flag(&src, 0, size, dst, flag)
                    .map_err(|e| format!("put_flag {size}: {e}"))?,
            )
        };
        let byte = inbox.atomic_u8(off + size).map_err(|e| e.to_string())?;
        let ready = || byte.load(std::sync::atomic::Ordering::Acquire) == flag;
        let start = Instant::now();
        while !ready() {
            // A lost wake-up would sleep the whole 30 s: a liveness check, not a timing one.
            if start.elapsed() > Duration::from_secs(20) {
                return fail(h, format!("the flag of a {size}-byte put never showed"));
            }
            // Memory the target's fabric could not place in shared memory is written by the
            // target's own progress.
            match h.f.poll().map_err(|e| e.to_string())? {
                Some(ev) => h.file(ev),
                None => h.f.block_unless(Duration::from_secs(30), &ready),
            }
        }
        let mut got = vec![0u8; size];
        inbox.read(off, &mut got).map_err(|e| e.to_string())?;
        if got != pattern_vec(left, round, size) {
            return fail(
                h,
                format!("flagged put of {size} bytes from {left} landed wrong"),
            );
        }
        if let Some(op) = op {
            h.op_ok(op, &format!("put_flag of {size} bytes"))?;
        }
    }
    h.barrier()?;
    // The flag byte must fit too: data up to the region's end leaves no room for it.
    let at_end = inboxes[right as usize].at(max + 64 - 8);
    expect_remote_error(
        h,
        h.f.put_flag(&src, 0, 8, at_end, 1),
        "flag past the end",
        |e| matches!(e, TransportError::OutOfRange { .. }),
    )?;
    h.barrier()
}

fn expect_remote_error(
    h: &mut Harness,
    res: Result<rdcoll_transport::OpId, TransportError>,
    what: &str,
    ok: impl Fn(&TransportError) -> bool,
) -> Result<(), String> {
    let err = match res {
        Err(e) => e,
        Ok(op) => match h.op(op)? {
            Err(e) => e,
            Ok(()) => return fail(h, format!("{what} succeeded")),
        },
    };
    if ok(&err) {
        Ok(())
    } else {
        fail(h, format!("{what} failed with the wrong error: {err}"))
    }
}

fn bad_keys_and_offsets(h: &mut Harness) -> Result<(), String> {
    let (me, n) = (h.f.rank(), h.f.size() as Rank);
    let right = (me + 1) % n;
    let guarded = h.f.alloc_region(64).map_err(|e| e.to_string())?;
    let neighbour = h.f.alloc_region(64).map_err(|e| e.to_string())?;
    let doomed = h.f.alloc_region(64).map_err(|e| e.to_string())?;
    let src = h.f.alloc_region(128).map_err(|e| e.to_string())?;
    src.fill(0, 128, 0xAB).map_err(|e| e.to_string())?;
    let guardeds = h.exchange(&guarded.remote())?;
    let doomeds = h.exchange(&doomed.remote())?;
    drop(doomed);
    h.barrier()?;
    let r = right as usize;
    let is_range = |e: &TransportError| matches!(e, TransportError::OutOfRange { .. });
    let is_key = |e: &TransportError| matches!(e, TransportError::BadKey { .. });
    expect_remote_error(
        h,
        h.f.put(&src, 0, 8, guardeds[r].at(60), None),
        "put past the end",
        is_range,
    )?;
    expect_remote_error(
        h,
        h.f.put(&src, 0, 1, guardeds[r].at(usize::MAX), None),
        "put at usize::MAX",
        is_range,
    )?;
    expect_remote_error(
        h,
        h.f.put(&src, 0, 128, guardeds[r].at(0), None),
        "put longer than the region",
        is_range,
    )?;
    expect_remote_error(
        h,
        h.f.get(&src, 0, 1, guardeds[r].at(64)),
        "get at the end",
        is_range,
    )?;
    expect_remote_error(
        h,
        h.f.put(&src, 0, 8, doomeds[r].at(0), Some(9)),
        "put to a deregistered region",
        is_key,
    )?;
    expect_remote_error(
        h,
        h.f.get(&src, 0, 8, doomeds[r].at(0)),
        "get from a deregistered region",
        is_key,
    )?;
    let unknown = RemoteAddr {
        rank: right,
        key: RegionKey::new(9999, 3),
        offset: 0,
    };
    expect_remote_error(
        h,
        h.f.put(&src, 0, 8, unknown, None),
        "put to an unknown key",
        is_key,
    )?;
    expect_remote_error(
        h,
        h.f.get(&src, 0, 8, unknown),
        "get from an unknown key",
        is_key,
    )?;
    // A direct store is refused at once, or not offered (then it wrote nothing either).
    for (what, dst, ok) in [
        (
            "past the end",
            guardeds[r].at(60),
            &is_range as &dyn Fn(&TransportError) -> bool,
        ),
        ("to a deregistered region", doomeds[r].at(0), &is_key),
        ("to an unknown key", unknown, &is_key),
    ] {
        match h.f.store_now(&[&[0xCD; 8]], dst, Some(9)) {
            Ok(false) => {}
            Err(e) if ok(&e) => {}
            other => return fail(h, format!("store_now {what}: {other:?}")),
        }
    }
    // Local mistakes are reported at once.
    if !matches!(
        h.f.put(&src, 100, 29, guardeds[r].at(0), None),
        Err(TransportError::OutOfRange { .. })
    ) {
        return fail(h, "put from beyond the local region was not refused");
    }
    if !matches!(
        h.f.get(
            &src,
            0,
            8,
            RemoteAddr {
                rank: n,
                key: RegionKey(0),
                offset: 0
            }
        ),
        Err(TransportError::InvalidRank { .. })
    ) {
        return fail(h, "get from a rank out of range was not refused");
    }
    h.barrier()?;
    // Nothing landed in the guarded region or beside it, and no stray immediate arrived.
    let mut bytes = [0u8; 64];
    guarded.read(0, &mut bytes).map_err(|e| e.to_string())?;
    neighbour
        .read(0, &mut bytes[..])
        .map_err(|e| e.to_string())?;
    let mut g = [0u8; 64];
    guarded.read(0, &mut g).map_err(|e| e.to_string())?;
    if g.iter().chain(bytes.iter()).any(|&b| b != 0) {
        return fail(h, "a refused put wrote into memory");
    }
    h.barrier()?;
    // The fabric still works: a valid put to the last 8 bytes, with an immediate.
    let op =
        h.f.put(&src, 0, 8, guardeds[r].at(56), Some(77))
            .map_err(|e| e.to_string())?;
    h.op_ok(op, "valid put after errors")?;
    if h.imm_from((me + n - 1) % n)? != 77 {
        return fail(h, "a stray immediate arrived from a refused put");
    }
    guarded.read(56, &mut g[..8]).map_err(|e| e.to_string())?;
    if g[..8] != [0xAB; 8] {
        return fail(h, "valid put after errors landed wrong");
    }
    h.barrier()
}

/// Large puts between buffers the caller registered (on shm, split between initiator and
/// target when every rank has a core): the data, immediate and flag arrive whole, including
/// lengths that do not split evenly; a stale key or a range past the end is refused and writes
/// nothing.
fn large_puts_to_user_memory(h: &mut Harness) -> Result<(), String> {
    // Below 32 KiB the initiator writes the whole put (shm `push`), above it both sides do
    // (`split`); the odd rounds carry a flag (always pulled by the target), the even ones an
    // immediate.
    const SIZES: &[usize] = &[20_011, 300_001, (1 << 20) + 3, (5 << 20) + 17, 7, 30_001];
    const ROOM: usize = (5 << 20) + 4096;
    let (me, n) = (h.f.rank(), h.f.size() as Rank);
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let mut src_mem = pattern_vec(me, 0, ROOM);
    let mut dst_mem = vec![0u8; ROOM];
    let mut doomed_mem = vec![0u8; 1 << 20];
    let reg = |m: &mut Vec<u8>| {
        // SAFETY: every buffer outlives its region: the regions are dropped at the end of
        // this function, before the vectors (declared earlier).
        unsafe { h.f.register_memory(m.as_mut_ptr(), m.len()) }.map_err(|e| e.to_string())
    };
    let src = reg(&mut src_mem)?;
    let dst = reg(&mut dst_mem)?;
    let doomed = reg(&mut doomed_mem)?;
    let dsts = h.exchange(&dst.remote())?;
    let doomeds = h.exchange(&doomed.remote())?;
    drop(doomed);
    h.barrier()?;
    let r = right as usize;
    expect_remote_error(
        h,
        h.f.put(&src, 0, 512 << 10, doomeds[r].at(0), Some(1)),
        "large put to a deregistered region",
        |e| matches!(e, TransportError::BadKey { .. }),
    )?;
    expect_remote_error(
        h,
        h.f.put(&src, 0, 512 << 10, dsts[r].at(ROOM - (256 << 10)), Some(1)),
        "large put past the end",
        |e| matches!(e, TransportError::OutOfRange { .. }),
    )?;
    expect_remote_error(
        h,
        h.f.put(&src, 0, 4096, doomeds[r].at(0), Some(1)),
        "small put to a deregistered region",
        |e| matches!(e, TransportError::BadKey { .. }),
    )?;
    expect_remote_error(
        h,
        h.f.put(&src, 0, 4096, dsts[r].at(ROOM - 2048), Some(1)),
        "small put past the end",
        |e| matches!(e, TransportError::OutOfRange { .. }),
    )?;
    h.barrier()?;
    let mut got = vec![0u8; ROOM];
    dst.read(0, &mut got).map_err(|e| e.to_string())?;
    if got.iter().any(|&b| b != 0) {
        return fail(h, "a refused large put wrote into memory");
    }
    h.barrier()?;
    for (round, &size) in SIZES.iter().enumerate() {
        let off = 8 + round;
        let flagged = round % 2 == 1;
        let op = if flagged {
            h.f.put_flag(&src, round, size, dsts[r].at(off), 0xEE)
        } else {
            h.f.put(&src, round, size, dsts[r].at(off), Some(size as u64))
        }
        .map_err(|e| format!("put of {size}: {e}"))?;
        h.op_ok(op, &format!("put of {size} bytes into user memory"))?;
        if flagged {
            // User memory offers no atomics: the byte is read like the data (the flag is
            // stored after it, so the data is complete once the flag shows).
            let start = Instant::now();
            let mut flag = [0u8];
            while {
                dst.read(off + size, &mut flag).map_err(|e| e.to_string())?;
                flag[0] != 0xEE
            } {
                if start.elapsed() > Duration::from_secs(20) {
                    return fail(h, format!("the flag of a {size}-byte put never showed"));
                }
                if let Some(ev) = h.f.poll().map_err(|e| e.to_string())? {
                    h.file(ev);
                }
            }
        } else if h.imm_from(left)? != size as u64 {
            return fail(h, format!("wrong immediate after a {size}-byte put"));
        }
        dst.read(off, &mut got[..size]).map_err(|e| e.to_string())?;
        if got[..size] != pattern_vec(left, round, size)[..] {
            return fail(h, format!("put of {size} bytes from {left} landed wrong"));
        }
        h.barrier()?;
    }
    drop((src, dst));
    Ok(())
}

/// The last rank dies in the middle of large gets the others are making from it; every
/// survivor must learn `PeerFailed` for it within the bound, and keep working with the others.
fn peer_death(h: &mut Harness, die: &dyn Fn()) -> Result<(), String> {
    const BIG: usize = 8 << 20;
    let (me, n) = (h.f.rank(), h.f.size() as Rank);
    let victim = n - 1;
    let region = h.f.alloc_region(BIG).map_err(|e| e.to_string())?;
    let regions = h.exchange(&region.remote())?;
    if me == victim {
        for _ in 0..n - 1 {
            let m = h.message()?;
            if m.1 != b"busy" {
                return fail(h, "victim expected 'busy'");
            }
        }
        std::thread::sleep(Duration::from_millis(30));
        die();
        return fail(h, "die() returned");
    }
    h.f.send(victim, b"busy").map_err(|e| e.to_string())?;
    let start = Instant::now();
    let failed_at = loop {
        if start.elapsed() > Duration::from_secs(30) {
            return fail(h, "no PeerFailed within 30 s of the victim's death");
        }
        if h.failed.contains(&victim) {
            break start.elapsed();
        }
        match h.f.get(&region, 0, BIG, regions[victim as usize].at(0)) {
            Err(TransportError::PeerFailed(r)) if r == victim => break start.elapsed(),
            Err(e) => return fail(h, format!("get from the victim failed with {e}")),
            Ok(op) => match h.op(op)? {
                Ok(()) => {}
                Err(TransportError::PeerFailed(r)) if r == victim => break start.elapsed(),
                Err(e) => return fail(h, format!("get from the victim completed with {e}")),
            },
        }
    };
    if failed_at > Duration::from_secs(15) {
        return fail(h, format!("PeerFailed took {failed_at:?}"));
    }
    if !h.f.is_failed(victim) {
        return fail(h, "is_failed(victim) is false after PeerFailed");
    }
    match h.f.send(victim, b"x") {
        Err(TransportError::PeerFailed(r)) if r == victim => {}
        other => return fail(h, format!("send to the dead rank gave {other:?}")),
    }
    // Survivors still talk to each other.
    for dest in 0..victim {
        h.f.send(dest, b"alive").map_err(|e| e.to_string())?;
    }
    for src in 0..victim {
        if h.message_from(src)? != b"alive" {
            return fail(h, format!("survivor {src} sent the wrong thing"));
        }
    }
    Ok(())
}

/// Peers keep putting into a region of rank 0 while it drops the region and allocates another
/// of the same size (which may reuse the memory): no put may land in the new region.
fn reuse_under_fire(h: &mut Harness) -> Result<(), String> {
    const LEN: usize = 4 << 20;
    let (me, n) = (h.f.rank(), h.f.size() as Rank);
    if me != 0 {
        let target = RemoteRegion::from_bytes(&h.message_from(0)?).map_err(|e| e.to_string())?;
        let src = h.f.alloc_region(LEN).map_err(|e| e.to_string())?;
        src.fill(0, LEN, 0xA5).map_err(|e| e.to_string())?;
        let start = Instant::now();
        let mut puts = 0usize;
        loop {
            if start.elapsed() > Duration::from_secs(20) {
                return fail(h, "puts into the dropped region kept succeeding");
            }
            let op = h.f.put(&src, 0, LEN, target.at(0), None);
            match op.map_err(|e| e.to_string()).and_then(|op| h.op(op))? {
                Ok(()) => {
                    puts += 1;
                    if puts == 1 {
                        h.f.send(0, b"firing").map_err(|e| e.to_string())?;
                    }
                }
                Err(TransportError::BadKey { .. }) => break,
                Err(e) => return fail(h, format!("put failed with {e}")),
            }
        }
        return h.f.send(0, b"stopped").map_err(|e| e.to_string());
    }
    let old = h.f.alloc_region(LEN).map_err(|e| e.to_string())?;
    for dest in 1..n {
        h.f.send(dest, &old.remote().to_bytes())
            .map_err(|e| e.to_string())?;
    }
    for src in 1..n {
        if h.message_from(src)? != b"firing" {
            return fail(h, "expected 'firing'");
        }
    }
    let old_key = old.key();
    drop(old);
    let new = h.f.alloc_region(LEN).map_err(|e| e.to_string())?;
    if new.key() == old_key {
        return fail(h, "a new region got the dropped region's key");
    }
    for src in 1..n {
        if h.message_from(src)? != b"stopped" {
            return fail(h, "expected 'stopped'");
        }
    }
    let mut bytes = vec![0u8; LEN];
    new.read(0, &mut bytes).map_err(|e| e.to_string())?;
    match bytes.iter().position(|&b| b != 0) {
        Some(i) => fail(
            h,
            format!("a put meant for the dropped region hit byte {i} of the new one"),
        ),
        None => Ok(()),
    }
}

/// The victim sends a burst to every survivor and then leaves: killed (`die`), or, with `None`,
/// by returning so its fabric is dropped while the process lives on. Survivors do not poll
/// meanwhile; afterwards every message must arrive, in order, before `PeerFailed`.
fn last_words(h: &mut Harness, die: Option<&dyn Fn()>) -> Result<(), String> {
    const WORDS: usize = 100;
    let (me, n) = (h.f.rank(), h.f.size() as Rank);
    let victim = n - 1;
    let word = |k: usize| pattern_vec(victim, k, 8 + k % 57);
    if me == victim {
        for _ in 0..n - 1 {
            if h.message()?.1 != b"ready" {
                return fail(h, "victim expected 'ready'");
            }
        }
        for k in 0..WORDS {
            for dest in 0..victim {
                h.f.send(dest, &word(k)).map_err(|e| e.to_string())?;
            }
        }
        // Let a backend with a send thread hand the burst to the OS.
        std::thread::sleep(Duration::from_millis(50));
        return match die {
            Some(die) => {
                die();
                fail(h, "die() returned")
            }
            None => Ok(()),
        };
    }
    h.f.send(victim, b"ready").map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(300));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match h.f.wait(Some(left)).map_err(|e| e.to_string())? {
            None => return fail(h, format!("no PeerFailed; {got} of {WORDS} words arrived")),
            Some(Event::Message { src, data }) if src == victim => {
                if got >= WORDS || data[..] != word(got)[..] {
                    return fail(h, format!("word {got} from the victim is wrong"));
                }
                got += 1;
            }
            Some(Event::PeerFailed { rank }) if rank == victim => {
                if got != WORDS {
                    return fail(
                        h,
                        format!("PeerFailed came after only {got} of {WORDS} words"),
                    );
                }
                break;
            }
            Some(other) => h.file(other),
        }
    }
    match h.f.send(victim, b"x") {
        Err(TransportError::PeerFailed(r)) if r == victim => Ok(()),
        other => fail(h, format!("send to the departed rank gave {other:?}")),
    }
}

/// Not in [`CASES`]: the test driving it breaks the network link between the ranks. Every
/// rank reads from its neighbour until it learns `PeerFailed` for some peer.
fn link_break(h: &mut Harness) -> Result<(), String> {
    let (me, n) = (h.f.rank(), h.f.size() as Rank);
    let right = (me + 1) % n;
    let region = h.f.alloc_region(1 << 20).map_err(|e| e.to_string())?;
    let regions = h.exchange(&region.remote())?;
    println!("link_break: rank {me} ready");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if !h.failed.is_empty() {
            println!(
                "link_break: rank {me} saw PeerFailed after {:?}",
                start.elapsed()
            );
            return Ok(());
        }
        match h.f.get(&region, 0, 1 << 20, regions[right as usize].at(0)) {
            Err(TransportError::PeerFailed(_)) => return Ok(()),
            Err(e) => return fail(h, format!("get failed with {e}")),
            Ok(op) => match h.op(op)? {
                Ok(()) | Err(TransportError::PeerFailed(_)) => {}
                Err(e) => return fail(h, format!("get completed with {e}")),
            },
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    fail(h, "no PeerFailed within 60 s of the link breaking")
}

/// Not in [`CASES`] (shm only): after bootstrap every rank has mapped every segment, each is
/// already unlinked (a crash from here on leaves nothing in /dev/shm), and each was created
/// mode 0600.
fn shm_segments(h: &mut Harness) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|e| e.to_string())?;
    let segs: Vec<&str> = maps
        .lines()
        .filter(|l| l.contains("/dev/shm/rdcoll-"))
        .collect();
    if segs.len() != h.f.size() {
        return fail(
            h,
            format!(
                "{} rdcoll segments mapped, expected {}",
                segs.len(),
                h.f.size()
            ),
        );
    }
    for line in &segs {
        if !line.ends_with("(deleted)") {
            return fail(h, format!("segment still linked in /dev/shm: {line}"));
        }
        let range = line.split_whitespace().next().unwrap_or("");
        // map_files needs CAP_SYS_ADMIN; where it is readable, check the mode.
        if let Ok(meta) = std::fs::metadata(format!("/proc/self/map_files/{range}")) {
            let mode = meta.permissions().mode() & 0o777;
            if mode != 0o600 {
                return fail(h, format!("segment mode {mode:o}, expected 600: {line}"));
            }
        }
    }
    println!(
        "shm_segments: rank {} sees {} segments, all unlinked",
        h.f.rank(),
        segs.len()
    );
    h.barrier()
}

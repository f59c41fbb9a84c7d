//! Broadcast cases run on every rank of a job, in-process and across processes. Each returns
//! `Err` with what went wrong instead of panicking, so that a process-based run can report it.

use rdcoll::{BcastSchedule, Comm};

/// Sizes from nothing to well past the small-message limit.
pub const SIZES: &[usize] = &[
    0,
    1,
    7,
    4095,
    4096,
    4097,
    8253,
    8254,
    20_000,
    100_000,
    1 << 20,
];

/// The byte at `i` of the message broadcast from `root` in round `round`.
pub fn byte(root: u32, round: usize, i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (root as usize * 7) ^ round.wrapping_mul(13)) as u8
}

fn check(buf: &[u8], root: u32, round: usize, what: &str) -> Result<(), String> {
    match (0..buf.len()).find(|&i| buf[i] != byte(root, round, i)) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: byte {i} of {} from root {root} is {}, expected {}",
            buf.len(),
            buf[i],
            byte(root, round, i)
        )),
    }
}

fn one(world: &Comm, len: usize, root: u32, round: usize, what: &str) -> Result<(), String> {
    let mut buf = if world.rank() == root {
        (0..len).map(|i| byte(root, round, i)).collect()
    } else {
        vec![0xEEu8; len]
    };
    world
        .bcast(&mut buf, root)
        .map_err(|e| format!("{what}: {e}"))?;
    check(&buf, root, round, what)
}

/// Every root, every size in `sizes`, checked byte for byte.
pub fn every_root_and_size(world: &Comm, sizes: &[usize]) -> Result<(), String> {
    let n = world.size();
    for (round, &len) in sizes.iter().enumerate() {
        for root in 0..n {
            one(world, len, root, round, &format!("{len} bytes from {root}"))?;
        }
    }
    Ok(())
}

/// Many small broadcasts back to back with rotating roots: every block of the counter-byte
/// buffer is reused many times and the counter wraps (255 values) several times.
pub fn back_to_back(world: &Comm, count: usize) -> Result<(), String> {
    let n = world.size();
    for round in 0..count {
        let root = (round as u32 * 7) % n;
        let len = [0, 3, 64, 4095, 9000][round % 5];
        one(world, len, root, round, &format!("broadcast {round}"))?;
    }
    Ok(())
}

/// A rank that does not know the length learns it from the root.
pub fn any_size(world: &Comm) -> Result<(), String> {
    let n = world.size();
    for (round, &len) in [0usize, 5, 10_000, 300_000].iter().enumerate() {
        let root = round as u32 % n;
        let mine: Vec<u8> = (0..len).map(|i| byte(root, round, i)).collect();
        let data = (world.rank() == root).then_some(&mine[..]);
        let got = world
            .bcast_any_size(data, root)
            .map_err(|e| format!("bcast_any_size of {len}: {e}"))?;
        if got.len() != len {
            return Err(format!(
                "bcast_any_size gave {} bytes, sent {len}",
                got.len()
            ));
        }
        check(&got, root, round, "bcast_any_size")?;
    }
    Ok(())
}

/// Ranks whose buffers are shorter or longer than the root's message get an error once
/// their part is done, hold as much of the message as fits and nothing else (no byte written
/// past it), and the communicator stays usable: for one-block (both lengths in one block
/// too), multi-block and RDMC messages, and where the other length would take the other
/// path. With `RDCOLL_CHECK_COLLECTIVES` on, every rank, the root too, gets the error and
/// nothing moves.
pub fn length_mismatch(world: &Comm) -> Result<(), String> {
    const UNTOUCHED: u8 = 0xEE;
    // (root's length, rank 1's, rank 2's)
    let cases: &[(usize, usize, usize)] = &[
        (100, 20_000, 3 << 20),
        (0, 9000, 100_000),
        (20_000, 8000, 20_001),
        (200_000, 100_000, 300_000),
        (2 << 20, 100, 3 << 20),
        (20_000, 0, 2 << 20),
        (80, 160, 8),
        (8253, 8000, 1),
    ];
    for (round, &(len, short, long)) in cases.iter().enumerate() {
        let mine = match world.rank() {
            1 => short,
            2 => long,
            _ => len,
        };
        let mut buf: Vec<u8> = if world.rank() == 0 {
            (0..mine).map(|i| byte(0, round, i)).collect()
        } else {
            vec![UNTOUCHED; mine]
        };
        let what = format!("{len} bytes into {mine}");
        let r = world.bcast(&mut buf, 0);
        let checked = world.collectives_config().check_collectives;
        let got = match (mine == len, r) {
            // Checked: every rank hears of it before anything moves.
            (_, Err(rdcoll::Error::Mismatch(_))) if checked => 0,
            (_, other) if checked => return Err(format!("{what} gave {other:?} (checked)")),
            (false, Err(rdcoll::Error::Mismatch(_))) => len.min(mine),
            (false, other) => return Err(format!("{what} gave {other:?}")),
            (true, Err(e)) => return Err(format!("{what} failed: {e}")),
            (true, Ok(())) => len,
        };
        check(&buf[..got], 0, round, &what)?;
        let untouched = if checked && world.rank() == 0 {
            mine
        } else {
            got
        };
        if let Some(i) = buf[untouched..].iter().position(|&b| b != UNTOUCHED) {
            return Err(format!(
                "{what}: byte {} past the message was written",
                got + i
            ));
        }
        // Still usable, from another root.
        let root = round as u32 % world.size();
        one(world, 10, root, round, &format!("after {what}"))?;
    }
    Ok(())
}

/// The names of the RDMC algorithms, for forcing each in turn.
pub fn algorithms() -> Vec<&'static str> {
    BcastSchedule::ALL.iter().map(|a| a.name()).collect()
}

/// Each RDMC algorithm in turn (with 64 KiB blocks, so 1 MiB is 16 of them), and the hybrid
/// with the ranks split into clusters of two; each with every rank taking its blocks as
/// direct writes, then staged, then half of them one way and half the other.
pub fn every_algorithm(world: &Comm) -> Result<(), String> {
    use rdcoll::BcastTransfer::{Staged, Write};
    let odd = world.rank() % 2 == 1;
    for name in algorithms() {
        for (how, transfer) in [
            ("write", Write),
            ("staged", Staged),
            ("mixed", if odd { Staged } else { Write }),
        ] {
            let cfg = rdcoll::CollConfig {
                bcast_algorithm: rdcoll::BcastAlgorithm::from_name(name).expect("known name"),
                bcast_block: Some(64 << 10),
                bcast_transfer: Some(transfer),
                cluster: Some(format!("c{}", world.rank() / 2)),
                ..rdcoll::CollConfig::default()
            };
            let c = world
                .with_collectives_config(cfg)
                .map_err(|e| e.to_string())?;
            every_root_and_size(&c, &[0, 1, 65_536, 100_000, 1 << 20])
                .map_err(|e| format!("{name}, {how}: {e}"))?;
        }
    }
    Ok(())
}

/// The shared-staging broadcast forced for every size past the counter blocks' limit, with
/// `chunk`-byte chunks: every root and size, then broadcasts of mixed sizes from rotating
/// roots, so that each root's slots are reused many times between other roots' broadcasts.
pub fn shared_staging(world: &Comm, chunk: usize) -> Result<(), String> {
    let cfg = rdcoll::CollConfig {
        bcast_algorithm: rdcoll::BcastAlgorithm::Shared,
        bcast_chunk: Some(chunk),
        ..rdcoll::CollConfig::default()
    };
    let c = world
        .with_collectives_config(cfg)
        .map_err(|e| e.to_string())?;
    let sizes = [0, 1, chunk - 1, chunk, chunk + 1, 100_000, 1 << 20];
    every_root_and_size(&c, &sizes).map_err(|e| format!("shared, {chunk}-byte chunks: {e}"))?;
    let n = c.size();
    for round in 0..200 {
        let root = (round as u32 * 5 + round as u32 / 7) % n;
        let len = [40_000, 9000, 3 * chunk + 5, 100, 0][round % 5];
        one(&c, len, root, round, &format!("shared, broadcast {round}"))?;
    }
    Ok(())
}

/// Ranks that do not share memory (tcp) refuse the shared-staging broadcast when the
/// communicator is made, rather than fail inside a broadcast.
pub fn shared_refused(world: &Comm) -> Result<(), String> {
    let cfg = rdcoll::CollConfig {
        bcast_algorithm: rdcoll::BcastAlgorithm::Shared,
        ..rdcoll::CollConfig::default()
    };
    match world.with_collectives_config(cfg) {
        Err(rdcoll::Error::InvalidArgument(_)) => Ok(()),
        Err(e) => Err(format!("the shared broadcast over tcp: {e}")),
        Ok(_) => Err("the shared broadcast was accepted over tcp".into()),
    }
}

/// One 64 MiB broadcast from the last rank.
pub fn huge(world: &Comm) -> Result<(), String> {
    let root = world.size() - 1;
    one(world, 64 << 20, root, 3, "64 MiB")
}

/// The last rank dies: the survivors' broadcasts fail (with the failed rank, or with the
/// communicator broken by a failure elsewhere) within a few attempts, none hangs, and once a
/// broadcast has failed every later one fails too.
pub fn peer_death(world: &Comm) -> Result<(), String> {
    let n = world.size();
    // A first broadcast sets everything up while everyone is alive.
    one(world, 10, 0, 0, "before the death")?;
    if world.rank() == n - 1 {
        std::process::abort();
    }
    let failed = |r: &rdcoll::Result<()>| {
        matches!(
            r,
            Err(rdcoll::Error::Transport(
                rdcoll::TransportError::PeerFailed(_)
            )) | Err(rdcoll::Error::CommunicatorBroken(_))
        )
    };
    for attempt in 0..200 {
        let len = if attempt % 2 == 0 { 100 } else { 200_000 };
        let mut buf = vec![0u8; len];
        let r = world.bcast(&mut buf, 0);
        if failed(&r) {
            let mut b = [0u8; 4];
            let again = world.bcast(&mut b, 0);
            return match again {
                Err(rdcoll::Error::CommunicatorBroken(_)) => Ok(()),
                other => Err(format!("after a failed broadcast the next gave {other:?}")),
            };
        }
        if let Err(e) = r {
            return Err(format!(
                "a broadcast with rank {} dead failed with {e}",
                n - 1
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(format!(
        "200 broadcasts never noticed that rank {} died",
        n - 1
    ))
}

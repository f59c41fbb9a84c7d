//! The receiver-initiated multicast (`Comm::multicast`, Robber and MOB, paper 003) as a user
//! calls it: every rank ends with the root's bytes exactly, for clusters of several shapes,
//! every root, lengths that are not a whole number of pieces; a rank that dies mid-run is an
//! error on every survivor, never a hang.

use rdcoll::{CollConfig, Comm, Multicast};

/// The root's byte `i` in round `round`.
fn byte(root: u32, round: usize, i: usize) -> u8 {
    (i as u32)
        .wrapping_mul(31)
        .wrapping_add(root * 7 + round as u32 * 13) as u8
}

/// Rank `r`'s cluster when the ranks are cut into clusters of `sizes` (in rank order, then
/// dealt round-robin when `interleave`, so that a cluster's ranks are not neighbours).
pub fn cluster_of(r: usize, sizes: &[usize], interleave: bool) -> usize {
    let n: usize = sizes.iter().sum();
    let slot = if interleave { (r * 7) % n } else { r };
    let mut end = 0;
    for (c, &s) in sizes.iter().enumerate() {
        end += s;
        if slot < end {
            return c;
        }
    }
    sizes.len() - 1
}

/// A communicator whose collectives see clusters of `sizes` and cut messages into `piece`-byte
/// pieces.
pub fn clustered(
    world: &Comm,
    sizes: &[usize],
    interleave: bool,
    piece: usize,
) -> Result<Comm, String> {
    let cfg = CollConfig {
        cluster: Some(format!(
            "c{}",
            cluster_of(world.rank() as usize, sizes, interleave)
        )),
        multicast_piece: Some(piece),
        ..CollConfig::default()
    };
    world
        .with_collectives_config(cfg)
        .map_err(|e| e.to_string())
}

/// Robber and MOB from every root (or the first `roots`), over `lens`.
pub fn every_root(comm: &Comm, lens: &[usize], roots: usize) -> Result<(), String> {
    let n = comm.size();
    for (round, &len) in lens.iter().enumerate() {
        for root in (0..n).take(roots) {
            for how in [Multicast::Robber, Multicast::Mob] {
                let mut buf: Vec<u8> = if comm.rank() == root {
                    (0..len).map(|i| byte(root, round, i)).collect()
                } else {
                    vec![0xEE; len]
                };
                comm.multicast(&mut buf, root, how)
                    .map_err(|e| format!("{how:?} of {len} bytes from {root}: {e}"))?;
                if let Some(i) = (0..len).find(|&i| buf[i] != byte(root, round, i)) {
                    return Err(format!(
                        "{how:?} of {len} bytes from {root}: byte {i} is {:#x}, not {:#x}",
                        buf[i],
                        byte(root, round, i)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Cluster shapes that fit `n` ranks (2-6 clusters of 1-6 ranks).
pub fn shapes(n: usize) -> Vec<Vec<usize>> {
    let all: [&[usize]; 8] = [
        &[1, 1],
        &[2, 1],
        &[1, 2, 1],
        &[3, 2],
        &[2, 2, 2],
        &[1, 3, 2],
        &[1, 1, 1, 1, 1, 1],
        &[6, 1, 5],
    ];
    all.iter()
        .filter(|s| s.iter().sum::<usize>() == n)
        .map(|s| s.to_vec())
        .collect()
}

/// Every shape of this job's size, clusters in rank order and interleaved, every root,
/// lengths around the piece (64 KiB) and not a whole number of pieces.
pub fn shapes_and_roots(world: &Comm) -> Result<(), String> {
    for sizes in shapes(world.size() as usize) {
        for interleave in [false, true] {
            let comm = clustered(world, &sizes, interleave, 64 << 10)?;
            every_root(&comm, &[0, 1, 65_536, 300_001], usize::MAX)
                .map_err(|e| format!("clusters {sizes:?} (interleaved: {interleave}): {e}"))?;
        }
    }
    Ok(())
}

/// The last rank dies while a long multicast is under way: every survivor's multicast fails
/// (the dead rank, or a survivor that gave up on it), and the communicator's next collective
/// says it is broken.
pub fn node_death(world: &Comm) -> Result<(), String> {
    let n = world.size() as usize;
    let comm = clustered(world, &[n / 2, n - n / 2], true, 4 << 10)?;
    // Everything set up while everyone is alive.
    let mut warm = vec![1u8; 100_000];
    comm.multicast(&mut warm, 0, Multicast::Robber)
        .map_err(|e| e.to_string())?;
    if world.rank() as usize == n - 1 {
        std::thread::spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(30));
            std::process::abort();
        });
    }
    for _ in 0..1000 {
        let mut buf = vec![0u8; 8 << 20];
        match comm.multicast(&mut buf, 0, Multicast::Robber) {
            Ok(()) => continue,
            Err(rdcoll::Error::Transport(rdcoll::TransportError::PeerFailed(_)))
            | Err(rdcoll::Error::CommunicatorBroken(_)) => {
                let mut b = [0u8; 4];
                return match comm.bcast(&mut b, 0) {
                    Err(rdcoll::Error::CommunicatorBroken(_)) => Ok(()),
                    other => Err(format!(
                        "after a failed multicast the next bcast gave {other:?}"
                    )),
                };
            }
            Err(e) => {
                return Err(format!(
                    "a multicast with rank {} dead failed with {e}",
                    n - 1
                ))
            }
        }
    }
    Err(format!(
        "1000 multicasts never noticed that rank {} died",
        n - 1
    ))
}

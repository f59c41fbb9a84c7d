//! Barrier cases run on every rank of a job across processes. Each returns `Err` with what
//! went wrong instead of panicking, so that a process-based run can report it.

use std::path::Path;

use rdcoll::Comm;

/// Writes `round` as this rank's arrival record in `dir` (a rename, so readers never see a
/// half-written file).
fn arrive(dir: &Path, rank: u32, round: usize) -> Result<(), String> {
    let tmp = dir.join(format!("rank-{rank}.tmp"));
    let fin = dir.join(format!("rank-{rank}"));
    std::fs::write(&tmp, round.to_string()).map_err(|e| format!("writing {tmp:?}: {e}"))?;
    std::fs::rename(&tmp, &fin).map_err(|e| format!("renaming to {fin:?}: {e}"))
}

/// The last round `rank` recorded in `dir` (0 before its first).
fn arrived(dir: &Path, rank: u32) -> Result<usize, String> {
    match std::fs::read_to_string(dir.join(format!("rank-{rank}"))) {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|e| format!("rank {rank}'s record {s:?}: {e}")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(format!("reading rank {rank}'s record: {e}")),
    }
}

/// `rounds` barriers, ranks arriving in a different order each round: after each, every
/// rank's record (written before it entered) shows that round.
pub fn nobody_leaves_early(world: &Comm, dir: &Path, rounds: usize) -> Result<(), String> {
    let (me, n) = (world.rank(), world.size());
    for round in 1..=rounds {
        // A different rank is last to arrive in each round.
        if (round as u32) % n == me {
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
        arrive(dir, me, round)?;
        world.barrier().map_err(|e| format!("round {round}: {e}"))?;
        for peer in 0..n {
            let seen = arrived(dir, peer)?;
            if seen < round {
                return Err(format!(
                    "left barrier {round} while rank {peer} had only entered barrier {seen}"
                ));
            }
        }
    }
    Ok(())
}

/// The last rank dies after a first barrier; the others' barriers must fail (the rank that
/// died, or the communicator broken by another rank's failure), not hang, and the next one
/// must report the communicator broken.
pub fn peer_death(world: &Comm) -> Result<(), String> {
    let n = world.size();
    world
        .barrier()
        .map_err(|e| format!("before the death: {e}"))?;
    if world.rank() == n - 1 {
        std::process::abort();
    }
    match world.barrier() {
        Err(rdcoll::Error::Transport(rdcoll::TransportError::PeerFailed(_)))
        | Err(rdcoll::Error::CommunicatorBroken(_)) => {}
        other => return Err(format!("a barrier with rank {} dead gave {other:?}", n - 1)),
    }
    match world.barrier() {
        Err(rdcoll::Error::CommunicatorBroken(_)) => Ok(()),
        other => Err(format!("after a failed barrier the next gave {other:?}")),
    }
}

/// CPU time the calling thread has used.
fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill in.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The last rank enters a barrier, then a broadcast it roots, 400 ms after the others: their
/// waits that long must sleep, not spin (each waiting thread may use at most half of the wall
/// time on its CPU). Not a timing target: a long wait must give its core back, as ranks may
/// outnumber cores.
pub fn long_waits_sleep(world: &Comm) -> Result<(), String> {
    let pause = std::time::Duration::from_millis(400);
    let last = world.size() - 1;
    for what in ["barrier", "bcast"] {
        if world.rank() == last {
            std::thread::sleep(pause);
        }
        let (wall, cpu) = (std::time::Instant::now(), thread_cpu_time());
        let mut buf = [world.rank() as u8; 8];
        match what {
            "barrier" => world.barrier(),
            _ => world.bcast(&mut buf, last),
        }
        .map_err(|e| format!("{what}: {e}"))?;
        let (wall, cpu) = (wall.elapsed(), thread_cpu_time() - cpu);
        if what == "bcast" && buf != [last as u8; 8] {
            return Err(format!("bcast delivered {buf:?}"));
        }
        if world.rank() != last && cpu >= wall / 2 {
            return Err(format!(
                "{what}: the waiting thread used {cpu:?} of CPU in {wall:?}: it spun"
            ));
        }
    }
    Ok(())
}

/// Rank 1 uses up its registered regions before the communicator's first collective, whose
/// one-time set-up then cannot allocate there: every rank's barrier fails (none waits for
/// rank 1 forever), and once rank 1 frees them, a new communicator works.
pub fn set_up_failure_on_one_rank(world: &Comm) -> Result<(), String> {
    let comm = world.dup().map_err(|e| e.to_string())?;
    let mut hoard = Vec::new();
    if world.rank() == 1 {
        while let Ok(r) = world.fabric().alloc_region(0) {
            hoard.push(r);
            if hoard.len() > 1 << 21 {
                return Err("regions never ran out".into());
            }
        }
    }
    match comm.barrier() {
        Ok(()) => return Err("the barrier succeeded although rank 1 could not set it up".into()),
        Err(e) if !e.to_string().contains("regions") && world.rank() != 1 => {
            return Err(format!("the error does not name the cause: {e}"))
        }
        Err(_) => {}
    }
    drop(hoard);
    let again = world.dup().map_err(|e| e.to_string())?;
    again
        .barrier()
        .map_err(|e| format!("a new communicator: {e}"))
}

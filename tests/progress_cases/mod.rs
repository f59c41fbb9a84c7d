//! MPI's progress rule: a receive that a rank has posted completes whatever that rank then
//! waits in (a collective, a probe, a wait on another request), and in thread mode while it
//! computes without calling the library. Rank 0 sends with a blocking send (a rendezvous one
//! cannot finish until the receiver fetches it) and then joins the same wait; every other rank
//! only joins the wait. Eager and rendezvous sizes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdcoll::{Comm, Error, Op};

pub type Outcome = Result<(), String>;

/// Message sizes: one eager, one rendezvous (many chunks).
pub const SIZES: [usize; 2] = [100, 100_000];

/// Tag of the posted receive's message.
const DATA: u32 = 5;
/// Tag of the message that ends the receiver's probe or wait.
const RELEASE: u32 = 6;

/// What the receiving rank waits in after posting its receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitIn {
    Barrier,
    /// A small broadcast (one counter block) from rank 0.
    Bcast,
    /// A broadcast of 1 MiB from rank 0 (the RDMC path).
    LargeBcast,
    Allreduce,
    /// A blocking probe for a message rank 0 sends after its data.
    Probe,
    /// A wait on another receive, whose message rank 0 sends after its data.
    OtherRequest,
    /// Computing without calling the library (thread mode only: the agent must carry it).
    Compute,
}

/// Every wait that the library itself runs (all but [`WaitIn::Compute`]).
pub const LIBRARY_WAITS: [WaitIn; 6] = [
    WaitIn::Barrier,
    WaitIn::Bcast,
    WaitIn::LargeBcast,
    WaitIn::Allreduce,
    WaitIn::Probe,
    WaitIn::OtherRequest,
];

fn e(err: Error) -> String {
    err.to_string()
}

fn payload(len: usize, round: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + round * 7 + 1) as u8).collect()
}

/// The collective part of a wait, as every rank calls it.
fn collective(world: &Comm, wait: WaitIn) -> Outcome {
    match wait {
        WaitIn::Barrier => world.barrier().map_err(e),
        WaitIn::Bcast | WaitIn::LargeBcast => {
            let n = if wait == WaitIn::Bcast { 16 } else { 1 << 17 };
            let mut v: Vec<u64> = if world.rank() == 0 {
                (0..n as u64).collect()
            } else {
                vec![0; n]
            };
            world.bcast(&mut v, 0).map_err(e)?;
            if v.iter().enumerate().any(|(i, &x)| x != i as u64) {
                return Err(format!("{wait:?}: wrong data"));
            }
            Ok(())
        }
        WaitIn::Allreduce => {
            let mut out = [0u64; 4];
            world
                .allreduce(&[world.rank() as u64 + 1; 4], &mut out, Op::Sum)
                .map_err(e)?;
            let n = world.size() as u64;
            if out != [n * (n + 1) / 2; 4] {
                return Err(format!("allreduce: got {out:?}"));
            }
            Ok(())
        }
        WaitIn::Probe | WaitIn::OtherRequest | WaitIn::Compute => Ok(()),
    }
}

/// Rank 1 posts a receive of `len` bytes from rank 0 and then waits in `wait`; rank 0 sends
/// them with a blocking send, then takes its part in the wait. Checks the data and, for
/// [`WaitIn::Compute`], that rank 0's send finished while rank 1 was still computing.
pub fn posted_receive_completes_during(world: &Comm, wait: WaitIn, len: usize) -> Outcome {
    let round = len + wait as usize;
    let data = payload(len, round);
    let what = format!("{len} B during {wait:?}");
    match world.rank() {
        0 => {
            world.send(&data, 1, DATA).map_err(e)?;
            let sent_at = now_us();
            match wait {
                WaitIn::Probe | WaitIn::OtherRequest => {
                    world.send(&[1u8], 1, RELEASE).map_err(e)?
                }
                WaitIn::Compute => world.send(&[sent_at], 1, RELEASE).map_err(e)?,
                _ => {}
            }
            collective(world, wait)
        }
        1 => {
            let mut buf = vec![0u8; len];
            let computed_until = world.scope(|s| -> Result<Option<u128>, String> {
                let r = s.irecv(&mut buf, 0, DATA).map_err(e)?;
                let mut computed_until = None;
                match wait {
                    WaitIn::Probe => {
                        let st = world.probe(0, RELEASE).map_err(e)?;
                        if st.tag != RELEASE {
                            return Err(format!("{what}: probe found tag {}", st.tag));
                        }
                        world.recv(&mut [0u8], 0, RELEASE).map_err(e)?;
                    }
                    WaitIn::OtherRequest => {
                        let mut one = [0u8];
                        // A scope inside: its request is waited for before `r`.
                        world.scope(|s2| {
                            s2.irecv(&mut one, 0, RELEASE)
                                .and_then(|q| q.wait())
                                .map_err(e)
                        })?;
                    }
                    WaitIn::Compute => {
                        compute_for(Duration::from_secs(2));
                        computed_until = Some(now_us());
                    }
                    _ => collective(world, wait)?,
                }
                r.wait().map_err(e)?;
                Ok(computed_until)
            })?;
            if buf != data {
                return Err(format!("{what}: wrong data"));
            }
            if wait == WaitIn::Compute {
                let mut sent_at = [0u128];
                world.recv(&mut sent_at, 0, RELEASE).map_err(e)?;
                let until = computed_until.unwrap_or_default();
                if sent_at[0] > until {
                    return Err(format!(
                        "{what}: rank 0's send finished {} us after rank 1 stopped computing \
                         (nothing moved the receive meanwhile)",
                        sent_at[0] - until
                    ));
                }
            }
            Ok(())
        }
        _ => collective(world, wait),
    }
}

/// Every wait the library runs, at every size, then a barrier so that rounds do not mix.
pub fn library_waits(world: &Comm) -> Outcome {
    for wait in LIBRARY_WAITS {
        for len in SIZES {
            posted_receive_completes_during(world, wait, len)?;
            world.barrier().map_err(e)?;
        }
    }
    Ok(())
}

/// [`WaitIn::Compute`] at every size (thread mode).
pub fn while_computing(world: &Comm) -> Outcome {
    for len in SIZES {
        posted_receive_completes_during(world, WaitIn::Compute, len)?;
        world.barrier().map_err(e)?;
    }
    Ok(())
}

/// Microseconds since the epoch (ranks of one host share this clock).
fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// Busy work that calls nothing of the library for `d`.
fn compute_for(d: Duration) {
    let start = std::time::Instant::now();
    let mut x = 1u64;
    while start.elapsed() < d {
        for _ in 0..10_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
    }
}

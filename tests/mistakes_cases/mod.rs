//! The mistakes MPI programs make in collectives, on a communicator with
//! `RDCOLL_CHECK_COLLECTIVES` on: ranks that pass different lengths, roots, operations,
//! element types or counts, or call different collectives. Each must give `Mismatch` on every
//! rank, with the same message everywhere saying what differed, leave every buffer as it was
//! (nothing moves before the ranks agree; a reduction's receive buffer may hold this rank's
//! own contribution, copied there before the reduction starts), and leave the communicator
//! usable and in step.

use rdcoll::{CollConfig, Comm, Error, Multicast, Op};

/// What a mistake gave on this rank: the call's result and whether this rank's buffers are as
/// they were.
type Outcome = (rdcoll::Result<()>, bool);

/// One mistake: `odd` is true on the one rank that calls differently.
type Case = fn(&Comm, bool) -> Outcome;

/// Each mistake, the words its message must hold, and the case.
pub const MISTAKES: &[(&str, &str, Case)] = &[
    ("bcast of 10 and 20 u64", "another length", |c, odd| {
        let mut b = vec![c.rank() as u64; if odd { 20 } else { 10 }];
        let r = c.bcast(&mut b, 0);
        (r, b.iter().all(|&x| x == c.rank() as u64))
    }),
    (
        "bcast of 1 MiB and 1 MiB + 8",
        "another length",
        |c, odd| {
            let mut b = vec![c.rank() as u8; (1 << 20) + if odd { 8 } else { 0 }];
            let r = c.bcast(&mut b, 0);
            (r, b.iter().all(|&x| x == c.rank() as u8))
        },
    ),
    (
        "bcast of 800 B from different roots",
        "another root",
        |c, odd| {
            let mut b = vec![c.rank() as u8; 800];
            let r = c.bcast(&mut b, if odd { 1 } else { 0 });
            (r, b.iter().all(|&x| x == c.rank() as u8))
        },
    ),
    (
        "bcast of 8 MiB from different roots",
        "another root",
        |c, odd| {
            let mut b = vec![c.rank() as u8; 8 << 20];
            let r = c.bcast(&mut b, if odd { 1 } else { 0 });
            (r, b.iter().all(|&x| x == c.rank() as u8))
        },
    ),
    (
        "multicast of 4096 and 4000 bytes",
        "another length",
        |c, odd| {
            let mut b = vec![c.rank() as u8; if odd { 4000 } else { 4096 }];
            let r = c.multicast(&mut b, 0, Multicast::Robber);
            (r, b.iter().all(|&x| x == c.rank() as u8))
        },
    ),
    (
        "allreduce with Sum and Max",
        "another reduction",
        |c, odd| {
            let mut out = [-1.0f64; 3];
            let op = if odd { Op::Max } else { Op::Sum };
            let r = c.allreduce(&[1.5f64; 3], &mut out, op);
            (r, out == [-1.0; 3] || out == [1.5; 3])
        },
    ),
    ("allreduce of f64 and i64", "another reduction", |c, odd| {
        if odd {
            let mut out = [-1i64; 3];
            let r = c.allreduce(&[1i64; 3], &mut out, Op::Sum);
            (r, out == [-1; 3] || out == [1; 3])
        } else {
            let mut out = [-1.0f64; 3];
            let r = c.allreduce(&[1.0f64; 3], &mut out, Op::Sum);
            (r, out == [-1.0; 3] || out == [1.0; 3])
        }
    }),
    ("allreduce of 4 and 5 u32", "another length", |c, odd| {
        let len = if odd { 5 } else { 4 };
        let mut out = vec![7u32; len];
        let r = c.allreduce(&vec![1u32; len], &mut out, Op::Sum);
        (
            r,
            out.iter().all(|&x| x == 7) || out.iter().all(|&x| x == 1),
        )
    }),
    ("reduce to different roots", "another root", |c, odd| {
        let mut out = [7u32; 4];
        let r = c.reduce(&[1u32; 4], &mut out, Op::Sum, if odd { 1 } else { 0 });
        (r, out == [7; 4] || out == [1; 4])
    }),
    (
        "barrier where the others bcast",
        "another collective",
        |c, odd| {
            if odd {
                (c.barrier(), true)
            } else {
                let mut b = [c.rank() as u8; 8];
                let r = c.bcast(&mut b, 0);
                (r, b == [c.rank() as u8; 8])
            }
        },
    ),
    (
        "allreduce where the others allgather",
        "another collective",
        |c, odd| {
            let mut out = vec![7u32; c.size() as usize];
            let r = if odd {
                c.allreduce(&vec![1u32; c.size() as usize], &mut out, Op::Sum)
            } else {
                c.allgather(&[1u32], &mut out)
            };
            (
                r,
                out.iter().all(|&x| x == 7) || (odd && out.iter().all(|&x| x == 1)),
            )
        },
    ),
    ("gather of 2 and 3 elements", "another length", |c, odd| {
        let mut all = vec![7u16; 2 * c.size() as usize];
        let r = c.gather(&vec![1u16; if odd { 3 } else { 2 }], &mut all, 0);
        (r, all.iter().all(|&x| x == 7))
    }),
    (
        "scatter into 2 and 3 elements",
        "another length",
        |c, odd| {
            let mut mine = vec![7u16; if odd { 3 } else { 2 }];
            let r = c.scatter(&vec![1u16; 2 * c.size() as usize], &mut mine, 0);
            (r, mine.iter().all(|&x| x == 7))
        },
    ),
    ("allgatherv with other counts", "other counts", |c, odd| {
        let n = c.size() as usize;
        let mut counts = vec![1usize; n];
        if odd {
            counts[n - 1] = 2;
        }
        let mine = vec![1u32; counts[c.rank() as usize]];
        let mut all = vec![7u32; counts.iter().sum()];
        let r = c.allgatherv(&mine, &mut all, &counts);
        (r, all.iter().all(|&x| x == 7))
    }),
    (
        "gatherv whose root counts another block",
        "counts",
        |c, odd| {
            let n = c.size() as usize;
            let counts = vec![2usize; n];
            let mine = vec![1u32; if odd { 3 } else { 2 }];
            let mut all = vec![7u32; 2 * n];
            let r = c.gatherv(&mine, &mut all, &counts, 0);
            (r, all.iter().all(|&x| x == 7))
        },
    ),
    ("scan with Sum and Prod", "another reduction", |c, odd| {
        let mut out = [7u32; 2];
        let r = c.scan(&[3u32; 2], &mut out, if odd { Op::Prod } else { Op::Sum });
        (r, out == [7; 2])
    }),
    (
        "alltoall of blocks of 1 and 2",
        "another length",
        |c, odd| {
            let len = c.size() * if odd { 2 } else { 1 };
            let mut out = vec![7u8; len as usize];
            let r = c.alltoall(&vec![1u8; len as usize], &mut out);
            (r, out.iter().all(|&x| x == 7))
        },
    ),
    (
        "reduce_scatter_block of blocks of 1 and 2",
        "another length",
        |c, odd| {
            let block = if odd { 2 } else { 1 };
            let mut out = vec![7u32; block];
            let r =
                c.reduce_scatter_block(&vec![1u32; block * (c.size() as usize)], &mut out, Op::Sum);
            (r, out.iter().all(|&x| x == 7))
        },
    ),
];

/// A duplicate of `world` whose collectives compare their arguments.
pub fn checked(world: &Comm) -> Result<Comm, String> {
    let cfg = CollConfig {
        check_collectives: true,
        ..CollConfig::from_env().map_err(|e| e.to_string())?
    };
    world
        .with_collectives_config(cfg)
        .map_err(|e| e.to_string())
}

/// Every mistake, with the last rank as the odd one out: `Mismatch` on every rank with the
/// same message, buffers untouched, then an allreduce that must be right.
pub fn every_mistake(world: &Comm) -> Result<(), String> {
    let comm = checked(world)?;
    let n = comm.size() as usize;
    if n < 2 {
        return Ok(());
    }
    let odd = comm.rank() as usize == n - 1;
    for (name, words, case) in MISTAKES {
        let (result, untouched) = case(&comm, odd);
        let why = match result {
            Err(Error::Mismatch(why)) => why,
            other => return Err(format!("{name}: {other:?}, not Mismatch")),
        };
        if !why.contains(words) {
            return Err(format!(
                "{name}: the message {why:?} does not say {words:?}"
            ));
        }
        if !untouched {
            return Err(format!("{name}: a buffer changed"));
        }
        // The same message on every rank, and the communicator still in step.
        let hash = why.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        let mut hashes = vec![0u64; n];
        comm.allgather(&[hash], &mut hashes)
            .map_err(|e| format!("after {name}: allgather: {e}"))?;
        if hashes.iter().any(|&h| h != hash) {
            return Err(format!(
                "{name}: the ranks' messages differ (this rank: {why:?})"
            ));
        }
        let mut sum = [0u64];
        comm.allreduce(&[comm.rank() as u64], &mut sum, Op::Sum)
            .map_err(|e| format!("after {name}: allreduce: {e}"))?;
        if sum[0] != (n * (n - 1) / 2) as u64 {
            return Err(format!("after {name}: allreduce gave {}", sum[0]));
        }
    }
    refusals(&comm, odd)?;
    // Correct calls still pass the check.
    let mut b = vec![0u8; 1000];
    if comm.rank() == 0 {
        b.fill(9);
    }
    comm.bcast(&mut b, 0).map_err(|e| e.to_string())?;
    if b.iter().any(|&x| x != 9) {
        return Err("a correct bcast after the mistakes went wrong".into());
    }
    Ok(())
}

/// A rank that refuses its own arguments (an operation not defined for its element type, a
/// receive buffer of another length than its send buffer, blocking and nonblocking) gets its
/// own `InvalidArgument`, and
/// the others `Mismatch` naming it instead of waiting for it; then the communicator works.
fn refusals(comm: &Comm, odd: bool) -> Result<(), String> {
    let n = comm.size() as usize;
    let expect = |what: &str, r: rdcoll::Result<()>| -> Result<(), String> {
        match (odd, r) {
            (true, Err(Error::InvalidArgument(_))) => Ok(()),
            (false, Err(Error::Mismatch(why))) if why.contains("refused") => Ok(()),
            (_, other) => Err(format!(
                "{what}: {other:?} on a rank that is {}",
                match odd {
                    true => "the one refusing",
                    false => "waiting for it",
                }
            )),
        }
    };
    let r = if odd {
        comm.allreduce(&[1.0f32], &mut [0.0f32], Op::BitAnd)
    } else {
        comm.allreduce(&[1i32], &mut [0i32], Op::BitAnd)
    };
    expect("allreduce with BitAnd on f32 on one rank", r)?;
    let mut out = vec![0u8; if odd { n + 1 } else { n }];
    expect(
        "alltoall with a receive buffer of another length on one rank",
        comm.alltoall(&vec![1u8; n], &mut out),
    )?;
    // Nonblocking: the refusal is queued behind what the rank started before.
    let (send, mut recv) = ([1u32; 4], [0u32; 4]);
    let r = comm.scope(|s| {
        let first = s.ibarrier()?;
        let sent = if odd { &send[..3] } else { &send[..] };
        let refused = s
            .iallreduce(sent, &mut recv, Op::Sum)
            .and_then(|r| r.wait());
        first.wait()?;
        refused
    });
    expect(
        "iallreduce with a receive buffer of another length on one rank",
        r,
    )?;
    let mut sum = [0u64];
    comm.allreduce(&[1u64], &mut sum, Op::Sum)
        .map_err(|e| format!("after the refusals: {e}"))?;
    if sum[0] != n as u64 {
        return Err(format!("after the refusals: allreduce gave {}", sum[0]));
    }
    Ok(())
}

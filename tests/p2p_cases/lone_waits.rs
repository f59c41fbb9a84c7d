//! Waits for a receive that is the only one posted: the engine withdraws it and takes its
//! message as a blocking receive would (the fast path). These cases check that matching,
//! order, truncation and rendezvous sizes stay what a posted receive gives, also while another
//! thread of the rank posts receives of its own (which turns the waiting one back into a
//! posted receive, older than theirs).

use std::sync::Mutex;

use rdcoll::{Comm, Source, Tag};

use super::{e, pattern, Outcome};

/// Message lengths in turn: eager, near the eager limit, rendezvous, empty.
const LENGTHS: [usize; 4] = [8, 3000, 100 << 10, 0];

fn len_of(seq: u32) -> usize {
    LENGTHS[seq as usize % LENGTHS.len()]
}

/// Rank 0 sends `n` messages to rank 1 (tag `seq % 3`, lengths from [`LENGTHS`]); rank 1 takes
/// each with an `irecv` posted alone and waited for, from rank 0 or any source, with the tag
/// or any tag, and every fifth into a buffer too short for it: each gets the next message in
/// order, whole or truncated (with its true length), and nothing else. Every seventh message
/// is sent only after the receiver says it posted its receive (the wait finds nothing yet);
/// the others are there before or during the wait.
pub fn lone_posted_receives_in_order(world: &Comm, n: u32) -> Outcome {
    let ctl = world.dup().map_err(e)?;
    let late = |seq: u32| seq % 7 == 3;
    match world.rank() {
        0 => {
            for seq in 0..n {
                if late(seq) {
                    ctl.recv(&mut [0u8; 0], 1, seq).map_err(e)?;
                }
                world
                    .send(&pattern(0, seq, len_of(seq)), 1, seq % 3)
                    .map_err(e)?;
            }
            Ok(())
        }
        1 => {
            let mut buf = vec![0u8; 100 << 10];
            for seq in 0..n {
                let len = len_of(seq);
                let short = seq % 5 == 4 && len > 0;
                let cap = if short { len / 2 } else { buf.len() };
                let source = if seq % 2 == 0 {
                    Source::Rank(0)
                } else {
                    Source::Any
                };
                let tag = if seq % 4 == 1 {
                    Tag::Any
                } else {
                    Tag::Value(seq % 3)
                };
                let got = world.scope(|s| {
                    let r = s.irecv(&mut buf[..cap], source, tag)?;
                    if late(seq) {
                        ctl.send(&[0u8; 0], 0, seq)?;
                    }
                    r.wait()
                });
                match got {
                    Ok(st) if !short => {
                        if st.source != 0 || st.tag != seq % 3 || st.len != len {
                            return Err(format!("message {seq}: status {st:?}"));
                        }
                        if buf[..len] != pattern(0, seq, len)[..] {
                            return Err(format!("message {seq}: wrong bytes"));
                        }
                    }
                    Err(rdcoll::Error::Truncated { len: true_len, .. }) if short => {
                        if true_len != len {
                            return Err(format!("message {seq}: truncated, said {true_len}"));
                        }
                        if buf[..cap] != pattern(0, seq, len)[..cap] {
                            return Err(format!("message {seq}: wrong bytes before the cut"));
                        }
                    }
                    other => return Err(format!("message {seq} (short {short}): {other:?}")),
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Rank 0 sends `n` messages (tag 5, lengths from [`LENGTHS`], the sequence number in the
/// first bytes of the longer ones) to rank 1, where two threads each take `n / 2` of them
/// with `irecv` + `wait`, so that one thread's lone wait is often turned back into a posted
/// receive by the other's `irecv`. The receives are posted in turn (a lock spans taking a
/// ticket and posting), and MPI's order says that the k-th receive posted takes the k-th
/// message sent, whichever thread posted it and whenever the message came: each checks that,
/// and that the message is whole.
pub fn lone_waits_beside_another_thread(world: &Comm, n: u32) -> Outcome {
    match world.rank() {
        0 => {
            for seq in 0..n {
                let mut msg = pattern(0, seq, len_of(seq).max(4));
                msg[..4].copy_from_slice(&seq.to_le_bytes());
                world.send(&msg, 1, 5).map_err(e)?;
                if seq % 4 == 0 {
                    // Now and then both threads' receives are posted before the next comes.
                    let t = std::time::Instant::now();
                    while t.elapsed() < std::time::Duration::from_micros(20) {
                        std::hint::spin_loop();
                    }
                }
            }
            Ok(())
        }
        1 => {
            let taken = Mutex::new(Vec::new());
            let tickets = Mutex::new(0u32);
            std::thread::scope(|s| -> Outcome {
                let receivers: Vec<_> = (0..2)
                    .map(|_| {
                        s.spawn(|| -> Result<Vec<u32>, String> {
                            let mut buf = vec![0u8; 100 << 10];
                            let mut mine = Vec::new();
                            for _ in 0..n / 2 {
                                let (ticket, st) = world.scope(|sc| {
                                    // Posted in ticket order (the lock spans taking the
                                    // ticket and posting).
                                    let mut next = tickets.lock().unwrap();
                                    let ticket = *next;
                                    *next += 1;
                                    let r = sc.irecv(&mut buf[..], 0, 5).map_err(e)?;
                                    drop(next);
                                    r.wait().map(|st| (ticket, st)).map_err(e)
                                })?;
                                let seq = u32::from_le_bytes(buf[..4].try_into().unwrap());
                                if seq != ticket {
                                    return Err(format!(
                                        "the receive posted {ticket}th took message {seq}"
                                    ));
                                }
                                let want = pattern(0, seq, len_of(seq).max(4));
                                if st.len != want.len() || buf[4..st.len] != want[4..] {
                                    return Err(format!("message {seq}: wrong length or bytes"));
                                }
                                if mine.last().is_some_and(|&last| last >= seq) {
                                    return Err(format!("message {seq} came after {mine:?}"));
                                }
                                mine.push(seq);
                            }
                            Ok(mine)
                        })
                    })
                    .collect();
                for r in receivers {
                    let mine = r.join().map_err(|_| "a receiving thread panicked")??;
                    taken.lock().unwrap().extend(mine);
                }
                Ok(())
            })?;
            let mut all = taken.into_inner().unwrap();
            all.sort_unstable();
            if all != (0..n / 2 * 2).collect::<Vec<_>>() {
                return Err(format!("taken {} messages, not each once", all.len()));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

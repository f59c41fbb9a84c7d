//! Resource limits that must recycle or fail cleanly, never wedge a rank: communicator
//! context ids (dup / drop far past the 16,383 ids of whole-job duplicates).

use rdcoll::{Comm, Error};

pub type Outcome = Result<(), String>;

fn e(err: Error) -> String {
    err.to_string()
}

/// `pairs` dup / drop pairs while one duplicated communicator stays alive throughout, and a
/// few more live at a time that ranks drop in different orders; every 1,000th communicator
/// carries a message round the ring, which must arrive on that communicator only.
pub fn dup_and_drop(world: &Comm, pairs: usize) -> Outcome {
    let (me, n) = (world.rank(), world.size());
    let keeper = world.dup().map_err(e)?;
    let mut live: Vec<Comm> = Vec::new();
    for i in 0..pairs {
        let c = world.dup().map_err(|err| format!("dup {i}: {err}"))?;
        if i % 1000 == 0 {
            let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
            let mut got = [0u64];
            c.sendrecv(&[i as u64], next, 3, &mut got, prev, 3)
                .map_err(|err| format!("dup {i}: {err}"))?;
            if got[0] != i as u64 {
                return Err(format!("dup {i}: got message {} on it", got[0]));
            }
        }
        live.push(c);
        if live.len() == 4 {
            // Each rank drops its four in its own order.
            let first = (me as usize + i) % 4;
            live.remove(first);
            live.clear();
        }
    }
    // The communicator kept throughout still works, and its id was never handed out again.
    let mut sum = [0u64];
    keeper
        .allreduce(&[1u64], &mut sum, rdcoll::Op::Sum)
        .map_err(e)?;
    if sum[0] != n as u64 {
        return Err(format!("the kept communicator's allreduce gave {}", sum[0]));
    }
    Ok(())
}

/// Rank 0 starts `count` rendezvous sends of the same `len`-byte buffer to rank 1 (tags
/// alternating between two), then meets rank 1 at a barrier; only then does rank 1 receive
/// them. Every send must start (a nonblocking send never waits for its receiver, and one
/// registration serves them all) and every message arrive intact, in order per tag.
pub fn many_sends_received_late(world: &Comm, count: usize, len: usize) -> Outcome {
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    match world.rank() {
        0 => world.scope(|s| {
            let mut reqs = Vec::with_capacity(count);
            for i in 0..count {
                let r = s
                    .isend(&data, 1, (i % 2) as u32)
                    .map_err(|err| format!("isend {i}: {err}"))?;
                reqs.push(r);
            }
            world.barrier().map_err(e)?;
            rdcoll::wait_all(reqs).map_err(e)?;
            Ok(())
        }),
        1 => {
            world.barrier().map_err(e)?;
            let mut buf = vec![0u8; len];
            for i in 0..count {
                buf.fill(0);
                let st = world
                    .recv(&mut buf, 0, (i % 2) as u32)
                    .map_err(|err| format!("recv {i}: {err}"))?;
                if st.len != len || buf != data {
                    return Err(format!("message {i}: wrong length or data"));
                }
            }
            Ok(())
        }
        _ => world.barrier().map_err(e),
    }
}

/// Past the 65,535 rendezvous sends with one envelope that one peer can have in flight, the
/// next isend fails at once with a resource error (it does not wait for the receiver), and
/// the job goes on: the receiver takes the ones that started and a later send works.
pub fn same_envelope_past_the_nonces(world: &Comm, len: usize) -> Outcome {
    const STARTED: usize = 65_535;
    let data = vec![7u8; len];
    match world.rank() {
        0 => world.scope(|s| {
            let mut reqs = Vec::with_capacity(STARTED);
            for i in 0..STARTED {
                reqs.push(
                    s.isend(&data, 1, 9)
                        .map_err(|err| format!("isend {i}: {err}"))?,
                );
            }
            match s.isend(&data, 1, 9) {
                Err(Error::Offload(rdcoll::OffloadError::NoSpace { .. })) => {}
                Err(other) => return Err(format!("send {STARTED}: {other}")),
                Ok(_) => return Err(format!("send {STARTED} started past the nonces")),
            }
            world.barrier().map_err(e)?;
            rdcoll::wait_all(reqs).map_err(e)?;
            world.send(&data, 1, 9).map_err(e)
        }),
        1 => {
            world.barrier().map_err(e)?;
            let mut buf = vec![0u8; len];
            for i in 0..=STARTED {
                world
                    .recv(&mut buf, 0, 9)
                    .map_err(|err| format!("recv {i}: {err}"))?;
            }
            Ok(())
        }
        _ => world.barrier().map_err(e),
    }
}

/// Rank 1 floods rank 0 with `count` small messages and then waits for a reply, while rank 0
/// first computes for longer than the peer timeout without calling the library and then works
/// through the backlog. Neither may declare the other dead: liveness is the transport's own
/// business (its I/O thread beats while it reads a flood), not the host thread's.
pub fn flood_then_reply(world: &Comm, count: usize) -> Outcome {
    let msg = [7u8; 64];
    match world.rank() {
        0 => {
            let until = std::time::Instant::now() + std::time::Duration::from_millis(1500);
            while std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
            let mut buf = [0u8; 64];
            for i in 0..count {
                world
                    .recv(&mut buf, 1, 1)
                    .map_err(|err| format!("recv {i}: {err}"))?;
            }
            world.send(&[1u8], 1, 2).map_err(e)
        }
        1 => {
            for i in 0..count {
                world
                    .send(&msg, 0, 1)
                    .map_err(|err| format!("send {i}: {err}"))?;
            }
            world.recv(&mut [0u8], 0, 2).map(drop).map_err(e)
        }
        _ => Ok(()),
    }
}

/// The flood's tag, the later message's, and the reply's.
const FLOOD: u32 = 1;
const LAST: u32 = 3;
const REPLY: u32 = 2;

/// Rank 1: `count` 64-byte messages, each carrying its index, then one with tag `LAST`.
fn send_flood(world: &Comm, count: u64) -> Outcome {
    for i in 0..count {
        let msg = [i, 0, 0, 0, 0, 0, 0, !i];
        world
            .send(&msg, 0, FLOOD)
            .map_err(|err| format!("send {i}: {err}"))?;
    }
    world.send(&[0u64; 8], 0, LAST).map_err(e)
}

/// Rank 0: the `count` flood messages, which must come in the order they were sent.
fn receive_flood_in_order(world: &Comm, count: u64) -> Outcome {
    let mut buf = [0u64; 8];
    for i in 0..count {
        world
            .recv(&mut buf, 1, FLOOD)
            .map_err(|err| format!("recv {i}: {err}"))?;
        if buf[0] != i || buf[7] != !i {
            return Err(format!("receive {i} got message {}", buf[0]));
        }
    }
    Ok(())
}

/// Rank 1 sends `count` small messages and then one with another tag, which rank 0 receives
/// first, so that all `count` wait as unexpected messages; rank 0 then receives them in the
/// order they were sent (each carries its index) and replies. Unexpected messages are limited
/// by memory (about 250 bytes each for 64-byte messages, see docs/RELIABILITY.md).
pub fn flood_received_at_the_end(world: &Comm, count: u64) -> Outcome {
    match world.rank() {
        0 => {
            let mut buf = [0u64; 8];
            world.recv(&mut buf, 1, LAST).map_err(e)?;
            receive_flood_in_order(world, count)?;
            world.send(&[1u8], 1, REPLY).map_err(e)
        }
        1 => {
            send_flood(world, count)?;
            world.recv(&mut [0u8], 0, REPLY).map(drop).map_err(e)
        }
        _ => Ok(()),
    }
}

/// Peak resident memory of this process so far (`VmHWM`), in bytes.
fn peak_resident() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|err| err.to_string())?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .ok_or("no VmHWM in /proc/self/status")?;
    Ok(kib << 10)
}

/// [`flood_received_at_the_end`] run with a small `RDCOLL_UNEXPECTED_MAX` (`limit` bytes,
/// set by the caller) far below what `count` queued messages need: rank 1's sends past its
/// share go by rendezvous and the first of them waits, so rank 0's probe (from any source: in
/// a job of two, rank 1 is blocked), its receive of the later message and its wait for a
/// receive of it posted alone fail at once
/// with `SenderBlocked` naming rank 1 (not a hang, not an unbounded queue); rank 0 then receives everything in order, the later message last, and neither
/// rank's peak memory grows by more than `limit` plus 64 MiB.
pub fn flood_past_the_limit(world: &Comm, count: u64, limit: u64) -> Outcome {
    let before = peak_resident()?;
    match world.rank() {
        0 => {
            let mut buf = [0u64; 8];
            later_message_is_blocked(world)?;
            receive_flood_in_order(world, count)?;
            world.recv(&mut buf, 1, LAST).map_err(e)?;
            world.send(&[1u8], 1, REPLY).map_err(e)?;
        }
        1 => {
            send_flood(world, count)?;
            world.recv(&mut [0u8], 0, REPLY).map(drop).map_err(e)?;
        }
        _ => {}
    }
    let grown = peak_resident()?.saturating_sub(before);
    if grown > limit + (64 << 20) {
        return Err(format!(
            "peak memory grew by {grown} bytes with RDCOLL_UNEXPECTED_MAX = {limit}"
        ));
    }
    Ok(())
}

/// Rank 0's probe (from any source: in a job of two, rank 1 is blocked), receive, and wait
/// for a receive posted alone of rank 1's `LAST` message, which rank 1 sends after messages
/// it is blocked on: each fails at once with `SenderBlocked` naming rank 1.
fn later_message_is_blocked(world: &Comm) -> Outcome {
    let mut buf = [0u64; 8];
    let blocked = |r: Result<rdcoll::Status, Error>, what: &str| match r {
        Err(Error::Offload(rdcoll::OffloadError::SenderBlocked { sender: 1, .. })) => Ok(()),
        other => Err(format!("{what} of the later message first: {other:?}")),
    };
    blocked(world.probe(rdcoll::Source::Any, LAST), "probe")?;
    blocked(world.recv(&mut buf, 1, LAST), "receive")?;
    // A lone posted receive's wait too (it polls as a blocking receive would).
    let waited = world.scope(|s| s.irecv(&mut buf, 1, LAST)?.wait());
    blocked(waited, "wait for a posted receive")
}

/// [`flood_past_the_limit`] with rank 1's messages sent by `isend` and then waited for
/// together (`wait_all`): the sends past its share go by rendezvous with nothing in their
/// headers, and the first that rank 1 waits for tells rank 0 so (a notice), so rank 0's
/// receives of the later message fail with `SenderBlocked` instead of waiting for ever; then
/// everything arrives in order.
pub fn isend_flood_past_the_limit(world: &Comm, count: u64) -> Outcome {
    match world.rank() {
        0 => {
            later_message_is_blocked(world)?;
            receive_flood_in_order(world, count)?;
            world.recv(&mut [0u64; 8], 1, LAST).map_err(e)?;
            world.send(&[1u8], 1, REPLY).map_err(e)
        }
        1 => {
            let msgs: Vec<[u64; 8]> = (0..count).map(|i| [i, 0, 0, 0, 0, 0, 0, !i]).collect();
            world
                .scope(|s| {
                    let reqs = msgs
                        .iter()
                        .map(|m| s.isend(&m[..], 0, FLOOD))
                        .collect::<Result<Vec<_>, _>>()?;
                    rdcoll::wait_all(reqs)
                })
                .map_err(e)?;
            world.send(&[0u64; 8], 0, LAST).map_err(e)?;
            world.recv(&mut [0u8], 0, REPLY).map(drop).map_err(e)
        }
        _ => Ok(()),
    }
}

/// Rank 1 floods rank 0 with 16 KiB messages for `secs` seconds, which rank 0 receives as
/// they come (its host thread reading the socket, tcp's `read_now`); rank 2 meanwhile waits for
/// one message rank 0 sends only at the end, so all it hears of rank 0 for those seconds are
/// the heartbeats of rank 0's I/O thread. Nobody may be declared dead (with a peer timeout
/// shorter than the flood, that thread must keep beating while the host thread reads).
pub fn read_through_a_flood(world: &Comm, secs: f64) -> Outcome {
    let msg = vec![3u8; 16 << 10];
    let done = u32::MAX - 1;
    match world.rank() {
        0 => {
            let mut buf = vec![0u8; 16 << 10];
            let mut n = 0u64;
            loop {
                let st = world.recv(&mut buf, 1, rdcoll::Tag::Any).map_err(e)?;
                if st.tag == done {
                    break;
                }
                n += 1;
            }
            world.send(&n.to_le_bytes(), 2, 5).map_err(e)
        }
        1 => {
            let until = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
            while std::time::Instant::now() < until {
                world.send(&msg, 0, 1).map_err(e)?;
            }
            world.send(&[0u8], 0, done).map_err(e)
        }
        2 => {
            let mut n = [0u8; 8];
            world.recv(&mut n, 0, 5).map_err(e)?;
            if u64::from_le_bytes(n) == 0 {
                return Err("rank 0 received nothing of the flood".into());
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Rank 1 plays a process that can reach the job's store port but holds no secret (or a wrong
/// one): the store answers it nothing; and a connection to rank 0's tcp endpoint (its address
/// leaked by an insider: rank 1 reads it with the real secret) with a made-up handshake gets
/// no answer. The job goes on. Needs rdcoll-run's store (`RDCOLL_STORE`, `RDCOLL_JOB_SECRET`).
pub fn intruder_learns_nothing(world: &Comm) -> Outcome {
    use rdcoll::transport::bootstrap::{job_secret, Store, TcpStore};
    use std::io::{Read, Write};
    use std::time::Duration;
    if world.rank() == 1 {
        let addr = std::env::var("RDCOLL_STORE").map_err(|_| "RDCOLL_STORE is not set")?;
        let t = Duration::from_secs(2);
        let stranger = TcpStore::connect(&addr, t).map_err(|e| e.to_string())?;
        for key in ["job/secret", "job/id", "tcp/0"] {
            if let Ok(v) = stranger.get(key, Duration::from_millis(200)) {
                return Err(format!("the store told a stranger {key} = {v:?}"));
            }
        }
        if TcpStore::connect_secured(&addr, t, &[0x5a; 16]).is_ok() {
            return Err("the store accepted a wrong secret".into());
        }
        let secret = job_secret()
            .map_err(|e| e.to_string())?
            .ok_or("no job secret")?;
        let insider = TcpStore::connect_secured(&addr, t, &secret).map_err(|e| e.to_string())?;
        if world.backend() == "tcp" {
            let rank0 = insider.get("tcp/0", t).map_err(|e| e.to_string())?;
            let rank0 = String::from_utf8_lossy(&rank0).to_string();
            if let Ok(mut s) = std::net::TcpStream::connect(&rank0) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let mut forged = vec![1u8, 0, 0, 0];
                forged.extend_from_slice(&[0x5a; 16]);
                let _ = s.write_all(&forged);
                let mut ack = [0u8; 4];
                if s.read_exact(&mut ack).is_ok() {
                    return Err(format!("rank 0 answered a forged handshake: {ack:?}"));
                }
            }
        }
    }
    world.barrier().map_err(e)?;
    let mut got = [0u64];
    world
        .allreduce(&[1u64], &mut got, rdcoll::Op::Sum)
        .map_err(e)?;
    if got[0] != world.size() as u64 {
        return Err(format!("after the intruder, allreduce gave {}", got[0]));
    }
    Ok(())
}

/// Rank 1 sends `count` messages of `len` bytes (far more than a shm ring holds) with blocking
/// sends to rank 0, which does not call the library for the first `pause` and then receives
/// them all in order. Once the ring to rank 0 is full, rank 1's sends wait for room (making
/// progress) instead of copying each message into a queue of their own: rank 1's peak memory
/// grows by less than `bound` bytes, where queueing them would take `count * len`.
pub fn blocking_sends_wait_for_room(
    world: &Comm,
    count: usize,
    len: usize,
    pause: std::time::Duration,
    bound: u64,
) -> Outcome {
    const TAG: u32 = 0x5106;
    match world.rank() {
        0 => {
            std::thread::sleep(pause);
            let mut buf = vec![0u8; len];
            for i in 0..count {
                world.recv(&mut buf, 1, TAG).map_err(e)?;
                if buf.iter().any(|&b| b != i as u8) {
                    return Err(format!("message {i} came with another message's bytes"));
                }
            }
            Ok(())
        }
        1 => {
            let before = peak_resident()?;
            let mut buf = vec![0u8; len];
            for i in 0..count {
                buf.fill(i as u8);
                world.send(&buf, 0, TAG).map_err(e)?;
            }
            let grown = peak_resident()?.saturating_sub(before);
            if grown > bound {
                return Err(format!(
                    "peak memory grew by {grown} bytes sending {} bytes to a peer that was \
                     not receiving",
                    count * len
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `rounds` rounds in which rank 0 sends `per_round` 1 KiB messages (blocking sends in even
/// rounds, `isend` and `wait` in odd ones) and then a marker, and rank 1 receives the marker
/// first (so the messages wait as unexpected ones), then the messages in order, and replies.
/// Run with an `RDCOLL_UNEXPECTED_MAX` that a couple of rounds exceed: rank 0, which only
/// sends and receives by blocking calls, must
/// still take the credit rank 1 returns, or its sends run out of credit, wait for their
/// receives, and rank 1's receive of the marker fails with `SenderBlocked`.
pub fn credit_comes_back_to_a_sender_that_only_sends(
    world: &Comm,
    rounds: usize,
    per_round: usize,
) -> Outcome {
    const MSG: u32 = 0x5107;
    const MARK: u32 = 0x5108;
    const DONE: u32 = 0x5109;
    let mut buf = vec![0u8; 1024];
    for round in 0..rounds {
        match world.rank() {
            0 => {
                for i in 0..per_round {
                    buf.fill((round + i) as u8);
                    if round % 2 == 0 {
                        world.send(&buf, 1, MSG).map_err(e)?;
                    } else {
                        // Odd rounds by `isend`, which takes credit on its own path.
                        world
                            .scope(|s| s.isend(&buf, 1, MSG)?.wait().map(drop))
                            .map_err(e)?;
                    }
                }
                world.send(&[1u8], 1, MARK).map_err(e)?;
                world.recv(&mut [0u8], 1, DONE).map_err(e)?;
            }
            1 => {
                world
                    .recv(&mut [0u8], 0, MARK)
                    .map_err(|err| format!("round {round}: the marker: {err}"))?;
                for i in 0..per_round {
                    world.recv(&mut buf, 0, MSG).map_err(e)?;
                    if buf.iter().any(|&b| b != (round + i) as u8) {
                        return Err(format!("round {round}: message {i} has other bytes"));
                    }
                }
                world.send(&[1u8], 0, DONE).map_err(e)?;
            }
            _ => {}
        }
    }
    Ok(())
}

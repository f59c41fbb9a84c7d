//! Point-to-point cases that run on every rank of a job (2-8 ranks): each returns a
//! description of the first thing that went wrong.

use rdcoll::{Comm, Error, Source, Tag};

pub type Outcome = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

fn e(err: Error) -> String {
    err.to_string()
}

/// Bytes of message `seq` from `src`, `len` long.
pub fn pattern(src: u32, seq: u32, len: usize) -> Vec<u8> {
    // Odd and distinct for every (src, seq): xorshift needs a nonzero seed.
    let mut x = (src as u64) << 33 | (2 * seq as u64 + 1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Both ranks of the pair pass this point before either goes on.
fn sync(ctl: &Comm, peer: u32) -> Outcome {
    ctl.sendrecv(&[0u8; 0], peer, 0, &mut [0u8; 0], peer, 0)
        .map(drop)
        .map_err(e)
}

/// The seven receive orderings of paper 002, Table 1, for two sends with tags t1, t2: both
/// unexpected (sent before any receive is posted) and expected (receives posted first), with
/// eager and with rendezvous messages. Ranks 0 (sender) and 1 (receiver) take part.
pub fn table_one(world: &Comm) -> Outcome {
    const T1: u32 = 11;
    const T2: u32 = 22;
    let ctl = world.dup().map_err(e)?;
    let rank = world.rank();
    if rank > 1 {
        return Ok(());
    }
    let any = None;
    // (first receive's tag, second's; which send each must match: 1, 2, or 0 for none)
    let cases: [(Option<u32>, Option<u32>, u8, u8); 7] = [
        (Some(T1), Some(T2), 1, 2),
        (Some(T2), Some(T1), 2, 1),
        (any, any, 1, 2),
        (any, Some(T2), 1, 2),
        (any, Some(T1), 1, 0),
        (Some(T1), any, 1, 2),
        (Some(T2), any, 2, 1),
    ];
    for len in [64usize, 300 << 10] {
        for expected in [false, true] {
            for (n, &(r1, r2, m1, m2)) in cases.iter().enumerate() {
                let what = format!("case {} (len {len}, expected {expected})", n + 1);
                if rank == 0 {
                    if expected {
                        sync(&ctl, 1)?;
                    }
                    let a = pattern(0, 1, len);
                    let b = pattern(0, 2, len);
                    world.scope(|s| -> Outcome {
                        let w1 = s.isend(&a, 1, T1).map_err(e)?;
                        let w2 = s.isend(&b, 1, T2).map_err(e)?;
                        w1.wait().map_err(e)?;
                        w2.wait().map_err(e)?;
                        Ok(())
                    })?;
                    sync(&ctl, 1)?;
                } else {
                    let tag = |t: Option<u32>| t.map_or(Tag::Any, Tag::Value);
                    let mut b1 = vec![0u8; len];
                    let mut b2 = vec![0u8; len];
                    world.scope(|s| -> Outcome {
                        if !expected {
                            // Both messages are queued before any receive is posted.
                            world.probe(0, T2).map_err(e)?;
                        }
                        let q1 = s.irecv(&mut b1, 0, tag(r1)).map_err(e)?;
                        let mut q2 = s.irecv(&mut b2, 0, tag(r2)).map_err(e)?;
                        if expected {
                            sync(&ctl, 0)?;
                        }
                        let st1 = q1.wait().map_err(e)?;
                        ensure!(
                            st1.tag == [0, T1, T2][m1 as usize],
                            "{what}: r1 got tag {}",
                            st1.tag
                        );
                        if m2 == 0 {
                            // The second receive (t1) must not take s2 (t2).
                            world.probe(0, T2).map_err(e)?;
                            ensure!(q2.test().map_err(e)?.is_none(), "{what}: r2 matched t2");
                            ensure!(q2.cancel().map_err(e)?, "{what}: r2 could not be cancelled");
                            ensure!(q2.wait().map_err(e)?.cancelled, "{what}: not cancelled");
                        } else {
                            let st2 = q2.wait().map_err(e)?;
                            ensure!(
                                st2.tag == [0, T1, T2][m2 as usize],
                                "{what}: r2 got tag {}",
                                st2.tag
                            );
                        }
                        Ok(())
                    })?;
                    ensure!(
                        b1 == pattern(0, m1 as u32, len),
                        "{what}: r1's bytes are wrong"
                    );
                    if m2 == 0 {
                        let mut rest = vec![0u8; len];
                        let st = world.recv(&mut rest, 0, T2).map_err(e)?;
                        ensure!(
                            st.len == len && rest == pattern(0, 2, len),
                            "{what}: s2 lost"
                        );
                    } else {
                        ensure!(
                            b2 == pattern(0, m2 as u32, len),
                            "{what}: r2's bytes are wrong"
                        );
                    }
                    sync(&ctl, 0)?;
                }
            }
        }
    }
    Ok(())
}

/// Many rendezvous sends with identical envelopes in flight at once: each receive gets its
/// own message, in order.
pub fn identical_envelopes(world: &Comm) -> Outcome {
    const N: u32 = 24;
    const LEN: usize = 200 << 10;
    match world.rank() {
        0 => {
            let data: Vec<Vec<u8>> = (0..N).map(|i| pattern(0, i, LEN + i as usize)).collect();
            world.scope(|s| -> Outcome {
                let reqs = data
                    .iter()
                    .map(|d| s.isend(d, 1, 5))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(e)?;
                rdcoll::wait_all(reqs).map_err(e)?;
                Ok(())
            })
        }
        1 => {
            let mut bufs = vec![vec![0u8; LEN + N as usize]; N as usize];
            let statuses = world.scope(|s| -> Result<Vec<rdcoll::Status>, String> {
                let reqs = bufs
                    .iter_mut()
                    .map(|b| s.irecv(b, 0, 5))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(e)?;
                rdcoll::wait_all(reqs).map_err(e)
            })?;
            for (i, (st, b)) in statuses.iter().zip(&bufs).enumerate() {
                let want = pattern(0, i as u32, LEN + i);
                ensure!(st.len == want.len(), "message {i}: length {}", st.len);
                ensure!(
                    b[..st.len] == want[..],
                    "message {i}: wrong bytes (overtaken?)"
                );
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Truncation (eager and rendezvous): the receive fails with the true length, writes nothing
/// past its buffer, and the next message matches normally. Zero-length messages too. The
/// sender waits a little before each message, so that the receive is usually already waiting
/// (the blocking receive's fast path takes the header, for a rendezvous its first chunk),
/// whereas the second message of each pair is usually queued before its receive.
pub fn truncation_and_zero_length(world: &Comm) -> Outcome {
    match world.rank() {
        0 => {
            for len in [100usize, 1 << 20, 100 << 10] {
                std::thread::sleep(std::time::Duration::from_millis(20));
                world.send(&pattern(0, 7, len), 1, 7).map_err(e)?;
                world.send(&pattern(0, 8, 50), 1, 8).map_err(e)?;
            }
            world.send::<u8>(&[], 1, 9).map_err(e)?;
            world.send::<u8>(&[], 1, 10).map_err(e)?;
            Ok(())
        }
        1 => {
            // The last: a buffer shorter than the rendezvous's first chunk.
            for (len, cap) in [(100usize, 10usize), (1 << 20, 100 << 10), (100 << 10, 500)] {
                let mut buf = vec![0xEEu8; cap + 64];
                match world.recv(&mut buf[..cap], 0, Tag::Any) {
                    Err(Error::Truncated {
                        len: l,
                        capacity,
                        sender: 0,
                        tag: 7,
                    }) => {
                        ensure!(l == len && capacity == cap, "truncated: {l}/{capacity}");
                    }
                    other => return Err(format!("{len} into {cap}: {other:?}")),
                }
                ensure!(
                    buf[..cap] == pattern(0, 7, len)[..cap],
                    "{len}: prefix wrong"
                );
                ensure!(
                    buf[cap..].iter().all(|&b| b == 0xEE),
                    "{len}: wrote past the buffer"
                );
                let mut next = [0u8; 50];
                let st = world.recv(&mut next, 0, Tag::Any).map_err(e)?;
                ensure!(
                    st.tag == 8 && next[..] == pattern(0, 8, 50)[..],
                    "next message lost"
                );
            }
            let st = world.recv::<u8>(&mut [], 0, 9).map_err(e)?;
            ensure!(st.len == 0 && st.source == 0, "zero into empty: {st:?}");
            let mut big = [1u8; 16];
            let st = world.recv(&mut big, Source::Any, Tag::Any).map_err(e)?;
            ensure!(
                st.len == 0 && st.tag == 10 && big == [1u8; 16],
                "zero into 16: {st:?}"
            );
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Sends to oneself, eager and rendezvous, with probes.
pub fn self_send_and_probe(world: &Comm) -> Outcome {
    let me = world.rank();
    for len in [0usize, 33, 3 << 20] {
        let data = pattern(me, 3, len);
        let mut got = vec![0u8; len];
        world.scope(|s| -> Outcome {
            let w = s.isend(&data, me, 3).map_err(e)?;
            let st = world.probe(me, 3).map_err(e)?;
            ensure!(
                st.len == len && st.source == me && st.tag == 3,
                "probe: {st:?}"
            );
            let r = s.irecv(&mut got, me, Tag::Any).map_err(e)?;
            r.wait().map_err(e)?;
            w.wait().map_err(e)?;
            Ok(())
        })?;
        ensure!(got == data, "self-send of {len} bytes");
    }
    ensure!(
        world.iprobe(me, 3).map_err(e)?.is_none(),
        "nothing left to probe"
    );
    Ok(())
}

/// `count` messages from every other rank to rank 0, sizes 0 to 8 MiB (mostly small), taken
/// with a mix of wildcard and specific receives; checked byte for byte and for order.
pub fn random_traffic(world: &Comm, count: u32) -> Outcome {
    let size = world.size();
    let senders = size - 1;
    let per_sender = count / senders;
    let len_of = |src: u32, seq: u32| -> usize {
        let h = (pattern(src, seq, 8)
            .iter()
            .fold(0u64, |a, &b| a << 8 | b as u64)) as usize;
        match h % 1000 {
            0..=899 => h % 4097,
            900..=989 => h % (256 << 10),
            _ => h % (8 << 20) + 1,
        }
    };
    let rank = world.rank();
    if rank != 0 {
        for seq in 0..per_sender {
            let len = len_of(rank, seq);
            world.send(&pattern(rank, seq, len), 0, seq).map_err(e)?;
        }
        return Ok(());
    }
    let mut next = vec![0u32; size as usize];
    let mut buf = vec![0u8; 8 << 20];
    for i in 0..per_sender * senders {
        // Every fourth receive names a sender that still has messages to send.
        let pick = 1 + (i % senders);
        let (src, tag) = if i % 4 == 1 && next[pick as usize] < per_sender {
            (Source::Rank(pick), Tag::Any)
        } else if i % 4 == 3 && next[pick as usize] < per_sender {
            (Source::Rank(pick), Tag::Value(next[pick as usize]))
        } else {
            (Source::Any, Tag::Any)
        };
        let st = world.recv(&mut buf, src, tag).map_err(e)?;
        let want_seq = next[st.source as usize];
        ensure!(
            st.tag == want_seq,
            "from {}: seq {} before {want_seq}",
            st.source,
            st.tag
        );
        let len = len_of(st.source, st.tag);
        ensure!(
            st.len == len,
            "from {} seq {}: {} bytes, not {len}",
            st.source,
            st.tag,
            st.len
        );
        ensure!(
            buf[..len] == pattern(st.source, st.tag, len)[..],
            "from {} seq {}: wrong bytes",
            st.source,
            st.tag
        );
        next[st.source as usize] += 1;
    }
    Ok(())
}

/// Rank 0 sends `len` bytes to rank 1, whose deposits are slowed by `RDCOLL_SINK_RATE`; then
/// rank 0 reports the most bytes that were ever in flight between them (transport counters):
/// the gets rank 1 had toward rank 0 (direct gets; rank 0's NI serves no get, so its put
/// counters stay at zero, which is checked).
pub fn slow_receiver(world: &Comm, len: usize) -> Result<Option<u64>, String> {
    let counters = |peer| {
        world
            .fabric()
            .counters(peer)
            .ok_or("this transport keeps no counters")
    };
    match world.rank() {
        0 => {
            world.send(&pattern(0, 1, len), 1, 1).map_err(e)?;
            // The receiver says when it has checked every byte, and its peak of gets.
            let mut gets_peak = [0u64];
            world.recv(&mut gets_peak, 1, 2).map_err(e)?;
            let c = counters(1)?;
            ensure!(c.put_bytes_in_flight == 0, "puts still in flight: {c:?}");
            // Over tcp every rendezvous get is a direct get: the receiver reads the sender's
            // published buffer itself (its get bytes), rank 0's NI serves nothing.
            ensure!(
                gets_peak[0] > 0 && c.put_bytes_in_flight_peak == 0,
                "the rest of the message did not travel by direct gets: receiver's get peak {}, \
                 sender's put peak {}",
                gets_peak[0],
                c.put_bytes_in_flight_peak
            );
            Ok(Some(c.put_bytes_in_flight_peak.max(gets_peak[0])))
        }
        1 => {
            let mut buf = vec![0u8; len];
            let st = world.recv(&mut buf, 0, 1).map_err(e)?;
            ensure!(
                st.len == len && buf == pattern(0, 1, len),
                "slow receive corrupted"
            );
            let c = counters(0)?;
            ensure!(c.get_bytes_in_flight == 0, "gets still in flight: {c:?}");
            world.send(&[c.get_bytes_in_flight_peak], 0, 2).map_err(e)?;
            Ok(None)
        }
        _ => Ok(None),
    }
}

/// Rank 1 sends its last words and is killed; rank 0 gets the last words, then `PeerFailed`
/// from every operation that involves rank 1, and no hang.
pub fn peer_death(world: &Comm) -> Outcome {
    let dead = |r: Result<rdcoll::Status, Error>, what: &str| -> Outcome {
        match r {
            Err(Error::Transport(rdcoll::TransportError::PeerFailed(1))) => Ok(()),
            other => Err(format!("{what}: {other:?}, not PeerFailed(1)")),
        }
    };
    match world.rank() {
        0 => {
            world.send(b"ready", 1, 0).map_err(e)?;
            let mut last = [0u8; 5];
            world.recv(&mut last, 1, 1).map_err(e)?;
            ensure!(&last == b"bye!!", "last words garbled");
            dead(world.recv(&mut last, 1, 2), "recv from the dead rank")?;
            dead(world.probe(1, Tag::Any), "probe of the dead rank")?;
            dead(
                world.recv(&mut last, Source::Any, Tag::Any),
                "recv from any (all dead)",
            )?;
            let big = vec![7u8; 1 << 20];
            let sent = world.send(&big, 1, 3);
            ensure!(
                matches!(
                    sent,
                    Err(Error::Transport(rdcoll::TransportError::PeerFailed(1)))
                ),
                "rendezvous send to the dead rank: {sent:?}"
            );
            Ok(())
        }
        1 => {
            let mut go = [0u8; 5];
            world.recv(&mut go, 0, 0).map_err(e)?;
            world.send(b"bye!!", 0, 1).map_err(e)?;
            std::process::abort();
        }
        _ => Ok(()),
    }
}

/// A blocking receive on one thread while another thread of the same rank drives progress
/// (waiting for a rendezvous send): whichever thread polls the fabric, the receive gets the
/// first of two messages with its envelope and the thread that receives next gets the
/// second, never the other way round, and the receive never waits for a message that the
/// other thread's progress queued as unexpected. Ranks 0 (two threads) and 1 take part.
pub fn receive_beside_a_progressing_thread(world: &Comm) -> Outcome {
    const ROUNDS: u32 = 30;
    const BIG: usize = 256 << 10;
    let pause = std::time::Duration::from_millis(3);
    match world.rank() {
        0 => {
            let big = pattern(0, 0, BIG);
            for round in 0..ROUNDS {
                let first = std::thread::scope(|s| -> Result<Vec<u8>, String> {
                    let receiver = s.spawn(|| -> Result<Vec<u8>, String> {
                        let mut buf = [0u8; 8];
                        world.recv(&mut buf, 1, 5).map_err(e)?;
                        Ok(buf.to_vec())
                    });
                    std::thread::sleep(pause);
                    // This wait polls the fabric too, while both tag-5 messages arrive.
                    world.send(&big, 1, 9).map_err(e)?;
                    receiver
                        .join()
                        .map_err(|_| "receiving thread panicked".to_string())?
                })?;
                let mut second = [0u8; 8];
                world.recv(&mut second, 1, 5).map_err(e)?;
                ensure!(
                    first[..] == pattern(1, 2 * round, 8)[..],
                    "round {round}: the blocked receive got {first:?}, not the first message"
                );
                ensure!(
                    second[..] == pattern(1, 2 * round + 1, 8)[..],
                    "round {round}: the next receive got {second:?}, not the second message"
                );
            }
            Ok(())
        }
        1 => {
            let mut big = vec![0u8; BIG];
            for round in 0..ROUNDS {
                std::thread::sleep(2 * pause);
                world.send(&pattern(1, 2 * round, 8), 0, 5).map_err(e)?;
                std::thread::sleep(pause);
                world.send(&pattern(1, 2 * round + 1, 8), 0, 5).map_err(e)?;
                world.recv(&mut big, 0, 9).map_err(e)?;
                ensure!(
                    big == pattern(0, 0, BIG),
                    "round {round}: wrong rendezvous bytes"
                );
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A rendezvous message and then an eager one with the same envelope, both waiting in the
/// fabric when a blocking receive starts: the receive gets the rendezvous message (the older)
/// and the next one the eager message. Ranks 0 (sender) and 1 take part.
pub fn rendezvous_then_eager_into_blocking_receives(world: &Comm) -> Outcome {
    const ROUNDS: u32 = 10;
    const LONG: usize = 300 << 10;
    let ctl = world.dup().map_err(e)?;
    for round in 0..ROUNDS {
        let long = pattern(0, 2 * round, LONG);
        let short = pattern(0, 2 * round + 1, 16);
        match world.rank() {
            0 => {
                world.scope(|s| -> Outcome {
                    let w = s.isend(&long, 1, 7).map_err(e)?;
                    world.send(&short, 1, 7).map_err(e)?;
                    w.wait().map_err(e)?;
                    Ok(())
                })?;
                sync(&ctl, 1)?;
            }
            1 => {
                // Nothing polls here meanwhile: both messages wait in the fabric.
                std::thread::sleep(std::time::Duration::from_millis(20));
                let mut buf = vec![0u8; LONG];
                let st = world.recv(&mut buf, 0, 7).map_err(e)?;
                ensure!(
                    st.len == LONG && buf == long,
                    "round {round}: the first receive got {} bytes, not the rendezvous message",
                    st.len
                );
                let st = world.recv(&mut buf, 0, 7).map_err(e)?;
                ensure!(
                    st.len == 16 && buf[..16] == short[..],
                    "round {round}: the second receive got {} bytes, not the eager message",
                    st.len
                );
                sync(&ctl, 0)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Forty nonblocking receives with mixed tags (a quarter `Tag::Any`) and buffer sizes (half
/// of them 300 bytes) and forty messages with mixed tags and sizes (every fifth a rendezvous),
/// with every receive posted before the first message is sent, with every message sent before
/// the first receive is posted, and receives first with short buffers only: each message lands
/// in the receive a reference model
/// picks (the first still-pending receive it matches, in post order), truncated where the
/// buffer is short; receives the model leaves without a message are cancelled, and messages it
/// leaves without a receive are received afterwards, in order. Ranks 0 and 1.
pub fn posted_receives_take_messages_in_order(world: &Comm) -> Outcome {
    const N: usize = 40;
    const BIG: usize = 100 << 10;
    let ctl = world.dup().map_err(e)?;
    let msg_tag = |i: usize| (i * 7 % 3) as u32 + 1;
    let msg_len = |i: usize| if i % 5 == 3 { BIG + i } else { i * 13 % 300 };
    let recv_tag = |j: usize| {
        if j % 4 == 0 {
            None
        } else {
            Some((j * 5 % 3) as u32 + 1)
        }
    };
    // Round 2 has only short buffers: every receive is queued (`light`), and each rendezvous
    // message meets one, which must take it (truncated) before any later message.
    let capacity = |round: u32, j: usize| {
        if round < 2 && j % 2 == 0 {
            BIG + N
        } else {
            300
        }
    };
    // The model: message i goes to the first pending receive that accepts its tag.
    let mut owner = vec![None; N];
    let mut taken = [false; N];
    for (i, slot) in owner.iter_mut().enumerate() {
        if let Some(j) =
            (0..N).find(|&j| !taken[j] && recv_tag(j).map_or(true, |t| t == msg_tag(i)))
        {
            taken[j] = true;
            *slot = Some(j);
        }
    }
    for (round, receives_first) in [(0u32, true), (1, false), (2, true)] {
        let data: Vec<Vec<u8>> = (0..N)
            .map(|i| pattern(0, round * 1000 + i as u32, msg_len(i)))
            .collect();
        match world.rank() {
            0 => {
                if receives_first {
                    sync(&ctl, 1)?;
                }
                world.scope(|s| -> Outcome {
                    let reqs = data
                        .iter()
                        .enumerate()
                        .map(|(i, d)| s.isend(d, 1, msg_tag(i)))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(e)?;
                    if !receives_first {
                        sync(&ctl, 1)?;
                    }
                    rdcoll::wait_all(reqs).map_err(e)?;
                    Ok(())
                })?;
                sync(&ctl, 1)?;
            }
            1 => {
                let mut bufs: Vec<Vec<u8>> =
                    (0..N).map(|j| vec![0u8; capacity(round, j)]).collect();
                if !receives_first {
                    sync(&ctl, 0)?;
                }
                let got = world.scope(|s| -> Result<Vec<Option<rdcoll::Status>>, String> {
                    let mut reqs = bufs
                        .iter_mut()
                        .enumerate()
                        .map(|(j, b)| s.irecv(b, 0, recv_tag(j).map_or(Tag::Any, Tag::Value)))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(e)?;
                    if receives_first {
                        sync(&ctl, 0)?;
                    }
                    let mut out = Vec::new();
                    for (j, r) in reqs.iter_mut().enumerate() {
                        if owner.contains(&Some(j)) {
                            continue;
                        }
                        ensure!(
                            r.cancel().map_err(e)?,
                            "round {round}: receive {j} not cancelled"
                        );
                    }
                    for (j, r) in reqs.into_iter().enumerate() {
                        let st = match r.wait() {
                            Ok(st) => st,
                            // Reported as the status it would have had; checked below.
                            Err(Error::Truncated {
                                sender,
                                tag,
                                len,
                                capacity: c,
                            }) => {
                                ensure!(
                                    c == capacity(round, j),
                                    "round {round}: receive {j}: capacity {c}"
                                );
                                rdcoll::Status {
                                    source: sender,
                                    tag,
                                    len,
                                    cancelled: false,
                                }
                            }
                            Err(other) => return Err(e(other)),
                        };
                        out.push((!st.cancelled).then_some(st));
                    }
                    Ok(out)
                })?;
                for (i, o) in owner.iter().enumerate() {
                    match o {
                        Some(j) => {
                            let st = got[*j].ok_or(format!("round {round}: receive {j} empty"))?;
                            ensure!(
                                st.tag == msg_tag(i) && st.len == msg_len(i),
                                "round {round}: receive {j} got tag {} len {}, not message {i}",
                                st.tag,
                                st.len
                            );
                            let n = st.len.min(capacity(round, *j));
                            ensure!(
                                bufs[*j][..n] == data[i][..n] || st.len > capacity(round, *j),
                                "round {round}: receive {j}: wrong bytes (not message {i})"
                            );
                        }
                        None => {
                            let mut rest = vec![0u8; BIG + N];
                            let st = world.recv(&mut rest, 0, msg_tag(i)).map_err(e)?;
                            ensure!(
                                st.len == msg_len(i) && rest[..st.len] == data[i][..],
                                "round {round}: message {i} (no receive in the model) lost"
                            );
                        }
                    }
                }
                for (j, g) in got.iter().enumerate() {
                    ensure!(
                        g.is_some() == owner.contains(&Some(j)),
                        "round {round}: receive {j} matched against the model"
                    );
                }
                sync(&ctl, 0)?;
            }
            _ => {}
        }
    }
    Ok(())
}

pub mod differential;
pub mod lone_waits;
pub mod windows;
pub use windows::{
    a_long_probe_sleeps, a_long_rendezvous_wait_sleeps, random_windows,
    receive_queued_after_unexpected,
};

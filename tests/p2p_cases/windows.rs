//! Windows of nonblocking receives with wildcards, against messages of which some are there
//! already (unexpected) and some still coming: every message is received once and whole, and
//! the receives that take one sender's messages take them in post order (MPI's non-overtaking
//! rule, which holds this simply because every receive here accepts any tag).
//!
//! Windows of small buffers are the engine's queued receives; windows of buffers above the
//! eager limit are match-list entries, and an `iprobe` now and then turns queued receives into
//! entries too, so the three meet in every order. A `test` part-way through posting a window
//! makes messages unexpected while receives are queued and more are still to be posted.

use rdcoll::{Comm, Source, Tag};

use super::{e, pattern, Outcome};

/// Longest message.
const MAX_LEN: usize = 4096;
/// A buffer above the eager limit (64 KiB by default): the receive becomes an entry.
const ENTRY_BUF: usize = 80 << 10;

/// Every rank but 0 sends `per_sender` messages (tag = sequence number) to rank 0, which takes
/// them in random windows of receives.
pub fn random_windows(world: &Comm, per_sender: u32) -> Outcome {
    let size = world.size();
    let rank = world.rank();
    let len_of = |src: u32, seq: u32| (src as usize * 7919 + seq as usize * 104_729) % MAX_LEN;
    if rank != 0 {
        for seq in 0..per_sender {
            if rank == 1 && seq % 50 == 49 {
                // Rank 1 is slow: a receive naming it stays queued while the others'
                // messages pile up as unexpected.
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
            let len = len_of(rank, seq);
            world.send(&pattern(rank, seq, len), 0, seq).map_err(e)?;
        }
        return Ok(());
    }
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next_random = move |below: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % below.max(1) as u64) as usize
    };
    let mut next = vec![0u32; size as usize];
    let remaining = |next: &[u32], s: usize| (per_sender - next[s]) as usize;
    let mut window_no = 0usize;
    loop {
        let total: usize = (1..size as usize).map(|s| remaining(&next, s)).sum();
        if total == 0 {
            return Ok(());
        }
        let w = 1 + next_random(64.min(total));
        let any = next_random(w + 1);
        // A receive naming sender `s` is added only while `s` keeps enough messages for it
        // even if every wildcard receive takes one of its messages: no window can hang.
        let mut named = vec![0usize; size as usize];
        let mut sources = vec![Source::Any; any];
        for _ in any..w {
            let s = 1 + next_random(size as usize - 1);
            if named[s] + any < remaining(&next, s) {
                named[s] += 1;
                sources.push(Source::Rank(s as u32));
            }
        }
        if sources.is_empty() {
            sources.push(Source::Any);
        }
        let w = sources.len();
        for i in (1..sources.len()).rev() {
            sources.swap(i, next_random(i + 1));
        }
        let cap = if window_no % 3 == 2 {
            ENTRY_BUF
        } else {
            MAX_LEN
        };
        let probe_at = (window_no % 4 == 1).then(|| next_random(w));
        // A progress pass part-way through posting: messages that match no receive posted yet
        // become unexpected while receives are queued, before the rest are posted.
        let test_at = next_random(w);
        let mut bufs = vec![vec![0u8; cap]; w];
        let statuses = world.scope(|sc| -> Result<Vec<rdcoll::Status>, String> {
            let mut reqs = Vec::with_capacity(w);
            for (i, (buf, &src)) in bufs.iter_mut().zip(&sources).enumerate() {
                reqs.push(sc.irecv(buf, src, Tag::Any).map_err(e)?);
                if probe_at == Some(i) {
                    world.iprobe(Source::Any, Tag::Any).map_err(e)?;
                }
                if test_at == i {
                    reqs[0].test().map_err(e)?;
                }
            }
            rdcoll::wait_all(reqs).map_err(e)
        })?;
        for ((st, buf), src) in statuses.iter().zip(&bufs).zip(&sources) {
            let from = st.source as usize;
            ensure!(
                from != 0 && from < size as usize,
                "window {window_no}: a message from rank {from}"
            );
            ensure!(
                matches!(src, Source::Any) || *src == Source::Rank(st.source),
                "window {window_no}: a receive for {src:?} took rank {from}'s message"
            );
            ensure!(
                st.tag == next[from],
                "window {window_no}: from {from}, seq {} before {} (overtaken, lost or twice)",
                st.tag,
                next[from]
            );
            let len = len_of(st.source, st.tag);
            ensure!(
                st.len == len && buf[..len] == pattern(st.source, st.tag, len)[..],
                "window {window_no}: from {from} seq {}: wrong length or bytes",
                st.tag
            );
            next[from] += 1;
        }
        window_no += 1;
    }
}

/// Three ranks. Rank 0 queues a receive for rank 1, lets a progress pass turn rank 2's first
/// two messages (tags 0, 1) into unexpected ones while that receive waits, then posts a
/// receive for rank 2: it must take tag 0, not rank 2's next message (tag 2), which is sent
/// only after it was posted.
pub fn receive_queued_after_unexpected(world: &Comm) -> Outcome {
    match world.rank() {
        0 => {
            let (mut first, mut second) = ([0u8; 1], [0u8; 1]);
            let statuses = world.scope(|sc| -> Result<_, String> {
                let mut from_one = sc.irecv(&mut first, 1, Tag::Any).map_err(e)?;
                // Rank 2's tags 0 and 1 are in by now; this pass polls them.
                std::thread::sleep(std::time::Duration::from_millis(50));
                from_one.test().map_err(e)?;
                let from_two = sc.irecv(&mut second, 2, Tag::Any).map_err(e)?;
                for peer in [1, 2] {
                    world.send(&[0u8; 0], peer, 99).map_err(e)?;
                }
                Ok((from_one.wait().map_err(e)?, from_two.wait().map_err(e)?))
            })?;
            ensure!(
                statuses.1.tag == 0 && second[0] == 10,
                "the receive for rank 2 took tag {} (byte {}), not the waiting tag 0",
                statuses.1.tag,
                second[0]
            );
            ensure!(statuses.0.source == 1 && first[0] == 7, "rank 1's message");
            let mut rest = [0u8; 1];
            for tag in [1, 2] {
                let st = world.recv(&mut rest, 2, Tag::Any).map_err(e)?;
                ensure!(st.tag == tag, "rank 2's tag {} before {tag}", st.tag);
            }
            Ok(())
        }
        1 => {
            world.recv::<u8>(&mut [], 0, 99).map_err(e)?;
            world.send(&[7u8], 0, 5).map_err(e)
        }
        2 => {
            world.send(&[10u8], 0, 0).map_err(e)?;
            world.send(&[11u8], 0, 1).map_err(e)?;
            world.recv::<u8>(&mut [], 0, 99).map_err(e)?;
            world.send(&[12u8], 0, 2).map_err(e)
        }
        _ => Ok(()),
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

/// Two ranks. Rank 0 probes for a message rank 1 sends only after 400 ms, then receives one
/// sent 400 ms later still: the blocking probe and the blocking receive must sleep, not spin
/// (as `a_long_rendezvous_wait_sleeps`).
pub fn a_long_probe_sleeps(world: &Comm) -> Outcome {
    let pause = std::time::Duration::from_millis(400);
    match world.rank() {
        0 => {
            let (wall, cpu) = (std::time::Instant::now(), thread_cpu_time());
            let st = world.probe(1, 4).map_err(e)?;
            let (wall, cpu) = (wall.elapsed(), thread_cpu_time() - cpu);
            ensure!(st.len == 8, "probed {} bytes", st.len);
            let mut buf = [0u8; 8];
            world.recv(&mut buf, 1, 4).map_err(e)?;
            ensure!(
                cpu < wall / 2,
                "the probing thread used {cpu:?} of CPU in a {wall:?} probe: it spun"
            );
            // And a blocking receive (the fast path) that waits as long.
            let (wall, cpu) = (std::time::Instant::now(), thread_cpu_time());
            world.recv(&mut buf, 1, 5).map_err(e)?;
            let (wall, cpu) = (wall.elapsed(), thread_cpu_time() - cpu);
            ensure!(buf == [8u8; 8], "received {buf:?}");
            ensure!(
                cpu < wall / 2,
                "the receiving thread used {cpu:?} of CPU in a {wall:?} receive: it spun"
            );
            Ok(())
        }
        1 => {
            std::thread::sleep(pause);
            world.send(&[9u8; 8], 0, 4).map_err(e)?;
            std::thread::sleep(pause);
            world.send(&[8u8; 8], 0, 5).map_err(e)
        }
        _ => Ok(()),
    }
}

/// Two ranks. Rank 1 posts its receive of a rendezvous message only after 400 ms; rank 0's
/// send waits that long, and a wait that long must sleep, not spin: the sending thread may
/// use at most half of the wall time on its CPU (spinning uses all of it). Not a timing
/// target, a check that a long wait gives its core back (ranks may outnumber cores).
pub fn a_long_rendezvous_wait_sleeps(world: &Comm) -> Outcome {
    const LEN: usize = 1 << 20;
    let pause = std::time::Duration::from_millis(400);
    match world.rank() {
        0 => {
            let data = pattern(0, 0, LEN);
            let (wall, cpu) = (std::time::Instant::now(), thread_cpu_time());
            world.send(&data, 1, 3).map_err(e)?;
            let (wall, cpu) = (wall.elapsed(), thread_cpu_time() - cpu);
            ensure!(
                wall >= pause / 2,
                "the send returned after {wall:?}, before the receive was posted"
            );
            ensure!(
                cpu < wall / 2,
                "the sending thread used {cpu:?} of CPU in a {wall:?} wait: it spun"
            );
            Ok(())
        }
        1 => {
            std::thread::sleep(pause);
            let mut buf = vec![0u8; LEN];
            world.recv(&mut buf, 0, 3).map_err(e)?;
            ensure!(buf == pattern(0, 0, LEN), "wrong bytes");
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The cores this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is plain data; zeroed is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid set of the size passed, for this process.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: reads the set within its fixed size.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Under `RDCOLL_BIND=core` with `cores` cores and at least as many as ranks, every rank
/// runs on its own equal share of them, no two sharing one.
pub fn each_rank_has_its_cores(world: &Comm, cores: usize) -> Outcome {
    let cpus = allowed_cpus();
    let per = cores / (world.size() as usize);
    ensure!(
        cpus.len() == per,
        "rank {} may run on {cpus:?}, not on {per} cores",
        world.rank()
    );
    // Every rank's cores as a bit mask (cores below 64 here), summed: overlaps would carry.
    let mask: u64 = cpus.iter().map(|&c| 1u64 << (c % 64)).sum();
    let (mut or, mut sum) = ([0u64], [0u64]);
    world
        .allreduce(&[mask], &mut or, rdcoll::Op::BitOr)
        .map_err(e)?;
    world
        .allreduce(&[mask], &mut sum, rdcoll::Op::Sum)
        .map_err(e)?;
    ensure!(or == sum, "ranks share cores");
    Ok(())
}

//! The tcp I/O thread and the reading of a peer's socket (by it or by a polling host thread):
//! frames are read here and handled in `frames` (peers' puts and gets against this rank's
//! regions, completions of this rank's operations); the thread also keeps heartbeats going
//! and fails silent peers.

use std::io::Read;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::wire::{decode, Frame, HEADER, MAX_BODY};
use super::Shared;
use crate::types::{EventRef, Rank};

/// What has been read from one peer's socket and not yet handled (a partial frame). Behind
/// the peer's reader lock: the I/O thread and a polling host thread both read (see
/// `Shared::read_now`).
pub(crate) struct ReadBuf {
    buf: Vec<u8>,
    filled: usize,
    /// A long payload being read into place (then `filled` is 0: the buffer holds nothing of
    /// the stream, and takes bytes nobody wants).
    landing: Option<super::landing::Landing>,
}

impl ReadBuf {
    pub(crate) fn new() -> ReadBuf {
        ReadBuf {
            buf: vec![0u8; 2 * (HEADER + MAX_BODY)],
            filled: 0,
            landing: None,
        }
    }
}

pub(super) fn run(sh: Arc<Shared>, mut poll: mio::Poll) {
    let mut events = mio::Events::with_capacity(256);
    for r in 0..sh.size {
        sh.heard_now(r);
    }
    let beat = (sh.peer_timeout / 5).max(Duration::from_millis(20));
    let mut last_beat = Instant::now();
    let mut unread: Vec<usize> = Vec::new();
    let mut aside = super::aside::Aside::new();
    loop {
        if sh.stop.load(Ordering::Acquire) {
            close(&sh, &mut poll);
            return;
        }
        // Peers left with bytes to read (a reading budget ran out): poll without sleeping, and
        // read them again after the events.
        let timeout = if unread.is_empty() {
            // Until the next beat is due: beats go out every `beat`, not every one to two
            // (peers allow five before they give up, and a busy host delays the wake-up).
            aside.timeout(beat.saturating_sub(last_beat.elapsed()))
        } else {
            Duration::ZERO
        };
        if let Err(e) = poll.poll(&mut events, Some(timeout)) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                tracing::error!("rank {}: poll failed: {e}", sh.rank);
                for r in 0..sh.size as Rank {
                    if r != sh.rank {
                        sh.fail_peer(r, "the poller failed");
                    }
                }
                return;
            }
        }
        for ev in events.iter() {
            let r = ev.token().0;
            if r >= sh.size || sh.peers[r].failed.load(Ordering::Acquire) {
                continue;
            }
            if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                sh.heard_now(r);
                if !read_some(&sh, r, &mut unread) {
                    continue;
                }
            }
            if ev.is_writable() {
                let res = {
                    let mut out = sh.peers[r].out.lock();
                    let res = sh.flush_locked(r as Rank, &mut out);
                    // The hint a blocking sender waits on (`Fabric::backlogged`): cleared here
                    // too, not only by a host thread's flush (which `RDCOLL_SINK_RATE` skips).
                    sh.peers[r].queued.store(!out.is_empty(), Ordering::Relaxed);
                    res
                };
                if let Err(why) = res {
                    sh.fail_peer(r as Rank, &why);
                }
            }
        }
        for (r, left) in sh.host_left.iter().enumerate() {
            if left.swap(false, Ordering::AcqRel) && !unread.contains(&r) {
                unread.push(r);
            }
        }
        if aside.update(&sh, poll.registry()) {
            // Reading again: what came while it stood aside raised no readiness event.
            for r in (0..sh.size).filter(|&r| r != sh.rank as usize) {
                if !unread.contains(&r) {
                    unread.push(r);
                }
            }
        }
        for r in std::mem::take(&mut unread) {
            if !sh.peers[r].failed.load(Ordering::Acquire) {
                read_some(&sh, r, &mut unread);
            }
        }
        let now = Instant::now();
        if now.duration_since(last_beat) >= beat {
            last_beat = now;
            for r in 0..sh.size {
                if r as Rank == sh.rank || sh.peers[r].failed.load(Ordering::Acquire) {
                    continue;
                }
                if sh.silent_for(r) > sh.peer_timeout {
                    sh.fail_peer(r as Rank, "silent for longer than the peer timeout");
                } else {
                    let _ = sh.enqueue(r as Rank, Frame::Heartbeat.encode());
                }
            }
        }
    }
}

/// Bytes the I/O thread reads from one peer before it turns to the others, to its heartbeats
/// and to failing silent peers: a peer that floods this rank must not starve them (a rank
/// working through a backlog was declared dead by its peers, its heartbeats never sent).
pub(super) const READ_BUDGET: usize = 4 << 20;

/// Reads what peer `r` has (up to [`READ_BUDGET`]; noted in `unread` if more may be there).
/// Returns `false` if the peer failed.
fn read_some(sh: &Shared, r: usize, unread: &mut Vec<usize>) -> bool {
    // Waits for a host thread reading this peer (it may have taken the bytes); that thread
    // reads at most a budget's worth too (`Shared::read_now`), so this wait is short and the
    // heartbeats and silence checks go on behind a flood.
    match read_peer(
        sh,
        r as Rank,
        &mut sh.readers[r].lock(),
        READ_BUDGET,
        &mut None,
    ) {
        Ok(more) => {
            if more && !unread.contains(&r) {
                unread.push(r);
            }
            true
        }
        Err(why) => {
            sh.fail_peer(r as Rank, &why);
            false
        }
    }
}

/// Flushes what is queued (a Bye among it) before the connections close. It keeps going for as
/// long as the peers take bytes: a message accepted by `send` is not dropped because a busy
/// peer reads slowly. It gives up on a peer that takes nothing for the peer timeout (or fails).
fn close(sh: &Shared, poll: &mut mio::Poll) {
    let mut events = mio::Events::with_capacity(64);
    let mut last_left = usize::MAX;
    let mut last_progress = Instant::now();
    loop {
        let mut left = 0usize;
        for r in 0..sh.size {
            if r as Rank == sh.rank || sh.peers[r].failed.load(Ordering::Acquire) {
                continue;
            }
            let mut out = sh.peers[r].out.lock();
            if sh.flush_locked(r as Rank, &mut out).is_ok() {
                left += out.unsent_bytes();
            }
        }
        if left == 0 {
            return linger(sh, poll);
        }
        if left < last_left {
            last_left = left;
            last_progress = Instant::now();
        } else if last_progress.elapsed() >= sh.peer_timeout {
            tracing::warn!(
                "rank {}: closing with {left} bytes the peers did not take within {:?}",
                sh.rank,
                sh.peer_timeout
            );
            return;
        }
        let _ = poll.poll(&mut events, Some(Duration::from_millis(10)));
    }
}

/// Ends each live connection gracefully: a FIN after everything written, then reading (and
/// discarding) until the peer closes its side. Closing a socket that still holds unread bytes
/// makes the kernel send a reset and throw away what it had not yet delivered, which would
/// lose the last messages `send` accepted. Gives up on a peer silent for the peer timeout.
fn linger(sh: &Shared, poll: &mut mio::Poll) {
    use std::io::Read;
    let mut events = mio::Events::with_capacity(64);
    let mut open: Vec<usize> = (0..sh.size)
        .filter(|&r| r as Rank != sh.rank && !sh.peers[r].failed.load(Ordering::Acquire))
        .filter(|&r| {
            sh.peers[r]
                .stream
                .as_ref()
                .is_some_and(|s| s.shutdown(std::net::Shutdown::Write).is_ok())
        })
        .collect();
    let mut sink = vec![0u8; 64 << 10];
    let mut last_progress = Instant::now();
    while !open.is_empty() && last_progress.elapsed() < sh.peer_timeout {
        open.retain(|&r| {
            let Some(stream) = sh.peers[r].stream.as_ref() else {
                return false;
            };
            let mut s: &mio::net::TcpStream = stream;
            loop {
                match s.read(&mut sink) {
                    Ok(0) => return false,
                    Ok(_) => last_progress = Instant::now(),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return false,
                }
            }
        });
        if !open.is_empty() {
            let _ = poll.poll(&mut events, Some(Duration::from_millis(10)));
        }
    }
}

/// Reads everything the socket has and handles each complete frame.
pub(super) fn read_peer(
    sh: &Shared,
    from: Rank,
    rb: &mut ReadBuf,
    budget: usize,
    lend: &mut Option<&mut dyn FnMut(EventRef<'_>)>,
) -> Result<bool, String> {
    let Some(stream) = sh.peers[from as usize].stream.as_ref() else {
        return Err("no connection".into());
    };
    let mut s: &mio::net::TcpStream = stream;
    let mut read = 0usize;
    // A read that returned less than it asked for emptied the socket (epoll(7): for stream
    // sockets a short read says so as surely as `EAGAIN`): no further read to hear that.
    let mut drained = false;
    loop {
        if let Some(landing) = rb.landing.as_mut() {
            let went = super::landing::go_on(sh, from, landing, stream, &mut rb.buf);
            let (done, n) = went.inspect_err(|_| rb.landing = None)?;
            if n > 0 {
                read += n;
                sh.heard_now(from as usize);
                // It read on: whether the socket is empty now is not known.
                drained = false;
            }
            if !done {
                return Ok(false);
            }
            if let Some(landed) = rb.landing.take() {
                super::landing::finish(sh, from, landed);
            }
        }
        if drained {
            return Ok(false);
        }
        if read >= budget {
            // More may be there: the caller comes back (the socket's readiness is
            // edge-triggered, so no new event would say so).
            return Ok(true);
        }
        // A read takes at most a long payload's head and first bytes past what is there, so
        // that most of a long payload lands in place (`landing`) rather than in this buffer.
        let room = (rb.buf.len() - rb.filled).min(super::landing::LAND_MIN);
        match s.read(&mut rb.buf[rb.filled..rb.filled + room]) {
            Ok(0) => return Err("connection closed".into()),
            Ok(n) => {
                drained = n < room;
                rb.filled += n;
                read += n;
                // Heard, whoever reads (a host thread's read consumes bytes the I/O thread's
                // poller then no longer reports).
                sh.heard_now(from as usize);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.to_string()),
        }
        let mut at = 0;
        while let Some((frame, used)) = decode(&rb.buf[at..rb.filled])? {
            let gone = matches!(frame, Frame::Bye);
            super::frames::handle(sh, from, frame, lend)?;
            at += used;
            if gone {
                return Err("peer closed its endpoint".into());
            }
        }
        // What is left is the start of one frame: a long payload lands in place.
        if let Some(landing) = super::landing::start(sh, from, &rb.buf[at..rb.filled])? {
            rb.landing = Some(landing);
            rb.filled = at;
        }
        rb.buf.copy_within(at..rb.filled, 0);
        rb.filled -= at;
    }
}

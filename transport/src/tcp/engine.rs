//! The tcp I/O thread: reads frames, performs peers' puts and gets against this rank's regions,
//! completes this rank's operations, keeps heartbeats going and fails silent peers.

use std::io::Read;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::wire::{self, decode, Frame, CHUNK, HEADER, MAX_BODY};
use super::Shared;
use crate::types::{range_fits, Event, EventRef, Payload, Rank, RegionKey};

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
                    sh.flush_locked(r as Rank, &mut out)
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
            handle(sh, from, frame, lend)?;
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

fn status_of(e: &crate::TransportError) -> u8 {
    match e {
        crate::TransportError::OutOfRange { .. } => wire::ST_OUT_OF_RANGE,
        _ => wire::ST_BAD_KEY,
    }
}

/// Handles one frame from `from`; a message goes to `lend` in place if given and no event is
/// queued before it, else into the event queue.
fn handle(
    sh: &Shared,
    from: Rank,
    frame: Frame<'_>,
    lend: &mut Option<&mut dyn FnMut(EventRef<'_>)>,
) -> Result<(), String> {
    match frame {
        Frame::Message { data } => {
            let failed = &sh.peers[from as usize].failed;
            match lend.as_deref_mut() {
                Some(f) if sh.events.is_empty() && !failed.load(Ordering::Acquire) => {
                    f(EventRef::Message { src: from, data })
                }
                _ => sh.events.push_unless_failed(
                    Event::Message {
                        src: from,
                        data: Payload::from_slice(data),
                    },
                    failed,
                ),
            }
        }
        Frame::Put {
            op,
            key,
            base,
            total,
            chunk_off,
            imm,
            flag,
            data,
        } => {
            let in_range = chunk_off
                .checked_add(data.len() as u64)
                .is_some_and(|end| end <= total);
            if !in_range {
                return Err("put chunk outside its own range".into());
            }
            sink_pace(sh, data.len());
            let last = chunk_off + data.len() as u64 == total;
            let result = put_target(sh, key, base, total, flag.is_some()).and_then(|t| {
                t.region.write(t.base + chunk_off as usize, data)?;
                if let (Some(v), true) = (flag, last) {
                    t.region.store_flag(t.base + t.total, v)?;
                }
                Ok(t.region.len())
            });
            let end = PutEnd {
                op,
                imm,
                flagged: flag.is_some(),
                last,
            };
            put_done(sh, from, end, result);
        }
        Frame::PutAck {
            op,
            status,
            region_len,
        } => sh.complete_from(from, op, |p| {
            if status == wire::ST_OK {
                Ok(())
            } else {
                Err(sh.remote_error(p, status, region_len))
            }
        }),
        Frame::Get {
            op,
            key,
            offset,
            len,
        } => serve_get(sh, from, op, key, offset, len),
        Frame::GetData {
            op,
            chunk_off,
            status,
            region_len,
            data,
        } => {
            if status != wire::ST_OK {
                sh.complete_from(from, op, |p| Err(sh.remote_error(p, status, region_len)));
                return Ok(());
            }
            sink_pace(sh, data.len());
            let mut pending = sh.pending.lock();
            let Some(p) = pending.get_mut(&op) else {
                return Ok(());
            };
            let (dst, at) = p.get_data_place(from, chunk_off, data.len())?;
            let written = dst.write(at, data);
            let done = p.count_get_data(data.len()) || written.is_err();
            drop(pending);
            if done {
                sh.complete(op, |_| written);
            }
        }
        Frame::Heartbeat | Frame::Bye => {}
    }
    Ok(())
}

/// Where a put lands: its region, and where its bytes start and how many there are.
pub(super) struct PutTarget {
    pub(super) region: crate::Region,
    pub(super) base: usize,
    pub(super) total: usize,
}

/// The target of a put of `total` bytes to region `key` at `base` (and of the flag byte after
/// them, if `flagged`), its range checked.
pub(super) fn put_target(
    sh: &Shared,
    key: u64,
    base: u64,
    total: u64,
    flagged: bool,
) -> Result<PutTarget, crate::TransportError> {
    let region = sh.table.lookup(RegionKey(key))?;
    let (base, total) = (usize::try_from(base).unwrap_or(usize::MAX), total as usize);
    let span = total.saturating_add(flagged as usize);
    if !range_fits(base, span, region.len()) {
        return Err(crate::TransportError::OutOfRange {
            rank: sh.rank,
            key,
            offset: base as u64,
            len: total as u64,
            region_len: region.len() as u64,
        });
    }
    Ok(PutTarget {
        region,
        base,
        total,
    })
}

/// What is left to do once a put's chunk has landed (or failed to).
pub(super) struct PutEnd {
    pub(super) op: u64,
    pub(super) imm: Option<u64>,
    /// The put sets a flag byte after its data (set by then if `last`).
    pub(super) flagged: bool,
    /// The chunk is the put's last.
    pub(super) last: bool,
}

/// Finishes a put's chunk from `from` with `result` (the region's length, or why it did not
/// land): wakes the host for a flag, raises the immediate and acknowledges a finished put, or
/// reports the failure to the initiator.
pub(super) fn put_done(
    sh: &Shared,
    from: Rank,
    end: PutEnd,
    result: Result<usize, crate::TransportError>,
) {
    let PutEnd {
        op,
        imm,
        flagged,
        last,
    } = end;
    if flagged && last && result.is_ok() {
        // The host may be asleep waiting for exactly this byte.
        sh.events.wake_all();
    }
    if op == wire::UNACKNOWLEDGED {
        if let Err(e) = result {
            tracing::error!(
                "rank {}: an unacknowledged put from rank {from}: {e}",
                sh.rank
            );
        }
        return;
    }
    match result {
        Ok(region_len) if last => {
            if let Some(imm) = imm {
                sh.events.push_unless_failed(
                    Event::Immediate { src: from, imm },
                    &sh.peers[from as usize].failed,
                );
            }
            let ack = Frame::PutAck {
                op,
                status: wire::ST_OK,
                region_len: region_len as u64,
            };
            let _ = sh.enqueue(from, ack.encode());
        }
        Ok(_) => {}
        Err(e) => {
            let len = if let crate::TransportError::OutOfRange { region_len, .. } = e {
                region_len
            } else {
                0
            };
            let ack = Frame::PutAck {
                op,
                status: status_of(&e),
                region_len: len,
            };
            let _ = sh.enqueue(from, ack.encode());
        }
    }
}

fn serve_get(sh: &Shared, from: Rank, op: u64, key: u64, offset: u64, len: u64) {
    let region = sh.table.lookup(RegionKey(key));
    let checked = region.and_then(|r| {
        let (o, l) = (
            usize::try_from(offset).unwrap_or(usize::MAX),
            usize::try_from(len).unwrap_or(usize::MAX),
        );
        if range_fits(o, l, r.len()) {
            Ok((r, o, l))
        } else {
            Err(crate::TransportError::OutOfRange {
                rank: sh.rank,
                key,
                offset,
                len,
                region_len: r.len() as u64,
            })
        }
    });
    let (region, offset, len) = match checked {
        Ok(x) => x,
        Err(e) => {
            let region_len = if let crate::TransportError::OutOfRange { region_len, .. } = e {
                region_len
            } else {
                0
            };
            let f = Frame::GetData {
                op,
                chunk_off: 0,
                status: status_of(&e),
                region_len,
                data: &[],
            };
            let _ = sh.enqueue(from, f.encode());
            return;
        }
    };
    let mut chunk_off = 0;
    loop {
        let n = (len - chunk_off).min(CHUNK);
        let head = Frame::GetData {
            op,
            chunk_off: chunk_off as u64,
            status: wire::ST_OK,
            region_len: 0,
            data: &[],
        };
        let frame = super::out::data_frame(&head, &region, offset + chunk_off, n);
        let frame = frame.unwrap_or_else(|e| {
            super::out::OutFrame::Bytes(
                Frame::GetData {
                    op,
                    chunk_off: 0,
                    status: status_of(&e),
                    region_len: 0,
                    data: &[],
                }
                .encode(),
            )
        });
        if sh.enqueue_frame(from, frame).is_err() {
            return;
        }
        chunk_off += n;
        if chunk_off >= len {
            return;
        }
    }
}

/// With `RDCOLL_SINK_RATE`, holds the I/O thread until `n` more bytes may be deposited (the
/// peers' data then backs up in their sockets and in-flight queues, as behind slow memory).
pub(super) fn sink_pace(sh: &Shared, n: usize) {
    if let Some(p) = &sh.sink {
        let wait = p.lock().delay_for(n);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

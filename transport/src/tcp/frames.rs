//! What a frame read from a peer does at this rank: a message for the host, a put into this
//! rank's memory (with its flag or immediate, and its acknowledgement), a get served with
//! frames out of a registered region, an acknowledgement completing one of this rank's
//! operations. Run by whoever reads the peer: the I/O thread or a polling host thread.

use std::sync::atomic::Ordering;

use super::wire::{self, Frame, CHUNK};
use super::Shared;
use crate::types::{range_fits, Event, EventRef, Payload, Rank, RegionKey};

fn status_of(e: &crate::TransportError) -> u8 {
    match e {
        crate::TransportError::OutOfRange { .. } => wire::ST_OUT_OF_RANGE,
        _ => wire::ST_BAD_KEY,
    }
}

/// Handles one frame from `from`; a message goes to `lend` in place if given and no event is
/// queued before it, else into the event queue.
pub(super) fn handle(
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

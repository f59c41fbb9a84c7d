//! Operations in flight on a tcp endpoint (puts and gets awaiting the target's answer): the
//! pending table, its per-peer byte counts, and completing an operation on the target's word
//! or on its failure.

use std::sync::atomic::Ordering;

use super::{wire, Shared};
use crate::error::{Result, TransportError};
use crate::region::Region;
use crate::types::{Event, OpId, Rank};

/// What an operation in flight does with the answer.
pub(crate) enum PendingKind {
    Put,
    Get {
        dst: Region,
        dst_off: usize,
        received: usize,
    },
}

/// An operation in flight toward `peer`.
pub(crate) struct Pending {
    pub(super) peer: Rank,
    pub(super) key: u64,
    pub(super) offset: usize,
    pub(super) len: usize,
    pub(super) kind: PendingKind,
}

impl Pending {
    /// Where `len` bytes of get data from `from` at `chunk_off` of this operation go: its
    /// destination region and the offset there. An error if they cannot be its (a protocol
    /// violation by `from`).
    pub(super) fn get_data_place(
        &self,
        from: Rank,
        chunk_off: u64,
        len: usize,
    ) -> std::result::Result<(&Region, usize), String> {
        if self.peer != from {
            return Err("get data for an operation with another rank".into());
        }
        let PendingKind::Get { dst, dst_off, .. } = &self.kind else {
            return Err("get data for a put".into());
        };
        let fits = chunk_off
            .checked_add(len as u64)
            .is_some_and(|e| e <= self.len as u64);
        if !fits {
            return Err("get data beyond the requested length".into());
        }
        Ok((dst, dst_off + chunk_off as usize))
    }

    /// Counts `n` bytes of get data landed; whether the get now has all of its bytes.
    pub(super) fn count_get_data(&mut self, n: usize) -> bool {
        match &mut self.kind {
            PendingKind::Get { received, .. } => {
                *received += n;
                *received >= self.len
            }
            PendingKind::Put => false,
        }
    }
}

impl Shared {
    /// Records a pending operation unless the peer already failed.
    pub(super) fn add_pending(&self, op: OpId, p: Pending) -> Result<()> {
        let mut pending = self.pending.lock();
        if self.peers[p.peer as usize].failed.load(Ordering::Acquire) {
            return Err(TransportError::PeerFailed(p.peer));
        }
        {
            let mut f = self.flight.lock();
            let c = &mut f[p.peer as usize];
            if matches!(p.kind, PendingKind::Put) {
                c.put_bytes_in_flight += p.len as u64;
                c.put_bytes_in_flight_peak = c.put_bytes_in_flight_peak.max(c.put_bytes_in_flight);
            } else {
                c.get_bytes_in_flight += p.len as u64;
                c.get_bytes_in_flight_peak = c.get_bytes_in_flight_peak.max(c.get_bytes_in_flight);
            }
        }
        pending.insert(op.0, p);
        Ok(())
    }

    /// A pending operation left the pending table (completed or failed).
    pub(super) fn landed(&self, p: &Pending) {
        let mut f = self.flight.lock();
        let c = &mut f[p.peer as usize];
        match p.kind {
            PendingKind::Put => {
                c.put_bytes_in_flight = c.put_bytes_in_flight.saturating_sub(p.len as u64);
            }
            PendingKind::Get { .. } => {
                c.get_bytes_in_flight = c.get_bytes_in_flight.saturating_sub(p.len as u64);
            }
        }
    }

    /// Completes a pending operation with `from`, on that peer's word; a completion naming
    /// another rank's operation is ignored.
    pub(crate) fn complete_from(
        &self,
        from: Rank,
        op: u64,
        result: impl FnOnce(&Pending) -> Result<()>,
    ) {
        let removed = {
            let mut pending = self.pending.lock();
            match pending.get(&op) {
                Some(p) if p.peer == from => pending.remove(&op),
                _ => None,
            }
        };
        self.report(op, removed, result);
    }

    /// Completes a pending operation (ignored if it already completed).
    pub(crate) fn complete(&self, op: u64, result: impl FnOnce(&Pending) -> Result<()>) {
        let removed = self.pending.lock().remove(&op);
        self.report(op, removed, result);
    }

    pub(super) fn report(
        &self,
        op: u64,
        removed: Option<Pending>,
        result: impl FnOnce(&Pending) -> Result<()>,
    ) {
        if let Some(p) = removed {
            self.landed(&p);
            let result = result(&p);
            self.events.push(Event::Completed {
                op: OpId(op),
                result,
            });
        }
    }

    /// The error an initiator reports for a remote status code.
    pub(crate) fn remote_error(&self, p: &Pending, status: u8, region_len: u64) -> TransportError {
        if status == wire::ST_OUT_OF_RANGE {
            TransportError::OutOfRange {
                rank: p.peer,
                key: p.key,
                offset: p.offset as u64,
                len: p.len as u64,
                region_len,
            }
        } else {
            TransportError::BadKey {
                rank: p.peer,
                key: p.key,
            }
        }
    }
}

//! Eager credit: end-to-end flow control of eager messages, so that a sender that outruns its
//! receiver cannot make the receiver's unexpected messages (or its own backlog) exhaust memory.
//!
//! - Each eager message is charged its length plus [`CHARGE_PER_MESSAGE`] (the header, the
//!   matching engine's node and bounce-buffer slack a queued message costs its receiver).
//! - A sender may have at most `share` bytes charged toward each peer that the peer has not yet
//!   received: `RDCOLL_UNEXPECTED_MAX` divided among the other ranks (at least
//!   [`MIN_SHARE`], or the whole limit if it is smaller). A receiver counts what it received from each sender and, each time a
//!   quarter of the share has accumulated, returns its running total with a zero-byte put on
//!   the engine's credit portal (the header data carries the total, so returns may be late or
//!   repeated but never wrong); and at once to a sender whose message came without credit.
//! - A send that finds no credit goes as a rendezvous whose header carries no data: the
//!   receiver keeps only the header, the data stays in the sender's buffer until a receive
//!   pulls it. A blocking send then waits for its receive (and says so in the header, see
//!   `bits::SENDER_WAITS`); a nonblocking one returns its request at once.
//!
//! So what a rank's memory holds of other ranks' unexpected eager messages is bounded by
//! `RDCOLL_UNEXPECTED_MAX` (or `MIN_SHARE` per peer, whichever is more), plus one header per
//! send that found no credit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rdcoll_transport::{Rank, SpinLock};

/// What an eager message costs its receiver beyond its payload while it waits unreceived:
/// measured at 192-250 bytes (docs/RELIABILITY.md, "Resource limits").
pub(super) const CHARGE_PER_MESSAGE: u64 = 256;

/// The least credit a sender has toward each peer, however many ranks share the limit (unless
/// the limit itself is smaller).
pub(super) const MIN_SHARE: u64 = 256 << 10;

/// One rank's eager credit toward each peer (as a sender) and from each peer (as a receiver).
pub(super) struct Credits {
    /// Charge this rank may have unreceived at each peer.
    share: u64,
    /// Received charge from a peer that makes a return due.
    quantum: u64,
    /// Charge sent to each peer (running total).
    sent: Box<[AtomicU64]>,
    /// Each peer's running total of charge received from this rank, as it last told.
    returned: Box<[AtomicU64]>,
    /// Charge received from each peer (running total), but for `received_in_pass`.
    received: Box<[AtomicU64]>,
    /// Charge received by blocking receives' fast paths, which count under the NI's state lock
    /// (a fast receive pass, or the take of a queued message): one writer at a time, so a
    /// plain load and store instead of a locked add on the latency path.
    received_in_pass: Box<[AtomicU64]>,
    /// The running total last returned to each peer (or about to be).
    reported: Box<[AtomicU64]>,
    /// Peers a return is due to, and whether the list may be non-empty.
    due: SpinLock<Vec<Rank>>,
    any_due: AtomicBool,
}

impl Credits {
    /// Credit for a job of `ranks` ranks whose receivers each spend at most `limit` bytes on
    /// unexpected eager messages.
    pub(super) fn new(ranks: usize, limit: u64) -> Credits {
        let peers = ranks.saturating_sub(1).max(1) as u64;
        // The floor only where the limit allows it: a smaller limit (tests, 0: every short
        // message by rendezvous) is taken at its word.
        let share = (limit / peers).max(limit.min(MIN_SHARE));
        let zeros = || (0..ranks).map(|_| AtomicU64::new(0)).collect::<Box<[_]>>();
        Credits {
            share,
            quantum: (share / 4).max(1),
            sent: zeros(),
            returned: zeros(),
            received: zeros(),
            received_in_pass: zeros(),
            reported: zeros(),
            due: SpinLock::new(Vec::new()),
            any_due: AtomicBool::new(false),
        }
    }

    /// The charge this rank may have unreceived at each peer.
    #[cfg(test)]
    pub(super) fn share(&self) -> u64 {
        self.share
    }

    /// Takes credit for an eager message of `len` bytes to `dest`; `false` (nothing taken)
    /// when `dest` has not received enough of what this rank sent it.
    #[inline]
    pub(super) fn take(&self, dest: Rank, len: usize) -> bool {
        let charge = len as u64 + CHARGE_PER_MESSAGE;
        let sent = &self.sent[dest as usize];
        let total = sent.fetch_add(charge, Ordering::Relaxed) + charge;
        if self.within_share(dest as usize, total) {
            return true;
        }
        sent.fetch_sub(charge, Ordering::Relaxed);
        false
    }

    /// Whether a message of `len` bytes to `dest` would find credit now (nothing is taken).
    pub(super) fn has(&self, dest: Rank, len: usize) -> bool {
        let charge = len as u64 + CHARGE_PER_MESSAGE;
        self.sent.get(dest as usize).is_some_and(|sent| {
            self.within_share(dest as usize, sent.load(Ordering::Relaxed) + charge)
        })
    }

    /// Whether `total` charge sent to peer `dest` (a valid index) is within its share of
    /// what that peer has said it received.
    #[inline]
    fn within_share(&self, dest: usize, total: u64) -> bool {
        total <= self.returned[dest].load(Ordering::Acquire) + self.share
    }

    /// `peer` says it has received `total` bytes of charge from this rank.
    pub(super) fn returned_by(&self, peer: Rank, total: u64) {
        if let Some(r) = self.returned.get(peer as usize) {
            r.fetch_max(total, Ordering::Release);
        }
    }

    /// This rank received an eager message of `len` bytes from `source`.
    #[inline]
    pub(super) fn received(&self, source: Rank, len: usize) {
        let Some(received) = self.received.get(source as usize) else {
            return;
        };
        let charge = len as u64 + CHARGE_PER_MESSAGE;
        received.fetch_add(charge, Ordering::Relaxed);
        self.note_received(source, charge);
    }

    /// [`received`](Credits::received), by a blocking receive's fast path: only ever called
    /// under the network interface's state lock (`Ni::fast_receive_pass`, `Ni::take_queued`,
    /// `Ni::fast_receive_open`), which serialises the writers.
    #[inline]
    pub(super) fn received_in_pass(&self, source: Rank, len: usize) {
        let Some(received) = self.received_in_pass.get(source as usize) else {
            return;
        };
        let charge = len as u64 + CHARGE_PER_MESSAGE;
        received.store(received.load(Ordering::Relaxed) + charge, Ordering::Relaxed);
        self.note_received(source, charge);
    }

    /// Charge received from `source` so far.
    fn received_from(&self, source: Rank) -> u64 {
        let s = source as usize;
        self.received[s].load(Ordering::Relaxed) + self.received_in_pass[s].load(Ordering::Relaxed)
    }

    /// Marks a return due once `charge` more from `source` crossed a quantum.
    #[inline]
    fn note_received(&self, source: Rank, charge: u64) {
        let total = self.received_from(source);
        let reported = self.reported[source as usize].load(Ordering::Relaxed);
        let unreported = total.saturating_sub(reported);
        // Due once per quantum crossed (a repeated mark only costs a look).
        if unreported >= self.quantum && unreported.saturating_sub(charge) < self.quantum {
            self.due.lock().push(source);
            self.any_due.store(true, Ordering::Release);
        }
    }

    /// `source` sent a message without credit: whatever it is owed is returned now, not at
    /// the next quantum (so a sender whose share is smaller than this rank's quantum, its
    /// setting being another, still gets its credit back).
    pub(super) fn owed_now(&self, source: Rank) {
        if source as usize >= self.received.len() {
            return;
        }
        if self.received_from(source) > self.reported[source as usize].load(Ordering::Relaxed) {
            self.due.lock().push(source);
            self.any_due.store(true, Ordering::Release);
        }
    }

    /// Whether a return may be due (one load: the receive path asks after every message).
    #[inline]
    pub(super) fn any_due(&self) -> bool {
        self.any_due.load(Ordering::Relaxed)
    }

    /// The returns due now, as `(peer, running total)`, each claimed by this caller.
    pub(super) fn take_due(&self, out: &mut Vec<(Rank, u64)>) {
        if !self.any_due.swap(false, Ordering::Acquire) {
            return;
        }
        let peers = std::mem::take(&mut *self.due.lock());
        for p in peers {
            let total = self.received_from(p);
            let reported = &self.reported[p as usize];
            let before = reported.load(Ordering::Relaxed);
            if total > before
                && reported
                    .compare_exchange(before, total, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                out.push((p, total));
            }
        }
    }

    /// Charge sent to `peer` that it has not said it received.
    #[cfg(test)]
    pub(super) fn outstanding(&self, peer: Rank) -> u64 {
        let sent = self.sent[peer as usize].load(Ordering::Relaxed);
        sent.saturating_sub(self.returned[peer as usize].load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_stops_at_its_share_and_resumes_with_returns() {
        let c = Credits::new(2, MIN_SHARE);
        let len = 1000;
        let per = len as u64 + CHARGE_PER_MESSAGE;
        let fit = c.share() / per;
        for _ in 0..fit {
            assert!(c.take(1, len));
        }
        assert!(!c.take(1, len), "past the share");
        assert_eq!(c.outstanding(1), fit * per, "a refused take leaves nothing");
        // The receiver side (here the same struct, as rank 0's peer would run it).
        let r = Credits::new(2, MIN_SHARE);
        let mut due = Vec::new();
        for i in 0..fit {
            r.received(0, len);
            r.take_due(&mut due);
            if (i + 1) * per < r.quantum {
                assert!(due.is_empty(), "nothing due below a quantum");
            }
        }
        assert!(!due.is_empty());
        let (peer, total) = *due.last().unwrap();
        assert_eq!(peer, 0);
        assert!(total >= c.share() / 2 && total <= fit * per);
        c.returned_by(1, total);
        assert!(c.take(1, len), "returned credit is usable");
        // Returns that arrive late or twice never take credit back.
        c.returned_by(1, total / 2);
        assert_eq!(c.outstanding(1), fit * per + per - total);
    }

    #[test]
    fn the_limit_is_shared_among_peers_with_a_floor() {
        assert_eq!(Credits::new(5, 4 << 30).share(), 1 << 30);
        assert_eq!(Credits::new(1000, 1 << 20).share(), MIN_SHARE);
        assert_eq!(Credits::new(1, 1 << 30).share(), 1 << 30);
        assert_eq!(Credits::new(1000, 4096).share(), 4096);
        let none = Credits::new(3, 0);
        assert!(!none.take(1, 0), "a zero limit gives no credit");
    }
}

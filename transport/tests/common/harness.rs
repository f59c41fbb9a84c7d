//! A per-rank event sorter for tests: buffers messages, immediates, completions and failures so
//! a test can wait for the one it needs.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use rdcoll_transport::{Event, Fabric, OpId, Rank, RemoteRegion, TransportError};

pub const WAIT: Duration = Duration::from_secs(60);

pub struct Harness<'a> {
    pub f: &'a dyn Fabric,
    messages: VecDeque<(Rank, Vec<u8>)>,
    imms: VecDeque<(Rank, u64)>,
    done: HashMap<OpId, Result<(), TransportError>>,
    pub failed: HashSet<Rank>,
}

impl<'a> Harness<'a> {
    pub fn new(f: &'a dyn Fabric) -> Self {
        Harness {
            f,
            messages: VecDeque::new(),
            imms: VecDeque::new(),
            done: HashMap::new(),
            failed: HashSet::new(),
        }
    }

    /// Waits for one event and files it; errors if none comes in time.
    pub fn pump(&mut self, deadline: Instant) -> Result<(), String> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.f.wait(Some(left)).map_err(|e| format!("wait: {e}"))? {
            Some(ev) => self.file(ev),
            None => {
                return Err(format!(
                    "rank {}: no event within the deadline{}",
                    self.f.rank(),
                    self.f
                        .pending_report()
                        .map_or(String::new(), |r| format!(" ({r})"))
                ))
            }
        }
        Ok(())
    }

    /// Sorts one event into its queue.
    pub fn file(&mut self, ev: Event) {
        match ev {
            Event::Message { src, data } => self.messages.push_back((src, data.to_vec())),
            Event::Immediate { src, imm } => self.imms.push_back((src, imm)),
            Event::Completed { op, result } => {
                self.done.insert(op, result);
            }
            Event::PeerFailed { rank } => {
                self.failed.insert(rank);
            }
        }
    }

    pub fn message(&mut self) -> Result<(Rank, Vec<u8>), String> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(m) = self.messages.pop_front() {
                return Ok(m);
            }
            self.pump(deadline)?;
        }
    }

    /// The next message from `src` (others stay queued, in order).
    pub fn message_from(&mut self, src: Rank) -> Result<Vec<u8>, String> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(i) = self.messages.iter().position(|(s, _)| *s == src) {
                return Ok(self.messages.remove(i).map(|m| m.1).unwrap_or_default());
            }
            self.pump(deadline)?;
        }
    }

    pub fn imm_from(&mut self, src: Rank) -> Result<u64, String> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(i) = self.imms.iter().position(|(s, _)| *s == src) {
                return Ok(self.imms.remove(i).map(|m| m.1).unwrap_or_default());
            }
            self.pump(deadline)?;
        }
    }

    pub fn op(&mut self, op: OpId) -> Result<Result<(), TransportError>, String> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(r) = self.done.remove(&op) {
                return Ok(r);
            }
            self.pump(deadline)?;
        }
    }

    /// Waits for `op` and requires success.
    pub fn op_ok(&mut self, op: OpId, what: &str) -> Result<(), String> {
        self.op(op)?
            .map_err(|e| format!("rank {}: {what}: {e}", self.f.rank()))
    }

    /// Sends this rank's descriptor of `region` to every rank and collects theirs.
    pub fn exchange(&mut self, region: &RemoteRegion) -> Result<Vec<RemoteRegion>, String> {
        let n = self.f.size();
        for dest in 0..n {
            self.f
                .send(dest as Rank, &region.to_bytes())
                .map_err(|e| format!("send: {e}"))?;
        }
        let mut out = Vec::with_capacity(n);
        for src in 0..n {
            let bytes = self.message_from(src as Rank)?;
            out.push(RemoteRegion::from_bytes(&bytes).map_err(|e| e.to_string())?);
        }
        Ok(out)
    }

    /// All ranks meet here (a message to everyone, one from everyone).
    pub fn barrier(&mut self) -> Result<(), String> {
        let n = self.f.size();
        for dest in 0..n {
            self.f
                .send(dest as Rank, b"barrier")
                .map_err(|e| format!("send: {e}"))?;
        }
        for src in 0..n {
            let m = self.message_from(src as Rank)?;
            if m != b"barrier" {
                return Err(format!(
                    "expected a barrier message from {src}, got {} bytes",
                    m.len()
                ));
            }
        }
        Ok(())
    }
}

//! The product's receive path (`Comm`: irecv, recv, iprobe, test, cancel, over two
//! communicators) against `rdcoll_matching::reference`, the plain two-queue model of MPI
//! matching, driven by the same random programme: every match, every status, every probe and
//! every cancel must be the model's.
//!
//! Rounds keep the programme deterministic although two ranks run it: rank 1 posts its
//! receives and says "go" on a control communicator; rank 0 then sends a batch and says
//! "done" there. When rank 1 has "done", every message of the batch has been matched or
//! queued (one ordered stream per pair of ranks), so the model sees the posts, then the
//! arrivals in order. Then rank 1 tests, probes, receives and cancels at random, each checked
//! against the model at once. Payloads are checked when the scope has ended.

use rdcoll::{Comm, Error, Source, Tag};
use rdcoll_matching::reference::ReferenceMatcher;
use rdcoll_matching::{ContextId, Envelope, Matching, PostOutcome, ReceiveHandle, ReceiveSpec};
use rdcoll_matching::{Source as MSource, TagPattern};

use super::{e, pattern, Outcome};

/// Receive buffers hold this many bytes; longer messages are truncated.
const CAPACITY: usize = 16;
/// Posted receives and queued messages kept at most (beyond the short-queue form of the
/// matching engine, so its indexed form is exercised too).
const DEPTH: usize = 48;
/// Tags in use (small, so that wildcards and exact receives meet often).
const TAGS: u64 = 4;

/// A message of the programme: its serial number, length and tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Msg {
    serial: u32,
    len: usize,
    tag: u32,
}

/// A receive of the programme: communicator, source, tag.
#[derive(Debug, Clone, Copy)]
struct Spec {
    comm: usize,
    any_source: bool,
    tag: Option<u32>,
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn spec(&mut self) -> Spec {
        Spec {
            comm: self.below(2) as usize,
            any_source: self.below(2) == 0,
            tag: (self.below(4) != 0).then(|| self.below(TAGS) as u32),
        }
    }
}

impl Spec {
    fn source(self) -> Source {
        if self.any_source {
            Source::Any
        } else {
            Source::Rank(0)
        }
    }

    fn tag(self) -> Tag {
        self.tag.map_or(Tag::Any, Tag::Value)
    }

    fn model(self) -> ReceiveSpec {
        let source = if self.any_source {
            MSource::Any
        } else {
            MSource::Rank(0)
        };
        let tag = self.tag.map_or(TagPattern::Any, TagPattern::Exact);
        ReceiveSpec::new(context(self.comm), source, tag)
    }
}

fn context(comm: usize) -> ContextId {
    ContextId::user(comm as u32).expect("small id")
}

/// Bytes of message `serial` (its first bytes carry the serial).
fn payload(serial: u32, len: usize) -> Vec<u8> {
    let mut p = pattern(0, serial, len);
    for (b, s) in p.iter_mut().zip(serial.to_le_bytes()) {
        *b = s;
    }
    p
}

/// What a completed receive must have reported, compared with what it did.
fn check_status(got: Result<rdcoll::Status, Error>, m: Msg, what: &str) -> Outcome {
    let wanted = (0u32, m.tag, m.len);
    match got {
        Ok(s) if m.len <= CAPACITY => {
            ensure!(
                (s.source, s.tag, s.len) == wanted && !s.cancelled,
                "{what}: status {s:?}, the model says message {m:?}"
            );
        }
        Err(Error::Truncated {
            sender,
            tag,
            len,
            capacity,
        }) if m.len > CAPACITY => {
            ensure!(
                (sender, tag, len, capacity) == (0, m.tag, m.len, CAPACITY),
                "{what}: truncated ({sender}, {tag}, {len}, {capacity}), the model says {m:?}"
            );
        }
        other => return Err(format!("{what}: {other:?}, the model says message {m:?}")),
    }
    Ok(())
}

/// Runs at least `ops` operations of the random programme (sends, posts, tests, probes,
/// receives, cancels) on ranks 0 and 1 of `world`, rank 1 checking each against the model.
pub fn against_reference(world: &Comm, ops: u64) -> Outcome {
    let comms = [world.dup().map_err(e)?, world.dup().map_err(e)?];
    let ctl = world.dup().map_err(e)?;
    let me = world.rank();
    if me > 1 {
        return Ok(());
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut done_ops = 0u64;
    let mut serial = 0u32;
    if me == 0 {
        while done_ops < ops {
            let posts = rng.below(9);
            let sends = rng.below(9);
            let checks = rng.below(12);
            // Rank 1's choices come from its own generator; the counts are shared.
            ctl.recv(&mut [0u8; 0], 1, 0).map_err(e)?;
            for _ in 0..sends {
                let comm = rng.below(2) as usize;
                let tag = rng.below(TAGS) as u32;
                let len = rng.below(CAPACITY as u64 + 6) as usize;
                comms[comm].send(&payload(serial, len), 1, tag).map_err(e)?;
                serial += 1;
            }
            ctl.send(&[0u8; 0], 1, 0).map_err(e)?;
            done_ops += posts + sends + checks;
        }
        // The receiver drains what is left, then says so.
        ctl.recv(&mut [0u8; 0], 1, 1).map_err(e)?;
        return Ok(());
    }
    receiver(&comms, &ctl, ops, &mut rng)
}

/// A receive posted and not yet completed: its handle in the model, its buffer's index.
struct Pending<'s> {
    req: rdcoll::Request<'s>,
    model: Option<ReceiveHandle>,
    id: u64,
    buf: usize,
}

fn receiver(comms: &[Comm; 2], ctl: &Comm, ops: u64, rng: &mut Rng) -> Outcome {
    let mut choices = Rng(0xD1B5_4A32_D192_ED03);
    let mut model: ReferenceMatcher<u64, Msg> = ReferenceMatcher::new();
    // Upper bound on receives posted: every op could be one.
    let mut pool = vec![[0u8; CAPACITY]; ops as usize + 64];
    // (buffer index, message) of every receive that completed with data.
    let mut landed: Vec<(usize, Msg)> = Vec::new();
    let mut done_ops = 0u64;
    let mut serial = 0u32;
    let mut next_id = 0u64;
    let mut result = Ok(());
    comms[0].scope(|s0| {
        comms[1].scope(|s1| {
            let mut free = pool.iter_mut().enumerate();
            let mut pending: Vec<Pending<'_>> = Vec::new();
            // Messages the model matched to a receive that has not been tested yet, by id.
            let mut matched: std::collections::HashMap<u64, Msg> = Default::default();
            let mut step = || -> Result<u64, String> {
                let posts = rng.below(9);
                let sends = rng.below(9);
                let checks = rng.below(12);
                // Posts, before the batch.
                for _ in 0..posts {
                    let spec = choices.spec();
                    let (buf, slot) = free.next().ok_or("out of buffers")?;
                    let slot = &mut slot[..];
                    let req = if spec.comm == 0 {
                        s0.irecv(slot, spec.source(), spec.tag())
                    } else {
                        s1.irecv(slot, spec.source(), spec.tag())
                    }
                    .map_err(e)?;
                    let id = next_id;
                    next_id += 1;
                    let handle = match model.post(spec.model(), id) {
                        PostOutcome::Posted(h) => Some(h),
                        PostOutcome::Matched { message, .. } => {
                            matched.insert(id, message);
                            None
                        }
                    };
                    pending.push(Pending {
                        req,
                        model: handle,
                        id,
                        buf,
                    });
                }
                ctl.send(&[0u8; 0], 0, 0).map_err(e)?;
                // The batch, as rank 0 sends it (same generator).
                for _ in 0..sends {
                    let comm = rng.below(2) as usize;
                    let tag = rng.below(TAGS) as u32;
                    let len = rng.below(CAPACITY as u64 + 6) as usize;
                    let m = Msg { serial, len, tag };
                    serial += 1;
                    let envelope = Envelope::new(context(comm), 0, tag);
                    if let rdcoll_matching::ArrivalOutcome::Matched { receive, .. } =
                        model.arrive(envelope, m)
                    {
                        matched.insert(receive, m);
                        if let Some(p) = pending.iter_mut().find(|p| p.id == receive) {
                            p.model = None;
                        }
                    }
                }
                ctl.recv(&mut [0u8; 0], 0, 0).map_err(e)?;
                for _ in 0..checks {
                    match choices.below(5) {
                        // Test a pending receive.
                        0 | 1 if !pending.is_empty() => {
                            let at = choices.below(pending.len() as u64) as usize;
                            let p = &mut pending[at];
                            let got = p.req.test();
                            match (matched.get(&p.id).copied(), got) {
                                (None, Ok(None)) => {}
                                (Some(m), Ok(Some(st))) => {
                                    check_status(Ok(st), m, "test")?;
                                    landed.push((p.buf, m));
                                    matched.remove(&p.id);
                                    pending.swap_remove(at);
                                }
                                (Some(m), Err(err)) => {
                                    check_status(Err(err), m, "test")?;
                                    landed.push((p.buf, m));
                                    matched.remove(&p.id);
                                    pending.swap_remove(at);
                                }
                                (m, got) => {
                                    return Err(format!("test: {got:?}, the model says {m:?}"))
                                }
                            }
                        }
                        // Cancel a pending receive.
                        2 if !pending.is_empty() => {
                            let at = choices.below(pending.len() as u64) as usize;
                            let p = &mut pending[at];
                            let cancelled = p.req.cancel().map_err(e)?;
                            let in_model = match p.model {
                                Some(h) => model.cancel(h).is_ok(),
                                None => false,
                            };
                            ensure!(
                                cancelled == in_model,
                                "cancel: {cancelled}, the model says {in_model}"
                            );
                            if cancelled {
                                let st = p.req.test().map_err(e)?;
                                ensure!(
                                    st.is_some_and(|s| s.cancelled),
                                    "a cancelled receive reports {st:?}"
                                );
                                pending.swap_remove(at);
                            }
                        }
                        // Probe.
                        3 => {
                            let spec = choices.spec();
                            let got = comms[spec.comm]
                                .iprobe(spec.source(), spec.tag())
                                .map_err(e)?;
                            let want = model.probe(&spec.model()).map(|(_, m)| *m);
                            match (got, want) {
                                (None, None) => {}
                                (Some(st), Some(m)) => ensure!(
                                    (st.source, st.tag, st.len) == (0, m.tag, m.len),
                                    "iprobe: {st:?}, the model says {m:?}"
                                ),
                                (got, want) => {
                                    return Err(format!("iprobe: {got:?}, the model says {want:?}"))
                                }
                            }
                        }
                        // A blocking receive of a queued message (it would block otherwise).
                        _ => {
                            let spec = choices.spec();
                            if model.probe(&spec.model()).is_none() {
                                continue;
                            }
                            let PostOutcome::Matched { message, .. } =
                                model.post(spec.model(), u64::MAX)
                            else {
                                return Err("the model's probe and post disagree".into());
                            };
                            let mut buf = [0u8; CAPACITY];
                            let got = comms[spec.comm].recv(&mut buf, spec.source(), spec.tag());
                            check_status(got, message, "recv")?;
                            let n = message.len.min(CAPACITY);
                            ensure!(
                                buf[..n] == payload(message.serial, message.len)[..n],
                                "recv: the bytes of message {message:?} are wrong"
                            );
                        }
                    }
                }
                // Keep the queues short (deep queues are the benchmark's business; here the
                // reference model's linear scans would set the pace): the oldest receives complete
                // or are cancelled, the oldest messages are received.
                while pending.len() > DEPTH {
                    let mut p = pending.remove(0);
                    match matched.remove(&p.id) {
                        Some(m) => {
                            check_status(p.req.wait(), m, "wait")?;
                            landed.push((p.buf, m));
                        }
                        None => {
                            let h = p.model.ok_or("a receive neither matched nor posted")?;
                            ensure!(model.cancel(h).is_ok(), "the model lost a receive");
                            ensure!(
                                p.req.cancel().map_err(e)?,
                                "a posted receive was not cancelled"
                            );
                        }
                    }
                }
                while model.unexpected_len() > DEPTH {
                    let comm = choices.below(2) as usize;
                    let any = Spec {
                        comm,
                        any_source: true,
                        tag: None,
                    };
                    let Some((_, m)) = model.matched_probe(&any.model()) else {
                        continue;
                    };
                    let mut buf = [0u8; CAPACITY];
                    let got = comms[comm].recv(&mut buf, Source::Any, Tag::Any);
                    check_status(got, m, "recv")?;
                }
                // Both ranks count the rounds' shared operations alone, so they stop together.
                Ok(posts + sends + checks)
            };
            while done_ops < ops {
                match step() {
                    Ok(n) => done_ops += n,
                    Err(why) => {
                        result = Err(why);
                        break;
                    }
                }
            }
            // Drain: cancel what is still posted, take what the model says matched, and receive
            // every message still queued.
            for mut p in pending.drain(..) {
                if let Some(m) = matched.remove(&p.id) {
                    let got = p.req.wait();
                    if result.is_ok() {
                        result = check_status(got, m, "final wait");
                    }
                    landed.push((p.buf, m));
                } else if !p.req.cancel().unwrap_or(false) && result.is_ok() {
                    result = Err("a receive the model still holds could not be cancelled".into());
                }
            }
        })
    });
    result?;
    for (comm, c) in comms.iter().enumerate() {
        let any = Spec {
            comm,
            any_source: true,
            tag: None,
        };
        while let Some((_, m)) = model.matched_probe(&any.model()) {
            let mut buf = [0u8; CAPACITY];
            check_status(c.recv(&mut buf, Source::Any, Tag::Any), m, "drain")?;
        }
        ensure!(
            c.iprobe(Source::Any, Tag::Any).map_err(e)?.is_none(),
            "a message the model does not have is queued"
        );
    }
    ctl.send(&[0u8; 0], 0, 1).map_err(e)?;
    ensure!(
        landed.len() as u64 > ops / 20,
        "only {} receives completed with data in {ops} operations",
        landed.len()
    );
    for (buf, m) in landed {
        let n = m.len.min(CAPACITY);
        ensure!(
            pool[buf][..n] == payload(m.serial, m.len)[..n],
            "the bytes of message {m:?} are wrong"
        );
    }
    Ok(())
}

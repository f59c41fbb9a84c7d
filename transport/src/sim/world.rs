//! The conservative discrete-event core of the simulation: one thread per rank runs the real
//! code; virtual time stands still while any of them runs, and moves, to the next thing that
//! happens, only once every one of them sleeps in the fabric ([`World::block`]) or has left.
//! The thread that makes the last one asleep runs the step: it brings the network up to the
//! next time anything happens, lands what arrives then, and wakes the ranks it concerns.
//!
//! Operations issued between two steps are ordered by (time, rank, the rank's own count), and
//! a rank sees only what earlier steps delivered, so a run is the same every time: same
//! deliveries, same times.

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::config::{NetworkModel, SimConfig, Topology};
use super::network::{FlowKey, Network};
use super::packets::PacketNetwork;
use super::transfer::{Happening, Scheduled, Transfer, What};
use crate::error::{Result, TransportError};
use crate::region::RegionTable;
use crate::types::{Event, Rank};
use crate::wait::EventQueue;

/// An ordered channel: initiator, target, and whether its bytes flow back (a get's).
type Channel = (Rank, Rank, bool);

/// The whole simulated job.
pub(crate) struct World {
    pub(crate) cfg: SimConfig,
    core: Mutex<Core>,
    /// Where each rank's thread sleeps.
    sleepers: Vec<Condvar>,
    pub(crate) inboxes: Vec<EventQueue>,
    pub(crate) tables: Vec<Arc<RegionTable>>,
    pub(crate) dead: Vec<AtomicBool>,
    /// Row `p`, column `r`: rank `p` has been told that rank `r` failed (after everything `r`
    /// sent it before). What a rank's `is_failed` says.
    told: Vec<AtomicBool>,
    /// Virtual nanoseconds since the start, mirrored for reading without the lock.
    clock: AtomicU64,
}

/// A rank's thread, as the scheduler sees it.
#[derive(Clone, Copy, PartialEq)]
enum Thread {
    Running,
    /// Asleep until woken or its timer (the sleep's number names the timer).
    Asleep(u64),
    Left,
}

pub(super) struct Core {
    now: u64,
    agenda: BinaryHeap<Scheduled>,
    network: Network,
    /// The packet-level network, when the job runs on one (then every transfer crosses it).
    packets: Option<PacketNetwork>,
    /// Transfers whose bytes are on the wire, by flow.
    on_wire: HashMap<(u32, u64), Transfer>,
    /// Packet network: per channel, its transfers on the wire in the order they entered it,
    /// each with whether it has arrived (packets of later ones may take faster routes; a
    /// transfer lands only after those before it on its channel).
    in_order: HashMap<Channel, VecDeque<(FlowKey, bool)>>,
    /// Per channel: whether a transfer holds it, and those waiting for it in order.
    channels: HashMap<(Rank, Rank, bool), (bool, VecDeque<Transfer>)>,
    threads: Vec<Thread>,
    /// Threads running (neither asleep nor gone).
    running: usize,
    /// Each rank's next sleep number.
    sleeps: Vec<u64>,
    timers: BinaryHeap<std::cmp::Reverse<(u64, Rank, u64)>>,
    /// Something was delivered to a rank while it was awake: its next sleep returns at once.
    poked: Vec<bool>,
    /// Each rank's count of the things it started (orders them in the agenda).
    next_seq: Vec<u64>,
    /// When the network last did anything (for declaring a stall).
    last_activity: u64,
    /// Until when each link is held by packets.
    link_free: Vec<u64>,
    /// Completions that failed for a peer's death, held until their rank has learnt of the
    /// death (after whatever the peer sent it before), by (rank, dead peer).
    parked: HashMap<(Rank, Rank), Vec<Event>>,
    /// Until when each rank's processor is busy issuing (LogGP's `o` per operation: a rank
    /// issues one operation after another).
    cpu_free: Vec<u64>,
}

impl World {
    pub(crate) fn new(cfg: SimConfig) -> Result<Arc<World>> {
        cfg.validate()?;
        let n = cfg.ranks;
        let mut agenda = BinaryHeap::new();
        if let Topology::Clusters { wan_changes, .. } = &cfg.topology {
            for (i, change) in wan_changes.iter().enumerate() {
                let link = cfg.wan_link(change.link).expect("validated WAN link");
                agenda.push(Scheduled {
                    at: change.at.as_nanos() as u64,
                    rank: Rank::MAX,
                    seq: i as u64,
                    what: Happening::Capacity {
                        link,
                        bytes_per_ns: change.bandwidth / 1e9,
                    },
                });
            }
        }
        let core = Core {
            now: 0,
            agenda,
            network: Network::new(cfg.link_capacities()),
            packets: match cfg.network {
                NetworkModel::Flows => None,
                NetworkModel::Packets { mtu, buffer } => Some(PacketNetwork::new(
                    cfg.link_capacities(),
                    cfg.global_links(),
                    cfg.hop_latency.as_nanos() as u64,
                    mtu,
                    buffer,
                )),
            },
            on_wire: HashMap::new(),
            in_order: HashMap::new(),
            channels: HashMap::new(),
            threads: vec![Thread::Running; n],
            running: n,
            sleeps: vec![0; n],
            timers: BinaryHeap::new(),
            poked: vec![false; n],
            next_seq: vec![0; n],
            last_activity: 0,
            link_free: vec![0; cfg.link_capacities().len()],
            cpu_free: vec![0; n],
            parked: HashMap::new(),
        };
        Ok(Arc::new(World {
            core: Mutex::new(core),
            sleepers: (0..n).map(|_| Condvar::new()).collect(),
            inboxes: (0..n).map(|_| EventQueue::default()).collect(),
            tables: (0..n)
                .map(|r| RegionTable::new(r as Rank, cfg.max_regions))
                .collect(),
            dead: (0..n).map(|_| AtomicBool::new(false)).collect(),
            told: (0..n * n).map(|_| AtomicBool::new(false)).collect(),
            clock: AtomicU64::new(0),
            cfg,
        }))
    }

    /// Virtual time since the start.
    pub(crate) fn now(&self) -> Duration {
        Duration::from_nanos(self.clock.load(Ordering::Acquire))
    }

    /// Whether `observer` has learnt that `rank` failed.
    pub(crate) fn knows_failed(&self, observer: Rank, rank: Rank) -> bool {
        let n = self.cfg.ranks;
        (rank as usize) < n
            && self.told[observer as usize * n + rank as usize].load(Ordering::Acquire)
    }

    /// Records that `observer` learns now that `rank` failed; false if it knew already.
    fn learn_failed(&self, observer: Rank, rank: Rank) -> bool {
        let n = self.cfg.ranks;
        !self.told[observer as usize * n + rank as usize].swap(true, Ordering::AcqRel)
    }

    /// Whether `rank` has failed (whoever knows it yet).
    pub(crate) fn is_dead(&self, rank: Rank) -> bool {
        self.dead
            .get(rank as usize)
            .is_some_and(|d| d.load(Ordering::Acquire))
    }

    /// Starts `what` from `initiator` toward `target`: it leaves after the initiator's
    /// overhead, which its operations pay one after another. Returns its number.
    pub(crate) fn issue(&self, initiator: Rank, target: Rank, what: What) -> u64 {
        let mut core = self.core.lock();
        let r = initiator as usize;
        let seq = core.next_seq[r];
        core.next_seq[r] += 1;
        let at = core.now.max(core.cpu_free[r]) + self.cfg.overhead.as_nanos() as u64;
        core.cpu_free[r] = at;
        let transfer = Transfer {
            initiator,
            target,
            seq,
            latency: 0,
            what,
        };
        core.agenda.push(Scheduled {
            at,
            rank: initiator,
            seq,
            what: Happening::Start(transfer),
        });
        seq
    }

    /// Sleeps `rank`'s thread until something is delivered to it, `ready` holds, or `timeout`
    /// of virtual time passes. The last thread to fall asleep moves time on.
    pub(crate) fn block(&self, rank: Rank, timeout: Duration, ready: &dyn Fn() -> bool) {
        let r = rank as usize;
        let mut core = self.core.lock();
        if std::mem::take(&mut core.poked[r]) || !self.inboxes[r].is_empty() || ready() {
            return;
        }
        let sleep = core.sleeps[r];
        core.sleeps[r] += 1;
        let wake_at = core
            .now
            .saturating_add(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX));
        core.timers.push(std::cmp::Reverse((wake_at, rank, sleep)));
        core.threads[r] = Thread::Asleep(sleep);
        core.running -= 1;
        if core.running == 0 {
            self.step(&mut core);
        }
        while core.threads[r] == Thread::Asleep(sleep) {
            self.sleepers[r].wait(&mut core);
        }
        core.poked[r] = false;
    }

    /// `rank`'s thread is gone for good (its endpoint was dropped).
    pub(crate) fn leave(&self, rank: Rank) {
        let mut core = self.core.lock();
        let r = rank as usize;
        if core.threads[r] == Thread::Left {
            return;
        }
        core.threads[r] = Thread::Left;
        core.running -= 1;
        if core.running == 0 && core.threads.iter().any(|t| *t != Thread::Left) {
            self.step(&mut core);
        }
    }

    /// Marks `rank` failed: operations toward it fail from now on, and each live peer learns
    /// of it after whatever `rank` sent it before.
    pub(crate) fn fail(&self, rank: Rank) {
        if self.dead[rank as usize].swap(true, Ordering::AcqRel) {
            return;
        }
        for peer in 0..self.cfg.ranks as Rank {
            if peer != rank && !self.is_dead(peer) {
                self.issue(rank, peer, What::Farewell);
            }
        }
    }

    /// Ends the job at once: every rank is marked failed and every live rank told of every
    /// other, now (a launcher ending the job, a stalled simulation).
    pub(crate) fn end(&self) {
        let mut core = self.core.lock();
        self.end_locked(&mut core);
    }

    fn end_locked(&self, core: &mut Core) {
        for dead in &self.dead {
            dead.store(true, Ordering::Release);
        }
        for r in 0..self.cfg.ranks as Rank {
            for gone in (0..self.cfg.ranks as Rank).filter(|&g| g != r) {
                self.tell_failed(core, r, gone);
            }
        }
    }

    /// `rank` learns that `gone` failed (unless it knew): a `PeerFailed` event, then the
    /// completions that failed for it meanwhile.
    fn tell_failed(&self, core: &mut Core, rank: Rank, gone: Rank) {
        if !self.learn_failed(rank, gone) {
            return;
        }
        self.deliver(core, rank, Event::PeerFailed { rank: gone });
        for ev in core.parked.remove(&(rank, gone)).unwrap_or_default() {
            self.deliver(core, rank, ev);
        }
    }

    /// Queues `ev` for `rank` and wakes its thread.
    fn deliver(&self, core: &mut Core, rank: Rank, ev: Event) {
        self.inboxes[rank as usize].push(ev);
        self.wake(core, rank);
    }

    /// Wakes `rank`'s thread (something concerns it); if it is awake, its next sleep returns
    /// at once.
    fn wake(&self, core: &mut Core, rank: Rank) {
        let r = rank as usize;
        match core.threads[r] {
            Thread::Asleep(_) => {
                core.threads[r] = Thread::Running;
                core.running += 1;
                self.sleepers[r].notify_one();
            }
            Thread::Running => core.poked[r] = true,
            Thread::Left => {}
        }
    }

    /// Moves virtual time on until some thread has been woken (every thread is asleep or
    /// gone). Whatever happens at one time is handled in full before time moves again.
    fn step(&self, core: &mut MutexGuard<'_, Core>) {
        while core.running == 0 {
            let next_event = core.agenda.peek().map(|s| s.at);
            let next_finish = [
                core.network.next_finish(),
                core.packets.as_ref().and_then(PacketNetwork::next_time),
            ]
            .into_iter()
            .flatten()
            .min();
            let busy = next_event.is_some() || next_finish.is_some();
            let next_timer = loop {
                match core.timers.peek() {
                    None => break None,
                    Some(&std::cmp::Reverse((at, rank, sleep))) => {
                        if core.threads[rank as usize] == Thread::Asleep(sleep) {
                            break Some(at);
                        }
                        core.timers.pop();
                    }
                }
            };
            let Some(t) = [next_event, next_finish, next_timer]
                .into_iter()
                .flatten()
                .min()
            else {
                // Nothing will ever happen: no thread sleeps with a timeout and nothing moves.
                self.stalled(core);
                return;
            };
            if !busy
                && t.saturating_sub(core.last_activity) > self.cfg.stall_limit.as_nanos() as u64
            {
                self.stalled(core);
                return;
            }
            core.now = core.now.max(t);
            self.clock.store(core.now, Ordering::Release);
            if busy {
                core.last_activity = core.now;
            }
            self.handle_time(core);
            let now = core.now;
            while let Some(&std::cmp::Reverse((at, rank, sleep))) = core.timers.peek() {
                if at > now {
                    break;
                }
                core.timers.pop();
                if core.threads[rank as usize] == Thread::Asleep(sleep) {
                    self.wake(core, rank);
                }
            }
        }
    }

    /// Nothing in the network and nobody will act: the job is ended rather than left to hang.
    fn stalled(&self, core: &mut Core) {
        tracing::error!(
            "simulated job stalled at {:?}: every rank waits and nothing is in flight",
            Duration::from_nanos(core.now)
        );
        self.end_locked(core);
        // Wake every sleeper, so each sees the failures (and none waits for a step).
        for r in 0..self.cfg.ranks as Rank {
            self.wake(core, r);
        }
    }

    /// Handles everything that happens at `core.now`: flows whose last byte leaves, then the
    /// agenda's happenings, until nothing more happens at this time.
    fn handle_time(&self, core: &mut Core) {
        let now = core.now;
        loop {
            let finished = core.network.finish_until(now);
            for key in &finished {
                let transfer = core.on_wire.remove(key).expect("a flow's transfer");
                self.off_the_wire(core, transfer);
            }
            let outcomes = match core.packets.as_mut() {
                Some(packets) => packets.advance(now),
                None => Vec::new(),
            };
            for outcome in &outcomes {
                self.packets_moved(core, *outcome);
            }
            let due = core.agenda.peek().is_some_and(|s| s.at <= now);
            if !due {
                if finished.is_empty() && outcomes.is_empty() {
                    return;
                }
                continue;
            }
            let s = core.agenda.pop().expect("peeked");
            self.happen(core, s.what);
        }
    }

    pub(super) fn schedule(&self, core: &mut Core, at: u64, rank: Rank, seq: u64, what: Happening) {
        core.agenda.push(Scheduled {
            at,
            rank,
            seq,
            what,
        });
    }

    fn happen(&self, core: &mut Core, what: Happening) {
        let now = core.now;
        match what {
            Happening::Start(t) if t.is_read() => {
                // The request crosses the network before the owner can answer.
                let (_, latency) = self.cfg.route(t.initiator, t.target, 0);
                let (rank, seq) = (t.initiator, t.seq);
                self.schedule(core, now + latency, rank, seq, Happening::Request(t));
            }
            Happening::Start(t) => self.enter_channel(core, t),
            Happening::Sent(t) => self.off_the_wire(core, t),
            Happening::Request(mut t) => match super::deliver::read_for_get(self, &mut t) {
                Ok(()) => self.enter_channel(core, t),
                Err(e) => self.complete(core, &t, now, Err(e)),
            },
            Happening::Arrive(mut t) => {
                let landed = super::deliver::land(self, &mut t);
                let (from, to) = t.data_path();
                match &t.what {
                    What::Farewell => self.tell_failed(core, to, from),
                    What::Message(_) => {
                        if let Ok(Some(ev)) = landed {
                            self.deliver(core, to, ev);
                        }
                    }
                    What::Put { .. } => {
                        let result = match landed {
                            Ok(Some(ev)) => {
                                self.deliver(core, to, ev);
                                Ok(())
                            }
                            Ok(None) => {
                                // The target may wait on a flag or on the data itself.
                                self.wake(core, to);
                                Ok(())
                            }
                            Err(e) => Err(e),
                        };
                        let (_, back) = self.cfg.route(to, from, 0);
                        self.complete(core, &t, now + back, result);
                    }
                    What::Get { .. } => self.complete(core, &t, now, landed.map(drop)),
                }
            }
            Happening::Complete { rank, op, result } => {
                if self.is_dead(rank) {
                    return;
                }
                let ev = Event::Completed { op, result };
                match &ev {
                    // Not before the rank knows (after what the dead peer sent it first), as
                    // over a connection that breaks behind its last data.
                    Event::Completed {
                        result: Err(TransportError::PeerFailed(gone)),
                        ..
                    } if !self.knows_failed(rank, *gone) => {
                        core.parked.entry((rank, *gone)).or_default().push(ev);
                    }
                    _ => self.deliver(core, rank, ev),
                }
            }
            Happening::Capacity { link, bytes_per_ns } => {
                core.network.set_capacity(now, link, bytes_per_ns);
                if let Some(packets) = core.packets.as_mut() {
                    packets.set_capacity(link, bytes_per_ns);
                }
            }
        }
    }

    /// Schedules `t`'s completion at its initiator.
    fn complete(&self, core: &mut Core, t: &Transfer, at: u64, result: Result<()>) {
        let op = match &t.what {
            What::Put { op, .. } | What::Get { op, .. } => *op,
            _ => return,
        };
        let what = Happening::Complete {
            rank: t.initiator,
            op,
            result,
        };
        self.schedule(core, at, t.initiator, t.seq, what);
    }

    /// Puts `t` on the wire if its channel is free, else behind the channel's queue.
    fn enter_channel(&self, core: &mut Core, t: Transfer) {
        let channel = core.channels.entry(t.channel()).or_default();
        if channel.0 {
            channel.1.push_back(t);
        } else {
            channel.0 = true;
            self.put_on_wire(core, t);
        }
    }

    fn put_on_wire(&self, core: &mut Core, mut t: Transfer) {
        let now = core.now;
        let (from, to) = t.data_path();
        let salt = (u64::from(t.initiator) << 40) ^ t.seq;
        let (links, latency) = self.cfg.route(from, to, salt);
        t.latency = latency;
        let bytes = t.payload_len() + self.cfg.header_bytes;
        if links.is_empty() || bytes == 0 {
            self.off_the_wire(core, t);
            return;
        }
        let key = (t.initiator, t.seq);
        if core.packets.is_some() {
            self.put_on_packets(core, t, links, bytes as u64);
            return;
        }
        if bytes <= self.cfg.flow_above {
            // A packet: it waits for every link of its route to be free, then holds each for
            // its bytes' time there.
            let start = links
                .iter()
                .map(|&l| core.link_free[l as usize])
                .fold(now, u64::max);
            let mut sent = start;
            for &l in &links {
                let held = (bytes as f64 / core.network.capacity(l)).ceil() as u64;
                core.link_free[l as usize] = start + held;
                sent = sent.max(start + held);
            }
            let (rank, seq) = (t.initiator, t.seq);
            self.schedule(core, sent, rank, seq, Happening::Sent(t));
            return;
        }
        core.network.start(now, key, links, bytes as f64);
        core.on_wire.insert(key, t);
    }

    /// `t`'s last byte has left: it lands after the route's latency, and the next transfer
    /// of its channel starts.
    fn off_the_wire(&self, core: &mut Core, t: Transfer) {
        let now = core.now;
        let latency = t.latency;
        let channel = t.channel();
        let (rank, seq) = (t.initiator, t.seq);
        self.schedule(core, now + latency, rank, seq, Happening::Arrive(t));
        self.release_channel(core, channel);
    }

    /// The transfer holding `channel` is off it: the next one waiting, if any, starts.
    pub(super) fn release_channel(&self, core: &mut Core, channel: (Rank, Rank, bool)) {
        let next = match core.channels.get_mut(&channel) {
            Some(c) => match c.1.pop_front() {
                Some(next) => Some(next),
                None => {
                    c.0 = false;
                    None
                }
            },
            None => None,
        };
        if let Some(next) = next {
            self.put_on_wire(core, next);
        }
    }
}

#[path = "world_packets.rs"]
mod world_packets;

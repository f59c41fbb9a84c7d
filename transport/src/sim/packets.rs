//! The packet-level network: transfers cut into packets that cross their route hop by hop
//! through input-queued switches with finite buffers and credit-based flow control, lossless
//! as InfiniBand or Slingshot are. Each link's receiving end holds `buffer` bytes per virtual
//! channel; a packet takes, on each hop, the channel numbered by the global links it crossed
//! before (a Dragonfly's scheme: local, global, local, global, local climb 0, 0, 1, 1, 2, so
//! buffer dependencies never form a cycle and the network cannot deadlock) and waits in it,
//! first in first out, until the link of its next hop is free and the buffer behind it has
//! room. A packet at the head of a buffer that cannot move blocks the packets behind it, for
//! whatever link they want (head-of-line blocking): a receiver that takes data slower than its
//! link backs up the buffers on its senders' routes and slows traffic that only shares them,
//! the congestion paper 002 measures.
//!
//! A transfer may have several routes (Valiant's, through different intermediate groups): its
//! packets take them in turn, as a network that routes each packet on its own spreads one
//! transfer over many paths. A link's sender takes turns among the buffers (and the transfers starting at its rank)
//! whose head packet wants it; credits come back one hop latency after a packet has left a
//! buffer. The last hop delivers into the receiver's memory, at that link's rate (a slow
//! receiver's rate). Events of one time run in the order they were scheduled, so a run is
//! deterministic.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use super::network::FlowKey;

/// Virtual channels per link: a route crosses at most two global links.
const CHANNELS: usize = 3;

/// What the network reports to the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The transfer's last byte has left its initiator's side (its channel is free again).
    Injected(FlowKey),
    /// The transfer's last byte has arrived.
    Arrived(FlowKey),
}

/// A piece of a transfer on its way.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Packet {
    key: FlowKey,
    bytes: u32,
    /// Which of its transfer's routes it takes.
    route: u8,
    /// The place in that route of the link it crossed last.
    hop: u8,
}

/// Who holds a packet that wants a link: a transfer still leaving its rank, or a buffer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Holder {
    Source(FlowKey),
    Buffer(u32),
}

struct Transfer {
    /// The routes its packets take in turn, each hop a link and its channel; all start on the
    /// same link.
    routes: Vec<Vec<(u32, u8)>>,
    /// The route of the next packet to leave (the next Valiant one, when adaptive).
    next_route: usize,
    /// Whether each packet chooses between the first route (minimal) and the next other one.
    adaptive: bool,
    /// Bytes not yet handed to the first link.
    to_inject: u64,
    /// Bytes not yet arrived at the end.
    to_arrive: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A link has finished sending a packet.
    LinkFree(u32),
    /// A packet's last byte reaches the buffer at the end of its hop or, on the last hop,
    /// memory.
    Arrive(Packet),
    /// Room for `bytes` is back at the sender of a buffer.
    Credit { buffer: u32, bytes: u32 },
    /// A transfer's last packet has left its source.
    Injected(FlowKey),
}

/// Every packet in the network, the buffers they wait in and the links they take turns on.
pub(crate) struct PacketNetwork {
    capacity: Vec<f64>,
    /// Which links join groups (their crossings number the channels).
    global: Vec<bool>,
    hop_latency: u64,
    mtu: u32,
    /// Bytes of each buffer.
    buffer: u64,
    /// Free bytes of each buffer (link `l`, channel `c` at `l * CHANNELS + c`).
    room: Vec<u64>,
    /// The packets in each buffer, oldest first.
    queued: Vec<VecDeque<Packet>>,
    /// Links sending a packet now.
    busy: Vec<bool>,
    /// Per link, the holders whose next packet wants it, in turn order.
    waiting: Vec<VecDeque<Holder>>,
    transfers: HashMap<FlowKey, Transfer>,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    next_event: u64,
    /// Links whose sender should look for a packet (worked off before returning).
    to_try: Vec<u32>,
    done: Vec<Outcome>,
}

impl PacketNetwork {
    /// A network of links with these capacities (bytes per nanosecond), of which those marked
    /// `global` join groups, `hop_latency` nanoseconds per hop, packets of at most `mtu` bytes
    /// and `buffer` bytes per channel.
    pub(crate) fn new(
        capacity: Vec<f64>,
        global: Vec<bool>,
        hop_latency: u64,
        mtu: usize,
        buffer: usize,
    ) -> Self {
        let links = capacity.len();
        debug_assert_eq!(global.len(), links);
        PacketNetwork {
            capacity,
            global,
            hop_latency,
            mtu: u32::try_from(mtu).unwrap_or(u32::MAX),
            buffer: buffer as u64,
            room: vec![buffer as u64; links * CHANNELS],
            queued: vec![VecDeque::new(); links * CHANNELS],
            busy: vec![false; links],
            waiting: vec![VecDeque::new(); links],
            transfers: HashMap::new(),
            events: BinaryHeap::new(),
            next_event: 0,
            to_try: Vec::new(),
            done: Vec::new(),
        }
    }

    /// Changes a link's rate for the packets it sends from now on.
    pub(crate) fn set_capacity(&mut self, link: usize, bytes_per_ns: f64) {
        self.capacity[link] = bytes_per_ns;
    }

    /// Starts a transfer of `bytes` at `now`, its packets taking `routes` in turn (at most 256
    /// routes, each of one to 256 links and at most two global ones, all from the same first
    /// link); `adaptive`: each packet takes the first (minimal) route or the next other one,
    /// whichever is less loaded.
    pub(crate) fn start(
        &mut self,
        now: u64,
        key: FlowKey,
        routes: Vec<Vec<u32>>,
        adaptive: bool,
        bytes: u64,
    ) {
        debug_assert!(!routes.is_empty() && routes.len() <= 256);
        debug_assert!(routes.iter().all(|r| !r.is_empty() && r.len() <= 256));
        debug_assert!(routes.iter().all(|r| r[0] == routes[0][0]));
        let first = routes[0][0];
        let bytes = bytes.max(1);
        let routes = routes
            .into_iter()
            .map(|links| {
                let mut crossed = 0u8;
                links
                    .into_iter()
                    .map(|l| {
                        let channel = crossed.min(CHANNELS as u8 - 1);
                        crossed += u8::from(self.global[l as usize]);
                        (l, channel)
                    })
                    .collect()
            })
            .collect();
        self.transfers.insert(
            key,
            Transfer {
                routes,
                next_route: 0,
                adaptive,
                to_inject: bytes,
                to_arrive: bytes,
            },
        );
        self.waiting[first as usize].push_back(Holder::Source(key));
        self.to_try.push(first);
        self.work(now);
    }

    /// When the next thing happens in the network, if anything is in it.
    pub(crate) fn next_time(&self) -> Option<u64> {
        self.events.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Runs everything that happens up to `now`; returns what the scheduler must learn, in
    /// the order it happened.
    pub(crate) fn advance(&mut self, now: u64) -> Vec<Outcome> {
        while let Some(&Reverse((at, _, event))) = self.events.peek() {
            if at > now {
                break;
            }
            self.events.pop();
            self.happen(event);
            self.work(at);
        }
        std::mem::take(&mut self.done)
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.events.push(Reverse((at, self.next_event, event)));
        self.next_event += 1;
    }

    fn happen(&mut self, event: Event) {
        match event {
            Event::LinkFree(link) => {
                self.busy[link as usize] = false;
                self.to_try.push(link);
            }
            Event::Credit { buffer, bytes } => {
                self.room[buffer as usize] += u64::from(bytes);
                self.to_try.push(buffer / CHANNELS as u32);
            }
            Event::Injected(key) => self.done.push(Outcome::Injected(key)),
            Event::Arrive(packet) => {
                let key = packet.key;
                let t = self.transfers.get_mut(&key).expect("a packet's transfer");
                let route = &t.routes[usize::from(packet.route)];
                let hop = usize::from(packet.hop);
                if hop + 1 == route.len() {
                    t.to_arrive -= u64::from(packet.bytes);
                    if t.to_arrive == 0 {
                        self.transfers.remove(&key);
                        self.done.push(Outcome::Arrived(key));
                    }
                    return;
                }
                let (link, channel) = route[hop];
                let next = route[hop + 1].0;
                let buffer = link * CHANNELS as u32 + u32::from(channel);
                let queue = &mut self.queued[buffer as usize];
                queue.push_back(packet);
                if queue.len() == 1 {
                    self.waiting[next as usize].push_back(Holder::Buffer(buffer));
                    self.to_try.push(next);
                }
            }
        }
    }

    /// Lets every link that may have something to send look for it.
    fn work(&mut self, now: u64) {
        while let Some(link) = self.to_try.pop() {
            self.try_send(now, link);
        }
    }

    /// If `link` is idle, sends the first waiting head packet (in turn order) whose next
    /// buffer has room for it.
    fn try_send(&mut self, now: u64, link: u32) {
        let l = link as usize;
        if self.busy[l] {
            return;
        }
        for _ in 0..self.waiting[l].len() {
            let holder = self.waiting[l].pop_front().expect("counted");
            let (mut packet, hop) = self.head(holder);
            let route = &self.transfers[&packet.key].routes[usize::from(packet.route)];
            let last = hop + 1 == route.len();
            let into = l * CHANNELS + usize::from(route[hop].1);
            if !last && self.room[into] < u64::from(packet.bytes) {
                self.waiting[l].push_back(holder);
                continue;
            }
            if !last {
                self.room[into] -= u64::from(packet.bytes);
            }
            let sent = now + (f64::from(packet.bytes) / self.capacity[l]).ceil() as u64;
            self.busy[l] = true;
            self.schedule(sent, Event::LinkFree(link));
            packet.hop = hop as u8;
            self.schedule(sent + self.hop_latency, Event::Arrive(packet));
            self.take_head(holder, sent);
            return;
        }
    }

    /// The packet `holder` would send next and the hop it would take.
    fn head(&self, holder: Holder) -> (Packet, usize) {
        match holder {
            Holder::Source(key) => {
                let t = &self.transfers[&key];
                let bytes = t.to_inject.min(u64::from(self.mtu)) as u32;
                let route = self.route_of_next(t) as u8;
                let packet = Packet {
                    key,
                    bytes,
                    route,
                    hop: 0,
                };
                (packet, 0)
            }
            Holder::Buffer(b) => {
                let packet = *self.queued[b as usize].front().expect("a waiting buffer");
                (packet, usize::from(packet.hop) + 1)
            }
        }
    }

    /// The route a transfer's next packet takes: the next in turn or, adaptively, the minimal
    /// one unless its first switch's queue toward it, times its hops, is longer than toward
    /// the next Valiant route (UGAL).
    fn route_of_next(&self, t: &Transfer) -> usize {
        let routes = t.routes.len();
        if !t.adaptive || routes == 1 {
            return t.next_route % routes;
        }
        let valiant = 1 + t.next_route % (routes - 1);
        let cost = |r: usize| {
            let route = &t.routes[r];
            let queued = route
                .get(1)
                .map_or(0, |&(link, _)| self.queued_toward(link));
            (queued + u64::from(self.mtu)) * route.len() as u64
        };
        if cost(0) <= cost(valiant) {
            0
        } else {
            valiant
        }
    }

    /// Bytes waiting for, or sent over and still buffered behind, `link`.
    fn queued_toward(&self, link: u32) -> u64 {
        let base = link as usize * CHANNELS;
        (base..base + CHANNELS)
            .map(|b| self.buffer - self.room[b])
            .sum()
    }

    /// `holder`'s head packet leaves (its last byte at `sent`): the holder's next packet, if
    /// any, waits for its own link.
    fn take_head(&mut self, holder: Holder, sent: u64) {
        match holder {
            Holder::Source(key) => {
                let t = self.transfers.get_mut(&key).expect("a source's transfer");
                t.to_inject -= t.to_inject.min(u64::from(self.mtu));
                t.next_route += 1;
                let first = t.routes[0][0].0;
                if t.to_inject == 0 {
                    self.schedule(sent, Event::Injected(key));
                } else {
                    self.waiting[first as usize].push_back(holder);
                }
            }
            Holder::Buffer(b) => {
                let packet = self.queued[b as usize]
                    .pop_front()
                    .expect("a waiting buffer");
                let credit_at = sent + self.hop_latency;
                self.schedule(
                    credit_at,
                    Event::Credit {
                        buffer: b,
                        bytes: packet.bytes,
                    },
                );
                if let Some(next) = self.queued[b as usize].front() {
                    let hop = usize::from(next.hop) + 1;
                    let link = self.transfers[&next.key].routes[usize::from(next.route)][hop].0;
                    self.waiting[link as usize].push_back(holder);
                    self.to_try.push(link);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "packets_tests.rs"]
mod tests;

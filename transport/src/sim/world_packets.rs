//! The scheduler's side of the packet-level network: transfers handed to it, and what it
//! reports back (a channel free again, a transfer arrived), landing in each channel's order.

use super::{Core, World};
use crate::sim::packets::Outcome;
use crate::sim::transfer::{Happening, Transfer};

/// Routes one transfer's packets spread over where routing is random (Valiant's).
const PACKET_ROUTES: u64 = 16;

impl World {
    /// Hands `t` (`bytes` with headers, first route `links`) to the packet network.
    pub(super) fn put_on_packets(
        &self,
        core: &mut Core,
        mut t: Transfer,
        links: Vec<u32>,
        bytes: u64,
    ) {
        let now = core.now;
        let (from, to) = t.data_path();
        let salt = (u64::from(t.initiator) << 40) ^ t.seq;
        let key = (t.initiator, t.seq);
        // The packets pay each hop's latency on their way, and take the routes random
        // routing would give them one by one.
        t.latency = 0;
        let minimal = self.cfg.adaptive_minimal(from, to);
        let adaptive = minimal.is_some();
        let mut routes: Vec<Vec<u32>> = minimal.into_iter().collect();
        if !routes.contains(&links) {
            routes.push(links);
        }
        for i in 1..PACKET_ROUTES {
            let salt = salt ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let (other, _) = self.cfg.route(from, to, salt);
            if !routes.contains(&other) {
                routes.push(other);
            }
        }
        let packets = core.packets.as_mut().expect("a packet network");
        packets.start(now, key, routes, adaptive, bytes);
        core.in_order
            .entry(t.channel())
            .or_default()
            .push_back((key, false));
        core.on_wire.insert(key, t);
    }

    /// A transfer of the packet network has left its initiator's side (its channel is free)
    /// or arrived.
    pub(super) fn packets_moved(&self, core: &mut Core, outcome: Outcome) {
        match outcome {
            Outcome::Injected(key) => {
                let channel = core.on_wire[&key].channel();
                self.release_channel(core, channel);
            }
            Outcome::Arrived(key) => {
                let channel = core.on_wire[&key].channel();
                let order = core.in_order.get_mut(&channel).expect("a channel's order");
                if let Some(entry) = order.iter_mut().find(|(k, _)| *k == key) {
                    entry.1 = true;
                }
                let mut landing = Vec::new();
                while order.front().is_some_and(|&(_, arrived)| arrived) {
                    landing.push(order.pop_front().expect("a front").0);
                }
                if order.is_empty() {
                    core.in_order.remove(&channel);
                }
                for key in landing {
                    let t = core.on_wire.remove(&key).expect("a packet transfer");
                    let (now, rank, seq) = (core.now, t.initiator, t.seq);
                    self.schedule(core, now, rank, seq, Happening::Arrive(t));
                }
            }
        }
    }
}

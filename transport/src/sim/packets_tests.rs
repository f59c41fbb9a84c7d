use super::*;

/// Links of these rates, none global, 1,000-byte packets.
fn network(capacity: Vec<f64>, hop_latency: u64, buffer: usize) -> PacketNetwork {
    let links = capacity.len();
    PacketNetwork::new(capacity, vec![false; links], hop_latency, 1000, buffer)
}

/// Runs the network until nothing is left; returns every outcome with its time.
fn drain(net: &mut PacketNetwork) -> Vec<(u64, Outcome)> {
    let mut seen = Vec::new();
    while let Some(at) = net.next_time() {
        seen.extend(net.advance(at).into_iter().map(|o| (at, o)));
    }
    seen
}

fn arrival(seen: &[(u64, Outcome)], key: FlowKey) -> u64 {
    seen.iter()
        .find(|(_, o)| *o == Outcome::Arrived(key))
        .map(|(at, _)| *at)
        .expect("arrived")
}

/// Three 1,000-byte packets over three hops of 1 B/ns and 100 ns: they follow each other a
/// packet's time apart, each hop store-and-forward; the source is free once the last has left.
#[test]
fn a_lone_transfer_pipelines_its_packets_hop_by_hop() {
    let mut net = network(vec![1.0; 3], 100, 4000);
    net.start(0, (0, 0), vec![vec![0, 1, 2]], false, 3000);
    let seen = drain(&mut net);
    let injected = seen
        .iter()
        .find(|(_, o)| *o == Outcome::Injected((0, 0)))
        .unwrap()
        .0;
    assert_eq!(injected, 3000);
    // The last packet leaves the source at 3,000, then two more hops of 1,100 ns and the last
    // 100 ns of latency.
    assert_eq!(arrival(&seen, (0, 0)), 5300);
    assert!(net.room.iter().all(|&r| r == 4000), "every credit is back");
    assert!(net.waiting.iter().all(VecDeque::is_empty));
    assert!(net.transfers.is_empty());
}

/// Links: 0 and 1 into a switch, 2 shared to a second switch, 3 to a receiver ten times slower
/// than its link, 4 to a normal one. Transfer A (rank 0 to the slow receiver) fills the
/// second switch's buffer; B (rank 1 to the normal receiver) waits behind A's packets in it.
fn shared_buffer(a_bytes: u64) -> u64 {
    let mut caps = vec![1.0; 5];
    caps[3] = 0.1;
    let mut net = network(caps, 10, 4000);
    if a_bytes > 0 {
        net.start(0, (0, 0), vec![vec![0, 2, 3]], false, a_bytes);
    }
    net.start(0, (1, 0), vec![vec![1, 2, 4]], false, 10_000);
    let seen = drain(&mut net);
    assert!(net.room.iter().all(|&r| r == 4000), "every credit is back");
    arrival(&seen, (1, 0))
}

#[test]
fn a_slow_receiver_blocks_traffic_that_shares_its_buffers() {
    let alone = shared_buffer(0);
    // Ten packets of 1 us each, three hops: about 12 us.
    assert!(alone < 13_000, "{alone}");
    // A pushes 100 KB into the slow link: B's packets queue behind A's in the shared buffer
    // and move at the slow link's pace.
    let behind_push = shared_buffer(100_000);
    assert!(behind_push > 4 * alone, "{behind_push} against {alone}");
    // A with two packets in the network (as a receiver pulling two at a time keeps it): B
    // waits for those only.
    let behind_two = shared_buffer(2_000);
    assert!(behind_two < 3 * alone, "{behind_two} against {alone}");
}

/// Two transfers from one rank take turns on its link, packet by packet.
#[test]
fn transfers_from_one_rank_share_its_link_in_turns() {
    let mut net = network(vec![1.0; 3], 0, 1 << 20);
    net.start(0, (0, 0), vec![vec![0, 1]], false, 3000);
    net.start(0, (0, 1), vec![vec![0, 2]], false, 3000);
    let seen = drain(&mut net);
    // The first is sending when the second comes, then they alternate: the first's packets
    // are sent by 1, 2 and 4 us, the second's by 3, 5 and 6 us; one more hop each.
    assert_eq!(arrival(&seen, (0, 0)), 5000);
    assert_eq!(arrival(&seen, (0, 1)), 7000);
}

/// A transfer with two routes through links of half the rate sends its packets over both in
/// turn, as fast as its first link lets them leave.
#[test]
fn packets_take_their_transfers_routes_in_turn() {
    let time = |routes: Vec<Vec<u32>>| {
        let mut net = network(vec![1.0, 0.5, 0.5, 1.0], 0, 4000);
        net.start(0, (0, 0), routes, false, 8000);
        arrival(&drain(&mut net), (0, 0))
    };
    let one = time(vec![vec![0, 1, 3]]);
    let two = time(vec![vec![0, 1, 3], vec![0, 2, 3]]);
    // Eight packets of 2 us on the half-rate link, then the last hop.
    assert_eq!(one, 8 * 2000 + 1000 + 1000);
    // The last leaves the first link at 8 us, then one half-rate hop and the last.
    assert_eq!(two, 8 * 1000 + 2000 + 1000);
}

/// A packet that has crossed a global link waits in another channel than one that has not:
/// A (global link 1, then link 2 to a slow receiver) backs up link 2's buffer without holding
/// up B (link 2 first, to a normal receiver); with link 1 not global they share it.
#[test]
fn channels_after_a_global_link_are_buffers_of_their_own() {
    let time_of_b = |global_link: bool| {
        let caps = vec![1.0, 1.0, 1.0, 0.1, 1.0, 1.0];
        let global = vec![false, global_link, false, false, false, false];
        let mut net = PacketNetwork::new(caps, global, 10, 1000, 4000);
        net.start(0, (0, 0), vec![vec![0, 1, 2, 3]], false, 100_000);
        net.start(0, (1, 0), vec![vec![4, 2, 5]], false, 10_000);
        let seen = drain(&mut net);
        assert!(net.room.iter().all(|&r| r == 4000), "every credit is back");
        arrival(&seen, (1, 0))
    };
    let apart = time_of_b(true);
    let shared = time_of_b(false);
    // B's ten packets take turns with A's on link 2: about twice its time alone.
    assert!(apart < 25_000, "{apart}");
    assert!(shared > 2 * apart, "{shared} against {apart}");
}

/// Adaptive: a transfer's packets leave the minimal route (link 1, its buffer filled by X's
/// packets for a receiver a hundred times slower than its link) for the longer one (links 2
/// and 4) and arrive long before they would behind X.
#[test]
fn adaptive_packets_go_around_a_full_buffer() {
    let time = |adaptive: bool| {
        let mut caps = vec![1.0; 7];
        caps[6] = 0.01;
        let mut net = network(caps, 10, 4000);
        net.start(0, (9, 0), vec![vec![5, 1, 6]], false, 100_000);
        assert!(net.advance(20_000).is_empty());
        let routes = vec![vec![0, 1, 3], vec![0, 2, 4, 3]];
        net.start(20_000, (0, 0), routes, adaptive, 10_000);
        arrival(&drain(&mut net), (0, 0)) - 20_000
    };
    let around = time(true);
    let behind = time(false);
    // Alternating with the minimal route while link 1's buffer is empty would be about 12 us;
    // around: ten packets of 1 us, three hops.
    assert!(around < 15_000, "{around}");
    assert!(behind > 5 * around, "{behind} against {around}");
}

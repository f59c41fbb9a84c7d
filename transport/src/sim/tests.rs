use std::time::Duration;

use super::*;

/// Runs `f` on every rank of a simulated job, each on its own thread.
fn run<T: Send>(cfg: SimConfig, f: impl Fn(&SimFabric) -> T + Sync) -> Vec<T> {
    let fabrics = create(cfg).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = fabrics
            .into_iter()
            .map(|fab| {
                let f = &f;
                s.spawn(move || f(&fab))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn wait_event(f: &SimFabric) -> Event {
    f.wait(Some(Duration::from_secs(100)))
        .unwrap()
        .expect("an event")
}

/// A 1 MB put over one 1 GB/s link takes 1 ms of virtual time, plus overhead and latency,
/// and its completion comes back one latency later; a message follows the same channel.
#[test]
fn a_put_takes_the_time_the_model_gives_it() {
    let times = timed_put(SimConfig::switch(2));
    // Overhead 0.2 us, 1 ms on the wire, 1 us to land, 1 us back.
    assert_eq!(
        times[0],
        Duration::from_nanos(200 + 1_000_000 + 1_000 + 1_000)
    );
    assert!(times[1] > Duration::from_millis(1));
}

/// Over packets of 1,000 bytes the put's last packet leaves after the same 1 ms, then takes
/// its two hops (0.5 us latency each, 1 us on the second link), and the completion comes back.
#[test]
fn over_packets_a_put_pipelines_hop_by_hop() {
    let cfg = SimConfig {
        network: NetworkModel::Packets {
            mtu: 1000,
            buffer: 4000,
        },
        ..SimConfig::switch(2)
    };
    let times = timed_put(cfg);
    assert_eq!(
        times[0],
        Duration::from_nanos(200 + 1_000_000 + 500 + 1_000 + 500 + 1_000)
    );
}

/// Rank 0 puts 1 MB (of 7s) into rank 1 over 1 GB/s links; each rank's time from then until
/// its side is done.
fn timed_put(mut cfg: SimConfig) -> Vec<Duration> {
    cfg.link_bandwidth = 1e9;
    cfg.header_bytes = 0;
    run(cfg, |f| {
        let region = f.alloc_region(1_000_000).unwrap();
        if f.rank() == 1 {
            f.send(0, &region.remote().to_bytes()).unwrap();
            match wait_event(f) {
                Event::Message { src: 0, data } => assert_eq!(&data[..], b"done"),
                other => panic!("{other:?}"),
            }
            let mut first = [0u8; 4];
            region.read(0, &mut first).unwrap();
            assert_eq!(first, [7; 4]);
            return f.now();
        }
        let peer = match wait_event(f) {
            Event::Message { data, .. } => crate::RemoteRegion::from_bytes(&data).unwrap(),
            other => panic!("{other:?}"),
        };
        region.fill(0, 1_000_000, 7).unwrap();
        let start = f.now();
        let op = f.put(&region, 0, 1_000_000, peer.at(0), None).unwrap();
        f.send(1, b"done").unwrap();
        match wait_event(f) {
            Event::Completed { op: done, result } => {
                assert_eq!(done, op);
                result.unwrap();
            }
            other => panic!("{other:?}"),
        }
        f.now() - start
    })
}

/// The same program gives the same virtual times every run.
#[test]
fn runs_are_deterministic() {
    let program = |f: &SimFabric| {
        let n = f.size() as Rank;
        let mut seen = Vec::new();
        for round in 0..20u32 {
            for k in 1..n {
                let dest = (f.rank() + k) % n;
                let len = ((round as usize * 997 + f.rank() as usize * 31) % 4000) + 1;
                f.send(dest, &vec![round as u8; len]).unwrap();
            }
            let mut got = 0;
            while got + 1 < n {
                match wait_event(f) {
                    Event::Message { src, .. } => {
                        seen.push((src, f.now()));
                        got += 1;
                    }
                    // A rank done with all its rounds leaves (after everything it sent).
                    Event::PeerFailed { .. } => {}
                    other => panic!("{other:?}"),
                }
            }
        }
        seen
    };
    let mut cfg = SimConfig::switch(6);
    cfg.link_bandwidth = 1e8;
    let first = run(cfg.clone(), program);
    for _ in 0..3 {
        assert_eq!(run(cfg.clone(), program), first);
    }
    // Packets through small buffers on a Dragonfly of three groups, routed adaptively.
    cfg.network = NetworkModel::Packets {
        mtu: 512,
        buffer: 1024,
    };
    cfg.topology = Topology::Dragonfly {
        ranks_per_router: 1,
        routers_per_group: 2,
        globals_per_router: 1,
        routing: DragonflyRouting::Adaptive,
    };
    let first = run(cfg.clone(), program);
    for _ in 0..3 {
        assert_eq!(run(cfg.clone(), program), first);
    }
}

/// A rank that waits for a message nobody sends ends with its peers failed instead of
/// hanging.
#[test]
fn a_stalled_job_ends_instead_of_hanging() {
    let mut cfg = SimConfig::switch(2);
    cfg.stall_limit = Duration::from_millis(50);
    let got = run(cfg, |f| f.wait(None).unwrap());
    assert_eq!(got[0], Some(Event::PeerFailed { rank: 1 }));
    assert_eq!(got[1], Some(Event::PeerFailed { rank: 0 }));
}

/// Across a WAN link, a transfer pays its latency and its bandwidth, which can change.
#[test]
fn a_wan_link_slows_what_crosses_it() {
    let mut cfg = SimConfig::switch(4);
    cfg.header_bytes = 0;
    // Flows, not packets, however small.
    cfg.flow_above = 0;
    cfg.topology = Topology::Clusters {
        cluster_ranks: 2,
        wan_bandwidth: 1e8,
        wan_latency: Duration::from_millis(10),
        wan_changes: vec![WanChange {
            at: Duration::from_micros(50),
            link: WanLink::Between { from: 0, to: 1 },
            bandwidth: 5e7,
        }],
    };
    let arrivals = run(cfg, |f| {
        if f.rank() == 0 {
            f.send(1, &[0; 1000]).unwrap();
            f.send(2, &[0; 10_000]).unwrap();
            return Duration::ZERO;
        }
        if f.rank() == 3 {
            return Duration::ZERO;
        }
        loop {
            match wait_event(f) {
                Event::Message { src: 0, .. } => return f.now(),
                Event::PeerFailed { .. } => {}
                other => panic!("{other:?}"),
            }
        }
    });
    // Rank 0 pays 0.2 us of overhead per send, one after the other. Within the cluster: 1000
    // B at 12.5 GB/s (80 ns; alone on the uplink, the second send leaves later), two hops.
    assert_eq!(arrivals[1], Duration::from_nanos(200 + 80 + 1_000));
    // Across, from 400 ns: 4,960 B at 100 MB/s until the change at 50 us, the other 5,040 B
    // at 50 MB/s (100.8 us), then two hops and the WAN's 10 ms.
    assert_eq!(
        arrivals[2],
        Duration::from_nanos(50_000 + 100_800 + 1_000 + 10_000_000)
    );
}

/// Packets into one rank queue at its link: three 1,000-byte messages at 1 GB/s land 1 us
/// apart.
#[test]
fn packets_into_one_rank_take_turns_on_its_link() {
    let mut cfg = SimConfig::switch(4);
    cfg.header_bytes = 0;
    cfg.link_bandwidth = 1e9;
    let got = run(cfg, |f| {
        if f.rank() != 0 {
            f.send(0, &[f.rank() as u8; 1000]).unwrap();
            // Stays until rank 0 has everything.
            while !matches!(wait_event(f), Event::Message { .. }) {}
            return Vec::new();
        }
        let mut arrivals = Vec::new();
        while arrivals.len() < 3 {
            if let Event::Message { src, .. } = wait_event(f) {
                arrivals.push((src, f.now()));
            }
        }
        for r in 1..4 {
            f.send(r, b"bye").unwrap();
        }
        arrivals
    });
    let ns = |n| Duration::from_nanos(n);
    // Each leaves after 0.2 us of overhead; the first holds rank 0's link for 1 us from
    // then, the next two wait their turns; each lands two hops (1 us) after its last byte.
    assert_eq!(got[0], vec![(1, ns(2_200)), (2, ns(3_200)), (3, ns(4_200))]);
}

/// Packets of one channel's transfers spread over Valiant's routes, some shorter than others,
/// yet its messages land in the order they were sent.
#[test]
fn over_packets_a_channels_messages_keep_their_order() {
    let cfg = SimConfig {
        network: NetworkModel::Packets {
            mtu: 1024,
            buffer: 4096,
        },
        topology: Topology::Dragonfly {
            ranks_per_router: 1,
            routers_per_group: 2,
            globals_per_router: 2,
            routing: DragonflyRouting::Valiant,
        },
        ..SimConfig::switch(10)
    };
    let got = run(cfg, |f| {
        let count = 200u32;
        match f.rank() {
            0 => {
                for i in 0..count {
                    let len = if i % 3 == 0 { 20_000 } else { 8 };
                    let mut data = vec![0u8; len];
                    data[..4].copy_from_slice(&i.to_le_bytes());
                    f.send(3, &data).unwrap();
                }
                // Stays until rank 3 has everything.
                while !matches!(wait_event(f), Event::Message { .. }) {}
                Vec::new()
            }
            3 => {
                let mut order = Vec::new();
                while order.len() < count as usize {
                    if let Event::Message { src: 0, data } = wait_event(f) {
                        order.push(u32::from_le_bytes(data[..4].try_into().unwrap()));
                    }
                }
                f.send(0, b"bye").unwrap();
                order
            }
            _ => Vec::new(),
        }
    });
    assert_eq!(got[3], (0..200).collect::<Vec<u32>>());
}

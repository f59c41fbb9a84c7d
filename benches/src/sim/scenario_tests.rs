use super::*;

#[test]
fn a_scenario_file_sets_what_it_names() {
    let s = parse(
        "# a what-if\nranks = 8, 10\ntopology = dragonfly 1,2,2 valiant\n\
         network = packets 4K 16K   # small buffers\nlink_bandwidth = 1000\n\
         slow_receivers = 0.25 4\noperations = barrier, bcast 64K, allreduce 16, pairs 1M\n\
         repeat = 2\n",
        "file",
    )
    .unwrap();
    assert_eq!(s.name, "file");
    assert_eq!(s.ranks, vec![8, 10]);
    assert_eq!(
        s.network.network,
        NetworkModel::Packets {
            mtu: 4096,
            buffer: 16384
        }
    );
    assert!(matches!(
        s.network.topology,
        Topology::Dragonfly {
            routing: DragonflyRouting::Valiant,
            ..
        }
    ));
    assert_eq!(s.network.link_bandwidth, 1e9);
    assert_eq!(
        s.operations,
        vec![
            Operation::Barrier,
            Operation::Bcast(64 << 10),
            Operation::Allreduce(16),
            Operation::Pairs(1 << 20)
        ]
    );
    assert_eq!(s.repeat, 2);
    let cfg = job(&s, 8);
    assert_eq!(cfg.slow_receivers, vec![(0, 0.25), (4, 0.25)]);
}

#[test]
fn mistakes_name_their_line() {
    for (text, says) in [
        ("ranks = 1\noperations = barrier", "line 1"),
        ("ranks = 4\noperations = scatter 4K", "line 2: operation"),
        ("ranks = 4\ntopology = torus 4", "line 2: topology"),
        ("ranks = 4\nbogus = 1", "no setting"),
        (
            "ranks = 4\nnetwork = packets 4K 1K\noperations = barrier",
            "buffers",
        ),
        ("ranks = 4", "needs `ranks` and `operations`"),
        ("ranks 4", "not `key = value`"),
    ] {
        let e = parse(text, "x").unwrap_err();
        assert!(e.contains(says), "{text:?}: {e}");
    }
}

/// A small scenario runs end to end: every operation gets a positive time at each size.
#[test]
fn a_small_scenario_runs() {
    let s = parse(
        "ranks = 4, 6\ntopology = fattree 2 1.0\nnetwork = packets 1K 4K\n\
         operations = barrier, bcast 10K, allreduce 100, allgather 1K, alltoall 1K, pairs 64K\n",
        "small",
    )
    .unwrap();
    let figure = run(&s, &mut |_| {}).unwrap();
    assert_eq!(figure.series.len(), 6);
    for series in &figure.series {
        assert_eq!(series.points.len(), 2);
        assert!(series.points.iter().all(|p| p.1 > 0.0), "{series:?}");
    }
}

//! The shm endpoint's exclusive poller (`Fabric::take_poller`): while it is out, it alone
//! hands out events and the endpoint's own polls fail; dropping it gives polling back, with
//! nothing lost or repeated in between.

use std::time::{Duration, Instant};

use rdcoll_transport::shm::ShmFabric;
use rdcoll_transport::{Event, Fabric, FabricConfig, TransportError};

/// The next message through `poll`, within a few seconds.
fn message(mut poll: impl FnMut() -> Option<Event>) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Some(Event::Message { src: 0, data }) = poll() {
            return data.to_vec();
        }
    }
    panic!("no message within 5 s");
}

#[test]
fn the_poller_alone_polls_until_dropped_and_nothing_is_lost() {
    let job = ShmFabric::job_in_process(2, &FabricConfig::default()).expect("shm job");
    let (a, b) = (&job[0], &job[1]);
    a.send(1, b"before").unwrap();
    let mut poller = b.take_poller().expect("shm has an exclusive poller");
    assert!(
        b.take_poller().is_none(),
        "a second poller while the first is out"
    );
    assert!(matches!(b.poll(), Err(TransportError::InvalidArgument(_))));
    assert!(matches!(
        b.poll_with(&mut |_| {}),
        Err(TransportError::InvalidArgument(_))
    ));
    assert_eq!(message(|| poller.poll().unwrap()), b"before");
    for i in 0..1000u32 {
        a.send(1, &i.to_le_bytes()).unwrap();
        let got = message(|| {
            let mut out = None;
            poller
                .poll_with(&mut |ev| out = Some(ev.into_owned()))
                .unwrap();
            out
        });
        assert_eq!(got, i.to_le_bytes());
    }
    a.send(1, b"after").unwrap();
    assert!(
        b.pending(),
        "pending() sees records while the poller is out"
    );
    drop(poller);
    assert_eq!(message(|| b.poll().unwrap()), b"after");
    let again = b.take_poller();
    assert!(again.is_some(), "the right to poll came back with the drop");
}

/// A pair whose ring from rank 0 to rank 1 is full, with rank 0's further records in its
/// backlog.
fn with_a_backlog() -> Vec<ShmFabric> {
    let cfg = FabricConfig {
        // The smallest ring the settings allow.
        shm_ring_bytes: Some(256 << 10),
        ..FabricConfig::default()
    };
    let job = ShmFabric::job_in_process(2, &cfg).expect("shm job");
    let chunk = vec![7u8; 16 << 10];
    let mut sent = 0;
    while !job[0].backlogged(1) {
        job[0].send(1, &chunk).unwrap();
        sent += 1;
        assert!(sent < 1000, "the ring never filled");
    }
    job
}

#[test]
fn a_batch_moves_the_backlog_as_soon_as_the_peer_makes_room() {
    let job = with_a_backlog();
    let (a, b) = (&job[0], &job[1]);
    for i in 0..4u8 {
        b.send(0, &[i]).unwrap();
    }
    let mut poller = a.take_poller().expect("shm has an exclusive poller");
    let mut seen = 0;
    let handled = poller
        .poll_batch(64, &mut |_| {
            seen += 1;
            if seen == 1 {
                // The peer takes everything queued for it: its ring from us has room again.
                while matches!(b.poll(), Ok(Some(_))) {}
            }
        })
        .unwrap();
    assert_eq!(handled, 4);
    assert!(
        !a.backlogged(1),
        "the records waiting for room stayed behind for the whole batch"
    );
}

#[test]
fn a_sleep_first_moves_a_backlog_the_peer_made_room_for() {
    let job = with_a_backlog();
    let (a, b) = (&job[0], &job[1]);
    // The peer makes room, and rings rank 0's doorbell, before rank 0 goes to sleep.
    while matches!(b.poll(), Ok(Some(_))) {}
    a.block(Duration::from_millis(200));
    assert!(
        !a.backlogged(1),
        "rank 0 slept with records its peer had made room for"
    );
}

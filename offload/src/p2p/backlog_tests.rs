//! Nonblocking sends while the channel to their destination is backed up: from 16 KiB they go
//! by rendezvous (the receive copies them once, from the sender's buffer), shorter ones still
//! eagerly behind the queued messages, and the receiver gets them all in order.

use std::sync::Arc;

use rdcoll_transport::shm::ShmFabric;
use rdcoll_transport::{Fabric, FabricConfig};

use super::send::BACKLOG_RENDEZVOUS_MIN;
use super::{Engine, P2pConfig, Req, ReqId, Source, Started, TagSel};
use crate::{Mode, NiConfig};

fn two_engines_on_small_rings() -> (Arc<Engine>, Arc<Engine>) {
    two_engines_with(P2pConfig::default())
}

fn two_engines_with(p2p: P2pConfig) -> (Arc<Engine>, Arc<Engine>) {
    let cfg = FabricConfig {
        // The smallest ring the settings allow: a few messages fill it.
        shm_ring_bytes: Some(256 << 10),
        ..FabricConfig::default()
    };
    let mut fabrics = ShmFabric::job_in_process(2, &cfg).expect("shm job");
    let ni = NiConfig {
        mode: Mode::Inline,
        ..NiConfig::default()
    };
    let engine = |f| Engine::new(Arc::new(f) as Arc<dyn Fabric>, ni.clone(), p2p, 2);
    let one = engine(fabrics.pop().unwrap()).unwrap();
    let zero = engine(fabrics.pop().unwrap()).unwrap();
    (zero, one)
}

fn message(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

#[test]
fn a_long_isend_behind_a_full_channel_goes_by_rendezvous_and_order_holds() {
    let (zero, one) = two_engines_on_small_rings();
    let mut sent = Vec::new();
    // Eager messages until the channel to rank 1 is full and rank 0 queues its own.
    while !zero.ni().fabric().backlogged(1) {
        let m = message(sent.len(), 8 << 10);
        // SAFETY: an eager send copies the buffer before returning (asserted below).
        let started = unsafe { zero.isend_started(m.as_ptr(), m.len(), 1, 3, 0) }.unwrap();
        assert!(
            matches!(started, Started::Done(_)),
            "an 8 KiB isend with credit is eager"
        );
        sent.push(m);
        assert!(sent.len() < 1000, "the channel never filled");
    }
    let long = message(sent.len(), BACKLOG_RENDEZVOUS_MIN);
    // SAFETY: `long` outlives the request, waited for below.
    let pending = match unsafe { zero.isend_started(long.as_ptr(), long.len(), 1, 3, 0) }.unwrap() {
        Started::Pending(id) => id,
        Started::Done(_) => panic!("a 16 KiB isend behind a full channel was copied eagerly"),
    };
    sent.push(long.clone());
    let short = message(sent.len(), (16 << 10) - 1);
    // SAFETY: as above (asserted eager).
    let started = unsafe { zero.isend_started(short.as_ptr(), short.len(), 1, 3, 0) }.unwrap();
    assert!(
        matches!(started, Started::Done(_)),
        "below 16 KiB the isend stays eager"
    );
    sent.push(short);

    receive_in_order(one, sent, &zero, &[pending]);
}

#[test]
fn without_credit_a_long_isend_behind_a_full_channel_takes_the_no_credit_rendezvous() {
    // Credit for a little more than the ring holds.
    let (zero, one) = two_engines_with(P2pConfig {
        unexpected_max: 300 << 10,
        ..P2pConfig::default()
    });
    let mut sent = Vec::new();
    let mut pending = Vec::new();
    while !zero.ni().fabric().backlogged(1) || zero.credits.has(1, BACKLOG_RENDEZVOUS_MIN) {
        let m = message(sent.len(), 8 << 10);
        // SAFETY: `m` is kept in `sent` until every request is waited for below.
        match unsafe { zero.isend_started(m.as_ptr(), m.len(), 1, 3, 0) }.unwrap() {
            Started::Done(_) => {}
            Started::Pending(id) => pending.push(id),
        }
        sent.push(m);
        assert!(
            sent.len() < 1000,
            "neither the channel nor the credit ran out"
        );
    }
    let long = message(sent.len(), BACKLOG_RENDEZVOUS_MIN);
    // SAFETY: `long` is kept in `sent` until its request is waited for.
    let id = match unsafe { zero.isend_started(long.as_ptr(), long.len(), 1, 3, 0) }.unwrap() {
        Started::Pending(id) => id,
        Started::Done(_) => panic!("a 16 KiB isend without credit was copied eagerly"),
    };
    let noticed = match zero.inner.lock().reqs.get_mut(id.0) {
        Some(Req::Send(s)) => s.take_notice().is_some(),
        _ => false,
    };
    assert!(
        noticed,
        "without credit the isend must be the no-credit rendezvous, whose receiver hears when its sender waits"
    );
    pending.push(id);
    sent.push(long);
    receive_in_order(one, sent, &zero, &pending);
}

/// Rank 1 receives `sent` in order (checking lengths and bytes, against its own copy) while
/// rank 0 waits for its `pending` sends, whose buffers `sent` keeps alive until they end.
fn receive_in_order(one: Arc<Engine>, sent: Vec<Vec<u8>>, zero: &Engine, pending: &[ReqId]) {
    let expected = sent.clone();
    let receiver = std::thread::spawn(move || {
        for (i, want) in expected.iter().enumerate() {
            let mut got = vec![0u8; 64 << 10];
            // SAFETY: `got` outlives the request, waited for at once.
            let id = unsafe {
                one.irecv(
                    got.as_mut_ptr(),
                    got.len(),
                    Source::Rank(0),
                    TagSel::Value(3),
                    0,
                )
            };
            let status = one.wait(id.unwrap()).unwrap();
            assert_eq!(status.len, want.len(), "message {i} out of order");
            assert_eq!(&got[..status.len], &want[..], "message {i}'s bytes");
        }
    });
    for &id in pending {
        zero.wait(id).unwrap();
    }
    receiver.join().unwrap();
    drop(sent);
}

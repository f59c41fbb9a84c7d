//! Rendezvous fetches and the core that makes them, where a get is a copy in the call
//! (shm, local): a receive posted after its message arrived leaves the copy to the next
//! progress pass instead of making it inside the post, and a rank that is also sending long
//! messages to the sender reads the whole message itself instead of asking the sender to
//! write a share of it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdcoll_transport::shm::ShmFabric;
use rdcoll_transport::{Fabric, FabricConfig};

use super::{Engine, P2pConfig, Source, TagSel};
use crate::{Mode, NiConfig};

fn engines(fabrics: Vec<impl Fabric + 'static>) -> (Arc<Engine>, Arc<Engine>) {
    engines_in(fabrics, Mode::Inline)
}

fn engines_in(mut fabrics: Vec<impl Fabric + 'static>, mode: Mode) -> (Arc<Engine>, Arc<Engine>) {
    let ni = NiConfig {
        mode,
        ..NiConfig::default()
    };
    let cfg = P2pConfig::default();
    let engine = |f| Engine::new(Arc::new(f) as Arc<dyn Fabric>, ni.clone(), cfg, 2);
    let one = engine(fabrics.pop().unwrap()).unwrap();
    let zero = engine(fabrics.pop().unwrap()).unwrap();
    (zero, one)
}

fn message(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (seed * 31 + j * 7 % 251) as u8).collect()
}

/// Drives `engine`'s passes until a message from `source` with `tag` is queued.
fn until_queued(engine: &Engine, source: u32, tag: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine
        .iprobe(Source::Rank(source), TagSel::Value(tag), 0)
        .unwrap()
        .is_none()
    {
        assert!(Instant::now() < deadline, "the announcement never arrived");
        std::thread::yield_now();
    }
}

#[test]
fn a_receive_posted_after_its_rendezvous_copies_at_the_next_pass() {
    let (zero, one) = engines(rdcoll_transport::local::create(2).expect("local job"));
    let data = message(1, 200 << 10);
    // SAFETY: `data` outlives the request, waited for below.
    let send = unsafe { zero.isend(data.as_ptr(), data.len(), 1, 5, 0) }.unwrap();
    until_queued(&one, 0, 5);

    let mut got = vec![0u8; data.len()];
    let into = got.as_mut_ptr();
    // SAFETY: `got` outlives the request, waited for below; until then it is only read
    // through `into`.
    let recv = unsafe { one.irecv(into, data.len(), Source::Rank(0), TagSel::Value(5), 0) };
    let recv = recv.unwrap();
    // SAFETY: `into` holds `data.len()` bytes; read while no get runs (no pass since).
    let last = unsafe { std::ptr::read_volatile(into.add(data.len() - 1)) };
    assert_eq!(last, 0, "the post copied the message itself");
    assert!(
        one.ni().directs_left(),
        "the matched receive is left marked for the next pass"
    );

    // What a collective's wait does: passes on fabric news or the mark, and nothing else.
    let fabric = one.ni().fabric().clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    while one.ni().directs_left() || fabric.pending() {
        one.ni().progress();
        assert!(Instant::now() < deadline, "the deferred fetch never ran");
    }
    assert_eq!(one.wait(recv).unwrap().len, data.len());
    assert_eq!(zero.wait(send).unwrap().len, data.len());
    assert_eq!(got, data);
}

#[test]
fn a_rank_sending_long_messages_to_its_sender_reads_the_whole_message_itself() {
    let fabrics = ShmFabric::job_in_process(2, &FabricConfig::default()).expect("shm job");
    let (zero, one) = engines(fabrics);
    let len = 256 << 10;
    let to_one = message(2, len);
    let to_zero = message(3, len);
    // SAFETY: both buffers outlive their requests, waited for below.
    let zero_sends = unsafe { zero.isend(to_one.as_ptr(), len, 1, 7, 0) }.unwrap();
    // SAFETY: as above.
    let one_sends = unsafe { one.isend(to_zero.as_ptr(), len, 0, 7, 0) }.unwrap();
    until_queued(&one, 0, 7);

    // Rank 1 receives while rank 0 makes no progress at all: with a share of the copy asked
    // of rank 0 (a split put on shm) this would wait for it.
    let mut got = vec![0u8; len];
    // SAFETY: `got` outlives the request, waited for below.
    let recv = unsafe { one.irecv(got.as_mut_ptr(), len, Source::Rank(0), TagSel::Value(7), 0) };
    let recv = recv.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = one.test(recv).unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the receive waited for its sender to write a share"
        );
        std::thread::yield_now();
    };
    assert_eq!(status.len, len);
    assert_eq!(got, to_one);

    // Then rank 0 receives too, and both sends end.
    let mut back = vec![0u8; len];
    // SAFETY: `back` outlives the request, waited for at once.
    let id = unsafe { zero.irecv(back.as_mut_ptr(), len, Source::Rank(1), TagSel::Value(7), 0) };
    assert_eq!(zero.wait(id.unwrap()).unwrap().len, len);
    assert_eq!(back, to_zero);
    assert_eq!(zero.wait(zero_sends).unwrap().len, len);
    assert_eq!(one.wait(one_sends).unwrap().len, len);
}

/// Posts a receive for the 200 KiB rendezvous rank 0 sent to rank 1 once it is queued there,
/// and returns whether the post left the fetch marked for a later pass, then finishes both.
fn post_after_arrival_defers(zero: &Engine, one: &Engine) -> bool {
    let data = message(4, 200 << 10);
    // SAFETY: `data` outlives the request, waited for below.
    let send = unsafe { zero.isend(data.as_ptr(), data.len(), 1, 9, 0) }.unwrap();
    until_queued(one, 0, 9);
    let mut got = vec![0u8; data.len()];
    // SAFETY: `got` outlives the request, waited for below.
    let recv = unsafe {
        one.irecv(
            got.as_mut_ptr(),
            got.len(),
            Source::Rank(0),
            TagSel::Value(9),
            0,
        )
    };
    let deferred = one.ni().directs_left();
    let sender = std::thread::scope(|s| {
        let sender = s.spawn(|| zero.wait(send).map(|st| st.len));
        assert_eq!(one.wait(recv.unwrap()).unwrap().len, data.len());
        sender.join().unwrap()
    });
    assert_eq!(sender.unwrap(), data.len());
    assert_eq!(got, data);
    deferred
}

#[test]
fn a_thread_mode_receive_starts_its_fetch_in_the_post() {
    let fabrics = rdcoll_transport::local::create(2).expect("local job");
    let (zero, one) = engines_in(fabrics, Mode::Thread);
    assert!(
        !post_after_arrival_defers(&zero, &one),
        "thread mode deferred the fetch"
    );
}

#[test]
fn without_cross_memory_attach_the_fetch_starts_in_the_post() {
    let cfg = FabricConfig {
        shm_cma: false,
        ..FabricConfig::default()
    };
    let (zero, one) = engines(ShmFabric::job_in_process(2, &cfg).expect("shm job"));
    assert!(
        !post_after_arrival_defers(&zero, &one),
        "a bounce get was deferred"
    );
    // The same job with cross-memory attach defers it (the check above can fail).
    let (zero, one) = engines(ShmFabric::job_in_process(2, &FabricConfig::default()).unwrap());
    assert!(
        post_after_arrival_defers(&zero, &one),
        "a copy in the call was not deferred"
    );
}

//! In thread mode every host call that posts or sends notes that a host thread works in the
//! library (`Ni::note_host_polling`), not only a wait's polls: the agent stands aside while
//! the host posts a window of messages instead of taking the state lock in the middle of it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rdcoll_transport::Fabric;

use super::{Engine, P2pConfig, Source, TagSel};
use crate::{Mode, NiConfig};

fn engines(mode: Mode) -> (Arc<Engine>, Arc<Engine>) {
    engines_with(NiConfig {
        mode,
        ..NiConfig::default()
    })
}

fn engines_with(ni: NiConfig) -> (Arc<Engine>, Arc<Engine>) {
    let mut fabrics = rdcoll_transport::local::create(2).expect("local job");
    let engine = |f| {
        Engine::new(
            Arc::new(f) as Arc<dyn Fabric>,
            ni.clone(),
            P2pConfig::default(),
            2,
        )
        .unwrap()
    };
    let one = engine(fabrics.pop().unwrap());
    let zero = engine(fabrics.pop().unwrap());
    (zero, one)
}

/// The host threads' polls and posts so far at `engine`'s NI.
fn host_calls(engine: &Engine) -> u64 {
    let shared = &engine.ni.shared;
    shared.host_polls.load(Ordering::Relaxed) + shared.host_posts.load(Ordering::Relaxed)
}

#[test]
fn posting_and_sending_note_the_host_in_thread_mode() {
    let (zero, one) = engines(Mode::Thread);
    let mut got = [0u8; 8];

    let before = host_calls(&one);
    // SAFETY: `got` outlives the request, waited for below.
    let recv = unsafe { one.irecv(got.as_mut_ptr(), 8, Source::Rank(0), TagSel::Value(3), 0) };
    let recv = recv.unwrap();
    assert_ne!(host_calls(&one), before, "irecv left the agent free to run");

    let before = host_calls(&zero);
    let data = 7u64.to_le_bytes();
    // SAFETY: `data` outlives the request, waited for below.
    let send = unsafe { zero.isend(data.as_ptr(), 8, 1, 3, 0) }.unwrap();
    assert_ne!(
        host_calls(&zero),
        before,
        "isend left the agent free to run"
    );

    let before = host_calls(&zero);
    zero.send_from(&data, 1, 4, 0).unwrap();
    assert_ne!(
        host_calls(&zero),
        before,
        "a blocking send left the agent free to run"
    );

    zero.wait(send).unwrap();
    one.wait(recv).unwrap();
    assert_eq!(got, data);
    let mut second = [0u8; 8];
    one.recv_into(&mut second, Source::Rank(0), TagSel::Value(4), 0)
        .unwrap();
    assert_eq!(second, data);
}

#[test]
fn inline_mode_keeps_no_count() {
    let (zero, one) = engines(Mode::Inline);
    let data = 9u64.to_le_bytes();
    zero.send_from(&data, 1, 1, 0).unwrap();
    let mut got = [0u8; 8];
    one.recv_into(&mut got, Source::Rank(0), TagSel::Value(1), 0)
        .unwrap();
    assert_eq!(got, data);
    assert_eq!(host_calls(&zero) + host_calls(&one), 0);
}

/// The agent's own work never counts as the host's: a rendezvous receive that the agent
/// completes while the host stays out of the library (the collector takes the match and
/// issues the gets on the agent's thread) leaves the count where the post left it. An agent
/// that noted itself would stand aside after each such receive.
#[test]
fn the_agent_completing_a_receive_does_not_note_the_host() {
    let (zero, one) = engines(Mode::Thread);
    let len = 200 << 10;
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
    let mut got = vec![0u8; len];
    let into = got.as_mut_ptr();
    // SAFETY: `got` outlives the request, waited for below; until then it is only read
    // through `into`, one byte at a time.
    let recv = unsafe { one.irecv(into, len, Source::Rank(0), TagSel::Value(9), 0) }.unwrap();
    let after_post = host_calls(&one);
    // SAFETY: `data` outlives the request, waited for below.
    let send = unsafe { zero.isend(data.as_ptr(), len, 1, 9, 0) }.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // The receiver's host only reads its own memory until the last byte has landed.
    // SAFETY: `into + len - 1` is inside `got`; the agent writes it once, and a volatile
    // byte read sees either the old or the new value.
    while unsafe { std::ptr::read_volatile(into.add(len - 1)) } != data[len - 1] {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent did not complete the receive on its own"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        host_calls(&one),
        after_post,
        "the agent's own work counted as the host's"
    );
    zero.wait(send).unwrap();
    one.wait(recv).unwrap();
    assert_eq!(got, data);
}

/// A host thread that only posts (eager sends, complete at once, and never a wait that drives
/// progress) keeps the agent aside for a while at most (the grace, here 1 s, after its last
/// poll): a rendezvous receive it posted before still gets its message, the agent doing the
/// work. Posts that kept the agent aside like polls would hold it off for the whole test.
#[test]
fn a_host_that_only_posts_leaves_the_agent_its_work() {
    let (zero, one) = engines_with(NiConfig {
        mode: Mode::Thread,
        agent_grace: std::time::Duration::from_secs(1),
        ..NiConfig::default()
    });
    let len = 200 << 10;
    let data: Vec<u8> = (0..len).map(|i| (i % 249) as u8).collect();
    let mut got = vec![0u8; len];
    // SAFETY: `got` outlives the request, waited for below.
    let recv = unsafe { zero.irecv(got.as_mut_ptr(), len, Source::Rank(1), TagSel::Value(1), 0) };
    let recv = recv.unwrap();
    // A pass of the host's own: its posts from here on keep the agent aside, for a while.
    zero.progress().unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: `data` outlives the request, waited for here.
            let send = unsafe { one.isend(data.as_ptr(), len, 0, 1, 0) }.unwrap();
            one.wait(send).unwrap();
            done.store(true, Ordering::Release);
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !done.load(Ordering::Acquire) {
            assert!(
                std::time::Instant::now() < deadline,
                "the agent stood aside while the host only posted"
            );
            zero.send_from(&[1u8; 8], 1, 2, 0).unwrap();
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    });
    zero.wait(recv).unwrap();
    assert_eq!(got, data);
}

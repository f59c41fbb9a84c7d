//! In thread mode every host call that posts or sends notes that a host thread works in the
//! library (`Ni::note_host_polling`), not only a wait's polls: the agent stands aside while
//! the host posts a window of messages instead of taking the state lock in the middle of it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rdcoll_transport::Fabric;

use super::{Engine, P2pConfig, Source, TagSel};
use crate::{Mode, NiConfig};

fn engines(mode: Mode) -> (Arc<Engine>, Arc<Engine>) {
    let mut fabrics = rdcoll_transport::local::create(2).expect("local job");
    let ni = NiConfig {
        mode,
        ..NiConfig::default()
    };
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

/// The host-call count of `engine`'s NI.
fn host_calls(engine: &Engine) -> u64 {
    engine.ni.shared.host_polls.load(Ordering::Relaxed)
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

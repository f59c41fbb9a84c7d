//! The NI's collector of matched direct receives when the engine is busy: a rendezvous
//! receive matched by a pass that could not hand it to the engine (another thread was in the
//! engine's calls) must still get its gets issued by a later pass, even though nothing new
//! arrives from the fabric for it (its sender waits for those gets). A collective's wait
//! drives passes only on fabric news or this mark.

use std::sync::Arc;

use rdcoll_transport::Fabric;

use super::{Engine, P2pConfig, Source, TagSel};
use crate::{Mode, NiConfig};

fn two_engines() -> (Arc<Engine>, Arc<Engine>) {
    let mut fabrics = rdcoll_transport::local::create(2).expect("local job");
    let cfg = P2pConfig {
        // Every message by rendezvous: the receiver's gets move it.
        eager_limit: 0,
        unexpected_max: 0,
        ..P2pConfig::default()
    };
    let ni = NiConfig {
        mode: Mode::Inline,
        ..NiConfig::default()
    };
    let engine = |f| Engine::new(Arc::new(f) as Arc<dyn Fabric>, ni.clone(), cfg, 2);
    let one = engine(fabrics.pop().unwrap()).unwrap();
    let zero = engine(fabrics.pop().unwrap()).unwrap();
    (zero, one)
}

#[test]
fn a_match_the_busy_engine_could_not_take_is_taken_by_a_later_pass() {
    let (zero, one) = two_engines();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut got = vec![0u8; data.len()];
    let into = got.as_mut_ptr();
    // SAFETY: `got` outlives the request, which is waited for below; until then it is only
    // read through `into`.
    let recv = unsafe { one.irecv(into, data.len(), Source::Rank(0), TagSel::Value(5), 0) };
    let recv = recv.unwrap();
    // SAFETY: `data` outlives the request, waited for below.
    let send = unsafe { zero.isend(data.as_ptr(), data.len(), 1, 5, 0) }.unwrap();

    // Rank 1's pass matches the announcement while another thread is in rank 1's engine.
    match_while_busy(&one);

    // Only what a collective's wait does from now on: passes on fabric news or the mark.
    // The gets must go out, rank 0 serve them, and the data land, with no engine call on 1.
    let fabric = one.ni().fabric().clone();
    let sender = std::thread::spawn(move || zero.wait(send).map(|s| s.len));
    let mut passes = 0;
    while !landed(into, &data) {
        if fabric.pending() || one.ni().directs_left() {
            one.ni().progress();
        } else {
            fabric.block(std::time::Duration::from_millis(1));
        }
        passes += 1;
        assert!(passes < 5_000, "the matched receive never issued its gets");
    }
    assert!(!one.ni().directs_left());
    // The receive ends (and tells the sender it may end) in the engine's calls.
    let status = one.wait(recv).unwrap();
    assert_eq!(status.len, data.len());
    assert_eq!(sender.join().unwrap().unwrap(), data.len());
    assert_eq!(got, data);
}

/// Runs `engine`'s agent, holding the engine's lock as a busy thread would, until a pass has
/// matched a rendezvous announcement that the engine's calls must now take up.
fn match_while_busy(engine: &Engine) {
    let busy = engine.inner.lock();
    let mut passes = 0;
    while !engine.ni().directs_left() {
        engine.ni().progress();
        passes += 1;
        assert!(passes < 100_000_000, "the announcement never arrived");
    }
    drop(busy);
}

/// Whether all of `data` is at `into` (read while the receive is in flight).
fn landed(into: *const u8, data: &[u8]) -> bool {
    data.iter().enumerate().all(|(i, d)| {
        // SAFETY: `into` holds `data.len()` bytes; a volatile read of bytes the get writes
        // (a read that races the write sees old or new bytes and only delays the test).
        let b = unsafe { std::ptr::read_volatile(into.add(i)) };
        b == *d
    })
}

#[test]
fn a_blocking_receive_takes_a_match_the_busy_engine_could_not() {
    let (zero, one) = two_engines();
    let first: Vec<u8> = (0..4096u32).map(|i| (i * 5 % 249) as u8).collect();
    let mut got = vec![0u8; first.len()];
    let into = got.as_mut_ptr();
    // SAFETY: `got` outlives the request, waited for below; until then it is not touched.
    let posted = unsafe { one.irecv(into, first.len(), Source::Rank(0), TagSel::Value(5), 0) };
    let posted = posted.unwrap();
    // Rank 0 sends the second message only once the first (a rendezvous) is done.
    let sender = std::thread::spawn(move || {
        // SAFETY: `first` outlives the request, waited for at once.
        let id = unsafe { zero.isend(first.as_ptr(), first.len(), 1, 5, 0) }.unwrap();
        zero.wait(id).unwrap();
        let second = [7u8; 16];
        // SAFETY: as above.
        let id = unsafe { zero.isend(second.as_ptr(), second.len(), 1, 6, 0) }.unwrap();
        zero.wait(id).unwrap();
        first
    });
    // The announcement of the first is matched while another thread is in rank 1's engine.
    match_while_busy(&one);
    // A blocking receive of the second: it must get the first's gets out meanwhile.
    let mut second = [0u8; 16];
    let status = one
        .recv_into(&mut second, Source::Rank(0), TagSel::Value(6), 0)
        .unwrap();
    assert_eq!((status.len, second), (16, [7u8; 16]));
    let first = sender.join().unwrap();
    assert_eq!(one.wait(posted).unwrap().len, first.len());
    assert_eq!(got, first);
}

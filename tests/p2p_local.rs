//! The point-to-point cases on ranks that are threads of this process (`local` transport).

mod local_ranks;
// `slow_receiver` needs transport counters, which the local transport does not keep.
#[allow(dead_code)]
mod p2p_cases;

use local_ranks::run;

#[test]
fn table_one_orderings() {
    run(2, p2p_cases::table_one);
}

#[test]
fn identical_envelopes() {
    run(2, p2p_cases::identical_envelopes);
}

#[test]
fn posted_receives_take_messages_in_order() {
    run(2, p2p_cases::posted_receives_take_messages_in_order);
}

#[test]
fn lone_posted_receives_in_order() {
    run(2, |w| {
        p2p_cases::lone_waits::lone_posted_receives_in_order(w, 2_000)
    });
}

#[test]
fn lone_waits_beside_another_thread() {
    run(2, |w| {
        p2p_cases::lone_waits::lone_waits_beside_another_thread(w, 4_000)
    });
}

#[test]
fn rendezvous_then_eager_into_blocking_receives() {
    run(2, p2p_cases::rendezvous_then_eager_into_blocking_receives);
}

#[test]
fn truncation_and_zero_length() {
    run(2, p2p_cases::truncation_and_zero_length);
}

#[test]
fn self_send_and_probe() {
    run(3, p2p_cases::self_send_and_probe);
}

#[test]
fn random_traffic() {
    run(4, |c| p2p_cases::random_traffic(c, 3000));
}

#[test]
fn random_receive_windows() {
    run(4, |c| p2p_cases::random_windows(c, 2000));
    run(3, p2p_cases::receive_queued_after_unexpected);
}

#[test]
fn a_long_wait_sleeps_instead_of_spinning() {
    run(2, p2p_cases::a_long_rendezvous_wait_sleeps);
    run(2, p2p_cases::a_long_probe_sleeps);
}

/// The receive path against the reference model: a million operations of one random programme
/// (`p2p_cases::differential`); three ranks, the third idle, so that ANY_SOURCE has more than
/// one rank to wait for.
#[test]
fn matches_like_the_reference_model() {
    run(3, |c| {
        p2p_cases::differential::against_reference(c, 1_000_000)
    });
}

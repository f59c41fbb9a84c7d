//! One test per Portals behaviour of issue 4, over the local transport in inline mode (the
//! test drives both agents); the main ones also over shm (`*_over_shm`). The rules are in
//! `offload/SEMANTICS.md`.

mod common;

use common::*;
use rdcoll_offload::*;
use rdcoll_transport::Region;

const ALL: u64 = !0;

fn opts() -> MeOptions {
    MeOptions::default()
}

fn data_events(evs: Vec<Event>) -> Vec<Event> {
    evs.into_iter()
        .filter(|e| e.kind != EventKind::Link)
        .collect()
}

#[test]
fn ignore_bits_and_any_source_match() {
    ignore_bits_and_any_source_match_on(Backend::Local);
}

#[test]
fn ignore_bits_and_any_source_match_over_shm() {
    ignore_bits_and_any_source_match_on(Backend::Shm);
}

fn ignore_bits_and_any_source_match_on(backend: Backend) {
    let j = job_on(backend, NiConfig::default(), false);
    let r = j.tgt_region(16);
    // Only rank 5 may use the first entry; the second takes tag 0x1?? from anyone.
    j.tgt
        .me_append(
            j.pt,
            List::Priority,
            MeSpec {
                region: j.tgt_region(16),
                match_bits: 0x1ab,
                ignore_bits: 0,
                match_id: MatchId::Rank(5),
                options: opts(),
                user_ptr: 1,
            },
        )
        .unwrap();
    j.append(List::Priority, r.clone(), 0x100, 0xff, opts(), 2);
    j.put(b"abc", 0x1ab, 0);
    let evs = data_events(j.tgt_events());
    assert_eq!(kinds(&evs), [EventKind::Put]);
    assert_eq!(evs[0].user_ptr, 2);
    assert_eq!(evs[0].match_bits, 0x1ab);
    assert_eq!(evs[0].peer, 0);
    assert_eq!(evs[0].hdr_data, 0xfeed);
    assert_eq!(read(&r, 0, 3), b"abc");
    // Outside the ignored bits: no match, dropped, and the initiator hears of it.
    j.put(b"x", 0x2ab, 0);
    let acks = j.ini_events();
    let last = acks.iter().rfind(|e| e.kind == EventKind::Ack).unwrap();
    assert_eq!(last.fail, NiFail::Dropped);
}

#[test]
fn priority_before_overflow_and_first_match_wins() {
    priority_before_overflow_and_first_match_wins_on(Backend::Local);
}

#[test]
fn priority_before_overflow_and_first_match_wins_over_shm() {
    priority_before_overflow_and_first_match_wins_on(Backend::Shm);
}

fn priority_before_overflow_and_first_match_wins_on(backend: Backend) {
    let j = job_on(backend, NiConfig::default(), false);
    let (first, second, over) = (j.tgt_region(8), j.tgt_region(8), j.tgt_region(8));
    j.append(List::Overflow, over.clone(), 0, ALL, opts(), 30);
    j.append(List::Priority, first.clone(), 7, 0, opts(), 10);
    j.append(List::Priority, second.clone(), 0, ALL, opts(), 20);
    j.put(b"hi", 7, 0);
    let evs = data_events(j.tgt_events());
    assert_eq!(evs.len(), 1);
    assert_eq!((evs[0].user_ptr, evs[0].list), (10, Some(List::Priority)));
    assert_eq!(read(&first, 0, 2), b"hi");
    assert_eq!(read(&second, 0, 2), [0, 0]);
    assert_eq!(read(&over, 0, 2), [0, 0]);
}

#[test]
fn unexpected_put_then_priority_append_points_at_the_deposited_data() {
    unexpected_put_then_priority_append_points_at_the_deposited_data_on(Backend::Local);
}

#[test]
fn unexpected_put_then_priority_append_points_at_the_deposited_data_over_shm() {
    unexpected_put_then_priority_append_points_at_the_deposited_data_on(Backend::Shm);
}

fn unexpected_put_then_priority_append_points_at_the_deposited_data_on(backend: Backend) {
    let j = job_on(backend, NiConfig::default(), false);
    let bounce = j.tgt_region(64);
    let bounce_opts = MeOptions {
        manage_local: true,
        ..opts()
    };
    j.append(List::Overflow, bounce.clone(), 0, ALL, bounce_opts, 99);
    j.put(b"early", 42, 0);
    let evs = data_events(j.tgt_events());
    assert_eq!(kinds(&evs), [EventKind::Put]);
    assert_eq!(evs[0].list, Some(List::Overflow));
    let recv = j.tgt_region(16);
    j.append(List::Priority, recv.clone(), 42, 0, opts(), 5);
    let evs = j.tgt_events();
    assert_eq!(kinds(&evs), [EventKind::PutOverflow, EventKind::Link]);
    let ov = &evs[0];
    assert_eq!((ov.user_ptr, ov.mlength, ov.rlength), (5, 5, 5));
    let start = ov.start.clone().unwrap();
    assert_eq!(start.region.key(), bounce.key());
    assert_eq!(read(&start.region, start.offset, 5), b"early");
    // No second transfer: the receive buffer was not written.
    assert_eq!(read(&recv, 0, 5), [0; 5]);
}

#[test]
fn use_once_auto_unlinks_after_the_put_event() {
    use_once_auto_unlinks_after_the_put_event_on(Backend::Local);
}

#[test]
fn use_once_auto_unlinks_after_the_put_event_over_shm() {
    use_once_auto_unlinks_after_the_put_event_on(Backend::Shm);
}

fn use_once_auto_unlinks_after_the_put_event_on(backend: Backend) {
    let j = job_on(backend, NiConfig::default(), false);
    let once = MeOptions {
        use_once: true,
        ..opts()
    };
    j.append(List::Priority, j.tgt_region(8), 1, 0, once, 3);
    j.put(b"a", 1, 0);
    let evs = data_events(j.tgt_events());
    assert_eq!(kinds(&evs), [EventKind::Put, EventKind::AutoUnlink]);
    j.put(b"b", 1, 0);
    assert!(data_events(j.tgt_events()).is_empty(), "the entry is gone");
}

#[test]
fn manage_local_unlinks_below_min_free() {
    for (len, unlinks) in [(7usize, true), (5, false)] {
        let j = job();
        let ml = MeOptions {
            manage_local: true,
            min_free: 4,
            ..opts()
        };
        let r = j.tgt_region(10);
        j.append(List::Priority, r.clone(), 1, 0, ml, 3);
        j.put(&vec![9u8; len], 1, 0);
        let evs = data_events(j.tgt_events());
        let expect: &[EventKind] = if unlinks {
            &[EventKind::Put, EventKind::AutoUnlink]
        } else {
            &[EventKind::Put]
        };
        assert_eq!(
            kinds(&evs),
            expect,
            "{len}-byte put into 10 bytes, min_free 4"
        );
        if !unlinks {
            // The next deposit lands after the first one.
            j.put(b"zz", 1, 0);
            let evs = data_events(j.tgt_events());
            assert_eq!(evs[0].start.as_ref().unwrap().offset, len);
            assert_eq!(read(&r, len, 2), b"zz");
        }
    }
}

#[test]
fn truncation_and_no_truncate() {
    truncation_and_no_truncate_on(Backend::Local);
}

#[test]
fn truncation_and_no_truncate_over_shm() {
    truncation_and_no_truncate_on(Backend::Shm);
}

fn truncation_and_no_truncate_on(backend: Backend) {
    let j = job_on(backend, NiConfig::default(), false);
    let small_nt = MeOptions {
        no_truncate: true,
        ..opts()
    };
    let (a, b) = (j.tgt_region(4), j.tgt_region(4));
    j.append(List::Priority, a.clone(), 1, 0, small_nt, 1);
    j.append(List::Priority, b.clone(), 1, 0, opts(), 2);
    j.put(b"0123456789", 1, 0);
    let evs = data_events(j.tgt_events());
    assert_eq!(evs.len(), 1);
    // The no-truncate entry is skipped; the truncating one takes 4 of 10 bytes.
    assert_eq!(
        (evs[0].user_ptr, evs[0].rlength, evs[0].mlength),
        (2, 10, 4)
    );
    assert_eq!(read(&b, 0, 4), b"0123");
    assert_eq!(read(&a, 0, 4), [0; 4]);
    let ack = j
        .ini_events()
        .into_iter()
        .find(|e| e.kind == EventKind::Ack)
        .unwrap();
    assert_eq!((ack.fail, ack.mlength), (NiFail::Ok, 4));
}

#[test]
fn offset_past_the_end_is_a_zero_length_deposit() {
    let j = job();
    let r = j.tgt_region(8);
    j.append(List::Priority, r.clone(), 1, 0, opts(), 1);
    j.put(b"abcd", 1, 12);
    let evs = data_events(j.tgt_events());
    assert_eq!(kinds(&evs), [EventKind::Put]);
    assert_eq!(
        (evs[0].mlength, evs[0].rlength, evs[0].remote_offset),
        (0, 4, 12)
    );
    assert_eq!(read(&r, 0, 8), [0; 8]);
    let ack = j
        .ini_events()
        .into_iter()
        .find(|e| e.kind == EventKind::Ack)
        .unwrap();
    assert_eq!((ack.fail, ack.mlength), (NiFail::Ok, 0));
}

#[test]
fn search_only_and_search_delete_with_their_counter_effects() {
    let j = job();
    j.append(
        List::Overflow,
        j.tgt_region(64),
        0,
        ALL,
        MeOptions {
            manage_local: true,
            ..opts()
        },
        0,
    );
    j.put(b"probe me", 8, 0);
    j.tgt_events();
    let ct = j.tgt.ct_alloc().unwrap();
    let counted = MeOptions {
        counting: MeCounting {
            ct: Some(ct),
            overflow: true,
            ..MeCounting::default()
        },
        ..opts()
    };
    let spec = |user_ptr| MeSpec {
        region: j.tgt_region(16),
        match_bits: 8,
        ignore_bits: 0,
        match_id: MatchId::Any,
        options: counted,
        user_ptr,
    };
    j.tgt.me_search(j.pt, spec(1), SearchOp::Only).unwrap();
    let evs = j.tgt_events();
    assert_eq!(kinds(&evs), [EventKind::Search]);
    assert_eq!((evs[0].fail, evs[0].mlength), (NiFail::Ok, 8));
    assert_eq!(
        j.tgt.ct_get(ct).unwrap().success,
        0,
        "search-only never counts"
    );
    j.tgt.me_search(j.pt, spec(2), SearchOp::Delete).unwrap();
    let evs = j.tgt_events();
    assert_eq!(kinds(&evs), [EventKind::PutOverflow]);
    assert_eq!(
        j.tgt.ct_get(ct).unwrap().success,
        1,
        "search-delete counts like an append hit"
    );
    // The header is gone: a second search finds nothing, an append just links.
    j.tgt.me_search(j.pt, spec(3), SearchOp::Only).unwrap();
    assert_eq!(j.tgt_events()[0].fail, NiFail::NoMatch);
    j.tgt.me_append(j.pt, List::Priority, spec(4)).unwrap();
    assert_eq!(kinds(&j.tgt_events()), [EventKind::Link]);
}

#[test]
fn counters_count_events_or_bytes() {
    for (bytes, expect) in [(false, 2), (true, 10)] {
        let j = job();
        let ct = j.tgt.ct_alloc().unwrap();
        let o = MeOptions {
            counting: MeCounting {
                ct: Some(ct),
                comm: true,
                bytes,
                ..MeCounting::default()
            },
            ..opts()
        };
        j.append(List::Priority, j.tgt_region(16), 1, 0, o, 0);
        j.put(&[1; 7], 1, 0);
        j.put(&[2; 3], 1, 0);
        assert_eq!(
            j.tgt.ct_get(ct).unwrap(),
            CtValue {
                success: expect,
                failure: 0
            }
        );
    }
}

#[test]
fn triggered_counter_increments_fire_in_threshold_order() {
    let j = job();
    let (a, x) = (j.ini.ct_alloc().unwrap(), j.ini.ct_alloc().unwrap());
    let v = |s| CtValue {
        success: s,
        failure: 0,
    };
    // Posted first, threshold 2: set x to 100. Posted second, threshold 1: add 1 to x.
    j.ini.triggered_ct_set(x, v(100), a, 2).unwrap();
    j.ini.triggered_ct_inc(x, v(1), a, 1).unwrap();
    assert_eq!(j.ini.ct_get(x).unwrap(), v(0));
    // One update reaches both: threshold order runs the add, then the set (post order would
    // leave 101).
    j.ini.ct_set(a, v(2)).unwrap();
    assert_eq!(j.ini.ct_get(x).unwrap(), v(100));
}

#[test]
fn triggered_increments_posted_with_thresholds_two_then_one_run_one_then_two() {
    let j = job();
    let v = |s| CtValue {
        success: s,
        failure: 0,
    };
    let ct = |ni: &Ni| ni.ct_alloc().unwrap();
    let (a, b, c, log) = (ct(&j.ini), ct(&j.ini), ct(&j.ini), ct(&j.ini));
    // Each increment leaves its mark on `log` through a counter of its own; the last mark
    // written tells which increment ran last.
    j.ini.triggered_ct_set(log, v(2), b, 1).unwrap();
    j.ini.triggered_ct_set(log, v(1), c, 1).unwrap();
    j.ini.triggered_ct_inc(b, v(1), a, 2).unwrap();
    j.ini.triggered_ct_inc(c, v(1), a, 1).unwrap();
    j.ini.ct_set(a, v(2)).unwrap();
    assert_eq!(j.ini.ct_get(b).unwrap(), v(1));
    assert_eq!(j.ini.ct_get(c).unwrap(), v(1));
    assert_eq!(
        j.ini.ct_get(log).unwrap(),
        v(2),
        "threshold 1 ran first, then 2"
    );
}

#[test]
fn a_triggered_put_whose_threshold_is_met_fires_at_once() {
    let j = job();
    let r = j.tgt_region(8);
    j.append(List::Priority, r.clone(), 1, 0, opts(), 0);
    let ct = j.ini.ct_alloc().unwrap();
    j.ini
        .ct_inc(
            ct,
            CtValue {
                success: 1,
                failure: 0,
            },
        )
        .unwrap();
    let md = j.md(b"now", None);
    j.ini.triggered_put(j.put_args(md, 3, 1, 0), ct, 1).unwrap();
    j.settle();
    assert_eq!(read(&r, 0, 3), b"now");
}

#[test]
fn the_triggered_operation_cap_returns_no_space() {
    let cfg = NiConfig {
        max_triggered: 2,
        ..NiConfig::default()
    };
    let j = job_with(cfg, false);
    let (a, x) = (j.ini.ct_alloc().unwrap(), j.ini.ct_alloc().unwrap());
    let one = CtValue {
        success: 1,
        failure: 0,
    };
    j.ini.triggered_ct_inc(x, one, a, 5).unwrap();
    j.ini.triggered_ct_inc(x, one, a, 6).unwrap();
    assert!(matches!(
        j.ini.triggered_ct_inc(x, one, a, 7),
        Err(OffloadError::NoSpace { .. })
    ));
    // A trigger that fires at once takes no slot.
    j.ini.triggered_ct_inc(x, one, a, 0).unwrap();
    assert_eq!(j.ini.ct_get(x).unwrap(), one);
}

#[test]
fn overflow_exhaustion_disables_the_entry_and_loses_nothing_accepted() {
    overflow_exhaustion_disables_the_entry_and_loses_nothing_accepted_on(Backend::Local);
}

#[test]
fn overflow_exhaustion_disables_the_entry_and_loses_nothing_accepted_over_shm() {
    overflow_exhaustion_disables_the_entry_and_loses_nothing_accepted_on(Backend::Shm);
}

fn overflow_exhaustion_disables_the_entry_and_loses_nothing_accepted_on(backend: Backend) {
    let j = job_on(backend, NiConfig::default(), true);
    let bounce = MeOptions {
        manage_local: true,
        min_free: 8,
        ..opts()
    };
    j.append(List::Overflow, j.tgt_region(8), 0, ALL, bounce, 1);
    j.append(List::Overflow, j.tgt_region(8), 0, ALL, bounce, 2);
    j.tgt_events();
    for i in 0..3u8 {
        j.put(&[i; 8], 5, 0);
    }
    let evs = j.tgt_events();
    assert_eq!(
        kinds(&evs),
        [
            EventKind::Put,
            EventKind::AutoUnlink,
            EventKind::Put,
            EventKind::AutoUnlink,
            EventKind::PtDisabled
        ]
    );
    let acks: Vec<NiFail> = j
        .ini_events()
        .into_iter()
        .filter(|e| e.kind == EventKind::Ack)
        .map(|e| e.fail)
        .collect();
    assert_eq!(acks, [NiFail::Ok, NiFail::Ok, NiFail::PtDisabled]);
    // While disabled, further puts fail the same way and raise no second event.
    j.put(&[3; 8], 5, 0);
    assert!(j.tgt_events().is_empty());
    // Both accepted messages are still there, in order.
    let recv = j.tgt_region(8);
    j.append(List::Priority, recv, 5, 0, opts(), 7);
    let evs = j.tgt_events();
    let overflows: Vec<Vec<u8>> = evs
        .iter()
        .filter(|e| e.kind == EventKind::PutOverflow)
        .map(|e| {
            let s = e.start.clone().unwrap();
            read(&s.region, s.offset, 8)
        })
        .collect();
    assert_eq!(overflows, [vec![0u8; 8], vec![1u8; 8]]);
    // Re-enabled, it accepts again (into the priority entry just linked).
    j.tgt.pt_enable(j.pt).unwrap();
    j.ini_events();
    j.put(&[4; 8], 5, 0);
    let acks: Vec<NiFail> = j
        .ini_events()
        .into_iter()
        .filter(|e| e.kind == EventKind::Ack)
        .map(|e| e.fail)
        .collect();
    assert_eq!(acks, [NiFail::Ok]);
}

#[test]
fn large_puts_are_pulled_by_the_target_and_gets_are_served() {
    large_puts_are_pulled_by_the_target_and_gets_are_served_on(Backend::Local);
}

#[test]
fn large_puts_are_pulled_by_the_target_and_gets_are_served_over_shm() {
    large_puts_are_pulled_by_the_target_and_gets_are_served_on(Backend::Shm);
}

fn large_puts_are_pulled_by_the_target_and_gets_are_served_on(backend: Backend) {
    let j = job_on(backend, NiConfig::default(), false);
    let len = 200_000;
    let r = j.tgt_region(len);
    j.append(List::Priority, r.clone(), 1, 0, opts(), 0);
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    j.put(&data, 1, 0);
    assert_eq!(read(&r, 0, len), data);
    let evs = j.ini_events();
    assert_eq!(kinds(&evs), [EventKind::Send, EventKind::Ack]);
    // And back with a get.
    let ct = j.ini.ct_alloc().unwrap();
    let md = j.md(&vec![0u8; len], Some(ct));
    j.ini
        .get(GetArgs {
            md,
            local_offset: 0,
            len,
            target: 1,
            pt: j.pt,
            match_bits: 1,
            remote_offset: 0,
            user_ptr: 4,
            published: None,
            read_all: false,
        })
        .unwrap();
    j.settle();
    assert_eq!(j.ini.ct_get(ct).unwrap().success, 1);
    let reply = j
        .ini_events()
        .into_iter()
        .find(|e| e.kind == EventKind::Reply)
        .unwrap();
    assert_eq!((reply.fail, reply.mlength), (NiFail::Ok, len as u64));
}

#[test]
fn large_unexpected_puts_keep_their_arrival_order() {
    large_unexpected_puts_keep_their_arrival_order_on(Backend::Local);
}

#[test]
fn large_unexpected_puts_keep_their_arrival_order_over_shm() {
    large_unexpected_puts_keep_their_arrival_order_on(Backend::Shm);
}

/// A put too large to travel inline (pulled by the target) and a small one behind it both land
/// on the overflow list: receives must take them in the order they arrived.
fn large_unexpected_puts_keep_their_arrival_order_on(backend: Backend) {
    let j = job_on(backend, NiConfig::default(), false);
    let bounce = MeOptions {
        manage_local: true,
        ..opts()
    };
    j.append(List::Overflow, j.tgt_region(1 << 16), 0, ALL, bounce, 0);
    let big: Vec<u8> = (0..20_000).map(|i| (i % 199) as u8).collect();
    let (md_big, md_small) = (j.md(&big, None), j.md(b"small", None));
    j.ini.put(j.put_args(md_big, big.len(), 5, 0)).unwrap();
    j.ini.put(j.put_args(md_small, 5, 5, 0)).unwrap();
    j.settle();
    j.tgt_events();
    let once = MeOptions {
        use_once: true,
        ..opts()
    };
    for want in [big.as_slice(), b"small"] {
        j.append(List::Priority, j.tgt_region(8), 5, 0, once, 1);
        let evs = j.tgt_events();
        assert_eq!(kinds(&evs), [EventKind::PutOverflow, EventKind::AutoUnlink]);
        let s = evs[0].start.clone().unwrap();
        assert_eq!(evs[0].rlength, want.len() as u64);
        assert_eq!(read(&s.region, s.offset, want.len()), want);
    }
}

#[test]
fn an_entry_with_ack_disable_gets_no_ack_event_at_the_initiator() {
    let j = job();
    let quiet = MeOptions {
        ack_disable: true,
        ..opts()
    };
    j.append(List::Priority, j.tgt_region(8), 1, 0, quiet, 0);
    j.put(b"abc", 1, 0);
    assert_eq!(kinds(&j.ini_events()), [EventKind::Send]);
}

#[test]
fn a_dropped_put_is_seen_by_the_initiator_even_without_an_ack_request() {
    let j = job();
    let ct = j.ini.ct_alloc().unwrap();
    let r = j.ini.fabric().alloc_region(4).unwrap();
    r.write(0, b"lost").unwrap();
    let opts = MdOptions {
        ct: Some(ct),
        ct_ack: true,
        quiet_user_ptr: 77,
        ..MdOptions::default()
    };
    let md = j.ini.md_bind(r, Some(j.ini_eq), opts).unwrap();
    let mut put = j.put_args(md, 4, 1, 0);
    put.ack_req = AckReq::None;
    j.ini.put(put).unwrap();
    j.settle();
    let evs = j.ini_events();
    assert_eq!(kinds(&evs), [EventKind::Send, EventKind::Ack]);
    assert_eq!(evs[1].fail, NiFail::Dropped);
    // The put left no record: its descriptor names whose it was.
    assert_eq!(evs[1].user_ptr, 77);
    assert_eq!(j.ini.ct_get(ct).unwrap().failure, 1);
}

#[test]
fn stale_handles_name_nothing_and_a_busy_descriptor_stays() {
    let j = job();
    let (a, x) = (j.ini.ct_alloc().unwrap(), j.ini.ct_alloc().unwrap());
    let md = j.md(b"data", None);
    j.ini.triggered_put(j.put_args(md, 4, 1, 0), a, 5).unwrap();
    assert!(
        j.ini.md_release(md).is_err(),
        "a triggered put still uses it"
    );
    j.ini.ct_free(a).unwrap();
    j.ini.md_release(md).unwrap();
    let md2 = j.md(b"new!", None);
    assert_ne!(md, md2);
    assert!(j.ini.put(j.put_args(md, 4, 1, 0)).is_err());
    let one = CtValue {
        success: 1,
        failure: 0,
    };
    assert!(j.ini.ct_inc(a, one).is_err(), "the freed counter is gone");
    assert!(
        j.ini.ct_inc(x, CtValue::default()).is_err(),
        "an empty increment"
    );
}

#[test]
fn a_rank_match_id_accepts_that_rank() {
    let j = job();
    j.tgt
        .me_append(
            j.pt,
            List::Priority,
            MeSpec {
                region: j.tgt_region(8),
                match_bits: 1,
                ignore_bits: 0,
                match_id: MatchId::Rank(0),
                options: opts(),
                user_ptr: 9,
            },
        )
        .unwrap();
    j.put(b"me", 1, 0);
    let evs = data_events(j.tgt_events());
    assert_eq!((evs[0].kind, evs[0].user_ptr), (EventKind::Put, 9));
}

#[test]
fn a_get_landing_on_the_overflow_list_leaves_a_header_too() {
    let j = job();
    let bounce = j.tgt_region(16);
    bounce.write(0, b"from the bounce!").unwrap();
    j.append(List::Overflow, bounce, 0, ALL, opts(), 0);
    j.tgt_events();
    let ct = j.ini.ct_alloc().unwrap();
    let md = j.md(&[0u8; 4], Some(ct));
    j.ini
        .get(GetArgs {
            md,
            local_offset: 0,
            len: 4,
            target: 1,
            pt: j.pt,
            match_bits: 3,
            remote_offset: 5,
            user_ptr: 0,
            published: None,
            read_all: false,
        })
        .unwrap();
    j.settle();
    let evs = j.tgt_events();
    assert_eq!(kinds(&evs), [EventKind::Get]);
    assert_eq!(evs[0].list, Some(List::Overflow));
    // A receive posted afterwards learns of it: GET_OVERFLOW, pointing at what was read.
    j.append(List::Priority, j.tgt_region(8), 3, 0, opts(), 6);
    let evs = j.tgt_events();
    assert_eq!(kinds(&evs), [EventKind::GetOverflow, EventKind::Link]);
    let s = evs[0].start.clone().unwrap();
    assert_eq!(read(&s.region, s.offset, 4), b"the ");
}

/// A target region holding a get's data behind a counting get entry (match bits 9, user
/// pointer 5), and the initiator's counting descriptor over a region as long.
struct PublishedGet {
    r: Region,
    tgt_ct: CtHandle,
    ini_ct: CtHandle,
    out: Region,
    md: MdHandle,
}

fn published_get(j: &Job, data: &[u8]) -> PublishedGet {
    let r = j.tgt_region(data.len());
    r.write(0, data).unwrap();
    let tgt_ct = j.tgt.ct_alloc().unwrap();
    let entry = MeOptions {
        op_put: false,
        op_get: true,
        counting: MeCounting {
            ct: Some(tgt_ct),
            comm: true,
            ..MeCounting::default()
        },
        ..opts()
    };
    j.append(List::Priority, r.clone(), 9, 0, entry, 5);
    j.tgt_events();
    let ini_ct = j.ini.ct_alloc().unwrap();
    let out = j.ini.fabric().alloc_region(data.len()).unwrap();
    let md_opts = MdOptions {
        ct: Some(ini_ct),
        ct_reply: true,
        ..MdOptions::default()
    };
    let md = j.ini.md_bind(out.clone(), Some(j.ini_eq), md_opts).unwrap();
    PublishedGet {
        r,
        tgt_ct,
        ini_ct,
        out,
        md,
    }
}

#[test]
fn direct_gets_read_the_published_region_and_count_at_the_target() {
    direct_gets_read_the_published_region_and_count_at_the_target_on(Backend::Local);
}

#[test]
fn direct_gets_read_the_published_region_and_count_at_the_target_over_shm() {
    direct_gets_read_the_published_region_and_count_at_the_target_on(Backend::Shm);
}

/// A get that names the region the target published (`GetArgs::published`) is read by the
/// initiator itself: the initiator sees what a served get gives (the bytes, REPLY, its count),
/// and the target's entry counts it and raises GET as if it had served it. A key that names
/// nothing fails on both sides' counters. 20,000 bytes: below shm's direct-get limit.
fn direct_gets_read_the_published_region_and_count_at_the_target_on(backend: Backend) {
    let j = job_on(backend, NiConfig::default(), false);
    let len = 20_000;
    let data: Vec<u8> = (0..len).map(|i| (i * 13 % 251) as u8).collect();
    let PublishedGet {
        r,
        tgt_ct,
        ini_ct,
        out,
        md,
    } = published_get(&j, &data);
    let get = |published: u64, user_ptr: u64| GetArgs {
        md,
        local_offset: 0,
        len: len - 100,
        target: 1,
        pt: j.pt,
        match_bits: 9,
        remote_offset: 100,
        user_ptr,
        published: Some(published),
        read_all: false,
    };
    j.ini.get(get(r.key().0, 4)).unwrap();
    j.settle();
    assert_eq!(read(&out, 0, len - 100), &data[100..]);
    assert_eq!(j.ini.ct_get(ini_ct).unwrap().success, 1);
    let reply = j
        .ini_events()
        .into_iter()
        .find(|e| e.kind == EventKind::Reply);
    let reply = reply.expect("a REPLY event");
    assert_eq!((reply.fail, reply.mlength), (NiFail::Ok, len as u64 - 100));
    assert_eq!(j.tgt.ct_get(tgt_ct).unwrap().success, 1);
    let evs = data_events(j.tgt_events());
    assert_eq!(kinds(&evs), [EventKind::Get]);
    assert_eq!((evs[0].user_ptr, evs[0].mlength), (5, len as u64 - 100));
    // A key that names no region: both counters hear of the failure.
    j.ini.get(get(r.key().0 ^ (1 << 40), 6)).unwrap();
    j.settle();
    assert_eq!(j.ini.ct_get(ini_ct).unwrap().failure, 1);
    let reply = j
        .ini_events()
        .into_iter()
        .find(|e| e.kind == EventKind::Reply);
    assert_ne!(reply.expect("a REPLY event").fail, NiFail::Ok);
    assert_eq!(j.tgt.ct_get(tgt_ct).unwrap().failure, 1);
}

/// A get past shm's direct-get limit (from it, a long put is split between both processes, so
/// the target serves such a get by writing half) is still read by the initiator alone when it
/// says `read_all` (its target is busy, in an exchange): it completes with only the
/// initiator's agent running, and the target counts it afterwards. Without `read_all` the
/// same get waits for the target.
#[test]
fn a_get_that_reads_all_completes_without_the_target_over_shm() {
    let j = job_on(Backend::Shm, NiConfig::default(), false);
    let len = 256 << 10;
    let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    let PublishedGet {
        r,
        tgt_ct,
        ini_ct,
        out,
        md,
    } = published_get(&j, &data);
    let get = |read_all: bool, user_ptr: u64| GetArgs {
        md,
        local_offset: 0,
        len,
        target: 1,
        pt: j.pt,
        match_bits: 9,
        remote_offset: 0,
        user_ptr,
        published: Some(r.key().0),
        read_all,
    };
    let initiator_alone = || {
        for _ in 0..1000 {
            j.ini.progress();
        }
        j.ini.ct_get(ini_ct).unwrap().success
    };
    j.ini.get(get(true, 4)).unwrap();
    assert_eq!(
        initiator_alone(),
        1,
        "a get that reads all waited for its target"
    );
    assert_eq!(read(&out, 0, len), &data[..]);
    j.settle();
    assert_eq!(j.tgt.ct_get(tgt_ct).unwrap().success, 1);
    if j.ini.fabric().direct_get_max() < len {
        out.write(0, &vec![0u8; len]).unwrap();
        j.ini.get(get(false, 6)).unwrap();
        assert_eq!(
            initiator_alone(),
            1,
            "a served get completed without its target"
        );
        j.settle();
        assert_eq!(j.ini.ct_get(ini_ct).unwrap().success, 2);
        assert_eq!(read(&out, 0, len), &data[..]);
    }
}

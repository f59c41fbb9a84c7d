//! The Rust API's behaviour on in-process ranks: duplicated communicators, cancel, the
//! request helpers, sendrecv rings, typed buffers, argument errors.

use rdcoll::{Error, Source, Tag};

#[test]
fn duplicated_communicators_never_match_each_others_messages() {
    let got = rdcoll::local::run(2, |world| {
        let lib = world.dup().unwrap();
        if world.rank() == 0 {
            lib.send(&[1u8], 1, 5).unwrap();
            world.send(&[2u8], 1, 5).unwrap();
            (0, 0)
        } else {
            // Wildcards on `world` must skip the message sent on `lib`.
            let mut a = [0u8];
            world.recv(&mut a, Source::Any, Tag::Any).unwrap();
            let mut b = [0u8];
            lib.recv(&mut b, Source::Any, Tag::Any).unwrap();
            (a[0], b[0])
        }
    })
    .unwrap();
    assert_eq!(got[1], (2, 1));
}

#[test]
fn a_cancelled_receive_takes_nothing_and_the_message_stays_for_the_next() {
    rdcoll::local::run(2, |world| {
        if world.rank() == 0 {
            let mut go = [0u8];
            world.recv(&mut go, 1, 1).unwrap();
            world.send(&[42u32], 1, 9).unwrap();
        } else {
            let mut lost = [0u32];
            let cancelled = world.scope(|s| {
                let mut r = s.irecv(&mut lost, 0, 9).unwrap();
                assert!(r.test().unwrap().is_none());
                assert!(r.cancel().unwrap());
                r.wait().unwrap().cancelled
            });
            assert!(cancelled);
            world.send(&[0u8], 0, 1).unwrap();
            let mut v = [0u32];
            let st = world.recv(&mut v, 0, 9).unwrap();
            assert_eq!((v[0], st.len, st.cancelled, lost[0]), (42, 4, false, 0));
        }
    })
    .unwrap();
}

#[test]
fn wait_any_and_test_all_report_each_request_once() {
    rdcoll::local::run(2, |world| {
        let peer = 1 - world.rank();
        let out: Vec<[f64; 3]> = (0..4).map(|i| [i as f64; 3]).collect();
        let mut inbox = vec![[0f64; 3]; 4];
        world.scope(|s| {
            let mut recvs: Vec<_> = inbox
                .iter_mut()
                .enumerate()
                .map(|(i, b)| s.irecv(b, peer, i as u32).unwrap())
                .collect();
            let mut sends: Vec<_> = out
                .iter()
                .enumerate()
                .map(|(i, d)| s.isend(d, peer, i as u32).unwrap())
                .collect();
            let mut seen = Vec::new();
            while !recvs.is_empty() {
                let (_, st) = rdcoll::wait_any(&mut recvs).unwrap();
                seen.push(st.tag);
            }
            seen.sort();
            assert_eq!(seen, vec![0, 1, 2, 3]);
            while !rdcoll::test_all(&mut sends).unwrap() {}
            assert!(rdcoll::test_all(&mut sends).unwrap(), "stays complete");
        });
        assert_eq!(inbox, out);
    })
    .unwrap();
}

#[test]
fn sendrecv_shifts_a_ring_without_deadlock_for_every_protocol() {
    for len in [1usize, 100_000] {
        let got = rdcoll::local::run(5, |world| {
            let (rank, size) = (world.rank(), world.size());
            let out = vec![rank as u16; len];
            let mut inbox = vec![0u16; len];
            let st = world
                .sendrecv(
                    &out,
                    (rank + 1) % size,
                    3,
                    &mut inbox,
                    (rank + size - 1) % size,
                    3,
                )
                .unwrap();
            (st.source, inbox.iter().all(|&v| v as u32 == st.source))
        })
        .unwrap();
        for (rank, (src, ok)) in got.into_iter().enumerate() {
            assert_eq!(src, (rank as u32 + 4) % 5);
            assert!(ok, "len {len}");
        }
    }
}

/// Short and long messages in one ring (a short send goes first and its receive blocks; a
/// long one is started and its receive posted), and a rank's exchange with itself at both
/// lengths: every rank gets its left neighbour's bytes and lengths.
#[test]
fn sendrecv_mixes_short_and_long_messages() {
    let len_of = |r: u32| if r % 2 == 0 { 8 } else { 100_000 };
    let got = rdcoll::local::run(4, |world| {
        let (rank, size) = (world.rank(), world.size());
        let left = (rank + size - 1) % size;
        let out = vec![rank as u16 + 1; len_of(rank)];
        let mut inbox = vec![0u16; 100_000];
        let st = world
            .sendrecv(&out, (rank + 1) % size, 3, &mut inbox, left, 3)
            .unwrap();
        let ring = st.source == left
            && st.len == 2 * len_of(left)
            && inbox[..len_of(left)]
                .iter()
                .all(|&v| u32::from(v) == left + 1);
        let mut itself = true;
        for len in [8, 100_000] {
            let mine: Vec<u16> = (0..len).map(|i| (i as u16) ^ (rank as u16 + 1)).collect();
            let mut own = vec![0u16; 100_000];
            let st = world.sendrecv(&mine, rank, 4, &mut own, rank, 4).unwrap();
            itself &= st.len == 2 * len && own[..len] == mine[..];
        }
        (ring, itself)
    })
    .unwrap();
    for (rank, (ring, itself)) in got.into_iter().enumerate() {
        assert!(ring, "rank {rank}: wrong message from the ring");
        assert!(itself, "rank {rank}: wrong message from itself");
    }
}

#[test]
fn bad_ranks_are_argument_errors_not_panics() {
    rdcoll::local::run(2, |world| {
        assert!(matches!(
            world.send(&[1u8], 7, 0),
            Err(Error::InvalidArgument(_))
        ));
        let mut b = [0u8];
        assert!(matches!(
            world.recv(&mut b, 9, 0),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            world.iprobe(2, Tag::Any),
            Err(Error::InvalidArgument(_))
        ));
    })
    .unwrap();
}

#[test]
#[allow(clippy::forget_non_drop)]
fn a_request_never_waited_for_is_finished_when_its_scope_ends() {
    rdcoll::local::run(2, |world| {
        let peer = 1 - world.rank();
        let big = vec![world.rank() as u8; 1 << 20];
        let mut inbox = vec![0u8; 1 << 20];
        world.scope(|s| {
            std::mem::forget(s.irecv(&mut inbox, peer, 0).unwrap());
            drop(s.isend(&big, peer, 0).unwrap());
        });
        // The scope waited for both: the data is all there.
        assert!(inbox.iter().all(|&b| b as u32 == peer));
    })
    .unwrap();
}

/// A scope waits, when it ends, only for the requests started in it: a receive posted in an
/// enclosing scope stays in flight. (Rank 1 sends that receive's message only after rank 0
/// says the inner scope has ended, or after 5 s, so a scope that waited for it fails the
/// assertion instead of hanging.)
#[test]
#[allow(clippy::forget_non_drop)]
fn a_scope_waits_only_for_its_own_requests() {
    rdcoll::local::run(2, |world| {
        if world.rank() == 1 {
            world.send(&[2u8], 0, 2).unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while world.iprobe(0, 3).unwrap().is_none() && std::time::Instant::now() < deadline {
                std::thread::yield_now();
            }
            world.send(&[1u8], 0, 1).unwrap();
            let mut go = [0u8];
            world.recv(&mut go, 0, 3).unwrap();
            return;
        }
        let mut late = [0u8];
        let mut early = [0u8];
        world.scope(|outer| {
            let mut r = outer.irecv(&mut late, 1, 1).unwrap();
            world.scope(|inner| {
                std::mem::forget(inner.irecv(&mut early, 1, 2).unwrap());
            });
            assert_eq!(
                r.test().unwrap(),
                None,
                "the inner scope waited for the outer's receive"
            );
            world.send(&[0u8], 1, 3).unwrap();
            assert_eq!(r.wait().unwrap().tag, 1);
        });
        assert_eq!((early[0], late[0]), (2, 1));
    })
    .unwrap();
}

/// A blocking receive polling on the fast path (inline mode) is older than a receive another
/// thread posts while it waits: the first matching message is the blocked one's.
#[test]
fn a_blocked_receive_keeps_its_place_when_another_thread_posts() {
    for round in 0..20u8 {
        let got = rdcoll::local::run(2, |world| {
            if world.rank() == 1 {
                let mut go = [0u8];
                world.recv(&mut go, 0, 99).unwrap();
                world.send(&[round, 1], 0, 5).unwrap();
                world.send(&[round, 2], 0, 5).unwrap();
                return (0, 0);
            }
            let (first, second) = std::thread::scope(|t| {
                let blocked = t.spawn(|| {
                    let mut b = [0u8; 2];
                    world.recv(&mut b, 1, 5).unwrap();
                    b[1]
                });
                // Let the blocked receive start polling before the second one is posted (5 ms
                // was too short once under `./scripts/test`, with other tests on both cores).
                std::thread::sleep(std::time::Duration::from_millis(50));
                let mut b = [0u8; 2];
                world.scope(|s| {
                    let r = s.irecv(&mut b, 1, 5).unwrap();
                    world.send(&[1u8], 1, 99).unwrap();
                    r.wait().unwrap();
                });
                (blocked.join().unwrap(), b[1])
            });
            (first, second)
        })
        .unwrap();
        assert_eq!(got[0], (1, 2), "round {round}");
    }
}

#[test]
fn rendezvous_settings_change_at_run_time_and_bad_ones_are_refused() {
    let got = rdcoll::local::run(2, |world| {
        // Not a multiple of 1 KiB, no credits: refused, and the settings stay as they were.
        let before = world.rendezvous().unwrap();
        assert!(matches!(
            world.set_rendezvous(1000, 4),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            world.set_rendezvous(4096, 0),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(world.rendezvous().unwrap(), before);
        // 4 KiB chunks, one at a time: a 300 KiB message takes 75 gets in a row.
        world.set_rendezvous(4096, 1).unwrap();
        assert_eq!(world.rendezvous().unwrap(), (4096, 1));
        assert_eq!(world.dup().unwrap().rendezvous().unwrap(), (4096, 1));
        let data: Vec<u32> = (0..75 * 1024).collect();
        if world.rank() == 0 {
            world.send(&data, 1, 3).unwrap();
            true
        } else {
            let mut got = vec![0u32; data.len()];
            world.recv(&mut got, 0, 3).unwrap();
            got == data
        }
    })
    .unwrap();
    assert!(got[1]);
}

/// A message of a length the receiver does not know: `recv_vec` sizes the vector from it, and
/// `Status::count` says how many elements arrived; a length that is not a whole number of the
/// asked type is an error that leaves the message for a receive of the right type.
#[test]
fn recv_vec_takes_a_message_of_any_length() {
    rdcoll::local::run(2, |c| {
        if c.rank() == 0 {
            let data: Vec<u32> = (0..100_037).collect();
            c.send(&data, 1, 8).unwrap();
            c.send(&[1u8, 2, 3, 4, 5, 6], 1, 9).unwrap();
            return;
        }
        let (v, st) = c.recv_vec::<u32>(Source::Any, Tag::Any).unwrap();
        assert_eq!(
            (v.len(), st.count::<u32>().unwrap(), st.tag),
            (100_037, 100_037, 8)
        );
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
        assert!(st.count::<u64>().is_err());
        assert!(c.recv_vec::<u32>(0, 9).is_err());
        let (w, _) = c.recv_vec::<u16>(0, 9).unwrap();
        assert_eq!(w.len(), 3);
    })
    .unwrap();
}

/// `PROC_NULL` is nobody: a send to it or a receive or probe from it completes at once,
/// moving nothing, blocking or not (the edges of a non-periodic ring use it).
#[test]
fn proc_null_operations_complete_at_once() {
    use rdcoll::{NULL_TAG, PROC_NULL};
    rdcoll::local::run(2, |c| {
        let mut buf = [5u64; 4];
        c.send(&buf, PROC_NULL, 1).unwrap();
        let st = c.recv(&mut buf, PROC_NULL, 1).unwrap();
        assert_eq!(
            (st.source, st.tag, st.len, buf),
            (PROC_NULL, NULL_TAG, 0, [5; 4])
        );
        assert_eq!(c.probe(PROC_NULL, Tag::Any).unwrap().source, PROC_NULL);
        let big = vec![1u8; 1 << 20];
        c.scope(|s| {
            let a = s.isend(&big, PROC_NULL, 2).unwrap();
            let b = s.irecv(&mut buf, PROC_NULL, 2).unwrap();
            assert_eq!(b.wait().unwrap().source, PROC_NULL);
            a.wait().unwrap();
        });
        // A line of ranks: the ends talk to nobody on one side.
        let (me, n) = (c.rank(), c.size());
        let right = if me + 1 < n { me + 1 } else { PROC_NULL };
        let left = if me > 0 { me - 1 } else { PROC_NULL };
        let mut got = [u32::MAX];
        c.sendrecv(&[me], right, 3, &mut got, left, 3).unwrap();
        assert_eq!(got[0], if me > 0 { me - 1 } else { u32::MAX });
    })
    .unwrap();
}

/// A user type sent and received through the re-exported derive, with no bytemuck dependency
/// of the program's own.
#[derive(Clone, Copy, Debug, PartialEq, rdcoll::Pod, rdcoll::Zeroable)]
#[bytemuck(crate = "rdcoll::bytemuck")]
#[repr(C)]
struct Particle {
    position: [f64; 3],
    mass: f64,
}

#[test]
fn a_type_with_the_reexported_derive_travels_as_itself() {
    let got = rdcoll::local::run(2, |world| {
        let sent = [Particle {
            position: [1.0, -2.0, 3.5],
            mass: 7.25,
        }; 3];
        if world.rank() == 0 {
            world.send(&sent, 1, 4).unwrap();
            None
        } else {
            let mut got = [<Particle as rdcoll::Zeroable>::zeroed(); 3];
            let st = world.recv(&mut got, 0, 4).unwrap();
            assert_eq!(st.count::<Particle>().unwrap(), 3);
            Some(got == sent)
        }
    })
    .unwrap();
    assert_eq!(got[1], Some(true));
}

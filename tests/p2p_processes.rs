//! The point-to-point cases across processes: the test binary re-launches itself as the ranks
//! of a job (through the launcher `rdcoll-run` uses) over shm and over tcp.

mod limits_cases;
mod p2p_cases;

use rdcoll_transport::launch::{describe, run_job, JobSpec};

const CASES_VAR: &str = "RDCOLL_P2P_CASES";
/// Where rank 0 of `slow_receiver` writes its peak of put bytes in flight.
const PEAK_OUT: &str = "RDCOLL_P2P_PEAK_OUT";
const SLOW_LEN: usize = 8 << 20;

/// Runs the cases named in `RDCOLL_P2P_CASES` (comma-separated) when started as a rank.
#[test]
fn rank_entry() {
    let Ok(cases) = std::env::var(CASES_VAR) else {
        return;
    };
    let world = match rdcoll::init() {
        Ok(w) => w,
        Err(err) => {
            eprintln!("init failed: {err}");
            std::process::exit(3);
        }
    };
    for case in cases.split(',') {
        let r = match case {
            "table_one" => p2p_cases::table_one(&world),
            "identical_envelopes" => p2p_cases::identical_envelopes(&world),
            "truncation" => p2p_cases::truncation_and_zero_length(&world),
            "self_send" => p2p_cases::self_send_and_probe(&world),
            "random" => p2p_cases::random_traffic(&world, 10_000),
            "windows" => p2p_cases::random_windows(&world, 10_000),
            "after_unexpected" => p2p_cases::receive_queued_after_unexpected(&world),
            "long_wait" => p2p_cases::a_long_rendezvous_wait_sleeps(&world),
            "long_probe" => p2p_cases::a_long_probe_sleeps(&world),
            "bound" => {
                let cores = std::env::var("RDCOLL_TEST_CORES")
                    .ok()
                    .and_then(|c| c.parse().ok())
                    .unwrap_or(0);
                p2p_cases::windows::each_rank_has_its_cores(&world, cores)
            }
            "peer_death" => p2p_cases::peer_death(&world),
            "dup_drop" => limits_cases::dup_and_drop(&world, 200_000),
            "many_sends" => limits_cases::many_sends_received_late(&world, 100_000, 2048),
            "past_nonces" => limits_cases::same_envelope_past_the_nonces(&world, 2048),
            "flood" => limits_cases::flood_then_reply(&world, 300_000),
            "flood_at_the_end" => limits_cases::flood_received_at_the_end(&world, 1_000_000),
            "flood_past_the_limit" => {
                limits_cases::flood_past_the_limit(&world, 1_000_000, FLOOD_LIMIT)
            }
            "isend_flood_past_the_limit" => {
                limits_cases::isend_flood_past_the_limit(&world, 20_000)
            }
            "read_through_flood" => limits_cases::read_through_a_flood(&world, 3.0),
            "intruder" => limits_cases::intruder_learns_nothing(&world),
            "credit_back" => {
                limits_cases::credit_comes_back_to_a_sender_that_only_sends(&world, 12, 400)
            }
            "wait_for_room" => limits_cases::blocking_sends_wait_for_room(
                &world,
                4096,
                16 << 10,
                std::time::Duration::from_millis(300),
                32 << 20,
            ),
            "threads" => p2p_cases::receive_beside_a_progressing_thread(&world),
            "posted_in_order" => p2p_cases::posted_receives_take_messages_in_order(&world),
            "lone_in_order" => p2p_cases::lone_waits::lone_posted_receives_in_order(&world, 5_000),
            "lone_threads" => {
                p2p_cases::lone_waits::lone_waits_beside_another_thread(&world, 10_000)
            }
            "differential" => p2p_cases::differential::against_reference(&world, 1_000_000),
            "rendezvous_then_eager" => {
                p2p_cases::rendezvous_then_eager_into_blocking_receives(&world)
            }
            "slow_receiver" => p2p_cases::slow_receiver(&world, SLOW_LEN).and_then(|peak| {
                match (peak, std::env::var(PEAK_OUT)) {
                    (Some(p), Ok(path)) => {
                        std::fs::write(path, p.to_string()).map_err(|e| e.to_string())
                    }
                    _ => Ok(()),
                }
            }),
            other => Err(format!("no case {other:?}")),
        };
        if let Err(why) = r {
            eprintln!(
                "rank {} over {}: {case}: {why}",
                world.rank(),
                world.backend()
            );
            std::process::exit(1);
        }
    }
    println!(
        "rank {} passed {cases} over {}",
        world.rank(),
        world.backend()
    );
    drop(world);
    std::process::exit(0);
}

fn job(ranks: usize, transport: &str, cases: &str) {
    job_with(ranks, transport, cases, &[]);
}

fn job_with(ranks: usize, transport: &str, cases: &str, env: &[(&str, String)]) {
    let exe = std::env::current_exe().unwrap();
    let mut spec = JobSpec::new(
        ranks,
        vec![
            exe.into(),
            "rank_entry".into(),
            "--exact".into(),
            "--nocapture".into(),
            "--test-threads=1".into(),
        ],
    );
    spec.transport = Some(transport.into());
    spec.prefix_output = true;
    spec.env.push((CASES_VAR.into(), cases.into()));
    for (k, v) in env {
        spec.env.push((k.into(), v.into()));
    }
    let report = run_job(&spec).unwrap();
    for e in &report.exits {
        assert!(
            e.status.success(),
            "{transport}: rank {} {}",
            e.rank,
            describe(e.status)
        );
    }
}

/// Communicator ids are recycled: 200,000 dup / drop pairs with one communicator kept alive.
#[test]
fn communicator_ids_are_recycled() {
    job(3, "shm", "dup_drop");
    job(2, "tcp", "dup_drop");
}

/// 100,000 rendezvous sends in flight to one peer, received late, and the 65,536th send with
/// one envelope refused at once (eager limit 1 KiB, so that 2 KiB messages go by rendezvous).
#[test]
fn many_sends_in_flight_to_one_peer() {
    let small_eager = [("RDCOLL_EAGER_LIMIT", "1024".to_string())];
    for transport in ["shm", "tcp"] {
        job_with(2, transport, "many_sends,past_nonces", &small_eager);
    }
}

/// A rank that only sends (blocking) and receives by blocking calls gets its eager credit
/// back: 12 rounds of 400 KiB of unexpected messages against a 1 MiB `RDCOLL_UNEXPECTED_MAX`
/// (so rounds 3 and later need what rank 1 returned), over shm and tcp.
#[test]
fn credit_comes_back_to_a_sender_that_only_sends() {
    let limit = [("RDCOLL_UNEXPECTED_MAX", (1 << 20).to_string())];
    for transport in ["shm", "tcp"] {
        job_with(2, transport, "credit_back", &limit);
    }
}

/// Blocking sends of 64 MiB in 16 KiB messages to a peer that receives nothing for the first
/// 300 ms: once its channel (shm: the ring; tcp: the socket) is full the sender waits for
/// room, so its memory grows by less than 32 MiB (queueing them, as a nonblocking send must,
/// took all 64 MiB; over tcp 40 MB before tcp reported its queue, `Fabric::backlogged`).
/// Over tcp again with `RDCOLL_SINK_RATE` (no host thread flushes then: the I/O thread's
/// flush must clear the queue's hint, or the sender waits for ever).
#[test]
fn blocking_sends_to_a_full_channel_wait_for_room() {
    for transport in ["shm", "tcp"] {
        job(2, transport, "wait_for_room");
    }
    let sink = [("RDCOLL_SINK_RATE", "1G".to_string())];
    job_with(2, "tcp", "wait_for_room", &sink);
}

/// A rank that floods its peer and waits, while the peer computes for three peer timeouts
/// and then works through the backlog: nobody is declared dead (tcp: its I/O thread reads a
/// flood in bounded bites and keeps beating).
#[test]
fn a_busy_peer_behind_a_flood_is_not_declared_dead() {
    let short = [("RDCOLL_PEER_TIMEOUT_MS", "500".to_string())];
    job_with(2, "tcp", "flood", &short);
}

/// A million small messages wait unexpected behind a later one that the receiver takes
/// first; then it takes them all, in order (shm and tcp).
#[test]
fn a_million_unexpected_messages_are_received_in_order() {
    for transport in ["shm", "tcp"] {
        job(2, transport, "flood_at_the_end");
    }
}

/// `RDCOLL_UNEXPECTED_MAX` of `a_flood_past_the_memory_limit_is_paced_and_told`.
const FLOOD_LIMIT: u64 = 4 << 20;

/// A million small messages (320 MB of charge) toward a receiver allowed 4 MiB for them,
/// which first waits for a later message: the sender is paced (its sends past the share go by
/// rendezvous), the receiver is told at once that the sender waits behind its own messages,
/// then takes them all in order; memory stays bounded on both sides (shm and tcp).
#[test]
fn a_flood_past_the_memory_limit_is_paced_and_told() {
    let limit = [("RDCOLL_UNEXPECTED_MAX", FLOOD_LIMIT.to_string())];
    for transport in ["shm", "tcp"] {
        job_with(2, transport, "flood_past_the_limit", &limit);
    }
}

/// The same with the flood sent by `isend` and waited for together: the waiting sender tells
/// its receiver (shm and tcp).
#[test]
fn an_isend_flood_past_the_memory_limit_is_told() {
    let limit = [("RDCOLL_UNEXPECTED_MAX", FLOOD_LIMIT.to_string())];
    for transport in ["shm", "tcp"] {
        job_with(2, transport, "isend_flood_past_the_limit", &limit);
    }
}

/// With no eager credit at all (`RDCOLL_UNEXPECTED_MAX=0`) every short message goes by
/// rendezvous with nothing in its header, blocking sends marked as waited for: matching,
/// order, truncation and random traffic hold as with eager messages (shm and tcp).
#[test]
fn everything_works_without_eager_credit() {
    let none = [("RDCOLL_UNEXPECTED_MAX", "0".to_string())];
    for transport in ["shm", "tcp"] {
        job_with(2, transport, PAIR_CASES, &none);
        job_with(3, transport, "random", &none);
        job_with(3, transport, "windows", &none);
        job_with(2, transport, "many_sends", &none);
    }
}

/// A rank whose host thread reads a flood for three peer timeouts keeps beating toward a third
/// rank that hears nothing else from it (tcp: the I/O thread does not wait for the reading host
/// thread, which reads at most 4 MiB per peer and poll). Before, the I/O thread waited for the
/// reader's lock and the third rank declared the reader dead in 3 runs of 4.
#[test]
fn a_rank_reading_a_flood_keeps_beating() {
    let short = [("RDCOLL_PEER_TIMEOUT_MS", "1000".to_string())];
    job_with(3, "tcp", "read_through_flood", &short);
}

/// A process that can reach the store's port but holds no secret learns nothing from it, and
/// a forged handshake reaches no rank's memory; the job goes on.
#[test]
fn a_process_without_the_secret_learns_nothing() {
    job(2, "tcp", "intruder");
    job(2, "shm", "intruder");
}

const PAIR_CASES: &str =
    "table_one,identical_envelopes,truncation,self_send,rendezvous_then_eager,posted_in_order,lone_in_order";

#[test]
fn pair_cases_over_shm() {
    job(2, "shm", PAIR_CASES);
}

/// The receive path against the reference model over shm: a million operations of the random
/// programme of `p2p_cases::differential`.
#[test]
fn matches_like_the_reference_model_over_shm() {
    job(2, "shm", "differential");
}

/// Waits for lone posted receives (taken by the fast path) while another thread of the rank
/// posts receives too, over shm and tcp, inline and thread mode.
#[test]
fn lone_waits_beside_another_thread() {
    for transport in ["shm", "tcp"] {
        for mode in ["inline", "thread"] {
            job_with(
                2,
                transport,
                "lone_threads",
                &[("RDCOLL_OFFLOAD", mode.into())],
            );
        }
    }
}

/// Inline mode (the host's calls run the agent) is where a blocking receive polls the fabric
/// itself; forced, so that a machine with many cores (thread mode by default) tests it too.
#[test]
fn a_receive_and_a_progressing_thread_keep_order() {
    for transport in ["shm", "tcp"] {
        for mode in ["inline", "thread"] {
            job_with(2, transport, "threads", &[("RDCOLL_OFFLOAD", mode.into())]);
        }
    }
}

/// Thread mode runs the same receive paths (fast receive, queued receives) with the agent as a
/// second thread of progress; forced, so that this 2-core machine (inline by default) tests it.
#[test]
fn pair_cases_in_thread_mode() {
    for transport in ["shm", "tcp"] {
        job_with(
            2,
            transport,
            PAIR_CASES,
            &[("RDCOLL_OFFLOAD", "thread".into())],
        );
    }
}

#[test]
fn ten_thousand_random_messages_in_thread_mode() {
    job_with(4, "shm", "random", &[("RDCOLL_OFFLOAD", "thread".into())]);
}

#[test]
fn random_receive_windows_over_shm() {
    job(4, "shm", "windows");
    job(3, "shm", "after_unexpected");
}

#[test]
fn random_receive_windows_over_shm_in_thread_mode() {
    job_with(4, "shm", "windows", &[("RDCOLL_OFFLOAD", "thread".into())]);
    job_with(
        3,
        "shm",
        "after_unexpected",
        &[("RDCOLL_OFFLOAD", "thread".into())],
    );
}

/// `RDCOLL_BIND=core` gives each rank its own share of the cores (where there are enough).
#[test]
fn ranks_bound_to_cores_each_get_their_own() {
    // The cores the ranks may run on (what binding splits), not a cgroup's quota.
    let cores = p2p_cases::windows::allowed_cpus().len();
    let ranks = cores.min(4);
    if ranks < 2 || cores > 64 {
        eprintln!("{cores} cores here: not checked");
        return;
    }
    job_with(
        ranks,
        "shm",
        "bound",
        &[
            ("RDCOLL_BIND", "core".into()),
            ("RDCOLL_TEST_CORES", cores.to_string()),
        ],
    );
}

/// In both modes, over shm: a long wait gives its core back.
#[test]
fn a_long_wait_sleeps_instead_of_spinning() {
    for mode in ["inline", "thread"] {
        job_with(
            2,
            "shm",
            "long_wait,long_probe",
            &[("RDCOLL_OFFLOAD", mode.into())],
        );
    }
}

#[test]
fn random_receive_windows_over_tcp() {
    job(3, "tcp", "windows");
}

#[test]
fn pair_cases_over_tcp() {
    job(2, "tcp", PAIR_CASES);
}

#[test]
fn ten_thousand_random_messages_from_three_ranks_over_shm() {
    job(4, "shm", "random");
}

#[test]
fn ten_thousand_random_messages_from_seven_ranks_over_tcp() {
    job(8, "tcp", "random");
}

/// Runs `slow_receiver` over tcp with rank 1's deposits paced to 64 MiB/s and the given
/// rendezvous settings; returns rank 0's peak of put bytes in flight toward rank 1.
fn peak_in_flight(chunk: usize, credits: usize) -> u64 {
    let out = std::env::temp_dir().join(format!(
        "rdcoll-peak-{}-{chunk}-{credits}",
        std::process::id()
    ));
    let env = [
        ("RDCOLL_SINK_RATE", "64M".to_string()),
        ("RDCOLL_RNDV_CHUNK", chunk.to_string()),
        ("RDCOLL_RNDV_CREDITS", credits.to_string()),
        ("RDCOLL_EAGER_LIMIT", "8192".to_string()),
        (PEAK_OUT, out.display().to_string()),
    ];
    job_with(2, "tcp", "slow_receiver", &env);
    let peak = std::fs::read_to_string(&out).unwrap().parse().unwrap();
    let _ = std::fs::remove_file(&out);
    peak
}

#[test]
fn a_slow_receiver_paces_its_sender_to_c_chunks_in_flight() {
    let (chunk, credits) = (256 << 10, 3);
    let peak = peak_in_flight(chunk, credits);
    assert!(
        peak <= (credits * chunk) as u64,
        "peak {peak} > {credits} x {chunk}"
    );
    assert!(
        peak >= chunk as u64,
        "peak {peak}: nothing was ever in flight?"
    );
}

#[test]
fn a_single_get_rendezvous_puts_the_whole_message_in_flight() {
    let peak = peak_in_flight(rdcoll_offload::p2p::MAX_RNDV_CHUNK, 1);
    assert_eq!(
        peak,
        (SLOW_LEN - rdcoll_offload::p2p::RNDV_FIRST_CHUNK) as u64,
        "everything after the first chunk at once"
    );
}

/// Rank 1 is killed after its last message; rank 0 must pass (rank 1's abort is expected).
fn death(transport: &str, env: &[(&str, String)]) {
    let exe = std::env::current_exe().unwrap();
    let mut spec = JobSpec::new(
        2,
        vec![
            exe.into(),
            "rank_entry".into(),
            "--exact".into(),
            "--nocapture".into(),
            "--test-threads=1".into(),
        ],
    );
    spec.transport = Some(transport.into());
    spec.prefix_output = true;
    spec.stop_on_failure = false;
    spec.env.push((CASES_VAR.into(), "peer_death".into()));
    spec.env
        .push(("RDCOLL_PEER_TIMEOUT_MS".into(), "1000".into()));
    for (k, v) in env {
        spec.env.push((k.into(), v.into()));
    }
    let report = run_job(&spec).unwrap();
    let survivor = report.exits.iter().find(|e| e.rank == 0).unwrap();
    assert!(
        survivor.status.success(),
        "{transport}: rank 0 {}",
        describe(survivor.status)
    );
    let victim = report.exits.iter().find(|e| e.rank == 1).unwrap();
    assert!(!victim.status.success(), "rank 1 was meant to die");
}

#[test]
fn a_killed_peer_fails_every_operation_that_involves_it_over_shm() {
    death("shm", &[]);
}

#[test]
fn a_killed_peer_fails_every_operation_that_involves_it_over_tcp() {
    death("tcp", &[]);
}

/// The point-to-point cases over libfabric (the `ofi` feature), on its tcp provider
/// (tcp;ofi_rxm) over loopback.
#[cfg(feature = "ofi")]
mod over_ofi {
    use super::*;

    /// The provider: tcp unless `RDCOLL_TEST_OFI_PROVIDER` names another.
    fn provider() -> String {
        std::env::var("RDCOLL_TEST_OFI_PROVIDER").unwrap_or_else(|_| "tcp".into())
    }

    fn ofi_env(extra: &[(&str, &str)]) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("FI_PROVIDER", provider()),
            ("FI_TCP_IFACE", "lo".to_string()),
            ("FI_NET_IFACE", "lo".to_string()),
        ];
        for (k, v) in extra {
            let k: &'static str = Box::leak(k.to_string().into_boxed_str());
            env.push((k, v.to_string()));
        }
        env
    }

    #[test]
    fn pair_cases_over_ofi_in_both_modes() {
        for mode in ["inline", "thread"] {
            job_with(2, "ofi", PAIR_CASES, &ofi_env(&[("RDCOLL_OFFLOAD", mode)]));
        }
    }

    #[test]
    fn random_messages_and_windows_over_ofi() {
        job_with(4, "ofi", "random", &ofi_env(&[]));
        job_with(3, "ofi", "windows", &ofi_env(&[]));
        job_with(3, "ofi", "after_unexpected", &ofi_env(&[]));
    }

    #[test]
    fn many_rendezvous_sends_over_ofi() {
        job_with(
            2,
            "ofi",
            "many_sends,past_nonces",
            &ofi_env(&[("RDCOLL_EAGER_LIMIT", "1024")]),
        );
    }

    #[test]
    fn a_killed_peer_fails_every_operation_that_involves_it_over_ofi() {
        death("ofi", &ofi_env(&[]));
    }
}

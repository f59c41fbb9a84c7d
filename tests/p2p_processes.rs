//! The point-to-point cases across processes: the test binary re-launches itself as the ranks
//! of a job (through the launcher `rdcoll-run` uses) over shm and over tcp.

mod p2p_cases;

use rdcoll_transport::launch::{describe, run_job, JobSpec};

const CASES_VAR: &str = "RDCOLL_P2P_CASES";

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

const PAIR_CASES: &str = "table_one,identical_envelopes,truncation,self_send";

#[test]
fn pair_cases_over_shm() {
    job(2, "shm", PAIR_CASES);
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

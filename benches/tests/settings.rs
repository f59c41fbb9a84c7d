//! Every setting through the product: `rdcoll-bench info` lists each declared variable, and a
//! value its kind refuses stops a real job (a 2-rank allreduce) with an error naming it.

use std::process::Command;

use rdcoll_transport::settings::{Level, SETTINGS};

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rdcoll-bench"))
}

fn tiny_allreduce() -> Command {
    let mut c = bench();
    c.args([
        "allreduce",
        "--ranks",
        "2",
        "-m",
        "4:4",
        "-i",
        "1",
        "-x",
        "0",
    ]);
    c
}

#[test]
fn info_lists_every_declared_setting() {
    let out = bench().arg("info").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for s in SETTINGS {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().next() == Some(s.name)),
            "info does not list {}:\n{text}",
            s.name
        );
    }
}

/// Set for its ranks by `rdcoll-bench --ranks` itself (from `--transport`): checked through
/// `info` instead.
const SET_BY_THE_BENCH: &[&str] = &["RDCOLL_TRANSPORT"];

#[test]
fn a_refused_value_stops_a_job_naming_the_variable() {
    for s in SETTINGS.iter().filter(|s| s.level != Level::Launch) {
        let Some(bad) = s.kind.refused_example() else {
            continue;
        };
        let mut run = if SET_BY_THE_BENCH.contains(&s.name) {
            let mut c = bench();
            c.arg("info");
            c
        } else {
            tiny_allreduce()
        };
        let out = run.env(s.name, bad).output().unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !out.status.success(),
            "{}={bad} was accepted:\n{all}",
            s.name
        );
        assert!(
            all.contains(&format!("{}=\"{bad}\"", s.name)),
            "{}={bad}: the error does not name it:\n{all}",
            s.name
        );
    }
}

/// The launch-level settings rdcoll itself reads (the others are the launcher's protocol):
/// the local rank on every transport, the local size where ranks may span hosts.
#[test]
fn local_rank_and_size_refuse_a_bad_value_by_name() {
    for (name, transport) in [("RDCOLL_LOCAL_RANK", "shm"), ("RDCOLL_LOCAL_SIZE", "tcp")] {
        let out = tiny_allreduce()
            .args(["--transport", transport])
            .env(name, "-3")
            .output()
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{name}=-3 was accepted:\n{all}");
        assert!(all.contains(&format!("{name}=\"-3\"")), "{name}: {all}");
    }
}

#[test]
fn a_blank_value_is_the_default() {
    let out = tiny_allreduce()
        .env("RDCOLL_EAGER_LIMIT", "")
        .env("RDCOLL_BCAST_BLOCK", " ")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

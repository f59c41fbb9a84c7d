//! `rdcoll-bench soak` end to end, briefly (the 10-minute runs are in docs/RELIABILITY.md):
//! every message checked over shm, tcp and local (threads), with as many ranks as cores and
//! twice as many more; and a message corrupted on purpose is caught.

use std::process::{Command, Output};

fn soak(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdcoll-bench"))
        .arg("soak")
        .args(args)
        .output()
        .unwrap()
}

fn assert_clean(args: &[&str]) {
    let out = soak(args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("0 lost, 0 duplicated, 0 reordered, 0 corrupted"),
        "{args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_short_soak_over_shm_and_tcp_finds_every_message_intact() {
    assert_clean(&["--ranks", "4", "--seconds", "2", "--transport", "shm"]);
    assert_clean(&[
        "--ranks",
        "8",
        "--seconds",
        "2",
        "--transport",
        "tcp",
        "--seed",
        "2",
    ]);
}

/// The same on ranks that are threads of one process (the `local` transport).
#[test]
fn a_short_soak_over_local_ranks_finds_every_message_intact() {
    assert_clean(&["--ranks", "4", "--seconds", "2", "--transport", "local"]);
}

#[test]
fn a_corrupted_message_fails_the_soak() {
    let out = soak(&["--ranks", "3", "--seconds", "2", "--inject-corruption"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("corrupted"), "{stderr}");
}

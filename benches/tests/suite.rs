//! `rdcoll-bench suite` end to end (quick, rdcoll alone): it writes a CSV, an SVG plot and the
//! README table for each comparison it runs.

use std::process::Command;

#[test]
fn quick_suite_writes_tables_and_plots() {
    let out = std::env::temp_dir().join(format!("rdcoll-suite-test-{}", std::process::id()));
    let empty = out.join("no-mpi");
    std::fs::create_dir_all(&empty).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_rdcoll-bench"))
        .args([
            "suite",
            "--quick",
            "--rounds",
            "1",
            "--only",
            "latency,barrier-2",
        ])
        .arg("--out")
        .arg(&out)
        // No MPI build there: rdcoll alone, whatever this machine has.
        .env("RDCOLL_BENCH_MPI_DIR", &empty)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let csv = std::fs::read_to_string(out.join("latency.csv")).unwrap();
    assert!(csv.starts_with("size,rdcoll,rdcoll/best\n"), "{csv}");
    assert_eq!(csv.lines().count(), 1 + 13, "1 B..4 KiB: {csv}");
    let svg = std::fs::read_to_string(out.join("latency.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("polyline"), "{svg}");
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(readme.contains("![latency](latency.svg)"), "{readme}");
    assert!(readme.contains("| 0 | "), "the barrier row: {readme}");
    assert!(
        !out.join("barrier-2.svg").exists(),
        "one row is a table, not a plot"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

//! What an ofi fabric reports holding (`Fabric::pending_report`), which the conformance
//! harness prints when a rank waited in vain.
#![cfg(feature = "ofi")]

use rdcoll_transport::bootstrap::FileStore;
use rdcoll_transport::ofi::OfiFabric;
use rdcoll_transport::{Fabric, FabricConfig};

#[test]
fn an_idle_fabric_reports_its_slots_and_buffers_and_no_peer() {
    // The only test in this binary: libfabric reads FI_PROVIDER on its first call, below.
    std::env::set_var("FI_PROVIDER", "tcp");
    std::env::set_var("FI_TCP_IFACE", "lo");
    let dir = std::env::temp_dir().join(format!("rdcoll-ofi-pending-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = FileStore::open(dir.to_str().unwrap()).unwrap();
    let fabric = OfiFabric::new(0, 1, &store, &FabricConfig::default(), None).unwrap();
    fabric.send(0, b"to myself").unwrap();
    let report = fabric.pending_report().expect("ofi reports what it holds");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        report.starts_with("ofi rank 0: send slots free "),
        "{report}"
    );
    assert!(report.contains("queued 0"), "{report}");
    // Every receive buffer is with the provider.
    let buffers = report.split("receive buffers posted ").nth(1).unwrap_or("");
    let (posted, all) = buffers.split_once('/').expect("posted/all");
    let all: String = all.chars().take_while(char::is_ascii_digit).collect();
    assert!(!all.is_empty() && posted == all, "{report}");
    // A message to itself is an event at once: no peer holds anything.
    assert!(!report.contains("; peer "), "{report}");
}

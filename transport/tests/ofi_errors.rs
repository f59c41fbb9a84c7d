//! What a user sees when libfabric cannot give the ofi backend what it needs.
#![cfg(feature = "ofi")]

use rdcoll_transport::bootstrap::FileStore;
use rdcoll_transport::ofi::OfiFabric;
use rdcoll_transport::FabricConfig;

/// A provider libfabric does not have: the error names the provider asked for and says how to
/// list the ones there are.
#[test]
fn a_provider_libfabric_does_not_have_is_named_in_the_error() {
    // The only test in this binary: nothing else reads the environment meanwhile, and
    // libfabric reads FI_PROVIDER on its first call, below.
    std::env::set_var("FI_PROVIDER", "rdcoll-no-such-provider");
    let dir = std::env::temp_dir().join(format!("rdcoll-ofi-errors-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = FileStore::open(dir.to_str().unwrap()).unwrap();
    let err = match OfiFabric::new(0, 1, &store, &FabricConfig::default(), None) {
        Err(e) => e.to_string(),
        Ok(f) => panic!("an endpoint opened on provider {:?}", f.provider()),
    };
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        err.contains("FI_PROVIDER=\"rdcoll-no-such-provider\""),
        "{err}"
    );
    assert!(err.contains("fi_info"), "{err}");
}

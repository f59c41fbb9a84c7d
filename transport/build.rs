//! With the `pmix` feature: compiles the PMIx shim (csrc/pmix_shim.c) against the system's
//! libpmix, found through pkg-config (Debian: `libpmix-dev`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc/pmix_shim.c");
    #[cfg(feature = "pmix")]
    build_pmix_shim();
}

#[cfg(feature = "pmix")]
fn build_pmix_shim() {
    let pmix = match pkg_config::Config::new().probe("pmix") {
        Ok(lib) => lib,
        Err(e) => panic!(
            "the pmix feature needs libpmix and its pkg-config file (Debian: libpmix-dev): {e}"
        ),
    };
    let mut build = cc::Build::new();
    build.file("csrc/pmix_shim.c");
    for dir in &pmix.include_paths {
        build.include(dir);
    }
    build.compile("rdcoll_pmix_shim");
}

//! Generates bindings to the system's libfabric (found through pkg-config; Debian:
//! `libfabric-dev`). Most of libfabric's data-path API is `static inline` (`fi_writedata`,
//! `fi_cq_read`, ...): bindgen writes a C shim for each, compiled here into a small archive.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=build.rs");
    let lib = pkg_config::Config::new()
        .atleast_version("1.17")
        .probe("libfabric")
        .unwrap_or_else(|e| {
            panic!(
                "the ofi transport needs libfabric >= 1.17 and its pkg-config file \
                 (Debian: libfabric-dev): {e}"
            )
        });
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let shims = out.join("shims");
    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid_.*|fid")
        .allowlist_var("FI_.*")
        .wrap_static_fns(true)
        .wrap_static_fns_path(&shims)
        .derive_default(true)
        .prepend_enum_name(false)
        .layout_tests(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for dir in &lib.include_paths {
        builder = builder.clang_arg(format!("-I{}", dir.display()));
    }
    let bindings = builder
        .generate()
        .expect("bindgen could not read libfabric's headers");
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings.rs");
    let mut build = cc::Build::new();
    build.file(shims.with_extension("c")).include(".");
    for dir in &lib.include_paths {
        build.include(dir);
    }
    build.flag_if_supported("-Wno-deprecated-declarations");
    build.compile("rdcoll_ofi_shims");
}

//! `include/rdcoll.h` is what cbindgen makes of this crate (set `RDCOLL_BLESS=1` to rewrite
//! it after changing the API), and it compiles cleanly as C99 and as C++.

use std::path::{Path, PathBuf};
use std::process::Command;

fn header_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/rdcoll.h")
}

fn generated() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(Path::new(dir).join("cbindgen.toml"))
        .expect("ffi/cbindgen.toml parses");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen understands the ffi crate")
        .write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn committed_header_is_what_cbindgen_generates() {
    let want = generated();
    let path = header_path();
    if std::env::var_os("RDCOLL_BLESS").is_some() {
        std::fs::write(&path, &want).expect("include/rdcoll.h is writable");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "include/rdcoll.h differs from what cbindgen generates from ffi/src; regenerate it with \
         `RDCOLL_BLESS=1 cargo test -p rdcoll-ffi --test header` and commit it"
    );
}

/// Compiles a file that includes the header with `compiler args`.
fn compiles(compiler: &str, args: &[&str], source: &str, ext: &str) {
    let out = compile(compiler, args, source, ext);
    assert!(
        out.status.success(),
        "{compiler} {args:?} rejects include/rdcoll.h:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compiles `source` (which includes the header) with `compiler args -fsyntax-only`.
fn compile(compiler: &str, args: &[&str], source: &str, ext: &str) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!("rdcoll-header-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("use_header.{ext}"));
    std::fs::write(&file, source).unwrap();
    let include = header_path().parent().unwrap().to_path_buf();
    let out = Command::new(compiler)
        .args(args)
        .arg("-I")
        .arg(&include)
        .arg("-fsyntax-only")
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    out
}

const USE: &str = r#"
#include <rdcoll.h>
#include <rdcoll.h> /* the include guard works */
int use_it(void);
int use_it(void) {
    rdc_comm *world = 0;
    rdc_status st;
    int rank = -1, x = 0;
    if (rdc_init() != RDC_SUCCESS) return 1;
    (void)rdc_comm_world(&world);
    (void)rdc_comm_rank(world, &rank);
    (void)rdc_allreduce(RDC_IN_PLACE, &x, 1, RDC_INT32, RDC_SUM, world);
    (void)rdc_recv(&x, 1, RDC_INT32, RDC_ANY_SOURCE, RDC_ANY_TAG, world, &st);
    return (int)st.count + (rdc_wtime() > 0.0) + (rdc_strerror(RDC_ERR_TRUNCATE) != 0);
}
"#;

#[test]
fn header_compiles_as_strict_c99() {
    compiles(
        "cc",
        &["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"],
        USE,
        "c",
    );
}

#[test]
fn header_compiles_as_cpp() {
    compiles(
        "c++",
        &["-std=c++11", "-Wall", "-Wextra", "-Werror"],
        &USE.replace("rdc_comm *world = 0", "rdc_comm *world = nullptr"),
        "cpp",
    );
}

/// An operation where a datatype goes (or the reverse) is what the compiler can see: the
/// arguments are the `rdc_datatype` and `rdc_op` enums, so `rdc_send(buf, 4, RDC_SUM, ...)`
/// draws gcc's `-Wenum-conversion` (in `-Wextra`) and is an error in C++.
#[test]
fn an_operation_for_a_datatype_is_caught_at_compile_time() {
    let wrong = r#"
#include <rdcoll.h>
int wrong(const rdc_comm *world);
int wrong(const rdc_comm *world) {
    int x = 0;
    return rdc_send(&x, 4, RDC_SUM, 0, 0, world);
}
"#;
    let c = compile("cc", &["-std=c99", "-Wextra", "-Werror"], wrong, "c");
    let said = String::from_utf8_lossy(&c.stderr);
    assert!(
        !c.status.success() && said.contains("enum"),
        "cc accepted an operation as a datatype: {said}"
    );
    let cpp = compile("c++", &["-std=c++11"], wrong, "cpp");
    assert!(
        !cpp.status.success(),
        "c++ accepted an operation as a datatype"
    );
    // A handle from rdc_op_create, kept in an int, still converts in C.
    let user_op = r#"
#include <rdcoll.h>
int reduce_with(const rdc_comm *world, int op);
int reduce_with(const rdc_comm *world, int op) {
    int x = 0;
    return rdc_allreduce(RDC_IN_PLACE, &x, 1, RDC_INT32, op, world);
}
"#;
    compiles(
        "cc",
        &["-std=c99", "-Wall", "-Wextra", "-Werror"],
        user_op,
        "c",
    );
}

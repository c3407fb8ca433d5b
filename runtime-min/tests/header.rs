//! The checked-in C header is what cbindgen generates from `src/capi.rs`.

use std::path::Path;

#[test]
fn header_is_up_to_date() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).unwrap();
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(root.join("src/capi.rs"))
        .generate()
        .expect("cbindgen parses src/capi.rs")
        .write(&mut out);
    let generated = String::from_utf8(out).unwrap();
    let path = root.join("include/hetero_runtime.h");
    if std::env::var_os("HETERO_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/hetero_runtime.h is out of date: run `HETERO_BLESS=1 cargo test -p hetero-runtime --test header`"
    );
    for f in [
        "hetero_runtime_open",
        "hetero_linear",
        "hetero_runtime_close",
        "HeteroOptions",
    ] {
        assert!(generated.contains(f), "{f} missing from the header");
    }
}

//! Builds the example's component (`minimal-guest`) for `wasm32-wasip2` and hands its path to the
//! binary as `MINIMAL_GUEST_WASM_PATH`. `MINIMAL_GUEST_WASM=path` embeds a prebuilt component.

use std::path::Path;

fn main() {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest_dir)
        .ancestors()
        .nth(3)
        .expect("workspace root");
    let wasm = m3_build_support::build_component(
        root,
        "minimal-guest",
        "minimal_guest",
        &[
            "examples/minimal/guest/src",
            "examples/minimal/guest/Cargo.toml",
            "examples/minimal/wit",
        ],
    );
    println!("cargo:rustc-env=MINIMAL_GUEST_WASM_PATH={}", wasm.display());
}

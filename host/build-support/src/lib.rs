//! Build-script helper: builds a guest crate of this workspace into a `wasm32-wasip2` component.
//!
//! Used by `host/build.rs` (for `m3-guest`) and `examples/minimal/host/build.rs` (for
//! `minimal-guest`). The guest is built by a nested `cargo rustc` with its own target directory
//! (sharing the outer one deadlocks on its lock) and without the outer build's environment
//! (clippy, coverage or sanitizer flags must not leak into the wasm build).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

/// The only variables the nested cargo inherits.
const KEPT_ENV: [&str; 5] = [
    "PATH",
    "HOME",
    "RUSTUP_HOME",
    "CARGO_HOME",
    "RUSTUP_TOOLCHAIN",
];

/// Builds the workspace package `package` (whose library is `lib_name`) as a component and
/// returns the path of a copy in `OUT_DIR`, `<lib_name>.wasm`. Call it from a build script.
///
/// The component is built with `cargo rustc --locked -p <package> --profile guest --target
/// wasm32-wasip2 --crate-type cdylib` in `<outer target dir>/wasm-guest`, installing the target
/// with rustup if the toolchain lacks it. Setting `<LIB_NAME>_WASM` (for example `M3_GUEST_WASM`)
/// to the path of a prebuilt component skips the build and uses that file instead.
///
/// Emits `rerun-if-changed` for the workspace's `Cargo.toml` and `Cargo.lock` and for each of
/// `sources` (paths relative to `workspace_root`, typically the guest's `src`, its `Cargo.toml`
/// and its WIT directory), and `rerun-if-env-changed` for the override variable.
///
/// # Panics
///
/// Panics (failing the build script) when the build fails or the component cannot be copied.
pub fn build_component(
    workspace_root: &Path,
    package: &str,
    lib_name: &str,
    sources: &[&str],
) -> PathBuf {
    for watched in ["Cargo.lock", "Cargo.toml"].iter().chain(sources) {
        println!(
            "cargo:rerun-if-changed={}",
            workspace_root.join(watched).display()
        );
    }
    let override_var = format!("{}_WASM", lib_name.to_uppercase());
    println!("cargo:rerun-if-env-changed={override_var}");

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let wasm = match env::var_os(&override_var) {
        Some(prebuilt) => PathBuf::from(prebuilt),
        None => run_nested_build(workspace_root, &out_dir, package, lib_name),
    };
    let embedded = out_dir.join(format!("{lib_name}.wasm"));
    std::fs::copy(&wasm, &embedded)
        .unwrap_or_else(|e| panic!("copying the component from {}: {e}", wasm.display()));
    embedded
}

fn guest_target_dir(root: &Path, out_dir: &Path) -> PathBuf {
    // <target>/<profile>/build/<pkg>/out -> <target>/wasm-guest
    let outer_target = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| out_dir.ancestors().nth(4).map(Path::to_path_buf))
        .unwrap_or_else(|| root.join("target"));
    outer_target.join("wasm-guest")
}

fn ensure_target_installed(cargo_env: &[(&str, String)]) {
    let Ok(output) = Command::new("rustc").args(["--print", "sysroot"]).output() else {
        return;
    };
    let sysroot = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if sysroot.join("lib/rustlib").join(TARGET).exists() {
        return;
    }
    // rust-toolchain.toml names the target; an already-installed toolchain may lack it.
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .envs(cargo_env.iter().map(|(k, v)| (*k, v.as_str())))
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        panic!("the {TARGET} target is missing and `rustup target add {TARGET}` failed");
    }
}

fn run_nested_build(root: &Path, out_dir: &Path, package: &str, lib_name: &str) -> PathBuf {
    let target_dir = guest_target_dir(root, out_dir);
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let keep: Vec<(&str, String)> = KEPT_ENV
        .into_iter()
        .filter_map(|k| env::var(k).ok().map(|v| (k, v)))
        .collect();
    ensure_target_installed(&keep);
    let status = Command::new(&cargo)
        .current_dir(root)
        .env_clear()
        .envs(keep.iter().map(|(k, v)| (*k, v.as_str())))
        .args(["rustc", "--locked", "-p", package])
        .args(["--profile", "guest", "--target", TARGET])
        .args(["--crate-type", "cdylib", "--target-dir"])
        .arg(&target_dir)
        .status()
        .unwrap_or_else(|e| panic!("running the nested cargo for {package}: {e}"));
    assert!(status.success(), "building the {package} component failed");
    target_dir
        .join(TARGET)
        .join("guest")
        .join(format!("{lib_name}.wasm"))
}

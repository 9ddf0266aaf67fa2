//! Builds the guest component (`m3-guest`) for `wasm32-wasip2` and hands its path to the crate.
//!
//! A nested `cargo rustc` with its own target directory (sharing the outer one deadlocks on its
//! lock) and without the outer build's flags (clippy, coverage or sanitizer flags must not leak
//! into the wasm build). `M3_GUEST_WASM=path` skips the build and embeds a prebuilt component.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("workspace root").to_path_buf();
    for watched in [
        "guest/src",
        "guest/Cargo.toml",
        "wit",
        "Cargo.lock",
        "Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=M3_GUEST_WASM");

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let wasm = match env::var_os("M3_GUEST_WASM") {
        Some(prebuilt) => PathBuf::from(prebuilt),
        None => build_guest(&root, &out_dir),
    };
    let embedded = out_dir.join("m3_guest.wasm");
    std::fs::copy(&wasm, &embedded)
        .unwrap_or_else(|e| panic!("copying the guest component from {}: {e}", wasm.display()));
    println!("cargo:rustc-env=M3_GUEST_WASM_PATH={}", embedded.display());
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

fn build_guest(root: &Path, out_dir: &Path) -> PathBuf {
    let target_dir = guest_target_dir(root, out_dir);
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let keep: Vec<(&str, String)> = [
        "PATH",
        "HOME",
        "RUSTUP_HOME",
        "CARGO_HOME",
        "RUSTUP_TOOLCHAIN",
    ]
    .into_iter()
    .filter_map(|k| env::var(k).ok().map(|v| (k, v)))
    .collect();
    ensure_target_installed(&keep);
    let status = Command::new(&cargo)
        .current_dir(root)
        .env_clear()
        .envs(keep.iter().map(|(k, v)| (*k, v.as_str())))
        .args([
            "rustc",
            "--locked",
            "-p",
            "m3-guest",
            "--profile",
            "guest",
            "--target",
            TARGET,
            "--crate-type",
            "cdylib",
            "--target-dir",
        ])
        .arg(&target_dir)
        .status()
        .expect("running the nested cargo for the guest component");
    assert!(status.success(), "building the guest component failed");
    target_dir.join(TARGET).join("guest").join("m3_guest.wasm")
}

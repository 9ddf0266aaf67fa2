//! Build-script helper: builds a guest crate of this workspace into a WebAssembly component.
//!
//! Used by `host/components/build.rs` (for `m3-guest`, twice: the engine and the policy-only component) and
//! `examples/minimal/host/build.rs` (for `minimal-guest`). The guest is built by a nested `cargo
//! rustc` with its own target directory (sharing the outer one deadlocks on its lock) and without
//! the outer build's environment (clippy, coverage or sanitizer flags must not leak into the wasm
//! build).
//!
//! # Files
//!
//! - This crate is this one file (`m3-build-support`): the nested `cargo rustc` with a target
//!   directory per profile and a clean environment, and the `wit-component` encoding, shared by
//!   `host/components/build.rs` and the minimal example.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The target whose linker writes a component directly.
pub const WASIP2: &str = "wasm32-wasip2";
/// The target without WASI: its core module is turned into a component here, importing only what
/// its WIT world names.
pub const UNKNOWN: &str = "wasm32-unknown-unknown";

/// The only variables the nested cargo inherits.
const KEPT_ENV: [&str; 5] = [
    "PATH",
    "HOME",
    "RUSTUP_HOME",
    "CARGO_HOME",
    "RUSTUP_TOOLCHAIN",
];

/// One component to build: which package, for which target, with which profile and features,
/// under which name.
#[derive(Debug, Clone, Copy)]
pub struct ComponentBuild<'a> {
    /// The workspace package.
    pub package: &'a str,
    /// Its library's name (the nested build writes `<lib_name>.wasm`).
    pub lib_name: &'a str,
    /// The name of the copy in `OUT_DIR` (`<artifact>.wasm`) and of the override variable
    /// (`<ARTIFACT>_WASM`).
    pub artifact: &'a str,
    /// [`WASIP2`] or [`UNKNOWN`].
    pub target: &'a str,
    /// The cargo profile of the nested build (its own output folder, so two artifacts of one
    /// package never overwrite each other).
    pub profile: &'a str,
    /// Whether the package's default features are on.
    pub default_features: bool,
    /// Further features of the package to turn on.
    pub features: &'a [&'a str],
    /// `--cfg` values for every crate of the nested build (for example
    /// `getrandom_backend="custom"`).
    pub cfgs: &'a [&'a str],
    /// Paths (relative to the workspace root) whose changes rebuild the component.
    pub sources: &'a [&'a str],
}

/// Builds the workspace package `package` (whose library is `lib_name`) as a `wasm32-wasip2`
/// component with the `guest` profile and returns the path of a copy in `OUT_DIR`,
/// `<lib_name>.wasm`. Call it from a build script; see [`build_component_with`].
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
    build_component_with(
        workspace_root,
        &ComponentBuild {
            package,
            lib_name,
            artifact: lib_name,
            target: WASIP2,
            profile: "guest",
            default_features: true,
            features: &[],
            cfgs: &[],
            sources,
        },
    )
}

/// Builds `build` as a component and returns the path of its copy in `OUT_DIR`,
/// `<artifact>.wasm`.
///
/// The component is built with `cargo rustc --locked -p <package> --profile <profile> --target
/// <target> --crate-type cdylib` in `<outer target dir>/wasm-guest/<profile>`, installing the target with
/// rustup if the toolchain lacks it; a [`UNKNOWN`] core module is then encoded as a component
/// with `wit-component` (from the WIT metadata wit-bindgen embeds). Setting `<ARTIFACT>_WASM`
/// (for example `M3_GUEST_WASM`) to the path of a prebuilt component skips the build and uses
/// that file instead.
///
/// Emits `rerun-if-changed` for the workspace's `Cargo.toml` and `Cargo.lock` and for each of
/// `sources`, and `rerun-if-env-changed` for the override variable.
///
/// # Panics
///
/// Panics (failing the build script) when the build fails or the component cannot be copied.
pub fn build_component_with(workspace_root: &Path, build: &ComponentBuild<'_>) -> PathBuf {
    for watched in ["Cargo.lock", "Cargo.toml"].iter().chain(build.sources) {
        println!(
            "cargo:rerun-if-changed={}",
            workspace_root.join(watched).display()
        );
    }
    let override_var = format!("{}_WASM", build.artifact.to_uppercase());
    println!("cargo:rerun-if-env-changed={override_var}");

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let embedded = out_dir.join(format!("{}.wasm", build.artifact));
    match env::var_os(&override_var) {
        Some(prebuilt) => {
            std::fs::copy(&prebuilt, &embedded).unwrap_or_else(|e| {
                panic!(
                    "copying the component from {}: {e}",
                    Path::new(&prebuilt).display()
                )
            });
        }
        None => {
            // Builds sharing a profile write the same file: another build script (of a
            // concurrent outer build) must not replace it between our build and our read.
            // Builds of different profiles have target directories of their own, so they can
            // run at the same time.
            let lock = build_lock(workspace_root, &out_dir, build.profile);
            let built = run_nested_build(workspace_root, &out_dir, build);
            let bytes = std::fs::read(&built)
                .unwrap_or_else(|e| panic!("reading {}: {e}", built.display()));
            drop(lock);
            let component = if build.target == WASIP2 {
                bytes
            } else {
                encode_component(&bytes, &built)
            };
            std::fs::write(&embedded, component)
                .unwrap_or_else(|e| panic!("writing {}: {e}", embedded.display()));
        }
    }
    embedded
}

/// Turns a core module carrying wit-bindgen's component-type metadata into a component.
fn encode_component(module: &[u8], path: &Path) -> Vec<u8> {
    wit_component::ComponentEncoder::default()
        .module(module)
        .and_then(|encoder| encoder.validate(true).encode())
        .unwrap_or_else(|e| panic!("encoding {} as a component: {e:#}", path.display()))
}

/// The nested build's target directory for `profile`: one per profile, so that a profile's
/// build never waits for another's lock on the same directory.
fn guest_target_dir(root: &Path, out_dir: &Path, profile: &str) -> PathBuf {
    // <target>/<profile>/build/<pkg>/out -> <target>/wasm-guest/<nested profile>
    let outer_target = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| out_dir.ancestors().nth(4).map(Path::to_path_buf))
        .unwrap_or_else(|| root.join("target"));
    outer_target.join("wasm-guest").join(profile)
}

/// An exclusive lock on the nested target directory of `profile`, held while a component is
/// built and read.
fn build_lock(root: &Path, out_dir: &Path, profile: &str) -> std::fs::File {
    let dir = guest_target_dir(root, out_dir, profile);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let path = dir.join("m3-build-support.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
    file
}

/// Held while a target is checked and installed: two builds of one build script run at once,
/// and two `rustup` runs must not change one toolchain together.
static RUSTUP: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn ensure_target_installed(target: &str, cargo_env: &[(&str, String)]) {
    let _installing = RUSTUP.lock().unwrap_or_else(|e| e.into_inner());
    let Ok(output) = Command::new("rustc").args(["--print", "sysroot"]).output() else {
        return;
    };
    let sysroot = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if sysroot.join("lib/rustlib").join(target).exists() {
        return;
    }
    // rust-toolchain.toml names the targets; an already-installed toolchain may lack them.
    let status = Command::new("rustup")
        .args(["target", "add", target])
        .envs(cargo_env.iter().map(|(k, v)| (*k, v.as_str())))
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        panic!("the {target} target is missing and `rustup target add {target}` failed");
    }
}

fn run_nested_build(root: &Path, out_dir: &Path, build: &ComponentBuild<'_>) -> PathBuf {
    let target_dir = guest_target_dir(root, out_dir, build.profile);
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let keep: Vec<(&str, String)> = KEPT_ENV
        .into_iter()
        .filter_map(|k| env::var(k).ok().map(|v| (k, v)))
        .collect();
    ensure_target_installed(build.target, &keep);
    let mut command = Command::new(&cargo);
    command
        .current_dir(root)
        .env_clear()
        .envs(keep.iter().map(|(k, v)| (*k, v.as_str())))
        .args(["rustc", "--locked", "-p", build.package])
        .args(["--profile", build.profile, "--target", build.target])
        .args(["--crate-type", "cdylib", "--target-dir"])
        .arg(&target_dir);
    if !build.default_features {
        command.arg("--no-default-features");
    }
    if !build.features.is_empty() {
        command.args(["--features", &build.features.join(",")]);
    }
    if !build.cfgs.is_empty() {
        let flags: Vec<String> = build
            .cfgs
            .iter()
            .flat_map(|cfg| ["\"--cfg\"".to_string(), format!("{cfg:?}")])
            .collect();
        command.args([
            "--config",
            &format!("target.{}.rustflags=[{}]", build.target, flags.join(",")),
        ]);
    }
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("running the nested cargo for {}: {e}", build.package));
    assert!(
        status.success(),
        "building the {} component failed",
        build.package
    );
    target_dir
        .join(build.target)
        .join(build.profile)
        .join(format!("{}.wasm", build.lib_name))
}

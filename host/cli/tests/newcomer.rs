//! The library as a newcomer meets it: a crate of their own made from the README alone (its
//! `Cargo.toml` snippet with the profile overrides, the path pointed at this checkout, and its
//! Rust example as `src/main.rs`, both as printed), built in debug outside this workspace (in
//! its target directory) and run with an empty component cache. Its build prints no warning;
//! its first run says what it does while the component compiles, finishes the specification's
//! flow, and takes no more than three times the release `m3` command's first run with an empty
//! cache (the same compile, fully optimised).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The first fenced block of `lang` after `heading` in the README.
fn readme_block(heading: &str, lang: &str) -> String {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("the README");
    let section = &readme[readme.find(heading).expect("the README's Rust section")..];
    let fence = format!("```{lang}\n");
    let start = section.find(&fence).expect("the block") + fence.len();
    section[start..start + section[start..].find("```").expect("its end")].to_string()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `cargo`, with none of the variables `cargo test` gave this process: build scripts that
/// track one (`ring`'s, `CARGO_MANIFEST_DIR`) would rebuild, here and again in the next build
/// from a shell.
fn cargo() -> Command {
    let mut cargo = Command::new("cargo");
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let given = [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_CRATE_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "OUT_DIR",
            "RUSTFLAGS",
        ]
        .contains(&name.as_ref())
            || name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_");
        if given {
            cargo.env_remove(name.as_ref());
        }
    }
    cargo
}

/// Runs `command` to its end (at most `limit`), asserting success; its stderr and how long.
fn timed(command: Command, limit: Duration) -> (String, Duration) {
    let started = Instant::now();
    let out = finish(command, None, limit);
    let took = started.elapsed();
    out.ok();
    (out.stderr, took)
}

#[test]
fn a_crate_made_from_the_readme_builds_runs_and_says_what_it_does_first() {
    let dir = tempfile::tempdir().expect("a directory outside the workspace");
    let root = dir.path();
    let manifest = readme_block("## Pausing an execution at an elicitation (Rust)", "toml");
    let printed_path = r#"m3 = { path = "../m3/host" }"#;
    assert!(manifest.contains(printed_path), "{manifest}");
    let host = workspace().join("host").canonicalize().unwrap();
    let manifest = format!(
        "[package]\nname = \"newcomer\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n{}",
        manifest.replace(printed_path, &format!("m3 = {{ path = {:?} }}", host))
    );
    std::fs::write(root.join("Cargo.toml"), manifest).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    let example = readme_block(
        "## Pausing an execution at an elicitation (Rust)",
        "rust,no_run",
    );
    std::fs::write(root.join("src/main.rs"), example).unwrap();
    // The same toolchain and dependency versions as this workspace (a newcomer's own lock
    // would resolve the newest; this keeps the test's build reproducible).
    for file in ["rust-toolchain.toml", "Cargo.lock"] {
        std::fs::copy(workspace().join(file), root.join(file)).unwrap();
    }
    // This checkout's target directory (where the command under test was built): what the
    // crate shares with the workspace's build (dependencies built with the same features and
    // profile, the components) is built once.
    let target = Path::new(M3)
        .parent()
        .and_then(Path::parent)
        .expect("the target directory")
        .to_path_buf();
    let mut build = cargo();
    build
        .current_dir(root)
        .args(["build", "--color", "never"])
        .env("CARGO_TARGET_DIR", &target);
    let (built, _) = timed(build, Duration::from_secs(3600));
    // A dependent sees the warnings of a path dependency (cargo caps lints only for registry
    // and git ones): there are none, from m3 or from the README's example.
    let warnings: Vec<&str> = built
        .lines()
        .filter(|line| line.trim_start().starts_with("warning"))
        .collect();
    assert!(
        warnings.is_empty(),
        "a dependent's build warns: {warnings:?}\n{built}"
    );

    // Run where the example expects the server (`target/debug/m3`, the command this checkout
    // built) and its database, with an empty component cache.
    let run_dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(run_dir.path().join("target/debug")).unwrap();
    std::os::unix::fs::symlink(M3, run_dir.path().join("target/debug/m3")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let mut first = Command::new(target.join("debug/newcomer"));
    first
        .current_dir(run_dir.path())
        .env("M3_CACHE_DIR", cache.path().join("m3"));
    let (said, took) = timed(first, Duration::from_secs(600));
    assert!(
        said.contains("m3: compiling the policy engine component for this machine, once"),
        "the first run says what it does: {said}"
    );
    assert!(
        !said.contains("unoptimised"),
        "with the overrides it is quick: {said}"
    );

    // The release command's first run, with an empty cache of its own: the build the
    // README's first command makes (done here if it is not yet; in CI the demo that follows
    // finds it done), in this checkout's target directory.
    let mut release = cargo();
    release
        .current_dir(workspace())
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "m3-cli",
            "--target-dir",
        ])
        .arg(&target);
    timed(release, Duration::from_secs(3600));
    let cli_cache = tempfile::tempdir().unwrap();
    let cli_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        cli_dir.path().join("schema.json"),
        r#"{"type": "object", "properties": {"a": {"type": "string"}}}"#,
    )
    .unwrap();
    let mut cli = Command::new(target.join("release/m3"));
    cli.current_dir(cli_dir.path())
        .env("M3_CACHE_DIR", cli_cache.path().join("m3"))
        .args(["check-schema", "schema.json"]);
    let (_, cli_took) = timed(cli, Duration::from_secs(600));
    eprintln!("first runs: the README's crate (debug) {took:?}, the release command {cli_took:?}");
    // Within three times: the compile dominates both (the overrides optimise Cranelift in the
    // debug build); a second of slack absorbs start-up noise on a loaded machine.
    assert!(
        took <= cli_took * 3 + Duration::from_secs(1),
        "the README's crate's first run took {took:?}; the release command's {cli_took:?}"
    );
}

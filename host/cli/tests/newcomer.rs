//! The library as a newcomer meets it: a crate of their own made from the README alone (its
//! `Cargo.toml` snippet with the profile overrides, the path pointed at this checkout, and its
//! Rust example as `src/main.rs`, both as printed), built in debug outside this workspace and
//! run with an empty component cache. Its first run says what it does while the component
//! compiles, finishes the specification's flow, and takes no more than three times the `m3`
//! command's own first run with an empty cache (the same compile).

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
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("newcomer-target");
    let mut build = Command::new("cargo");
    build
        .current_dir(root)
        .args(["build", "--quiet"])
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTFLAGS");
    timed(build, Duration::from_secs(3600));

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

    // The command's own first run, the same compile with the workspace's profile.
    let cli_cache = tempfile::tempdir().unwrap();
    let cli_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        cli_dir.path().join("schema.json"),
        r#"{"type": "object", "properties": {"a": {"type": "string"}}}"#,
    )
    .unwrap();
    let mut cli = Command::new(M3);
    cli.current_dir(cli_dir.path())
        .env("M3_CACHE_DIR", cli_cache.path().join("m3"))
        .args(["check-schema", "schema.json"]);
    let (_, cli_took) = timed(cli, Duration::from_secs(600));
    eprintln!("first runs: the README's crate {took:?}, the command {cli_took:?}");
    assert!(
        took <= cli_took * 3 + Duration::from_secs(10),
        "the README's crate's first run took {took:?}; the command's {cli_took:?}"
    );
}

//! What ships is what CI builds: no test-only feature of the `m3` crate reaches the packages a
//! user builds (the `m3` command, the Python package's native module, the library itself), and
//! `.ci/run` runs the README's two commands exactly as written, then scans the release `m3` it
//! ran for the words only a test-only feature compiles in.
//!
//! The test build turns the features on (`tests/Cargo.toml`), and `m3-cli` has the tests crate as
//! a dev-dependency: cargo's resolver keeps dev-dependencies' features out of a non-test build,
//! which is what `cargo tree` without dev edges reports, and what these tests hold.

use anyhow::{Context, Result, bail, ensure};
use m3_tests::workspace::{cargo, workspace_root};
use std::collections::BTreeSet;
use std::process::Command;

/// Every feature of the `m3` crate (`host/Cargo.toml`), each test-only: a new feature must be
/// classified here (and, if it ships, taken out of this list with a reason).
const TEST_ONLY_FEATURES: [&str; 3] = ["fault-points", "mutations", "internals"];

/// The packages users build: the `m3` command, the Python package's native module, the library.
const SHIPPED_PACKAGES: [&str; 3] = ["m3-cli", "m3-python", "m3"];

/// Words that only a test-only feature compiles into a binary (the environment variables that
/// arm a fault point or pick a mutation); `.ci/run` requires the release `m3` to hold none.
const TEST_ONLY_MARKERS: [&str; 2] = ["M3_FAULT_POINT", "M3_MUTATION"];

fn read(relative: &str) -> Result<String> {
    std::fs::read_to_string(workspace_root().join(relative)).with_context(|| relative.to_string())
}

/// The features cargo turns on for the workspace's own crates `m3` and `m3-components` when it
/// builds `packages` along the dependency `edges` (`cargo tree -e <edges>`), by crate.
fn features_in_build(packages: &[&str], edges: &str) -> Result<Vec<(String, BTreeSet<String>)>> {
    let mut command = Command::new(cargo());
    command.current_dir(workspace_root()).args([
        "tree", "--locked", "-e", edges, "-f", "{p}|{f}", "--prefix", "none",
    ]);
    for package in packages {
        command.args(["-p", package]);
    }
    let output = command.output().context("running cargo tree")?;
    ensure!(
        output.status.success(),
        "cargo tree -e {edges} {packages:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut found = Vec::new();
    for line in String::from_utf8(output.stdout)?.lines() {
        let Some((package, features)) = line.split_once('|') else {
            continue;
        };
        let name = package.split_whitespace().next().unwrap_or("");
        if name != "m3" && name != "m3-components" {
            continue;
        }
        let features = features
            .trim_end_matches(" (*)")
            .split(',')
            .filter(|f| !f.is_empty())
            .map(str::to_string)
            .collect();
        found.push((name.to_string(), features));
    }
    ensure!(
        found.iter().any(|(name, _)| name == "m3"),
        "cargo tree {packages:?} shows no m3 crate"
    );
    Ok(found)
}

/// The `[features]` table of `host/Cargo.toml`: the names it declares.
fn declared_features() -> Result<BTreeSet<String>> {
    let manifest = read("host/Cargo.toml")?;
    let table = manifest
        .split("\n[features]\n")
        .nth(1)
        .context("host/Cargo.toml has a [features] table")?;
    let table = table.split("\n[").next().unwrap_or(table);
    Ok(table
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim().to_string()))
        .filter(|name| !name.is_empty())
        .collect())
}

#[test]
fn no_test_only_feature_reaches_what_ships() -> Result<()> {
    let declared = declared_features()?;
    let classified: BTreeSet<String> = TEST_ONLY_FEATURES.iter().map(|f| f.to_string()).collect();
    ensure!(
        declared == classified,
        "host/Cargo.toml declares the features {declared:?}; this test knows {classified:?}: \
         classify the new one (test-only, or shipped)"
    );
    // The check can see them: the test build (dev edges included) has every one.
    let test_build = features_in_build(&["m3-cli"], "all")?;
    for feature in TEST_ONLY_FEATURES {
        ensure!(
            test_build.iter().any(|(_, on)| on.contains(feature)),
            "the test build of m3-cli has no `{feature}`: cargo tree's output changed shape, \
             so this test would see nothing; {test_build:?}"
        );
    }
    // What a user builds has none.
    for package in SHIPPED_PACKAGES {
        let shipped = features_in_build(&[package], "normal,build")?;
        for (name, on) in &shipped {
            let test_only: Vec<&String> = on
                .iter()
                .filter(|f| TEST_ONLY_FEATURES.contains(&f.as_str()))
                .collect();
            if !test_only.is_empty() {
                bail!(
                    "`cargo build -p {package}` builds {name} with the test-only features \
                     {test_only:?}: a user would get them"
                );
            }
        }
    }
    Ok(())
}

/// The words `.ci/run` looks for in the release `m3` are there when the features are on (the
/// test build's `m3` has every one), so their absence from the release binary means something;
/// and `.ci/run` looks for each.
#[test]
fn the_shipped_binary_scan_looks_for_words_the_test_build_has() -> Result<()> {
    let m3 = m3_tests::python_package::m3_command()?;
    let bytes = std::fs::read(&m3).with_context(|| m3.display().to_string())?;
    let ci = read(".ci/run")?;
    for marker in TEST_ONLY_MARKERS {
        ensure!(
            bytes.windows(marker.len()).any(|w| w == marker.as_bytes()),
            "the test build's m3 ({}) holds no `{marker}`: the release scan would prove nothing",
            m3.display()
        );
        ensure!(
            ci.contains(marker),
            ".ci/run does not scan the release m3 for `{marker}`"
        );
    }
    Ok(())
}

/// `.ci/run` runs the README's two opening commands exactly as written.
#[test]
fn ci_runs_the_readme_s_two_commands_as_written() -> Result<()> {
    let readme = read("README.md")?;
    let block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .context("README.md opens with a sh block")?;
    let commands: Vec<&str> = block
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    ensure!(
        commands.len() == 2,
        "README.md's opening block gives {} commands, not two: {commands:?}",
        commands.len()
    );
    let ci = read(".ci/run")?;
    for command in &commands {
        ensure!(
            ci.lines().any(|l| l.trim_start().starts_with(command)),
            ".ci/run does not run the README's command `{command}` as written"
        );
        ensure!(
            command.contains("--locked"),
            "the README's command `{command}` lacks --locked: CI runs cargo locked everywhere"
        );
    }
    Ok(())
}

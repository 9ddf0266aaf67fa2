//! Benchmarks cannot rot: every benchmark of the workspace runs in the README's test command as
//! a smoke pass (`test = true` in its `[[bench]]`; a bare run is a smoke pass, as
//! `m3_bench::RunArgs` decides), so one that no longer starts fails CI, and every one is in a
//! `just` recipe, so the documented runs reach it.

use anyhow::{Context, Result, ensure};
use m3_tests::workspace::{cargo, workspace_root};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// A benchmark target: its package, name, source file and whether `cargo test` runs it.
struct Bench {
    package: String,
    name: String,
    source: PathBuf,
    test: bool,
}

/// Every `[[bench]]` of the workspace's packages, as `cargo metadata` sees them.
fn benches() -> Result<Vec<Bench>> {
    let output = Command::new(cargo())
        .current_dir(workspace_root())
        .args(["metadata", "--locked", "--no-deps", "--format-version", "1"])
        .output()
        .context("running cargo metadata")?;
    ensure!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout)?;
    let mut found = Vec::new();
    for package in metadata["packages"].as_array().context("packages")? {
        for target in package["targets"].as_array().context("targets")? {
            if !target["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "bench"))
            {
                continue;
            }
            found.push(Bench {
                package: package["name"].as_str().context("a name")?.to_string(),
                name: target["name"].as_str().context("a name")?.to_string(),
                source: PathBuf::from(target["src_path"].as_str().context("src_path")?),
                test: target["test"].as_bool().context("test")?,
            });
        }
    }
    Ok(found)
}

#[test]
fn every_benchmark_runs_its_smoke_pass_in_the_readme_s_test_command() -> Result<()> {
    let benches = benches()?;
    ensure!(
        benches.len() >= 13,
        "cargo metadata lists {} benchmarks; the workspace has at least 13",
        benches.len()
    );
    for bench in &benches {
        ensure!(
            bench.test,
            "the benchmark {} of {} has no `test = true`: `cargo test --workspace` would not run \
             its smoke pass, and it could stop running unseen",
            bench.name,
            bench.package
        );
        let source = std::fs::read_to_string(&bench.source)
            .with_context(|| bench.source.display().to_string())?;
        ensure!(
            source.contains("RunArgs::from_env()"),
            "{} does not read how it was started through m3_bench::RunArgs::from_env(), so a \
             bare run (cargo test's) is not known to be a smoke pass",
            bench.source.display()
        );
    }
    Ok(())
}

#[test]
fn every_benchmark_is_in_a_just_recipe_and_every_recipe_s_benchmark_exists() -> Result<()> {
    let benches = benches()?;
    let justfile = std::fs::read_to_string(workspace_root().join("justfile"))?;
    let mut in_recipes = BTreeSet::new();
    for line in justfile.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.starts_with(&["cargo", "bench"]) {
            let after = |flag: &str| {
                let at = words.iter().position(|w| *w == flag)?;
                words.get(at + 1).map(|w| w.to_string())
            };
            let package = after("-p").with_context(|| format!("no -p in `{line}`"))?;
            let name = after("--bench").with_context(|| format!("no --bench in `{line}`"))?;
            in_recipes.insert((package, name));
        }
    }
    let declared: BTreeSet<(String, String)> = benches
        .iter()
        .map(|b| (b.package.clone(), b.name.clone()))
        .collect();
    let missing: Vec<_> = declared.difference(&in_recipes).collect();
    ensure!(
        missing.is_empty(),
        "benchmarks no just recipe runs: {missing:?}"
    );
    let unknown: Vec<_> = in_recipes.difference(&declared).collect();
    ensure!(
        unknown.is_empty(),
        "just recipes run benchmarks that do not exist: {unknown:?}"
    );
    Ok(())
}

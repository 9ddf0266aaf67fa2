//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/peers/conformance/`, installed on first use with the Node.js 22 it needs) runs every
//! client scenario against the kit's MCP client, `m3-conformance-client`, and each outcome must
//! be the one `tests/conformance/expectations.json` records: a scenario that newly fails, or
//! newly passes, fails this test. Each run's `checks.json` (with the client's stdout and
//! stderr) is kept under `target/tmp/conformance/<scenario>@<version>/`.

use anyhow::{Context, Result, bail, ensure};
use m3_tests::peers;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one scenario's run may take (the suite gives the client 30 s).
const RUN_TIMEOUT: Duration = Duration::from_secs(90);
/// Scenario runs at the same time.
const PARALLEL: usize = 4;

/// One entry of the expectations file.
#[derive(Debug, Clone)]
struct Expectation {
    scenario: String,
    spec_version: Option<String>,
    pass: bool,
}

impl Expectation {
    fn label(&self) -> String {
        format!(
            "{}@{}",
            self.scenario,
            self.spec_version.as_deref().unwrap_or("extension")
        )
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the workspace root")
        .to_path_buf()
}

fn expectations() -> Result<Vec<Expectation>> {
    let path = workspace().join("tests/conformance/expectations.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    ensure!(
        file["suite"]
            == format!(
                "@modelcontextprotocol/conformance@{}",
                peers::CONFORMANCE_VERSION
            ),
        "{} is about {}, the pinned suite is {}",
        path.display(),
        file["suite"],
        peers::CONFORMANCE_VERSION
    );
    let mut out = Vec::new();
    for entry in file["scenarios"].as_array().context("no `scenarios`")? {
        let scenario = entry["scenario"]
            .as_str()
            .context("an entry without a scenario")?;
        let pass = match entry["expect"].as_str() {
            Some("pass") => true,
            Some("fail") => {
                ensure!(
                    entry["reason"]
                        .as_str()
                        .is_some_and(|r| !r.trim().is_empty()),
                    "{scenario}: an expected failure must say why"
                );
                false
            }
            other => bail!("{scenario}: expect must be pass or fail, not {other:?}"),
        };
        out.push(Expectation {
            scenario: scenario.to_string(),
            spec_version: entry["spec_version"].as_str().map(str::to_string),
            pass,
        });
    }
    Ok(out)
}

/// The suite's client scenarios and the versions each applies to (`list --client`).
fn listed(suite: &peers::Conformance) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let output = Command::new(&suite.node)
        .arg(&suite.cli)
        .args(["list", "--client"])
        .output()
        .context("running the suite's list")?;
    ensure!(output.status.success(), "list --client: {output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    let mut scenarios = BTreeMap::new();
    for line in text.lines() {
        let Some(entry) = line.trim().strip_prefix("- ") else {
            continue;
        };
        let (name, versions) = entry
            .split_once(" [")
            .with_context(|| format!("an unexpected list line: {line}"))?;
        let versions = versions
            .trim_end_matches(']')
            .split(',')
            .map(str::to_string);
        scenarios.insert(name.to_string(), versions.collect());
    }
    ensure!(
        !scenarios.is_empty(),
        "the suite lists no client scenarios:\n{text}"
    );
    Ok(scenarios)
}

/// Runs one scenario; `Ok(true)` when the suite's run passed. Its output goes to `dir`.
fn run(suite: &peers::Conformance, client: &Path, entry: &Expectation, dir: &Path) -> Result<bool> {
    std::fs::create_dir_all(dir)?;
    let log = std::fs::File::create(dir.join("runner.log"))?;
    let mut command = Command::new(&suite.node);
    command
        .arg(&suite.cli)
        .args(["client", "--command"])
        .arg(client)
        .args(["--scenario", &entry.scenario, "--timeout", "30000", "-o"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if let Some(version) = &entry.spec_version {
        command.args(["--spec-version", version]);
    }
    let mut child = command.spawn().context("starting the conformance runner")?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status.success());
        }
        if started.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{} did not end within {} s",
                entry.label(),
                RUN_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The statuses in the `checks.json` a run wrote under `dir`, counted.
fn checks(dir: &Path) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "checks.json") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let parsed: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                for check in parsed.as_array().into_iter().flatten() {
                    let status = check["status"].as_str().unwrap_or("?").to_string();
                    *counts.entry(status).or_default() += 1;
                }
            }
        }
    }
    counts
}

#[test]
fn every_client_scenario_of_the_official_suite_meets_its_expectation() -> Result<()> {
    let suite = peers::conformance()?;
    let client = PathBuf::from(env!("CARGO_BIN_EXE_m3-conformance-client"));
    let expected = expectations()?;
    let listed = listed(&suite)?;

    // The expectations cover every scenario the suite has, at versions it lists.
    let mut problems = Vec::new();
    for (scenario, versions) in &listed {
        if !expected.iter().any(|e| &e.scenario == scenario) {
            problems.push(format!("{scenario} has no expectation"));
        }
        for entry in expected.iter().filter(|e| &e.scenario == scenario) {
            let known = match &entry.spec_version {
                Some(v) => versions.contains(v),
                None => versions.contains("extension"),
            };
            if !known {
                problems.push(format!(
                    "{} names a version the suite does not list ({versions:?})",
                    entry.label()
                ));
            }
        }
    }
    for entry in &expected {
        if !listed.contains_key(&entry.scenario) {
            problems.push(format!("{} is not a scenario of the suite", entry.label()));
        }
    }
    ensure!(problems.is_empty(), "expectations file: {problems:#?}");

    // Every entry run, a few at a time.
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("conformance");
    let _ = std::fs::remove_dir_all(&out);
    let queue = Mutex::new(expected.clone());
    let results = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL {
            scope.spawn(|| {
                loop {
                    let Some(entry) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop() else {
                        return;
                    };
                    let dir = out.join(entry.label().replace('/', "_"));
                    let passed = run(&suite, &client, &entry, &dir);
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((entry, dir, passed));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(entry, _, _)| entry.label());
    let mut report = Vec::new();
    let mut mismatches = Vec::new();
    for (entry, dir, passed) in &results {
        let counts = checks(dir);
        let outcome = match passed {
            Ok(true) => "passed".to_string(),
            Ok(false) => "failed".to_string(),
            Err(e) => format!("could not run: {e:#}"),
        };
        report.push(format!("{:<55} {outcome:<8} {counts:?}", entry.label()));
        if passed.as_ref().ok() != Some(&entry.pass) {
            mismatches.push(format!(
                "{}: expected to {}, {outcome}; see {}",
                entry.label(),
                if entry.pass { "pass" } else { "fail" },
                dir.display()
            ));
        }
    }
    println!("{}", report.join("\n"));
    ensure!(
        mismatches.is_empty(),
        "scenarios that do not meet tests/conformance/expectations.json:\n{}",
        mismatches.join("\n")
    );
    // The scenarios the issue names pass, whatever the file says.
    for required in ["sep-2322-client-request-state", "request-metadata"] {
        ensure!(
            results
                .iter()
                .any(|(e, _, passed)| e.scenario == required && matches!(passed, Ok(true))),
            "{required} must pass"
        );
    }
    Ok(())
}

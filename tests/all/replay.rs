//! Every printed replay command replays: the command a random test prints with its seed
//! (`m3_tests::replay`) names exactly that test, and every random test of the workspace is in the
//! registry the command comes from, drawing from the one generator (`support/rng.rs`).

use anyhow::{Context, Result, bail, ensure};
use m3_tests::replay::{RandomTest, SEED_VARIABLE};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the workspace")
        .to_path_buf()
}

/// The source file of the test binary `binary` where its root module is (`tests/all/main.rs` for
/// `all`, the `m3` command's `host/cli/tests/<binary>.rs` otherwise).
fn binary_root(binary: &str) -> PathBuf {
    match binary {
        "all" => workspace().join("tests/all/main.rs"),
        other => workspace().join(format!("host/cli/tests/{other}.rs")),
    }
}

/// The source file that holds `test`'s function.
fn source_of(test: RandomTest) -> PathBuf {
    match test.module() {
        Some(module) => workspace().join(format!("tests/all/{module}.rs")),
        None => binary_root(test.binary()),
    }
}

/// The test binary's arguments in `command` (what follows `--`), and the binary `--test` names.
fn replay_arguments(command: &str) -> Result<(String, Vec<String>)> {
    let words: Vec<&str> = command.split_whitespace().collect();
    ensure!(
        words
            .first()
            .is_some_and(|w| w.starts_with(&format!("{SEED_VARIABLE}="))),
        "{command:?} does not set {SEED_VARIABLE}"
    );
    let binary = words
        .windows(2)
        .find(|w| w[0] == "--test")
        .map(|w| w[1].to_string())
        .with_context(|| format!("{command:?} names no test binary"))?;
    let at = words
        .iter()
        .position(|w| *w == "--")
        .with_context(|| format!("{command:?} passes the test binary nothing"))?;
    Ok((
        binary,
        words[at + 1..].iter().map(|w| w.to_string()).collect(),
    ))
}

/// The tests this very binary lists when run with `arguments` and `--list`.
fn listed(arguments: &[String]) -> Result<Vec<String>> {
    let exe = std::env::current_exe()?;
    let output = Command::new(&exe)
        .args(arguments)
        .arg("--list")
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success(),
        "{} {arguments:?} --list failed ({}):\n{stdout}\n{}",
        exe.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(stdout
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .map(str::to_string)
        .collect())
}

/// For every random test on each of its backends, the command it prints, run as printed (the
/// arguments after `--`) with `--list`, lists exactly that test. A test of another binary (the
/// `m3` command's `hostile`) is at that binary's root: its function is a `#[test]` there.
#[test]
fn every_printed_replay_command_names_exactly_the_test_that_printed_it() -> Result<()> {
    let mut checked = Vec::new();
    for test in RandomTest::ALL {
        for backend in test.backends() {
            let command = test.replay_command(backend, 0x5eed);
            let (binary, arguments) = replay_arguments(&command)?;
            let expected = test.filter(backend);
            ensure!(
                binary == test.binary(),
                "{command:?} runs binary {binary}, not {}",
                test.binary()
            );
            if binary == "all" {
                let tests = listed(&arguments)?;
                ensure!(
                    tests == [expected.as_str()],
                    "{command:?} lists {tests:?}, not exactly [{expected:?}]"
                );
            } else {
                ensure!(
                    arguments == ["--exact", expected.as_str()] && !expected.contains("::"),
                    "{command:?}: a test of {binary} is named at its root with --exact"
                );
                let root = binary_root(&binary);
                let source = std::fs::read_to_string(&root)
                    .with_context(|| format!("reading {}", root.display()))?;
                ensure!(
                    source.contains(&format!("#[test]\nfn {expected}(")),
                    "{} has no test `{expected}` at its root",
                    root.display()
                );
            }
            checked.push(expected);
        }
    }
    // The control: the filter printed before `--exact` and backends (a bare module path) lists
    // no test at all, which is how a wrong name shows.
    let old = listed(&[
        "--exact".to_string(),
        "lifecycle_model::the_store_follows_the_reference_lifecycle_model".to_string(),
    ])?;
    ensure!(old.is_empty(), "a bare module path lists {old:?}");
    println!(
        "replay: {} printed commands each name exactly their test: {checked:?}",
        checked.len()
    );
    Ok(())
}

/// The Rust sources of the tests: `tests/all`, `tests/support`, `tests/benches` and the `m3`
/// command's `host/cli/tests` (with its folders).
fn test_sources() -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut dirs: Vec<PathBuf> = [
        "tests/all",
        "tests/support",
        "tests/benches",
        "host/cli/tests",
    ]
    .iter()
    .map(|dir| workspace().join(dir))
    .collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("{}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    ensure!(files.len() > 50, "only {} test sources found", files.len());
    Ok(files)
}

/// The identifiers that follow each `RandomTest::` in `text`.
fn registry_uses(text: &str) -> Vec<&str> {
    text.match_indices("RandomTest::")
        .map(|(at, m)| {
            let rest = &text[at + m.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// Whether every generator `text` makes is seeded by an upper-case constant (a fixed seed, the
/// same every run: nothing to replay).
fn only_fixed_seeds(text: &str) -> bool {
    text.match_indices("Rng::new(")
        .chain(text.match_indices("Rng::for_case("))
        .all(|(at, m)| {
            let argument = text[at + m.len()..].split([')', ',']).next().unwrap_or("");
            !argument.is_empty()
                && argument
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        })
}

/// The registry holds every random test: each test source that makes a generator draws its seed
/// from a registered test (or seeds it with a fixed constant), each registered test draws its
/// seed in its own source file, and no other generator or seed variable remains.
#[test]
fn every_random_test_is_registered() -> Result<()> {
    let root = workspace();
    let registered: BTreeMap<String, RandomTest> = RandomTest::ALL
        .into_iter()
        .map(|t| (format!("{t:?}"), t))
        .collect();
    let this_file = root.join("tests/all/replay.rs");
    let registry = root.join("tests/support/replay.rs");
    let generator = root.join("tests/support/rng.rs");
    // Other generators and seed variables (the ones there were, and the usual names).
    let foreign = [
        "splitmix",
        "xorshift",
        "xoshiro",
        "9e37_79b9",
        "M3_MALFORMED_SEED",
        "M3_HOSTILE_SEED",
        "rand::",
        "thread_rng",
        "proptest!",
        "TestRunner::default",
        "TestRunner::new(",
    ];
    let makes_generator = ["Rng::new(", "Rng::for_case(", "TestRng::"];
    let mut problems = Vec::new();
    let mut seeded: BTreeSet<String> = BTreeSet::new();
    for file in test_sources()? {
        if file == this_file || file == registry {
            continue;
        }
        let text = std::fs::read_to_string(&file)?;
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        if file != generator {
            let lower = text.to_lowercase();
            for word in foreign {
                if lower.contains(&word.to_lowercase()) {
                    problems.push(format!("{shown} holds {word:?}"));
                }
            }
        }
        let uses = registry_uses(&text);
        for name in &uses {
            match registered.get(*name) {
                None => problems.push(format!("{shown} names RandomTest::{name}, not registered")),
                Some(test) if source_of(*test) != file => problems.push(format!(
                    "{shown} draws the seed of {name}, whose test is in {}",
                    source_of(*test).display()
                )),
                Some(_) => {
                    seeded.insert(name.to_string());
                }
            }
        }
        let generates = makes_generator.iter().any(|g| text.contains(g));
        if file != generator && generates && uses.is_empty() && !only_fixed_seeds(&text) {
            problems.push(format!(
                "{shown} makes a generator but draws no seed from m3_tests::replay::RandomTest"
            ));
        }
    }
    for name in registered.keys() {
        if !seeded.contains(name) {
            problems.push(format!(
                "RandomTest::{name} is registered, but its source never draws its seed"
            ));
        }
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    println!(
        "replay: {} random tests, each seeded from the registry in its own file",
        seeded.len()
    );
    Ok(())
}

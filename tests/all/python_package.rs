//! The Python package `m3` (`host/python/`), built with maturin into a private venv on first use
//! (`support/python_package.rs`), under its pytest suite (`tests/python/`): one test per pytest
//! file, run with the venv's Python and the programs the suite needs (the bundled shipping
//! server, the Python SDK's booking server, the `m3` command), PostgreSQL included where the
//! suite takes `--m3-postgres-url`; mypy in strict mode over the suite, the specification's
//! example and the package's own source; and the example file checked against the
//! specification, character for character. Each pytest run must exit 0 having collected tests;
//! its whole output is shown when it does not.

use anyhow::{Context, Result, bail, ensure};
use m3_tests::peers::{Captured, run_captured};
use m3_tests::postgres_server::PostgresServer;
use m3_tests::python_package::{m3_command, python_package, python_tests_dir};
use m3_tests::workspace::workspace_root;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");

/// How long one pytest or mypy run may take before it is killed (each takes seconds to a minute;
/// the margin covers a loaded 2-core machine).
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// The failure message of a run: the command, how it ended and everything it printed.
fn failure(run: &Captured, what: &str) -> String {
    format!(
        "{what} failed ({}): {}\n---- output ----\n{}",
        run.ended(),
        run.shown,
        run.output
    )
}

/// Runs `command` (stdin closed, stdout and stderr together into a file), killing its process
/// group (pytest's children: servers, the `m3` command, child Pythons) after [`RUN_TIMEOUT`].
fn run(command: &mut Command, log: &Path) -> Result<Captured> {
    run_captured(command, RUN_TIMEOUT, log)
}

/// A command on the package's venv Python, in `tests/python/`, with what the suite needs in its
/// environment.
fn python(args: &[&str]) -> Result<Command> {
    let python = python_package()?;
    let mut command = Command::new(python);
    command
        .args(args)
        .current_dir(python_tests_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("M3_TEST_SHIPPING_SERVER", SHIPPING_SERVER)
        .env(
            "M3_TEST_BOOKING_SERVER",
            workspace_root().join("tests/peers/booking_server.py"),
        )
        .env_remove("PYTHONPATH");
    Ok(command)
}

/// How many tests pytest said it collected (`collected N items`, after `collecting ... ` with
/// `-v`).
fn collected(output: &str) -> Option<u64> {
    output.lines().find_map(|line| {
        let (_, rest) = line.split_once("collected ")?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Which database a pytest run gets.
#[derive(Clone, Copy, PartialEq)]
enum Backends {
    /// SQLite files only.
    Sqlite,
    /// SQLite, and PostgreSQL through `--m3-postgres-url` (a fresh database of the test
    /// process's throwaway server).
    WithPostgres,
}

/// Runs pytest on `files` of `tests/python/` and checks that it collected tests and passed.
fn pytest(files: &[&str], backends: Backends) -> Result<()> {
    let temp = tempfile::tempdir().context("a temporary directory")?;
    let basetemp = temp.path().join("pytest");
    let mut args: Vec<String> = vec![
        "-m".into(),
        "pytest".into(),
        "-p".into(),
        "no:cacheprovider".into(),
        "--basetemp".into(),
        basetemp.display().to_string(),
        "-rfEs".into(),
        "-v".into(),
    ];
    if backends == Backends::WithPostgres {
        let database = PostgresServer::shared().fresh_database();
        args.push("--m3-postgres-url".into());
        args.push(database.url);
    }
    args.extend(files.iter().map(|f| f.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut command = python(&args)?;
    if files.contains(&"test_interop.py") {
        command.env("M3_TEST_CLI", m3_command()?);
    }
    let finished = run(&mut command, &temp.path().join("pytest.log"))?;
    let what = format!("pytest {}", files.join(" "));
    ensure!(finished.success(), "{}", failure(&finished, &what));
    match collected(&finished.output) {
        Some(n) if n > 0 => {}
        _ => bail!(
            "{}",
            failure(&finished, &format!("{what} collected no tests, and so"))
        ),
    }
    ensure!(
        !finished.output.contains(" SKIPPED"),
        "{}",
        failure(&finished, &format!("{what} skipped tests, and so"))
    );
    Ok(())
}

#[test]
fn the_store_s_twelve_methods_records_and_clock_on_sqlite_and_postgresql() -> Result<()> {
    pytest(&["test_store.py"], Backends::WithPostgres)
}

#[test]
fn every_typed_error_is_raised_with_its_code_and_hierarchy() -> Result<()> {
    pytest(&["test_errors.py"], Backends::WithPostgres)
}

#[test]
fn the_blocking_kit_runs_the_scripted_harness_against_the_shipping_server() -> Result<()> {
    pytest(&["test_kit.py"], Backends::Sqlite)
}

#[test]
fn the_package_has_the_specification_s_names_docstrings_and_types() -> Result<()> {
    pytest(&["test_api.py"], Backends::Sqlite)
}

#[test]
fn the_specification_s_example_runs_with_the_scripted_harness() -> Result<()> {
    pytest(&["test_spec_example.py"], Backends::Sqlite)
}

#[test]
fn the_async_kit_runs_several_executions_without_blocking_the_event_loop() -> Result<()> {
    pytest(&["test_async_kit.py"], Backends::Sqlite)
}

#[test]
fn rounds_cross_between_python_and_the_m3_command() -> Result<()> {
    pytest(&["test_interop.py"], Backends::Sqlite)
}

#[test]
fn a_killed_python_process_s_round_is_recovered_by_another_process() -> Result<()> {
    pytest(&["test_recovery.py"], Backends::Sqlite)
}

#[test]
fn other_threads_run_while_result_waits() -> Result<()> {
    pytest(&["test_gil.py"], Backends::Sqlite)
}

#[test]
fn ctrl_c_interrupts_result_and_leaves_no_answerable_round() -> Result<()> {
    pytest(&["test_interrupt.py"], Backends::Sqlite)
}

#[test]
fn both_eras_against_the_shipping_server_and_the_python_sdk_s_server() -> Result<()> {
    pytest(&["test_eras.py"], Backends::Sqlite)
}

/// The first run's compile is said on stderr unless `m3.set_engine_notices(False)`.
#[test]
fn the_first_compile_is_said_unless_silenced() -> Result<()> {
    pytest(&["test_notices.py"], Backends::Sqlite)
}

/// The README's "From Python" test file (`tests/python/test_readme.py`, as the README gives it).
#[test]
fn the_readme_s_python_test_runs_as_written() -> Result<()> {
    pytest(&["test_readme.py"], Backends::Sqlite)
}

/// Every pytest file of `tests/python/`, each run by one test of this file.
const PYTEST_FILES: [&str; 14] = [
    "test_api.py",
    "test_async_kit.py",
    "test_eras.py",
    "test_errors.py",
    "test_fixture.py",
    "test_gil.py",
    "test_interop.py",
    "test_interrupt.py",
    "test_kit.py",
    "test_notices.py",
    "test_readme.py",
    "test_recovery.py",
    "test_spec_example.py",
    "test_store.py",
];

#[test]
fn every_pytest_file_is_run_by_a_test_of_this_file() -> Result<()> {
    let mut found: Vec<String> = fs::read_dir(python_tests_dir())?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|name| name.starts_with("test_") && name.ends_with(".py"))
        .collect();
    found.sort();
    ensure!(
        found == PYTEST_FILES,
        "tests/python/ holds {found:?}; tests/all/python_package.rs runs {PYTEST_FILES:?}"
    );
    Ok(())
}

#[test]
fn the_pytest_plugin_s_fixture_and_failure_report_on_sqlite() -> Result<()> {
    pytest(&["test_fixture.py"], Backends::Sqlite)
}

#[test]
fn the_pytest_plugin_s_fixture_and_failure_report_on_postgresql() -> Result<()> {
    pytest(&["test_fixture.py"], Backends::WithPostgres)
}

/// Runs mypy with `args` in `dir` and checks it found no issue.
fn mypy(dir: &Path, args: &[&str]) -> Result<()> {
    let temp = tempfile::tempdir().context("a temporary directory")?;
    let cache = temp.path().join("mypy-cache");
    let cache = cache.to_str().context("a UTF-8 temporary path")?;
    let mut all = vec!["-m", "mypy", "--cache-dir", cache];
    all.extend_from_slice(args);
    let mut command = python(&all)?;
    command.current_dir(dir).env("MYPYPATH", dir);
    let finished = run(&mut command, &temp.path().join("mypy.log"))?;
    let what = format!("mypy {} (in {})", args.join(" "), dir.display());
    ensure!(finished.success(), "{}", failure(&finished, &what));
    ensure!(
        finished.output.contains("Success: no issues found"),
        "{}",
        failure(&finished, &format!("{what} said no success, and so"))
    );
    Ok(())
}

/// mypy --strict (`tests/python/mypy.ini`) over the suite and `spec_example.py`, against the
/// installed package's stubs and `py.typed`.
#[test]
fn mypy_strict_passes_on_the_tests_and_the_specification_s_example() -> Result<()> {
    let dir = python_tests_dir();
    let files: Vec<String> = fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|name| name.ends_with(".py"))
        .collect();
    ensure!(
        files.iter().any(|f| f == "spec_example.py") && files.len() > 10,
        "the suite's files: {files:?}"
    );
    mypy(&dir, &["--config-file", "mypy.ini", "--strict", "."])
}

/// mypy --strict over the package's own Python source and its stub of the native module.
#[test]
fn mypy_strict_passes_on_the_package_s_source() -> Result<()> {
    mypy(
        &workspace_root().join("host/python/python"),
        &["--strict", "-p", "m3"],
    )
}

/// The specification's example, from `import os` to `store.close()`, as the specification
/// writes it.
fn example_of(text: &str) -> Option<&str> {
    let start = text.find("import os\n")?;
    let end = text[start..].find("    store.close()\n")? + start + "    store.close()\n".len();
    Some(&text[start..end])
}

/// The specification's example as the specification writes it, kept in the repository
/// (`tests/fixtures/specification-example.txt`): the specification itself lives outside it.
fn specification_example() -> Result<String> {
    let path = workspace_root().join("tests/fixtures/specification-example.txt");
    fs::read_to_string(&path).with_context(|| path.display().to_string())
}

/// The specification beside the workspace (`../shared/spec/`), where a checkout has it.
fn specification() -> Option<PathBuf> {
    let path = workspace_root()
        .parent()?
        .join("shared/spec/managed-elicitation-input.md");
    path.is_file().then_some(path)
}

#[test]
fn the_example_file_holds_the_specification_s_example_character_for_character() -> Result<()> {
    let expected = specification_example()?;
    // Where the specification is beside the workspace (the project's own machines), the kept
    // copy must still be its example; a clean clone elsewhere has only the copy.
    if let Some(path) = specification() {
        let spec = fs::read_to_string(path)?;
        ensure!(
            example_of(&spec) == Some(expected.as_str()),
            "tests/fixtures/specification-example.txt is no longer the specification's example"
        );
    }
    let expected = expected.as_str();
    let file = fs::read_to_string(python_tests_dir().join("spec_example.py"))?;
    let found = example_of(&file).context("spec_example.py has no example")?;
    ensure!(
        found == expected,
        "tests/python/spec_example.py's example differs from the specification's"
    );
    // Only the definition of `shipping_server` (and the file's docstring) comes before it, and
    // nothing after it.
    let (before, after) = file.split_at(file.find(expected).context("the example")?);
    ensure!(
        after == expected,
        "spec_example.py has code after the example"
    );
    let code: Vec<&str> = before
        .split("\"\"\"")
        .nth(2)
        .context("a docstring, then code")?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    ensure!(
        code.iter()
            .any(|l| l.starts_with("shipping_server = StdioServer(")),
        "spec_example.py defines shipping_server before the example: {code:?}"
    );
    Ok(())
}

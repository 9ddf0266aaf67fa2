//! The specification's example as a Python program, run as a user runs it: the package's venv
//! Python (`support/python_package.rs`) on `tests/python/spec_example.py` (the example character
//! for character, after the one definition the specification leaves to the application,
//! `shipping_server`, for the bundled shipping server), in a fresh working directory, with a
//! clean environment. It must exit 0; the test then reads what it left in `executions.sqlite`.
//!
//! - With Codex (the example as written): the real pinned Codex CLI, found on `PATH` (the
//!   example gives the kit `env={}`, so the kit looks `codex` up in this process's `PATH`),
//!   `M3_DOCS_CODEX_MODEL`, and a Codex sign-in: an API key in `auth.json` of the Codex home
//!   `CODEX_HOME` names, which the kit copies into each execution's private home. Codex sends
//!   that sign-in to its built-in OpenAI provider, whose endpoint Codex's own system
//!   configuration, `/etc/codex/config.toml` (`openai_base_url`), points at the loopback model
//!   (`support/fake_model.rs`, which refuses any request without that key). Nothing else can
//!   carry it: the kit copies only `auth.json` of the user's Codex home (not its `config.toml`),
//!   writes the private home's `config.toml` itself, and gives Codex exactly the kit's `env`
//!   (here nothing but `CODEX_HOME`), and Codex 0.171 no longer reads `OPENAI_BASE_URL`. The
//!   system configuration is placed for this run alone: an overlay over `/etc` in a mount
//!   namespace of the Python process (`unshare`), so the machine's `/etc` is never written.
//! - With the scripted harness: the same file with only the agent's dict replaced (by string
//!   replacement here, so the example is never copied by hand), no Codex and no model.

use crate::codex::{FakeModel, codex_binary};
use anyhow::{Context, Result, ensure};
use m3::*;
use m3_tests::fake_model::FINAL_MESSAGE;
use m3_tests::peers::{Captured, run_captured};
use m3_tests::python_package::{python_package, python_tests_dir};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");

/// `M3_DOCS_CODEX_MODEL`: the model the loopback model server answers as.
const MODEL: &str = "fake-model";

/// The API key of the Codex sign-in (`auth.json`); the loopback model refuses requests without
/// it, so a success shows the sign-in was what Codex sent.
const API_KEY: &str = "sk-m3-loopback-sign-in";

/// How long the example may run (it waits up to 120 s for the round and 120 s for the result).
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// The example's agent, as the specification writes it.
const CODEX_AGENT: &str = r#"                {
                    "harness": "codex",
                    "models": [os.environ["M3_DOCS_CODEX_MODEL"]],
                }"#;

/// The scripted harness's agent: one call of the tool the example allows.
const SCRIPTED_AGENT: &str = r#"                {
                    "harness": "scripted",
                    "script": {
                        "steps": [
                            {
                                "tool": "shipping:book_shipment",
                                "arguments": {"item": "book", "quantity": 1},
                            }
                        ]
                    },
                }"#;

/// `tests/python/spec_example.py`, checked to hold the example's agent exactly once.
fn example_file() -> Result<String> {
    let path = python_tests_dir().join("spec_example.py");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(
        text.matches(CODEX_AGENT).count() == 1,
        "{} holds the specification's agent dict exactly once",
        path.display()
    );
    Ok(text)
}

/// Fails with the command, how it ended, everything it printed and `more`.
fn ensure_success(run: &Captured, more: &str) -> Result<()> {
    ensure!(
        run.success(),
        "the example failed ({}): {}\n---- output ----\n{}{more}",
        run.ended(),
        run.shown,
        run.output
    );
    Ok(())
}

/// Runs `command` (stdin closed, stdout and stderr together into `log`), killing its process
/// group after [`RUN_TIMEOUT`].
fn run(command: &mut Command, log: &Path) -> Result<Captured> {
    run_captured(command, RUN_TIMEOUT, log)
}

/// The venv's Python on `script` in `work`, with a clean environment: `PATH` (this process's,
/// after `path_first`), a `HOME` and `TMPDIR` of the test's own, and the program the example's
/// `shipping_server` names (`M3_SHIPPING_SERVER`).
fn python_command(
    dir: &Path,
    work: &Path,
    script: &Path,
    path_first: Option<&Path>,
) -> Result<Command> {
    let python = python_package()?;
    let home = dir.join("home");
    let tmp = dir.join("tmp");
    fs::create_dir_all(&home)?;
    fs::create_dir_all(&tmp)?;
    let mut path: Vec<PathBuf> = path_first.map(Path::to_path_buf).into_iter().collect();
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let mut command = Command::new(python);
    command
        .arg(script)
        .current_dir(work)
        .env_clear()
        .env("PATH", std::env::join_paths(path)?)
        .env("HOME", home)
        .env("TMPDIR", tmp)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("M3_SHIPPING_SERVER", SHIPPING_SERVER);
    Ok(command)
}

/// `command` run in a mount namespace of its own whose `/etc` is the machine's with
/// `codex/config.toml` = `config` added (an overlay whose upper layer is a tmpfs mounted on
/// `layer`, an empty directory): Codex's system configuration for this run alone. As root the
/// namespace is a mount namespace; otherwise a user namespace maps this user to root in it.
fn with_codex_system_config(command: &Command, layer: &Path, config: &Path) -> Result<Command> {
    const SCRIPT: &str = r#"set -e
mount -t tmpfs m3-codex-config "$1"
mkdir -p "$1/upper/codex" "$1/work"
cp "$2" "$1/upper/codex/config.toml"
mount -t overlay m3-codex-config -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc
shift 2
exec "$@"
"#;
    for path in [layer, config] {
        let text = path.to_str().context("a UTF-8 temporary path")?;
        ensure!(
            !text.contains([',', ':', '\\']),
            "{text}: overlay options cannot name it"
        );
    }
    let root = fs::metadata("/proc/self")
        .context("reading /proc/self")?
        .uid()
        == 0;
    let mut wrapped = Command::new("unshare");
    if !root {
        wrapped.args(["--user", "--map-root-user"]);
    }
    wrapped
        .args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            SCRIPT,
            "sh",
        ])
        .arg(layer)
        .arg(config)
        .arg(command.get_program())
        .args(command.get_args())
        .env_clear();
    if let Some(dir) = command.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped.envs(
        command
            .get_envs()
            .filter_map(|(name, value)| Some((name, value?))),
    );
    Ok(wrapped)
}

/// The one round the run left in `work/executions.sqlite`, and its execution's result.
fn outcome_in(work: &Path) -> Result<(ManagedInputRecord, ExecutionResult)> {
    let database = work.join("executions.sqlite");
    ensure!(
        database.is_file(),
        "the example's store, {}, is missing",
        database.display()
    );
    let rounds = SqliteManagedInputStore::open(&database, StoreOptions::default())?
        .list_rounds(&RoundFilter::default())?;
    ensure!(rounds.len() == 1, "one round, not {}", rounds.len());
    let record = rounds.into_iter().next().context("the round")?;
    let store = Arc::new(SqliteExecutionStore::open(&database)?);
    let kit = McpTestKit::new(store, BTreeMap::<String, String>::new())?;
    let result = kit
        .execution(&record.pending.execution_id)?
        .result(Some(Duration::from_secs(10)))?;
    Ok((record, result))
}

/// The round was the example's and was answered as the example answers it, once; the execution
/// succeeded having booked the shipment to that address.
fn check_booked(record: &ManagedInputRecord, result: &ExecutionResult) -> Result<()> {
    let round_id = &record.pending.round_id;
    assert_eq!(record.pending.server, "shipping");
    assert_eq!(record.pending.operation_name, "book_shipment");
    assert_eq!(
        record.pending.requests.keys().collect::<Vec<_>>(),
        ["shipping_address"]
    );
    assert_eq!(record.status, ManagedInputStatus::Resolved);
    assert_eq!(
        record.idempotency_key.as_deref(),
        Some(format!("address-{round_id}").as_str()),
        "answered by the example's respond_elicitation"
    );
    assert_eq!(record.delivery_attempts, 1);
    let address = record
        .responses
        .as_ref()
        .and_then(|r| r.get("shipping_address"))
        .context("the stored answer")?;
    assert_eq!(
        address.content,
        Some(serde_json::json!({"street": "1 Main Street", "city": "Pune"}))
    );
    assert!(result.succeeded(), "{}", result.outcome);
    let call = result
        .outcome
        .tool_results
        .first()
        .context("the booking's tool result")?;
    assert_eq!(call.tool, "shipping:book_shipment");
    ensure!(
        call.text().contains("1 Main Street") && call.text().contains("Pune"),
        "booked to the answered address: {}",
        call.text()
    );
    Ok(())
}

/// The specification's example, as written, with the real Codex CLI signed in with an API key
/// whose provider (Codex's built-in OpenAI provider, pointed by Codex's system configuration at
/// a loopback model server) scripts the call of `shipping:book_shipment`.
#[test]
fn the_specification_s_example_runs_as_written_with_codex_and_a_loopback_model() -> Result<()> {
    let dir = tempfile::tempdir().context("a temporary directory")?;
    let dir = dir.path();
    let codex = codex_binary()?;
    let model = FakeModel::start(dir, &format!("auth:{API_KEY}"))?;
    let model_log = dir.join(format!("model-auth:{API_KEY}.log"));
    // The user's Codex home: the sign-in, nothing else.
    let codex_home = dir.join("codex-home");
    fs::create_dir_all(&codex_home)?;
    fs::write(
        codex_home.join("auth.json"),
        serde_json::json!({"OPENAI_API_KEY": API_KEY}).to_string(),
    )?;
    // Codex's system configuration: its OpenAI provider's endpoint is the loopback model.
    let config = dir.join("system-config.toml");
    fs::write(
        &config,
        format!("openai_base_url = \"http://127.0.0.1:{}/v1\"\n", model.port),
    )?;
    let work = dir.join("work");
    fs::create_dir_all(&work)?;
    let script = work.join("spec_example.py");
    fs::write(&script, example_file()?)?;
    let mut command = python_command(dir, &work, &script, codex.parent())?;
    command
        .env("CODEX_HOME", &codex_home)
        .env("M3_DOCS_CODEX_MODEL", MODEL);
    let layer = dir.join("etc-layer");
    fs::create_dir_all(&layer)?;
    let mut command = with_codex_system_config(&command, &layer, &config)?;
    let finished = run(&mut command, &dir.join("example.log"))?;
    let model_said = || {
        let log = fs::read_to_string(&model_log).unwrap_or_default();
        format!("\n---- the loopback model's log ----\n{log}")
    };
    ensure_success(&finished, &model_said())?;
    let (record, result) = outcome_in(&work)?;
    check_booked(&record, &result)
        .with_context(|| format!("{}\n{}", result.outcome, model_said()))?;
    assert_eq!(
        result.outcome.final_message.as_deref(),
        Some(FINAL_MESSAGE),
        "the model's final message"
    );
    assert!(
        record.harness.resume_token.is_some(),
        "Codex's thread id is kept as the native resume token"
    );
    // The model served the example's model, and the booking's result reached it.
    let log = fs::read_to_string(&model_log)?;
    ensure!(
        log.lines()
            .any(|l| l == format!("fake-model: model: {MODEL}")),
        "the model server saw the example's model{}",
        model_said()
    );
    ensure!(
        log.lines()
            .any(|l| l.starts_with("fake-model: output of") && l.contains("1 Main Street")),
        "the booking's result reached the model{}",
        model_said()
    );
    Ok(())
}

/// The same example with the scripted harness: only the agent's dict differs; no Codex, no
/// model, no sign-in.
#[test]
fn the_specification_s_example_runs_as_a_program_with_the_scripted_harness() -> Result<()> {
    let dir = tempfile::tempdir().context("a temporary directory")?;
    let dir = dir.path();
    let work = dir.join("work");
    fs::create_dir_all(&work)?;
    let script = work.join("spec_example_scripted.py");
    fs::write(
        &script,
        example_file()?.replace(CODEX_AGENT, SCRIPTED_AGENT),
    )?;
    let mut command = python_command(dir, &work, &script, None)?;
    let finished = run(&mut command, &dir.join("example.log"))?;
    ensure_success(&finished, "")?;
    let (record, result) = outcome_in(&work)?;
    check_booked(&record, &result).with_context(|| result.outcome.to_string())?;
    Ok(())
}

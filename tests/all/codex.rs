//! The `codex` harness against the real, pinned Codex CLI (`codex app-server`, installed on first
//! use from `tests/peers/`), with a loopback Responses API standing in for the model
//! (`support/fake_model_main.rs`) and the bundled shipping server as the MCP server Codex starts.

use anyhow::{Context, Result, ensure};
use m3::*;
use m3_tests::fake_model;
use m3_tests::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");
const FAKE_MODEL: &str = env!("CARGO_BIN_EXE_m3-test-fake-model");
const FINAL_MESSAGE: &str = "The shipment is booked.";

/// The loopback model, killed when dropped.
pub(crate) struct FakeModel {
    child: Child,
    pub(crate) port: u16,
}

impl FakeModel {
    pub(crate) fn start(dir: &Path, mode: &str) -> Result<Self> {
        let port_file = dir.join(format!("model-{mode}.port"));
        let child = Command::new(FAKE_MODEL)
            .arg(&port_file)
            .arg(mode)
            .arg(json!({"item": "book", "quantity": 1}).to_string())
            .arg(dir.join("m3-should-not-exist"))
            .stderr(std::fs::File::create(
                dir.join(format!("model-{mode}.log")),
            )?)
            .spawn()
            .context("starting the fake model")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                break text.trim().parse()?;
            }
            ensure!(Instant::now() < deadline, "the fake model did not start");
            std::thread::sleep(Duration::from_millis(10));
        };
        Ok(Self { child, port })
    }

    fn provider(&self) -> ModelProvider {
        ModelProvider::responses("fake", format!("http://127.0.0.1:{}/v1", self.port))
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn codex_binary() -> Result<PathBuf> {
    peers::codex().context(
        "the pinned Codex CLI is needed: it is installed on first use from tests/peers/ \
         (npm ci; see tests/support/peers.rs)",
    )
}

/// A kit whose Codex agents use `model`; children get only `PATH`.
fn codex_kit(
    db: &TempDb,
    model: &FakeModel,
    turn_deadline: Duration,
) -> Result<(McpTestKit, Agent)> {
    let store = Arc::new(SqliteExecutionStore::open(&db.path)?);
    let env = [("PATH", std::env::var("PATH").unwrap_or_default())];
    let kit = McpTestKit::new(store, env)?;
    let options = CodexOptions {
        binary: codex_binary()?.display().to_string(),
        model_provider: Some(model.provider()),
        turn_deadline,
        request_timeout: Duration::from_secs(60),
        ..CodexOptions::default()
    };
    let agent = kit
        .agents([AgentSpec::codex(["fake-model"], options)])?
        .remove(0);
    Ok((kit, agent))
}

pub(crate) fn submission(mode: HumanInput) -> Submission {
    Submission::new(
        "Ask for the delivery address, then book the shipment.",
        StdioServer::new("shipping", SHIPPING_SERVER).args(["--era", "legacy"]),
    )
    .tools(["shipping:book_shipment"])
    .human_input(mode)
}

pub(crate) fn wait_pending(handle: &ExecutionHandle) -> Result<PendingElicitationRound> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(pending) = handle.pending_elicitation()? {
            return Ok(pending);
        }
        let snapshot = handle.snapshot()?;
        ensure!(
            snapshot.lifecycle != ExecutionStatus::Finished,
            "finished before asking: {:?}",
            snapshot.outcome
        );
        ensure!(Instant::now() < deadline, "no pending round in time");
        std::thread::sleep(Duration::from_millis(25));
    }
}

pub(crate) fn address() -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )])
}

/// The specification's example on the codex harness, in managed mode.
#[test]
fn the_spec_example_runs_on_the_real_codex_harness() -> Result<()> {
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), "tool")?;
    let (_kit, agent) = codex_kit(&db, &model, Duration::from_secs(120))?;
    assert_eq!(agent.model(), Some("fake-model"));
    let handle = agent.submit(submission(HumanInput::Managed))?;
    let pending = wait_pending(&handle)?;
    assert_eq!(pending.server, "shipping");
    assert_eq!(pending.operation_name, "book_shipment");
    assert_eq!(
        pending.requests.keys().collect::<Vec<_>>(),
        ["shipping_address"],
        "Codex passes the server's _meta through: the request key hint is used"
    );
    handle.respond_elicitation(&pending.round_id, address(), "address-1")?;
    let result = handle.result(Some(Duration::from_secs(120)))?;
    assert!(result.succeeded(), "{}", result.outcome);
    assert_eq!(result.outcome.final_message.as_deref(), Some(FINAL_MESSAGE));
    let call = &result.outcome.tool_results[0];
    assert_eq!(call.tool, "shipping:book_shipment");
    assert!(call.text().contains("1 Main Street"), "{}", call.text());
    let record = db
        .store()
        .get_round(&pending.round_id)?
        .context("the round")?;
    assert_eq!(record.status, ManagedInputStatus::Resolved);
    assert_eq!(record.delivery_attempts, 1);
    assert!(
        record.harness.resume_token.is_some(),
        "the thread id is kept as the native resume token"
    );
    Ok(())
}

/// Decline and cancel answers reach the server through Codex; the calls complete.
#[test]
fn decline_and_cancel_answers_complete_the_turn() -> Result<()> {
    for (answer, text) in [
        (ElicitationResponse::decline(), "declined"),
        (ElicitationResponse::cancel(), "cancelled"),
    ] {
        let db = TempDb::new();
        let model = FakeModel::start(db.dir.path(), "tool")?;
        let (_kit, agent) = codex_kit(&db, &model, Duration::from_secs(120))?;
        let handle = agent.submit(submission(HumanInput::Managed))?;
        let pending = wait_pending(&handle)?;
        handle.respond_elicitation(
            &pending.round_id,
            BTreeMap::from([("shipping_address".to_string(), answer)]),
            "k",
        )?;
        let result = handle.result(Some(Duration::from_secs(120)))?;
        assert!(result.succeeded(), "{}", result.outcome);
        let output = result.outcome.tool_results[0].text();
        assert!(
            output.contains("not booked") && output.contains(text),
            "{output}"
        );
        assert_eq!(
            db.store()
                .get_round(&pending.round_id)?
                .context("round")?
                .status,
            ManagedInputStatus::Resolved
        );
    }
    Ok(())
}

/// `cancel()` while the round is pending interrupts the turn: the round ends `cancelled`, the
/// execution `cancelled`, and Codex leaves no process behind.
#[test]
fn cancel_mid_round_interrupts_the_turn() -> Result<()> {
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), "tool")?;
    let (_kit, agent) = codex_kit(&db, &model, Duration::from_secs(120))?;
    let handle = agent.submit(submission(HumanInput::Managed))?;
    let pending = wait_pending(&handle)?;
    handle.cancel()?;
    let result = handle.result(Some(Duration::from_secs(60)))?;
    assert_eq!(
        result.outcome.kind,
        OutcomeKind::Cancelled,
        "{}",
        result.outcome
    );
    let record = db.store().get_round(&pending.round_id)?.context("round")?;
    assert_eq!(record.status, ManagedInputStatus::Failed);
    assert_eq!(
        record.failure.context("failure")?.code,
        FailureCode::Cancelled
    );
    Ok(())
}

/// A model that never answers: the kit's turn deadline interrupts the turn and the execution
/// fails as an operation timeout instead of hanging (Codex itself retries forever).
#[test]
fn a_silent_model_hits_the_turn_deadline() -> Result<()> {
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), "silent")?;
    let (_kit, agent) = codex_kit(&db, &model, Duration::from_secs(3))?;
    let handle = agent.submit(submission(HumanInput::Managed))?;
    match handle.result(Some(Duration::from_secs(90))) {
        Err(ExecutionError::OperationTimeout(timeout)) => {
            let result = timeout.result.expect("the result travels with the timeout");
            assert!(result.timed_out(), "{}", result.outcome);
            assert!(
                result
                    .outcome
                    .failure
                    .unwrap()
                    .message
                    .contains("turn's deadline"),
                "it says which deadline"
            );
        }
        other => panic!("expected OperationTimeout, got {other:?}"),
    }
    assert!(handle.pending_elicitation()?.is_none());
    Ok(())
}

/// The turn deadline never counts the time a round waits for a person: a round answered long
/// after the whole turn's deadline is still delivered, and the turn completes.
#[test]
fn the_turn_deadline_stands_still_while_a_round_waits() -> Result<()> {
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), "tool")?;
    let (_kit, agent) = codex_kit(&db, &model, Duration::from_secs(8))?;
    // The server runs in the directory the binding names (Codex is told `cwd`): its transcript,
    // a relative path, lands there.
    let server = StdioServer::new("shipping", SHIPPING_SERVER)
        .args(["--era", "legacy", "--transcript", "received.jsonl"])
        .cwd(db.dir.path().display().to_string());
    let handle = agent.submit(
        Submission::new(
            "Ask for the delivery address, then book the shipment.",
            server,
        )
        .tools(["shipping:book_shipment"])
        .human_input(HumanInput::Managed),
    )?;
    let pending = wait_pending(&handle)?;
    ensure!(
        db.dir.path().join("received.jsonl").is_file(),
        "the server did not run in the binding's working directory"
    );
    std::thread::sleep(Duration::from_secs(10));
    handle.respond_elicitation(&pending.round_id, address(), "after-the-deadline")?;
    let result = handle.result(Some(Duration::from_secs(120)))?;
    assert!(result.succeeded(), "{}", result.outcome);
    let record = db.store().get_round(&pending.round_id)?.unwrap();
    assert_eq!(record.status, ManagedInputStatus::Resolved);
    assert_eq!(record.delivery_attempts, 1);
    Ok(())
}

/// A server that stops waiting (the TypeScript SDK 1.x's request timeout) behind Codex: the
/// round is withdrawn as soon as Codex reports it, never left answerable, and the turn ends
/// with the server's own result.
#[test]
fn a_server_that_stops_waiting_withdraws_its_round_through_codex() -> Result<()> {
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), "tool")?;
    let (_kit, agent) = codex_kit(&db, &model, Duration::from_secs(120))?;
    let command = peers::withdrawing_server(1_500)?;
    let server = StdioServer::new("ts", command.program.display().to_string()).args(
        command
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned()),
    );
    let handle = agent.submit(
        Submission::new("Ask for the address.", server)
            .tools(["ts:ask_with_timeout"])
            .human_input(HumanInput::Managed),
    )?;
    let result = handle.result(Some(Duration::from_secs(120)))?;
    assert!(result.succeeded(), "{}", result.outcome);
    let rounds = db.store().list_rounds(&RoundFilter {
        execution_id: Some(handle.execution_id().to_string()),
        ..RoundFilter::default()
    })?;
    assert_eq!(rounds.len(), 1, "{rounds:?}");
    assert_eq!(rounds[0].status, ManagedInputStatus::Failed);
    let failure = rounds[0]
        .failure
        .as_ref()
        .context("a failed round says why")?;
    assert_eq!(failure.code, FailureCode::RequestWithdrawn);
    // Failed by what Codex reported (the request withdrawn, or the call completing first), not
    // later by the net under a finished execution.
    assert!(
        failure.message.starts_with("codex withdrew the request")
            || failure
                .message
                .starts_with("the tool call completed without waiting"),
        "{}",
        failure.message
    );
    assert!(handle.pending_elicitation()?.is_none());
    Ok(())
}

/// The specification's Codex example as written: `env={}` and the program `codex`, found on
/// the host's `PATH` because the given environment has none (run in a second process whose
/// `PATH` holds the pinned Codex).
#[test]
fn the_spec_example_with_an_empty_env_finds_codex() -> Result<()> {
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), "tool")?;
    let codex = codex_binary()?;
    let path = format!(
        "{}:/usr/local/bin:/usr/bin:/bin",
        codex.parent().context("codex's directory")?.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_m3-test-second-process"))
        .args([
            "codex-spec",
            db.path.to_str().context("UTF-8 path")?,
            &format!("http://127.0.0.1:{}/v1", model.port),
            SHIPPING_SERVER,
        ])
        .env_clear()
        .env("PATH", path)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    ensure!(
        lines.next().is_some_and(|l| l.starts_with("answered ")),
        "{stdout}"
    );
    assert_eq!(
        lines.next(),
        Some("result succeeded Booked shipment to 1 Main Street, Pune")
    );
    Ok(())
}

/// Codex's own approval requests: the allow-listed tool's approval prompt is approved without a
/// round; a shell command the model asks for is declined by the default permission policy and
/// never becomes a round; the turn still ends.
#[test]
fn approvals_never_become_rounds() -> Result<()> {
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), "shell")?;
    let (_kit, agent) = codex_kit(&db, &model, Duration::from_secs(120))?;
    let handle = agent.submit(submission(HumanInput::Managed))?;
    let pending = wait_pending(&handle)?;
    handle.respond_elicitation(&pending.round_id, address(), "k")?;
    let result = handle.result(Some(Duration::from_secs(120)))?;
    assert!(result.succeeded(), "{}", result.outcome);
    let rounds = db.store().list_rounds(&RoundFilter {
        execution_id: Some(handle.execution_id().to_string()),
        ..RoundFilter::default()
    })?;
    assert_eq!(
        rounds.len(),
        1,
        "only the server's own elicitation is a round"
    );
    let log = std::fs::read_to_string(db.dir.path().join("model-shell.log"))?;
    let shell_output = log
        .lines()
        .find(|l| l.contains("output of \"call-shell\""))
        .context("the model got the command's outcome")?;
    assert!(
        shell_output.contains("rejected"),
        "the command approval was declined: {shell_output}"
    );
    assert!(
        !db.dir.path().join("m3-should-not-exist").exists(),
        "the declined command did not run"
    );
    Ok(())
}

/// Mode `fail` on codex: the kit answers cancel and the execution fails with
/// `elicitation_unhandled`.
#[test]
fn fail_mode_on_codex_declines_and_fails() -> Result<()> {
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), "tool")?;
    let (_kit, agent) = codex_kit(&db, &model, Duration::from_secs(120))?;
    let handle = agent.submit(submission(HumanInput::Fail))?;
    let result = handle.result(Some(Duration::from_secs(120)))?;
    let failure = result.outcome.failure.as_ref().context("a failure")?;
    assert_eq!(failure.code, Some(FailureCode::ElicitationUnhandled));
    Ok(())
}

/// The protocol types the adapter relies on, as the pinned Codex generates them, equal the
/// checked-in copies in `tests/peers/codex-schema/` (a new Codex pin must update them, and the
/// adapter with them).
#[test]
fn the_codex_protocol_schema_has_not_drifted() -> Result<()> {
    let out = tempfile::tempdir()?;
    let status = Command::new(codex_binary()?)
        .args(["app-server", "generate-json-schema", "--out"])
        .arg(out.path())
        .env_clear()
        .env("CODEX_HOME", out.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    ensure!(status.success(), "generate-json-schema failed: {status}");
    let pinned = peers::pin_dir().join("codex-schema");
    let mut compared = 0;
    for dir in ["", "v1", "v2"] {
        for entry in std::fs::read_dir(pinned.join(dir))? {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let name = path.file_name().context("a file name")?;
            let expected: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path)?)?;
            let generated_path = out.path().join(dir).join(name);
            let generated: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(&generated_path)
                    .with_context(|| format!("{} was not generated", generated_path.display()))?,
            )?;
            ensure!(
                generated == expected,
                "{} drifted from the checked-in copy",
                path.display()
            );
            compared += 1;
        }
    }
    ensure!(compared >= 20, "only {compared} schema files compared");
    Ok(())
}

/// A worker killed (SIGKILL) while its Codex round is pending: the pending request died with the
/// app-server, so once the worker's lease expires recovery fails the round with
/// `recovery_unavailable` and finishes the execution failed; a late answer is refused.
#[test]
fn a_killed_codex_worker_s_round_is_recovered() -> Result<()> {
    let db = TempDb::new();
    let port = fake_model::serve_in_background(fake_model::Script {
        mode: "tool".into(),
        arguments: r#"{"item": "book"}"#.into(),
        marker: db.dir.path().join("marker").display().to_string(),
    })?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_m3-test-fault-worker"))
        .arg("kit")
        .arg(&db.path)
        .arg("1000")
        .arg(SHIPPING_SERVER)
        .arg(codex_binary()?)
        .arg(format!("http://127.0.0.1:{port}/v1"))
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().context("stdout")?),
        &mut line,
    )?;
    let mut words = line.split_whitespace().skip(1);
    let round_id = words.next().context("a round id")?.to_string();
    let record = db.store().get_round(&round_id)?.context("the round")?;
    assert!(
        record.harness.resume_token.is_some(),
        "the thread id is kept"
    );
    child.kill()?; // SIGKILL
    child.wait()?;
    std::thread::sleep(Duration::from_millis(1500));
    let store = Arc::new(SqliteExecutionStore::open(&db.path)?);
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    let (rounds, executions) = kit.recover()?;
    assert_eq!((rounds, executions), (1, 1));
    let record = db.store().get_round(&round_id)?.context("the round")?;
    assert_eq!(record.status, ManagedInputStatus::Failed);
    assert_eq!(
        record.failure.context("failure")?.code,
        FailureCode::RecoveryUnavailable
    );
    let late = store
        .managed_input_store()?
        .context("managed input")?
        .submit_responses(&round_id, &address(), "late");
    assert_refused(
        late.as_ref(),
        "ManagedInputRecoveryError",
        ErrorCode::RecoveryUnavailable,
    );
    Ok(())
}

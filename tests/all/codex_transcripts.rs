//! The codex harness's error paths, replayed through a fake app-server
//! (`support/fake_codex_main.rs`) from recorded exchanges: no Codex binary needed.

use anyhow::{Context, Result, ensure};
use m3::*;
use m3_tests::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const FAKE_CODEX: &str = env!("CARGO_BIN_EXE_m3-test-fake-codex");

/// The handshake every transcript starts with, as Codex 0.171.0 answers it.
fn handshake() -> Vec<Value> {
    vec![
        json!({"expect": "initialize"}),
        json!({"send": {"id": "$id", "result": {"userAgent": "fake", "codexHome": "/x"}}}),
        json!({"expect": "initialized"}),
        json!({"expect": "thread/start"}),
        json!({"send": {"id": "$id", "result": {"thread": {"id": "thread-1"}}}}),
        json!({"expect": "mcpServerStatus/list"}),
        json!({"send": {"id": "$id", "result": {"data": [{"name": "shipping",
            "runtimeStatus": "connected", "tools": {"book_shipment": {"name": "book_shipment"}},
            "toolsError": null}]}}}),
        json!({"expect": "turn/start"}),
        json!({"send": {"id": "$id", "result": {"turn": {"id": "turn-1", "status": "inProgress"}}}}),
        json!({"send": {"method": "item/started", "params": {"threadId": "thread-1", "turnId": "turn-1",
            "item": {"type": "mcpToolCall", "id": "call-1", "server": "shipping", "tool": "book_shipment",
                     "status": "inProgress", "arguments": {"item": "book"}}}}}),
    ]
}

fn elicitation(id: u64) -> Value {
    json!({"send": {"id": id, "method": "mcpServer/elicitation/request", "params": {
        "threadId": "thread-1", "turnId": "turn-1", "serverName": "shipping", "mode": "form",
        "_meta": {"m3/request_key": "shipping_address"},
        "message": "Where should the shipment be delivered?",
        "requestedSchema": {"type": "object", "properties": {
            "street": {"type": "string"}, "city": {"type": "string"}}, "required": ["street", "city"]}}}})
}

fn turn_completed(status: &str) -> Value {
    json!({"send": {"method": "turn/completed", "params": {"threadId": "thread-1",
        "turn": {"id": "turn-1", "status": status, "error": null}}}})
}

/// Runs a managed codex execution against the fake app-server replaying `script`.
fn replay(db: &TempDb, script: Vec<Value>) -> Result<(McpTestKit, ExecutionHandle)> {
    let script_path = db.dir.path().join("script.json");
    std::fs::write(&script_path, serde_json::to_string(&script)?)?;
    let env = [
        ("M3_FAKE_CODEX_SCRIPT", script_path.display().to_string()),
        (
            "M3_FAKE_CODEX_LOG",
            db.dir.path().join("received.jsonl").display().to_string(),
        ),
    ];
    let store = Arc::new(SqliteExecutionStore::open(&db.path)?);
    let kit = McpTestKit::new(store, env)?;
    let options = CodexOptions {
        binary: FAKE_CODEX.into(),
        turn_deadline: Duration::from_secs(30),
        request_timeout: Duration::from_secs(10),
        credentials: CodexCredentials::None,
        ..CodexOptions::default()
    };
    let agent = kit
        .agents([AgentSpec::codex(["fake-model"], options)])?
        .remove(0);
    let handle = agent.submit(
        Submission::new(
            "Book a shipment.",
            // The fake app-server never starts it; it must still exist (checked at submission).
            StdioServer::new("shipping", env!("CARGO_BIN_EXE_m3-test-shipping-server")),
        )
        .tools(["shipping:book_shipment"])
        .human_input(HumanInput::Managed),
    )?;
    Ok((kit, handle))
}

fn received(dir: &Path) -> Result<Vec<Value>> {
    std::fs::read_to_string(dir.join("received.jsonl"))?
        .lines()
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}

fn wait_pending(handle: &ExecutionHandle) -> Result<PendingElicitationRound> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(p) = handle.pending_elicitation()? {
            return Ok(p);
        }
        ensure!(Instant::now() < deadline, "no pending round");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An error notification with `willRetry` is not an end; an unknown server request gets a
/// JSON-RPC error and the turn goes on; a request Codex withdraws itself
/// (`serverRequest/resolved` before any answer) fails its round with `request_withdrawn`.
#[test]
fn retries_unknown_requests_and_a_withdrawn_request() -> Result<()> {
    let db = TempDb::new();
    let mut script = handshake();
    script.extend([
        json!({"send": {"method": "error", "params": {"threadId": "thread-1", "turnId": "turn-1",
            "error": {"message": "stream disconnected"}, "willRetry": true}}}),
        json!({"send": {"id": 50, "method": "some/newRequest", "params": {}}}),
        json!({"expect_response": 50}),
        elicitation(51),
        json!({"wait_ms": 1500}),
        json!({"send": {"method": "serverRequest/resolved", "params": {"threadId": "thread-1", "requestId": 51}}}),
        json!({"send": {"method": "item/completed", "params": {"threadId": "thread-1", "turnId": "turn-1",
            "item": {"type": "mcpToolCall", "id": "call-1", "server": "shipping", "tool": "book_shipment",
                     "status": "failed", "result": null, "error": {"message": "cancelled"}}}}}),
        json!({"send": {"method": "item/completed", "params": {"threadId": "thread-1", "turnId": "turn-1",
            "item": {"type": "agentMessage", "id": "m1", "text": "I could not book it."}}}}),
        turn_completed("completed"),
    ]);
    let (_kit, handle) = replay(&db, script)?;
    let pending = wait_pending(&handle)?;
    let result = handle.result(Some(Duration::from_secs(30)))?;
    assert!(result.succeeded(), "{}", result.outcome);
    assert_eq!(
        result.outcome.final_message.as_deref(),
        Some("I could not book it.")
    );
    let record = db.store().get_round(&pending.round_id)?.context("round")?;
    assert_eq!(record.status, ManagedInputStatus::Failed);
    let failure = record.failure.context("failure")?;
    assert_eq!(failure.code, FailureCode::RequestWithdrawn);
    // Failed when Codex withdrew the request, not later by the net under a finished execution.
    assert!(
        failure.message.starts_with("codex withdrew the request"),
        "{}",
        failure.message
    );
    let sent = received(db.dir.path())?;
    let unknown = sent
        .iter()
        .find(|m| m["id"] == 50)
        .context("the unknown request was answered")?;
    assert_eq!(unknown["error"]["code"], -32601);
    assert!(
        !sent
            .iter()
            .any(|m| m["id"] == 51 && m.get("result").is_some()),
        "nothing was sent for the withdrawn request"
    );
    Ok(())
}

/// Cancel while a round is pending: the kit interrupts the turn and never answers the
/// request afterwards; a late answer is refused.
#[test]
fn a_late_answer_after_interrupt_is_refused_and_never_sent() -> Result<()> {
    let db = TempDb::new();
    let mut script = handshake();
    script.extend([
        elicitation(51),
        json!({"expect": "turn/interrupt"}),
        json!({"send": {"id": "$id", "result": {}}}),
        turn_completed("interrupted"),
    ]);
    let (_kit, handle) = replay(&db, script)?;
    let pending = wait_pending(&handle)?;
    handle.cancel()?;
    let result = handle.result(Some(Duration::from_secs(30)))?;
    assert_eq!(
        result.outcome.kind,
        OutcomeKind::Cancelled,
        "{}",
        result.outcome
    );
    let late = handle.respond_elicitation(
        &pending.round_id,
        BTreeMap::from([(
            "shipping_address".to_string(),
            ElicitationResponse::accept(json!({"street": "1 Main", "city": "Pune"})),
        )]),
        "late",
    );
    assert_execution_refused(late, "ManagedInputStateError", ErrorCode::RoundTerminal);
    let sent = received(db.dir.path())?;
    assert!(
        !sent.iter().any(|m| m["id"] == 51),
        "the request was never answered by the kit: {sent:?}"
    );
    Ok(())
}

/// A turn that fails ends the execution failed with Codex's message, and an open round fails.
#[test]
fn a_failed_turn_fails_the_execution() -> Result<()> {
    let db = TempDb::new();
    let mut script = handshake();
    script.extend([
        elicitation(51),
        json!({"wait_ms": 1000}),
        json!({"send": {"method": "turn/completed", "params": {"threadId": "thread-1",
            "turn": {"id": "turn-1", "status": "failed", "error": {"message": "model unavailable"}}}}}),
    ]);
    let (_kit, handle) = replay(&db, script)?;
    let pending = wait_pending(&handle)?;
    let result = handle.result(Some(Duration::from_secs(30)))?;
    let failure = result.outcome.failure.as_ref().context("a failure")?;
    assert!(
        failure.message.contains("model unavailable"),
        "{}",
        failure.message
    );
    let record = db.store().get_round(&pending.round_id)?.context("round")?;
    assert_eq!(record.status, ManagedInputStatus::Failed);
    Ok(())
}

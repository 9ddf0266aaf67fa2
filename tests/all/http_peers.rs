//! Servers reached over Streamable HTTP: the pinned Python SDK's `booking_server.py`,
//! `server-everything` and the TypeScript SDK 1.x's `withdrawing_server.mjs`, each started in
//! its HTTP mode on loopback, driven through the execution API exactly as their stdio selves are
//! (`executions_peers`), with every round in a real SQLite file: rounds answered, declined,
//! cancelled and withdrawn, elicitations arriving on the call's stream and on the standalone GET
//! stream, a multi-round `requestState` flow, and servers restarted while a round waits.

use super::executions_peers::{
    BOOKED, LEGACY_KEY, MRTR_KEY, Run, answer_for, book_table, booking_answer, check_booking_form,
    form, only_text, raw_result,
};
use anyhow::{Context, Result, bail, ensure};
use m3::*;
use m3_tests::http_server::HttpServer as HttpPeer;
use m3_tests::peers;
use serde_json::json;
use std::time::{Duration, Instant};

/// `booking_server.py` over HTTP (with an event store: SSE events carry ids, and a broken
/// stream can be resumed, after a 300 ms delay).
fn booking_http(event_store: bool) -> Result<HttpPeer> {
    HttpPeer::start(
        "booking_server.py over HTTP",
        peers::booking_http_server(event_store, 300)?,
        &[],
        "/mcp",
    )
}

/// `server-everything` in its Streamable HTTP mode.
fn everything_http() -> Result<HttpPeer> {
    HttpPeer::start(
        "server-everything over HTTP",
        peers::server_everything_http()?,
        &[("PORT", "{port}".into())],
        "/mcp",
    )
}

/// `withdrawing_server.mjs` over HTTP, its SDK timing out an elicitation after `timeout_ms`.
fn withdrawing_http(timeout_ms: u64) -> Result<HttpPeer> {
    HttpPeer::start(
        "withdrawing_server.mjs over HTTP",
        peers::withdrawing_http_server(timeout_ms)?,
        &[],
        "/mcp",
    )
}

/// The binding of the server `peer` under `name`.
fn at(peer: &HttpPeer, name: &str, era: McpEra) -> HttpServer {
    HttpServer::new(name, peer.url()).era(era)
}

/// The execution's terminal result, whatever it is.
fn ended(run: &Run) -> Result<ExecutionResult> {
    match run.handle.result(Some(super::executions_peers::WAIT)) {
        Ok(result) => Ok(result),
        Err(ExecutionError::OperationTimeout(timeout)) => timeout
            .result
            .map(|result| *result)
            .context("an operation timeout without a result"),
        Err(e) => Err(e.into()),
    }
}

/// The round ended `failed` with `code` and a message holding `cause`; it is not pending any
/// more and a later answer is a typed `ManagedInputStateError`, never acknowledged.
fn assert_failed_for_good(
    run: &Run,
    round: &PendingElicitationRound,
    key: &str,
    code: FailureCode,
    cause: &str,
) -> Result<ManagedInputRecord> {
    let record = run.record(&round.round_id)?;
    ensure!(
        record.status == ManagedInputStatus::Failed,
        "round {} is {:?}, not failed",
        round.round_id,
        record.status
    );
    let failure = record.failure.clone().context("a failed round says why")?;
    ensure!(failure.code == code, "{failure:?}, expected {code:?}");
    ensure!(
        failure.message.contains(cause),
        "{cause:?} expected in {:?}",
        failure.message
    );
    ensure!(run.handle.pending_elicitation()?.is_none());
    match run.answer(round, key, ElicitationResponse::decline()) {
        Err(ExecutionError::ManagedInput(ManagedInputError::State(_))) => {}
        other => bail!("a late answer to a failed round: {other:?}"),
    }
    Ok(record)
}

// ---- the Python SDK (mcp 2.3.0) over HTTP ----

#[test]
fn python_sdk_over_http_legacy_rounds_are_answered_declined_and_cancelled() -> Result<()> {
    let peer = booking_http(false)?;
    for (response, expected) in [
        (ElicitationResponse::accept(booking_answer()), BOOKED),
        (ElicitationResponse::decline(), "not booked: decline"),
        (ElicitationResponse::cancel(), "not booked: cancel"),
    ] {
        let run = Run::start(at(&peer, "booking", McpEra::Legacy), book_table())?;
        let round = run.pending()?;
        check_booking_form(&round, LEGACY_KEY)?;
        assert_eq!(round.request_state, None);
        run.answer(&round, LEGACY_KEY, response)?;
        let result = run.succeeded()?;
        assert_eq!(only_text(&result)?, expected);
        run.assert_resolved(&round.round_id)?;
        run.close();
    }
    Ok(())
}

#[test]
fn python_sdk_over_http_modern_rounds_keep_their_request_state_and_resolve() -> Result<()> {
    let peer = booking_http(false)?;
    // Auto: the probe (`server/discover` with the 2026-07-28 headers) finds the modern era.
    for (response, expected) in [
        (ElicitationResponse::accept(booking_answer()), BOOKED),
        (ElicitationResponse::decline(), "not booked: decline"),
        (ElicitationResponse::cancel(), "not booked: cancel"),
    ] {
        let run = Run::start(at(&peer, "booking", McpEra::Auto), book_table())?;
        let round = run.pending()?;
        check_booking_form(&round, MRTR_KEY)?;
        let state = round
            .request_state
            .clone()
            .context("a sealed requestState")?;
        assert_eq!(
            run.record(&round.round_id)?.pending.request_state,
            Some(state)
        );
        run.answer(&round, MRTR_KEY, response)?;
        let result = run.succeeded()?;
        assert_eq!(only_text(&result)?, expected);
        run.assert_resolved(&round.round_id)?;
        run.close();
    }
    Ok(())
}

/// `book_table_confirmed` asks twice: in the modern era two `input_required` rounds of one
/// operation, each with its own `requestState`, the second resolving the first.
#[test]
fn python_sdk_over_http_multi_round_request_state_flow() -> Result<()> {
    let peer = booking_http(false)?;
    let run = Run::start(
        at(&peer, "booking", McpEra::Modern),
        Script::call(
            "booking:book_table_confirmed",
            json!({"restaurant": "Chez M3"}),
        ),
    )?;
    let first = run.pending()?;
    form(&first, MRTR_KEY)?;
    let first_state = first.request_state.clone().context("round 1's state")?;
    run.answer(
        &first,
        MRTR_KEY,
        ElicitationResponse::accept(booking_answer()),
    )?;
    let second = run.next_pending(&first.round_id)?;
    let confirm = form(&second, "__main__:ask_confirmation")?;
    assert!(confirm.message.contains("Asha"), "{}", confirm.message);
    assert_eq!(second.logical_operation_id, first.logical_operation_id);
    let second_state = second.request_state.clone().context("round 2's state")?;
    assert_ne!(second_state, first_state, "each round has its own state");
    let first_record = run.assert_resolved(&first.round_id)?;
    assert_eq!(first_record.round_index, 0);
    run.answer(
        &second,
        "__main__:ask_confirmation",
        ElicitationResponse::accept(json!({"confirmed": true})),
    )?;
    let result = run.succeeded()?;
    let [tool] = result.outcome.tool_results.as_slice() else {
        bail!("one result expected: {:?}", result.outcome.tool_results);
    };
    assert_eq!(tool.text(), "confirmed booking at Chez M3 for Asha");
    let second_record = run.assert_resolved(&second.round_id)?;
    assert_eq!(second_record.round_index, 1);
    run.close();
    Ok(())
}

/// The Python SDK's tool that gives up after a second sends `notifications/cancelled` and its
/// result on the call's stream: the round is withdrawn, the execution goes on.
#[test]
fn python_sdk_over_http_a_server_that_stops_waiting_withdraws_its_round() -> Result<()> {
    let peer = booking_http(false)?;
    let run = Run::start(
        at(&peer, "booking", McpEra::Legacy),
        Script::call(
            "booking:book_table_quickly",
            json!({"restaurant": "Chez M3"}),
        ),
    )?;
    let round = run.pending()?;
    let result = ended(&run)?;
    assert!(result.succeeded(), "{}", result.outcome);
    assert!(result.outcome.tool_results[0].text().contains("not booked"));
    let record = assert_failed_for_good(
        &run,
        &round,
        LEGACY_KEY,
        FailureCode::RequestWithdrawn,
        "cancelled its elicitation request",
    )?;
    assert_eq!(record.delivery_attempts, 0);
    run.close();
    Ok(())
}

/// A legacy round waits on the call's open stream; the server restarting ends that stream. With
/// no event ids it cannot be resumed, and with them the restarted server no longer knows the
/// session: either way the round fails `server_error` at once, saying so, and the execution
/// fails.
#[test]
fn python_sdk_over_http_a_restart_mid_round_fails_a_legacy_round_visibly() -> Result<()> {
    for (event_store, cause) in [
        (false, "gave no event id to resume it"),
        (true, "refused to resume it"),
    ] {
        let mut peer = booking_http(event_store)?;
        let run = Run::start(at(&peer, "booking", McpEra::Legacy), book_table())?;
        let round = run.pending()?;
        peer.restart()?;
        let result = ended(&run)?;
        ensure!(!result.succeeded(), "{}", result.outcome);
        let failure = result.outcome.failure.clone().context("a failure")?;
        assert_eq!(failure.code, Some(FailureCode::ServerError), "{failure:?}");
        assert_failed_for_good(&run, &round, LEGACY_KEY, FailureCode::ServerError, cause)?;
        run.close();
    }
    Ok(())
}

/// A modern round keeps no connection open while it waits: the restart is found when the
/// answer goes out. The restarted server cannot open the old `requestState` (-32602): the round
/// fails `invalid_request_state`, its answer delivered once and never again.
#[test]
fn python_sdk_over_http_a_restart_mid_round_fails_a_modern_round_visibly() -> Result<()> {
    let mut peer = booking_http(false)?;
    let run = Run::start(at(&peer, "booking", McpEra::Modern), book_table())?;
    let round = run.pending()?;
    peer.restart()?;
    run.answer(
        &round,
        MRTR_KEY,
        ElicitationResponse::accept(booking_answer()),
    )?;
    let result = ended(&run)?;
    ensure!(!result.succeeded(), "{}", result.outcome);
    let record = run.record(&round.round_id)?;
    assert_eq!(record.status, ManagedInputStatus::Failed);
    assert_eq!(
        record.failure.map(|f| f.code),
        Some(FailureCode::InvalidRequestState)
    );
    assert_eq!(record.delivery_attempts, 1, "delivered once");
    assert!(record.timestamps.delivered_at.is_some());
    run.close();
    Ok(())
}

// ---- server-everything over HTTP (legacy era) ----

#[test]
fn server_everything_over_http_rounds_are_answered_declined_and_cancelled() -> Result<()> {
    let peer = everything_http()?;
    for action in ["accept", "decline", "cancel"] {
        // Auto: the probe is refused (no session), so the legacy era is used.
        let run = Run::start(
            at(&peer, "everything", McpEra::Auto),
            Script::call("everything:trigger-elicitation-request", json!({})),
        )?;
        let round = run.pending()?;
        assert_eq!(round.server, "everything");
        let schema = form(&round, LEGACY_KEY)?.requested_schema.clone();
        let (response, expected) = match action {
            "accept" => {
                let content = answer_for(&schema)?;
                (
                    ElicitationResponse::accept(content.clone()),
                    json!({"action": "accept", "content": content}),
                )
            }
            "decline" => (ElicitationResponse::decline(), json!({"action": "decline"})),
            _ => (ElicitationResponse::cancel(), json!({"action": "cancel"})),
        };
        run.answer(&round, LEGACY_KEY, response)?;
        let result = run.succeeded()?;
        let [tool] = result.outcome.tool_results.as_slice() else {
            bail!("one result expected: {:?}", result.outcome.tool_results);
        };
        if action == "accept" {
            // The server received exactly our answer.
            assert_eq!(raw_result(tool)?, expected);
        } else {
            assert!(tool.text().contains(action), "{}", tool.text());
        }
        run.assert_resolved(&round.round_id)?;
        run.close();
    }
    Ok(())
}

// ---- the TypeScript SDK 1.x over HTTP: elicitations on the standalone GET stream ----

/// Its tools ask without tying the request to the call, so the `elicitation/create` travels on
/// the session's GET stream: answered, the call completes on its own stream; unanswered, the
/// SDK's timeout cancels the request there and the round is withdrawn.
#[test]
fn typescript_sdk_over_http_elicitations_on_the_get_stream_are_answered_and_withdrawn() -> Result<()>
{
    let peer = withdrawing_http(60_000)?;
    let run = Run::start(
        at(&peer, "ts", McpEra::Legacy),
        Script::call("ts:ask_with_timeout", json!({})),
    )?;
    let round = run.pending()?;
    form(&round, "shipping_address")?;
    run.answer(
        &round,
        "shipping_address",
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )?;
    let result = run.succeeded()?;
    assert_eq!(
        result.outcome.tool_results[0].text(),
        "Booked shipment to 1 Main Street, Pune"
    );
    run.assert_resolved(&round.round_id)?;
    run.close();

    let peer = withdrawing_http(1_500)?;
    let run = Run::start(
        at(&peer, "ts", McpEra::Legacy),
        Script::call("ts:ask_with_timeout", json!({})),
    )?;
    let round = run.pending()?;
    let started = Instant::now();
    let result = ended(&run)?;
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(result.succeeded(), "{}", result.outcome);
    assert!(
        result.outcome.tool_results[0].text().contains("no answer"),
        "{:?}",
        result.outcome.tool_results
    );
    assert_failed_for_good(
        &run,
        &round,
        "shipping_address",
        FailureCode::RequestWithdrawn,
        "",
    )?;
    run.close();
    Ok(())
}

/// A worker process killed with SIGKILL while its 2026-07-28 round over HTTP waits: the round holds
/// no connection and its `requestState` is stored, yet it does not survive its worker
/// (docs/decisions/0006-a-round-over-http-does-not-survive-its-worker.md): once the lease expires,
/// recovery fails it `recovery_unavailable`, a late answer is refused, and the server, which never
/// knew, serves the next execution.
#[test]
fn python_sdk_over_http_a_killed_worker_s_modern_round_is_recovered_not_resumed() -> Result<()> {
    let peer = booking_http(false)?;
    let db = m3_tests::TempDb::new();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_m3-test-fault-worker"))
        .args([
            "kit",
            db.path.to_str().context("a UTF-8 path")?,
            "800",
            &peer.url(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().context("stdout")?),
        &mut line,
    )?;
    let round_id = line
        .split_whitespace()
        .nth(1)
        .with_context(|| format!("no round in {line:?}"))?
        .to_string();
    let stored = db.store().get_round(&round_id)?.context("the round")?;
    ensure!(
        stored.pending.request_state.is_some(),
        "a stored requestState"
    );
    child.kill()?;
    child.wait()?;
    std::thread::sleep(Duration::from_millis(1200));
    let store = std::sync::Arc::new(SqliteExecutionStore::open(&db.path)?);
    let kit = McpTestKit::new(
        store.clone(),
        std::collections::BTreeMap::<String, String>::new(),
    )?;
    assert_eq!(kit.recover()?, (1, 1));
    let record = db.store().get_round(&round_id)?.context("the round")?;
    assert_eq!(record.status, ManagedInputStatus::Failed);
    assert_eq!(
        record.failure.map(|f| f.code),
        Some(FailureCode::RecoveryUnavailable)
    );
    let late = db.store().submit_responses(
        &round_id,
        &std::collections::BTreeMap::from([(
            MRTR_KEY.to_string(),
            ElicitationResponse::accept(booking_answer()),
        )]),
        "late",
    );
    assert!(
        matches!(late, Err(ManagedInputError::Recovery(_))),
        "{late:?}"
    );
    drop(kit);
    store.close();
    // The server is still there for the next one.
    let run = Run::start(at(&peer, "booking", McpEra::Modern), book_table())?;
    let round = run.pending()?;
    run.answer(&round, MRTR_KEY, ElicitationResponse::decline())?;
    run.succeeded()?;
    run.close();
    Ok(())
}

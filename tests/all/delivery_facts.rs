//! What the product says about an answer is what happened to it. A repeat of an answer (the same
//! idempotency key and answers, as a caller retries after a lost acknowledgement) to a round
//! that has since failed is refused, and the refusal states the delivery as the round recorded
//! it: delivered to the server (and when) before the round failed (`delivered_then_failed`),
//! delivery started and never confirmed (`delivery_unconfirmed`), or never delivered
//! (`round_terminal`). A round that did not fail acknowledges the repeat. Checked in every
//! terminal and open state through the execution API, and with real servers (the Python SDK's
//! booking server) that read the answer and exit before replying, over stdio in both eras and
//! over Streamable HTTP. The CLI and the HTTP API are checked in `host/cli/tests/delivery_facts.rs`.

use super::executions_peers::{MRTR_KEY, Run, booking, booking_answer};
use anyhow::{Context, Result, bail, ensure};
use chrono::{DateTime, SecondsFormat, Utc};
use m3::*;
use m3_tests::http_server::HttpServer as HttpPeer;
use m3_tests::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// The answer every round here gets, as JSON text (the execution API's `respond` form).
const ANSWER: &str = r#"{"shipping_address":{"action":"accept","content":{"street":"1 Main Street","city":"Pune"}}}"#;

/// A timestamp as the component writes it in messages.
fn shown(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// How far a round gets before the repeat, and how it ends.
#[derive(Debug, Clone, Copy)]
enum Path {
    Answered,
    DeliveryStarted,
    Delivered,
    Resolved,
    FailedBeforeDelivery,
    FailedDuringDelivery,
    FailedAfterDelivery,
    RecoveredAfterDelivery,
    RecoveredBeforeDelivery,
}

#[test]
fn a_repeat_says_what_became_of_the_answer_in_every_terminal_state() -> Result<()> {
    let db = TempDb::new();
    let store = Arc::new(db.store().into_inner());
    let executions = Executions::new(store.clone());
    let paths = [
        Path::Answered,
        Path::DeliveryStarted,
        Path::Delivered,
        Path::Resolved,
        Path::FailedBeforeDelivery,
        Path::FailedDuringDelivery,
        Path::FailedAfterDelivery,
        Path::RecoveredAfterDelivery,
        Path::RecoveredBeforeDelivery,
    ];
    for (n, path) in paths.into_iter().enumerate() {
        let id = format!("round-{n}");
        // A lease far longer than the test: nothing recovers the open rounds meanwhile.
        let round = address_round(&id).owned_by(claim("worker-1", Duration::from_secs(3_600)));
        let lease = create(&*store, &round);
        // The first answer, through the execution API as an application gives it.
        executions.respond("exec-1", &id, ANSWER, "key-1")?;
        let step = |r: StoreResult<ManagedInputRecord>| -> Result<()> {
            r.map(|_| ()).map_err(|e| anyhow::anyhow!("{path:?}: {e}"))
        };
        let deliver = |delivered: bool| -> Result<()> {
            step(store.start_delivery(&id, &lease, "delivery-1"))?;
            if delivered {
                step(store.mark_delivered(&id, &lease))?;
            }
            Ok(())
        };
        let fail = || {
            step(store.fail(
                &id,
                &lease,
                FailureCode::ServerError,
                "the server exited with code 3",
            ))
        };
        match path {
            Path::Answered => {}
            Path::DeliveryStarted => deliver(false)?,
            Path::Delivered => deliver(true)?,
            Path::Resolved => {
                deliver(true)?;
                step(store.resolve(&id, &lease))?;
            }
            Path::FailedBeforeDelivery => fail()?,
            Path::FailedDuringDelivery => {
                deliver(false)?;
                fail()?;
            }
            Path::FailedAfterDelivery => {
                deliver(true)?;
                fail()?;
            }
            Path::RecoveredAfterDelivery => {
                deliver(true)?;
                step(store.fail_recovery(&id, Some(&lease), "its worker is gone"))?;
            }
            Path::RecoveredBeforeDelivery => {
                step(store.fail_recovery(&id, Some(&lease), "its worker is gone"))?;
            }
        }
        let before = store.get_round(&id)?.context("the round")?;
        let repeat = executions.respond("exec-1", &id, ANSWER, "key-1");
        let t = &before.timestamps;
        let (code, words) = match path {
            Path::Answered | Path::DeliveryStarted | Path::Delivered | Path::Resolved => {
                ensure!(
                    repeat.is_ok(),
                    "{path:?}: the repeat was refused: {repeat:?}"
                );
                (None, vec![])
            }
            Path::FailedBeforeDelivery | Path::RecoveredBeforeDelivery => (
                Some(ErrorCode::RoundTerminal),
                vec![
                    "failed before delivery of its answers started".to_string(),
                    "the server never received them".to_string(),
                ],
            ),
            Path::FailedDuringDelivery => (
                Some(ErrorCode::DeliveryUnconfirmed),
                vec![
                    format!(
                        "delivery of its answers started at {}",
                        shown(t.delivery_started_at.context("started")?)
                    ),
                    "never confirmed".into(),
                    "the server may have received them".into(),
                ],
            ),
            Path::FailedAfterDelivery | Path::RecoveredAfterDelivery => (
                Some(ErrorCode::DeliveredThenFailed),
                vec![
                    format!(
                        "its answers were delivered to the server at {}",
                        shown(t.delivered_at.context("delivered")?)
                    ),
                    "the server received them".into(),
                    "they are not delivered again".into(),
                ],
            ),
        };
        if let Some(code) = code {
            let Err(ManagedInputError::State(e)) = &repeat else {
                bail!("{path:?}: a repeat to a failed round must be a state error: {repeat:?}");
            };
            ensure!(e.code() == code, "{path:?}: {e}");
            for word in words {
                ensure!(
                    e.detail.message.contains(&word),
                    "{path:?}: {word:?} in {e}"
                );
            }
            let failure = before.failure.as_ref().context("a failure")?;
            ensure!(
                e.detail.message.contains(failure.code.as_str()),
                "{path:?}: the failure's code in {e}"
            );
            // Never a denial of a delivery that may have happened, never a claim of one that
            // was not confirmed.
            ensure!(
                t.delivery_started_at.is_none() == e.detail.message.contains("never received"),
                "{path:?}: {e}"
            );
            ensure!(
                t.delivered_at.is_some() == e.detail.message.contains("the server received them"),
                "{path:?}: {e}"
            );
            ensure!(!e.detail.message.contains("1 Main Street"), "{e}");
            ensure!(!e.detail.message.contains("key-1"), "{e}");
        }
        // The repeat changed nothing; the store's own repeat returns the record as it is.
        ensure!(store.get_round(&id)?.as_ref() == Some(&before), "{path:?}");
        let direct = store.submit_responses_json(&id, ANSWER, "key-1")?;
        ensure!(
            direct == before,
            "{path:?}: the store's repeat changed the round"
        );
    }
    Ok(())
}

/// The booking script whose server exits once it has the answer.
fn book_then_exit() -> Script {
    Script::call(
        "booking:book_table_then_exit",
        json!({"restaurant": "Chez M3"}),
    )
}

/// Runs `book_table_then_exit` against `server`: answers the round, waits for the execution to
/// end, and checks that the round was delivered and then failed `server_error`, and that a
/// repeat of the answer says so, with the delivery's time, and is never acknowledged.
fn answer_then_server_exits(server: impl Into<ServerBinding>) -> Result<()> {
    let run = Run::start(server, book_then_exit())?;
    let round = run.pending()?;
    ensure!(round.operation_name == "book_table_then_exit", "{round:?}");
    let key = round
        .requests
        .keys()
        .next()
        .context("the round has a request")?
        .clone();
    if round.request_state.is_some() {
        ensure!(key == MRTR_KEY, "{key}");
    }
    let response = ElicitationResponse::accept(booking_answer());
    run.answer(&round, &key, response.clone())?;
    let result = run
        .handle
        .result(Some(super::executions_peers::WAIT))
        .map_err(|e| anyhow::anyhow!("the execution's result: {e}"))?;
    ensure!(!result.succeeded(), "{}", result.outcome);
    let record = run.record(&round.round_id)?;
    ensure!(
        record.status == ManagedInputStatus::Failed,
        "{:?}",
        record.status
    );
    ensure!(
        record.failure.as_ref().map(|f| f.code) == Some(FailureCode::ServerError),
        "{:?}",
        record.failure
    );
    let delivered = record
        .timestamps
        .delivered_at
        .context("the server read the answer: the round records its delivery")?;
    ensure!(record.delivery_attempts == 1);
    // The retry after a lost acknowledgement: same key, same answer.
    match run.answer(&round, &key, response) {
        Err(ExecutionError::ManagedInput(ManagedInputError::State(e))) => {
            ensure!(e.code() == ErrorCode::DeliveredThenFailed, "{e}");
            ensure!(
                e.detail
                    .message
                    .contains(&format!("delivered to the server at {}", shown(delivered))),
                "{e}"
            );
            ensure!(e.detail.message.contains("server_error"), "{e}");
            ensure!(!e.detail.message.contains("never"), "{e}");
        }
        other => bail!("the repeat after the server died: {other:?}"),
    }
    ensure!(
        run.record(&round.round_id)? == record,
        "the repeat changed the round"
    );
    run.close();
    Ok(())
}

#[test]
fn a_server_that_dies_after_reading_the_answer_over_stdio_legacy() -> Result<()> {
    answer_then_server_exits(booking(McpEra::Legacy)?)
}

#[test]
fn a_server_that_dies_after_reading_the_answer_over_stdio_modern() -> Result<()> {
    answer_then_server_exits(booking(McpEra::Modern)?)
}

#[test]
fn a_server_that_dies_after_reading_the_answer_over_http() -> Result<()> {
    let peer = HttpPeer::start(
        "booking_server.py over HTTP",
        peers::booking_http_server(false, 300)?,
        &[],
        "/mcp",
    )?;
    answer_then_server_exits(HttpServer::new("booking", peer.url()).era(McpEra::Legacy))
}

//! The harness conformance cases: what holds for every agent harness with a model, one body per
//! case run on each (`on_both_harnesses!`: `harnesses::codex::*` on the real Codex CLI,
//! `harnesses::claude_code::*` on the real Claude Code CLI), each CLI pinned in `tests/peers/`
//! and talking to its loopback model, the bundled shipping server as the MCP server it starts.

use anyhow::{Context, ensure};
use m3::*;
use m3_tests::harnesses::wait_pending;
use m3_tests::harnesses::{AgentHarness, peer_binding};
use m3_tests::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");

fn submission(mode: HumanInput) -> Submission {
    Submission::new(
        "Ask for the delivery address, then book the shipment.",
        StdioServer::new("shipping", SHIPPING_SERVER).args(["--era", "legacy"]),
    )
    .tools(["shipping:book_shipment"])
    .human_input(mode)
}

fn answer(
    harness: AgentHarness,
    response: ElicitationResponse,
) -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(harness.address_key().to_string(), response)])
}

fn address() -> ElicitationResponse {
    ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"}))
}

m3_tests::on_both_harnesses! {
    /// The specification's flow: the server's question becomes a round (its operation the
    /// agent's tool call), the answer is delivered once through the harness and the call books
    /// the shipment with it; the agent's final message is the outcome's.
    fn the_specification_s_flow_delivers_the_answer_once(harness) {
        let db = TempDb::new();
        let run = harness.start(&db, "tool", &[], Duration::from_secs(120))?;
        let handle = run.agent.submit(submission(HumanInput::Managed))?;
        let pending = wait_pending(&handle)?;
        assert_eq!(pending.server, "shipping");
        assert_eq!(pending.operation_name, "book_shipment");
        assert_eq!(
            pending.requests.keys().collect::<Vec<_>>(),
            [harness.address_key()]
        );
        handle.respond_elicitation(&pending.round_id, answer(harness, address()), "address-1")?;
        let result = handle.result(Some(Duration::from_secs(120)))?;
        assert!(result.succeeded(), "{}", result.outcome);
        assert_eq!(
            result.outcome.final_message.as_deref(),
            Some(harness.final_message())
        );
        let call = &result.outcome.tool_results[0];
        assert_eq!(call.tool, "shipping:book_shipment");
        assert!(call.text().contains("1 Main Street"), "{}", call.text());
        let record = db.store().get_round(&pending.round_id)?.context("the round")?;
        assert_eq!(record.status, ManagedInputStatus::Resolved);
        assert_eq!(record.delivery_attempts, 1);
        Ok(())
    }

    /// Decline and cancel answers reach the server through the harness; the call completes
    /// saying so and the round is resolved.
    fn decline_and_cancel_answers_complete_the_turn(harness) {
        for (response, said) in [
            (ElicitationResponse::decline(), "declined"),
            (ElicitationResponse::cancel(), "cancelled"),
        ] {
            let db = TempDb::new();
            let run = harness.start(&db, "tool", &[], Duration::from_secs(120))?;
            let handle = run.agent.submit(submission(HumanInput::Managed))?;
            let pending = wait_pending(&handle)?;
            handle.respond_elicitation(&pending.round_id, answer(harness, response), "k")?;
            let result = handle.result(Some(Duration::from_secs(120)))?;
            assert!(result.succeeded(), "{}", result.outcome);
            // Codex gives the agent the result's text; Claude Code its structured content.
            let output = result.outcome.tool_results[0].text();
            assert!(
                output.contains(said)
                    && (output.contains("not booked") || output.contains(r#""booked":false"#)),
                "{output}"
            );
            let record = db.store().get_round(&pending.round_id)?.context("round")?;
            assert_eq!(record.status, ManagedInputStatus::Resolved);
        }
        Ok(())
    }

    /// `cancel()` while a round waits interrupts the turn: the round fails `cancelled`, the
    /// execution is cancelled, and an answer given afterwards is refused, never delivered.
    fn cancel_mid_round_interrupts_the_turn(harness) {
        let db = TempDb::new();
        let run = harness.start(&db, "tool", &[], Duration::from_secs(120))?;
        let handle = run.agent.submit(submission(HumanInput::Managed))?;
        let pending = wait_pending(&handle)?;
        handle.cancel()?;
        let result = handle.result(Some(Duration::from_secs(60)))?;
        assert_eq!(result.outcome.kind, OutcomeKind::Cancelled, "{}", result.outcome);
        let record = db.store().get_round(&pending.round_id)?.context("round")?;
        assert_eq!(record.status, ManagedInputStatus::Failed);
        assert_eq!(record.failure.context("failure")?.code, FailureCode::Cancelled);
        assert!(
            handle
                .respond_elicitation(&pending.round_id, answer(harness, address()), "late")
                .is_err()
        );
        assert_eq!(record.delivery_attempts, 0);
        Ok(())
    }

    /// Human input mode `fail`: the harness's request is answered `cancel`, the round is kept
    /// failed `elicitation_unhandled`, and the execution fails with that code.
    fn fail_mode_answers_cancel_and_fails_the_execution(harness) {
        let db = TempDb::new();
        let run = harness.start(&db, "tool", &[], Duration::from_secs(120))?;
        let handle = run.agent.submit(submission(HumanInput::Fail))?;
        let result = handle.result(Some(Duration::from_secs(120)))?;
        assert!(!result.succeeded(), "{}", result.outcome);
        let failure = result.outcome.failure.clone().context("a failure")?;
        assert_eq!(failure.code, Some(FailureCode::ElicitationUnhandled), "{failure:?}");
        let rounds = db.store().list_rounds(&RoundFilter::default())?;
        assert_eq!(rounds.len(), 1);
        assert_eq!(rounds[0].status, ManagedInputStatus::Failed);
        assert_eq!(
            rounds[0].failure.as_ref().context("failure")?.code,
            FailureCode::ElicitationUnhandled
        );
        let output = result.outcome.tool_results[0].text();
        assert!(output.contains("cancelled"), "{output}");
        Ok(())
    }

    /// A model that never answers: the kit's turn deadline interrupts the turn and the execution
    /// fails as an operation timeout instead of hanging (both CLIs would wait or retry).
    fn a_silent_model_hits_the_turn_deadline(harness) {
        let db = TempDb::new();
        let run = harness.start(&db, "silent", &[], Duration::from_secs(3))?;
        let handle = run.agent.submit(submission(HumanInput::Managed))?;
        match handle.result(Some(Duration::from_secs(90))) {
            Err(ExecutionError::OperationTimeout(timeout)) => {
                let result = timeout.result.context("the result travels with the timeout")?;
                assert!(result.timed_out(), "{}", result.outcome);
                let failure = result.outcome.failure.context("a failure")?;
                assert!(failure.message.contains("turn's deadline"), "{}", failure.message);
            }
            other => panic!("expected OperationTimeout, got {other:?}"),
        }
        assert!(handle.pending_elicitation()?.is_none());
        Ok(())
    }

    /// The turn deadline never counts the time a round waits for a person: a round answered
    /// long after the whole turn's deadline is still delivered, and the turn completes.
    fn the_turn_deadline_stands_still_while_a_round_waits(harness) {
        let db = TempDb::new();
        let run = harness.start(&db, "tool", &[], Duration::from_secs(8))?;
        let mut server = StdioServer::new("shipping", SHIPPING_SERVER)
            .args(["--era", "legacy", "--transcript", "received.jsonl"]);
        if harness == AgentHarness::Codex {
            // Codex is told the server's working directory: its transcript, a relative path,
            // lands there (Claude Code starts servers in its own).
            server = server.cwd(db.dir.path().display().to_string());
        }
        let handle = run.agent.submit(
            Submission::new("Ask for the delivery address, then book the shipment.", server)
                .tools(["shipping:book_shipment"])
                .human_input(HumanInput::Managed),
        )?;
        let pending = wait_pending(&handle)?;
        if harness == AgentHarness::Codex {
            ensure!(
                db.dir.path().join("received.jsonl").is_file(),
                "the server did not run in the binding's working directory"
            );
        }
        std::thread::sleep(Duration::from_secs(10));
        handle.respond_elicitation(
            &pending.round_id,
            answer(harness, address()),
            "after-the-deadline",
        )?;
        let result = handle.result(Some(Duration::from_secs(120)))?;
        assert!(result.succeeded(), "{}", result.outcome);
        let record = db.store().get_round(&pending.round_id)?.context("round")?;
        assert_eq!(record.status, ManagedInputStatus::Resolved);
        assert_eq!(record.delivery_attempts, 1);
        Ok(())
    }

    /// A server that stops waiting (the TypeScript SDK 1.x's request timeout) behind the agent:
    /// the round is withdrawn as soon as the harness reports it, never left answerable, and the
    /// turn ends with the server's own result.
    fn a_server_that_stops_waiting_withdraws_its_round(harness) {
        let db = TempDb::new();
        let run = harness.start(&db, "tool", &[], Duration::from_secs(120))?;
        let command = peers::withdrawing_server(1_500)?;
        let server = StdioServer::new("ts", command.program.display().to_string())
            .args(command.args.iter().map(|a| a.to_string_lossy().into_owned()));
        let handle = run.agent.submit(
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
        let failure = rounds[0].failure.as_ref().context("a failed round says why")?;
        assert_eq!(failure.code, FailureCode::RequestWithdrawn);
        // Failed by what the harness reported (the request withdrawn, or the call completing
        // first), not later by the net under a finished execution.
        assert!(
            failure.message.starts_with("codex withdrew the request")
                || failure.message.starts_with("claude code withdrew the request")
                || failure.message.starts_with("the tool call completed without waiting"),
            "{}",
            failure.message
        );
        assert!(handle.pending_elicitation()?.is_none());
        Ok(())
    }

    /// URL consent: server-everything's URL elicitation is a URL round; an answer with content
    /// is refused and changes nothing, consent alone is delivered and nothing is fetched.
    fn a_url_request_is_answered_by_consent(harness) {
        let db = TempDb::new();
        let url = "https://example.com/consent";
        let run =
            harness.start_calling(&db, "tool", &[], Duration::from_secs(120), json!({"url": url}))?;
        let server =
            peer_binding("everything", &peers::server_everything()?).era(McpEra::Legacy);
        let handle = run.agent.submit(
            Submission::new("Ask for consent.", server)
                .tools(["everything:trigger-url-elicitation"])
                .human_input(HumanInput::Managed),
        )?;
        let pending = wait_pending(&handle)?;
        let (key, request) = pending.requests.iter().next().context("one request")?;
        let ElicitationRequest::Url(request) = request else {
            anyhow::bail!("expected a URL request: {request:?}");
        };
        assert_eq!(request.url, url);
        let with_content = BTreeMap::from([(
            key.clone(),
            ElicitationResponse::accept(json!({"ok": true})),
        )]);
        assert!(handle.respond_elicitation(&pending.round_id, with_content, "c").is_err());
        assert_eq!(
            handle.pending_elicitation()?.context("still pending")?.round_id,
            pending.round_id
        );
        let consent = BTreeMap::from([(key.clone(), ElicitationResponse::accept_url())]);
        handle.respond_elicitation(&pending.round_id, consent, "consent")?;
        let result = handle.result(Some(Duration::from_secs(120)))?;
        assert!(result.succeeded(), "{}", result.outcome);
        let text = result.outcome.tool_results[0].text();
        assert!(text.contains("completed the URL elicitation"), "{text}");
        let record = db.store().get_round(&pending.round_id)?.context("round")?;
        assert_eq!(record.status, ManagedInputStatus::Resolved);
        Ok(())
    }
}

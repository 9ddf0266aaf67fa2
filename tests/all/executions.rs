//! The execution API end to end: the kit, handles and the worker in the component, against the
//! bundled shipping server as a real child process and a real SQLite file.

use m3::*;
use m3_tests::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");

fn shipping_server(args: &[&str]) -> StdioServer {
    StdioServer::new("shipping", SHIPPING_SERVER).args(args.iter().copied())
}

fn booking_script() -> Script {
    Script::call(
        "shipping:book_shipment",
        json!({"item": "book", "quantity": 1}),
    )
}

fn address() -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )])
}

fn wait_pending(handle: &ExecutionHandle) -> PendingElicitationRound {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(pending) = handle.pending_elicitation().unwrap() {
            return pending;
        }
        let snapshot = handle.snapshot().unwrap();
        assert_ne!(
            snapshot.lifecycle,
            ExecutionStatus::Finished,
            "finished before asking: {:?}",
            snapshot.outcome
        );
        assert!(Instant::now() < deadline, "no pending round in time");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The specification's example, in Rust, with the blocking API.
#[test]
fn the_spec_example_runs_with_the_blocking_api() {
    let db = TempDb::new();
    let store = Arc::new(SqliteExecutionStore::open(&db.path).unwrap());
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new()).unwrap();
    let agent = kit
        .agents([AgentSpec::scripted(booking_script())])
        .unwrap()
        .remove(0);
    let handle = agent
        .submit(
            Submission::new(
                "Ask for the delivery address, then book the shipment.",
                shipping_server(&[]),
            )
            .tools(["shipping:book_shipment"])
            .human_input(HumanInput::Managed),
        )
        .unwrap();
    let pending = wait_pending(&handle);
    assert_eq!(pending.execution_id, handle.execution_id());
    assert_eq!(
        handle.snapshot().unwrap().lifecycle,
        ExecutionStatus::WaitingForInput
    );
    assert_eq!(
        pending.requests.keys().collect::<Vec<_>>(),
        ["shipping_address"]
    );
    handle
        .respond_elicitation(
            &pending.round_id,
            address(),
            &format!("address-{}", pending.round_id),
        )
        .unwrap();
    let result = handle.result(Some(Duration::from_secs(60))).unwrap();
    assert!(result.succeeded(), "{}", result.outcome);
    let text = result.outcome.tool_results[0].text();
    assert!(
        text.contains("1 Main Street") && text.contains("Pune"),
        "{text}"
    );
    let record = db.store().get_round(&pending.round_id).unwrap().unwrap();
    assert_eq!(record.status, ManagedInputStatus::Resolved);
    assert_eq!(record.delivery_attempts, 1);
    assert_eq!(
        handle.snapshot().unwrap().lifecycle,
        ExecutionStatus::Finished
    );
    drop(kit);
    store.close();
}

fn kit_on(db: &TempDb) -> (Arc<SqliteExecutionStore>, McpTestKit) {
    let store = Arc::new(SqliteExecutionStore::open(&db.path).unwrap());
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new()).unwrap();
    (store, kit)
}

fn submit(kit: &McpTestKit, server: StdioServer, mode: HumanInput) -> ExecutionHandle {
    submit_with(
        kit,
        Submission::new("Book a shipment.", server).human_input(mode),
    )
}

fn submit_with(kit: &McpTestKit, submission: Submission) -> ExecutionHandle {
    let agent = kit
        .agents([AgentSpec::scripted(booking_script())])
        .unwrap()
        .remove(0);
    agent
        .submit(submission.tools(["shipping:book_shipment"]))
        .unwrap()
}

fn finished(handle: &ExecutionHandle) -> ExecutionResult {
    handle.result(Some(Duration::from_secs(60))).unwrap()
}

fn failure(result: &ExecutionResult) -> &ExecutionFailure {
    result
        .outcome
        .failure
        .as_ref()
        .unwrap_or_else(|| panic!("expected a failure: {}", result.outcome))
}

fn round_failure(db: &TempDb, round_id: &str) -> FailureCode {
    let record = db.store().get_round(round_id).unwrap().unwrap();
    assert_eq!(record.status, ManagedInputStatus::Failed, "{round_id}");
    record.failure.expect("a failed round says why").code
}

fn transcript(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The spec's example with the async API (tokio).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spec_example_runs_with_the_async_api() {
    let db = TempDb::new();
    let store = Arc::new(SqliteExecutionStore::open(&db.path).unwrap());
    let kit = AsyncMcpTestKit::new(store.clone(), BTreeMap::<String, String>::new());
    let agent = kit
        .agents([AgentSpec::scripted(booking_script())])
        .unwrap()
        .remove(0);
    let handle = agent
        .submit(
            Submission::new(
                "Ask for the delivery address, then book the shipment.",
                shipping_server(&[]),
            )
            .tools(["shipping:book_shipment"])
            .human_input(HumanInput::Managed),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let pending = loop {
        if let Some(pending) = handle.pending_elicitation().await.unwrap() {
            break pending;
        }
        assert!(Instant::now() < deadline, "no pending round in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    handle
        .respond_elicitation(
            &pending.round_id,
            address(),
            &format!("address-{}", pending.round_id),
        )
        .await
        .unwrap();
    let result = handle.result(Some(Duration::from_secs(60))).await.unwrap();
    assert!(result.succeeded(), "{}", result.outcome);
    assert!(
        result.outcome.tool_results[0]
            .text()
            .contains("1 Main Street")
    );
    assert_eq!(
        db.store()
            .get_round(&pending.round_id)
            .unwrap()
            .unwrap()
            .status,
        ManagedInputStatus::Resolved
    );
    store.close();
}

/// A server that asks again after each answer (2026-07-28 multi round-trip): each round
/// resolves its predecessor; the operation keeps one logical id; round indexes count up.
#[test]
fn multi_round_mrtr_resolves_each_round_and_keeps_one_operation() {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db);
    let handle = submit(
        &kit,
        shipping_server(&["--era", "modern", "--ask-rounds", "3"]).era(McpEra::Modern),
        HumanInput::Managed,
    );
    let mut rounds = Vec::new();
    for _ in 0..3 {
        let pending = wait_pending(&handle);
        assert!(!rounds.contains(&pending.round_id));
        assert!(
            pending.request_state.is_some(),
            "MRTR rounds keep requestState"
        );
        handle
            .respond_elicitation(&pending.round_id, address(), &pending.round_id)
            .unwrap();
        // The next round appears only after this one is delivered.
        let deadline = Instant::now() + Duration::from_secs(30);
        while db
            .store()
            .get_round(&pending.round_id)
            .unwrap()
            .unwrap()
            .status
            == ManagedInputStatus::ResponseValidated
        {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(5));
        }
        rounds.push(pending.round_id);
    }
    let result = finished(&handle);
    assert!(result.succeeded(), "{}", result.outcome);
    let store = db.store();
    let records: Vec<_> = rounds
        .iter()
        .map(|r| store.get_round(r).unwrap().unwrap())
        .collect();
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record.status, ManagedInputStatus::Resolved);
        assert_eq!(record.round_index, i as u32);
        assert_eq!(record.round_limit, 10, "the default round limit");
        assert_eq!(
            record.pending.logical_operation_id,
            records[0].pending.logical_operation_id
        );
    }
}

/// One round with two request keys, answered together.
#[test]
fn a_round_with_two_keys_is_answered_at_once() {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db);
    let handle = submit(
        &kit,
        shipping_server(&["--era", "modern", "--two-keys"]).era(McpEra::Modern),
        HumanInput::Managed,
    );
    let pending = wait_pending(&handle);
    assert_eq!(
        pending.requests.keys().collect::<Vec<_>>(),
        ["contact_email", "shipping_address"]
    );
    // Only one key: rejected, nothing stored.
    assert_execution_refused(
        handle.respond_elicitation(&pending.round_id, address(), "k"),
        "ManagedInputValidationError",
        ErrorCode::ResponseKeysMismatch,
    );
    let mut both = address();
    both.insert(
        "contact_email".into(),
        ElicitationResponse::accept(json!({"email": "asha@example.com"})),
    );
    handle
        .respond_elicitation(&pending.round_id, both, "k")
        .unwrap();
    let result = finished(&handle);
    assert!(result.succeeded(), "{}", result.outcome);
    assert_eq!(
        result.outcome.tool_results[0].result["structuredContent"]["email"],
        "asha@example.com"
    );
}

/// An answer committed through another store object on the same file (its own connections,
/// no in-process wake-up) reaches the waiting worker through the database.
#[test]
fn an_answer_committed_by_another_store_is_delivered() {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db);
    let handle = submit(&kit, shipping_server(&[]), HumanInput::Managed);
    let pending = wait_pending(&handle);
    let other = SqliteExecutionStore::open(&db.path).unwrap();
    other
        .managed_input_store()
        .unwrap()
        .unwrap()
        .submit_responses(&pending.round_id, &address(), "from-elsewhere")
        .unwrap();
    let result = finished(&handle);
    assert!(result.succeeded(), "{}", result.outcome);
    assert_eq!(
        db.store()
            .get_round(&pending.round_id)
            .unwrap()
            .unwrap()
            .status,
        ManagedInputStatus::Resolved
    );
}

/// `cancel()` while a round is pending: the round ends `failed` with `cancelled`, the server
/// gets `cancel` for the request and `notifications/cancelled` for the call.
#[test]
fn cancel_fails_the_open_round_and_tells_the_server() {
    let db = TempDb::new();
    let log = db.dir.path().join("transcript.jsonl");
    let (_store, kit) = kit_on(&db);
    let handle = submit(
        &kit,
        shipping_server(&["--era", "legacy", "--transcript", log.to_str().unwrap()])
            .era(McpEra::Legacy),
        HumanInput::Managed,
    );
    let pending = wait_pending(&handle);
    handle.cancel().unwrap();
    let result = finished(&handle);
    assert_eq!(result.outcome.kind, OutcomeKind::Cancelled);
    assert_eq!(
        round_failure(&db, &pending.round_id),
        FailureCode::Cancelled
    );
    let sent = transcript(&log);
    assert!(
        sent.iter()
            .any(|m| m["result"]["action"] == "cancel" && m.get("id").is_some()),
        "the request was answered cancel: {sent:?}"
    );
    assert!(
        sent.iter()
            .any(|m| m["method"] == "notifications/cancelled"),
        "{sent:?}"
    );
    // A late answer is refused: the round is terminal.
    assert_execution_refused(
        handle.respond_elicitation(&pending.round_id, address(), "late"),
        "ManagedInputStateError",
        ErrorCode::RoundTerminal,
    );
    // Cancelling again changes nothing.
    handle.cancel().unwrap();
    assert_eq!(finished(&handle).outcome.kind, OutcomeKind::Cancelled);
}

/// A round with a short deadline expires: the round fails with `deadline_exceeded`, the
/// operation times out, the server got `cancel`, and no child process is left.
#[test]
fn a_round_deadline_fails_the_round_and_times_the_operation_out() {
    let db = TempDb::new();
    let log = db.dir.path().join("transcript.jsonl");
    let (_store, kit) = kit_on(&db);
    let handle = submit_with(
        &kit,
        Submission::new(
            "Book a shipment.",
            shipping_server(&["--era", "legacy", "--transcript", log.to_str().unwrap()])
                .era(McpEra::Legacy),
        )
        .human_input(HumanInput::Managed)
        .round_deadline(Duration::from_millis(300)),
    );
    let pending = wait_pending(&handle);
    assert!(pending.deadline.is_some());
    let result = match handle.result(Some(Duration::from_secs(60))) {
        Err(ExecutionError::OperationTimeout(timeout)) => *timeout.result.expect("the result"),
        other => panic!("expected OperationTimeout, got {other:?}"),
    };
    assert!(result.timed_out(), "{}", result.outcome);
    assert_eq!(failure(&result).code, Some(FailureCode::DeadlineExceeded));
    assert_eq!(
        round_failure(&db, &pending.round_id),
        FailureCode::DeadlineExceeded
    );
    assert!(
        transcript(&log)
            .iter()
            .any(|m| m["result"]["action"] == "cancel"),
        "the server got cancel"
    );
    assert_no_server_left(&db);
}

/// No shipping server started by this test's kit is still running.
fn assert_no_server_left(db: &TempDb) {
    let marker = db.dir.path().to_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let alive: Vec<_> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok())
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok().map(|c| (e, c)))
            .filter(|(_, c)| String::from_utf8_lossy(c).contains(&marker))
            .filter(|(e, _)| {
                std::fs::read_to_string(e.path().join("status"))
                    .is_ok_and(|s| !s.contains("State:\tZ"))
            })
            .collect();
        if alive.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "server processes left behind");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The server answers the delivered answer with a JSON-RPC error: `server_error`.
#[test]
fn a_server_error_after_the_answer_fails_the_round_with_server_error() {
    for era in ["legacy", "modern"] {
        let db = TempDb::new();
        let (_store, kit) = kit_on(&db);
        let handle = submit(
            &kit,
            shipping_server(&["--era", era, "--fail-after-answer"]),
            HumanInput::Managed,
        );
        let pending = wait_pending(&handle);
        handle
            .respond_elicitation(&pending.round_id, address(), "k")
            .unwrap();
        let result = finished(&handle);
        assert_eq!(result.outcome.kind, OutcomeKind::Failed, "{era}");
        assert_eq!(
            round_failure(&db, &pending.round_id),
            FailureCode::ServerError,
            "{era}"
        );
    }
}

/// An expired `requestState` (the server rejects the retry with -32602): `invalid_request_state`.
#[test]
fn an_expired_request_state_fails_the_round_with_invalid_request_state() {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db);
    let handle = submit(
        &kit,
        shipping_server(&["--era", "modern", "--state-ttl-secs", "0"]).era(McpEra::Modern),
        HumanInput::Managed,
    );
    let pending = wait_pending(&handle);
    handle
        .respond_elicitation(&pending.round_id, address(), "k")
        .unwrap();
    let result = finished(&handle);
    assert_eq!(
        failure(&result).code,
        Some(FailureCode::InvalidRequestState)
    );
    assert_eq!(
        round_failure(&db, &pending.round_id),
        FailureCode::InvalidRequestState
    );
}

/// A server that re-asks forever hits the round limit: `round_limit_exceeded`, never hung.
#[test]
fn a_server_that_asks_forever_hits_the_round_limit() {
    for era in ["modern", "legacy"] {
        let db = TempDb::new();
        let (_store, kit) = kit_on(&db);
        let handle = submit_with(
            &kit,
            Submission::new(
                "Book a shipment.",
                shipping_server(&["--era", era, "--ask-forever"]),
            )
            .human_input(HumanInput::Managed)
            .round_limit(2),
        );
        let mut last = None;
        loop {
            let snapshot = handle.snapshot().unwrap();
            if snapshot.lifecycle == ExecutionStatus::Finished {
                break;
            }
            if let Some(pending) = handle.pending_elicitation().unwrap() {
                handle
                    .respond_elicitation(&pending.round_id, address(), &pending.round_id)
                    .unwrap();
                last = Some(pending.round_id);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let result = finished(&handle);
        assert_eq!(
            failure(&result).code,
            Some(FailureCode::RoundLimitExceeded),
            "{era}"
        );
        assert_eq!(
            round_failure(&db, &last.unwrap()),
            FailureCode::RoundLimitExceeded,
            "{era}: the last delivered round"
        );
    }
}

/// A child process sees exactly the kit's `env` plus its binding's `env`.
#[test]
fn the_server_sees_only_the_environment_it_is_given() {
    let db = TempDb::new();
    let store = Arc::new(SqliteExecutionStore::open(&db.path).unwrap());
    let kit = McpTestKit::new(store, [("M3_KIT_VALUE", "from-kit")]).unwrap();
    let agent = kit
        .agents([AgentSpec::scripted(Script::call(
            "shipping:report_env",
            json!({}),
        ))])
        .unwrap()
        .remove(0);
    let handle = agent
        .submit(
            Submission::new(
                "Report the environment.",
                shipping_server(&["--report-env"]).env("M3_BINDING_VALUE", "from-binding"),
            )
            .tools(["shipping:report_env"]),
        )
        .unwrap();
    let result = finished(&handle);
    assert!(result.succeeded(), "{}", result.outcome);
    let env: BTreeMap<String, String> =
        serde_json::from_str(&result.outcome.tool_results[0].text()).unwrap();
    assert_eq!(
        env,
        BTreeMap::from([
            ("M3_BINDING_VALUE".to_string(), "from-binding".to_string()),
            ("M3_KIT_VALUE".to_string(), "from-kit".to_string()),
        ])
    );
}

/// Human input `fail` without a plan: the kit answers `cancel`, the round fails with
/// `elicitation_unhandled`, the execution fails. With a plan, the plan answers.
#[test]
fn fail_mode_declines_and_a_plan_answers() {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db);
    let handle = submit(&kit, shipping_server(&[]), HumanInput::Fail);
    let result = finished(&handle);
    assert_eq!(
        failure(&result).code,
        Some(FailureCode::ElicitationUnhandled)
    );
    let rounds = db
        .store()
        .list_rounds(&RoundFilter {
            execution_id: Some(handle.execution_id().to_string()),
            ..RoundFilter::default()
        })
        .unwrap();
    assert_eq!(rounds.len(), 1, "the round is recorded");
    assert_eq!(
        rounds[0].failure.as_ref().unwrap().code,
        FailureCode::ElicitationUnhandled
    );

    let plan = vec![PlanEntry {
        matcher: PlanMatch {
            request_key: Some("shipping_address".into()),
            ..PlanMatch::default()
        },
        response: ElicitationResponse::accept(json!({"street": "2 Plan Road", "city": "Pune"})),
    }];
    let agent = kit
        .agents([AgentSpec::scripted(booking_script()).with_plan(plan)])
        .unwrap()
        .remove(0);
    let handle = agent
        .submit(
            Submission::new("Book a shipment.", shipping_server(&[]))
                .tools(["shipping:book_shipment"]),
        )
        .unwrap();
    let result = finished(&handle);
    assert!(result.succeeded(), "{}", result.outcome);
    assert!(
        result.outcome.tool_results[0]
            .text()
            .contains("2 Plan Road")
    );
}

/// Submissions that cannot run are refused with `ModelValidationError` and store nothing.
#[test]
fn submissions_that_cannot_run_are_refused() {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db);
    let refused = |agent: AgentSpec, submission: Submission| {
        let agent = kit.agents([agent]).unwrap().remove(0);
        match agent.submit(submission) {
            Err(ExecutionError::ModelValidation(e)) => e.message,
            other => panic!("expected ModelValidationError, got {other:?}"),
        }
    };
    let base = || Submission::new("Book.", shipping_server(&[]));
    // Managed with a plan (even an empty one).
    refused(
        AgentSpec::scripted(booking_script()).with_plan(vec![]),
        base()
            .tools(["shipping:book_shipment"])
            .human_input(HumanInput::Managed),
    );
    // Malformed allow-list entries, and a tool of another server.
    for tools in [&["book_shipment"][..], &["billing:charge"], &["shipping:"]] {
        refused(
            AgentSpec::scripted(booking_script()),
            base().tools(tools.iter().copied()),
        );
    }
    // A script step outside the allow-list.
    let message = refused(
        AgentSpec::scripted(Script::call("shipping:cancel_everything", json!({}))),
        base().tools(["shipping:book_shipment"]),
    );
    assert!(message.contains("allow-list"), "{message}");
    // Managed with a store that cannot resolve a managed-input store.
    let memory = McpTestKit::new(
        Arc::new(InMemoryExecutionStore::default()),
        BTreeMap::<String, String>::new(),
    )
    .unwrap();
    let agent = memory
        .agents([AgentSpec::scripted(booking_script())])
        .unwrap()
        .remove(0);
    assert!(matches!(
        agent.submit(
            base()
                .tools(["shipping:book_shipment"])
                .human_input(HumanInput::Managed)
        ),
        Err(ExecutionError::ModelValidation(_))
    ));
    // The scripted harness has no models.
    assert!(
        kit.agents([AgentSpec {
            models: vec!["gpt".into()],
            ..AgentSpec::scripted(booking_script())
        }])
        .is_err()
    );
    // Nothing was stored.
    assert!(
        db.store()
            .list_rounds(&RoundFilter::default())
            .unwrap()
            .is_empty()
    );
}

/// A stdio binding the operating system cannot pass to a program (a NUL byte in an argument or
/// in an environment value, a variable without a name) is a `ModelValidationError` at
/// submission naming the argument's position or the variable's name, never its text, and
/// nothing is stored; it used to be accepted and to fail only when the server was started.
#[test]
fn stdio_bindings_the_os_cannot_pass_are_refused_at_submission() {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db);
    let secret = "sk-live-SECRET123";
    let cases = [
        (
            shipping_server(&[]).args(["--era".to_string(), format!("{secret}\0")]),
            "argument 2 holds a NUL byte",
        ),
        (
            shipping_server(&[]).env("API_KEY", format!("{secret}\0x")),
            "environment variable `API_KEY` holds a NUL byte",
        ),
        (
            shipping_server(&[]).env("", secret),
            "name is empty or holds `=` or a NUL byte",
        ),
        (
            shipping_server(&[]).env("A=B", secret),
            "name is empty or holds `=` or a NUL byte",
        ),
        (
            shipping_server(&[]).env("BIG", "x".repeat(128 * 1024)),
            "more than the 131071",
        ),
        (
            (0..=StdioServer::MAX_ENV_VARS)
                .fold(shipping_server(&[]), |s, i| s.env(format!("V{i}"), "1")),
            "1025 environment variables, more than the 1024",
        ),
    ];
    for (server, expected) in cases {
        let submission = Submission::new("Book.", server)
            .tools(["shipping:book_shipment"])
            .human_input(HumanInput::Managed);
        let agent = kit
            .agents([AgentSpec::scripted(booking_script())])
            .unwrap()
            .remove(0);
        match agent.submit(submission) {
            Err(ExecutionError::ModelValidation(e)) => {
                assert!(e.message.contains(expected), "{expected:?} in {e}");
                assert!(!e.message.contains(secret), "{e}");
            }
            other => panic!("expected ModelValidationError ({expected}), got {other:?}"),
        }
    }
    assert!(
        db.store()
            .list_rounds(&RoundFilter::default())
            .unwrap()
            .is_empty()
    );
    assert!(kit_executions_empty(&db));
}

/// Whether the database holds no execution.
fn kit_executions_empty(db: &TempDb) -> bool {
    SqliteExecutionStore::open(&db.path)
        .unwrap()
        .executions()
        .unwrap()
        .states(None)
        .unwrap()
        .is_empty()
}

/// `fail` mode runs with an in-memory store too.
#[test]
fn an_in_memory_store_runs_fail_mode_executions() {
    let kit = McpTestKit::new(
        Arc::new(InMemoryExecutionStore::default()),
        BTreeMap::<String, String>::new(),
    )
    .unwrap();
    let handle = submit(&kit, shipping_server(&[]), HumanInput::Fail);
    let result = finished(&handle);
    assert_eq!(
        failure(&result).code,
        Some(FailureCode::ElicitationUnhandled)
    );
}

/// `result(timeout)` raises `OperationTimeout` when the wait runs out.
#[test]
fn result_times_out_while_the_round_waits() {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db);
    let handle = submit(&kit, shipping_server(&[]), HumanInput::Managed);
    wait_pending(&handle);
    let err = handle.result(Some(Duration::from_millis(200))).unwrap_err();
    assert!(matches!(err, ExecutionError::OperationTimeout(_)), "{err}");
    assert_eq!(
        handle.snapshot().unwrap().lifecycle,
        ExecutionStatus::WaitingForInput
    );
    handle.cancel().unwrap();
    assert_eq!(finished(&handle).outcome.kind, OutcomeKind::Cancelled);
}

/// A worker process killed with SIGKILL while it owns a pending round: once its lease expires,
/// recovery (a new kit's start-up) fails the round with `recovery_unavailable`, finishes the
/// execution failed, and a late answer is refused. A live worker's round is left alone.
#[test]
fn a_killed_worker_s_round_is_recovered_and_a_live_one_is_not() {
    let db = TempDb::new();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_m3-test-fault-worker"))
        .args(["kit", db.path.to_str().unwrap(), "800", SHIPPING_SERVER])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    let mut words = line.split_whitespace().skip(1);
    let (round_id, execution_id) = (
        words.next().unwrap().to_string(),
        words.next().unwrap().to_string(),
    );

    // A live worker in this process, with a pending round of its own.
    let (_store, live_kit) = kit_on(&db);
    let live = submit(&live_kit, shipping_server(&[]), HumanInput::Managed);
    let live_round = wait_pending(&live);

    // While the killed worker's lease is live, recovery leaves its round alone too.
    assert_eq!(live_kit.recover().unwrap().0, 0);

    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1200));

    let (store, recovering) = kit_on(&db);
    let (rounds, executions) = recovering.recover().unwrap();
    assert_eq!((rounds, executions), (1, 1));
    assert_eq!(
        round_failure(&db, &round_id),
        FailureCode::RecoveryUnavailable
    );
    let managed = store.managed_input_store().unwrap().unwrap();
    let late = managed.submit_responses(&round_id, &address(), "late");
    assert_refused(
        late.as_ref(),
        "ManagedInputRecoveryError",
        ErrorCode::RecoveryUnavailable,
    );
    // Through the kit too, matched flatly by its code and kind.
    let late = recovering
        .execution(&execution_id)
        .unwrap()
        .respond_elicitation(&round_id, address(), "late")
        .unwrap_err();
    assert_eq!(
        (late.code(), late.kind_name()),
        ("recovery_unavailable", "ManagedInputRecoveryError"),
        "{late:?}"
    );
    // The execution finished failed, and stays so when reopened.
    drop((recovering, store));
    let reopened = SqliteExecutionStore::open(&db.path).unwrap();
    let state = reopened
        .executions()
        .unwrap()
        .snapshot(&execution_id)
        .unwrap();
    assert_eq!(state.lifecycle, ExecutionStatus::Finished);
    // The live worker's round is untouched and still answerable.
    assert_eq!(
        db.store()
            .get_round(&live_round.round_id)
            .unwrap()
            .unwrap()
            .status,
        ManagedInputStatus::Pending
    );
    live.respond_elicitation(&live_round.round_id, address(), "k")
        .unwrap();
    assert!(finished(&live).succeeded());
}

/// More than one pending round for an execution is a `ManagedInputStateError`; a round of
/// another execution cannot be answered through this handle.
#[test]
fn pending_elicitation_refuses_an_ambiguous_execution() {
    let db = TempDb::new();
    let (executions, kit) = kit_on(&db);
    let handle = submit(&kit, shipping_server(&[]), HumanInput::Managed);
    let pending = wait_pending(&handle);
    let store = db.store();
    let mut extra = address_round("extra-round");
    extra.execution_id = handle.execution_id().to_string();
    store.create_round(&extra).unwrap();
    match handle.pending_elicitation() {
        Err(ExecutionError::ManagedInput(ManagedInputError::State(e))) => {
            assert_eq!(e.code(), ErrorCode::AmbiguousPendingRound)
        }
        other => panic!("expected ManagedInputStateError, got {other:?}"),
    }
    store
        .create_round(&address_round("other-execution"))
        .unwrap();
    match handle.respond_elicitation("other-execution", address(), "k") {
        Err(ExecutionError::ManagedInput(ManagedInputError::State(e))) => {
            assert_eq!(e.code(), ErrorCode::RoundNotFound)
        }
        other => panic!("expected ManagedInputStateError, got {other:?}"),
    }
    assert_eq!(
        store.get_round("other-execution").unwrap().unwrap().status,
        ManagedInputStatus::Pending,
        "nothing was stored"
    );
    // A second worker cannot run it while its worker does.
    let second = m3::testing::run_as_worker(
        &executions.executions().unwrap(),
        handle.execution_id(),
        "second-worker",
    );
    match second {
        Err(ManagedInputError::State(e)) => assert_eq!(e.code(), ErrorCode::ExecutionNotRunnable),
        other => panic!("expected ManagedInputStateError, got {other:?}"),
    }
    // Empty ids are refused by the store's rules.
    assert_execution_refused(
        handle.respond_elicitation("", address(), "k"),
        "ManagedInputValidationError",
        ErrorCode::EmptyRoundId,
    );
    assert_execution_refused(
        handle.respond_elicitation(&pending.round_id, address(), ""),
        "ManagedInputValidationError",
        ErrorCode::EmptyIdempotencyKey,
    );
    handle.cancel().unwrap();
    assert_eq!(finished(&handle).outcome.kind, OutcomeKind::Cancelled);
}

/// A kit on `db` whose leases last 2 s, renewed every 200 ms: short enough to renew many times
/// in a test, long enough that a stalled disk (a second of writeback) does not expire them.
fn kit_renewing_often(db: &TempDb) -> McpTestKit {
    let store = Arc::new(SqliteExecutionStore::open(&db.path).unwrap());
    let options = KitOptions {
        lease_ttl: Duration::from_millis(2_000),
        lease_renew: Duration::from_millis(200),
    };
    McpTestKit::with_options(store, BTreeMap::<String, String>::new(), options).unwrap()
}

/// The worker renews its leases: a round stays answerable well past one lease length.
#[test]
fn the_worker_renews_its_leases_while_the_round_waits() {
    let db = TempDb::new();
    let kit = kit_renewing_often(&db);
    let handle = submit(&kit, shipping_server(&[]), HumanInput::Managed);
    let pending = wait_pending(&handle);
    let first = db.store().get_round(&pending.round_id).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(3_000));
    // Recovery by another kit finds nothing to do: the lease is alive.
    let (_other_store, other) = kit_on(&db);
    assert_eq!(other.recover().unwrap(), (0, 0));
    let later = db.store().get_round(&pending.round_id).unwrap().unwrap();
    assert!(
        later.lease.as_ref().unwrap().expires_at > first.lease.as_ref().unwrap().expires_at,
        "the lease was extended: {:?} -> {:?}",
        first.lease,
        later.lease,
    );
    handle
        .respond_elicitation(&pending.round_id, address(), "k")
        .unwrap();
    assert!(finished(&handle).succeeded());
}

/// A renewal moves the execution row's expiry (and its version) and keeps its document byte for
/// byte: a renewal reads only the document's head and writes only the row's columns. The renewed
/// execution still finishes with everything its document held.
#[test]
fn a_renewal_moves_the_execution_s_expiry_and_keeps_its_document() {
    let db = TempDb::new();
    let kit = kit_renewing_often(&db);
    let handle = submit(&kit, shipping_server(&[]), HumanInput::Managed);
    let pending = wait_pending(&handle);
    let conn = rusqlite::Connection::open(&db.path).unwrap();
    let row = || -> (i64, i64, String) {
        conn.query_row(
            "SELECT version, lease_expires_at_ns, document FROM executions \
             JOIN execution_versions USING (execution_id) WHERE execution_id = ?1",
            [handle.execution_id()],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
    };
    let (version, expires, document) = row();
    let started = Instant::now();
    let (later_version, later_expires, later_document) = loop {
        std::thread::sleep(Duration::from_millis(100));
        let later = row();
        if later.0 >= version + 2 || started.elapsed() > Duration::from_secs(20) {
            break later;
        }
    };
    assert!(
        later_version >= version + 2,
        "renewed at least twice: version {version} -> {later_version}"
    );
    assert!(later_expires > expires, "the expiry moved");
    assert_eq!(later_document, document, "the document is kept as it was");
    handle
        .respond_elicitation(&pending.round_id, address(), "k")
        .unwrap();
    let result = finished(&handle);
    assert!(result.succeeded(), "{:?}", result.outcome);
    assert_eq!(result.outcome.tool_results.len(), 1);
}

/// Once a parked worker's leases have been renewed, the next renewals read nothing and write
/// the two rows' expiries alone: the round's row moves its version and expiry at each renewal
/// while its document stays byte for byte, and the round as read reports the row's expiry.
#[test]
fn a_parked_worker_s_renewals_write_both_expiries_and_keep_both_documents() {
    let db = TempDb::new();
    let kit = kit_renewing_often(&db);
    let handle = submit(&kit, shipping_server(&[]), HumanInput::Managed);
    let pending = wait_pending(&handle);
    let conn = rusqlite::Connection::open(&db.path).unwrap();
    let rows = || -> (i64, i64, String, i64, String) {
        conn.query_row(
            "SELECT rv.version, rv.lease_expires_at_ns, r.document, ev.version, e.document \
             FROM managed_input_rounds r JOIN executions e USING (execution_id) \
             JOIN managed_input_round_versions rv ON rv.round_id = r.round_id \
             JOIN execution_versions ev ON ev.execution_id = e.execution_id \
             WHERE r.round_id = ?1",
            [&pending.round_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap()
    };
    let after_renewals = |from: i64, count: i64| {
        let started = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let now = rows();
            if now.0 >= from + count || started.elapsed() > Duration::from_secs(20) {
                return now;
            }
        }
    };
    // Two renewals: the first one after parking reads the rows; the later ones need not.
    let (version, expires, document, execution_version, execution_document) =
        after_renewals(rows().0, 2);
    let (later_version, later_expires, later_document, later_execution_version, _) =
        after_renewals(version, 3);
    assert!(
        later_version >= version + 3,
        "renewed three more times: version {version} -> {later_version}"
    );
    assert!(later_expires > expires, "the round's expiry moved");
    assert!(later_execution_version >= execution_version + 3);
    assert_eq!(
        later_document, document,
        "the round's document is kept as it was"
    );
    let (.., now_execution_document) = rows();
    assert_eq!(now_execution_document, execution_document);
    let read = db.store().get_round(&pending.round_id).unwrap().unwrap();
    let (_, expires_now, ..) = rows();
    let read_expiry = read.lease.unwrap().expires_at;
    let read_ns = read_expiry.timestamp_nanos_opt().unwrap();
    assert!(
        read_ns >= later_expires && read_ns <= expires_now,
        "the round as read has its row's expiry"
    );
    handle
        .respond_elicitation(&pending.round_id, address(), "k")
        .unwrap();
    let result = finished(&handle);
    assert!(result.succeeded(), "{:?}", result.outcome);
}

/// A parked worker's renewals write the narrow version rows alone (migration 6): from the moment
/// its round is pending, the first renewal (which reads both rows in full, their versions not
/// yet known to it) included, the wide rows of its execution and round, which hold the
/// documents, are not updated at all (a trigger counts every `UPDATE`, whatever it writes),
/// while both version rows move on. Answering the round does update them, so the count can see
/// a write.
#[test]
fn a_parked_worker_s_renewals_leave_the_wide_rows_unwritten() {
    let db = TempDb::new();
    let kit = kit_renewing_often(&db);
    let handle = submit(&kit, shipping_server(&[]), HumanInput::Managed);
    let pending = wait_pending(&handle);
    let conn = rusqlite::Connection::open(&db.path).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    let versions = || -> (i64, i64) {
        conn.query_row(
            "SELECT rv.version, ev.version FROM managed_input_round_versions rv \
             JOIN execution_versions ev USING (execution_id) WHERE rv.round_id = ?1",
            [&pending.round_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    };
    let after_renewals = |from: (i64, i64), count: i64| {
        let started = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let now = versions();
            let renewed = now.0 >= from.0 + count && now.1 >= from.1 + count;
            if renewed || started.elapsed() > Duration::from_secs(20) {
                return now;
            }
        }
    };
    conn.execute_batch(
        "CREATE TABLE wide_row_updates (what TEXT NOT NULL);
         CREATE TRIGGER count_round_updates AFTER UPDATE ON managed_input_rounds
             BEGIN INSERT INTO wide_row_updates VALUES ('round'); END;
         CREATE TRIGGER count_execution_updates AFTER UPDATE ON executions
             BEGIN INSERT INTO wide_row_updates VALUES ('execution'); END;",
    )
    .unwrap();
    let updates = || -> i64 {
        conn.query_row("SELECT count(*) FROM wide_row_updates", [], |r| r.get(0))
            .unwrap()
    };
    let settled = versions();
    let later = after_renewals(settled, 3);
    assert!(
        later.0 >= settled.0 + 3 && later.1 >= settled.1 + 3,
        "both version rows renewed three times: {settled:?} -> {later:?}"
    );
    assert_eq!(updates(), 0, "renewals wrote a wide row");
    handle
        .respond_elicitation(&pending.round_id, address(), "k")
        .unwrap();
    let result = finished(&handle);
    assert!(result.succeeded(), "{:?}", result.outcome);
    assert!(
        updates() > 0,
        "answering and finishing update the wide rows"
    );
}

/// The leases of parked workers are renewed by the kit together, in one write transaction
/// (their renewals fall into step within a period or two): the rounds of four executions
/// waiting for their answers end up with leases expiring at the very same instant, the `now`
/// of the transaction that renewed them all, and stay alive past one lease length.
#[test]
fn the_leases_of_parked_workers_are_renewed_together_in_one_transaction() {
    let db = TempDb::new();
    let kit = kit_renewing_often(&db);
    let handles: Vec<_> = (0..4)
        .map(|_| submit(&kit, shipping_server(&[]), HumanInput::Managed))
        .collect();
    let pending: Vec<_> = handles.iter().map(wait_pending).collect();
    // All four rounds read in one read transaction (one listing), never across a renewal.
    let expiries = |db: &TempDb| -> Vec<_> {
        let rounds = db.store().list_rounds(&RoundFilter::default()).unwrap();
        assert_eq!(rounds.len(), 4);
        for round in &rounds {
            assert!(pending.iter().any(|p| p.round_id == round.pending.round_id));
            assert_eq!(
                round.status,
                ManagedInputStatus::Pending,
                "{:?}",
                round.failure
            );
        }
        rounds
            .into_iter()
            .map(|round| round.lease.unwrap().expires_at)
            .collect()
    };
    let first = expiries(&db);
    // Renewals fall into step within a period or two; on a loaded machine a worker that was
    // running (not parked) at a renewal renews by itself once, so look for a while.
    let started = std::time::Instant::now();
    let later = loop {
        std::thread::sleep(Duration::from_millis(200));
        let later = expiries(&db);
        let extended = later.iter().zip(&first).all(|(l, f)| l > f);
        if (extended && later.iter().all(|e| *e == later[0]))
            || started.elapsed() > Duration::from_secs(20)
        {
            break later;
        }
    };
    assert!(
        later.iter().zip(&first).all(|(l, f)| l > f),
        "every lease was extended: {first:?} -> {later:?}"
    );
    assert!(
        later.iter().all(|e| *e == later[0]),
        "the four leases were renewed in one transaction: {later:?}"
    );
    let (_other_store, other) = kit_on(&db);
    assert_eq!(other.recover().unwrap(), (0, 0));
    for (handle, p) in handles.iter().zip(&pending) {
        handle
            .respond_elicitation(&p.round_id, address(), "k")
            .unwrap();
    }
    for handle in &handles {
        assert!(finished(handle).succeeded());
    }
}

/// Dropping the blocking kit cancels its running executions; no child is left behind.
#[test]
fn dropping_the_kit_cancels_its_executions_and_reaps_their_servers() {
    let db = TempDb::new();
    let log = db.dir.path().join("transcript.jsonl");
    let (_store, kit) = kit_on(&db);
    let handle = submit(
        &kit,
        shipping_server(&["--era", "legacy", "--transcript", log.to_str().unwrap()])
            .era(McpEra::Legacy),
        HumanInput::Managed,
    );
    let pending = wait_pending(&handle);
    let execution_id = handle.execution_id().to_string();
    drop(handle);
    drop(kit);
    assert_no_server_left(&db);
    assert_eq!(
        round_failure(&db, &pending.round_id),
        FailureCode::Cancelled
    );
    let reopened = SqliteExecutionStore::open(&db.path).unwrap();
    let state = reopened
        .executions()
        .unwrap()
        .snapshot(&execution_id)
        .unwrap();
    assert_eq!(state.lifecycle, ExecutionStatus::Finished);
}

/// A neighbour holding the database's write lock for longer than the busy timeout (but less
/// than the lease) does not cost a live worker its execution: a renewal the database refused is
/// tried again within the lease, and the round is answered and delivered afterwards.
#[test]
fn a_slow_neighbour_holding_the_write_lock_does_not_cost_a_worker_its_leases() {
    let db = TempDb::new();
    let store = Arc::new(
        SqliteExecutionStore::open_with(
            &db.path,
            StoreOptions {
                busy_timeout_ms: 300,
                ..StoreOptions::default()
            },
        )
        .unwrap(),
    );
    let options = KitOptions {
        lease_ttl: Duration::from_millis(4_000),
        lease_renew: Duration::from_millis(500),
    };
    let kit = McpTestKit::with_options(store, BTreeMap::<String, String>::new(), options).unwrap();
    let handle = submit(&kit, shipping_server(&[]), HumanInput::Managed);
    let pending = wait_pending(&handle);
    let neighbour = rusqlite::Connection::open(&db.path).unwrap();
    neighbour.execute_batch("BEGIN IMMEDIATE").unwrap();
    // Several renewals fall inside the lock, each refused after the 300 ms busy timeout.
    std::thread::sleep(Duration::from_millis(2_000));
    neighbour.execute_batch("COMMIT").unwrap();
    handle
        .respond_elicitation(&pending.round_id, address(), "after-the-lock")
        .unwrap();
    let result = finished(&handle);
    assert!(result.succeeded(), "{}", result.outcome);
    assert_eq!(
        db.store()
            .get_round(&pending.round_id)
            .unwrap()
            .unwrap()
            .status,
        ManagedInputStatus::Resolved
    );
}

/// A server that reads its input and never answers is given up on at start-up, in every era
/// (issue 14): `initialize` in the legacy era, the first `tools/call` when the era is forced
/// modern (no handshake to wait for). Both run at once, so the test takes the 30 s timeout once.
#[test]
fn a_server_that_never_answers_fails_at_the_start_up_timeout_in_both_eras() {
    let silent = |era: McpEra| {
        StdioServer::new("shipping", "/bin/sh")
            .args(["-c", "while read -r line; do :; done"])
            .era(era)
    };
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db);
    let started = Instant::now();
    let handles: Vec<(McpEra, ExecutionHandle)> = [McpEra::Legacy, McpEra::Modern]
        .into_iter()
        .map(|era| (era, submit(&kit, silent(era), HumanInput::Managed)))
        .collect();
    for (era, handle) in &handles {
        let result = finished(handle);
        assert_eq!(result.outcome.kind, OutcomeKind::Failed, "{era:?}");
        let failure = failure(&result);
        assert_eq!(
            failure.code,
            Some(FailureCode::ServerError),
            "{era:?}: {failure:?}"
        );
        let expected = match era {
            McpEra::Modern => "did not answer its first request (`tools/call`) within 30 s",
            _ => "did not answer `initialize` within 30 s",
        };
        assert!(
            failure.message.contains(expected),
            "{era:?}: {}",
            failure.message
        );
        assert!(handle.pending_elicitation().unwrap().is_none());
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(29) && took < Duration::from_secs(58),
        "both gave up at the 30 s start-up timeout, together: {took:?}"
    );
}

/// The answer reaches a real server exactly as it was given (issue 14): a 30-digit integer, a
/// decimal finer than a double, a number past a double's range and one a double makes zero,
/// each in the raw line the server read. The server (Python, legacy era) asks with
/// `elicitation/create` and writes the line that answers it to a file, byte for byte.
#[test]
fn a_server_receives_every_number_exactly_as_it_was_given() {
    const SERVER: &str = r#"
import json, sys
received = sys.argv[1]
schema = {"type": "object", "required": ["n", "x"], "properties": {
    "n": {"type": "integer"}, "x": {"type": "number"},
    "big": {"type": "number"}, "tiny": {"type": "number", "minimum": 0}}}
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
call = None
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        send({"jsonrpc": "2.0", "id": message["id"], "result": {
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "numbers", "version": "1"}}})
    elif message.get("method") == "tools/call":
        call = message["id"]
        send({"jsonrpc": "2.0", "id": "ask-1", "method": "elicitation/create", "params": {
            "mode": "form", "message": "Numbers?", "requestedSchema": schema,
            "_meta": {"m3/request_key": "numbers"}}})
    elif message.get("id") == "ask-1" and "method" not in message:
        with open(received, "w") as f:
            f.write(line)
        send({"jsonrpc": "2.0", "id": call, "result": {
            "content": [{"type": "text", "text": "received"}]}})
"#;
    let python = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 runs");
    let python = String::from_utf8(python.stdout).unwrap().trim().to_string();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("numbers_server.py");
    std::fs::write(&script, SERVER).unwrap();
    let received = dir.path().join("received.jsonl");
    let server = StdioServer::new("shipping", &python)
        .args([script.to_str().unwrap(), received.to_str().unwrap()])
        .era(McpEra::Legacy);
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db);
    let handle = submit(&kit, server, HumanInput::Managed);
    let pending = wait_pending(&handle);
    // Answered as raw text through another store object (as `m3 respond` does).
    let answer = r#"{"numbers":{"action":"accept","content":{"n":123456789012345678901234567890,"x":0.1000000000000000055511151231257827,"big":1e400,"tiny":1e-400}}}"#;
    db.store()
        .submit_responses_json(&pending.round_id, answer, "numbers-1")
        .unwrap();
    let result = finished(&handle);
    assert!(result.succeeded(), "{}", result.outcome);
    let line = std::fs::read_to_string(&received).expect("the server wrote what it received");
    for exact in [
        r#""n":123456789012345678901234567890"#,
        r#""x":0.1000000000000000055511151231257827"#,
        // The same number; serde_json writes an unsigned exponent with `+`.
        r#""big":1e+400"#,
        r#""tiny":1e-400"#,
    ] {
        assert!(
            line.contains(exact),
            "{exact} not in the line the server read: {line}"
        );
    }
    assert_eq!(
        db.store()
            .get_round(&pending.round_id)
            .unwrap()
            .unwrap()
            .status,
        ManagedInputStatus::Resolved
    );
}

/// Every error the kit returns is matched flatly by one `code()` and its kind by
/// `kind_name()`, whatever layer raised it: a submission that cannot run, an answer the
/// component refuses, the same key with another answer, an answer after the round ended, a
/// wait that ran out, a closed store, an engine out of its compute budget (a recovery error
/// through the kit: `a_killed_worker_s_round_is_recovered_and_a_live_one_is_not`); `Debug` (what `?` out of `main` prints) is
/// `Kind (code): message`.
#[test]
fn every_kit_error_is_matched_by_one_flat_code() {
    let db = TempDb::new();
    let (store, kit) = kit_on(&db);
    let check = |error: ExecutionError, code: &str, kind: &str| {
        assert_eq!((error.code(), error.kind_name()), (code, kind), "{error}");
        let shown = format!("{error:?}");
        assert!(shown.starts_with(&format!("{kind} ({code}): ")), "{shown}");
    };
    let agent = kit
        .agents([AgentSpec::scripted(booking_script())])
        .unwrap()
        .remove(0);
    let refused = agent
        .submit(Submission::new("Book.", shipping_server(&[])).tools(["not-a-tool"]))
        .unwrap_err();
    check(refused, "invalid_submission", "ModelValidationError");

    let handle = submit(&kit, shipping_server(&[]), HumanInput::Managed);
    let pending = wait_pending(&handle);
    let waited = handle.result(Some(Duration::from_millis(10))).unwrap_err();
    check(waited, "operation_timeout", "OperationTimeout");
    let invalid = BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(serde_json::json!({"street": 1})),
    )]);
    let refused = handle
        .respond_elicitation(&pending.round_id, invalid, "key-1")
        .unwrap_err();
    check(refused, "schema_violation", "ManagedInputValidationError");
    handle
        .respond_elicitation(&pending.round_id, address(), "key-1")
        .unwrap();
    let declined = BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::decline(),
    )]);
    let conflict = handle
        .respond_elicitation(&pending.round_id, declined, "key-1")
        .unwrap_err();
    check(conflict, "idempotency_conflict", "ManagedInputConflict");
    assert!(finished(&handle).succeeded());
    let late = handle
        .respond_elicitation(&pending.round_id, address(), "key-2")
        .unwrap_err();
    check(late, "round_terminal", "ManagedInputStateError");

    store.close();
    let closed = kit
        .agents([AgentSpec::scripted(booking_script())])
        .unwrap()
        .remove(0)
        .submit(
            Submission::new("Book.", shipping_server(&[]))
                .tools(["shipping:book_shipment"])
                .human_input(HumanInput::Managed),
        )
        .unwrap_err();
    check(closed, "store_closed", "StorageError");

    // The engine itself: a component allowed too little computation for any call.
    let starved = SqliteExecutionStore::open_with(
        &db.path,
        StoreOptions {
            guest_limits: GuestLimits {
                compute_budget: 1_000,
                ..GuestLimits::default()
            },
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let engine = McpTestKit::new(Arc::new(starved), BTreeMap::<String, String>::new())
        .and_then(|kit| {
            kit.agents([AgentSpec::scripted(booking_script())])?
                .remove(0)
                .submit(
                    Submission::new("Book.", shipping_server(&[]))
                        .tools(["shipping:book_shipment"])
                        .human_input(HumanInput::Managed),
                )
        })
        .map(|_| ())
        .unwrap_err();
    check(engine, "engine_error", "EngineError");
}

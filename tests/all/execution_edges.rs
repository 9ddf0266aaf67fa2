//! The edges of an execution's life, where an acknowledged answer could be lost: servers that
//! stop waiting (the TypeScript SDK 1.x's request timeout, a Python tool wrapping `ctx.elicit`
//! in a timeout, a server that exits or completes without waiting), deadlines, workers and
//! submitters that die, handles in other processes, programs and directories given as a user
//! gives them, and operations other than tools. Every test runs real child processes on a real
//! SQLite file; the peers are installed on first use from `tests/peers/`.

use anyhow::{Context, Result, ensure};
use m3::*;
use m3_tests::fault_worker::Pending;
use m3_tests::peers::{self, PeerCommand};
use m3_tests::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");
const SECOND_PROCESS: &str = env!("CARGO_BIN_EXE_m3-test-second-process");
const WAIT: Duration = Duration::from_secs(60);

fn address() -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )])
}

fn binding(name: &str, command: &PeerCommand) -> StdioServer {
    StdioServer::new(name, command.program.to_str().expect("UTF-8 program")).args(
        command
            .args
            .iter()
            .map(|a| a.to_str().expect("UTF-8 argument").to_string()),
    )
}

fn kit_on(db: &TempDb, options: KitOptions) -> (Arc<SqliteExecutionStore>, McpTestKit) {
    let store = Arc::new(SqliteExecutionStore::open(&db.path).unwrap());
    let kit = McpTestKit::with_options(store.clone(), BTreeMap::<String, String>::new(), options)
        .unwrap();
    (store, kit)
}

fn submit(kit: &McpTestKit, script: Script, server: StdioServer) -> ExecutionHandle {
    let tools: Vec<String> = script
        .steps
        .iter()
        .filter(|s| matches!(s, ScriptStep::Tool { .. }))
        .map(|s| s.target().to_string())
        .collect();
    let tools = if tools.is_empty() {
        vec![format!("{}:book_shipment", server.name)]
    } else {
        tools
    };
    kit.agents([AgentSpec::scripted(script)])
        .unwrap()
        .remove(0)
        .submit(
            Submission::new("Ask, then act.", server)
                .tools(tools)
                .human_input(HumanInput::Managed),
        )
        .unwrap()
}

/// Every round of the execution, oldest first.
fn rounds_of(db: &TempDb, execution_id: &str) -> Vec<ManagedInputRecord> {
    db.store()
        .list_rounds(&RoundFilter {
            execution_id: Some(execution_id.to_string()),
            status: None,
            limit: None,
        })
        .unwrap()
}

/// Waits until the execution has a round (in any status) and returns the first.
fn first_round(db: &TempDb, execution_id: &str) -> ManagedInputRecord {
    let until = Instant::now() + WAIT;
    loop {
        if let Some(round) = rounds_of(db, execution_id).into_iter().next() {
            return round;
        }
        assert!(Instant::now() < until, "no round within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn result(handle: &ExecutionHandle) -> ExecutionResult {
    handle.result(Some(WAIT)).unwrap()
}

/// The round ended `failed` with `code`; nothing lists it as pending and a later answer is a
/// typed `ManagedInputStateError`, never acknowledged.
fn assert_withdrawn_for_good(
    db: &TempDb,
    handle: &ExecutionHandle,
    round_id: &str,
    code: FailureCode,
    cause: &str,
) {
    let record = db.store().get_round(round_id).unwrap().unwrap();
    assert_eq!(record.status, ManagedInputStatus::Failed, "{record:?}");
    let failure = record.failure.as_ref().expect("a failed round says why");
    assert_eq!(failure.code, code);
    // Ended by the step that ended its wait (its own cause), not by the net that fails whatever
    // a finished execution left open.
    assert!(
        failure.message.contains(cause)
            && !failure
                .message
                .starts_with("the execution ended while this round was open"),
        "{cause:?} expected in {:?}",
        failure.message
    );
    assert_eq!(record.delivery_attempts, 0, "nothing was delivered");
    assert!(handle.pending_elicitation().unwrap().is_none());
    let pending = db
        .store()
        .list_rounds(&RoundFilter {
            execution_id: None,
            status: Some(ManagedInputStatus::Pending),
            limit: None,
        })
        .unwrap();
    assert!(pending.iter().all(|r| r.pending.round_id != round_id));
    match handle.respond_elicitation(round_id, address(), "late") {
        Err(ExecutionError::ManagedInput(ManagedInputError::State(e))) => {
            assert_eq!(e.code(), ErrorCode::RoundTerminal)
        }
        other => panic!("a late answer must be a ManagedInputStateError, got {other:?}"),
    }
}

/// The TypeScript SDK 1.x gives up on its elicitation after its request timeout (60 s by default,
/// one second here) and sends `notifications/cancelled`: the round fails `request_withdrawn` at
/// once, saying so in words, and the execution finishes with the server's own result.
#[test]
fn a_typescript_sdk_server_that_times_out_withdraws_its_round() -> Result<()> {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db, KitOptions::default());
    let server = binding("ts", &peers::withdrawing_server(1_000)?).era(McpEra::Legacy);
    let handle = submit(&kit, Script::call("ts:ask_with_timeout", json!({})), server);
    let round = first_round(&db, handle.execution_id());
    let result = result(&handle);
    assert!(result.succeeded(), "{}", result.outcome);
    let text = result.outcome.tool_results[0].text();
    assert!(
        text.contains("no answer"),
        "the server's own result: {text}"
    );
    let record = db.store().get_round(&round.pending.round_id)?.unwrap();
    let message = &record.failure.as_ref().unwrap().message;
    assert!(
        message.contains("cancelled its elicitation request")
            && message.contains("60 s by default"),
        "{message}"
    );
    assert_withdrawn_for_good(
        &db,
        &handle,
        &round.pending.round_id,
        FailureCode::RequestWithdrawn,
        "cancelled its elicitation request",
    );
    Ok(())
}

/// An answer committed while the server's request runs out its 1.5 s timeout is delivered
/// exactly once, or its round fails `request_withdrawn` with the answer kept and never
/// delivered. Which of the two happens is not forced: the worker notices an answer within
/// milliseconds, so the answer is usually delivered, and this test does not prove that the
/// too-late path (the server withdrew before the worker saw the answer) ever runs:
/// `an_answer_committed_too_late_is_kept_but_never_delivered` forces that one.
#[test]
fn an_answer_racing_the_server_s_timeout_is_delivered_once_or_its_round_says_why() -> Result<()> {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db, KitOptions::default());
    let server = binding("ts", &peers::withdrawing_server(1_500)?).era(McpEra::Legacy);
    let handle = submit(&kit, Script::call("ts:ask_with_timeout", json!({})), server);
    let round = first_round(&db, handle.execution_id());
    // Answered through the store directly, so the worker is not woken in process: it notices
    // through the database, and the server's timeout may come first or not. Either way the
    // answer is delivered once or the round says why.
    let store = db.store();
    store.submit_responses(&round.pending.round_id, &address(), "k")?;
    let result = result(&handle);
    assert!(result.succeeded(), "{}", result.outcome);
    let record = store.get_round(&round.pending.round_id)?.unwrap();
    assert!(record.responses.is_some(), "the answer stays stored");
    match record.status {
        ManagedInputStatus::Resolved => assert_eq!(record.delivery_attempts, 1),
        ManagedInputStatus::Failed => {
            assert_eq!(
                record.failure.map(|f| f.code),
                Some(FailureCode::RequestWithdrawn)
            );
            assert_eq!(record.delivery_attempts, 0);
        }
        other => panic!("the round must end, not stay {other}"),
    }
    Ok(())
}

/// An answer committed too late (after the server withdrew its elicitation, before the worker
/// saw the withdrawal) is kept but never delivered, and its round fails `request_withdrawn`.
/// The path is forced, not raced: the worker runs in a helper process
/// (`m3-test-fault-worker ask`) armed to pause at the fault point `server_output.matched` on
/// the text `notifications/cancelled`, which it reaches once the TypeScript SDK server has given up on its request (its 1 s timeout)
/// and sent `notifications/cancelled`, holding those bytes before the component sees them. Only
/// then is the answer committed, through the store, from this process; the worker is released
/// and the component decides. What only that path produces: the answer stored in a round that
/// failed `request_withdrawn` without a delivery attempt, and a server that never got the answer
/// (its tool's own result says no answer came).
#[test]
fn an_answer_committed_too_late_is_kept_but_never_delivered() -> Result<()> {
    use std::io::BufRead;
    let db = TempDb::new();
    let command = peers::withdrawing_server(1_000)?;
    let pause = tempfile::tempdir()?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_m3-test-fault-worker"))
        .arg("ask")
        .arg(&db.path)
        .arg(&command.program)
        .args(&command.args)
        .env("M3_FAULT_POINT", "server_output.matched")
        .env("M3_FAULT_MATCH", "notifications/cancelled")
        .env("M3_FAULT_PAUSE", pause.path())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting m3-test-fault-worker")?;
    let mut lines = std::io::BufReader::new(child.stdout.take().context("its stdout")?).lines();
    let mut next_line =
        move || -> Result<String> { Ok(lines.next().context("the worker process ended early")??) };
    let Pending {
        round_id,
        execution_id,
    } = Pending::parse(&next_line()?)?;

    // The server withdraws after its timeout; the worker stops holding its withdrawal.
    let until = Instant::now() + WAIT;
    while !pause.path().join("paused").exists() {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the worker process ended ({status}) without pausing at the withdrawal");
        }
        ensure!(
            Instant::now() < until,
            "the worker never paused at the withdrawal"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let store = db.store();
    let before = store.get_round(&round_id)?.context("the round")?;
    ensure!(
        before.status == ManagedInputStatus::Pending && before.responses.is_none(),
        "the component has not seen the withdrawal yet, so the round still waits: {before:?}"
    );
    // Acknowledged: the round is still answerable in the store, which only the component can
    // change, and the component is held.
    store.submit_responses(&round_id, &address(), "too-late")?;
    let answered = store.get_round(&round_id)?.context("the round")?;
    assert_eq!(answered.status, ManagedInputStatus::ResponseValidated);
    assert!(answered.responses.is_some(), "the answer is stored");
    std::fs::write(pause.path().join("resume"), b"")?;

    assert_eq!(next_line()?, "ended Succeeded");
    let status = child.wait()?;
    ensure!(status.success(), "the worker process ended {status}");

    let record = store.get_round(&round_id)?.context("the round")?;
    assert_eq!(record.status, ManagedInputStatus::Failed, "{record:?}");
    let failure = record.failure.as_ref().context("a failed round says why")?;
    assert_eq!(failure.code, FailureCode::RequestWithdrawn);
    assert!(
        failure
            .message
            .contains("cancelled its elicitation request"),
        "failed by the server's withdrawal itself: {}",
        failure.message
    );
    assert!(record.responses.is_some(), "the answer is kept");
    assert_eq!(
        record.delivery_attempts, 0,
        "the answer was never delivered"
    );
    assert!(record.timestamps.delivery_started_at.is_none());
    // The server's own word: its request ended without an answer.
    let (_store, kit) = kit_on(&db, KitOptions::default());
    let ended = kit.execution(&execution_id)?.result(Some(WAIT))?;
    assert!(ended.succeeded(), "{}", ended.outcome);
    let text = ended.outcome.tool_results[0].text();
    assert!(
        text.contains("no answer") && !text.contains("Booked"),
        "the server's own result: {text}"
    );
    Ok(())
}

/// A server that exits while its request is open fails the round with `server_error`; one that
/// completes the call without waiting withdraws it.
#[test]
fn a_server_that_exits_or_does_not_wait_ends_its_round() -> Result<()> {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db, KitOptions::default());
    let command = peers::withdrawing_server(60_000)?;
    let exits = submit(
        &kit,
        Script::call("ts:ask_then_exit", json!({})),
        binding("ts", &command).era(McpEra::Legacy),
    );
    let round = first_round(&db, exits.execution_id());
    let ended = result(&exits);
    assert_eq!(ended.outcome.kind, OutcomeKind::Failed);
    assert_eq!(
        ended.outcome.failure.as_ref().unwrap().kind,
        FailureKind::ServerError
    );
    assert_withdrawn_for_good(
        &db,
        &exits,
        &round.pending.round_id,
        FailureCode::ServerError,
        "the server exited",
    );

    let hasty = submit(
        &kit,
        Script::call("ts:ask_without_waiting", json!({})),
        binding("ts", &command).era(McpEra::Legacy),
    );
    let round = first_round(&db, hasty.execution_id());
    let ended = result(&hasty);
    assert!(ended.succeeded(), "{}", ended.outcome);
    assert_withdrawn_for_good(
        &db,
        &hasty,
        &round.pending.round_id,
        FailureCode::RequestWithdrawn,
        "without waiting for the answer",
    );
    Ok(())
}

/// How the Python SDK's giving up looks on the wire: `notifications/cancelled` for the
/// elicitation (reason "caller cancelled"), then the tool's result.
const PYTHON_WITHDRAWAL: &str = "cancelled its elicitation request";

/// The official Python SDK, a tool wrapping `ctx.elicit` in `asyncio.wait_for`: the round is
/// withdrawn when the server gives up.
#[test]
fn a_python_tool_that_stops_waiting_withdraws_its_round() -> Result<()> {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db, KitOptions::default());
    let server = binding("booking", &peers::booking_server()?).era(McpEra::Legacy);
    let handle = submit(
        &kit,
        Script::call(
            "booking:book_table_quickly",
            json!({"restaurant": "Chez M3"}),
        ),
        server,
    );
    let round = first_round(&db, handle.execution_id());
    let ended = result(&handle);
    assert!(ended.succeeded(), "{}", ended.outcome);
    assert!(ended.outcome.tool_results[0].text().contains("not booked"));
    assert_withdrawn_for_good(
        &db,
        &handle,
        &round.pending.round_id,
        FailureCode::RequestWithdrawn,
        PYTHON_WITHDRAWAL,
    );
    Ok(())
}

/// A round's deadline passing is the specification's `OperationTimeout`: `result()` returns it
/// as an error that carries the execution's result.
#[test]
fn a_passed_deadline_is_an_operation_timeout_carrying_the_result() {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db, KitOptions::default());
    let handle = kit
        .agents([AgentSpec::scripted(Script::call(
            "shipping:book_shipment",
            json!({"item": "book"}),
        ))])
        .unwrap()
        .remove(0)
        .submit(
            Submission::new("Book.", StdioServer::new("shipping", SHIPPING_SERVER))
                .tools(["shipping:book_shipment"])
                .human_input(HumanInput::Managed)
                .round_deadline(Duration::from_millis(300)),
        )
        .unwrap();
    let round = first_round(&db, handle.execution_id());
    match handle.result(Some(WAIT)) {
        Err(ExecutionError::OperationTimeout(timeout)) => {
            assert!(matches!(timeout.cause, TimeoutCause::Deadline(_)));
            let result = timeout.result.expect("the result travels with the error");
            assert!(result.timed_out());
            assert_eq!(
                result.outcome.failure.unwrap().code,
                Some(FailureCode::DeadlineExceeded)
            );
            assert!(timeout.execution_id == handle.execution_id());
        }
        other => panic!("expected OperationTimeout, got {other:?}"),
    }
    let record = db
        .store()
        .get_round(&round.pending.round_id)
        .unwrap()
        .unwrap();
    assert_eq!(
        record.failure.map(|f| f.code),
        Some(FailureCode::DeadlineExceeded)
    );
}

/// A worker process (`m3-test-fault-worker kit`) whose execution waits on a pending round of the
/// shipping server, with leases of `lease`; and that round's id.
fn worker_waiting_on_a_round(db: &TempDb, lease: Duration) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_m3-test-fault-worker"))
        .args([
            "kit",
            db.path.to_str().unwrap(),
            &lease.as_millis().to_string(),
            SHIPPING_SERVER,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let round_id = Pending::read(&mut child).unwrap().round_id;
    (child, round_id)
}

/// A worker killed while its round is pending: another live kit recovers it within two lease
/// periods, with nobody running `recover`. The bound is the documented one, counted from the
/// moment the kill is known: the dead worker's leases were last renewed before it, so they expire
/// within one lease period of it, and the live kit's next recovery pass comes within one more
/// (it runs once per lease period). The only allowance is a quarter of a lease for what a pass
/// and this test's reads take on a loaded machine; the lease is long (4 s) so that a quarter of
/// it is ample, whatever the machine's speed. Recovery never touches a live lease: the round
/// failed only once its lease had expired.
#[test]
fn a_live_kit_recovers_a_killed_worker_s_round_within_two_lease_periods() {
    let db = TempDb::new();
    let lease = Duration::from_secs(4);
    let bound = lease * 2 + lease / 4;
    let (mut child, round_id) = worker_waiting_on_a_round(&db, lease);
    // A live kit on the same database, with the same lease; it touches its store once.
    let (_store, live) = kit_on(
        &db,
        KitOptions {
            lease_ttl: lease,
            lease_renew: lease / 4,
        },
    );
    assert_eq!(live.recover().unwrap(), (0, 0), "the worker is still alive");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let killed = Instant::now();
    let store = db.store();
    // The round and its execution carry leases renewed together but stored apart, so one pass
    // may fail the round and the next the execution: both must be done within the bound.
    let (recovered, execution) = loop {
        let record = store.get_round(&round_id).unwrap().unwrap();
        let execution = live.execution(&record.pending.execution_id).unwrap();
        if record.status == ManagedInputStatus::Failed
            && execution.snapshot().unwrap().lifecycle == ExecutionStatus::Finished
        {
            break (record, execution);
        }
        assert!(
            killed.elapsed() <= bound,
            "not recovered within two lease periods ({bound:?}, a quarter of a lease for the \
             passes themselves) after the kill: {:?}, round {:?}",
            killed.elapsed(),
            record.status
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    println!(
        "recovered {:?} after the kill (bound {bound:?})",
        killed.elapsed()
    );
    let expired_at = recovered
        .lease
        .as_ref()
        .expect("the round kept its lease")
        .expires_at;
    let failed_at = recovered
        .timestamps
        .failed_at
        .expect("a failed round says when");
    assert!(
        failed_at >= expired_at,
        "recovery failed the round {:?} before its lease expired",
        expired_at - failed_at
    );
    assert_eq!(
        recovered.failure.map(|f| f.code),
        Some(FailureCode::RecoveryUnavailable)
    );
    let outcome = execution
        .snapshot()
        .unwrap()
        .outcome
        .expect("a finished execution has an outcome");
    assert_eq!(
        outcome.failure.and_then(|f| f.code),
        Some(FailureCode::RecoveryUnavailable)
    );
    assert_execution_refused(
        execution.respond_elicitation(&round_id, address(), "late"),
        "ManagedInputRecoveryError",
        ErrorCode::RecoveryUnavailable,
    );
}

/// An execution whose submitter died before a worker claimed it (queued, held by the submitter's
/// lease) is finished failed by recovery, not left queued for ever.
#[test]
fn a_queued_execution_whose_submitter_died_is_recovered() {
    let db = TempDb::new();
    // Stored as a submitter would, and never run: the submitter "dies" here (its kit is
    // dropped with the execution still queued).
    let queued = {
        let (_store, submitter) = kit_on(
            &db,
            KitOptions {
                lease_ttl: Duration::from_secs(3),
                lease_renew: Duration::from_secs(1),
            },
        );
        let agent = submitter
            .agents([AgentSpec::scripted(Script::call(
                "shipping:book_shipment",
                json!({"item": "book"}),
            ))])
            .unwrap()
            .remove(0);
        m3::testing::submit_without_running(
            &agent,
            Submission::new("Book.", StdioServer::new("shipping", SHIPPING_SERVER))
                .tools(["shipping:book_shipment"])
                .human_input(HumanInput::Managed),
        )
        .unwrap()
    };
    let (_store, kit) = kit_on(&db, KitOptions::default());
    assert_eq!(
        kit.recover().unwrap(),
        (0, 0),
        "a submitter's live hold is left alone"
    );
    std::thread::sleep(Duration::from_millis(3_100));
    assert_eq!(kit.recover().unwrap(), (0, 1));
    let handle = kit.execution(&queued).unwrap();
    let result = handle.result(Some(WAIT)).unwrap();
    let failure = result.outcome.failure.unwrap();
    assert_eq!(failure.code, Some(FailureCode::RecoveryUnavailable));
    assert!(failure.message.contains("submitted"), "{}", failure.message);
}

/// A handle attached from a second process reads, answers and waits for an execution this
/// process submitted; a finished execution reopened by id returns its stored result.
#[test]
fn a_handle_attached_from_another_process_answers_and_waits() {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db, KitOptions::default());
    let handle = submit(
        &kit,
        Script::call("shipping:book_shipment", json!({"item": "book"})),
        StdioServer::new("shipping", SHIPPING_SERVER),
    );
    let second = Command::new(SECOND_PROCESS)
        .args(["attach", db.path.to_str().unwrap(), handle.execution_id()])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&second.stdout);
    assert!(second.status.success(), "{out}");
    let mut lines = out.lines();
    assert!(lines.next().unwrap().starts_with("answered "), "{out}");
    assert_eq!(
        lines.next().unwrap(),
        "result succeeded Booked shipment to 1 Main Street, Pune"
    );
    let mine = result(&handle);
    assert!(mine.succeeded());
    drop(kit);

    // Reopened by id in a fresh kit (and in another process): the stored result.
    let (_store, reopened) = kit_on(&db, KitOptions::default());
    let again = reopened
        .execution(handle.execution_id())
        .unwrap()
        .result(Some(WAIT))
        .unwrap();
    assert_eq!(again, mine);
    let second = Command::new(SECOND_PROCESS)
        .args(["result", db.path.to_str().unwrap(), handle.execution_id()])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&second.stdout).trim(),
        "result succeeded Booked shipment to 1 Main Street, Pune"
    );
    match reopened.execution("exec-0000") {
        Err(ExecutionError::ManagedInput(ManagedInputError::State(e))) => {
            assert_eq!(e.code(), ErrorCode::ExecutionNotFound)
        }
        other => panic!("expected execution_not_found, got {other:?}"),
    }
}

/// Programs and working directories resolve as a subprocess API resolves them, at submission:
/// a relative command against the caller's directory, an absolute working directory as given,
/// a bare name in the given `PATH` or else the host's; anything missing is a
/// `ModelValidationError` and nothing is stored.
#[test]
fn programs_and_directories_resolve_as_given_and_missing_ones_are_refused() -> Result<()> {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db, KitOptions::default());
    let workdir = db.dir.path().join("server-home");
    std::fs::create_dir(&workdir)?;
    // A relative path to the server, from this process's working directory.
    let cwd = std::env::current_dir()?;
    let relative = pathdiff(std::path::Path::new(SHIPPING_SERVER), &cwd)
        .context("the server binary is reachable by a relative path")?;
    ensure!(relative.starts_with("..") || !relative.is_absolute());
    let server = StdioServer::new("shipping", relative.display().to_string())
        .args(["--report-env"])
        .cwd(workdir.display().to_string());
    let agent = kit
        .agents([AgentSpec::scripted(Script::call(
            "shipping:report_env",
            json!({}),
        ))])?
        .remove(0);
    let handle = agent.submit(
        Submission::new("Report.", server)
            .tools(["shipping:report_env"])
            .human_input(HumanInput::Managed),
    )?;
    let ended = result(&handle);
    assert!(ended.succeeded(), "{}", ended.outcome);
    assert_eq!(
        ended.outcome.tool_results[0].result["structuredContent"]["env"],
        json!({}),
        "the child's environment stays exactly what it was given"
    );

    for (command, dir) in [
        ("./no/such/program", None),
        ("no-such-program-anywhere", None),
        (SHIPPING_SERVER, Some("/no/such/directory")),
    ] {
        let mut server = StdioServer::new("shipping", command);
        server.cwd = dir.map(str::to_string);
        let refused = kit
            .agents([AgentSpec::scripted(Script::call(
                "shipping:book_shipment",
                json!({}),
            ))])?
            .remove(0)
            .submit(Submission::new("Book.", server).tools(["shipping:book_shipment"]));
        match refused {
            Err(ExecutionError::ModelValidation(e)) => {
                assert!(
                    e.message.contains(command) || dir.is_some_and(|d| e.message.contains(d)),
                    "{e}"
                )
            }
            other => panic!("expected ModelValidationError, got {other:?}"),
        }
    }
    let stored = store_executions(&db);
    assert_eq!(stored, 1, "refused submissions store nothing");
    Ok(())
}

fn store_executions(db: &TempDb) -> usize {
    SqliteExecutionStore::open(&db.path)
        .unwrap()
        .executions()
        .unwrap()
        .states(None)
        .unwrap()
        .len()
}

/// `path` relative to `base` (both absolute).
fn pathdiff(path: &std::path::Path, base: &std::path::Path) -> Option<std::path::PathBuf> {
    let path: Vec<_> = path.components().collect();
    let base: Vec<_> = base.components().collect();
    let common = path.iter().zip(&base).take_while(|(a, b)| a == b).count();
    if common == 0 {
        return None;
    }
    let mut out = std::path::PathBuf::new();
    for _ in common..base.len() {
        out.push("..");
    }
    for c in &path[common..] {
        out.push(c.as_os_str());
    }
    Some(out)
}

/// Prompts and resources are operations too: a server that elicits while serving them produces
/// rounds of kind `prompt` and `resource`, delivered once and resolved, in both eras.
#[test]
fn prompts_and_resources_elicit_rounds_of_their_kind_in_both_eras() {
    for era in ["legacy", "modern"] {
        let db = TempDb::new();
        let (_store, kit) = kit_on(&db, KitOptions::default());
        let script = Script::default()
            .then_prompt("shipping:shipping_label", json!({"item": "book"}))
            .then_resource("shipping:shipping://quote");
        let handle = submit(
            &kit,
            script,
            StdioServer::new("shipping", SHIPPING_SERVER).args(["--era", era]),
        );
        let mut answered = Vec::new();
        let until = Instant::now() + WAIT;
        while answered.len() < 2 {
            if let Some(pending) = handle.pending_elicitation().unwrap()
                && !answered.contains(&pending.round_id)
            {
                handle
                    .respond_elicitation(&pending.round_id, address(), &pending.round_id)
                    .unwrap();
                answered.push(pending.round_id);
            }
            assert!(Instant::now() < until, "{era}: rounds did not appear");
            std::thread::sleep(Duration::from_millis(10));
        }
        let ended = result(&handle);
        assert!(ended.succeeded(), "{era}: {}", ended.outcome);
        let kinds: Vec<_> = ended.outcome.tool_results.iter().map(|t| t.kind).collect();
        assert_eq!(kinds, [OperationKind::Prompt, OperationKind::Resource]);
        assert_eq!(
            ended.outcome.tool_results[0].text(),
            "Shipping label: book to 1 Main Street, Pune"
        );
        assert_eq!(
            ended.outcome.tool_results[1].text(),
            "Delivery to Pune: 12.50 EUR"
        );
        let rounds = rounds_of(&db, handle.execution_id());
        let seen: Vec<_> = rounds
            .iter()
            .map(|r| {
                (
                    r.pending.operation_kind,
                    r.pending.operation_name.as_str(),
                    r.status,
                    r.delivery_attempts,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (
                    OperationKind::Prompt,
                    "shipping_label",
                    ManagedInputStatus::Resolved,
                    1
                ),
                (
                    OperationKind::Resource,
                    "shipping://quote",
                    ManagedInputStatus::Resolved,
                    1
                ),
            ],
            "{era}"
        );
    }
}

/// A worker that stands still past its execution's lease (SIGSTOP) cannot carry on when it
/// wakes: its renewal and its outcome are refused like a round's (the lease expired), and the
/// execution and its round end failed `recovery_unavailable`, whoever notices first (the worker
/// itself or its kit's recovery). Nothing is left answerable.
#[test]
fn a_worker_frozen_past_its_lease_cannot_carry_on() {
    let db = TempDb::new();
    let lease = Duration::from_millis(500);
    let (mut child, round_id) = worker_waiting_on_a_round(&db, lease);
    let pid = child.id().to_string();
    let signal = |name: &str| {
        assert!(
            Command::new("kill")
                .args([name, &pid])
                .status()
                .unwrap()
                .success()
        )
    };
    signal("-STOP");
    let store = db.store();
    // Frozen: its leases run out while nobody recovers (no other kit is open).
    let frozen_at = Instant::now();
    while frozen_at.elapsed() < lease * 3 {
        std::thread::sleep(lease / 4);
    }
    let before = store.get_round(&round_id).unwrap().unwrap();
    assert_eq!(before.status, ManagedInputStatus::Pending);
    assert!(before.lease.unwrap().expires_at < chrono::Utc::now());
    signal("-CONT");
    let woke = Instant::now();
    let execution_id = before.pending.execution_id.clone();
    let failed = loop {
        let record = store.get_round(&round_id).unwrap().unwrap();
        let state = m3::testing::execution_state(
            &SqliteExecutionStore::open(&db.path).unwrap(),
            &execution_id,
        )
        .unwrap();
        if record.status == ManagedInputStatus::Failed
            && state.lifecycle == ExecutionStatus::Finished
        {
            break (record, state);
        }
        assert!(
            woke.elapsed() < Duration::from_secs(30),
            "the woken worker left round {:?} and execution {:?}",
            record.status,
            state.lifecycle
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        failed.0.failure.map(|f| f.code),
        Some(FailureCode::RecoveryUnavailable)
    );
    let outcome = failed.1.outcome.expect("finished");
    assert_eq!(
        outcome.failure.and_then(|f| f.code),
        Some(FailureCode::RecoveryUnavailable)
    );
    assert_refused(
        store
            .submit_responses(&round_id, &address(), "late")
            .as_ref(),
        "ManagedInputRecoveryError",
        ErrorCode::RecoveryUnavailable,
    );
}

/// The bundled server's sealed `requestState` lives at least as long as a round waits by
/// default (24 hours): an answer given in time is never refused for an expired state. Both
/// sides are read from a real round: its stored deadline and the expiry the server sealed.
#[test]
fn the_bundled_server_s_request_state_outlives_the_default_round_deadline() {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db, KitOptions::default());
    let handle = submit(
        &kit,
        Script::call("shipping:book_shipment", json!({"item": "book"})),
        StdioServer::new("shipping", SHIPPING_SERVER)
            .args(["--era", "modern"])
            .era(McpEra::Modern),
    );
    let round = first_round(&db, handle.execution_id());
    let deadline = round.pending.deadline.expect("a default deadline");
    assert!(
        deadline - round.pending.created_at >= chrono::Duration::hours(24),
        "the default deadline is 24 hours"
    );
    let state = round
        .pending
        .request_state
        .expect("a modern round keeps its state");
    // `v1.<round>.<expiry ms since the epoch>.<tag>` (examples/shipping-server/src/seal.rs).
    let expiry_ms: i64 = state
        .split('.')
        .nth(2)
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("not a sealed state: {state}"));
    assert!(
        expiry_ms >= deadline.timestamp_millis(),
        "the state expires at {expiry_ms} ms, before the round's deadline {deadline}"
    );
    handle.cancel().unwrap();
}

/// The modern era (2026-07-28): the server asked with an `input_required` result and keeps no
/// request open, so the only way it stops waiting is to go away. A server that dies while its
/// round waits fails the round `server_error` at once (not at the deadline, not at recovery),
/// and a later answer is refused, never acknowledged.
#[test]
fn a_modern_server_that_dies_while_its_round_waits_ends_the_round() {
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db, KitOptions::default());
    let pid_file = db.dir.path().join("server.pid");
    let server = StdioServer::new("shipping", "/bin/sh")
        .args([
            "-c".to_string(),
            format!(
                "echo $$ > {}; exec {SHIPPING_SERVER} --era modern",
                pid_file.display()
            ),
        ])
        .era(McpEra::Modern);
    let handle = submit(
        &kit,
        Script::call("shipping:book_shipment", json!({"item": "book"})),
        server,
    );
    let round = first_round(&db, handle.execution_id());
    assert_eq!(round.status, ManagedInputStatus::Pending);
    assert!(round.pending.request_state.is_some(), "a modern round");
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let killed = Command::new("kill")
        .args(["-KILL", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success(), "the server was running");
    let ended = result(&handle);
    assert_eq!(ended.outcome.kind, OutcomeKind::Failed, "{}", ended.outcome);
    assert_eq!(
        ended.outcome.failure.as_ref().unwrap().kind,
        FailureKind::ServerError
    );
    assert_withdrawn_for_good(
        &db,
        &handle,
        &round.pending.round_id,
        FailureCode::ServerError,
        "while the round was open",
    );
}

/// A legacy-era server that asks for a long note and then never reads its input again (it
/// sleeps, its stdin and stdout still open): the answer's delivery fills its socket and makes no
/// progress, and the worker, instead of waiting in that write for ever (deaf to deadlines and
/// cancels), fails the round and the execution `server_error` within seconds, saying the server
/// stopped reading. The answer is delivered at most once: never whole, never again.
#[test]
fn an_answer_to_a_server_that_stopped_reading_fails_its_round_instead_of_hanging() {
    const DEAF_SERVER: &str = r#"
import json, sys, time
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    message = json.loads(line)
    method = message.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": message["id"], "result": {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "deaf", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": [
            {"name": "take_note", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": "ask-1", "method": "elicitation/create", "params": {
            "message": "A long note, please",
            "requestedSchema": {"type": "object", "properties": {"note": {"type": "string"}},
                                "required": ["note"]}}})
        time.sleep(600)
"#;
    let db = TempDb::new();
    let (_store, kit) = kit_on(&db, KitOptions::default());
    let python = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("python3"))
        .find(|candidate| candidate.is_file())
        .expect("python3 on the PATH");
    let server = StdioServer::new("deaf", python.to_str().expect("UTF-8 path"))
        .args(["-c", DEAF_SERVER])
        .era(McpEra::Legacy);
    let handle = submit(&kit, Script::call("deaf:take_note", json!({})), server);
    let round = first_round(&db, handle.execution_id());
    assert_eq!(round.status, ManagedInputStatus::Pending, "{round:?}");
    let key = round.pending.requests.keys().next().unwrap().clone();
    // Larger than the socket's buffers, within the answer's size limit.
    let note = "n".repeat(900 * 1024);
    handle
        .respond_elicitation(
            &round.pending.round_id,
            BTreeMap::from([(key, ElicitationResponse::accept(json!({ "note": note })))]),
            "deaf-1",
        )
        .unwrap();
    // Within `result`'s wait, far short of the round's deadline (24 hours) that was all that
    // ended it before.
    let ended = result(&handle);
    assert_eq!(ended.outcome.kind, OutcomeKind::Failed, "{}", ended.outcome);
    let failure = ended.outcome.failure.as_ref().unwrap();
    assert_eq!(failure.kind, FailureKind::ServerError, "{}", ended.outcome);
    assert!(
        failure.message.contains("stopped reading its input"),
        "{}",
        failure.message
    );
    let record = db
        .store()
        .get_round(&round.pending.round_id)
        .unwrap()
        .unwrap();
    assert_eq!(record.status, ManagedInputStatus::Failed, "{record:?}");
    assert!(
        handle.pending_elicitation().unwrap().is_none(),
        "nothing is left to answer"
    );
}

//! What crosses the network for a server reached over HTTP: the component may send requests to
//! the server's origin alone (the host refuses every other destination, redirects included, and
//! the refusal fails the execution where everyone can see it), and the binding's headers reach
//! that origin without ever being stored. A witness server on loopback records what arrives.

use anyhow::{Context, Result, ensure};
use m3::*;
use m3_tests::TempDb;
use m3_tests::http_probe::{Answer, HttpProbe, Then, release, release_key};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A kit over a fresh database, with an empty environment.
fn kit(db: &TempDb) -> Result<(Arc<SqliteExecutionStore>, McpTestKit)> {
    let store = Arc::new(SqliteExecutionStore::open(&db.path)?);
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    Ok((store, kit))
}

/// Submits one call of `remote:lookup` against `server`.
fn submit(kit: &McpTestKit, server: HttpServer) -> Result<ExecutionHandle, ExecutionError> {
    kit.agents([AgentSpec::scripted(Script::call(
        "remote:lookup",
        json!({}),
    ))])?
    .remove(0)
    .submit(
        Submission::new("Look it up.", server)
            .tools(["remote:lookup"])
            .human_input(HumanInput::Managed),
    )
}

/// Every byte the database's files hold.
fn database_bytes(db: &TempDb) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(db.dir.path())? {
        let path = entry?.path();
        if path.is_file() {
            bytes.extend(std::fs::read(&path)?);
        }
    }
    Ok(bytes)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn a_server_that_redirects_to_another_origin_is_refused_by_the_host_and_fails_the_execution()
-> Result<()> {
    // The other origin: it must never see a connection.
    let elsewhere = HttpProbe::start(|_| Answer {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: br#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_vec(),
        then: Then::Close,
    })?;
    let target = elsewhere.url("/mcp");
    let redirecting = HttpProbe::start(move |_| Answer {
        status: 307,
        headers: vec![("location".into(), target.clone())],
        body: Vec::new(),
        then: Then::Close,
    })?;
    let secret = format!("Bearer m3-secret-{}", std::process::id());
    let db = TempDb::new();
    let (store, kit) = kit(&db)?;
    let handle = submit(
        &kit,
        HttpServer::new("remote", redirecting.url("/mcp"))
            .header("Authorization", &secret)
            .era(McpEra::Legacy),
    )?;
    let result = handle.result(Some(WAIT))?;
    ensure!(!result.succeeded(), "{}", result.outcome);
    let failure = result.outcome.failure.clone().context("a failure")?;
    assert_eq!(failure.kind, FailureKind::ServerError, "{failure:?}");
    let other_origin = elsewhere.url("");
    assert!(
        failure.message.contains("redirected the kit to")
            && failure.message.contains(&other_origin)
            && failure.message.contains("does not grant"),
        "{failure:?}"
    );
    // Recorded with the execution, for whoever looks later.
    let diagnostics = handle.diagnostics()?;
    assert!(
        diagnostics
            .events
            .iter()
            .any(|e| e.kind == "network" && e.message.contains(&other_origin)),
        "{:?}",
        diagnostics.events
    );
    // The host refused before connecting: the other origin saw nothing.
    assert_eq!(elsewhere.connections(), 0);
    // The server's own origin got the request, with the binding's header.
    let received = redirecting.received();
    let first = received.first().context("the server got the request")?;
    assert_eq!(first.method, "POST");
    assert_eq!(first.path, "/mcp");
    assert_eq!(first.header("authorization"), Some(secret.as_str()));
    assert_eq!(
        first.header("accept"),
        Some("application/json, text/event-stream")
    );
    assert_eq!(first.header("content-type"), Some("application/json"));
    // The header's value is never stored, nor said.
    drop(handle);
    drop(kit);
    store.close();
    ensure!(
        !contains(&database_bytes(&db)?, &secret),
        "the header's value reached the database"
    );
    assert!(!format!("{failure:?}").contains(&secret));
    Ok(())
}

#[test]
fn an_unreachable_server_fails_the_execution_saying_where_and_why() -> Result<()> {
    let port = m3_tests::http_server::free_port()?;
    let db = TempDb::new();
    let (_store, kit) = kit(&db)?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let handle = submit(&kit, HttpServer::new("remote", &url))?;
    let result = handle.result(Some(WAIT))?;
    let failure = result.outcome.failure.clone().context("a failure")?;
    assert_eq!(failure.kind, FailureKind::ServerError, "{failure:?}");
    assert!(
        failure.message.contains(&url) && failure.message.contains("connection refused"),
        "{failure:?}"
    );
    Ok(())
}

#[test]
fn bindings_the_host_cannot_grant_are_refused_at_submission_and_store_nothing() -> Result<()> {
    let db = TempDb::new();
    let (store, kit) = kit(&db)?;
    for (server, expected) in [
        (
            HttpServer::new("remote", "ftp://127.0.0.1/mcp"),
            "http:// or https://",
        ),
        (
            HttpServer::new("remote", "127.0.0.1:8000/mcp"),
            "http:// or https://",
        ),
        (
            HttpServer::new("remote", "http://user:pw@127.0.0.1/mcp"),
            "user information",
        ),
        (
            HttpServer::new("remote", "http://127.0.0.1/mcp").header("bad name", "x"),
            "not an HTTP header name",
        ),
        (
            HttpServer::new("remote", "http://127.0.0.1/mcp").header("Mcp-Session-Id", "x"),
            "set by the MCP transport",
        ),
        (
            HttpServer::new("remote", "http://127.0.0.1/mcp").header("X-Key", "se\ncret"),
            "cannot carry",
        ),
    ] {
        match submit(&kit, server) {
            Err(ExecutionError::ModelValidation(e)) => {
                assert!(e.message.contains(expected), "{expected:?} in {e}");
                assert!(!e.message.contains("se\ncret") && !e.message.contains(":pw@"));
            }
            other => panic!("expected ModelValidationError ({expected}), got {other:?}"),
        }
    }
    // The Codex harness connects to servers itself, outside the grant: refused too.
    let codex = kit
        .agents([AgentSpec::codex(["m"], CodexOptions::default())])?
        .remove(0)
        .submit(
            Submission::new("x", HttpServer::new("remote", "http://127.0.0.1:9/mcp"))
                .tools(["remote:lookup"]),
        );
    assert!(
        matches!(&codex, Err(ExecutionError::ModelValidation(e)) if e.message.contains("stdio")),
        "{codex:?}"
    );
    assert!(
        store.executions()?.states(None)?.is_empty(),
        "nothing stored"
    );
    Ok(())
}

/// The bounds of a binding's headers (`HttpServer::MAX_HEADERS` and the sizes beside it), and
/// names that are not header names, are refused at submission: a typed `ModelValidationError`
/// naming the limit or what is wrong, never a value nor a name that is not a valid one, and
/// nothing is stored. (100 headers used to be granted, and a request with more headers than
/// `http` holds panicked the host.)
#[test]
fn headers_beyond_the_bounds_are_refused_at_submission_naming_the_limit_and_store_nothing()
-> Result<()> {
    let secret = "sk-live-SECRET123";
    let db = TempDb::new();
    let (store, kit) = kit(&db)?;
    let server = || HttpServer::new("remote", "http://127.0.0.1:9/mcp");
    let many = (0..100).fold(server(), |s, i| s.header(format!("X-H-{i}"), secret));
    let long_value = server().header("X-Key", format!("{secret}{}", "a".repeat(100 * 1024)));
    let long_name = server().header("X".repeat(300), secret);
    let large = (0..10).fold(server(), |s, i| {
        s.header(
            format!("X-Part-{i}"),
            format!("{secret}{}", "b".repeat(7 * 1024)),
        )
    });
    let line_break = server().header(format!("X-Evil\r\n{secret}"), "v");
    let nul = server().header("X-Key", format!("{secret}\0"));
    for (server, expected) in [
        (many, "100 headers, more than the 64"),
        (long_value, "is 102417 bytes long, more than the 8192"),
        (
            long_name,
            "a header name is 300 bytes long, more than the 256",
        ),
        (large, "bytes together, more than the 65536"),
        (line_break, "it holds a line break at byte 7"),
        (nul, "holds a NUL byte at byte 18"),
    ] {
        match submit(&kit, server) {
            Err(ExecutionError::ModelValidation(e)) => {
                assert!(e.message.contains(expected), "{expected:?} in {e}");
                assert!(
                    !e.message.contains(secret) && !e.message.contains(['\r', '\n', '\0']),
                    "{e:?}"
                );
            }
            other => panic!("expected ModelValidationError ({expected}), got {other:?}"),
        }
    }
    // At the bounds exactly: granted.
    let at_bounds = (0..8).fold(server(), |s, i| {
        s.header(format!("X-Part-{i}"), "c".repeat(8 * 1024 - 8))
    });
    assert!(at_bounds.check_headers().is_ok());
    assert_eq!(HttpServer::MAX_HEADERS, 64);
    assert!(
        store.executions()?.states(None)?.is_empty(),
        "nothing stored"
    );
    drop(kit);
    store.close();
    ensure!(
        !contains(&database_bytes(&db)?, secret),
        "a refused header's value reached the database"
    );
    Ok(())
}

// ---- hostile servers: oversized values, answers never answered, connections reset ----

/// What a hostile server does wrong (the rest of it speaks enough legacy MCP over HTTP to get
/// there: `initialize`, a call whose event stream asks for input, the answer's POST).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attack {
    /// `initialize` answered with an `Mcp-Session-Id` of 200 KiB.
    HugeSessionId,
    /// `initialize` answered with a `Content-Type` of 200 KiB.
    HugeHeader,
    /// `initialize` names a protocol version of 200 KiB.
    HugeVersion,
    /// The call's event stream gives an event id of 140 KiB, then ends before its answer (a
    /// resumption would send the id back as `Last-Event-ID`).
    HugeEventId,
    /// `initialize` answered with 7 MiB of server info (for a worker with little memory).
    HugeInitialize,
    /// The answer's POST read and never answered (the connection held open).
    SilentDelivery,
    /// The answer's POST read, then the connection reset.
    ResetDelivery,
    /// The answer's POST read, then the call's event stream (no event ids: not resumable)
    /// ended, and the answer accepted (`202`) only `after_ms` later: a server that took the
    /// answer and died, whose connections the host hears end in the worse order.
    AcceptAfterStreamEnds {
        /// The call's stream is held until this key is released.
        key: u64,
        /// How long after the stream's end the answer is accepted.
        after_ms: u64,
    },
}

/// A byte repeated to `bytes`.
fn filler(byte: char, bytes: usize) -> String {
    std::iter::repeat_n(byte, bytes).collect()
}

/// The hostile server's handler.
fn hostile(attack: Attack) -> impl Fn(&m3_tests::http_probe::Received) -> Answer + Send + Sync {
    move |request| {
        let answer = |status: u16, content_type: &str, body: String, then: Then| Answer {
            status,
            headers: if content_type.is_empty() {
                Vec::new()
            } else {
                vec![("content-type".into(), content_type.into())]
            },
            body: body.into_bytes(),
            then,
        };
        if request.method != "POST" {
            // No standalone stream, and the session's end is taken.
            let status = if request.method == "GET" { 405 } else { 200 };
            return answer(status, "", String::new(), Then::Close);
        }
        let message: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let id = message["id"].clone();
        let reply = |result: serde_json::Value| {
            json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
        };
        match message["method"].as_str() {
            Some("initialize") => {
                let version = match attack {
                    Attack::HugeVersion => filler('9', 200 * 1024),
                    _ => "2025-06-18".into(),
                };
                let name = match attack {
                    Attack::HugeInitialize => filler('n', 7 * 1024 * 1024),
                    _ => "hostile".into(),
                };
                let body = reply(json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": name, "version": "1"}
                }));
                let mut answer = answer(200, "application/json", body, Then::Close);
                match attack {
                    Attack::HugeSessionId => answer
                        .headers
                        .push(("mcp-session-id".into(), filler('s', 200 * 1024))),
                    Attack::HugeHeader => {
                        answer.headers[0].1 =
                            format!("application/json; padding={}", filler('p', 200 * 1024))
                    }
                    _ => {}
                }
                answer
            }
            Some("tools/list") => answer(
                200,
                "application/json",
                reply(json!({"tools": [{"name": "lookup", "inputSchema": {"type": "object"}}]})),
                Then::Close,
            ),
            Some("tools/call") if attack == Attack::HugeEventId => {
                let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": "info", "data": "working"}});
                let body = format!(
                    "retry: 10\nid: {}\ndata: {note}\n\n",
                    filler('7', 140 * 1024)
                );
                answer(200, "text/event-stream", body, Then::Close)
            }
            Some("tools/call") => {
                // The call's stream asks for input and stays open for the answer's outcome.
                let ask = json!({"jsonrpc": "2.0", "id": "ask-1", "method": "elicitation/create",
                    "params": {"message": "Which one?", "requestedSchema": {"type": "object",
                        "properties": {"choice": {"type": "string"}}, "required": ["choice"]}}});
                let then = match attack {
                    Attack::AcceptAfterStreamEnds { key, .. } => Then::HoldUntilReleased(key),
                    _ => Then::Hold,
                };
                answer(200, "text/event-stream", format!("data: {ask}\n\n"), then)
            }
            Some(_) => answer(202, "", String::new(), Then::Close),
            // A response: the answer.
            None => match attack {
                Attack::SilentDelivery => answer(200, "", String::new(), Then::Silent),
                Attack::ResetDelivery => answer(200, "", String::new(), Then::Reset),
                Attack::AcceptAfterStreamEnds { key, after_ms } => {
                    release(key);
                    std::thread::sleep(Duration::from_millis(after_ms));
                    answer(202, "", String::new(), Then::Close)
                }
                _ => answer(202, "", String::new(), Then::Close),
            },
        }
    }
}

/// The execution against a hostile server ends failed `server_error`, its message naming what
/// the server did and the limit it broke (`words`), never the value; no round was opened, so
/// nothing is labelled a round failure, and the worker did not trap.
fn fails_naming_the_limit(attack: Attack, words: &[&str], never: &str) -> Result<()> {
    let probe = HttpProbe::start(hostile(attack))?;
    let db = TempDb::new();
    let (_store, kit) = kit(&db)?;
    let handle = submit(
        &kit,
        HttpServer::new("remote", probe.url("/mcp")).era(McpEra::Legacy),
    )?;
    let result = handle.result(Some(WAIT))?;
    let failure = result.outcome.failure.clone().context("a failure")?;
    assert_eq!(
        failure.kind,
        FailureKind::ServerError,
        "{attack:?}: {failure:?}"
    );
    assert_eq!(failure.code, Some(FailureCode::ServerError), "{failure:?}");
    for word in words {
        assert!(failure.message.contains(word), "{word:?} in {failure:?}");
    }
    assert!(
        !failure.message.contains(never),
        "{attack:?}: the value is said"
    );
    assert!(!failure.message.contains("instance stopped"), "{failure:?}");
    ensure!(
        db.store().list_rounds(&RoundFilter::default())?.is_empty(),
        "{attack:?}: no round was opened"
    );
    Ok(())
}

#[test]
fn a_server_s_200_kib_session_id_fails_the_execution_naming_the_limit_without_a_trap() -> Result<()>
{
    fails_naming_the_limit(
        Attack::HugeSessionId,
        &["`Mcp-Session-Id` header of 204800 bytes, over the 4096-byte limit"],
        "ssssssss",
    )
}

#[test]
fn a_server_s_140_kib_event_id_fails_the_execution_naming_the_limit_without_a_trap() -> Result<()> {
    fails_naming_the_limit(
        Attack::HugeEventId,
        &["event id of 143360 bytes, over the 1024-byte limit"],
        "77777777",
    )
}

#[test]
fn a_server_s_huge_header_or_protocol_version_fails_the_execution_naming_the_limit() -> Result<()> {
    fails_naming_the_limit(
        Attack::HugeHeader,
        &["`Content-Type` header of", "over the 8192-byte limit"],
        "pppppppp",
    )?;
    fails_naming_the_limit(
        Attack::HugeVersion,
        &["protocol version of 204800 bytes, over the 64-byte limit"],
        "99999999",
    )
}

/// A worker instance that stops (here: past its memory, on a server's 7 MiB `initialize`)
/// before any round is an engine failure, said as such: no round failed, so neither
/// `round_failed` nor `recovery_unavailable`.
#[test]
fn a_worker_that_traps_before_any_round_fails_its_execution_as_an_engine_error() -> Result<()> {
    let probe = HttpProbe::start(hostile(Attack::HugeInitialize))?;
    let db = TempDb::new();
    let store = Arc::new(SqliteExecutionStore::open_with(
        &db.path,
        StoreOptions {
            guest_limits: GuestLimits {
                max_memory: 12 * 1024 * 1024,
                ..GuestLimits::default()
            },
            ..StoreOptions::default()
        },
    )?);
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    let handle = submit(
        &kit,
        HttpServer::new("remote", probe.url("/mcp")).era(McpEra::Legacy),
    )?;
    let result = handle.result(Some(WAIT))?;
    let failure = result.outcome.failure.clone().context("a failure")?;
    assert_eq!(failure.kind, FailureKind::EngineError, "{failure:?}");
    assert_eq!(failure.code, None, "{failure:?}");
    assert_eq!(failure.kind.as_str(), "engine_error");
    assert!(
        failure.message.contains("instance stopped")
            && failure.message.contains("memory limit exceeded"),
        "{failure:?}"
    );
    ensure!(db.store().list_rounds(&RoundFilter::default())?.is_empty());
    Ok(())
}

/// Waits for the execution's pending round and answers it.
fn answer_pending(handle: &ExecutionHandle) -> Result<String> {
    let since = std::time::Instant::now();
    let round = loop {
        if let Some(round) = handle.pending_elicitation()? {
            break round;
        }
        ensure!(since.elapsed() < WAIT, "no round within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    handle.respond_elicitation(
        &round.round_id,
        BTreeMap::from([(
            "elicitation".to_string(),
            ElicitationResponse::accept(json!({"choice": "the blue one"})),
        )]),
        "answer-1",
    )?;
    Ok(round.round_id)
}

/// One execution against the hostile server `attack` (its deliveries timed out after
/// `delivery_timeout` when given), its round answered and its end awaited: an execution failed
/// `server_error`, and what the checks read.
struct Answered {
    probe: HttpProbe,
    db: TempDb,
    _store: Arc<SqliteExecutionStore>,
    _kit: McpTestKit,
    handle: ExecutionHandle,
    round_id: String,
    failure: ExecutionFailure,
}

impl Answered {
    fn against(attack: Attack, delivery_timeout: Option<Duration>) -> Result<Self> {
        let probe = HttpProbe::start(hostile(attack))?;
        let db = TempDb::new();
        let (store, kit) = kit(&db)?;
        let mut server = HttpServer::new("remote", probe.url("/mcp")).era(McpEra::Legacy);
        if let Some(timeout) = delivery_timeout {
            server = server.delivery_timeout(timeout);
        }
        let handle = submit(&kit, server)?;
        let round_id = answer_pending(&handle)?;
        let result = handle.result(Some(WAIT))?;
        let failure = result.outcome.failure.clone().context("a failure")?;
        assert_eq!(failure.kind, FailureKind::ServerError, "{failure:?}");
        Ok(Self {
            probe,
            db,
            _store: store,
            _kit: kit,
            handle,
            round_id,
            failure,
        })
    }

    /// The answered round as stored.
    fn round(&self) -> Result<ManagedInputRecord> {
        self.db
            .store()
            .get_round(&self.round_id)?
            .context("the round")
    }

    /// How many requests carried the answer.
    fn answers_sent(&self) -> usize {
        self.probe
            .received()
            .iter()
            .filter(|r| contains(&r.body, "the blue one"))
            .count()
    }
}

/// The server reads the answer's POST and never responds: the round fails once the delivery
/// timeout passes (`server_error`, saying so), long before the stream's silence limit; it is
/// never `delivered`, and the answer is not sent again.
#[test]
fn an_answer_post_the_server_never_answers_fails_its_round_after_the_delivery_timeout() -> Result<()>
{
    let run = Answered::against(Attack::SilentDelivery, Some(Duration::from_secs(2)))?;
    assert!(
        run.failure
            .message
            .contains("did not answer the delivery of the answer within 2 s"),
        "{:?}",
        run.failure
    );
    let round = run.round()?;
    assert_eq!(round.status, ManagedInputStatus::Failed);
    let round_failure = round.failure.context("a failed round says why")?;
    assert_eq!(round_failure.code, FailureCode::ServerError);
    assert!(
        round_failure.message.contains("within 2 s"),
        "{round_failure:?}"
    );
    assert_eq!(round.timestamps.delivered_at, None);
    assert!(!round_failure.message.contains("the blue one"));
    // One POST carried the answer: it was never sent again.
    assert_eq!(run.answers_sent(), 1);
    Ok(())
}

/// The server ends the event stream that asked for the answer (no event id: it cannot be
/// resumed), and only then accepts the answer's POST: the answer counts as delivered (decision
/// 3: the server accepted it), whichever connection's end the worker hears first. The round
/// records its delivery once and then fails `server_error` (the server is gone), a repeat of the
/// answer is told it was delivered before the round failed, and the answer was sent once.
#[test]
fn an_answer_accepted_after_the_server_ended_its_stream_is_recorded_delivered() -> Result<()> {
    let attack = Attack::AcceptAfterStreamEnds {
        key: release_key(),
        after_ms: 300,
    };
    let run = Answered::against(attack, None)?;
    let round = run.round()?;
    assert_eq!(round.status, ManagedInputStatus::Failed);
    assert_eq!(
        round.failure.as_ref().map(|f| f.code),
        Some(FailureCode::ServerError)
    );
    assert!(
        round.timestamps.delivered_at.is_some(),
        "the server accepted the answer: the round records its delivery"
    );
    assert_eq!(round.delivery_attempts, 1);
    let repeat = run.handle.respond_elicitation(
        &run.round_id,
        BTreeMap::from([(
            "elicitation".to_string(),
            ElicitationResponse::accept(json!({"choice": "the blue one"})),
        )]),
        "answer-1",
    );
    match repeat {
        Err(ExecutionError::ManagedInput(ManagedInputError::State(e))) => {
            assert_eq!(e.code(), ErrorCode::DeliveredThenFailed, "{e}");
        }
        other => panic!("the repeat after the server died: {other:?}"),
    }
    assert_eq!(run.answers_sent(), 1);
    Ok(())
}

/// The control: the same server accepting the answer only after the delivery timeout has passed
/// is not waited for past it; the round fails `server_error` and is never `delivered`.
#[test]
fn an_answer_accepted_past_the_delivery_timeout_after_the_stream_ended_is_not_delivered()
-> Result<()> {
    let attack = Attack::AcceptAfterStreamEnds {
        key: release_key(),
        after_ms: 6000,
    };
    let run = Answered::against(attack, Some(Duration::from_secs(2)))?;
    let round = run.round()?;
    assert_eq!(round.status, ManagedInputStatus::Failed);
    assert_eq!(round.timestamps.delivered_at, None);
    Ok(())
}

/// The same with a round whose deadline comes before the delivery timeout: the deadline is
/// honoured while the delivery waits (`deadline_exceeded`, the execution an operation
/// timeout), and what happened to the delivery is kept as an event.
#[test]
fn an_answer_post_never_answered_fails_its_round_at_its_deadline_when_that_comes_first()
-> Result<()> {
    let probe = HttpProbe::start(hostile(Attack::SilentDelivery))?;
    let db = TempDb::new();
    let (_store, kit) = kit(&db)?;
    let handle = kit
        .agents([AgentSpec::scripted(Script::call(
            "remote:lookup",
            json!({}),
        ))])?
        .remove(0)
        .submit(
            Submission::new(
                "Look it up.",
                HttpServer::new("remote", probe.url("/mcp"))
                    .era(McpEra::Legacy)
                    .delivery_timeout(Duration::from_secs(600)),
            )
            .tools(["remote:lookup"])
            .human_input(HumanInput::Managed)
            .round_deadline(Duration::from_secs(10)),
        )?;
    let round_id = answer_pending(&handle)?;
    let result = match handle.result(Some(WAIT)) {
        Ok(result) => result,
        Err(ExecutionError::OperationTimeout(timeout)) => *timeout
            .result
            .context("an operation timeout with its result")?,
        Err(e) => return Err(e.into()),
    };
    let failure = result.outcome.failure.clone().context("a failure")?;
    assert_eq!(failure.kind, FailureKind::OperationTimeout, "{failure:?}");
    assert_eq!(failure.code, Some(FailureCode::DeadlineExceeded));
    let round = db.store().get_round(&round_id)?.context("the round")?;
    assert_eq!(round.status, ManagedInputStatus::Failed);
    assert_eq!(
        round.failure.map(|f| f.code),
        Some(FailureCode::DeadlineExceeded)
    );
    assert_eq!(round.timestamps.delivered_at, None);
    let events = handle.diagnostics()?.events;
    assert!(
        events.iter().any(|e| e.kind == "network"
            && e.message.contains("had not answered the delivery")
            && e.message.contains("deadline passed")),
        "{events:?}"
    );
    Ok(())
}

/// A connection reset after the answer was sent is said as such, not as a server that could
/// not be reached.
#[test]
fn a_connection_reset_after_the_answer_was_sent_is_reported_as_a_reset() -> Result<()> {
    let run = Answered::against(Attack::ResetDelivery, None)?;
    assert!(
        run.failure
            .message
            .contains("broke the connection after the answer was sent")
            && run.failure.message.contains("the connection was reset")
            && !run.failure.message.contains("could not be reached"),
        "{:?}",
        run.failure
    );
    assert_eq!(
        run.round()?.failure.map(|f| f.code),
        Some(FailureCode::ServerError)
    );
    Ok(())
}

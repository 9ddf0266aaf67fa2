//! The execution API end to end against real MCP peers: `server-everything` (legacy era, form
//! and URL elicitation) and the official Python SDK's `tests/peers/booking_server.py` (modern
//! era with MRTR rounds, and legacy era), each started by the kit's worker as a real child
//! process, with every round kept in a real SQLite file.
//!
//! The peers are installed on first use by `m3_tests::peers`; an install failure fails the
//! test. The children get only the environment given to the kit (here: nothing at all, see
//! `kit_env`).

use anyhow::{Context, Result, anyhow, bail, ensure};
use m3::*;
use m3_tests::TempDb;
use m3_tests::peers::{self, PeerCommand};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a pending round or a result may take to appear (peers answer in milliseconds; the
/// margin covers a loaded machine, node's and Python's start-up, and the era probe).
pub(crate) const WAIT: Duration = Duration::from_secs(60);

/// The request key of a legacy `elicitation/create` round.
pub(crate) const LEGACY_KEY: &str = "elicitation";
/// The request key the Python SDK gives its `Resolve(ask_booking)` parameter (MRTR).
pub(crate) const MRTR_KEY: &str = "__main__:ask_booking";

/// The environment of every child. Empty on purpose: the peer programs are absolute paths
/// (`node` and the venv's `python`), `server-everything` is given as an absolute script path,
/// and neither interpreter needs `PATH` or `HOME` to start a stdio server. The kit never passes
/// the test process's own environment, so this also checks the peers run without it.
fn kit_env() -> BTreeMap<String, String> {
    BTreeMap::new()
}

/// A binding named `name` that runs `command` (program and arguments as UTF-8 strings).
fn binding(name: &str, command: &PeerCommand) -> Result<StdioServer> {
    let program = command
        .program
        .to_str()
        .with_context(|| format!("non-UTF-8 program path {}", command.display()))?;
    let args = command
        .args
        .iter()
        .map(|a| {
            a.to_str()
                .map(str::to_string)
                .with_context(|| format!("non-UTF-8 argument in {}", command.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(StdioServer::new(name, program).args(args))
}

/// `server-everything` (installed on first use) as the binding `everything`.
fn everything(era: McpEra) -> Result<StdioServer> {
    Ok(binding("everything", &peers::server_everything()?)?.era(era))
}

/// `booking_server.py` on the pinned Python SDK (installed on first use) as `booking`.
pub(crate) fn booking(era: McpEra) -> Result<StdioServer> {
    Ok(binding("booking", &peers::booking_server()?)?.era(era))
}

/// One execution under test: its database, store, kit and handle (also used by the HTTP peer
/// tests, `http_peers`).
pub(crate) struct Run {
    pub(crate) db: TempDb,
    pub(crate) store: Arc<SqliteExecutionStore>,
    pub(crate) kit: McpTestKit,
    pub(crate) handle: ExecutionHandle,
}

impl Run {
    /// Submits `script` against `server` with managed human input, allowing exactly the
    /// script's tools.
    pub(crate) fn start(server: impl Into<ServerBinding>, script: Script) -> Result<Self> {
        let db = TempDb::new();
        let store = Arc::new(SqliteExecutionStore::open(&db.path)?);
        let kit = McpTestKit::new(store.clone(), kit_env())?;
        let tools: Vec<String> = script
            .steps
            .iter()
            .map(|s| s.target().to_string())
            .collect();
        let agent = kit
            .agents([AgentSpec::scripted(script)])?
            .pop()
            .context("the scripted harness gives one agent")?;
        let handle = agent.submit(
            Submission::new("Answer whatever the server asks.", server)
                .tools(tools)
                .human_input(HumanInput::Managed),
        )?;
        Ok(Self {
            db,
            store,
            kit,
            handle,
        })
    }

    /// Waits for the execution's pending round; fails if the execution finishes first.
    pub(crate) fn pending(&self) -> Result<PendingElicitationRound> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(pending) = self.handle.pending_elicitation()? {
                ensure!(
                    pending.execution_id == self.handle.execution_id(),
                    "a round of another execution: {pending:?}"
                );
                return Ok(pending);
            }
            let snapshot = self.handle.snapshot()?;
            if snapshot.lifecycle == ExecutionStatus::Finished {
                bail!(
                    "the execution finished without asking: {}",
                    snapshot
                        .outcome
                        .map(|o| format!("{o} {:?}", o.tool_results))
                        .unwrap_or_default()
                );
            }
            ensure!(
                Instant::now() < deadline,
                "no pending round within {} s",
                WAIT.as_secs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the next pending round that is not `previous`.
    pub(crate) fn next_pending(&self, previous: &str) -> Result<PendingElicitationRound> {
        let deadline = Instant::now() + WAIT;
        loop {
            let pending = self.pending()?;
            if pending.round_id != previous {
                return Ok(pending);
            }
            ensure!(
                Instant::now() < deadline,
                "round {previous} is still the pending one after {} s",
                WAIT.as_secs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Answers the round's one request `key` with `response`.
    pub(crate) fn answer(
        &self,
        round: &PendingElicitationRound,
        key: &str,
        response: ElicitationResponse,
    ) -> Result<(), ExecutionError> {
        self.handle.respond_elicitation(
            &round.round_id,
            BTreeMap::from([(key.to_string(), response)]),
            &format!("answer-{}", round.round_id),
        )
    }

    /// The terminal result; it must have succeeded.
    pub(crate) fn succeeded(&self) -> Result<ExecutionResult> {
        let result = self.handle.result(Some(WAIT))?;
        ensure!(
            result.succeeded(),
            "the execution did not succeed: {} {:?}",
            result.outcome,
            result.outcome.tool_results
        );
        ensure!(
            self.handle.snapshot()?.lifecycle == ExecutionStatus::Finished,
            "a result before the execution finished"
        );
        Ok(result)
    }

    /// The round as stored, read through a separate store on the same file.
    pub(crate) fn record(&self, round_id: &str) -> Result<ManagedInputRecord> {
        self.db
            .store()
            .get_round(round_id)?
            .with_context(|| format!("round {round_id} is not in the database"))
    }

    /// Asserts the round ended `resolved` with its answer delivered exactly once.
    pub(crate) fn assert_resolved(&self, round_id: &str) -> Result<ManagedInputRecord> {
        let record = self.record(round_id)?;
        ensure!(
            record.status == ManagedInputStatus::Resolved,
            "round {round_id} is {:?} ({:?}), not resolved",
            record.status,
            record.failure
        );
        ensure!(
            record.delivery_attempts == 1,
            "round {round_id} was delivered {} times",
            record.delivery_attempts
        );
        ensure!(record.timestamps.resolved_at.is_some());
        Ok(record)
    }

    pub(crate) fn close(self) {
        drop(self.handle);
        drop(self.kit);
        self.store.close();
    }
}

/// The one request of a round, which must be keyed `key`.
pub(crate) fn only_request<'a>(
    round: &'a PendingElicitationRound,
    key: &str,
) -> Result<&'a ElicitationRequest> {
    ensure!(
        round.requests.len() == 1 && round.requests.contains_key(key),
        "expected exactly the request `{key}`, got {:?}",
        round.requests.keys().collect::<Vec<_>>()
    );
    Ok(&round.requests[key])
}

/// The round's one form request `key`.
pub(crate) fn form<'a>(
    round: &'a PendingElicitationRound,
    key: &str,
) -> Result<&'a FormElicitationRequest> {
    match only_request(round, key)? {
        ElicitationRequest::Form(form) => Ok(form),
        other => bail!("expected a form request, got {other:?}"),
    }
}

/// The text of a tool result's `Raw result:` part (server-everything echoes what it received).
pub(crate) fn raw_result(result: &ToolResult) -> Result<Value> {
    let text = result.text();
    let raw = text
        .split_once("Raw result:")
        .map(|(_, raw)| raw.trim())
        .with_context(|| format!("no raw result in {text}"))?;
    serde_json::from_str(raw).with_context(|| format!("raw result {raw}"))
}

/// A valid value for one property of an MCP form schema, read from the property itself
/// (preferring values that are not the property's default, so the echo proves they are ours).
pub(crate) fn value_for(name: &str, property: &Value) -> Result<Value> {
    let last_const = |options: &Value| -> Result<Value> {
        options
            .as_array()
            .and_then(|o| o.last())
            .map(|o| o["const"].clone())
            .filter(|c| !c.is_null())
            .with_context(|| format!("{name}: no const options in {options}"))
    };
    if property["oneOf"].is_array() {
        return last_const(&property["oneOf"]);
    }
    if let Some(options) = property["enum"].as_array() {
        return options
            .last()
            .cloned()
            .with_context(|| format!("{name}: empty enum"));
    }
    let range = |fallback: f64| {
        let min = property["minimum"].as_f64().unwrap_or(f64::MIN);
        let max = property["maximum"].as_f64().unwrap_or(f64::MAX);
        (min, max, fallback.clamp(min, max))
    };
    Ok(match property["type"].as_str() {
        Some("string") => match property["format"].as_str() {
            None => json!("Asha Rao"),
            Some("email") => json!("asha@example.com"),
            Some("uri") => json!("https://example.com/asha"),
            Some("date") => json!("1990-04-01"),
            Some("date-time") => json!("1990-04-01T08:30:00Z"),
            Some(other) => bail!("{name}: unknown string format {other}"),
        },
        Some("integer") => {
            let (min, max, _) = range(0.0);
            let value = ((min.max(-1e6) + max.min(1e6)) / 2.0).floor() as i64;
            json!(value)
        }
        Some("number") => {
            // A fractional value, so it cannot be confused with an integer default.
            let (_, _, value) = range(2.5);
            json!(value)
        }
        Some("boolean") => json!(true),
        Some("array") => {
            let items = &property["items"];
            let mut options: Vec<Value> = if let Some(values) = items["enum"].as_array() {
                values.clone()
            } else if let Some(values) = items["anyOf"].as_array() {
                values.iter().map(|v| v["const"].clone()).collect()
            } else {
                bail!("{name}: array items without enum or anyOf: {items}");
            };
            // The last ones, as many as allowed but at most two.
            let max = property["maxItems"].as_u64().unwrap_or(2).min(2) as usize;
            let keep = options.len().min(max);
            options.drain(..options.len() - keep);
            json!(options)
        }
        other => bail!("{name}: unsupported type {other:?} in {property}"),
    })
}

/// A valid answer to a form schema: a value for every property.
pub(crate) fn answer_for(schema: &Value) -> Result<Value> {
    let properties = schema["properties"]
        .as_object()
        .with_context(|| format!("no properties in {schema}"))?;
    let mut content = serde_json::Map::new();
    for (name, property) in properties {
        content.insert(name.clone(), value_for(name, property)?);
    }
    Ok(Value::Object(content))
}

// ---- server-everything (legacy era) ----

#[test]
fn server_everything_form_with_every_primitive_kind_is_answered_through_the_execution_api()
-> Result<()> {
    // Auto: server-everything answers `server/discover` with -32601, so the legacy era is used.
    let run = Run::start(
        everything(McpEra::Auto)?,
        Script::call("everything:trigger-elicitation-request", json!({})),
    )?;
    let round = run.pending()?;
    assert_eq!(round.server, "everything");
    assert_eq!(round.operation_kind, OperationKind::Tool);
    assert_eq!(round.operation_name, "trigger-elicitation-request");
    assert_eq!(
        round.request_state, None,
        "a legacy round has no requestState"
    );
    let form = form(&round, LEGACY_KEY)?;
    assert!(!form.message.is_empty());

    // The schema has every primitive kind of the MCP form subset.
    let schema = &form.requested_schema;
    let properties = schema["properties"].as_object().context("properties")?;
    let has = |test: &dyn Fn(&Value) -> bool| properties.values().any(test);
    assert!(has(&|p| p["type"] == "string"
        && p.get("format").is_none()
        && p.get("enum").is_none()
        && p.get("oneOf").is_none()));
    for format in ["email", "uri", "date"] {
        assert!(has(&|p| p["format"] == format), "no {format} field");
    }
    for kind in ["integer", "number", "boolean"] {
        assert!(has(&|p| p["type"] == kind), "no {kind} field");
    }
    assert!(has(
        &|p| p["enum"].is_array() && p.get("enumNames").is_none()
    ));
    assert!(has(&|p| p["enumNames"].is_array()), "no legacy enumNames");
    assert!(has(&|p| p["oneOf"].is_array()), "no titled single-select");
    assert!(has(
        &|p| p["type"] == "array" && p["items"]["enum"].is_array()
    ));
    assert!(has(
        &|p| p["type"] == "array" && p["items"]["anyOf"].is_array()
    ));

    // An answer with a value for every field, built from the schema the round carries.
    let content = answer_for(schema)?;
    assert_eq!(
        content.as_object().map(|c| c.len()),
        Some(properties.len()),
        "every field is answered"
    );
    run.answer(
        &round,
        LEGACY_KEY,
        ElicitationResponse::accept(content.clone()),
    )?;

    let result = run.succeeded()?;
    assert_eq!(result.execution_id, run.handle.execution_id());
    let [tool] = result.outcome.tool_results.as_slice() else {
        bail!(
            "one tool result expected: {:?}",
            result.outcome.tool_results
        );
    };
    assert_eq!(tool.tool, "everything:trigger-elicitation-request");
    assert_ne!(tool.result["isError"], true, "{}", tool.result);
    // The server received exactly our answer.
    assert_eq!(
        raw_result(tool)?,
        json!({"action": "accept", "content": content})
    );
    let text = tool.text();
    assert!(text.contains("- Name: Asha Rao"), "{text}");
    assert!(text.contains("- Email: asha@example.com"), "{text}");

    let record = run.assert_resolved(&round.round_id)?;
    assert_eq!(record.pending, round);
    let stored = record.responses.context("the answer is stored")?;
    assert_eq!(stored[LEGACY_KEY].content.as_ref(), Some(&content));
    run.close();
    Ok(())
}

#[test]
fn server_everything_url_elicitation_is_a_url_round_answered_by_consent() -> Result<()> {
    let url = "https://example.com/consent";
    let run = Run::start(
        everything(McpEra::Legacy)?,
        Script::call("everything:trigger-url-elicitation", json!({"url": url})),
    )?;
    let round = run.pending()?;
    assert_eq!(round.operation_name, "trigger-url-elicitation");
    let ElicitationRequest::Url(request) = only_request(&round, LEGACY_KEY)? else {
        bail!("expected a URL request: {:?}", round.requests);
    };
    assert_eq!(request.url, url);
    let elicitation_id = request
        .elicitation_id
        .clone()
        .context("server-everything sends an elicitationId")?;

    // Content with a URL accept is refused locally; the round stays pending.
    let refused = run
        .answer(
            &round,
            LEGACY_KEY,
            ElicitationResponse::accept(json!({"ok": true})),
        )
        .expect_err("content is not allowed in a URL answer");
    assert_validation(&refused, ErrorCode::ContentNotAllowed)?;
    assert_eq!(
        run.pending()?.round_id,
        round.round_id,
        "still the same round"
    );

    // Consent only: nothing is fetched.
    run.answer(&round, LEGACY_KEY, ElicitationResponse::accept_url())?;
    let result = run.succeeded()?;
    let [tool] = result.outcome.tool_results.as_slice() else {
        bail!(
            "one tool result expected: {:?}",
            result.outcome.tool_results
        );
    };
    let text = tool.text();
    assert!(text.contains("completed the URL elicitation"), "{text}");
    assert!(
        text.contains(&elicitation_id) && text.contains(url),
        "{text}"
    );
    assert_eq!(raw_result(tool)?, json!({"action": "accept"}));
    run.assert_resolved(&round.round_id)?;
    run.close();
    Ok(())
}

/// An accepted URL answer is never fetched, neither by the kit nor by anything it runs: a URL
/// request whose URL points at a loopback listener this test owns is listed, answered `accept`
/// and delivered (the server says it completed the elicitation), and the listener has had no
/// connection at any point, also a moment after the delivery. (The static side of the promise
/// is `tidy::nothing_shipped_can_fetch_a_url`.)
#[test]
fn an_accepted_url_answer_is_never_fetched() -> Result<()> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let url = format!(
        "http://127.0.0.1:{}/consent?state=m3-test",
        listener.local_addr()?.port()
    );
    // A connection completes its handshake in the backlog whether or not it is accepted:
    // `accept` finds it however late it is asked.
    let connections = || -> Result<usize> {
        let mut seen = 0;
        loop {
            match listener.accept() {
                Ok(_) => seen += 1,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(seen),
                Err(e) => return Err(e.into()),
            }
        }
    };
    let run = Run::start(
        everything(McpEra::Legacy)?,
        Script::call("everything:trigger-url-elicitation", json!({"url": url})),
    )?;
    let round = run.pending()?;
    let ElicitationRequest::Url(request) = only_request(&round, LEGACY_KEY)? else {
        bail!("expected a URL request: {:?}", round.requests);
    };
    assert_eq!(request.url, url);
    ensure!(
        connections()? == 0,
        "the URL was fetched before it was answered"
    );
    run.answer(&round, LEGACY_KEY, ElicitationResponse::accept_url())?;
    let result = run.succeeded()?;
    let [tool] = result.outcome.tool_results.as_slice() else {
        bail!(
            "one tool result expected: {:?}",
            result.outcome.tool_results
        );
    };
    let text = tool.text();
    assert!(
        text.contains("completed the URL elicitation") && text.contains(&url),
        "{text}"
    );
    run.assert_resolved(&round.round_id)?;
    // Anything the answer set off has had a moment to connect (a longer wait only makes the
    // check stricter).
    std::thread::sleep(Duration::from_millis(500));
    let seen = connections()?;
    ensure!(
        seen == 0,
        "the URL of an accepted answer was fetched: {seen} connections"
    );
    run.close();
    Ok(())
}

#[test]
fn server_everything_url_required_error_is_a_consent_round_and_the_retry_asks_again() -> Result<()>
{
    let url = "https://example.com/after-sign-in";
    let run = Run::start(
        everything(McpEra::Legacy)?,
        Script::call(
            "everything:trigger-url-elicitation",
            json!({"url": url, "errorPath": true}),
        ),
    )?;
    // The -32042 error lists one URL request: a consent round keyed `url-0`.
    let first = run.pending()?;
    let ElicitationRequest::Url(listed) = only_request(&first, "url-0")? else {
        bail!("expected a URL request: {:?}", first.requests);
    };
    assert!(listed.url.starts_with("https://"), "{}", listed.url);
    assert_ne!(listed.url, url, "the prerequisite is another URL");
    run.answer(&first, "url-0", ElicitationResponse::accept_url())?;

    // Delivering consent retries the call; server-everything then asks by request.
    let second = run.next_pending(&first.round_id)?;
    assert_eq!(second.logical_operation_id, first.logical_operation_id);
    let ElicitationRequest::Url(requested) = only_request(&second, LEGACY_KEY)? else {
        bail!("expected a URL request: {:?}", second.requests);
    };
    assert_eq!(requested.url, url);
    run.answer(&second, LEGACY_KEY, ElicitationResponse::accept_url())?;

    let result = run.succeeded()?;
    let [tool] = result.outcome.tool_results.as_slice() else {
        bail!(
            "one tool result expected: {:?}",
            result.outcome.tool_results
        );
    };
    assert!(tool.text().contains(url), "{}", tool.text());
    let first = run.assert_resolved(&first.round_id)?;
    let second = run.assert_resolved(&second.round_id)?;
    assert_eq!((first.round_index, second.round_index), (0, 1));
    run.close();
    Ok(())
}

#[test]
fn server_everything_decline_and_cancel_complete_their_calls_and_resolve_their_rounds() -> Result<()>
{
    let tool = "everything:trigger-elicitation-request";
    let run = Run::start(
        everything(McpEra::Legacy)?,
        Script::call(tool, json!({})).then(tool, json!({})),
    )?;
    let declined = run.pending()?;
    form(&declined, LEGACY_KEY)?;
    run.answer(&declined, LEGACY_KEY, ElicitationResponse::decline())?;
    let cancelled = run.next_pending(&declined.round_id)?;
    form(&cancelled, LEGACY_KEY)?;
    assert_ne!(
        cancelled.logical_operation_id, declined.logical_operation_id,
        "the second call is another operation"
    );
    run.answer(&cancelled, LEGACY_KEY, ElicitationResponse::cancel())?;

    let result = run.succeeded()?;
    let results = &result.outcome.tool_results;
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(raw_result(&results[0])?, json!({"action": "decline"}));
    assert!(
        results[0].text().contains("declined"),
        "{}",
        results[0].text()
    );
    assert_eq!(raw_result(&results[1])?, json!({"action": "cancel"}));
    assert!(
        results[1].text().contains("cancelled"),
        "{}",
        results[1].text()
    );
    for (round, action) in [
        (&declined, ElicitationAction::Decline),
        (&cancelled, ElicitationAction::Cancel),
    ] {
        let record = run.assert_resolved(&round.round_id)?;
        let stored = record.responses.context("the answer is stored")?;
        assert_eq!(stored[LEGACY_KEY].action, action);
        assert_eq!(stored[LEGACY_KEY].content, None);
    }
    run.close();
    Ok(())
}

/// `error` is a local `ManagedInputValidationError` with `code`.
fn assert_validation(error: &ExecutionError, code: ErrorCode) -> Result<()> {
    match error {
        ExecutionError::ManagedInput(ManagedInputError::Validation(e)) => {
            ensure!(e.code() == code, "expected {code}, got {e}");
            Ok(())
        }
        other => Err(anyhow!("expected a validation error ({code}), got {other}")),
    }
}

#[test]
fn server_everything_invalid_answers_are_rejected_locally_and_the_round_stays_pending() -> Result<()>
{
    let run = Run::start(
        everything(McpEra::Legacy)?,
        Script::call("everything:trigger-elicitation-request", json!({})),
    )?;
    let round = run.pending()?;
    let valid = answer_for(&form(&round, LEGACY_KEY)?.requested_schema)?;
    let with = |field: &str, value: Value| {
        let mut content = valid.clone();
        content[field] = value;
        content
    };
    let mut without_name = valid.clone();
    without_name
        .as_object_mut()
        .context("an object")?
        .remove("name");

    let invalid: Vec<(&str, BTreeMap<String, ElicitationResponse>, ErrorCode)> = vec![
        (
            "a string for the integer field",
            BTreeMap::from([(
                LEGACY_KEY.to_string(),
                ElicitationResponse::accept(with("integer", json!("seven"))),
            )]),
            ErrorCode::SchemaViolation,
        ),
        (
            "the required field missing",
            BTreeMap::from([(
                LEGACY_KEY.to_string(),
                ElicitationResponse::accept(without_name),
            )]),
            ErrorCode::SchemaViolation,
        ),
        (
            "an integer out of range",
            BTreeMap::from([(
                LEGACY_KEY.to_string(),
                ElicitationResponse::accept(with("integer", json!(500))),
            )]),
            ErrorCode::SchemaViolation,
        ),
        (
            "a value outside the enum",
            BTreeMap::from([(
                LEGACY_KEY.to_string(),
                ElicitationResponse::accept(with("untitledSingleSelectEnum", json!("Gunther"))),
            )]),
            ErrorCode::SchemaViolation,
        ),
        (
            "an accept without content",
            BTreeMap::from([(LEGACY_KEY.to_string(), ElicitationResponse::accept_url())]),
            ErrorCode::ContentRequired,
        ),
        (
            "an unknown request key",
            BTreeMap::from([(
                "something-else".to_string(),
                ElicitationResponse::accept(valid.clone()),
            )]),
            ErrorCode::ResponseKeysMismatch,
        ),
    ];
    for (what, responses, code) in invalid {
        let error = run
            .handle
            .respond_elicitation(&round.round_id, responses, &format!("bad-{what}"))
            .err()
            .with_context(|| format!("{what} was accepted"))?;
        assert_validation(&error, code).with_context(|| what.to_string())?;
        // Nothing was written: the same round is pending, with no answer.
        let pending = run.handle.pending_elicitation()?.context("still pending")?;
        assert_eq!(pending, round, "after {what}");
        let record = run.record(&round.round_id)?;
        assert_eq!(record.status, ManagedInputStatus::Pending, "after {what}");
        assert!(record.responses.is_none(), "after {what}");
        assert_eq!(
            run.handle.snapshot()?.lifecycle,
            ExecutionStatus::WaitingForInput,
            "after {what}"
        );
    }

    run.answer(
        &round,
        LEGACY_KEY,
        ElicitationResponse::accept(valid.clone()),
    )?;
    let result = run.succeeded()?;
    let [tool] = result.outcome.tool_results.as_slice() else {
        bail!(
            "one tool result expected: {:?}",
            result.outcome.tool_results
        );
    };
    assert_eq!(
        raw_result(tool)?,
        json!({"action": "accept", "content": valid})
    );
    run.assert_resolved(&round.round_id)?;
    run.close();
    Ok(())
}

// ---- the Python SDK (mcp 2.3.0), booking_server.py ----

/// The script of one booking.
pub(crate) fn book_table() -> Script {
    Script::call("booking:book_table", json!({"restaurant": "Chez M3"}))
}

/// The answer given to the booking form.
pub(crate) fn booking_answer() -> Value {
    json!({"name": "Asha", "guests": 3, "seating": "terrace", "deposit": 12.5, "high_chair": true})
}

pub(crate) const BOOKED: &str =
    "booked Chez M3 for Asha: guests=3 seating=terrace deposit=12.5 high_chair=True";

/// Checks the booking form of `round` under `key`.
pub(crate) fn check_booking_form(round: &PendingElicitationRound, key: &str) -> Result<()> {
    assert_eq!(round.server, "booking");
    assert_eq!(round.operation_name, "book_table");
    let form = form(round, key)?;
    assert!(form.message.contains("Chez M3"), "{}", form.message);
    assert_eq!(
        form.requested_schema["required"],
        json!(["name", "guests", "seating"])
    );
    Ok(())
}

/// The one tool result's text.
pub(crate) fn only_text(result: &ExecutionResult) -> Result<String> {
    let [tool] = result.outcome.tool_results.as_slice() else {
        bail!(
            "one tool result expected: {:?}",
            result.outcome.tool_results
        );
    };
    assert_eq!(tool.tool, "booking:book_table");
    assert_eq!(tool.result["isError"], false, "{}", tool.result);
    Ok(tool.text())
}

#[test]
fn python_sdk_modern_era_is_an_mrtr_round_with_a_sealed_request_state() -> Result<()> {
    let run = Run::start(booking(McpEra::Modern)?, book_table())?;
    let round = run.pending()?;
    check_booking_form(&round, MRTR_KEY)?;
    let state = round
        .request_state
        .clone()
        .context("the SDK seals a requestState")?;
    assert!(!state.is_empty());
    // Kept verbatim in the database for the retry.
    assert_eq!(
        run.record(&round.round_id)?
            .pending
            .request_state
            .as_deref(),
        Some(state.as_str())
    );
    run.answer(
        &round,
        MRTR_KEY,
        ElicitationResponse::accept(booking_answer()),
    )?;
    let result = run.succeeded()?;
    assert_eq!(only_text(&result)?, BOOKED);
    let record = run.assert_resolved(&round.round_id)?;
    assert_eq!(record.round_index, 0);
    run.close();
    Ok(())
}

#[test]
fn python_sdk_auto_era_probes_modern_and_a_declined_mrtr_round_completes() -> Result<()> {
    let run = Run::start(booking(McpEra::Auto)?, book_table())?;
    let round = run.pending()?;
    // The MRTR key (not `elicitation`) and a requestState: the probe chose the modern era.
    check_booking_form(&round, MRTR_KEY)?;
    assert!(round.request_state.is_some(), "{round:?}");
    run.answer(&round, MRTR_KEY, ElicitationResponse::decline())?;
    let result = run.succeeded()?;
    assert_eq!(only_text(&result)?, "not booked: decline");
    run.assert_resolved(&round.round_id)?;
    run.close();
    Ok(())
}

#[test]
fn python_sdk_legacy_era_sends_elicitation_create_and_completes() -> Result<()> {
    for (response, expected) in [
        (ElicitationResponse::accept(booking_answer()), BOOKED),
        (ElicitationResponse::cancel(), "not booked: cancel"),
    ] {
        let run = Run::start(booking(McpEra::Legacy)?, book_table())?;
        let round = run.pending()?;
        check_booking_form(&round, LEGACY_KEY)?;
        assert_eq!(
            round.request_state, None,
            "a legacy round has no requestState"
        );
        run.answer(&round, LEGACY_KEY, response)?;
        let result = run.succeeded()?;
        assert_eq!(only_text(&result)?, expected);
        run.assert_resolved(&round.round_id)?;
        run.close();
    }
    Ok(())
}

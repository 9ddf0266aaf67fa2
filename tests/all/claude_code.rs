//! The `claude-code` harness against the real, pinned Claude Code CLI (installed on first use from
//! `tests/peers/claude-code/`), with a loopback Messages API standing in for the model
//! (`support/fake_anthropic.rs`) and the bundled shipping server as the MCP server Claude Code
//! starts: what only this harness has (its confinement, its credentials, its failures). The cases
//! every harness shares are in `harnesses.rs`.

use anyhow::{Context, Result, ensure};
use m3::*;
use m3_tests::fault_worker::Pending;
use m3_tests::harnesses::wait_pending;
use m3_tests::harnesses::{AgentHarness, environments_of, peer_binding};
use m3_tests::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");

fn address() -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        "elicitation".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )])
}

fn events(handle: &ExecutionHandle, kind: &str) -> Result<Vec<String>> {
    Ok(handle
        .diagnostics()?
        .events
        .into_iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.message)
        .collect())
}

/// The model asks, one turn each, for Bash, a file write, a web fetch, a sub-agent and a server
/// tool outside the allow-list, then calls the allowed tool: none of the five runs (the marker
/// file is never written), each is a `refused` event, the allowed call is answered through a
/// round; the model is offered exactly the allow-list (not Claude Code's own tools, not the
/// server's other tool), and the server's secret reaches the server alone: never Claude Code's
/// environment, never a model request.
#[test]
fn the_agent_gets_only_the_allowed_tool_and_every_other_call_is_refused() -> Result<()> {
    let db = TempDb::new();
    let run = AgentHarness::ClaudeCode.start(&db, "builtin", &[], Duration::from_secs(180))?;
    let secret = "ship-secret-4711";
    let submission = Submission::new(
        "Book the shipment.",
        StdioServer::new("shipping", SHIPPING_SERVER)
            .args(["--era", "legacy", "--report-env"])
            .env("SHIP_SECRET", secret),
    )
    .tools(["shipping:book_shipment"])
    .human_input(HumanInput::Managed);
    let handle = run.agent.submit(submission)?;
    let pending = wait_pending(&handle)?;
    // While the round waits: the server has its secret, Claude Code's environment does not.
    let claude = peers::claude_code()?;
    let claude_envs = environments_of(&claude);
    ensure!(!claude_envs.is_empty(), "no Claude Code process found");
    for env in &claude_envs {
        assert!(
            !env.iter().any(|e| e.contains(secret)),
            "Claude Code holds the secret"
        );
    }
    let server_envs = environments_of(std::path::Path::new(SHIPPING_SERVER));
    assert!(
        server_envs
            .iter()
            .any(|env| env.iter().any(|e| e == &format!("SHIP_SECRET={secret}"))),
        "the server did not get its secret"
    );
    handle.respond_elicitation(&pending.round_id, address(), "a")?;
    let result = handle.result(Some(Duration::from_secs(180)))?;
    assert!(result.succeeded(), "{}", result.outcome);
    assert_eq!(
        result.outcome.tool_results.len(),
        1,
        "only the allowed call ran"
    );
    assert!(
        result.outcome.tool_results[0]
            .text()
            .contains("1 Main Street")
    );
    let marker = db.dir.path().join("m3-should-not-exist");
    assert!(
        !marker.exists(),
        "a refused tool wrote {}",
        marker.display()
    );
    let refused = events(&handle, "refused")?;
    for tool in [
        "Bash",
        "Write",
        "WebFetch",
        "Task",
        "mcp__shipping__report_env",
    ] {
        assert!(
            refused.iter().any(|e| e.contains(&format!("`{tool}`"))),
            "no refusal of {tool}: {refused:#?}"
        );
    }
    let seen = fake_anthropic::requests_seen(run.model_port);
    ensure!(!seen.is_empty(), "the model was never asked");
    for request in &seen {
        assert_eq!(
            request.tools(),
            ["mcp__shipping__book_shipment"],
            "the agent is offered exactly the allow-list"
        );
        let text = request.body.to_string();
        assert!(
            !text.contains(secret),
            "the server's secret reached the model"
        );
        for (_, value) in &request.headers {
            assert!(!value.contains(secret));
        }
    }
    Ok(())
}

/// The model's key, `ANTHROPIC_API_KEY` of the kit's `env`, reaches the model through Claude
/// Code, and the MCP server (which inherits Claude Code's environment) sees it empty, sees the
/// caller's `HOME` rather than the private one, and gets the binding's own variables.
#[test]
fn the_model_key_reaches_claude_code_alone() -> Result<()> {
    let db = TempDb::new();
    let key = "sk-ant-test-0042";
    let home = db.dir.path().join("caller-home");
    std::fs::create_dir(&home)?;
    let home_text = home.display().to_string();
    let run = AgentHarness::ClaudeCode.start(
        &db,
        &format!("auth:{key}"),
        &[("ANTHROPIC_API_KEY", key), ("HOME", &home_text)],
        Duration::from_secs(120),
    )?;
    let submission = Submission::new(
        "Report the environment.",
        StdioServer::new("shipping", SHIPPING_SERVER)
            .args(["--era", "legacy", "--report-env"])
            .env("SHIP_SECRET", "binding-value"),
    )
    .tools(["shipping:report_env"])
    .human_input(HumanInput::Managed);
    let handle = run.agent.submit(submission)?;
    let result = handle.result(Some(Duration::from_secs(120)))?;
    assert!(result.succeeded(), "{}", result.outcome);
    let seen = fake_anthropic::requests_seen(run.model_port);
    assert!(
        seen.iter()
            .any(|r| r.headers.iter().any(|(n, v)| n == "x-api-key" && v == key)),
        "the key never reached the model"
    );
    let reported: Value = serde_json::from_str(&result.outcome.tool_results[0].text())
        .context("report_env's JSON")?;
    let reported = &reported["env"];
    assert_eq!(reported["ANTHROPIC_API_KEY"], "", "{reported}");
    assert_eq!(reported["CLAUDE_CONFIG_DIR"], "", "{reported}");
    assert_eq!(reported["HOME"], home_text.as_str(), "{reported}");
    assert_eq!(reported["SHIP_SECRET"], "binding-value", "{reported}");
    assert!(!reported.to_string().contains(key));
    Ok(())
}

/// A model endpoint that refuses the key fails the execution at once as a model error naming
/// the status (Claude Code would retry for minutes); a server that does not start and an
/// allow-listed tool the server lacks fail at once with their own kinds; a program that is not
/// Claude Code is refused at submission.
#[test]
fn failures_are_fast_and_named() -> Result<()> {
    let db = TempDb::new();
    let run = AgentHarness::ClaudeCode.start(
        &db,
        "auth:right-key",
        &[("ANTHROPIC_API_KEY", "wrong-key")],
        Duration::from_secs(120),
    )?;
    let booking = |server: StdioServer, tool: &str| {
        Submission::new("Book it.", server)
            .tools([tool])
            .human_input(HumanInput::Managed)
    };
    let started = Instant::now();
    let result = run
        .agent
        .submit(booking(
            StdioServer::new("shipping", SHIPPING_SERVER).args(["--era", "legacy"]),
            "shipping:book_shipment",
        ))?
        .result(Some(Duration::from_secs(120)))?;
    let failure = result.outcome.failure.context("a failure")?;
    assert_eq!(failure.kind, FailureKind::ModelError, "{failure:?}");
    assert!(failure.message.contains("401"), "{}", failure.message);
    assert!(
        !failure.message.contains("wrong-key"),
        "{}",
        failure.message
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );

    let db = TempDb::new();
    let run = AgentHarness::ClaudeCode.start(&db, "tool", &[], Duration::from_secs(120))?;
    let result = run
        .agent
        .submit(booking(
            StdioServer::new("shipping", SHIPPING_SERVER).args(["--era", "legacy"]),
            "shipping:book_shipmnt",
        ))?
        .result(Some(Duration::from_secs(120)))?;
    let failure = result.outcome.failure.context("a failure")?;
    assert_eq!(failure.kind, FailureKind::ToolNotFound, "{failure:?}");
    assert!(
        failure.message.contains("`book_shipmnt`"),
        "{}",
        failure.message
    );

    let missing = db.dir.path().join("no-such-server");
    std::fs::write(&missing, "#!/bin/sh\nexit 3\n")?;
    let mut permissions = std::fs::metadata(&missing)?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&missing, permissions)?;
    let result = run
        .agent
        .submit(booking(
            StdioServer::new("shipping", missing.display().to_string()),
            "shipping:book_shipment",
        ))?
        .result(Some(Duration::from_secs(120)))?;
    let failure = result.outcome.failure.context("a failure")?;
    assert_eq!(failure.kind, FailureKind::ServerError, "{failure:?}");
    assert!(
        failure.message.contains("did not start"),
        "{}",
        failure.message
    );

    let kit = &run.kit;
    let not_claude = ClaudeCodeOptions {
        binary: "/bin/true".into(),
        ..ClaudeCodeOptions::default()
    };
    let agent = kit
        .agents([AgentSpec::claude_code(["m"], not_claude)])?
        .remove(0);
    let refused = agent
        .submit(booking(
            StdioServer::new("shipping", SHIPPING_SERVER),
            "shipping:book_shipment",
        ))
        .unwrap_err();
    assert!(
        refused.to_string().contains("is not the Claude Code CLI"),
        "{refused}"
    );
    Ok(())
}

/// A third-party server, the official Python SDK's booking server (its `Elicit` form of five
/// typed fields: a string, an integer, an enum, a number and a boolean with defaults): its
/// question is a round of the agent's call, the answer reaches the server through Claude Code
/// and the table is booked with it.
#[test]
fn a_python_sdk_server_s_question_is_answered_through_claude_code() -> Result<()> {
    let harness = AgentHarness::ClaudeCode;
    let db = TempDb::new();
    let arguments = json!({"restaurant": "Luigi's"});
    let run = harness.start_calling(&db, "tool", &[], Duration::from_secs(120), arguments)?;
    let server = peer_binding("booking", &peers::booking_server()?).era(McpEra::Legacy);
    let handle = run.agent.submit(
        Submission::new("Book a table at Luigi's.", server)
            .tools(["booking:book_table"])
            .human_input(HumanInput::Managed),
    )?;
    let pending = wait_pending(&handle)?;
    assert_eq!(pending.operation_name, "book_table");
    let (key, request) = pending.requests.iter().next().context("one request")?;
    assert!(
        matches!(request, ElicitationRequest::Form(_)),
        "{request:?}"
    );
    let booking = json!({"name": "Asha", "guests": 2, "seating": "terrace"});
    handle.respond_elicitation(
        &pending.round_id,
        BTreeMap::from([(key.clone(), ElicitationResponse::accept(booking))]),
        "booking-1",
    )?;
    let result = handle.result(Some(Duration::from_secs(120)))?;
    assert!(result.succeeded(), "{}", result.outcome);
    let text = result.outcome.tool_results[0].text();
    assert!(
        text.contains("booked Luigi's for Asha: guests=2 seating=terrace"),
        "{text}"
    );
    let record = db.store().get_round(&pending.round_id)?.context("round")?;
    assert_eq!(record.status, ManagedInputStatus::Resolved);
    assert_eq!(record.delivery_attempts, 1);
    Ok(())
}

/// A worker process killed (SIGKILL) while its Claude Code execution's round waits, over
/// PostgreSQL: another kit's recovery fails the round `recovery_unavailable` and its execution,
/// a later answer is refused with that code, and Claude Code and its server (the worker's child
/// process group) are gone.
#[test]
fn a_killed_worker_s_round_is_recovered_over_postgresql() -> Result<()> {
    let db = m3_tests::backends::Db::postgres();
    let dir = tempfile::tempdir()?;
    let port = fake_anthropic::serve_in_background(fake_anthropic::Script::tool(
        m3_tests::harnesses::book_arguments(),
    ))?;
    let claude = peers::claude_code().context("the pinned Claude Code CLI")?;
    let pid_file = dir.path().join("server.pid");
    let server = dir.path().join("server.sh");
    std::fs::write(
        &server,
        format!(
            "#!/bin/sh\necho $$ > {}\nexec {SHIPPING_SERVER} \"$@\"\n",
            pid_file.display()
        ),
    )?;
    std::fs::set_permissions(&server, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_m3-test-fault-worker"))
        .arg("kit")
        .arg(db.name())
        .arg("1000")
        .arg(&server)
        .arg(&claude)
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("claude-code")
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let Pending {
        round_id,
        execution_id,
    } = Pending::read(&mut child)?;
    let server_pid: u32 = std::fs::read_to_string(&pid_file)?.trim().parse()?;
    child.kill()?; // SIGKILL
    child.wait()?;
    std::thread::sleep(Duration::from_millis(1500));
    let store: std::sync::Arc<dyn ExecutionStore> = std::sync::Arc::new(
        PostgresExecutionStore::open(&db.name(), StoreOptions::default())?,
    );
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    let (rounds, executions) = kit.recover()?;
    assert_eq!((rounds, executions), (1, 1));
    let record = db.store().get_round(&round_id)?.context("the round")?;
    assert_eq!(record.status, ManagedInputStatus::Failed);
    assert_eq!(
        record.failure.context("failure")?.code,
        FailureCode::RecoveryUnavailable
    );
    let late = db.store().submit_responses(&round_id, &address(), "late");
    let refused = late.expect_err("an answer to a recovered round is refused");
    assert_eq!(
        refused.code(),
        Some(ErrorCode::RecoveryUnavailable),
        "{refused}"
    );
    let outcome = kit
        .execution(&execution_id)?
        .snapshot()?
        .outcome
        .context("the execution ended")?;
    assert_eq!(outcome.kind, OutcomeKind::Failed, "{outcome}");
    let until = Instant::now() + Duration::from_secs(20);
    while m3_tests::process_is_running(server_pid) {
        ensure!(
            Instant::now() < until,
            "the server (pid {server_pid}) outlived its dead worker's recovery"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// A signed-in user's credentials: a copy of `.credentials.json` from the configuration
/// directory the options name goes into the private one, Claude Code sends its token to the
/// model (no key is given), and the original is left as it was.
#[test]
fn a_copied_sign_in_is_used_and_the_original_left_alone() -> Result<()> {
    let db = TempDb::new();
    let port = fake_anthropic::serve_in_background(fake_anthropic::Script::tool(
        m3_tests::harnesses::book_arguments(),
    ))?;
    let config = db.dir.path().join("claude-config");
    std::fs::create_dir(&config)?;
    let token = "sk-ant-oat01-m3-test-token";
    let sign_in = json!({"claudeAiOauth": {"accessToken": token,
        "refreshToken": "sk-ant-ort01-m3-test", "expiresAt": 4_102_444_800_000_u64,
        "scopes": ["user:inference"], "subscriptionType": "pro"}})
    .to_string();
    let original = config.join(".credentials.json");
    std::fs::write(&original, &sign_in)?;
    let store = std::sync::Arc::new(SqliteExecutionStore::open(&db.path)?);
    let env = BTreeMap::from([(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_default(),
    )]);
    let kit = McpTestKit::new(store, env)?;
    let options = ClaudeCodeOptions {
        binary: peers::claude_code()?.display().to_string(),
        base_url: Some(format!("http://127.0.0.1:{port}")),
        credentials: ClaudeCodeCredentials::From(config.clone()),
        ..ClaudeCodeOptions::default()
    };
    let agent = kit
        .agents([AgentSpec::claude_code(["fake-model"], options)])?
        .remove(0);
    let handle = agent.submit(
        Submission::new(
            "Book the shipment.",
            StdioServer::new("shipping", SHIPPING_SERVER).args(["--era", "legacy"]),
        )
        .tools(["shipping:book_shipment"])
        .human_input(HumanInput::Managed),
    )?;
    let pending = wait_pending(&handle)?;
    handle.respond_elicitation(&pending.round_id, address(), "a")?;
    let result = handle.result(Some(Duration::from_secs(120)))?;
    assert!(result.succeeded(), "{}", result.outcome);
    let seen = fake_anthropic::requests_seen(port);
    assert!(
        seen.iter().all(|r| r
            .headers
            .iter()
            .any(|(n, v)| n == "authorization" && v == &format!("Bearer {token}"))),
        "every model request carries the signed-in token"
    );
    assert_eq!(
        std::fs::read_to_string(&original)?,
        sign_in,
        "the original is untouched"
    );
    Ok(())
}

/// A model endpoint that keeps failing with a server error (HTTP 500): with
/// `ClaudeCodeOptions::max_retries` at 0 the execution fails at once as a model error naming the
/// status, instead of after Claude Code's ten retries (about three minutes).
#[test]
fn a_failing_endpoint_ends_the_turn_after_the_retries_asked_for() -> Result<()> {
    let db = TempDb::new();
    let port = fake_anthropic::serve_in_background(fake_anthropic::Script {
        mode: "status:500".into(),
        arguments: json!({}),
        marker: db.dir.path().join("marker").display().to_string(),
    })?;
    let store = std::sync::Arc::new(SqliteExecutionStore::open(&db.path)?);
    let env = BTreeMap::from([
        (
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        ),
        (
            "ANTHROPIC_API_KEY".to_string(),
            "sk-ant-loopback".to_string(),
        ),
    ]);
    let kit = McpTestKit::new(store, env)?;
    let options = ClaudeCodeOptions {
        binary: peers::claude_code()?.display().to_string(),
        base_url: Some(format!("http://127.0.0.1:{port}")),
        credentials: ClaudeCodeCredentials::None,
        max_retries: Some(0),
        ..ClaudeCodeOptions::default()
    };
    let agent = kit
        .agents([AgentSpec::claude_code(["fake-model"], options)])?
        .remove(0);
    let started = Instant::now();
    let result = agent
        .submit(
            Submission::new(
                "Book it.",
                StdioServer::new("shipping", SHIPPING_SERVER).args(["--era", "legacy"]),
            )
            .tools(["shipping:book_shipment"])
            .human_input(HumanInput::Managed),
        )?
        .result(Some(Duration::from_secs(120)))?;
    let failure = result.outcome.failure.context("a failure")?;
    assert_eq!(failure.kind, FailureKind::ModelError, "{failure:?}");
    assert!(failure.message.contains("HTTP 500"), "{}", failure.message);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let requests = fake_anthropic::requests_seen(port)
        .iter()
        .filter(|r| r.path.starts_with("/v1/messages"))
        .count();
    assert_eq!(requests, 1, "no retry was asked for");
    Ok(())
}

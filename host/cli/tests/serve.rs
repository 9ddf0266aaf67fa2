//! `m3 serve`'s API and event stream, tested against the real binary: `m3 serve --listen
//! 127.0.0.1:0` in one process (its first stdout line is the bound address), real `m3 run
//! --no-prompt --json` processes with the bundled example server, `m3 respond` in others, and a
//! real HTTP client (`ureq`). Every endpoint, every status and typed error it can give, and the
//! stream (order, other processes' changes, keep-alives, a stalled subscriber). What several
//! servers at once, restarts and slow clients do is in `serve_survival.rs`. Every wait has a
//! timeout; every child is killed when its guard drops.

mod common;
mod serving;

use common::*;
use serde_json::{Value, json};
use serving::*;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Every endpoint's shape; answered through the API, the run succeeds with that answer; a
/// repeat is idempotent, a different answer under the same key a conflict; the event stream
/// says the round's whole life, in order.
#[test]
fn the_api_answers_a_run_and_streams_its_changes() {
    api_answers_a_run_and_streams_its_changes(Sandbox::new());
}

/// The same on a PostgreSQL database: the server hears the run's commits through the
/// database's notifications.
#[test]
fn the_api_answers_a_run_and_streams_its_changes_on_postgres() {
    api_answers_a_run_and_streams_its_changes(Sandbox::postgres());
}

fn api_answers_a_run_and_streams_its_changes(sb: Sandbox) {
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let stream = server.subscribe();
    let run = sb.spawn_run("legacy", &[], &[]);

    let round = server.wait_pending();
    check_round(&round);
    let (round_id, execution_id) = ids(&round);

    // Reads, ids by prefix.
    let shown = server.get(&format!("/api/rounds/{}", &round_id[..12]));
    assert_eq!(shown.status, 200, "{}", shown.body);
    check_record(&shown.body);
    assert_eq!(shown.body["round_id"], round_id.as_str());
    assert_eq!(shown.body["redacted"], true);
    assert_eq!(shown.body["status"], "pending");
    let executions = server.get("/api/executions");
    assert_eq!(executions.status, 200);
    let list = executions.body.as_array().expect("an array");
    assert_eq!(list.len(), 1);
    check_execution(&list[0]);
    let status = server.get(&format!("/api/executions/{}", &execution_id[..12]));
    assert_eq!(status.status, 200, "{}", status.body);
    check_status(&status.body);
    assert_eq!(status.body["lifecycle"], "waiting_for_input");
    let events = server.get(&format!("/api/executions/{}/events", &execution_id[..12]));
    assert_eq!(events.status, 200);
    check_events(&events.body);
    assert!(events.body["history"].is_array(), "{}", events.body);
    // The same values as the commands' `--json`.
    assert_eq!(
        server.get("/api/rounds/pending").body,
        sb.m3(&["pending", "--json"]).json()
    );

    // A refused answer says which request and field it is about (a page shows it next to the
    // field).
    let invalid = server.answer(
        &round_id,
        &json!({"responses": {"shipping_address": {"action": "accept", "content": {"street": 1}}},
                "idempotency_key": "bad"})
        .to_string(),
    );
    assert_eq!(invalid.status, 400, "{}", invalid.body);
    let (kind, code) = error_of(&invalid);
    assert_eq!(kind, "ManagedInputValidationError");
    assert!(!code.is_empty(), "{}", invalid.body);
    assert_eq!(
        invalid.body["error"]["request_key"], "shipping_address",
        "{}",
        invalid.body
    );
    assert_eq!(invalid.body["error"]["field"], "city", "{}", invalid.body);

    // The answer, then a repeat and a conflicting one under the same key.
    let answered = server.answer(&round_id, &answer("api-1"));
    assert_eq!(answered.status, 200, "{}", answered.body);
    check_record(&answered.body);
    assert_eq!(answered.body["redacted"], true, "answers are never shown");
    assert!(!answered.body.to_string().contains(STREET));
    let (out, lines) = run.finish();
    let result = check_run_stdout(&out, &lines);
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(
        result["tool_calls"][0]["output"],
        format!("Booked shipment to {STREET}, {CITY}")
    );
    let again = server.answer(&round_id, &answer("api-1"));
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["round_id"], round_id.as_str());
    assert_eq!(again.body["responses"], answered.body["responses"]);
    let other = json!({"responses": {"shipping_address": {"action": "decline"}},
                       "idempotency_key": "api-1"});
    let conflict = server.answer(&round_id, &other.to_string());
    assert_problem(
        &conflict,
        409,
        "ManagedInputConflict",
        "idempotency_conflict",
    );
    // Another key on a round that has ended: gone.
    let late = server.answer(&round_id, &answer("api-2"));
    assert_problem(&late, 410, "ManagedInputStateError", "round_terminal");

    // The stream said the round's whole life, in order, each with its ids.
    let life = stream.life_of(&execution_id);
    assert_eq!(
        kinds(&life),
        [
            "round_created",
            "round_answered",
            "round_resolved",
            "execution_finished"
        ],
        "{life:?}"
    );
    for (kind, data) in &life {
        if kind.starts_with("round_") {
            assert_keys(data, &["round_id", "execution_id", "status"], kind);
            assert_eq!(data["round_id"], round_id.as_str(), "{data}");
        } else {
            assert_keys(data, &["execution_id", "outcome"], kind);
            assert_eq!(data["outcome"], "succeeded", "{data}");
        }
    }
    assert_eq!(life[0].1["status"], "pending");
    assert_eq!(life[2].1["status"], "resolved");
}

/// A Claude Code execution answered through the API: `m3 run --harness claude-code` (the real
/// pinned CLI, a loopback Messages API, the model's key from the command's environment) waits
/// on a round that `m3 serve` lists and takes the answer for; the run succeeds with it.
#[test]
fn the_api_answers_a_claude_code_run() {
    api_answers_a_claude_code_run(Sandbox::new());
}

/// The same on a PostgreSQL database.
#[test]
fn the_api_answers_a_claude_code_run_on_postgres() {
    api_answers_a_claude_code_run(Sandbox::postgres());
}

fn api_answers_a_claude_code_run(sb: Sandbox) {
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let run = sb.spawn_claude_code_run();
    let round = server.wait_pending();
    let (round_id, _) = ids(&round);
    assert_eq!(round["operation_name"], "book_shipment", "{round}");
    let answered = server.answer(
        &round_id,
        &json!({"responses": {"elicitation": address_answer()}, "idempotency_key": "api-claude"})
            .to_string(),
    );
    assert_eq!(answered.status, 200, "{}", answered.body);
    let (out, lines) = run.finish();
    assert!(out.status.success(), "{}", out.stderr);
    // Its round's single request is `elicitation` (Claude Code forwards no `_meta`), so the
    // bundled server's round checks of `check_run_stdout` do not apply: the last line is read.
    let last: Value = serde_json::from_str(lines.last().expect("a result line")).unwrap();
    assert_eq!(last["event"], "result", "{last}");
    let result = &last["result"];
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert!(
        result["tool_calls"][0]["output"]
            .as_str()
            .is_some_and(|o| o.contains(STREET)),
        "{result}"
    );
}

/// Each refused answer has its status and the component's (or the API's) code, says nothing of
/// what was sent, and changes nothing: the round stays pending and takes a good answer after.
#[test]
fn every_refused_answer_has_its_status_and_code() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, _) = ids(&server.wait_pending());
    let refused = "Refused-Value-7f3a";
    let body = |responses: Value| json!({"responses": responses, "idempotency_key": "k"});
    let accept = |content: Value| {
        body(json!({"shipping_address": {"action": "accept", "content": content}})).to_string()
    };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "a value the schema refuses (an empty street)",
            accept(json!({"street": "", "city": refused})),
            "schema_violation",
        ),
        (
            "a value of the wrong type",
            accept(json!({"street": refused, "city": 12345})),
            "schema_violation",
        ),
        (
            "a required field missing",
            accept(json!({"street": refused})),
            "schema_violation",
        ),
        (
            "no answer for the round's request key",
            body(json!({})).to_string(),
            "response_keys_mismatch",
        ),
        (
            "an answer for a key the round has not",
            body(json!({"shipping_address": address_answer(),
                        "billing_address": address_answer()}))
            .to_string(),
            "response_keys_mismatch",
        ),
        (
            "an action that does not exist",
            body(json!({"shipping_address": {"action": "maybe"}})).to_string(),
            "invalid_action",
        ),
        (
            "content with a decline",
            body(json!({"shipping_address": {"action": "decline",
                        "content": {"street": refused}}}))
            .to_string(),
            "content_not_allowed",
        ),
        (
            "a request key given twice in `responses` (the component's strict parser)",
            format!(
                r#"{{"responses": {{"shipping_address": {{"action": "decline"}},
                    "shipping_address": {}}}, "idempotency_key": "k"}}"#,
                address_answer()
            ),
            "malformed_json",
        ),
        (
            "a body that is not JSON",
            format!(r#"{{"responses": {{"shipping_address": "{refused}""#),
            "malformed_json",
        ),
        (
            "a body that is a JSON array",
            "[]".to_string(),
            "malformed_json",
        ),
        (
            "`responses` given twice",
            format!(
                r#"{{"responses": {{}}, "responses": {{"shipping_address": {}}},
                    "idempotency_key": "k"}}"#,
                address_answer()
            ),
            "malformed_json",
        ),
        (
            "no `responses`",
            json!({"idempotency_key": "k"}).to_string(),
            "missing_responses",
        ),
        (
            "`responses` that is not an object",
            json!({"responses": [address_answer()], "idempotency_key": "k"}).to_string(),
            "missing_responses",
        ),
        (
            "no idempotency key",
            json!({"responses": {"shipping_address": address_answer()}}).to_string(),
            "missing_idempotency_key",
        ),
        (
            "an empty idempotency key",
            json!({"responses": {"shipping_address": address_answer()}, "idempotency_key": ""})
                .to_string(),
            "missing_idempotency_key",
        ),
        (
            "an idempotency key that is not a string",
            json!({"responses": {"shipping_address": address_answer()}, "idempotency_key": 7})
                .to_string(),
            "missing_idempotency_key",
        ),
    ];
    for (what, body, code) in &cases {
        let reply = server.answer(&round_id, body);
        assert_eq!(reply.status, 400, "{what}: {}", reply.body);
        assert_eq!(
            error_of(&reply),
            ("ManagedInputValidationError".to_string(), code.to_string()),
            "{what}: {}",
            reply.body
        );
        let text = reply.body.to_string();
        assert!(
            !text.contains(refused) && !text.contains(STREET),
            "{what}: an error quotes what was sent: {text}"
        );
    }
    let record = server.round(&round_id);
    assert_eq!(record["status"], "pending", "{record}");
    assert!(record["idempotency_key"].is_null() && record["responses"].is_null());

    // The key `k` was never taken: a good answer under it is accepted and delivered.
    let answered = server.answer(&round_id, &answer("k"));
    assert_eq!(answered.status, 200, "{}", answered.body);
    let (out, lines) = run.finish();
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "succeeded");
}

/// While the worker cannot deliver (its process is stopped), the answer waits
/// `response_validated`: a retry with the same key and answers is 200 again, the same key with
/// other answers 409 `idempotency_conflict`, another key 409 `invalid_transition` (as `m3
/// respond` says too). Resumed, the worker delivers the answer exactly once.
#[test]
fn a_retry_is_idempotent_and_a_second_answer_is_refused() {
    let sb = Sandbox::new();
    sb.create_database();
    let transcript = sb.dir.path().join("received.jsonl");
    let transcript_arg = transcript.to_str().expect("a UTF-8 path");
    let server = Server::start(&sb, &[], None);
    let run = sb.spawn_run(
        "legacy",
        &["--transcript", transcript_arg],
        &["--lease", "300"],
    );
    let (round_id, execution_id) = ids(&server.wait_pending());
    let pid = run.guard.child.id();
    signal(pid, libc::SIGSTOP);

    let first = server.answer(&round_id, &answer("retry-key"));
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["status"], "response_validated");
    let retry = server.answer(&round_id, &answer("retry-key"));
    assert_eq!(retry.status, 200, "{}", retry.body);
    assert_eq!(retry.body["status"], "response_validated");
    assert_eq!(retry.body["responses"], first.body["responses"]);
    assert_eq!(
        retry.body["updated_at"], first.body["updated_at"],
        "unchanged"
    );
    let conflict = server.answer(&round_id, &answer_street("1 Other Road", "retry-key"));
    assert_problem(
        &conflict,
        409,
        "ManagedInputConflict",
        "idempotency_conflict",
    );
    let second = server.answer(&round_id, &answer_street("1 Other Road", "other-key"));
    assert_problem(&second, 409, "ManagedInputStateError", "invalid_transition");
    let cli = sb.m3(&[
        "--json",
        "respond",
        &round_id,
        "--idempotency-key",
        "cli-key",
        "--accept",
        &accept_address(),
    ]);
    cli.fails_with("ManagedInputStateError");
    let line: Value = serde_json::from_str(cli.first_stderr_line()).expect("a JSON error");
    assert_eq!(line["error"]["code"], "invalid_transition");

    signal(pid, libc::SIGCONT);
    let (out, lines) = run.finish();
    let result = check_run_stdout(&out, &lines);
    assert_eq!(
        result["tool_calls"][0]["output"],
        format!("Booked shipment to {STREET}, {CITY}"),
        "the first answer is the one delivered"
    );
    // After the end, the same retry is still acknowledged (nothing is delivered again).
    let after = server.answer(&round_id, &answer("retry-key"));
    assert_eq!(after.status, 200, "{}", after.body);
    assert_eq!(after.body["status"], "resolved");
    assert_eq!(after.body["delivery_attempts"], 1);
    let status = server.get(&format!("/api/executions/{execution_id}"));
    assert_eq!(status.body["outcome"], "succeeded");
    let received = std::fs::read_to_string(&transcript).expect("the server's transcript");
    let deliveries: Vec<&str> = received
        .lines()
        .filter(|l| l.contains(r#""action":"accept""#))
        .collect();
    assert_eq!(deliveries.len(), 1, "delivered once: {received}");
    assert!(deliveries[0].contains(STREET), "{}", deliveries[0]);
}

/// Unknown ids are 404 with their code on every endpoint that takes one; a prefix that several
/// ids share is 400 `ambiguous_id`; `?execution=` lists only that execution's rounds.
#[test]
fn unknown_ids_are_not_found_and_shared_prefixes_are_ambiguous() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let runs = [
        sb.spawn_run("legacy", &[], &[]),
        sb.spawn_run("modern", &[], &[]),
    ];
    let rounds = server.wait_pending_count(2);
    for round in &rounds {
        let execution_id = round["execution_id"].as_str().expect("an id");
        let filtered = server.get(&format!(
            "/api/rounds/pending?execution={}",
            &execution_id[..14]
        ));
        assert_eq!(filtered.status, 200, "{}", filtered.body);
        assert_eq!(filtered.body, json!([round]), "only this execution's round");
    }
    let none = server.get("/api/rounds/pending?execution=exec-nope");
    assert_eq!(none.status, 200, "{}", none.body);
    assert_eq!(
        none.body,
        sb.m3(&["pending", "--execution", "exec-nope", "--json"])
            .json(),
        "as `m3 pending --execution` says"
    );

    for (method, path, code) in [
        ("GET", "/api/rounds/exec-nope-r1", "round_not_found"),
        (
            "POST",
            "/api/rounds/exec-nope-r1/responses",
            "round_not_found",
        ),
        ("GET", "/api/executions/exec-nope", "execution_not_found"),
        (
            "GET",
            "/api/executions/exec-nope/events",
            "execution_not_found",
        ),
        (
            "POST",
            "/api/executions/exec-nope/cancel",
            "execution_not_found",
        ),
    ] {
        let reply = match method {
            "GET" => server.get(path),
            _ => server.post(path, &answer("k")),
        };
        assert_eq!(reply.status, 404, "{method} {path}: {}", reply.body);
        assert_eq!(error_of(&reply).1, code, "{method} {path}: {}", reply.body);
    }
    // Both executions' ids start with `exec-`.
    for (method, path) in [
        ("GET", "/api/rounds/exec-"),
        ("POST", "/api/rounds/exec-/responses"),
        ("GET", "/api/executions/exec-"),
        ("GET", "/api/executions/exec-/events"),
        ("POST", "/api/executions/exec-/cancel"),
        ("GET", "/api/rounds/pending?execution=exec-"),
    ] {
        let reply = match method {
            "GET" => server.get(path),
            _ => server.post(path, &answer("k")),
        };
        assert_problem(&reply, 400, "ManagedInputValidationError", "ambiguous_id");
    }
    assert_eq!(server.wait_pending_count(2), rounds, "nothing changed");
    for round in &rounds {
        let (round_id, _) = ids(round);
        assert_eq!(server.answer(&round_id, &answer("k")).status, 200);
    }
    for run in runs {
        let (out, lines) = run.finish();
        assert_eq!(check_run_stdout(&out, &lines)["outcome"], "succeeded");
    }
}

/// Cancelling an execution that waits for an answer fails its round and finishes it
/// `cancelled` (the stream says both); cancelling it again is a harmless 200; an answer after
/// that is 410 `round_terminal`.
#[test]
fn cancelling_an_execution_fails_its_round_and_answers_are_gone() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let stream = server.subscribe();
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, execution_id) = ids(&server.wait_pending());
    let cancelled = server.post(&format!("/api/executions/{execution_id}/cancel"), "");
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    check_execution(&cancelled.body);
    assert_eq!(cancelled.body["cancel_requested"], true);
    let (out, lines) = run.finish();
    assert!(!out.status.success(), "a cancelled run exits non-zero");
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "cancelled");

    let status = server.get(&format!("/api/executions/{execution_id}"));
    assert_eq!(status.body["lifecycle"], "finished", "{}", status.body);
    assert_eq!(status.body["outcome"], "cancelled", "{}", status.body);
    let record = server.round(&round_id);
    assert_eq!(record["status"], "failed");
    assert_eq!(record["failure_code"], "cancelled", "{record}");
    let again = server.post(&format!("/api/executions/{execution_id}/cancel"), "");
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["outcome"], "cancelled");
    let late = server.answer(&round_id, &answer("late"));
    assert_problem(&late, 410, "ManagedInputStateError", "round_terminal");

    let life = stream.life_of(&execution_id);
    assert_eq!(
        kinds(&life),
        ["round_created", "round_failed", "execution_finished"],
        "{life:?}"
    );
    assert_eq!(life[2].1["outcome"], "cancelled");
}

/// A server that reads the answer and exits before replying (the Python SDK's booking server,
/// over stdio and over Streamable HTTP): the round is delivered, then failed `server_error`.
/// The answer's repeat (same key, same answer) says so, with the time of the delivery, through
/// `m3 respond` (also with `--wait`) and `POST /api/rounds/{id}/responses` (410
/// `delivered_then_failed`); `m3 respond --wait` on the first answer reports the failure with
/// the delivery. Never "not delivered", which would invite a second answer the server acts on.
#[test]
fn a_repeat_to_a_round_whose_server_died_after_the_answer_says_it_was_delivered() {
    let booking = m3_tests::peers::booking_server().expect("the booking server (installed)");
    let program = booking.program.to_str().expect("a UTF-8 path").to_string();
    let script_path = booking.args[0].to_str().expect("a UTF-8 path").to_string();
    for transport in ["stdio", "http"] {
        let sb = Sandbox::new();
        sb.create_database();
        let script = sb.write(
            "script.json",
            r#"{"steps": [{"tool": "booking:book_table_then_exit", "arguments": {"restaurant": "Chez M3"}}]}"#,
        );
        let peer = (transport == "http").then(|| {
            m3_tests::http_server::HttpServer::start(
                "booking_server.py over HTTP",
                m3_tests::peers::booking_http_server(false, 300).expect("the booking server"),
                &[],
                "/mcp",
            )
            .expect("the booking server over HTTP")
        });
        let mut args: Vec<String> = ["run", "--no-prompt", "--json", "--server-name", "booking"]
            .map(String::from)
            .to_vec();
        match &peer {
            Some(peer) => args.extend(["--server-url".into(), peer.url()]),
            None => args.extend([
                "--server-command".into(),
                program.clone(),
                "--server-arg".into(),
                script_path.clone(),
            ]),
        }
        args.extend(
            [
                "--server-era",
                "legacy",
                "--tool",
                "booking:book_table_then_exit",
                "--script",
                script.to_str().expect("a UTF-8 path"),
                "--human-input",
                "managed",
                "Book a table.",
            ]
            .map(String::from),
        );
        let run = sb.spawn(&args);
        let (round_id, _) = ids(&sb.wait_pending());
        let booking_answer = r#"elicitation={"name": "Asha", "guests": 3, "seating": "terrace"}"#;
        let respond = |extra: &[&str]| {
            let mut args = vec!["respond", round_id.as_str(), "--idempotency-key", "k-1"];
            args.extend(["--accept", booking_answer]);
            args.extend(extra);
            sb.m3(&args)
        };
        // The first answer, followed to the round's end: the failure, with the delivery.
        let first = respond(&["--wait", "60"]);
        let line = first.fails_with("ManagedInputStateError");
        assert!(line.contains("server_error"), "{transport}: {line}");
        assert!(
            line.contains("its answers were delivered to the server at"),
            "{transport}: {line}"
        );
        let (out, _) = run.finish();
        assert!(!out.status.success(), "{transport}: the run failed");
        let record = sb.show(&round_id);
        assert_eq!(record["status"], "failed", "{transport}: {record}");
        assert_eq!(
            record["failure_code"], "server_error",
            "{transport}: {record}"
        );
        let delivered = record["delivered_at"]
            .as_str()
            .unwrap_or_else(|| panic!("{transport}: the delivery is recorded: {record}"))
            .to_string();
        let says_delivered = |text: &str| {
            text.contains("delivered_then_failed")
                && text.contains(&format!("delivered to the server at {delivered}"))
                && text.contains("the server received them")
                && !text.contains("never")
        };
        // The repeats: the CLI, with and without --wait, then the API.
        for extra in [&[][..], &["--wait", "5"][..], &["--json"][..]] {
            let repeat = respond(extra);
            let line = repeat.fails_with("ManagedInputStateError");
            assert!(says_delivered(line), "{transport} {extra:?}: {line}");
        }
        let server = Server::start(&sb, &[], None);
        let body = json!({"responses": {"elicitation": {"action": "accept",
                            "content": {"name": "Asha", "guests": 3, "seating": "terrace"}}},
                          "idempotency_key": "k-1"});
        let repeat = server.answer(&round_id, &body.to_string());
        assert_problem(
            &repeat,
            410,
            "ManagedInputStateError",
            "delivered_then_failed",
        );
        let message = repeat.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            says_delivered(&format!("{message} (delivered_then_failed)")),
            "{transport}: {message}"
        );
        assert!(!repeat.body.to_string().contains("Asha"), "{}", repeat.body);
        // Nothing changed.
        assert_eq!(sb.show(&round_id), record, "{transport}");
    }
}

/// Every state a round can be in when an answer's repeat arrives, through `m3 respond` and the
/// API: a round that did not fail acknowledges the repeat; a failed one refuses it and says
/// what became of the answer, exactly as the round's timestamps record it.
#[test]
fn a_repeat_through_the_cli_and_the_api_states_the_delivery_in_every_state() {
    use m3::ManagedInputStore;
    let sb = Sandbox::new();
    let store =
        m3::SqliteManagedInputStore::open(&sb.db, m3::StoreOptions::default()).expect("the store");
    let answer_text = json!({"shipping_address": address_answer()}).to_string();
    // (round id, what happens after the answer, the repeat's code or none)
    let cases = [
        ("r-answered", "", None),
        ("r-resolved", "start deliver resolve", None),
        ("r-never", "fail", Some("round_terminal")),
        ("r-unconfirmed", "start fail", Some("delivery_unconfirmed")),
        (
            "r-delivered",
            "start deliver fail",
            Some("delivered_then_failed"),
        ),
        (
            "r-recovered",
            "start deliver recover",
            Some("delivered_then_failed"),
        ),
    ];
    for (id, steps, _) in cases {
        let lease = store
            // A lease far longer than the test: nothing recovers the open rounds meanwhile.
            .create_round(
                &m3_tests::address_round(id)
                    .owned_by(m3_tests::claim("worker-1", Duration::from_secs(3_600))),
            )
            .expect("create_round")
            .lease
            .expect("an owned round");
        store
            .submit_responses_json(id, &answer_text, "key-1")
            .expect("the answer");
        for step in steps.split_whitespace() {
            match step {
                "start" => drop(store.start_delivery(id, &lease, "d-1").expect("start")),
                "deliver" => drop(store.mark_delivered(id, &lease).expect("deliver")),
                "resolve" => drop(store.resolve(id, &lease).expect("resolve")),
                "fail" => drop(
                    store
                        .fail(
                            id,
                            &lease,
                            m3::FailureCode::ServerError,
                            "the server exited",
                        )
                        .expect("fail"),
                ),
                "recover" => drop(
                    store
                        .fail_recovery(id, Some(&lease), "its worker is gone")
                        .expect("recover"),
                ),
                other => unreachable!("{other}"),
            }
        }
    }
    let server = Server::start(&sb, &[], None);
    for (id, _, code) in cases {
        let before = sb.show(id);
        let cli = sb.m3(&[
            "respond",
            id,
            "--idempotency-key",
            "key-1",
            "--accept",
            &accept_address(),
        ]);
        let api = server.answer(id, &answer("key-1"));
        let fact = |at: &str| before[at].as_str().map(str::to_string);
        match code {
            None => {
                cli.ok();
                assert_eq!(api.status, 200, "{id}: {}", api.body);
                assert!(!cli.stdout.contains("failed"), "{id}: {}", cli.stdout);
            }
            Some(code) => {
                let line = cli.fails_with("ManagedInputStateError").to_string();
                assert_problem(&api, 410, "ManagedInputStateError", code);
                let message = api.body["error"]["message"].as_str().unwrap_or_default();
                assert!(line.contains(message), "{id}: {line} / {message}");
                assert!(line.ends_with(&format!("({code})")), "{id}: {line}");
                let expected = match code {
                    "delivered_then_failed" => format!(
                        "delivered to the server at {}",
                        fact("delivered_at").expect("delivered")
                    ),
                    "delivery_unconfirmed" => format!(
                        "started at {} and was never confirmed",
                        fact("delivery_started_at").expect("started")
                    ),
                    _ => "the server never received them".to_string(),
                };
                assert!(line.contains(&expected), "{id}: {line}");
            }
        }
        assert_eq!(sb.show(id), before, "{id}: the repeat changed the round");
    }
}

/// A round whose worker died (its lease expired, nobody recovered it yet) can never be
/// delivered: 410 `recovery_unavailable`, and the listing's recovery pass fails it.
#[test]
fn a_round_whose_worker_is_gone_is_gone() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let mut run = sb.spawn_run("legacy", &[], &["--lease", "2"]);
    let (round_id, _) = ids(&server.wait_pending());
    run.guard.kill();
    // Past the lease's expiry, by the same clock the store uses.
    let until = Instant::now() + RUN_TIMEOUT;
    loop {
        let record = server.round(&round_id);
        let expires = timestamp(&record["lease_expires_at"], "lease_expires_at");
        if chrono::Utc::now() > expires + chrono::Duration::milliseconds(200) {
            break;
        }
        assert!(Instant::now() < until, "the lease never expired: {record}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let late = server.answer(&round_id, &answer("k"));
    assert_problem(
        &late,
        410,
        "ManagedInputRecoveryError",
        "recovery_unavailable",
    );
    assert_eq!(
        server.round(&round_id)["status"],
        "pending",
        "not failed yet"
    );
    assert_eq!(server.get("/api/rounds/pending").body, json!([]));
    let record = server.round(&round_id);
    assert_eq!(record["status"], "failed");
    assert_eq!(record["failure_code"], "recovery_unavailable");
}

/// A record the component cannot read is a 500 `StorageError` where it is asked for, and hides
/// nothing else: the listing and the event stream go on with the other rounds.
#[test]
fn an_unreadable_record_is_a_server_error_and_hides_nothing_else() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let stream = server.subscribe();
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, execution_id) = ids(&server.wait_pending());
    // An unreadable round of another execution (its document is not the component's).
    sb.insert_unreadable_round(&round_id, Some("exec-broken"));
    for reply in [
        server.get("/api/rounds/broken-round"),
        server.answer("broken-round", &answer("k")),
    ] {
        assert_eq!(reply.status, 500, "{}", reply.body);
        assert_eq!(error_of(&reply).0, "StorageError", "{}", reply.body);
    }
    let pending = server.get("/api/rounds/pending");
    assert_eq!(pending.status, 200, "{}", pending.body);
    assert_eq!(
        pending.body.as_array().map(Vec::len),
        Some(1),
        "{}",
        pending.body
    );
    assert_eq!(server.answer(&round_id, &answer("k")).status, 200);
    let (out, lines) = run.finish();
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "succeeded");
    let life = stream.life_of(&execution_id);
    assert_eq!(
        kinds(&life),
        [
            "round_created",
            "round_answered",
            "round_resolved",
            "execution_finished"
        ],
        "{life:?}"
    );
}

/// With a token, every endpoint refuses a call without it or with a wrong one (401, nothing
/// done, the token never quoted); bodies are bounded (413), whether their size is declared or
/// not.
#[test]
fn a_token_guards_every_call_and_bodies_are_bounded() {
    let sb = Sandbox::new();
    sb.create_database();
    let token = "s3cret-token-for-the-test";
    let file = sb.write("token.txt", &format!("{token}\n"));
    let server = Server::start(
        &sb,
        &["--token-file", file.to_str().expect("a UTF-8 path")],
        Some(token),
    );
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, execution_id) = ids(&server.wait_pending());
    let endpoints = [
        ("GET", "/api/rounds/pending".to_string()),
        ("GET", format!("/api/rounds/{round_id}")),
        ("POST", format!("/api/rounds/{round_id}/responses")),
        ("GET", "/api/executions".to_string()),
        ("GET", format!("/api/executions/{execution_id}")),
        ("GET", format!("/api/executions/{execution_id}/events")),
        ("POST", format!("/api/executions/{execution_id}/cancel")),
        ("GET", "/api/events/stream".to_string()),
    ];
    for header in [
        None,
        Some("Bearer wrong"),
        Some("Bearer"),
        Some("Basic s3cret-token-for-the-test"),
        Some("Bearer s3cret-token-for-the-tes"),
        Some("Bearer s3cret-token-for-the-test2"),
    ] {
        for (method, path) in &endpoints {
            let url = format!("{}{path}", server.base);
            // A client of its own for each call: a refused POST is answered before its body
            // is read, and the server then closes that connection, which a pooled client
            // could try to reuse.
            let bare = agent();
            let reply = if *method == "GET" {
                let mut request = bare.get(&url);
                if let Some(header) = header {
                    request = request.header("Authorization", header);
                }
                Server::reply(request.call())
            } else {
                let mut request = bare.post(&url);
                if let Some(header) = header {
                    request = request.header("Authorization", header);
                }
                Server::reply(request.send(answer("k")))
            };
            assert_problem(&reply, 401, "ManagedInputValidationError", "unauthorized");
            assert!(!reply.body.to_string().contains(token));
        }
    }
    assert_eq!(server.round(&round_id)["status"], "pending");
    let status = server.get(&format!("/api/executions/{execution_id}"));
    assert_eq!(status.body["cancel_requested"], false, "nothing was done");

    // Said in the request's head: the server answers at once, reading none of the body.
    let size = 8 * 1024 * 1024 + 4096;
    let head = format!(
        "POST /api/rounds/{round_id}/responses HTTP/1.1\r\nHost: {}\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Content-Length: {size}\r\nConnection: close\r\n\r\n",
        server.address
    );
    let mut request = head.into_bytes();
    request.extend(std::iter::repeat_n(b' ', size));
    let mut socket = raw(&server.address, b"");
    let reply = {
        let mut socket = socket.try_clone().expect("a second handle");
        std::thread::spawn(move || raw_answer(&mut socket))
    };
    // The server stops reading once it has answered: a failed write is no failure here.
    let _ = socket.write_all(&request);
    let (status, body) = reply.join().expect("the answer");
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("payload_too_large"), "{body}");

    // Not said (chunked): read up to the limit, then refused.
    let (status, body) = chunked_past_the_limit(&server, &round_id, token);
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("payload_too_large"), "{body}");
    assert_eq!(server.round(&round_id)["status"], "pending");

    let answered = server.answer(&round_id, &answer("k"));
    assert_eq!(answered.status, 200, "{}", answered.body);
    let (out, lines) = run.finish();
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "succeeded");
}

/// Sends a chunked body of 9 MiB (64 KiB chunks) to the answer endpoint until the server
/// answers; its status and body.
fn chunked_past_the_limit(server: &Server, round_id: &str, token: &str) -> (u16, String) {
    let mut socket = raw(
        &server.address,
        format!(
            "POST /api/rounds/{round_id}/responses HTTP/1.1\r\nHost: {}\r\n\
             Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            server.address
        )
        .as_bytes(),
    );
    // Read while writing: the answer comes before the body ends, and the server may then
    // close with unread bytes (a reset) before a write-then-read client would look.
    let answer = {
        let mut socket = socket.try_clone().expect("a second handle");
        std::thread::spawn(move || raw_answer(&mut socket))
    };
    let chunk = vec![b' '; 64 * 1024];
    for _ in 0..(9 * 16) {
        let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
        frame.extend_from_slice(&chunk);
        frame.extend_from_slice(b"\r\n");
        if socket.write_all(&frame).is_err() {
            break; // The server answered and closed: read what it said.
        }
    }
    let _ = socket.write_all(b"0\r\n\r\n");
    answer.join().expect("the answer")
}

/// With a token, the stream carries an answer given by `m3 respond` in another process (the
/// store's change, seen by the watcher, not a nudge from the API): the round's whole life, in
/// order.
#[test]
fn the_stream_carries_an_answer_given_by_another_process() {
    let sb = Sandbox::new();
    sb.create_database();
    let token = "stream-token-5c2e";
    let mut cmd = sb.command(&["serve", "--listen", "127.0.0.1:0"]);
    cmd.env("M3_SERVE_TOKEN", token);
    let server = Server::spawn(cmd, Some(token));
    let stream = server.subscribe();
    let run = sb.spawn_run("modern", &[], &[]);
    let (kind, data) = stream.next_event();
    assert_eq!(kind, "round_created", "{data}");
    let round_id = data["round_id"].as_str().expect("a round id").to_string();
    let execution_id = data["execution_id"].as_str().expect("an id").to_string();
    sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "cli-1",
        "--accept",
        &accept_address(),
    ])
    .ok();
    let life = stream.life_of(&execution_id);
    assert_eq!(
        kinds(&life),
        ["round_answered", "round_resolved", "execution_finished"],
        "{life:?}"
    );
    assert_eq!(life[2].1["outcome"], "succeeded");
    let (out, lines) = run.finish();
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "succeeded");
}

/// An idle stream sends keep-alive comments (every `--keep-alive-secs`, a hidden knob; 15 s by
/// default) and no event.
#[test]
fn an_idle_stream_sends_keep_alive_comments() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &["--keep-alive-secs", "0.2"], None);
    let stream = server.subscribe();
    for _ in 0..3 {
        assert_eq!(stream.next_item(RUN_TIMEOUT), Some(Item::Comment));
    }
    // The knobs are hidden.
    let help = sb.m3(&["serve", "--help"]);
    let help = &help.ok().stdout;
    for knob in [
        "keep-alive",
        "request-timeout",
        "event-capacity",
        "send-buffer",
    ] {
        assert!(!help.contains(knob), "{help}");
    }
}

/// A subscriber that stops reading holds up nobody: while its buffers are full, another
/// subscriber gets every change in order and the API answers; once it reads again, it is told
/// it missed changes (`lagged`, with how many), then gets the newer ones. The hidden knobs
/// make its buffers small (`--event-capacity 8`, `--send-buffer-bytes 4096`, and its own
/// receive buffer) so that a few hundred kilobytes of changes overflow them.
#[test]
fn a_stalled_subscriber_lags_alone() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(
        &sb,
        &["--event-capacity", "8", "--send-buffer-bytes", "4096"],
        None,
    );
    let reader = server.subscribe();
    let mut stalled = stalled_subscriber(&server.address);

    // Rounds with long ids (500 bytes each: about 1.1 KB an event), made as a worker makes
    // them, four at a time (under the capacity, so a subscriber that reads never lags).
    let store = m3::SqliteManagedInputStore::open(&sb.db, m3::StoreOptions::default())
        .expect("opening the store");
    let total = 200;
    for batch in 0..total / 4 {
        for i in batch * 4..batch * 4 + 4 {
            create_round(&store, i);
        }
        for i in batch * 4..batch * 4 + 4 {
            let (kind, data) = reader.next_event();
            assert_eq!(kind, "round_created", "{data}");
            assert_eq!(data["round_id"], long_id("r", i), "in order, none missed");
        }
        // The API answers meanwhile (a call that runs no recovery pass: these rounds' owner
        // is this test, whose leases are left to expire).
        if batch % 10 == 0 {
            let record = server.round(&long_id("r", batch * 4));
            assert_eq!(record["status"], "pending");
        }
    }

    // The stalled subscriber reads again: what was in its buffers, then `lagged`, then newer
    // changes.
    create_round(&store, total);
    assert_eq!(reader.next_event().1["round_id"], long_id("r", total));
    stalled
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("a read timeout");
    let mut text = Vec::new();
    let until = Instant::now() + RUN_TIMEOUT;
    let newest = long_id("r", total);
    while !String::from_utf8_lossy(&text).contains(&newest) {
        assert!(
            Instant::now() < until,
            "the stalled subscriber never got the newest change"
        );
        let mut buffer = [0u8; 64 * 1024];
        match stalled.read(&mut buffer) {
            Ok(0) => panic!("the stalled subscriber's stream ended"),
            Ok(n) => text.extend_from_slice(&buffer[..n]),
            Err(_) => {} // Nothing yet.
        }
    }
    let text = String::from_utf8_lossy(&text);
    let missed: u64 = text
        .split("event: lagged\ndata: ")
        .skip(1)
        .map(|after| {
            let data: Value = serde_json::from_str(after.lines().next().unwrap_or_default())
                .expect("lagged's data");
            data["missed"].as_u64().expect("how many were missed")
        })
        .sum();
    let received = text.matches("event: round_created").count() as u64;
    assert!(
        missed > 0,
        "no `lagged` event for the stalled subscriber ({received} received)"
    );
    assert_eq!(
        received + missed,
        total as u64 + 1,
        "every change is either received or counted as missed"
    );
}

/// A non-loopback address without a token is refused at start; the hidden knobs are checked
/// like every flag.
#[test]
fn serve_refuses_to_start_unsafely() {
    let sb = Sandbox::new();
    sb.create_database();
    let out = sb.m3(&["serve", "--listen", "0.0.0.0:0"]);
    assert!(!out.status.success());
    assert!(
        out.fails_with("ManagedInputValidationError")
            .contains("token_required"),
        "{}",
        out.stderr
    );
    let out = sb.m3(&["--json", "serve", "--listen", "0.0.0.0:0"]);
    let error: Value =
        serde_json::from_str(out.stderr.lines().next().unwrap_or_default()).expect("a JSON error");
    assert_eq!(error["error"]["code"], "token_required");
    for knob in [
        ["--keep-alive-secs", "0"],
        ["--request-timeout-secs", "0"],
        ["--event-capacity", "0"],
    ] {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend(knob);
        sb.m3(&args).fails_with("ManagedInputValidationError");
    }
}

/// A team opens the inbox before anything ran: `m3 serve` on a database that does not exist
/// starts, creates nothing, answers every call with 503 `database_waiting` naming the path it
/// waits for (so a typo shows), and serves the page; once `m3 run` creates the database, the
/// open event stream says the round it created, the API lists and answers it, and a
/// notification target hears of it.
#[test]
fn serve_on_a_database_not_yet_created_waits_for_it() {
    let sb = Sandbox::new();
    let hook = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hook_address = hook.local_addr().unwrap();
    let server = Server::start(
        &sb,
        &["--notify", &format!("http://{hook_address}/hook")],
        None,
    );
    let waiting = server.get("/api/rounds/pending");
    assert_problem(&waiting, 503, "StorageError", "database_waiting");
    let message = waiting.body["error"]["message"].as_str().unwrap();
    assert!(message.contains(&sb.db.display().to_string()), "{message}");
    let page = server.exchange("GET", "/", &[("accept", "text/html")], None);
    assert_eq!(page.status, 200);
    assert!(!sb.db.exists(), "waiting creates nothing");
    let stream = server.subscribe();

    let run = sb.spawn_run("legacy", &[], &[]);
    sb.wait_pending();
    // The server opens the database within a look of its creation.
    let opened = Instant::now();
    while server.get("/api/rounds/pending").status == 503 {
        assert!(opened.elapsed() < Duration::from_secs(30), "never opened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let round = server.wait_pending();
    let (round_id, execution_id) = ids(&round);
    let (kind, data) = stream.next_event();
    assert_eq!(kind, "round_created", "{data}");
    assert_eq!(data["round_id"], round_id.as_str());
    // The notification target hears of the round (one request, read whole).
    hook.set_nonblocking(true).unwrap();
    let heard = Instant::now();
    let mut socket = loop {
        match hook.accept() {
            Ok((socket, _)) => break socket,
            Err(_) => {
                assert!(heard.elapsed() < Duration::from_secs(60), "no notification");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    socket.set_nonblocking(false).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut request = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&request).contains(&round_id) {
        let n = socket.read(&mut buffer).expect("the notification");
        assert!(n > 0, "{}", String::from_utf8_lossy(&request));
        request.extend_from_slice(&buffer[..n]);
    }
    assert!(String::from_utf8_lossy(&request).starts_with("POST /hook HTTP/1.1"));
    socket
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        .unwrap();

    let answered = server.answer(&round_id, &answer("late-1"));
    assert_eq!(answered.status, 200, "{}", answered.body);
    let (out, lines) = run.finish();
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "succeeded");
    assert_eq!(
        kinds(&stream.life_of(&execution_id)),
        ["round_answered", "round_resolved", "execution_finished"]
    );
    let (_, stderr) = server.stop();
    assert!(
        stderr.contains(&format!(
            "waiting for the first execution to create the database at {}",
            sb.db.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("exists now"), "{stderr}");
}

/// Every refusal of the API is its typed JSON error, also where the router or a request's own
/// syntax refuses: a path no route has (404 `route_not_found`), a method a route does not take
/// (405 `method_not_allowed`, its `Allow` header kept), an id that is not UTF-8 once decoded
/// (400 `invalid_path`), a query parameter given twice (400 `invalid_query`), a body that is
/// not JSON (400 `malformed_json`). A browser's `GET` of a page path that is none gets an HTML
/// page saying so (404), never an empty body.
#[test]
fn every_refusal_of_the_api_is_typed_json() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let json = [("Content-Type", "application/json")];
    let cases: [(&str, &str, Option<&str>, u16, &str); 15] = [
        ("GET", "/api/nothing", None, 404, "route_not_found"),
        ("GET", "/api", None, 404, "route_not_found"),
        ("POST", "/api/rounds", Some("{}"), 404, "route_not_found"),
        ("DELETE", "/nothing", None, 404, "route_not_found"),
        (
            "DELETE",
            "/api/rounds/pending",
            None,
            405,
            "method_not_allowed",
        ),
        (
            "GET",
            "/api/rounds/r/responses",
            None,
            405,
            "method_not_allowed",
        ),
        (
            "PUT",
            "/api/executions/e",
            Some("{}"),
            405,
            "method_not_allowed",
        ),
        ("PUT", "/login", Some("{}"), 405, "method_not_allowed"),
        ("GET", "/api/rounds/%ff", None, 400, "invalid_path"),
        (
            "GET",
            "/api/executions/%ff%fe/events",
            None,
            400,
            "invalid_path",
        ),
        (
            "POST",
            "/api/executions/%c3/cancel",
            Some("{}"),
            400,
            "invalid_path",
        ),
        (
            "GET",
            "/api/rounds/pending?execution=a&execution=b",
            None,
            400,
            "invalid_query",
        ),
        (
            "POST",
            "/api/rounds/r/responses",
            Some("{not json"),
            400,
            "malformed_json",
        ),
        (
            "POST",
            "/api/rounds/r/responses",
            Some("[]"),
            400,
            "malformed_json",
        ),
        (
            "POST",
            "/api/rounds/r/responses",
            Some(r#"{"responses": {}, "responses": {}, "idempotency_key": "k"}"#),
            400,
            "malformed_json",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let exchange = server.exchange(method, path, &json, body);
        let what = format!("{method} {path}");
        assert_eq!(exchange.status, status, "{what}: {}", exchange.text);
        let reply = exchange.reply();
        assert_problem(&reply, status, "ManagedInputValidationError", code);
        if status == 405 {
            assert!(
                exchange.header("allow").is_some(),
                "{what}: no Allow header"
            );
        }
    }

    // A page that is none, as a browser asks for it: an HTML page, not an empty body.
    let page = server.exchange("GET", "/nothing/here", &[], None);
    assert_eq!(page.status, 404, "{}", page.text);
    assert_eq!(page.media_type(), "text/html", "{:?}", page.headers);
    assert!(page.text.contains("No such page"), "{}", page.text);
    // The routes still answer.
    assert_eq!(server.get("/api/rounds/pending?execution=a").status, 200);
    assert_eq!(server.get("/api/executions").status, 200);
}

/// With a token, a path or method no route has is behind the guard like the routes: a caller
/// without the token learns nothing but `unauthorized` (a page asked by a browser goes to the
/// login form, as every page does).
#[test]
fn unknown_paths_are_behind_the_guard() {
    let sb = Sandbox::new();
    sb.create_database();
    let token = "guard-Secret-41f0";
    let server = Server::start(&sb, &["--token", token], None);
    for (method, path) in [
        ("GET", "/api/nothing"),
        ("DELETE", "/api/rounds/pending"),
        ("GET", "/api/rounds/%ff"),
    ] {
        let exchange = server.exchange(method, path, &[], None);
        assert_problem(
            &exchange.reply(),
            401,
            "ManagedInputValidationError",
            "unauthorized",
        );
    }
    let page = server.exchange("GET", "/nothing", &[], None);
    assert_eq!(page.status, 303, "{}", page.text);
    assert_eq!(page.header("location"), Some("/login?next=/nothing"));
    let bearer = format!("Bearer {token}");
    let known = server.exchange("GET", "/api/nothing", &[("Authorization", &bearer)], None);
    assert_problem(
        &known.reply(),
        404,
        "ManagedInputValidationError",
        "route_not_found",
    );
}

/// Whether a `Location` keeps a browser on the origin it came from: a path that starts with
/// exactly one `/`, with no `\`, whitespace or control character a browser would drop or
/// reinterpret (`/\t/evil.example` is `//evil.example` to a browser).
fn stays_on_the_origin(location: &str) -> bool {
    location.starts_with('/')
        && !location[1..].starts_with(['/', '\\'])
        && location.bytes().all(|b| b.is_ascii_graphic() && b != b'\\')
}

/// `text` percent-encoded for a form or query value (every byte but unreserved ones).
fn form_value(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// After logging in a browser goes back only to a path of this server. `GET /login` drops a
/// `next` that is none (the form leads to the inbox); `POST /login` with one, even with the
/// right token, is refused with 400 and the login page, and sets nothing: no cookie, no
/// `Location` (a CR or LF in `next` was a 500 that set the cookie; `/\t/evil.example` was
/// followed to `//evil.example`). A form that cannot be read sets nothing either.
#[test]
fn a_login_leads_only_to_a_path_of_this_server() {
    let sb = Sandbox::new();
    sb.create_database();
    let token = "login-Secret-5e2a";
    let server = Server::start(&sb, &["--token", token], None);
    let outside = [
        "/\t/evil.example",
        "/%09/evil.example",
        "//evil.example",
        "/\\evil.example",
        "\\\\evil.example",
        "https://evil.example",
        "/%2F/evil.example",
        "/\r\nSet-Cookie: m3_session=x",
        "/\r",
        "/\n//evil.example",
        "/x\u{0}",
        "",
    ];

    for next in outside {
        let form = server.exchange(
            "GET",
            &format!("/login?next={}", form_value(next)),
            &[],
            None,
        );
        assert_eq!(form.status, 200, "{next:?}: {}", form.text);
        assert_eq!(form.media_type(), "text/html");
        assert!(
            form.text.contains(r#"name="next" value="/""#),
            "{next:?}: the form keeps a next that is no path of this server: {}",
            form.text
        );
    }
    let form = server.exchange("GET", "/login?next=%2Frounds%2Fabc", &[], None);
    assert!(form.text.contains(r#"name="next" value="/rounds/abc""#));

    let login = |next: Option<&str>, token: &str| {
        let mut body = format!("token={}", form_value(token));
        if let Some(next) = next {
            body.push_str(&format!("&next={}", form_value(next)));
        }
        server.exchange(
            "POST",
            "/login",
            &[
                ("Content-Type", "application/x-www-form-urlencoded"),
                ("Origin", &server.base),
            ],
            Some(&body),
        )
    };
    for next in outside {
        let refused = login(Some(next), token);
        assert_eq!(refused.status, 400, "{next:?}: {}", refused.text);
        assert_eq!(refused.header("set-cookie"), None, "{next:?}");
        assert_eq!(refused.header("location"), None, "{next:?}");
        assert_eq!(refused.media_type(), "text/html", "{next:?}");
        assert!(
            refused.text.contains("not a path on this server"),
            "{next:?}: {}",
            refused.text
        );
        assert!(!refused.text.contains(token));
    }
    // A form that cannot be read (no token field; not a form at all) sets nothing either.
    for (kind, body) in [
        ("application/x-www-form-urlencoded", "next=%2F"),
        ("application/json", r#"{"token": "login-Secret-5e2a"}"#),
    ] {
        let refused = server.exchange(
            "POST",
            "/login",
            &[("Content-Type", kind), ("Origin", &server.base)],
            Some(body),
        );
        assert!(
            (400..500).contains(&refused.status),
            "{kind}: {}",
            refused.status
        );
        assert_eq!(refused.header("set-cookie"), None);
        assert_eq!(refused.media_type(), "text/html", "{kind}");
        assert!(
            refused.text.contains("could not be read"),
            "{}",
            refused.text
        );
    }
    // A wrong token with a good next: the form again, keeping next.
    let wrong = login(Some("/rounds/abc"), "wrong");
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.header("set-cookie"), None);
    assert!(wrong.text.contains(r#"name="next" value="/rounds/abc""#));

    // The right token with a path of this server (or none): there, logged in.
    for (next, target) in [(Some("/rounds/abc?x=1"), "/rounds/abc?x=1"), (None, "/")] {
        let done = login(next, token);
        assert_eq!(done.status, 303, "{next:?}: {}", done.text);
        let location = done.header("location").expect("a Location");
        assert_eq!(location, target);
        assert!(stays_on_the_origin(location));
        let cookie = done.header("set-cookie").expect("the session cookie");
        assert!(cookie.starts_with("m3_session=") && !cookie.contains(token));
    }

    // The guard's own redirect to the login form names only a path of this server.
    let page = server.exchange("GET", "/rounds/abc?tab=1", &[], None);
    assert_eq!(page.status, 303);
    let location = page.header("location").expect("a Location");
    assert_eq!(location, "/login?next=/rounds/abc%3Ftab%3D1");
}

/// Without a token only requests addressed to a loopback name are answered, the `Host` read as
/// a host and an optional numeric port and the host compared whole: user information
/// (`localhost:1@evil.example`, whose host is `evil.example`) or a name that only starts like
/// a loopback one (`[::1].evil.example`) is refused like any other foreign host.
#[test]
fn only_a_loopback_host_is_answered_without_a_token() {
    let sb = Sandbox::new();
    sb.create_database();
    let server = Server::start(&sb, &[], None);
    let ask = |host: &str| {
        let mut socket = raw(
            &server.address,
            format!("GET /api/session HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        );
        raw_answer_with_head(&mut socket)
    };
    for host in [
        "localhost:1@evil.example",
        "localhost@evil.example",
        "127.0.0.1:8383@evil.example",
        "[::1].evil.example",
        "[::1]evil.example",
        "localhost.evil.example",
        "localhost.",
        "localhost:x",
        "evil.example",
        "evil.example:8383",
    ] {
        let (status, head, body) = ask(host);
        assert_eq!(status, 403, "{host}: {body}");
        assert!(
            head.contains("content-type: application/json"),
            "{host}: {head}"
        );
        let body: Value = serde_json::from_str(&body).expect("a JSON error");
        assert_eq!(body["error"]["code"], "host_refused", "{host}");
    }
    for host in [
        server.address.as_str(),
        "localhost:1",
        "LOCALHOST",
        "[::1]:8383",
        "127.0.0.2",
    ] {
        let (status, _, body) = ask(host);
        assert_eq!(status, 200, "{host}: {body}");
    }
}

/// A blank token (empty, spaces, tabs) is refused wherever it is given: `--token`,
/// `M3_SERVE_TOKEN` (set and empty too), a `--token-file` whose first line is blank, and so is
/// one with a control character. Each is a typed error with its code and exit code 1, the
/// token's text never quoted, and the server never listens (it prints no address). A token
/// with surrounding whitespace is the token without it, from every source.
#[test]
fn a_blank_token_is_refused_wherever_it_is_given() {
    let sb = Sandbox::new();
    sb.create_database();
    let blank_file = sb.write("blank-token", " \t \n\nsecond-line-token\n");
    let empty_file = sb.write("empty-token", "");
    let path = |p: &std::path::Path| p.to_str().expect("a UTF-8 path").to_string();
    let (blank_file, empty_file) = (path(&blank_file), path(&empty_file));
    let cases: Vec<(&str, Vec<&str>, Option<&str>, &str)> = vec![
        ("127.0.0.1:0", vec!["--token", " "], None, "empty_token"),
        ("127.0.0.1:0", vec!["--token", ""], None, "empty_token"),
        (
            "127.0.0.1:0",
            vec!["--token", " \t \t "],
            None,
            "empty_token",
        ),
        ("0.0.0.0:0", vec!["--token", " "], None, "empty_token"),
        ("127.0.0.1:0", vec![], Some("   "), "empty_token"),
        ("127.0.0.1:0", vec![], Some("\t\t"), "empty_token"),
        ("0.0.0.0:0", vec![], Some(" \t "), "empty_token"),
        ("127.0.0.1:0", vec![], Some(""), "empty_token"),
        (
            "127.0.0.1:0",
            vec!["--token-file", &blank_file],
            None,
            "empty_token",
        ),
        (
            "0.0.0.0:0",
            vec!["--token-file", &empty_file],
            None,
            "empty_token",
        ),
        (
            "127.0.0.1:0",
            vec!["--token", "ctl-Secret\u{7}-93bd"],
            None,
            "invalid_token",
        ),
        (
            "127.0.0.1:0",
            vec![],
            Some("env-Secret\u{1b}[2J"),
            "invalid_token",
        ),
    ];
    for (listen, extra, variable, code) in cases {
        for json in [false, true] {
            let mut cmd = sb.bare();
            cmd.arg("--db").arg(&sb.db);
            if json {
                cmd.arg("--json");
            }
            cmd.args(["serve", "--listen", listen]).args(&extra);
            match variable {
                Some(value) => cmd.env("M3_SERVE_TOKEN", value),
                None => cmd.env_remove("M3_SERVE_TOKEN"),
            };
            let what = format!("{listen} {extra:?} M3_SERVE_TOKEN={variable:?}");
            let out = never_listens(cmd, &what);
            assert_eq!(out.status.code(), Some(1), "{what}: {}", out.stderr);
            let first = out.fails_with("ManagedInputValidationError").to_string();
            if json {
                let error: Value = serde_json::from_str(&first).expect("a JSON error");
                assert_eq!(error["error"]["code"], code, "{what}: {first}");
            } else {
                assert!(first.ends_with(&format!("({code})")), "{what}: {first}");
            }
            for secret in ["ctl-Secret", "env-Secret", "second-line-token"] {
                assert!(!out.stderr.contains(secret), "{what}: {}", out.stderr);
            }
        }
    }

    // Surrounding whitespace is not part of the token, wherever it comes from.
    let mut cmd = sb.command(&["serve", "--listen", "127.0.0.1:0"]);
    cmd.env("M3_SERVE_TOKEN", "  env-token-2c9d\t");
    let server = Server::spawn(cmd, Some("env-token-2c9d"));
    assert_eq!(server.get("/api/session").status, 200);
    let server = Server::start(
        &sb,
        &["--token", " flag-token-77a1 "],
        Some("flag-token-77a1"),
    );
    assert_eq!(server.get("/api/session").status, 200);
}

/// Runs `cmd` (an `m3 serve` that must refuse to start) to its end; fails the test at once if
/// it prints an address, that is, listens.
fn never_listens(mut cmd: std::process::Command, what: &str) -> Output {
    use std::process::Stdio;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawning `m3 serve`");
    let stdout = read_lines(child.stdout.take().expect("piped stdout"));
    let stderr = read_all(child.stderr.take().expect("piped stderr"));
    let mut guard = ChildGuard { child };
    match stdout.recv_timeout(COMMAND_TIMEOUT) {
        Ok(address) => panic!("{what}: `m3 serve` listens on {address}"),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: `m3 serve` neither started nor ended")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {}
    }
    let status = guard
        .wait_for(COMMAND_TIMEOUT)
        .expect("`m3 serve` ends once its stdout is closed");
    let stderr = stderr
        .recv_timeout(COMMAND_TIMEOUT)
        .expect("its stderr closes");
    Output::new(what.to_string(), status, String::new(), stderr)
}

/// A subscriber that asks for the stream and never reads, with a small receive buffer.
fn stalled_subscriber(address: &str) -> std::net::TcpStream {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    socket.set_recv_buffer_size(1).expect("a small buffer");
    let address: std::net::SocketAddr = address.parse().expect("an address");
    socket.connect(&address.into()).expect("connecting");
    let mut stream: std::net::TcpStream = socket.into();
    stream
        .write_all(format!("GET /api/events/stream HTTP/1.1\r\nHost: {address}\r\n\r\n").as_bytes())
        .expect("asking for the stream");
    stream
}

/// A long id: `prefix-i-` then `x`s, 500 bytes in all (a round's operation id adds ten to its
/// id, and 512 is the most an id may have).
fn long_id(prefix: &str, i: usize) -> String {
    let mut id = format!("{prefix}-{i:04}-");
    id.extend(std::iter::repeat_n('x', 500 - id.len()));
    id
}

/// Creates round `i` (long ids, one address request), owned, as a worker would.
fn create_round(store: &m3::SqliteManagedInputStore, i: usize) {
    use m3::{ElicitationRequest, ManagedInputStore, NewRound, OwnerClaim};
    let requests = std::collections::BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationRequest::form(
            "Where should the shipment be delivered?",
            json!({"type": "object", "properties": {"street": {"type": "string"}}}),
        ),
    )]);
    let round = NewRound::new(
        long_id("r", i),
        long_id("e", i),
        "shipping",
        "book_shipment",
        requests,
    )
    .owned_by(OwnerClaim::new("test-worker"));
    store.create_round(&round).expect("creating a round");
}

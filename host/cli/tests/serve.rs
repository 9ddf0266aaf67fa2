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

/// A non-loopback address without a token is refused at start; a missing database too; the
/// hidden knobs are checked like every flag.
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
    let missing = Sandbox::new();
    let out = missing.m3(&["serve", "--listen", "127.0.0.1:0"]);
    assert!(out.fails_with("StorageError").contains("database_missing"));
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

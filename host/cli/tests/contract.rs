//! The `m3` command's contract (issue 4, "The contract, precisely" and "Acceptance"), tested
//! line by line against the real binary.
//!
//! Every test gets a fresh temporary directory and database (`--db <tmp>/x.sqlite`), runs the
//! binary with `std::process::Command`, and uses the binary's own hidden `shipping-server`
//! subcommand as the MCP server (tool `book_shipment`, which asks for `shipping_address`). A
//! `run --no-prompt --json` is spawned in the background with its stdout piped; other processes
//! (`pending`, `respond`, `status`, `cancel`, `recover`, ...) talk to it through the database,
//! exactly as a script would. Every wait has a timeout, and every child is killed when its guard
//! drops (also when an assertion fails). Every command's stderr is checked for panics and
//! backtraces (`RUST_BACKTRACE=1` is set so a panic would show one).

mod common;

use chrono::Utc;
use common::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------------

/// `run --no-prompt --json` in one process, `pending --wait` and `respond` in others: the round
/// is printed as a JSON line, the answer is delivered, the result is the last line, exit 0.
fn two_process_flow(sb: Sandbox, era: &str) {
    let mut run = sb.spawn_run(era, &[], &[]);

    let round = sb.wait_pending();
    check_round(&round);
    let (round_id, execution_id) = ids(&round);
    assert_eq!(
        round["requests"]
            .as_object()
            .map(|r| r.keys().map(String::as_str).collect::<Vec<_>>()),
        Some(vec!["shipping_address"]),
        "the round's request keys"
    );
    if era == "modern" {
        assert!(round["request_state"].is_string(), "modern: {round}");
    } else {
        assert!(round["request_state"].is_null(), "legacy: {round}");
    }
    // The default deadline is the kit's (24 hours).
    let secs = deadline_secs(&round);
    assert!(
        (86_390.0..=86_410.0).contains(&secs),
        "default deadline: {secs} s"
    );

    // The run printed the same round as a pending event.
    let event = run.next_json();
    assert_eq!(event, json!({"event": "pending", "round": round}));

    // While it waits.
    let status = sb.status(&execution_id);
    assert_eq!(status["lifecycle"], "waiting_for_input");
    assert!(status["outcome"].is_null() && status["failure_code"].is_null());
    assert_eq!(status["rounds"][0]["status"], "pending");
    let executions = sb.m3(&["executions", "--json"]).json();
    let executions = executions
        .as_array()
        .expect("executions --json is an array");
    assert_eq!(executions.len(), 1);
    check_execution(&executions[0]);
    assert_eq!(executions[0]["execution_id"], execution_id.as_str());
    assert_eq!(executions[0]["lifecycle"], "waiting_for_input");

    // Answer from another process.
    let record = sb
        .m3(&[
            "respond",
            &round_id,
            "--idempotency-key",
            "answer-1",
            "--accept",
            &accept_address(),
            "--json",
        ])
        .json();
    check_record(&record);
    assert_eq!(record["round_id"], round_id.as_str());
    assert_eq!(record["idempotency_key"], "answer-1");
    assert_eq!(record["redacted"], false);
    assert_eq!(record["responses"]["shipping_address"], address_answer());
    assert!(
        ANSWERED_STATUSES.contains(&record["status"].as_str().unwrap_or_default()),
        "status after respond: {}",
        record["status"]
    );

    let (out, lines) = run.finish();
    out.ok();
    assert_eq!(
        lines.len(),
        2,
        "one pending event and the result: {lines:?}"
    );
    let result = check_run_stdout(&out, &lines);
    assert_eq!(result["execution_id"], execution_id.as_str());
    assert_eq!(result["outcome"], "succeeded");
    assert!(result["failure_code"].is_null());
    let calls = result["tool_calls"].as_array().expect("tool_calls");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["tool"], "shipping:book_shipment");
    assert_eq!(
        calls[0]["output"],
        format!("Booked shipment to {STREET}, {CITY}"),
        "the tool call's full output text"
    );

    // After the end.
    let status = sb.status(&execution_id);
    assert_eq!(status["lifecycle"], "finished");
    assert_eq!(status["outcome"], "succeeded");
    assert!(status["failure_code"].is_null());
    assert_eq!(status["rounds"][0]["status"], "resolved");
    assert!(
        status["tool_calls"][0]["output"]
            .as_str()
            .is_some_and(|o| o.contains(STREET)),
        "{status}"
    );
    let executions = sb.m3(&["executions", "--json"]).json();
    assert_eq!(executions[0]["lifecycle"], "finished");
    assert_eq!(executions[0]["outcome"], "succeeded");
    assert_eq!(sb.m3(&["pending", "--json"]).json(), json!([]));
}

#[test]
fn run_and_respond_in_two_processes_legacy() {
    two_process_flow(Sandbox::new(), "legacy");
}

#[test]
fn run_and_respond_in_two_processes_modern() {
    two_process_flow(Sandbox::new(), "modern");
}

/// `m3 run --server-url` against the Python SDK's server in its Streamable HTTP mode, with a
/// header from a file: the round (2026-07-28, probed) is printed, answered by `m3 respond` from
/// another process, delivered, and the result is the server's; the header's value is nowhere in
/// the database or the output.
#[test]
fn run_and_respond_over_http() {
    let sb = Sandbox::new();
    let peer = m3_tests::http_server::HttpServer::start(
        "booking_server.py over HTTP",
        m3_tests::peers::booking_http_server(false, 0).expect("the Python SDK peer"),
        &[],
        "/mcp",
    )
    .expect("the server starts");
    let script = sb.write(
        "script.json",
        r#"{"steps": [{"tool": "booking:book_table", "arguments": {"restaurant": "Chez M3"}}]}"#,
    );
    let secret = "Bearer m3-cli-header-secret";
    let headers = sb.write(
        "headers.txt",
        &format!("# for the server\nAuthorization: {secret}\n"),
    );
    let args: Vec<String> = [
        "run",
        "--no-prompt",
        "--json",
        "--server-name",
        "booking",
        "--server-url",
        &peer.url(),
        "--server-header-file",
        headers.to_str().expect("a UTF-8 path"),
        "--server-header",
        "X-Trace=m3-contract",
        "--script",
        script.to_str().expect("a UTF-8 path"),
        "--tool",
        "booking:book_table",
        "--human-input",
        "managed",
        "Book a table.",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut run = sb.spawn(&args);
    let round = sb.wait_pending();
    assert_eq!(round["server"], "booking");
    assert_eq!(round["operation_name"], "book_table");
    assert!(round["request_state"].is_string(), "2026-07-28: {round}");
    let (round_id, _) = ids(&round);
    assert_eq!(run.next_json(), json!({"event": "pending", "round": round}));
    sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "booking-1",
        "--accept",
        r#"__main__:ask_booking={"name": "Asha", "guests": 2, "seating": "indoor"}"#,
        "--json",
    ])
    .ok();
    let (out, lines) = run.finish();
    out.ok();
    assert_eq!(
        lines.len(),
        2,
        "one pending event and the result: {lines:?}"
    );
    let last: Value = serde_json::from_str(&lines[1]).expect("the result line is JSON");
    assert_eq!(last["event"], "result");
    let result = &last["result"];
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(
        result["tool_calls"][0]["output"],
        "booked Chez M3 for Asha: guests=2 seating=indoor deposit=0.0 high_chair=False"
    );
    assert_eq!(sb.show(&round_id)["status"], "resolved");
    let everything = [
        std::fs::read(&sb.db).unwrap_or_default(),
        std::fs::read(format!("{}-wal", sb.db.display())).unwrap_or_default(),
        out.stdout.clone().into_bytes(),
        out.stderr.clone().into_bytes(),
    ]
    .concat();
    assert!(
        !everything
            .windows(secret.len())
            .any(|w| w == secret.as_bytes()),
        "the header's value was stored or printed"
    );
}

/// The same flow with `--db` a PostgreSQL URL: the worker in `m3 run` hears the answer
/// `m3 respond` commits from another process through the server's notifications.
#[test]
fn run_and_respond_in_two_processes_on_postgres_legacy() {
    two_process_flow(Sandbox::postgres(), "legacy");
}

/// As above, in the modern era.
#[test]
fn run_and_respond_in_two_processes_on_postgres_modern() {
    two_process_flow(Sandbox::postgres(), "modern");
}

/// Each round is printed as a JSON line as it appears and gets `--deadline`; `respond` takes one
/// `--accept` per request key; `pending --execution` filters.
#[test]
fn every_round_is_printed_and_gets_the_deadline() {
    let sb = Sandbox::new();
    let mut run = sb.spawn_run(
        "modern",
        &["--two-keys", "--ask-rounds", "2"],
        &["--deadline", "300"],
    );
    let first = run.next_json();
    assert_eq!(first["event"], "pending");
    let round1 = first["round"].clone();
    check_round(&round1);
    assert_eq!(
        round1["requests"]
            .as_object()
            .map(|r| r.keys().map(String::as_str).collect::<Vec<_>>()),
        Some(vec!["contact_email", "shipping_address"]),
        "round 1 asks for both keys"
    );
    let secs = deadline_secs(&round1);
    assert!((299.0..=301.0).contains(&secs), "--deadline 300: {secs} s");
    assert_eq!(sb.wait_pending(), round1);
    let (round1_id, execution_id) = ids(&round1);

    let record = sb
        .m3(&[
            "respond",
            &round1_id,
            "--idempotency-key",
            "r1",
            "--accept",
            &accept_address(),
            "--accept",
            r#"contact_email={"email":"someone@example.com"}"#,
            "--json",
        ])
        .json();
    check_record(&record);
    assert_eq!(record["responses"]["shipping_address"], address_answer());
    assert_eq!(
        record["responses"]["contact_email"],
        json!({"action": "accept", "content": {"email": "someone@example.com"}})
    );

    let second = run.next_json();
    assert_eq!(second["event"], "pending");
    let round2 = second["round"].clone();
    check_round(&round2);
    assert_ne!(round2["round_id"], round1["round_id"], "a new round");
    assert_eq!(round2["execution_id"], execution_id.as_str());
    let secs = deadline_secs(&round2);
    assert!(
        (299.0..=301.0).contains(&secs),
        "round 2's deadline: {secs} s"
    );
    let pending = sb
        .m3(&["pending", "--execution", &execution_id, "--json"])
        .json();
    assert_eq!(pending, json!([round2]));
    assert_eq!(
        sb.m3(&["pending", "--execution", "exec-other", "--json"])
            .json(),
        json!([])
    );
    let (round2_id, _) = ids(&round2);
    sb.m3(&[
        "respond",
        &round2_id,
        "--idempotency-key",
        "r2",
        "--accept",
        &accept_address(),
    ])
    .ok();

    let (out, lines) = run.finish();
    let result = check_run_stdout(&out, &lines);
    out.ok();
    assert_eq!(
        lines.len(),
        3,
        "two pending events and the result: {lines:?}"
    );
    assert_eq!(result["outcome"], "succeeded");
    let output = result["tool_calls"][0]["output"]
        .as_str()
        .unwrap_or_default();
    assert!(output.contains(STREET), "{output}");
    let rounds = sb
        .m3(&["rounds", "--execution", &execution_id, "--json"])
        .json();
    assert_eq!(rounds.as_array().map(Vec::len), Some(2), "{rounds}");
    for round in rounds.as_array().into_iter().flatten() {
        check_record(round);
        assert_eq!(round["status"], "resolved");
    }
}

/// A declined or cancelled elicitation that the server handles normally is a success (exit 0).
#[test]
fn declined_or_cancelled_elicitation_handled_by_the_server_is_a_success() {
    for era in ["legacy", "modern"] {
        for (flag, action, text) in [
            ("--decline", "decline", "declined"),
            ("--cancel", "cancel", "cancelled"),
        ] {
            let sb = Sandbox::new();
            let run = sb.spawn_run(era, &[], &[]);
            let (round_id, execution_id) = ids(&sb.wait_pending());
            let record = sb
                .m3(&[
                    "respond",
                    &round_id,
                    "--idempotency-key",
                    "k",
                    flag,
                    "shipping_address",
                    "--json",
                ])
                .json();
            check_record(&record);
            assert_eq!(
                record["responses"]["shipping_address"],
                json!({"action": action, "content": null})
            );
            let (out, lines) = run.finish();
            let result = check_run_stdout(&out, &lines);
            out.ok();
            assert_eq!(result["outcome"], "succeeded", "{era} {action}: {result}");
            assert!(result["failure_code"].is_null());
            let output = result["tool_calls"][0]["output"]
                .as_str()
                .unwrap_or_default();
            assert!(output.contains(text), "{era} {action}: {output}");
            let status = sb.status(&execution_id);
            assert_eq!(status["outcome"], "succeeded");
            assert_eq!(status["rounds"][0]["status"], "resolved");
        }
    }
}

/// A server that errors after the answer: outcome failed, `server_error`, exit non-zero. The
/// answer goes in with `--responses FILE`.
#[test]
fn server_error_after_the_answer_fails_the_run() {
    for era in ["legacy", "modern"] {
        let sb = Sandbox::new();
        let run = sb.spawn_run(era, &["--fail-after-answer"], &[]);
        let (round_id, execution_id) = ids(&sb.wait_pending());
        let file = sb.write(
            "answers.json",
            &json!({"shipping_address": address_answer()}).to_string(),
        );
        sb.m3(&[
            "respond",
            &round_id,
            "--idempotency-key",
            "k",
            "--responses",
            file.to_str().expect("a UTF-8 path"),
        ])
        .ok();
        let (out, lines) = run.finish();
        let result = check_run_stdout(&out, &lines);
        assert!(!out.status.success(), "{era}: a failed run exits non-zero");
        assert_eq!(result["outcome"], "failed", "{era}: {result}");
        assert_eq!(result["failure_code"], "server_error", "{era}: {result}");
        let shown = sb.show(&round_id);
        check_record(&shown);
        assert_eq!(shown["status"], "failed");
        assert_eq!(shown["failure_code"], "server_error");
        let status = sb.status(&execution_id);
        assert_eq!(status["lifecycle"], "finished");
        assert_eq!(status["outcome"], "failed");
        assert_eq!(status["failure_code"], "server_error");
    }
}

/// Invalid answers are rejected with `ManagedInputValidationError` and the round stays pending;
/// `--accept KEY` without content is rejected for a form request (`content_required`).
#[test]
fn respond_rejects_invalid_answers_and_the_round_stays_pending() {
    let sb = Sandbox::new();
    let run = sb.spawn_run("legacy", &[], &[]);
    let round = sb.wait_pending();
    let (round_id, _) = ids(&round);
    let invalid: [(&str, &str, &str); 4] = [
        (
            "--accept",
            r#"shipping_address={"street":""}"#,
            "schema_violation",
        ),
        ("--accept", "shipping_address", "content_required"),
        ("--accept", "shipping_address={oops", "malformed_json"),
        (
            "--accept",
            r#"other={"street":"a","city":"b"}"#,
            "response_keys_mismatch",
        ),
    ];
    for (flag, value, code) in invalid {
        let out = sb.m3(&[
            "respond",
            &round_id,
            "--idempotency-key",
            "bad",
            flag,
            value,
        ]);
        let first = out.fails_with("ManagedInputValidationError");
        assert!(first.contains(code), "{flag} {value}: {first}");
        assert!(out.stdout.is_empty(), "nothing on stdout: {}", out.stdout);
        let pending = sb.m3(&["pending", "--json"]).json();
        assert_eq!(pending, json!([round]), "the round is still pending");
        assert_eq!(sb.show(&round_id)["status"], "pending");
    }
    // An empty string is rejected also when it comes through `--responses -`.
    let out = sb.m3_stdin(
        &[
            "respond",
            &round_id,
            "--idempotency-key",
            "bad",
            "--responses",
            "-",
        ],
        r#"{"shipping_address": {"action": "accept", "content": {"street": "", "city": ""}}}"#,
    );
    out.fails_with("ManagedInputValidationError");
    assert_eq!(sb.m3(&["pending", "--json"]).json(), json!([round]));

    // A valid answer still goes through and the run succeeds.
    sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "good",
        "--accept",
        &accept_address(),
    ])
    .ok();
    let (out, lines) = run.finish();
    let result = check_run_stdout(&out, &lines);
    out.ok();
    assert_eq!(result["outcome"], "succeeded");
}

/// A repeat with the same key and answers prints the same record and exits 0; the same key with
/// other answers is a `ManagedInputConflict`. Answers come from stdin (`--responses -`).
#[test]
fn respond_repeats_are_idempotent_and_conflicts_are_typed() {
    let sb = Sandbox::new();
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, _) = ids(&sb.wait_pending());

    let first = sb
        .m3_stdin(
            &[
                "respond",
                &round_id,
                "--idempotency-key",
                "same",
                "--responses",
                "-",
                "--json",
            ],
            &json!({"shipping_address": address_answer()}).to_string(),
        )
        .json();
    check_record(&first);
    assert_eq!(first["responses"]["shipping_address"], address_answer());
    assert_eq!(first["idempotency_key"], "same");

    let same_record = |record: &Value| {
        check_record(record);
        for field in ["round_id", "execution_id", "responses", "idempotency_key"] {
            assert_eq!(record[field], first[field], "the repeat's {field}");
        }
    };
    // The same answers (its fields in another order), through the flags this time.
    let repeat = sb
        .m3(&[
            "respond",
            &round_id,
            "--idempotency-key",
            "same",
            "--accept",
            &format!(r#"shipping_address={{"city":"{CITY}","street":"{STREET}"}}"#),
            "--json",
        ])
        .json();
    same_record(&repeat);

    let conflict = sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "same",
        "--accept",
        r#"shipping_address={"street":"1 Other Road","city":"Elsewhere"}"#,
    ]);
    conflict.fails_with("ManagedInputConflict");

    let (out, lines) = run.finish();
    let result = check_run_stdout(&out, &lines);
    out.ok();
    assert_eq!(
        result["tool_calls"][0]["output"],
        format!("Booked shipment to {STREET}, {CITY}"),
        "the first answer is the one delivered"
    );

    // Once resolved: the repeat still prints the same record; a new key cannot change it.
    let late = sb
        .m3_stdin(
            &[
                "respond",
                &round_id,
                "--idempotency-key",
                "same",
                "--responses",
                "-",
                "--json",
            ],
            &json!({"shipping_address": address_answer()}).to_string(),
        )
        .json();
    same_record(&late);
    assert_eq!(late["status"], "resolved");
    sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "other",
        "--accept",
        &accept_address(),
    ])
    .fails_with("ManagedInputStateError");
    sb.m3(&[
        "respond",
        "no-such-round",
        "--idempotency-key",
        "k",
        "--decline",
        "shipping_address",
    ])
    .fails_with("ManagedInputStateError");
}

/// `pending --wait` with nothing pending: `OperationTimeout` after about the given time.
#[test]
fn pending_wait_times_out_without_rounds() {
    let sb = Sandbox::new();
    sb.create_database();
    assert_eq!(sb.m3(&["pending", "--json"]).json(), json!([]));
    let started = Instant::now();
    let out = sb.m3(&["pending", "--wait", "1", "--json"]);
    let elapsed = started.elapsed();
    out.fails_with("OperationTimeout");
    assert!(out.stdout.is_empty(), "nothing on stdout: {}", out.stdout);
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(15),
        "waited {elapsed:?}"
    );
}

/// `validate --round FILE --responses FILE` takes one round exactly as `pending --json` prints
/// it; `check-schema FILE` a bare `requestedSchema`. Neither touches a database.
#[test]
fn validate_and_check_schema_work_without_a_database() {
    let sb = Sandbox::new();
    let _run = sb.spawn_run("legacy", &[], &["--deadline", "600"]);
    let round = sb.wait_pending();
    let (round_id, _) = ids(&round);
    // `--deadline SECS` sets the round's deadline.
    let secs = deadline_secs(&round);
    assert!((599.0..=601.0).contains(&secs), "--deadline 600: {secs} s");

    let round_file = sb.write(
        "round.json",
        &serde_json::to_string_pretty(&round).expect("JSON"),
    );
    let round_file = round_file.to_str().expect("a UTF-8 path");
    let valid = sb.write(
        "valid.json",
        &json!({"shipping_address": address_answer()}).to_string(),
    );
    let invalid = sb.write(
        "invalid.json",
        &json!({"shipping_address": {"action": "accept", "content": {"street": ""}}}).to_string(),
    );
    let no_db = sb.dir.path().join("none.sqlite");
    let validate = |responses: &str, stdin: Option<&str>| {
        let mut cmd = sb.bare();
        cmd.arg("--db").arg(&no_db).args([
            "validate",
            "--round",
            round_file,
            "--responses",
            responses,
        ]);
        finish(cmd, stdin, COMMAND_TIMEOUT)
    };

    validate(valid.to_str().expect("a UTF-8 path"), None).ok();
    let out = validate(invalid.to_str().expect("a UTF-8 path"), None);
    out.fails_with("ManagedInputValidationError");
    validate(
        "-",
        Some(&json!({"shipping_address": address_answer()}).to_string()),
    )
    .ok();
    validate("-", Some(r#"{"shipping_address": {"action": "decline"}}"#)).ok();
    validate("-", Some(r#"{"shipping_address": {"action": "accept"}}"#))
        .fails_with("ManagedInputValidationError");
    assert!(!no_db.exists(), "validate created a database");

    let check = |schema: &Value| {
        let file = sb.write("schema.json", &schema.to_string());
        let mut cmd = sb.bare();
        cmd.arg("--db").arg(&no_db).arg("check-schema").arg(file);
        finish(cmd, None, COMMAND_TIMEOUT)
    };
    check(&round["requests"]["shipping_address"]["requested_schema"]).ok();
    check(&json!({"type": "object", "properties": {"a": {"type": "string"}}})).ok();
    check(&json!({
        "type": "object",
        "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}}
    }))
    .fails_with("ManagedInputValidationError");
    check(&json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x$"}}}))
        .fails_with("ManagedInputValidationError");
    let mut cmd = sb.bare();
    cmd.args(["check-schema", "-"]);
    finish(
        cmd,
        Some(r#"{"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}"#),
        COMMAND_TIMEOUT,
    )
    .ok();
    // Regression: a schema whose text repeats a key was checked by its last value; it is
    // refused as malformed JSON, whichever value would have passed.
    for repeated in [
        r#"{"type": "object", "properties": {"a": {"type": "string"}}, "properties": {"b": {"type": "string"}}}"#,
        r#"{"type": "object", "properties": {"a": {"type": "string", "type": "object"}}}"#,
    ] {
        let mut cmd = sb.bare();
        cmd.args(["check-schema", "-"]);
        let out = finish(cmd, Some(repeated), COMMAND_TIMEOUT);
        let first = out.fails_with("ManagedInputValidationError");
        assert!(first.contains("duplicate"), "{first}");
    }
    assert!(!no_db.exists(), "check-schema created a database");

    // Validation stored nothing: the round is still pending.
    let shown = sb.show(&round_id);
    assert_eq!(shown["status"], "pending");
    assert!(shown["responses"].is_null(), "{shown}");
}

/// `validate --round` takes `pending --json`'s own output (an array) when it lists exactly one
/// round, from a file or from stdin; an array of several rounds, or of none, is refused with a
/// typed error and nothing is validated.
#[test]
fn validate_takes_the_output_of_pending_json() {
    let sb = Sandbox::new();
    let _run = sb.spawn_run("legacy", &[], &[]);
    sb.wait_pending();
    // Exactly what `pending --json` printed, byte for byte.
    let listing = sb.m3(&["pending", "--json"]);
    let rounds = listing.json();
    assert_eq!(rounds.as_array().map(Vec::len), Some(1), "{rounds}");
    let listing_file = sb.write("pending.json", &listing.stdout);
    let listing_file = listing_file.to_str().expect("a UTF-8 path");
    let answers = sb.write(
        "answers.json",
        &json!({"shipping_address": address_answer()}).to_string(),
    );
    let answers = answers.to_str().expect("a UTF-8 path");
    let no_db = sb.dir.path().join("none.sqlite");
    let validate = |round: &str, stdin: Option<&str>| {
        let mut cmd = sb.bare();
        cmd.arg("--db")
            .arg(&no_db)
            .args(["validate", "--round", round, "--responses", answers]);
        finish(cmd, stdin, COMMAND_TIMEOUT)
    };

    let out = validate(listing_file, None);
    out.ok();
    assert!(
        out.stdout.starts_with("valid: "),
        "validate printed: {}",
        out.stdout
    );
    validate("-", Some(&listing.stdout)).ok();

    let two = sb.write(
        "two.json",
        &Value::Array(vec![rounds[0].clone(), rounds[0].clone()]).to_string(),
    );
    let out = validate(two.to_str().expect("a UTF-8 path"), None);
    let first = out.fails_with("ManagedInputValidationError");
    assert!(first.contains("an array of 2 rounds"), "{first}");
    assert!(out.stdout.is_empty(), "nothing on stdout: {}", out.stdout);
    let empty = sb.write("empty.json", "[]");
    validate(empty.to_str().expect("a UTF-8 path"), None).fails_with("ManagedInputValidationError");
    assert!(!no_db.exists(), "validate created a database");
}

/// `show` shows the stored answers; `show --redacted` carries no answer value; `show --json`
/// includes `status` and `failure_code`; an unknown round is a `ManagedInputStateError`.
#[test]
fn show_stored_answers_and_the_redacted_projection() {
    let sb = Sandbox::new();
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, execution_id) = ids(&sb.wait_pending());
    sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "k",
        "--accept",
        &accept_address(),
    ])
    .ok();
    let (out, _) = run.finish();
    out.ok();

    let plain = sb.m3(&["show", &round_id]).ok().stdout.clone();
    assert!(plain.contains(STREET) && plain.contains(CITY), "{plain}");

    let shown = sb.show(&round_id);
    check_record(&shown);
    assert_eq!(shown["status"], "resolved");
    assert!(shown["failure_code"].is_null());
    assert_eq!(shown["redacted"], false);
    assert_eq!(shown["responses"]["shipping_address"], address_answer());

    let no_values = |text: &str, what: &str| {
        for value in [STREET, CITY, "Evergreen", "Springfield"] {
            assert!(
                !text.contains(value),
                "{what} shows the answer value {value:?}:\n{text}"
            );
        }
    };
    let redacted = sb.m3(&["show", &round_id, "--redacted", "--json"]);
    no_values(&redacted.stdout, "show --redacted --json");
    let redacted = redacted.json();
    check_record(&redacted);
    assert_eq!(redacted["redacted"], true);
    assert_eq!(redacted["status"], "resolved");
    assert!(redacted["failure_code"].is_null());
    assert!(redacted["idempotency_key"].is_null());
    let projection = &redacted["responses"]["shipping_address"];
    assert_eq!(projection["action"], "accept");
    assert!(projection.get("content_sha256").is_none(), "{projection}");
    no_values(
        &sb.m3(&["show", &round_id, "--redacted"]).ok().stdout,
        "show --redacted",
    );
    // Listings never show answers either.
    no_values(&sb.m3(&["rounds", "--json"]).ok().stdout, "rounds --json");
    // `status` shows the tool calls' own output (the server's words); its rounds show no answer.
    let mut status = sb.m3(&["status", &execution_id, "--json"]).ok().json();
    assert!(
        status["tool_calls"][0]["output"]
            .as_str()
            .unwrap()
            .contains(STREET)
    );
    status.as_object_mut().unwrap().remove("tool_calls");
    no_values(&status.to_string(), "status --json (beyond the tool calls)");

    sb.m3(&["show", "no-such-round"])
        .fails_with("ManagedInputStateError");
    sb.m3(&["show", "no-such-round", "--json", "--redacted"])
        .fails_with("ManagedInputStateError");
}

/// `cancel EXECUTION_ID` on a waiting run: the run ends `cancelled` (exit non-zero); its round
/// is failed with `cancelled`.
#[test]
fn cancel_ends_a_waiting_run() {
    let sb = Sandbox::new();
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, execution_id) = ids(&sb.wait_pending());
    let cancelled = sb.m3(&["cancel", &execution_id, "--json"]).json();
    check_execution(&cancelled);
    assert_eq!(cancelled["execution_id"], execution_id.as_str());
    assert_eq!(cancelled["cancel_requested"], true);

    let (out, lines) = run.finish();
    let result = check_run_stdout(&out, &lines);
    assert!(!out.status.success(), "a cancelled run exits non-zero");
    assert_eq!(result["outcome"], "cancelled");
    assert_eq!(result["lifecycle"], "finished");

    let status = sb.status(&execution_id);
    assert_eq!(status["lifecycle"], "finished");
    assert_eq!(status["outcome"], "cancelled");
    assert_eq!(status["rounds"][0]["status"], "failed");
    assert_eq!(status["rounds"][0]["failure_code"], "cancelled");
    let shown = sb.show(&round_id);
    assert_eq!(shown["status"], "failed");
    assert_eq!(shown["failure_code"], "cancelled");
    let failed = sb.m3(&["rounds", "--status", "failed", "--json"]).json();
    assert_eq!(failed.as_array().map(Vec::len), Some(1), "{failed}");
    assert_eq!(failed[0]["round_id"], round_id.as_str());

    sb.m3(&["cancel", "no-such-execution"])
        .fails_with("ManagedInputStateError");
    sb.m3(&["status", "no-such-execution", "--json"])
        .fails_with("ManagedInputStateError");
}

/// `--deadline 1` and no answer: the round's deadline is 1 s after `created_at`, and the run
/// ends failed with `deadline_exceeded`, exit non-zero.
#[test]
fn an_unanswered_round_fails_at_its_deadline() {
    let sb = Sandbox::new();
    let mut run = sb.spawn_run("legacy", &[], &["--deadline", "1"]);
    let event = run.next_json();
    assert_eq!(event["event"], "pending");
    let round = event["round"].clone();
    check_round(&round);
    let secs = deadline_secs(&round);
    assert!((0.5..=2.0).contains(&secs), "--deadline 1: {secs} s");
    let (round_id, execution_id) = ids(&round);

    let (out, lines) = run.finish();
    let result = check_run_stdout(&out, &lines);
    // The specification's `OperationTimeout`, after the result was printed.
    out.fails_with("OperationTimeout");
    assert_eq!(result["outcome"], "failed");
    assert_eq!(result["failure_kind"], "operation_timeout");
    assert_eq!(result["failure_code"], "deadline_exceeded");
    let shown = sb.show(&round_id);
    assert_eq!(shown["status"], "failed");
    assert_eq!(shown["failure_code"], "deadline_exceeded");
    let status = sb.status(&execution_id);
    assert_eq!(status["outcome"], "failed");
    assert_eq!(status["failure_code"], "deadline_exceeded");
}

/// `--human-input` takes a string: an unknown value is a `ModelValidationError`, not the argument
/// parser's error; `--harness codex` without a model, or an unknown harness, too.
#[test]
fn human_input_and_harness_errors_are_model_validation_errors() {
    let sb = Sandbox::new();
    let mut cmd = sb.command(&[]);
    cmd.args(run_args("legacy", &[], &["--human-input", "bogus"]));
    let out = finish(cmd, None, COMMAND_TIMEOUT);
    let first = out.fails_with("ModelValidationError");
    assert!(first.contains("bogus"), "{first}");
    assert!(
        !out.stderr.contains("Usage:"),
        "not clap's usage error: {}",
        out.stderr
    );

    for (harness, words) in [
        ("codex", &["codex", "model"][..]),
        ("nonesuch", &["nonesuch"][..]),
    ] {
        let mut cmd = sb.command(&[]);
        cmd.args(run_args("legacy", &[], &["--harness", harness]));
        let out = finish(cmd, None, COMMAND_TIMEOUT);
        let first = out.fails_with("ModelValidationError");
        for word in words {
            assert!(first.contains(word), "--harness {harness}: {first}");
        }
    }
    // Nothing was submitted (the database was not even created).
    assert!(!sb.db.exists(), "a refused submission created the database");

    // `fail` is a known value: the elicitation fails the execution.
    let mut cmd = sb.command(&[]);
    cmd.args(run_args("legacy", &[], &["--human-input", "fail"]));
    let out = finish(cmd, None, RUN_TIMEOUT);
    let lines: Vec<String> = out.stdout.lines().map(str::to_string).collect();
    let result = check_run_stdout(&out, &lines);
    assert_eq!(result["outcome"], "failed");
    assert_eq!(result["failure_code"], "elicitation_unhandled");
}

/// `--script FILE` is the scripted harness's format; a malformed one is a
/// `ModelValidationError`.
#[test]
fn script_file_drives_the_tool_calls() {
    let sb = Sandbox::new();
    let script = sb.write(
        "script.json",
        &json!({"steps": [
            {"tool": "shipping:report_env", "arguments": {}},
            {"tool": "shipping:report_env", "arguments": {}}
        ]})
        .to_string(),
    );
    let script = script.to_str().expect("a UTF-8 path");
    let run = |script: &str| {
        sb.m3(&[
            "run",
            "--no-prompt",
            "--json",
            "--server-name",
            "shipping",
            "--server-command",
            M3,
            "--server-arg",
            "shipping-server",
            "--server-arg",
            "--era",
            "--server-arg",
            "legacy",
            "--server-arg",
            "--report-env",
            "--server-env",
            "M3_CONTRACT_PROBE=probe-value",
            "--tool",
            "shipping:report_env",
            "--script",
            script,
            "Report the environment twice.",
        ])
    };
    let out = run(script);
    let lines: Vec<String> = out.stdout.lines().map(str::to_string).collect();
    let result = check_run_stdout(&out, &lines);
    out.ok();
    assert_eq!(lines.len(), 1, "no round, only the result: {lines:?}");
    let calls = result["tool_calls"].as_array().expect("tool_calls");
    assert_eq!(calls.len(), 2, "the script's two steps: {result}");
    for call in calls {
        assert_eq!(call["tool"], "shipping:report_env");
        let output = call["output"].as_str().unwrap_or_default();
        assert!(
            output.contains("M3_CONTRACT_PROBE") && output.contains("probe-value"),
            "{output}"
        );
    }

    for (name, text) in [
        ("not-json.json", "this is not JSON"),
        ("wrong-shape.json", r#"{"steps": 3}"#),
        ("wrong-step.json", r#"{"steps": [{"arguments": {}}]}"#),
    ] {
        let file = sb.write(name, text);
        let out = run(file.to_str().expect("a UTF-8 path"));
        let first = out.fails_with("ModelValidationError");
        assert!(first.contains(name), "{first}");
    }
    let executions = sb.m3(&["executions", "--json"]).json();
    assert_eq!(executions.as_array().map(Vec::len), Some(1), "{executions}");
}

/// `status` after a SIGKILLed `run` followed by `recover`: the dead worker's round fails with
/// `recovery_unavailable` once its lease (15 s) has expired; a live run's round stays pending,
/// even after that time, and is still answered.
#[test]
fn recover_fails_only_rounds_whose_worker_is_gone() {
    let sb = Sandbox::new();
    let mut dead = sb.spawn_run("legacy", &[], &[]);
    let dead_round = sb.wait_pending();
    let (dead_round_id, dead_execution) = ids(&dead_round);
    assert_eq!(dead.next_json()["event"], "pending");
    dead.guard.kill(); // SIGKILL

    // The live run's kit recovers by itself once per lease period: a long lease keeps it from
    // doing `m3 recover`'s work during this test (that it does is tested elsewhere).
    let mut live = sb.spawn_run("modern", &[], &["--lease", "120"]);
    assert_eq!(live.next_json()["event"], "pending");
    let pending = sb.m3(&["pending", "--json"]).json();
    assert_eq!(pending.as_array().map(Vec::len), Some(2), "{pending}");
    let live_round = pending
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["round_id"] != dead_round_id.as_str())
        .cloned()
        .expect("the live run's round");
    let (live_round_id, live_execution) = ids(&live_round);

    // The dead worker's lease has not expired yet: recover leaves both rounds alone.
    let report = sb.m3(&["recover", "--json"]).json();
    assert_keys(
        &report,
        &["rounds_failed", "executions_failed", "records_unreadable"],
        "recover --json",
    );
    assert_eq!(report["rounds_failed"], 0, "{report}");
    assert_eq!(sb.show(&dead_round_id)["status"], "pending");

    // Wait until the dead worker's lease has expired (the default lease is 15 s).
    let expires = timestamp(
        &sb.show(&dead_round_id)["lease_expires_at"],
        "lease_expires_at",
    );
    let wait = (expires - Utc::now()).num_milliseconds() + 1_500;
    assert!(
        wait < 20_000,
        "the lease lasts longer than expected: {expires}"
    );
    if wait > 0 {
        std::thread::sleep(Duration::from_millis(wait.unsigned_abs()));
    }

    let report = sb.m3(&["recover", "--json"]).json();
    assert_eq!(report["rounds_failed"], 1, "{report}");
    assert_eq!(report["executions_failed"], 1, "{report}");
    let status = sb.status(&dead_execution);
    assert_eq!(status["lifecycle"], "finished");
    assert_eq!(status["outcome"], "failed");
    assert_eq!(status["failure_code"], "recovery_unavailable");
    assert_eq!(status["rounds"][0]["status"], "failed");
    assert_eq!(status["rounds"][0]["failure_code"], "recovery_unavailable");

    // The live run's round is untouched.
    let pending = sb.m3(&["pending", "--json"]).json();
    assert_eq!(
        pending,
        json!([live_round]),
        "the live round is still pending"
    );
    assert_eq!(sb.status(&live_execution)["lifecycle"], "waiting_for_input");
    sb.m3(&[
        "respond",
        &live_round_id,
        "--idempotency-key",
        "k",
        "--accept",
        &accept_address(),
    ])
    .ok();
    let (out, lines) = live.finish();
    let result = check_run_stdout(&out, &lines);
    out.ok();
    assert_eq!(result["outcome"], "succeeded");
}

/// A round whose worker died, with nobody running `m3 recover`: once the worker's lease has
/// expired, `respond` is refused (`ManagedInputRecoveryError`, never acknowledged), and the
/// listings recover by themselves before they list: `pending` no longer shows the round and
/// says so on stderr, `status` shows it failed `recovery_unavailable`.
#[test]
fn listings_recover_a_dead_worker_s_round_by_themselves() {
    let sb = Sandbox::new();
    let mut dead = sb.spawn_run("legacy", &[], &["--lease", "1"]);
    let event = dead.next_json();
    let (round_id, execution_id) = ids(&event["round"]);
    dead.guard.kill(); // SIGKILL
    let expires = timestamp(&sb.show(&round_id)["lease_expires_at"], "lease_expires_at");
    let wait = (expires - Utc::now()).num_milliseconds() + 300;
    if wait > 0 {
        std::thread::sleep(Duration::from_millis(wait.unsigned_abs()));
    }
    let late = sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "late",
        "--accept",
        &accept_address(),
    ]);
    let line = late.fails_with("ManagedInputRecoveryError");
    assert!(line.contains("recovery_unavailable"), "{line}");
    assert!(!late.stdout.contains("deliver"), "{}", late.stdout);
    assert_eq!(
        sb.show(&round_id)["status"],
        "pending",
        "respond changed nothing"
    );

    let pending = sb.m3(&["pending", "--json"]);
    assert_eq!(
        pending.json(),
        json!([]),
        "the dead worker's round is not listed"
    );
    assert!(
        pending
            .stderr
            .contains("recovered: failed 1 round(s) and 1 execution(s)"),
        "{}",
        pending.stderr
    );
    let status = sb.status(&execution_id);
    assert_eq!(status["lifecycle"], "finished");
    assert_eq!(status["failure_code"], "recovery_unavailable");
    assert_eq!(status["rounds"][0]["status"], "failed");
    assert_eq!(status["rounds"][0]["failure_code"], "recovery_unavailable");
}

/// `doctor --json`: database integrity, schema version, component state; exit 0.
#[test]
fn doctor_reports_database_schema_and_component() {
    let sb = Sandbox::new();
    sb.create_database();
    let report = sb.m3(&["doctor", "--json"]).json();
    assert_eq!(report["healthy"], true, "{report}");
    let database = &report["database"];
    assert_eq!(database["integrity"], "ok", "{report}");
    assert_eq!(database["exists"], true);
    assert_eq!(database["m3_database"], true);
    assert!(
        database["schema_version"].as_u64().is_some_and(|v| v >= 1),
        "{report}"
    );
    assert_eq!(
        database["schema_version"],
        database["supported_schema_version"]
    );
    let component = &report["component"];
    assert_eq!(component["loaded"], true, "{report}");
    assert!(
        component["wasm_sha256"]
            .as_str()
            .is_some_and(|s| s.len() == 64),
        "{report}"
    );
    assert_eq!(report["harnesses"]["scripted"]["found"], "built in");
    assert!(report["harnesses"].get("codex").is_some(), "{report}");
}

/// Every field is always present, `null` when absent: `doctor --json` before the database
/// exists has the same keys as after.
#[test]
fn doctor_json_has_the_same_keys_with_or_without_a_database() {
    let sb = Sandbox::new();
    let before = sb.m3(&["doctor", "--json"]).json();
    sb.create_database();
    let after = sb.m3(&["doctor", "--json"]).json();
    let keys = |v: &Value| -> Vec<String> {
        v.as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(keys(&before), keys(&after), "doctor's top-level keys");
    assert_eq!(
        keys(&before["database"]),
        keys(&after["database"]),
        "doctor's `database` keys without a database file ({}) and with one ({})",
        before["database"],
        after["database"]
    );
}

/// `demo` on a fresh database, both eras, and as JSON lines.
#[test]
fn demo_runs_end_to_end() {
    let sb = Sandbox::new();
    let answer = r#"{"street":"1 Main Street","city":"Pune"}"#;
    for era in [None, Some("legacy"), Some("modern")] {
        let mut args = vec!["demo", "--answer", answer];
        if let Some(era) = era {
            args.extend(["--era", era]);
        }
        let out = sb.m3(&args);
        out.ok();
        assert!(
            out.stdout
                .contains("Booked shipment to 1 Main Street, Pune"),
            "demo {era:?}: {}",
            out.stdout
        );
    }
    for era in ["legacy", "modern"] {
        let out = sb.m3(&["demo", "--json", "--era", era, "--answer", answer]);
        let lines: Vec<String> = out.stdout.lines().map(str::to_string).collect();
        assert_eq!(lines.len(), 2, "demo --json: {lines:?}");
        let result = check_run_stdout(&out, &lines);
        out.ok();
        assert_eq!(result["outcome"], "succeeded");
        assert_eq!(
            result["tool_calls"][0]["output"],
            "Booked shipment to 1 Main Street, Pune"
        );
    }
    // An answer that is not JSON is a typed error.
    sb.m3(&["demo", "--answer", "{oops"])
        .fails_with("ManagedInputValidationError");
}

/// `--db` and `--json` are global (before or after the subcommand); `M3_DB` is the default
/// database, and without either it is `executions.sqlite` in the working directory.
#[test]
fn db_and_json_are_global_and_m3_db_is_the_default() {
    let sb = Sandbox::new();
    let db = sb.db.to_str().expect("a UTF-8 path").to_string();
    // `--db` and `--json` after the subcommand (and after the prompt).
    let mut cmd = sb.bare();
    let without_json = run_args("legacy", &[], &["--human-input", "fail"])
        .into_iter()
        .filter(|a| a != "--json");
    cmd.args(without_json).args(["--db", &db, "--json"]);
    let out = finish(cmd, None, RUN_TIMEOUT);
    let lines: Vec<String> = out.stdout.lines().map(str::to_string).collect();
    let result = check_run_stdout(&out, &lines);
    let execution_id = result["execution_id"].clone();
    assert!(sb.db.exists(), "--db after the subcommand was used");

    let list = |cmd: Command| {
        let listed = finish(cmd, None, COMMAND_TIMEOUT).json();
        let listed = listed.as_array().cloned().unwrap_or_default();
        assert_eq!(listed.len(), 1, "{listed:?}");
        check_execution(&listed[0]);
        assert_eq!(listed[0]["execution_id"], execution_id);
    };
    for args in [
        vec!["--db", &db, "--json", "executions"],
        vec!["--json", "--db", &db, "executions"],
        vec!["--db", &db, "executions", "--json"],
        vec!["--json", "executions", "--db", &db],
        vec!["executions", "--db", &db, "--json"],
        vec!["executions", "--json", "--db", &db],
    ] {
        let mut cmd = sb.bare();
        cmd.args(&args);
        list(cmd);
    }
    // `M3_DB`.
    let mut cmd = sb.bare();
    cmd.env("M3_DB", &db).args(["executions", "--json"]);
    list(cmd);
    // `--db` wins over `M3_DB`.
    let mut cmd = sb.bare();
    cmd.env("M3_DB", sb.dir.path().join("other.sqlite")).args([
        "--db",
        &db,
        "executions",
        "--json",
    ]);
    list(cmd);

    // Neither: `executions.sqlite` in the working directory.
    let cwd = Sandbox::new();
    let mut cmd = cwd.bare();
    cmd.args(run_args("legacy", &[], &["--human-input", "fail"]));
    let out = finish(cmd, None, RUN_TIMEOUT);
    let lines: Vec<String> = out.stdout.lines().map(str::to_string).collect();
    let result = check_run_stdout(&out, &lines);
    let default_db = cwd.dir.path().join("executions.sqlite");
    assert!(
        default_db.exists(),
        "the default database is executions.sqlite"
    );
    let mut cmd = cwd.bare();
    cmd.arg("--db")
        .arg(&default_db)
        .args(["executions", "--json"]);
    let listed = finish(cmd, None, COMMAND_TIMEOUT).json();
    assert_eq!(listed[0]["execution_id"], result["execution_id"]);
}

/// Every error exits non-zero with a first stderr line that starts with a typed error's name,
/// never a panic or a backtrace; also for mistakes in the command's own options and files.
#[test]
fn every_error_starts_with_a_typed_error_name() {
    let sb = Sandbox::new();
    let missing = sb.dir.path().join("missing.json");
    let missing = missing.to_str().expect("a UTF-8 path");
    let not_a_round = sb.write("not-a-round.json", r#"{"round_id": "r"}"#);
    let not_a_round = not_a_round.to_str().expect("a UTF-8 path");
    let answers = sb.write(
        "answers.json",
        r#"{"shipping_address": {"action": "decline"}}"#,
    );
    let answers = answers.to_str().expect("a UTF-8 path");
    let not_json = sb.write("not-json.json", "this is not JSON");
    let not_json = not_json.to_str().expect("a UTF-8 path");
    let run_with = |extra: &[&str]| run_args("legacy", &[], extra);
    let cases: Vec<(String, Vec<String>)> = vec![
        ("run --deadline 0".into(), run_with(&["--deadline", "0"])),
        (
            "run --script <missing file>".into(),
            run_with(&["--script", missing]),
        ),
        (
            "run --server-env without =".into(),
            run_with(&["--server-env", "NO_EQUALS_SIGN"]),
        ),
        (
            "respond with no answers".into(),
            ["respond", "r1", "--idempotency-key", "k"]
                .map(String::from)
                .to_vec(),
        ),
        (
            "respond --responses <missing file>".into(),
            [
                "respond",
                "r1",
                "--idempotency-key",
                "k",
                "--responses",
                missing,
            ]
            .map(String::from)
            .to_vec(),
        ),
        (
            "rounds --status bogus".into(),
            ["rounds", "--status", "bogus"].map(String::from).to_vec(),
        ),
        (
            "validate --round <not a round>".into(),
            ["validate", "--round", not_a_round, "--responses", answers]
                .map(String::from)
                .to_vec(),
        ),
        (
            "check-schema <missing file>".into(),
            ["check-schema", missing].map(String::from).to_vec(),
        ),
        (
            "check-schema <not JSON>".into(),
            ["check-schema", not_json].map(String::from).to_vec(),
        ),
    ];
    let mut untyped = Vec::new();
    for (what, args) in cases {
        let mut cmd = sb.command(&[]);
        cmd.args(&args);
        let out = finish(cmd, None, COMMAND_TIMEOUT);
        assert!(!out.status.success(), "{what} should fail");
        let first = out.first_stderr_line();
        let typed = out.typed_first_line();
        if !typed {
            untyped.push(format!("{what}: {first:?}"));
        }
    }
    assert!(
        untyped.is_empty(),
        "errors whose first stderr line names no typed error:\n{}",
        untyped.join("\n")
    );
}

/// `m3 component FILE` writes the policy-only component byte for byte (and `--world engine` the
/// engine), touching no database; an unwritable path is an error.
#[test]
fn component_writes_the_embedded_components() {
    let sandbox = Sandbox::new();
    let policy = sandbox.dir.path().join("m3_policy.wasm");
    let out = sandbox.m3(&["--json", "component", policy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", out.stderr);
    let report: Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    assert_eq!(report["world"], "policy-only");
    assert_eq!(report["bytes"], m3::POLICY_COMPONENT.len());
    assert_eq!(std::fs::read(&policy).unwrap(), m3::POLICY_COMPONENT);

    let engine = sandbox.dir.path().join("engine.wasm");
    let out = sandbox.m3(&["component", "--world", "engine", engine.to_str().unwrap()]);
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("wrote the engine component"));
    assert_eq!(
        std::fs::read(&engine).unwrap(),
        m3::health::engine_component()
    );
    assert!(!sandbox.db.exists(), "component created a database");

    let missing = sandbox.dir.path().join("no/such/dir/x.wasm");
    let out = sandbox.m3(&["component", missing.to_str().unwrap()]);
    let first = out.fails_with("StorageError");
    assert!(first.contains("cannot be written"), "{first}");
}

/// `--server-command` relative to the command's directory and `--server-cwd` absolute run the
/// server there; a program or directory that does not exist is a `ModelValidationError` at
/// submission, and nothing is stored.
#[test]
fn server_programs_and_directories_resolve_like_a_subprocess_api() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.dir.path().join("bin")).expect("bin");
    std::os::unix::fs::symlink(M3, sb.dir.path().join("bin/m3")).expect("a link to m3");
    let work = sb.dir.path().join("work");
    std::fs::create_dir(&work).expect("work");
    let args = |command: &str, cwd: &str| -> Vec<String> {
        [
            "run",
            "--no-prompt",
            "--json",
            "--server-name",
            "shipping",
            "--server-command",
            command,
            "--server-arg",
            "shipping-server",
            "--server-cwd",
            cwd,
            "--tool",
            "shipping:book_shipment",
            "--human-input",
            "managed",
            "Book.",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let work_text = work.display().to_string();
    let mut run = sb.spawn(&args("./bin/m3", &work_text));
    let event = run.next_json();
    assert_eq!(event["event"], "pending", "{event}");
    let (round_id, _) = ids(&event["round"]);
    sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "k",
        "--accept",
        &accept_address(),
    ])
    .ok();
    let (out, lines) = run.finish();
    out.ok();
    assert_eq!(check_run_stdout(&out, &lines)["outcome"], "succeeded");

    for (command, cwd, named) in [
        ("./bin/no-such-m3", work_text.as_str(), "./bin/no-such-m3"),
        (
            "no-such-program-anywhere",
            work_text.as_str(),
            "no-such-program-anywhere",
        ),
        ("./bin/m3", "/no/such/directory", "/no/such/directory"),
    ] {
        let mut cmd = sb.command(&[]);
        cmd.args(args(command, cwd));
        let out = finish(cmd, None, COMMAND_TIMEOUT);
        let first = out.fails_with("ModelValidationError");
        assert!(first.contains(named), "{first}");
    }
    let executions = sb.m3(&["executions", "--json"]).json();
    assert_eq!(
        executions.as_array().map(Vec::len),
        Some(1),
        "refused submissions store nothing: {executions}"
    );
}

/// `run --no-prompt --json` prints one `pending` event for every round, in order, even for a
/// round answered the instant it appeared (before the command looked), then the result. An
/// answerer in this process answers each round as soon as it is stored; 50 runs of 3 rounds.
#[test]
fn every_round_is_reported_once_even_when_answered_at_once() {
    use m3::{ManagedInputStatus, ManagedInputStore, RoundFilter};
    for attempt in 0..50 {
        let sb = Sandbox::new();
        let run = sb.spawn_run("modern", &["--ask-rounds", "3"], &[]);
        let answered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let answerer = {
            let db = sb.db.clone();
            let answered = answered.clone();
            std::thread::spawn(move || {
                let until = Instant::now() + RUN_TIMEOUT;
                let mut store = None;
                let mut done = BTreeSet::new();
                while done.len() < 3 && Instant::now() < until {
                    if store.is_none() && db.exists() {
                        store = m3::SqliteManagedInputStore::open(&db, Default::default()).ok();
                    }
                    if let Some(store) = &store {
                        let pending = store
                            .list_rounds(&RoundFilter {
                                execution_id: None,
                                status: Some(ManagedInputStatus::Pending),
                                limit: None,
                            })
                            .unwrap_or_default();
                        for round in pending {
                            let answer = std::collections::BTreeMap::from([(
                                "shipping_address".to_string(),
                                m3::ElicitationResponse::accept(
                                    json!({"street": STREET, "city": CITY}),
                                ),
                            )]);
                            let id = round.pending.round_id;
                            if store.submit_responses(&id, &answer, &id).is_ok() {
                                done.insert(id);
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                answered.store(done.len() == 3, std::sync::atomic::Ordering::SeqCst);
            })
        };
        let (out, lines) = run.finish();
        answerer.join().expect("the answerer");
        assert!(
            answered.load(std::sync::atomic::Ordering::SeqCst),
            "run {attempt}"
        );
        let result = check_run_stdout(&out, &lines);
        assert_eq!(result["outcome"], "succeeded", "run {attempt}: {result}");
        let rounds: Vec<String> = lines[..lines.len() - 1]
            .iter()
            .map(|l| {
                let event: Value = serde_json::from_str(l).expect("JSON");
                event["round"]["round_id"]
                    .as_str()
                    .expect("round id")
                    .to_string()
            })
            .collect();
        let execution = result["execution_id"].as_str().expect("execution id");
        let expected: Vec<String> = (1..=3).map(|n| format!("{execution}-r{n}")).collect();
        assert_eq!(
            rounds, expected,
            "run {attempt}: every round once, in order"
        );
    }
}

/// `--agent` takes the agent in the specification's dict form, as JSON or as `@FILE`: a scripted
/// agent's plan answers the round (mode `fail`), its script is used; with `--harness` or
/// `--model` it is refused by the parser; a malformed agent is a `ModelValidationError` naming
/// the key, and nothing is submitted.
#[test]
fn run_takes_the_agent_in_its_dict_form() {
    let sb = Sandbox::new();
    let plan =
        json!([{"match": {"request_key": "shipping_address"}, "response": address_answer()}]);
    let inline = json!({"harness": "scripted", "elicitation_plan": plan}).to_string();
    let file = sb.write(
        "agent.json",
        &json!({
            "script": {"steps": [{"tool": "shipping:book_shipment", "arguments": {"item": "lamp"}}]},
            "elicitation_plan": plan,
        })
        .to_string(),
    );
    let from_file = format!("@{}", file.display());
    for agent in [inline.as_str(), from_file.as_str()] {
        let mut cmd = sb.command(&[]);
        cmd.args(run_args(
            "legacy",
            &[],
            &["--human-input", "fail", "--agent", agent],
        ));
        let out = finish(cmd, None, RUN_TIMEOUT);
        let lines: Vec<String> = out.stdout.lines().map(str::to_string).collect();
        let result = check_run_stdout(&out, &lines);
        assert_eq!(result["outcome"], "succeeded", "--agent {agent}: {result}");
        let output = result["tool_calls"][0]["output"].as_str().unwrap();
        assert!(output.contains(STREET), "{output}");
    }
    let executions = sb.m3(&["executions", "--json"]).json();
    assert_eq!(executions.as_array().unwrap().len(), 2, "{executions}");

    for extra in [["--harness", "codex"], ["--model", "m"]] {
        let mut args = vec!["--agent", inline.as_str()];
        args.extend(extra);
        let mut cmd = sb.command(&[]);
        cmd.args(run_args("legacy", &[], &args));
        let out = finish(cmd, None, COMMAND_TIMEOUT);
        let first = out.fails_with("ManagedInputValidationError");
        assert!(
            first.contains("--agent") && first.contains(extra[0]),
            "{first}"
        );
    }
    for (agent, words) in [
        (
            r#"{"harness": "scripted", "modle": 1}"#,
            &["--agent", "`modle`"][..],
        ),
        (r#"{"harness": "codex"}"#, &["codex", "model"][..]),
        ("{", &["--agent", "EOF"][..]),
        ("@/nonexistent/agent.json", &["/nonexistent/agent.json"][..]),
    ] {
        let mut cmd = sb.command(&[]);
        cmd.args(run_args("legacy", &[], &["--agent", agent]));
        let out = finish(cmd, None, COMMAND_TIMEOUT);
        let first = out.fails_with("ModelValidationError");
        for word in words {
            assert!(first.contains(word), "--agent {agent}: {first}");
        }
    }
    let executions = sb.m3(&["executions", "--json"]).json();
    assert_eq!(
        executions.as_array().unwrap().len(),
        2,
        "nothing more was submitted"
    );
}

/// A server that writes a line to stderr and exits with code 3 before answering: the failure
/// names the exit code, the run shows the end of its stderr and `m3 status` keeps it, and a
/// secret of its environment that it printed is never shown.
#[test]
fn a_server_that_exits_is_reported_with_its_exit_code_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.sqlite");
    let out = Command::new(M3)
        .arg("--db")
        .arg(&db)
        .args(["run", "--server-name", "s", "--server-command", "/bin/sh"])
        .args([
            "--server-arg=-c",
            "--server-arg=echo \"boom: missing API_KEY (have $SECRET_TOKEN)\" >&2; exit 3",
        ])
        .args(["--server-env", "SECRET_TOKEN=tok-5e1c7a"])
        .args(["--tool", "s:t", "go"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("exited with code 3"), "{stdout}");
    assert!(stdout.contains("boom: missing API_KEY"), "{stdout}");
    assert!(stdout.contains("[redacted]"), "{stdout}");
    assert!(!stdout.contains("tok-5e1c7a") && !stderr.contains("tok-5e1c7a"));
    let listed = Command::new(M3)
        .arg("--db")
        .arg(&db)
        .args(["executions", "--json"])
        .output()
        .unwrap();
    let executions: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let id = executions[0]["execution_id"].as_str().unwrap().to_string();
    let status = Command::new(M3)
        .arg("--db")
        .arg(&db)
        .args(["status", &id, "--json"])
        .output()
        .unwrap();
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(
        status["failure_message"]
            .as_str()
            .unwrap()
            .contains("exited with code 3"),
        "{status}"
    );
    let tail = status["stderr_tail"].as_str().unwrap();
    assert!(
        tail.contains("boom: missing API_KEY") && !tail.contains("tok-5e1c7a"),
        "{tail}"
    );
}

/// `respond --wait`: exit 0 once the round is resolved; non-zero with the round's failure
/// (typed, with its code) when it fails after the answer; `OperationTimeout` when the wait ends
/// first (the run's process is stopped, so nobody delivers).
#[test]
fn respond_wait_follows_the_round_to_its_end() {
    let sb = Sandbox::new();
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, _) = ids(&sb.wait_pending());
    let out = sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "k",
        "--accept",
        &accept_address(),
        "--wait",
        "60",
    ]);
    out.ok();
    assert!(
        out.stdout
            .contains(&format!("round {round_id} is resolved")),
        "{}",
        out.stdout
    );
    assert_eq!(sb.show(&round_id)["status"], "resolved");
    run.finish().0.ok();

    let sb = Sandbox::new();
    let run = sb.spawn_run("modern", &["--fail-after-answer"], &[]);
    let (round_id, _) = ids(&sb.wait_pending());
    // `--wait` without SECS waits as long as it takes.
    let out = sb.m3(&[
        "respond",
        &round_id,
        "--wait",
        "--idempotency-key",
        "k",
        "--accept",
        &accept_address(),
    ]);
    let line = out.fails_with("ManagedInputStateError");
    assert!(
        line.contains(&format!("round {round_id} failed: server_error")),
        "{line}"
    );
    let (out, _) = run.finish();
    assert!(!out.status.success(), "the run failed too");

    let sb = Sandbox::new();
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, _) = ids(&sb.wait_pending());
    let pid = run.guard.child.id() as i32;
    // SAFETY: signals a child this test started and still holds.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let out = sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "k",
        "--accept",
        &accept_address(),
        "--wait",
        "0.5",
    ]);
    let line = out.fails_with("OperationTimeout");
    assert!(line.contains("is still response_validated"), "{line}");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let (out, _) = run.finish();
    out.ok();
}

/// Answers given as flags need their idempotency key; no answers and no terminal is a typed
/// error saying what to give; a bad `--wait` is refused before anything is submitted.
#[test]
fn respond_says_what_to_give_without_a_key_or_a_terminal() {
    let sb = Sandbox::new();
    let run = sb.spawn_run("legacy", &[], &[]);
    let (round_id, _) = ids(&sb.wait_pending());
    let out = sb.m3(&["respond", &round_id, "--accept", &accept_address()]);
    let line = out.fails_with("ManagedInputValidationError");
    assert!(line.contains("--idempotency-key KEY is required"), "{line}");
    let out = sb.m3(&["respond", &round_id]);
    let line = out.fails_with("ManagedInputValidationError");
    assert!(
        line.contains("no answers given and no terminal to ask on")
            && line.contains("--accept")
            && line.contains("--responses"),
        "{line}"
    );
    let out = sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "k",
        "--accept",
        &accept_address(),
        "--wait=-1",
    ]);
    out.fails_with("ManagedInputValidationError");
    assert_eq!(
        sb.show(&round_id)["status"],
        "pending",
        "nothing was submitted"
    );
    sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "k",
        "--accept",
        &accept_address(),
    ])
    .ok();
    run.finish().0.ok();
}

/// `m3 doctor` on a PostgreSQL URL reports the server, its version and the schema version,
/// before the database holds m3's tables and after; a password in the URL is never printed,
/// and the commands that only read refuse a database m3 has not used yet.
#[test]
fn doctor_reports_the_postgres_server_its_version_and_the_schema() {
    let sb = Sandbox::postgres();
    let url = sb.db.to_str().expect("a URL is text").to_string();
    // The throwaway server trusts its socket's users, so a password is accepted and unused.
    let user = m3_tests::postgres_server::PostgresServer::shared().user();
    let with_password = url.replacen(&format!("{user}@"), &format!("{user}:s3cret-pass@"), 1);
    assert_ne!(with_password, url);
    let doctor = |db: &str| {
        let mut cmd = sb.bare();
        cmd.args(["--db", db, "doctor", "--json"]);
        finish(cmd, None, COMMAND_TIMEOUT)
    };
    let before = doctor(&with_password);
    let report: serde_json::Value =
        serde_json::from_str(&before.stdout).expect("doctor --json prints JSON");
    let db = &report["database"];
    assert_eq!(db["backend"], "postgresql", "{report}");
    assert_eq!(db["exists"], false, "{report}");
    assert_eq!(db["schema_version"], 0, "{report}");
    assert!(
        db["server_version"]
            .as_str()
            .is_some_and(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit())),
        "{report}"
    );
    assert!(db["error"].is_null(), "{report}");
    for text in [&before.stdout, &before.stderr] {
        assert!(
            !text.contains("s3cret-pass"),
            "the password was printed: {text}"
        );
    }
    // A command that only reads does not create the tables.
    let pending = sb.m3(&["pending", "--json"]);
    assert!(!pending.status.success());
    assert!(
        pending.stderr.contains("database_missing"),
        "{}",
        pending.stderr
    );
    assert!(!pending.stderr.contains("s3cret-pass"));

    // A server that cannot be reached is a storage failure, not a missing database.
    let mut cmd = sb.bare();
    cmd.args([
        "--db",
        "postgres://u:s3cret-pass@%2Fno-such-dir/x",
        "pending",
        "--json",
    ]);
    let unreachable = finish(cmd, None, COMMAND_TIMEOUT);
    assert!(!unreachable.status.success());
    assert!(
        format!("{}{}", unreachable.stdout, unreachable.stderr).contains("storage_failure"),
        "{unreachable:?}"
    );
    assert!(
        !unreachable.stdout.contains("s3cret-pass") && !unreachable.stderr.contains("s3cret-pass")
    );

    m3::PostgresManagedInputStore::open(&url, m3::StoreOptions::default())
        .expect("opening creates the tables");
    let after = doctor(&url);
    let report: serde_json::Value =
        serde_json::from_str(&after.stdout).expect("doctor --json prints JSON");
    let db = &report["database"];
    assert_eq!(db["exists"], true, "{report}");
    assert_eq!(
        db["schema_version"], db["supported_schema_version"],
        "{report}"
    );
    assert_eq!(db["unreadable_records"], serde_json::json!([]), "{report}");
    assert_eq!(sb.m3(&["pending", "--json"]).json(), serde_json::json!([]));
}

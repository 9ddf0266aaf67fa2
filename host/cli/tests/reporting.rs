//! How `m3` reports itself, against the real binary: which commands may create a database,
//! errors as typed text or JSON objects, `doctor`'s exit status, a closed output pipe, help
//! examples, completions and the visible example server.

mod common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Every command that only reads or answers refuses a database that does not exist, with a
/// typed error naming the path, and creates nothing.
#[test]
fn read_commands_refuse_a_missing_database_and_create_nothing() {
    let sb = Sandbox::new();
    let typo = sb.dir.path().join("executoins.sqlite");
    let typo_text = typo.to_str().expect("a UTF-8 path");
    let commands: &[&[&str]] = &[
        &["pending"],
        &["pending", "--wait", "1"],
        &["rounds"],
        &["executions"],
        &["show", "exec-1-r1"],
        &["status", "exec-1"],
        &["events", "exec-1"],
        &["cancel", "exec-1"],
        &["recover"],
        &[
            "respond",
            "exec-1-r1",
            "--decline",
            "a",
            "--idempotency-key",
            "k",
        ],
    ];
    for args in commands {
        let mut cmd = sb.bare();
        cmd.arg("--db").arg(&typo).args(*args);
        let out = finish(cmd, None, COMMAND_TIMEOUT);
        let what = args.join(" ");
        let line = out.fails_with("StorageError");
        assert!(
            line.starts_with("StorageError: there is no database at ") && line.contains(typo_text),
            "`{what}`: {line}"
        );
        assert!(line.contains("database_missing"), "`{what}`: {line}");
        assert!(!typo.exists(), "`{what}` created {typo_text}");
        let entries: Vec<_> = std::fs::read_dir(sb.dir.path()).unwrap().collect();
        assert!(entries.is_empty(), "`{what}` left files: {entries:?}");
    }
    // The same through M3_DB.
    let mut cmd = sb.bare();
    cmd.env("M3_DB", &typo).args(["pending", "--json"]);
    let out = finish(cmd, None, COMMAND_TIMEOUT);
    let error = json_error(&out, "pending --json with M3_DB missing");
    assert_eq!(error["type"], "StorageError");
    assert_eq!(error["code"], "database_missing");
    assert!(!typo.exists());
}

/// The JSON error object on stderr (and nothing on stdout) of a failed `--json` command.
fn json_error(out: &Output, what: &str) -> Value {
    assert!(!out.status.success(), "{what}: exit 0");
    assert!(out.stdout.is_empty(), "{what}: stdout {:?}", out.stdout);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: one stderr line, got {:?}",
        out.stderr
    );
    let v: Value = serde_json::from_str(lines[0])
        .unwrap_or_else(|e| panic!("{what}: stderr is not JSON ({e}): {}", lines[0]));
    let error = v["error"].clone();
    assert_eq!(
        v.as_object().map(|o| o.len()),
        Some(1),
        "{what}: only `error`: {v}"
    );
    // The keys in the order the contract writes them: type, code, message.
    let keys: Vec<&String> = error.as_object().expect("an object").keys().collect();
    assert_eq!(keys, ["type", "code", "message"], "{what}: {v}");
    assert!(
        TYPED_ERRORS.contains(&error["type"].as_str().unwrap_or_default()),
        "{what}: {v}"
    );
    assert!(
        !error["message"].as_str().unwrap_or_default().is_empty(),
        "{what}: {v}"
    );
    error
}

/// With `--json`, every kind of failure is one JSON object on stderr with its type, code and
/// message: command-line mistakes, bad input, unknown rounds, incompatible databases.
#[test]
fn json_errors_are_objects_with_type_code_and_message() {
    let sb = Sandbox::new();
    sb.create_database();
    let not_json = sb.write("answers.json", "this is not JSON");
    let not_json = not_json.to_str().expect("a UTF-8 path");
    let not_m3 = sb.write("other.sqlite", "hello, I am not a database");
    let not_m3 = not_m3.to_str().expect("a UTF-8 path");
    let cases: Vec<(Vec<&str>, &str, Option<&str>)> = vec![
        (
            vec!["--json", "pendingg"],
            "ManagedInputValidationError",
            Some("invalid_command_line"),
        ),
        (
            vec!["--json", "rounds", "--status", "bogus"],
            "ManagedInputValidationError",
            None,
        ),
        (
            vec!["--json", "show", "exec-0000-r1"],
            "ManagedInputStateError",
            Some("round_not_found"),
        ),
        (
            vec!["--json", "status", "exec-0000"],
            "ManagedInputStateError",
            Some("execution_not_found"),
        ),
        (
            vec![
                "--json",
                "respond",
                "exec-0000-r1",
                "--idempotency-key",
                "k",
                "--accept",
                "shipping_address={not json",
            ],
            "ManagedInputValidationError",
            Some("malformed_json"),
        ),
        (
            vec!["--json", "check-schema", not_json],
            "ManagedInputValidationError",
            Some("malformed_json"),
        ),
    ];
    for (args, type_name, code) in cases {
        let out = sb.m3(&args);
        let what = args.join(" ");
        let error = json_error(&out, &what);
        assert_eq!(error["type"], type_name, "{what}: {error}");
        if let Some(code) = code {
            assert_eq!(error["code"], code, "{what}: {error}");
        }
    }
    let mut cmd = sb.bare();
    cmd.args(["--db", not_m3, "--json", "executions"]);
    let out = finish(cmd, None, COMMAND_TIMEOUT);
    let error = json_error(&out, "executions on a file that is not a database");
    assert_eq!(error["type"], "StorageError");
    assert_eq!(error["code"], "incompatible_database");
    // Without --json the same failure is a typed line, not JSON.
    let out = sb.m3(&["show", "exec-0000-r1"]);
    let line = out.fails_with("ManagedInputStateError");
    assert!(serde_json::from_str::<Value>(line).is_err());
}

/// `doctor --json` is plain data (no Rust debug text) and its exit status says whether the
/// database is healthy: 0 for an m3 database or none yet, 1 for another application's SQLite
/// file or a file that is not SQLite.
#[test]
fn doctor_exits_non_zero_when_the_database_is_not_healthy() {
    let sb = Sandbox::new();
    let missing = sb.m3(&["doctor", "--json"]);
    assert!(missing.status.success(), "{}", missing.stderr);
    let report = missing.json();
    assert_eq!(report["database"]["exists"], false);
    assert_eq!(report["healthy"], true);

    sb.create_database();
    let healthy = sb.m3(&["doctor", "--json"]);
    assert!(healthy.status.success(), "{}", healthy.stderr);
    let report = healthy.json();
    assert_eq!(report["healthy"], true, "{report}");
    let cache = report["component"]["cache"].as_str().unwrap_or_default();
    assert!(
        ["hit", "stored", "bypassed", "recompiled"].contains(&cache),
        "the cache is one word, not Rust debug text: {report}"
    );
    let text = report.to_string();
    assert!(
        !text.contains("Hit(") && !text.contains("Stored(") && !text.contains("Some("),
        "{text}"
    );
    let human = sb.m3(&["doctor"]);
    assert!(human.status.success());
    assert!(
        human.stdout.lines().last() == Some("healthy"),
        "{}",
        human.stdout
    );

    let other = sb.dir.path().join("other.sqlite");
    let created = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import sqlite3; c = sqlite3.connect({:?}); c.execute('create table t(x)'); c.commit()",
            other.to_str().expect("a UTF-8 path")
        ))
        .status()
        .expect("python3 runs");
    assert!(created.success());
    let not_text = sb.write("text.sqlite", "hello, I am not a database");
    for (file, what) in [
        (&other, "another application's database"),
        (&not_text, "a text file"),
    ] {
        let mut cmd = sb.bare();
        cmd.arg("--db").arg(file).args(["doctor", "--json"]);
        let out = finish(cmd, None, COMMAND_TIMEOUT);
        assert_eq!(out.status.code(), Some(1), "{what}: {}", out.stdout);
        let report: Value = serde_json::from_str(&out.stdout).expect("the report is JSON");
        assert_eq!(report["healthy"], false, "{what}: {report}");
        let mut cmd = sb.bare();
        cmd.arg("--db").arg(file).arg("doctor");
        let out = finish(cmd, None, COMMAND_TIMEOUT);
        assert_eq!(out.status.code(), Some(1), "{what}");
        assert!(out.stdout.contains("PROBLEM"), "{what}: {}", out.stdout);
    }
}

/// `demo --db PATH` creates and keeps its database: the execution can be read afterwards.
/// Without `--db` it leaves no database behind in the working directory.
#[test]
fn demo_keeps_the_database_it_is_given() {
    let sb = Sandbox::new();
    let answer = r#"{"street":"1 Main Street","city":"Pune"}"#;
    let out = sb.m3(&["demo", "--answer", answer]);
    out.ok();
    assert!(out.stdout.contains("(kept)"), "{}", out.stdout);
    let listed = sb.m3(&["executions", "--json"]).json();
    let listed = listed.as_array().expect("an array");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["outcome"], "succeeded");
    let rounds = sb.m3(&["rounds", "--json"]).json();
    assert_eq!(rounds[0]["status"], "resolved", "{rounds}");

    let fresh = Sandbox::new();
    let mut cmd = fresh.bare();
    cmd.args(["demo", "--answer", answer]);
    let out = finish(cmd, None, COMMAND_TIMEOUT);
    out.ok();
    assert!(out.stdout.contains("removed afterwards"), "{}", out.stdout);
    let entries: Vec<_> = std::fs::read_dir(fresh.dir.path()).unwrap().collect();
    assert!(entries.is_empty(), "demo left {entries:?}");
}

/// A reader that goes away (`m3 ... | head -1`) ends the command quietly: no panic, no error
/// line, the shells' status for a closed pipe (141), and the demo's execution is not left
/// running (it is cancelled as the command unwinds).
#[test]
fn a_closed_output_pipe_ends_the_command_quietly() {
    let sb = Sandbox::new();
    let mut guard = ChildGuard {
        child: sb
            .command(&["demo", "--answer", r#"{"street":"1","city":"Pune"}"#])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("m3 demo starts"),
    };
    let child = &mut guard.child;
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("the first line");
    assert!(first.starts_with("database: "), "{first}");
    drop(stdout);
    let stderr = read_all(child.stderr.take().expect("piped"));
    let status = guard.wait_for(RUN_TIMEOUT).expect("m3 demo ends");
    let stderr = stderr.recv_timeout(COMMAND_TIMEOUT).expect("stderr closes");
    assert_eq!(status.code(), Some(141), "stderr: {stderr}");
    assert_eq!(stderr, "", "a closed pipe is not an error");
    let listed = sb.m3(&["executions", "--json"]).json();
    let execution = &listed[0];
    assert_eq!(execution["lifecycle"], "finished", "{listed}");
    assert_ne!(execution["outcome"], "succeeded", "{listed}");

    // A large output (completions) into a reader that takes one line.
    let mut guard = ChildGuard {
        child: sb
            .command(&["completions", "bash"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("m3 completions starts"),
    };
    drop(guard.child.stdout.take());
    let stderr = read_all(guard.child.stderr.take().expect("piped"));
    let status = guard
        .wait_for(COMMAND_TIMEOUT)
        .expect("m3 completions ends");
    let stderr = stderr.recv_timeout(COMMAND_TIMEOUT).expect("stderr closes");
    assert!(
        status.code() == Some(141) || status.success(),
        "{status:?}: {stderr}"
    );
    assert_eq!(stderr, "");
}

/// Shell completions name every subcommand; the example server is a visible subcommand that
/// speaks MCP on stdio.
#[test]
fn completions_and_the_example_server_are_there_for_users() {
    let sb = Sandbox::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = sb.m3(&["completions", shell]);
        out.ok();
        for sub in [
            "pending",
            "respond",
            "example-server",
            "completions",
            "doctor",
        ] {
            assert!(out.stdout.contains(sub), "{shell} completions lack {sub}");
        }
    }
    let help = sb.m3(&["--help"]);
    help.ok();
    assert!(help.stdout.contains("example-server"), "{}", help.stdout);
    assert!(help.stdout.contains("Examples:"), "{}", help.stdout);
    let respond_help = sb.m3(&["respond", "--help"]);
    respond_help.ok();
    assert!(respond_help.stdout.contains("Examples:\n  m3 respond "));

    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"t","version":"1"}}}"#;
    let out = sb.m3_stdin(
        &["example-server", "--era", "legacy"],
        &format!("{initialize}\n"),
    );
    out.ok();
    let reply: Value = serde_json::from_str(out.stdout.lines().next().expect("a reply"))
        .expect("a JSON-RPC reply");
    assert_eq!(reply["id"], 1, "{reply}");
    assert!(reply["result"]["serverInfo"].is_object(), "{reply}");
}

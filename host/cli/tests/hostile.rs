//! The command against a hostile user, server, file or neighbour: generated hostile arguments
//! for every subcommand, flooding servers, `/dev/zero` as input, odd and foreign databases,
//! loose file modes, secrets on command lines, and answers to rounds that already ended. Each
//! case must end with a typed first stderr line (or succeed), never a panic, a hang or unbounded
//! memory, and must change nothing it should not.

mod common;

use common::*;
use m3_tests::replay::RandomTest;
use m3_tests::rng::Rng;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Numbers a hostile user types where seconds or counts are expected.
const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1e19",
    "1e300",
    "18446744073709551615",
    "NaN",
    "inf",
    "-inf",
    "1e-400",
    "0.0001",
    "abc",
    "",
];

/// Texts a hostile user types where ids, keys, names or JSON are expected.
const TEXTS: &[&str] = &[
    "",
    "-",
    "--",
    "x=y",
    "=",
    "shipping:",
    ":",
    "{",
    "null",
    "[]",
    "{\"a\":1,\"a\":2}",
    "1e400",
    "\u{202e}evil",
    "../../etc/passwd",
    "ключ-🔑",
    "a\tb",
];

/// Paths a hostile user gives for files.
fn paths(sb: &Sandbox) -> Vec<String> {
    let link = sb.dir.path().join("link");
    let _ = std::os::unix::fs::symlink("/dev/zero", &link);
    vec![
        "/dev/zero".into(),
        "/".into(),
        "".into(),
        "-".into(),
        "/nonexistent/dir/file".into(),
        link.display().to_string(),
        sb.dir.path().display().to_string(),
    ]
}

/// What the CLI's entry point says when m3 itself panicked (`main.rs`'s panic hook).
const PANIC_WORDS: &str = "m3 failed unexpectedly";

/// Generated argument lists for every subcommand.
fn cases(sb: &Sandbox, rng: &mut Rng, per_command: usize) -> Vec<Vec<String>> {
    let paths = paths(sb);
    let path_refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    for _ in 0..per_command {
        let n = rng.pick(NUMBERS).to_string();
        let t = rng.pick(TEXTS).to_string();
        let p = rng.pick(&path_refs).to_string();
        let base_run = |extra: &[String]| -> Vec<String> {
            let mut args: Vec<String> = [
                "run",
                "--no-prompt",
                "--json",
                "--server-name",
                "shipping",
                "--server-command",
                M3,
                "--server-arg",
                "shipping-server",
                "--tool",
                "shipping:book_shipment",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            args.extend(extra.iter().cloned());
            args.push("Book.".into());
            args
        };
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        out.push(base_run(&s(&["--deadline", &n])));
        out.push(base_run(&s(&["--lease", &n])));
        out.push(base_run(&s(&["--turn-deadline", &n, "--harness", "codex"])));
        out.push(base_run(&s(&[
            "--harness",
            "codex",
            "--model",
            "m",
            "--model-base-url",
            "http://127.0.0.1:9/v1",
            "--model-retries",
            rng.pick(&[n.as_str(), "101", "4294967296"]),
        ])));
        out.push(base_run(&s(&["--script", &p])));
        out.push(base_run(&s(&["--agent", &t])));
        out.push(base_run(&s(&["--agent", &format!("@{p}")])));
        out.push(base_run(&s(&["--human-input", &t])));
        out.push(base_run(&s(&["--server-env", &t])));
        out.push(base_run(&s(&["--server-env-file", &p])));
        out.push(base_run(&s(&["--server-cwd", &p])));
        out.push(base_run(&s(&["--tool", &t])));
        let http_run = |extra: &[&str]| -> Vec<String> {
            let mut args = s(&[
                "run",
                "--no-prompt",
                "--json",
                "--server-name",
                "remote",
                "--tool",
                "remote:lookup",
            ]);
            args.extend(s(extra));
            args.push("Look it up.".into());
            args
        };
        out.push(http_run(&["--server-url", &t]));
        out.push(http_run(&[
            "--server-url",
            "http://127.0.0.1:9/mcp",
            "--server-header",
            &t,
        ]));
        out.push(http_run(&[
            "--server-url",
            "http://127.0.0.1:9/mcp",
            "--server-header-file",
            &p,
        ]));
        out.push(http_run(&[
            "--server-url",
            "http://127.0.0.1:9/mcp",
            "--server-delivery-timeout",
            &n,
        ]));
        out.push(s(&["pending", "--wait", &n]));
        out.push(s(&["pending", "--execution", &t]));
        out.push(s(&["respond", &t, "--idempotency-key", &t, "--accept", &t]));
        out.push(s(&[
            "respond",
            "r",
            "--idempotency-key",
            "k",
            "--responses",
            &p,
        ]));
        out.push(s(&[
            "respond",
            &t,
            "--idempotency-key",
            "k",
            "--decline",
            &t,
        ]));
        out.push(s(&["rounds", "--status", &t]));
        out.push(s(&["rounds", "--execution", &t]));
        out.push(s(&["show", &t, "--redacted"]));
        out.push(s(&["status", &t]));
        out.push(s(&["cancel", &t]));
        out.push(s(&["validate", "--round", &p, "--responses", &p]));
        out.push(s(&["check-schema", &p]));
        out.push(s(&["component", &p]));
        out.push(s(&["--db", &p, "rounds"]));
        out.push(s(&["--db", &p, "doctor"]));
        out.push(s(&["demo", "--answer", &t]));
        out.push(s(&["events", &t]));
        out.push(s(&["--db", &p, "executions"]));
        out.push(s(&["--db", &p, "recover"]));
        out.push(s(&["serve", "--listen", &t]));
        out.push(s(&["serve", "--listen", "0.0.0.0:0", "--token-file", &p]));
        out.push(s(&["migrate", "--from", &p, "--to", &t]));
        out.push(s(&[
            "migrate",
            "--from",
            &format!("sqlite:{p}"),
            "--to",
            "postgres://",
        ]));
        out.push(s(&["--db", &t, "pending"]));
        out.push(s(&[
            "--db",
            &format!("postgres://m3@%2Fno-such-dir/{t}"),
            "doctor",
        ]));
        out.push(s(&["completions", &t]));
        out.push(s(&["example-server", "--era", &t]));
    }
    out
}

/// Every subcommand with generated hostile arguments: each run ends in time, never panics, and
/// either succeeds or says what is wrong with a typed first stderr line.
#[test]
fn hostile_arguments_never_panic_and_every_error_is_typed() {
    let seed = RandomTest::HostileArguments.seed();
    let sb = Sandbox::new();
    let mut rng = Rng::new(seed);
    let mut failures = Vec::new();
    // The words looked for are the ones the entry point prints (a renamed message would make
    // every panic pass unseen).
    let main_rs = include_str!("../src/main.rs");
    assert!(
        main_rs.contains(PANIC_WORDS),
        "main.rs no longer says {PANIC_WORDS:?}"
    );
    let cases = cases(&sb, &mut rng, 3);
    let count = cases.len();
    for args in cases {
        let mut cmd = sb.command(&[]);
        cmd.args(&args);
        let out = finish(cmd, None, Duration::from_secs(60));
        // A failed execution (`run`, `demo`) or an unhealthy verdict (`doctor`) is reported on
        // stdout with a non-zero exit and nothing on stderr: that is an answer, not an error.
        let verdict = !out.stdout.trim().is_empty() && out.stderr.trim().is_empty();
        // A panic ends as a typed `EngineError` line (the entry point's hook), so it is told
        // by its words, not by its exit code or type alone.
        if out.status.code() == Some(101) || out.stderr.contains(PANIC_WORDS) {
            failures.push(format!("{args:?}: a panic\n{}", out.stderr));
        } else if !out.status.success() && !verdict && !out.typed_first_line() {
            let first = out.first_stderr_line();
            failures.push(format!("{args:?}: untyped first stderr line {first:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "seed {seed:x}: {} of {count} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The findings of the adversarial review, each a regression test: values that used to panic
/// or store unusable records are typed errors and store nothing.
#[test]
fn huge_durations_are_typed_errors_and_store_nothing() {
    let sb = Sandbox::new();
    // Counts too: retries Codex would clamp, and more executions at once than a run takes.
    let mut retries = sb.command(&[]);
    retries.args(run_args(
        "legacy",
        &[],
        &[
            "--harness",
            "codex",
            "--model",
            "m",
            "--model-base-url",
            "http://127.0.0.1:9/v1",
            "--model-retries",
            "101",
        ],
    ));
    let out = finish(retries, None, COMMAND_TIMEOUT);
    let line = out.fails_with("ManagedInputValidationError");
    assert!(line.contains("0..=100"), "{line}");
    let mut models = sb.command(&[]);
    let many: Vec<String> = (0..65)
        .flat_map(|i| ["--model".to_string(), format!("m{i}")])
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    models.args(run_args("legacy", &[], &many));
    let out = finish(models, None, COMMAND_TIMEOUT);
    let line = out.fails_with("ModelValidationError");
    assert!(line.contains("from 0 to 64"), "{line}");
    for (args, name) in [
        (vec!["--deadline", "1e19"], "ModelValidationError"),
        (
            vec!["--deadline", "18446744073709551615"],
            "ModelValidationError",
        ),
        (vec!["--lease", "1e300"], "ModelValidationError"),
    ] {
        let mut cmd = sb.command(&[]);
        cmd.args(run_args("legacy", &[], &args));
        let out = finish(cmd, None, COMMAND_TIMEOUT);
        let first = out.fails_with(name);
        assert!(first.contains("seconds from"), "{first}");
    }
    sb.m3(&["pending", "--wait", "1e19"])
        .fails_with("ManagedInputValidationError");
    // Nothing was stored: the refusals came before the database was even created.
    assert!(!sb.db.exists(), "a refused run created the database");
}

/// `/dev/zero` (or an endless standard input) as an input file: refused at the size limit in
/// well under the time it would take to read gigabytes, with a typed error.
#[test]
fn endless_inputs_are_refused_at_the_limit() {
    let sb = Sandbox::new();
    let started = Instant::now();
    sb.m3(&[
        "respond",
        "r1",
        "--idempotency-key",
        "k",
        "--responses",
        "/dev/zero",
    ])
    .fails_with("ManagedInputValidationError");
    sb.m3(&[
        "validate",
        "--round",
        "/dev/zero",
        "--responses",
        "/dev/zero",
    ])
    .fails_with("ManagedInputValidationError");
    let mut cmd = sb.command(&["check-schema", "-"]);
    cmd.stdin(Stdio::from(std::fs::File::open("/dev/zero").unwrap()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("ManagedInputValidationError: "),
        "{stderr}"
    );
    let mut cmd = sb.command(&[]);
    cmd.args(run_args("legacy", &[], &["--script", "/dev/zero"]));
    finish(cmd, None, COMMAND_TIMEOUT).fails_with("ModelValidationError");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

/// The most the command reads of an input file (`MAX_INPUT_BYTES` in `host/cli/src/main.rs`).
const MAX_INPUT: usize = 8 * 1024 * 1024;

/// How the command's reader refuses an input past [`MAX_INPUT`] (`read_input_within`).
const PAST_THE_LIMIT: &str = "is larger than 8 MiB (payload_too_large); nothing was read past that";

/// Writes `json` followed by spaces, `len` bytes in all (trailing whitespace is still one JSON
/// document, so the file's size is the only thing that differs between two lengths).
fn padded(sb: &Sandbox, name: &str, json: &str, len: usize) -> String {
    assert!(
        json.len() <= len,
        "{name}: {} bytes before padding",
        json.len()
    );
    let path = sb.write(name, &format!("{json}{}", " ".repeat(len - json.len())));
    path.to_str().expect("a UTF-8 path").to_string()
}

/// Every input the command reads with its 8 MiB limit, at the edge: a file of exactly 8 MiB is
/// read whole and then used (a round file, accepted) or refused for what it holds, never for
/// the reader's limit (an answer map by the library's 1 MiB limit, which names all 8,388,608
/// bytes it was given; a schema by the component's 256 KiB one; a script, an agent and a token
/// file for their content); one byte more is refused by the reader itself, with the size
/// error. Answer files (`respond`, `validate`), standard input (`respond`, `check-schema`),
/// round files, schemas, scripts, `--agent @FILE` and `serve --token-file`.
#[test]
fn inputs_at_the_8_mib_limit_are_read_and_one_byte_more_is_refused() {
    let sb = Sandbox::new();
    let _run = sb.spawn_run("legacy", &[], &[]);
    let round = sb.wait_pending();
    let (round_id, _) = ids(&round);
    let round_json = serde_json::to_string_pretty(&round).expect("JSON");
    let round_small = padded(&sb, "round.json", &round_json, round_json.len());
    let answers_json = json!({"shipping_address": address_answer()}).to_string();
    let answers_small = padded(&sb, "answers.json", &answers_json, answers_json.len());
    let schema_json = r#"{"type":"object","properties":{"a":{"type":"string"}}}"#;
    let script_json = r#"{"not":"a script"}"#;
    let agent_json = r#"{"harness":"scripted","modle":1}"#;
    let run_with = |extra: &[&str]| {
        let mut cmd = sb.command(&[]);
        cmd.args(run_args("legacy", &[], extra));
        finish(cmd, None, COMMAND_TIMEOUT)
    };
    let from_stdin = |args: &[&str], file: &str| {
        let mut cmd = sb.command(args);
        cmd.stdin(Stdio::from(
            std::fs::File::open(file).expect("opening an input"),
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let what = format!("{cmd:?} < {file}");
        let out = cmd.output().expect("running m3");
        Output::new(
            what,
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    for len in [MAX_INPUT, MAX_INPUT + 1] {
        let at_limit = len == MAX_INPUT;
        let answers = padded(&sb, "answers-edge.json", &answers_json, len);
        let round_file = padded(&sb, "round-edge.json", &round_json, len);
        let schema = padded(&sb, "schema-edge.json", schema_json, len);
        let script = padded(&sb, "script-edge.json", script_json, len);
        let agent = format!("@{}", padded(&sb, "agent-edge.json", agent_json, len));
        let token = padded(&sb, "token-edge", "", len);
        let outputs = [
            (
                "respond --responses FILE",
                sb.m3(&[
                    "respond",
                    &round_id,
                    "--idempotency-key",
                    "k",
                    "--responses",
                    &answers,
                ]),
                "ManagedInputValidationError",
                "responses are 8388608 bytes; the limit is 1048576",
            ),
            (
                "respond --responses -",
                from_stdin(
                    &[
                        "respond",
                        &round_id,
                        "--idempotency-key",
                        "k",
                        "--responses",
                        "-",
                    ],
                    &answers,
                ),
                "ManagedInputValidationError",
                "responses are 8388608 bytes; the limit is 1048576",
            ),
            (
                "validate --responses FILE",
                sb.m3(&["validate", "--round", &round_small, "--responses", &answers]),
                "ManagedInputValidationError",
                "responses are 8388608 bytes; the limit is 1048576",
            ),
            (
                "validate --round FILE",
                sb.m3(&[
                    "validate",
                    "--round",
                    &round_file,
                    "--responses",
                    &answers_small,
                ]),
                "",
                "valid: the answers fit round",
            ),
            (
                "check-schema FILE",
                sb.m3(&["check-schema", &schema]),
                "ManagedInputValidationError",
                "requestedSchema is 8388608 bytes; the limit is 262144",
            ),
            (
                "check-schema -",
                from_stdin(&["check-schema", "-"], &schema),
                "ManagedInputValidationError",
                "requestedSchema is 8388608 bytes; the limit is 262144",
            ),
            (
                "run --script FILE",
                run_with(&["--script", &script]),
                "ModelValidationError",
                "is not a scripted-harness script",
            ),
            (
                "run --agent @FILE",
                run_with(&["--agent", &agent]),
                "ModelValidationError",
                "`modle`",
            ),
            (
                "serve --token-file FILE",
                sb.m3(&["serve", "--listen", "127.0.0.1:0", "--token-file", &token]),
                "ManagedInputValidationError",
                "empty_token",
            ),
        ];
        for (what, out, error, words) in outputs {
            println!("{what} ({len} bytes): {}", out.first_stderr_line());
            if !at_limit {
                let first = out.fails_with(if what.starts_with("run ") {
                    "ModelValidationError"
                } else {
                    "ManagedInputValidationError"
                });
                assert!(
                    first.contains(PAST_THE_LIMIT),
                    "{what}, {len} bytes: {first}"
                );
            } else if error.is_empty() {
                out.ok();
                assert!(
                    out.stdout.starts_with(words),
                    "{what}, {len} bytes: {}",
                    out.stdout
                );
            } else {
                let first = out.fails_with(error);
                assert!(first.contains(words), "{what}, {len} bytes: {first}");
                assert!(
                    !first.contains(PAST_THE_LIMIT),
                    "{what}, {len} bytes: {first}"
                );
            }
        }
    }
    // Nothing was stored: the round still waits for its answer.
    assert_eq!(sb.show(&round_id)["status"], "pending");
}

/// A new database and its `-wal` and `-shm` are readable by their owner only, whatever the
/// umask; `doctor` reports files that others can read.
#[test]
fn database_files_are_private_under_any_umask() {
    let sb = Sandbox::new();
    let status = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "umask 000 && exec {M3} --db {} demo --answer '{{\"street\":\"1\",\"city\":\"Pune\"}}'",
            sb.db.display()
        ))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).map(|m| m.permissions().mode() & 0o777);
    assert_eq!(mode(&sb.db).unwrap(), 0o600, "the database is not private");

    // While a run is open (so its `-wal` and `-shm` exist), under umask 000, in a file that
    // was created empty and world-readable before m3 first opened it.
    let open = Sandbox::new();
    std::fs::write(&open.db, b"").unwrap();
    std::fs::set_permissions(&open.db, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut run = open.spawn_under_umask(0, &run_args("legacy", &[], &[]));
    assert_eq!(run.next_json()["event"], "pending");
    for suffix in ["", "-wal", "-shm"] {
        let mut name = open.db.as_os_str().to_owned();
        name.push(suffix);
        let name = std::path::PathBuf::from(name);
        assert_eq!(
            mode(&name).unwrap_or_else(|e| panic!("{name:?}: {e}")),
            0o600,
            "{name:?} is not private"
        );
    }
    drop(run);
    let doctor = sb.m3(&["doctor", "--json"]).json();
    assert_eq!(doctor["database"]["files_readable_by_others"], json!([]));
    std::fs::set_permissions(&sb.db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = sb.m3(&["doctor", "--json"]);
    assert!(
        !out.status.success(),
        "a world-readable database is unhealthy"
    );
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        report["database"]["files_readable_by_others"],
        json!([sb.db.display().to_string()])
    );
}

/// `--db` refuses a symbolic link (even a dangling one: nothing is created at its target) and a
/// file that is not an m3 database; the file is left byte for byte as it was.
#[test]
fn symlinked_and_foreign_databases_are_refused_and_left_untouched() {
    let sb = Sandbox::new();
    let target = sb.dir.path().join("target.sqlite");
    let link = sb.dir.path().join("link.sqlite");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let mut cmd = sb.bare();
    cmd.arg("--db").arg(&link).arg("rounds");
    let first = finish(cmd, None, COMMAND_TIMEOUT)
        .fails_with("ManagedInputValidationError")
        .to_string();
    assert!(first.contains("symbolic link"), "{first}");
    assert!(!target.exists(), "nothing was created behind the link");

    let text = sb.write("notes.txt", "my notes, not a database\n");
    let mut cmd = sb.bare();
    cmd.arg("--db").arg(&text).arg("rounds");
    finish(cmd, None, COMMAND_TIMEOUT).fails_with("StorageError");
    assert_eq!(
        std::fs::read_to_string(&text).unwrap(),
        "my notes, not a database\n"
    );

    // A SQLite database of another application with no application id and a version that
    // happens to match m3's: refused, not stamped.
    let foreign = sb.dir.path().join("foreign.sqlite");
    {
        let conn = rusqlite::Connection::open(&foreign).unwrap();
        conn.execute_batch("CREATE TABLE notes (t TEXT); PRAGMA user_version = 3;")
            .unwrap();
    }
    let before = std::fs::read(&foreign).unwrap();
    let mut cmd = sb.bare();
    cmd.arg("--db").arg(&foreign).arg("rounds");
    finish(cmd, None, COMMAND_TIMEOUT).fails_with("StorageError");
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        before,
        "the foreign file is unchanged"
    );
}

/// A database whose schema version this build does not know (`PRAGMA user_version = -1`, or a
/// newer one) is a typed error for every command, and `doctor` says it is unhealthy.
#[test]
fn an_unknown_schema_version_is_a_typed_error_everywhere() {
    for version in [-1, 99] {
        let sb = Sandbox::new();
        sb.create_database();
        {
            let conn = rusqlite::Connection::open(&sb.db).unwrap();
            conn.pragma_update(None, "user_version", version).unwrap();
        }
        for command in [&["rounds"][..], &["pending"], &["recover"], &["executions"]] {
            let out = sb.m3(command);
            let first = out.fails_with("StorageError");
            assert!(first.contains("schema version"), "{first}");
        }
        let out = sb.m3(&["doctor", "--json"]);
        assert!(!out.status.success(), "version {version}: doctor must fail");
    }
}

/// One record that cannot be read does not hide the others: listings report it and list the
/// rest; `doctor` names it and exits non-zero.
#[test]
fn an_unreadable_record_is_reported_and_the_rest_are_listed() {
    let sb = Sandbox::new();
    let mut run = sb.spawn_run("legacy", &[], &["--deadline", "600"]);
    let event = run.next_json();
    let (round_id, execution_id) = ids(&event["round"]);
    // A second, unreadable round of the same execution (its document is not the component's).
    sb.insert_unreadable_round(&round_id, None);
    let out = sb.m3(&["rounds", "--json"]);
    out.ok();
    let rounds: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(rounds.as_array().map(Vec::len), Some(1), "{rounds}");
    assert!(out.stderr.contains("broken-round"), "{}", out.stderr);
    sb.m3(&["status", &execution_id, "--json"]).ok();
    let doctor = sb.m3(&["doctor", "--json"]);
    assert!(!doctor.status.success());
    let report: Value = serde_json::from_str(&doctor.stdout).unwrap();
    assert_eq!(
        report["database"]["unreadable_records"][0]["round_id"],
        "broken-round"
    );
    sb.m3(&["cancel", &execution_id]).ok();
    let _ = run.finish();
}

/// The same for an execution whose record cannot be read: `executions` lists the others and
/// names it on stderr, recovery and the other listings go on, `doctor` names it and says the
/// database is not healthy.
#[test]
fn an_unreadable_execution_is_reported_and_the_rest_are_listed() {
    let sb = Sandbox::new();
    let mut run = sb.spawn_run("legacy", &[], &["--deadline", "600"]);
    let event = run.next_json();
    let (round_id, execution_id) = ids(&event["round"]);
    sb.insert_unreadable_execution(&execution_id);
    let out = sb.m3(&["executions", "--json"]);
    out.ok();
    let listed: Value = serde_json::from_str(&out.stdout).unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [execution_id.as_str()], "{listed}");
    assert!(out.stderr.contains("exec-broken"), "{}", out.stderr);
    let pending = sb.m3(&["pending", "--json"]).json();
    assert_eq!(pending[0]["round_id"], round_id.as_str(), "{pending}");
    sb.m3(&["recover", "--json"]).ok();
    let doctor = sb.m3(&["doctor", "--json"]);
    assert!(!doctor.status.success());
    let report: Value = serde_json::from_str(&doctor.stdout).unwrap();
    assert_eq!(
        report["database"]["unreadable_records"][0]["execution_id"], "exec-broken",
        "{report}"
    );
    let doctor = sb.m3(&["doctor"]);
    assert!(
        doctor.stdout.contains("execution exec-broken"),
        "{}",
        doctor.stdout
    );
    sb.m3(&["cancel", &execution_id]).ok();
    let _ = run.finish();
}

/// An answer to a round that ended (here: cancelled) is never acknowledged as if it could
/// still be delivered, also when it repeats an answer stored before the round ended.
#[test]
fn respond_never_acknowledges_an_answer_that_will_not_be_delivered() {
    let sb = Sandbox::new();
    let mut run = sb.spawn_run("legacy", &[], &[]);
    let event = run.next_json();
    let (round_id, execution_id) = ids(&event["round"]);
    sb.m3(&["cancel", &execution_id]).ok();
    let _ = run.finish();
    let out = sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "late",
        "--accept",
        &accept_address(),
    ]);
    out.fails_with("ManagedInputStateError");
    assert!(!out.stdout.contains("delivers"), "{}", out.stdout);

    // A repeat of an answer stored (and acknowledged) before its round ended: the worker stood
    // still (SIGSTOP) with the answer committed, then died; recovery failed the round. The
    // retry a caller makes after a lost acknowledgement must not be told it will be delivered.
    let sb = Sandbox::new();
    let mut run = sb.spawn_run("legacy", &[], &["--lease", "1"]);
    let event = run.next_json();
    let (round_id, _) = ids(&event["round"]);
    let pid = run.guard.child.id() as i32;
    // SAFETY: kill(2) on the child this test started.
    unsafe {
        libc::kill(pid, libc::SIGSTOP);
    }
    let answer = |key: &str| {
        sb.m3(&[
            "respond",
            &round_id,
            "--idempotency-key",
            key,
            "--accept",
            &accept_address(),
            "--json",
        ])
    };
    let first = answer("kept").json();
    assert_eq!(first["status"], "response_validated", "{first}");
    run.guard.kill(); // SIGKILL, still stopped
    std::thread::sleep(Duration::from_millis(1_500)); // past the 1 s lease
    let report = sb.m3(&["recover", "--json"]).json();
    assert_eq!(report["rounds_failed"], 1, "{report}");
    let repeat = answer("kept");
    let line = repeat.fails_with("ManagedInputStateError");
    assert!(line.contains("round_terminal"), "{line}");
    assert!(!repeat.stdout.contains("deliver"), "{}", repeat.stdout);
    let record = sb.show(&round_id);
    assert_eq!(record["status"], "failed", "{record}");
    assert_eq!(record["failure_code"], "recovery_unavailable", "{record}");
}

/// Secret values for the server come from m3's own environment (`--server-env NAME`) or a file
/// (`--server-env-file`), never from the command line; the server gets them.
#[test]
fn server_secrets_need_not_be_on_the_command_line() {
    let sb = Sandbox::new();
    let env_file = sb.write(
        "server.env",
        "# the server's settings\n\nFROM_FILE=file-value-4711\n",
    );
    let mut cmd = sb.command(&[]);
    cmd.args(run_args(
        "legacy",
        &["--report-env"],
        &[
            "--human-input",
            "fail",
            "--server-env",
            "M3_TEST_SECRET",
            "--server-env-file",
            env_file.to_str().unwrap(),
        ],
    ))
    .env("M3_TEST_SECRET", "secret-value-0815");
    // The run calls book_shipment (and fails in mode fail); report_env is listed by the flag.
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert!(!args.iter().any(|a| a.contains("secret-value-0815")));
    let mut script = sb.command(&[]);
    let script_file = sb.write(
        "script.json",
        r#"{"steps": [{"tool": "shipping:report_env"}]}"#,
    );
    script
        .args(run_args(
            "legacy",
            &["--report-env"],
            &[
                "--human-input",
                "fail",
                "--tool",
                "shipping:report_env",
                "--script",
                script_file.to_str().unwrap(),
                "--server-env",
                "M3_TEST_SECRET",
                "--server-env-file",
                env_file.to_str().unwrap(),
            ],
        ))
        .env("M3_TEST_SECRET", "secret-value-0815");
    let out = finish(script, None, RUN_TIMEOUT);
    out.ok();
    let result: Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    let env = &result["result"]["tool_calls"][0]["result"]["structuredContent"]["env"];
    assert_eq!(env["M3_TEST_SECRET"], "secret-value-0815");
    assert_eq!(env["FROM_FILE"], "file-value-4711");
    // A name that this process does not have is a typed error, naming only the name.
    let mut missing = sb.command(&[]);
    missing
        .args(run_args(
            "legacy",
            &[],
            &["--server-env", "M3_NOT_SET_ANYWHERE"],
        ))
        .env_remove("M3_NOT_SET_ANYWHERE");
    finish(missing, None, COMMAND_TIMEOUT).fails_with("ModelValidationError");
}

/// The peak resident memory of a process so far, from `/proc`.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// `m3 run` (JSON, no prompt, managed input, legacy era) calling `tool` (`server:name`) on the
/// server `command args...`, with `options` before the server's flags.
fn managed_run(
    tool: &str,
    command: &str,
    args: &[&str],
    options: &[&str],
    prompt: &str,
) -> Vec<String> {
    let server = tool.split(':').next().unwrap_or_default();
    let mut run: Vec<String> = ["run", "--no-prompt", "--json"]
        .iter()
        .chain(options)
        .chain(&[
            "--server-name",
            server,
            "--server-command",
            command,
            "--server-era",
            "legacy",
            "--tool",
            tool,
            "--human-input",
            "managed",
        ])
        .map(|s| s.to_string())
        .collect();
    for arg in args {
        run.push("--server-arg".into());
        run.push(arg.to_string());
    }
    run.push(prompt.into());
    run
}

/// Runs `m3 run` against `server_command args...` (managed input) and returns its output and the
/// highest peak memory seen while it ran.
fn run_flooded(sb: &Sandbox, command: &str, args: &[&str]) -> (Output, u64) {
    let run = managed_run("flood:anything", command, args, &[], "Flood.");
    let mut running = sb.spawn(&run);
    let pid = running.guard.child.id();
    let mut peak = 0;
    let until = Instant::now() + Duration::from_secs(120);
    while running.guard.child.try_wait().unwrap().is_none() {
        peak = peak.max(peak_rss_kib(pid).unwrap_or(0));
        assert!(Instant::now() < until, "a flooded run did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (out, _) = running.finish();
    (out, peak)
}

/// A legacy MCP server whose one tool streams `mib` MiB of progress notifications as fast as
/// it can (under the output limit), then answers.
fn chatty_server(mib: u32) -> String {
    format!(
        r#"
import json, sys
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
note = json.dumps({{"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {{"level": "info", "data": "still working"}}}}) + "\n"
chunk = note * 512
for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request:
        continue
    method = request.get("method")
    if method == "initialize":
        send({{"jsonrpc": "2.0", "id": request["id"], "result": {{"protocolVersion": "2025-06-18",
              "capabilities": {{"tools": {{}}}}, "serverInfo": {{"name": "chatty", "version": "1"}}}}}})
    elif method == "tools/call":
        for _ in range({mib} * 1024 * 1024 // len(chunk)):
            sys.stdout.write(chunk)
        send({{"jsonrpc": "2.0", "id": request["id"], "result": {{"content": [{{"type": "text", "text": "done"}}]}}}})
    else:
        send({{"jsonrpc": "2.0", "id": request["id"], "result": {{}}}})
"#
    )
}

/// A server that keeps the worker busy reading for longer than its lease (a chatty tool
/// streaming its progress, under the output limit) does not cost the worker its lease:
/// renewals, deadlines and cancel requests are checked between its messages too, not only when
/// the worker's wait times out.
#[test]
fn a_server_that_writes_without_pause_does_not_cost_the_worker_its_lease() {
    let sb = Sandbox::new();
    let script = chatty_server(96);
    let run = managed_run(
        "chatty:work",
        "python3",
        &["-c", &script],
        &["--lease", "1"],
        "Work.",
    );
    let out = sb.m3(&run.iter().map(String::as_str).collect::<Vec<_>>());
    let result: Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["result"]["outcome"], "succeeded", "{result}");
    assert_eq!(
        result["result"]["tool_calls"].as_array().map(Vec::len),
        Some(1),
        "{result}"
    );
}

/// A server that floods its output (junk lines, or endless valid notifications) fails its
/// execution with `server_error` naming the limit, and the command's memory stays bounded.
#[test]
fn a_flooding_server_fails_its_execution_and_memory_stays_bounded() {
    let sb = Sandbox::new();
    let (out, peak) = run_flooded(&sb, "/usr/bin/yes", &[]);
    assert!(!out.status.success());
    let result: Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["result"]["failure_kind"], "server_error", "{result}");
    let message = result["result"]["failure_message"].as_str().unwrap();
    assert!(message.contains("not JSON-RPC"), "{message}");
    println!("yes: peak RSS {peak} KiB");
    assert!(peak < 400 * 1024, "peak RSS {peak} KiB");

    let notification = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"flood flood flood flood flood flood flood flood flood flood"}}"#;
    let script = format!(
        "import sys\nline = {notification:?} + '\\n'\nwhile True:\n    sys.stdout.write(line * 512)\n"
    );
    let (out, peak) = run_flooded(&sb, "python3", &["-c", &script]);
    assert!(!out.status.success());
    let result: Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(result["result"]["failure_kind"], "server_error", "{result}");
    let message = result["result"]["failure_message"].as_str().unwrap();
    assert!(message.contains("MiB"), "{message}");
    println!("notification flood: peak RSS {peak} KiB");
    assert!(peak < 400 * 1024, "peak RSS {peak} KiB");
}

/// The arguments of `run --no-prompt --json` against `/bin/sh -c SCRIPT`, where the script
/// records its working directory and a background grandchild's pid, then runs the bundled
/// server (legacy era) in its place. The grandchild holds none of the server's pipes (its
/// stdio is `/dev/null`, as a daemonised helper's is), so nothing but its process group ties it
/// to the execution.
fn run_with_grandchild(sb: &Sandbox, extra: &[&str]) -> Vec<String> {
    run_with_grandchild_then(
        sb,
        &format!("exec {M3} shipping-server --era legacy"),
        extra,
    )
}

/// As [`run_with_grandchild`], with `then` run after the grandchild started.
fn run_with_grandchild_then(sb: &Sandbox, then: &str, extra: &[&str]) -> Vec<String> {
    let script = format!(
        "pwd > {dir}/cwd; sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {dir}/grandchild; {then}",
        dir = sb.dir.path().display()
    );
    let mut args: Vec<String> = [
        "run",
        "--no-prompt",
        "--json",
        "--server-name",
        "shipping",
        "--server-command",
        "/bin/sh",
        "--server-arg",
        "-c",
        "--server-arg",
        &script,
        "--server-era",
        "legacy",
        "--tool",
        "shipping:book_shipment",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push("Book.".into());
    args
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("State:"))
            .is_some_and(|l| !l.contains('Z'))
    })
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < until, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a server starts (its own children, also one that holds none of its pipes) ends with
/// its execution: when the execution ends and the server is stopped, and when the server
/// exits by itself first; the scratch directory goes too.
#[test]
fn a_server_s_own_children_end_with_its_execution() {
    let exits_by_itself = "exit 3".to_string();
    let serves = format!("exec {M3} shipping-server --era legacy");
    for (then, ends) in [(&serves, "failed"), (&exits_by_itself, "server_error")] {
        let sb = Sandbox::new();
        let mut cmd = sb.command(&[]);
        cmd.args(run_with_grandchild_then(
            &sb,
            then,
            &["--human-input", "fail"],
        ));
        let out = finish(cmd, None, RUN_TIMEOUT);
        assert!(!out.status.success(), "{then}: the execution ends failed");
        let result: Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
        assert_eq!(result["result"]["outcome"], "failed", "{}", out.stdout);
        if ends == "server_error" {
            assert_eq!(result["result"]["failure_kind"], "server_error", "{result}");
        }
        let grandchild: u32 = std::fs::read_to_string(sb.dir.path().join("grandchild"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let scratch = std::fs::read_to_string(sb.dir.path().join("cwd")).unwrap();
        wait_until(
            &format!("{then}: the server's child outlived its execution"),
            || !alive(grandchild),
        );
        assert!(
            !std::path::Path::new(scratch.trim()).exists(),
            "{then}: the scratch directory outlived its execution"
        );
    }
}

/// `m3 run` killed with SIGKILL: its server dies with it (the parent-death signal), and once
/// the lease expired, recovery ends what the server started and removes the scratch directory.
/// SIGTERM instead cancels the execution: the result is printed and everything is cleaned up.
#[test]
fn a_killed_run_leaves_nothing_behind_after_recovery() {
    let sb = Sandbox::new();
    // The dead run had a temporary directory of its own; the recovering command has another.
    let run_tmp = sb.dir.path().join("run-tmp");
    std::fs::create_dir(&run_tmp).unwrap();
    let mut run = sb.spawn_with_env(
        &[("TMPDIR", &run_tmp)],
        &run_with_grandchild(&sb, &["--human-input", "managed", "--lease", "1"]),
    );
    assert_eq!(run.next_json()["event"], "pending");
    let grandchild: u32 = std::fs::read_to_string(sb.dir.path().join("grandchild"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let scratch = std::fs::read_to_string(sb.dir.path().join("cwd")).unwrap();
    let scratch = std::path::PathBuf::from(scratch.trim());
    assert!(alive(grandchild) && scratch.exists());
    assert_eq!(
        scratch.parent(),
        Some(run_tmp.as_path()),
        "the run's own TMPDIR"
    );
    run.guard.kill(); // SIGKILL
    std::thread::sleep(Duration::from_millis(1_500)); // past the 1 s lease
    let report = sb.m3(&["recover", "--json"]).json();
    assert_eq!(report["executions_failed"], 1, "{report}");
    wait_until("recovery did not end the server's child", || {
        !alive(grandchild)
    });
    assert!(
        !scratch.exists(),
        "recovery did not remove the scratch directory"
    );

    let sb = Sandbox::new();
    let mut run = sb.spawn(&run_with_grandchild(&sb, &["--human-input", "managed"]));
    assert_eq!(run.next_json()["event"], "pending");
    let grandchild: u32 = std::fs::read_to_string(sb.dir.path().join("grandchild"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill(2) on the child this test started.
    unsafe {
        libc::kill(run.guard.child.id() as i32, libc::SIGTERM);
    }
    let (out, lines) = run.finish();
    let result: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(result["result"]["outcome"], "cancelled", "{}", out.stdout);
    wait_until("SIGTERM left the server's child running", || {
        !alive(grandchild)
    });
}

/// Opening reads before it writes: an up-to-date database opens and is listed while another
/// connection holds its write lock (read commands never queue behind a writer); one that needs
/// a migration waits for the lock and, past the busy timeout, is a typed `storage_busy` error
/// that changes nothing.
#[test]
fn opening_reads_before_it_writes_and_a_locked_migration_is_storage_busy() {
    let sb = Sandbox::new();
    sb.create_database();
    let writer = rusqlite::Connection::open(&sb.db).unwrap();
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    for args in [
        &["rounds", "--json"][..],
        &["pending", "--json"],
        &["executions", "--json"],
    ] {
        let listed = sb.m3(args).json();
        assert_eq!(listed, json!([]), "{args:?}");
    }
    writer.execute_batch("ROLLBACK").unwrap();

    // The stored-format fixture is at schema version 3: opening it migrates.
    let old = sb.dir.path().join("format-1.sqlite");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/format-1.sqlite"
        ),
        &old,
    )
    .unwrap();
    let version = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    };
    let writer = rusqlite::Connection::open(&old).unwrap();
    assert_eq!(version(&writer), 3);
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut cmd = sb.bare();
    cmd.arg("--db").arg(&old).args(["--json", "rounds"]);
    let out = finish(cmd, None, COMMAND_TIMEOUT);
    assert!(!out.status.success(), "{}", out.stdout);
    let error: Value = serde_json::from_str(out.first_stderr_line()).unwrap();
    assert_eq!(error["error"]["type"], "StorageError", "{error}");
    assert_eq!(error["error"]["code"], "storage_busy", "{error}");
    writer.execute_batch("ROLLBACK").unwrap();
    assert_eq!(version(&writer), 3, "nothing was migrated");
    drop(writer);
    // Once the writer is gone the same command migrates and lists.
    let mut cmd = sb.bare();
    cmd.arg("--db").arg(&old).args(["--json", "rounds"]);
    let out = finish(cmd, None, COMMAND_TIMEOUT);
    assert!(out.status.success(), "{}", out.stderr);
}

/// A compiled-component cache that cannot be trusted (its parent writable by others) is not
/// used, and the command says so: a `notice:` line after its output, never a silent slow start.
/// The command's own result is unchanged.
#[test]
fn an_unusable_cache_is_named_in_a_notice() {
    let sb = Sandbox::new();
    sb.create_database();
    let shared = sb.dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut cmd = sb.command(&["pending", "--json"]);
    cmd.env("M3_CACHE_DIR", shared.join("components"));
    let out = finish(cmd, None, COMMAND_TIMEOUT);
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(
        serde_json::from_str::<Value>(&out.stdout).unwrap(),
        json!([])
    );
    let notice = out
        .stderr
        .lines()
        .find(|l| l.starts_with("notice: "))
        .unwrap_or_else(|| panic!("no notice on stderr: {}", out.stderr));
    assert!(
        notice.contains("cannot be used") && notice.contains("other users"),
        "{notice}"
    );
    assert!(
        !shared.join("components").exists(),
        "nothing was written there"
    );
}

/// A recognisable secret, looked for wherever a command could have echoed it.
const SECRET: &str = "sk-live-SECRET123";

/// Everything a command left behind that a secret must never be in: its stdout and stderr,
/// and the sandbox's database files (if any).
fn everything(sb: &Sandbox, out: &Output) -> Vec<u8> {
    let mut bytes = [out.stdout.as_bytes(), out.stderr.as_bytes()].concat();
    for suffix in ["", "-wal", "-shm"] {
        bytes.extend(std::fs::read(format!("{}{suffix}", sb.db.display())).unwrap_or_default());
    }
    bytes
}

fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// `m3 run --json --no-prompt` against an HTTP server at `url` calling `remote:lookup`, with
/// `extra` flags.
fn http_run_args(url: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "--no-prompt",
        "--json",
        "--server-name",
        "remote",
        "--server-url",
        url,
        "--server-era",
        "legacy",
        "--tool",
        "remote:lookup",
    ]
    .iter()
    .chain(extra)
    .map(|s| s.to_string())
    .collect();
    args.push("Look it up.".into());
    args
}

/// A header's value may hold `=` and `:` (a base64 token ends in `==`): the name ends at the
/// first `:` or `=`, and the value reaches the server whole, printed nowhere. Both
/// `--server-header 'Authorization: Bearer <token>=='` and a file's `API_KEY=<token>:x` used to
/// be split at the wrong separator and refused with the secret in the message.
#[test]
fn header_values_with_separators_reach_the_server_and_are_never_printed() {
    let sb = Sandbox::new();
    let probe = m3_tests::http_probe::HttpProbe::start(|_| m3_tests::http_probe::Answer {
        status: 404,
        headers: Vec::new(),
        body: Vec::new(),
        then: m3_tests::http_probe::Then::Close,
    })
    .expect("the probe starts");
    let file = sb.write("headers.txt", &format!("API_KEY={SECRET}:x\n"));
    let flag = format!("Authorization: Bearer {SECRET}==");
    let mut cmd = sb.command(&[]);
    cmd.args(http_run_args(
        &probe.url("/mcp"),
        &[
            "--server-header",
            &flag,
            "--server-header-file",
            file.to_str().unwrap(),
            "--server-header",
            "X-Trace=a=b:c",
        ],
    ));
    let out = finish(cmd, None, RUN_TIMEOUT);
    // The server answered 404: the run fails, as an answer (its result), not an error.
    assert!(out.stderr.trim().is_empty(), "{}", out.stderr);
    let received = probe.received();
    let first = received.first().expect("the server got a request");
    assert_eq!(
        first.header("authorization"),
        Some(format!("Bearer {SECRET}==").as_str())
    );
    assert_eq!(
        first.header("api_key"),
        Some(format!("{SECRET}:x").as_str())
    );
    assert_eq!(first.header("x-trace"), Some("a=b:c"));
    assert!(
        !holds(&everything(&sb, &out), SECRET),
        "the secret was printed or stored:\n{}\n{}",
        out.stdout,
        out.stderr
    );
}

/// A header or environment line that cannot be used is refused when it is read, with a typed
/// error that names the file's line (or the flag's occurrence) and what is wrong with it, never
/// its text: a line without a separator, a name that is not a header name (a line break
/// included), a control character or NUL in a value, `/proc/self/environ` as a header file, a
/// NUL in an environment file's value (it used to be accepted and to fail at spawn), a
/// `--server-env` that is no variable's name. Nothing is stored.
#[test]
fn unusable_header_and_env_lines_are_refused_naming_the_line_never_the_text() {
    let sb = Sandbox::new();
    let url = "http://127.0.0.1:9/mcp";
    let header_file = |name: &str, text: &str| -> Vec<String> {
        let file = sb.write(name, text);
        http_run_args(url, &["--server-header-file", file.to_str().unwrap()])
    };
    let env_file = |name: &str, text: &str| -> Vec<String> {
        let file = sb.write(name, text);
        run_args(
            "legacy",
            &[],
            &["--server-env-file", file.to_str().unwrap()],
        )
    };
    let cases: Vec<(Vec<String>, &[&str])> = vec![
        (
            header_file("no-separator.txt", &format!("# key\n\n{SECRET}\n")),
            &["line 3", "neither `:` nor `=`", "(invalid_header)"],
        ),
        (
            header_file("space.txt", &format!("X-Ok: 1\nBearer {SECRET}: x\n")),
            &[
                "line 2",
                "not an HTTP header name: it holds a space at byte 7",
                "(invalid_header)",
            ],
        ),
        (
            header_file("control.txt", &format!("X-Key: {SECRET}\u{1}\n")),
            &[
                "line 1",
                "`x-key` holds a control character at byte 18",
                "(invalid_header)",
            ],
        ),
        (
            http_run_args(url, &["--server-header", &format!("X-Evil\r{SECRET}=v")]),
            &[
                "--server-header number 1",
                "a line break at byte 7",
                "(invalid_header)",
            ],
        ),
        (
            http_run_args(
                url,
                &[
                    "--server-header",
                    "X-Ok=1",
                    "--server-header",
                    &format!("{SECRET} x"),
                ],
            ),
            &["--server-header number 2", "neither `:` nor `=`"],
        ),
        (
            http_run_args(url, &["--server-header-file", "/proc/self/environ"]),
            &["line 1", "holds a NUL byte", "(invalid_header)"],
        ),
        (
            env_file("nul.env", &format!("# env\nAPI_KEY={SECRET}\0x\n")),
            &[
                "--server-env-file",
                "line 2",
                "`API_KEY` holds a NUL byte",
                "(invalid_environment)",
            ],
        ),
        (
            env_file("no-equals.env", &format!("OK=1\n{SECRET}\n")),
            &["line 2", "expected NAME=VALUE", "(invalid_environment)"],
        ),
        (
            run_args("legacy", &[], &["--server-env", SECRET]),
            &["--server-env number 1", "no such variable"],
        ),
    ];
    for (args, expected) in cases {
        let mut cmd = sb.command(&[]);
        // First in `/proc/self/environ` (a child's environment is sorted by name).
        cmd.args(&args).env("AAA_SECRET", SECRET);
        let out = finish(cmd, None, COMMAND_TIMEOUT);
        let first = out.fails_with("ModelValidationError").to_string();
        for word in expected {
            assert!(first.contains(word), "{word:?} in {first}");
        }
        assert!(
            !holds(&everything(&sb, &out), SECRET),
            "{args:?}: the secret was printed:\n{}",
            out.stderr
        );
        assert!(
            !sb.db.exists(),
            "{args:?}: a refused run created the database"
        );
    }
}

/// Headers are bounded when they are read (`HttpServer::MAX_HEADERS` and the sizes beside it;
/// the file itself before it is read whole): a header file of 30,000 lines, which used to panic
/// the host inside `http`'s `HeaderMap::insert` and leave the process spinning, is refused
/// promptly at the line past the limit; a value too long, and a file too large, likewise; an
/// environment file past `StdioServer::MAX_ENV_VARS` too. Nothing is stored.
#[test]
fn header_and_env_files_are_bounded_when_read() {
    let sb = Sandbox::new();
    let url = "http://127.0.0.1:9/mcp";
    let lines: String = (0..30_000).map(|i| format!("h{i}:v\n")).collect();
    let many = sb.write("many.txt", &lines);
    let long = sb.write(
        "long.txt",
        &format!("# one\nX-Key: {SECRET}{}\n", "a".repeat(9 * 1024)),
    );
    let large = sb.write("large.txt", &format!("# {}\n", "c".repeat(300 * 1024)));
    let vars: String = (0..1_100).map(|i| format!("V{i}=1\n")).collect();
    let env = sb.write("many.env", &vars);
    let cases: Vec<(Vec<String>, &[&str])> = vec![
        (
            http_run_args(url, &["--server-header-file", many.to_str().unwrap()]),
            &[
                "line 65",
                "65 headers, more than the 64",
                "(header_too_large)",
            ],
        ),
        (
            http_run_args(url, &["--server-header-file", long.to_str().unwrap()]),
            &[
                "line 2",
                "is 9233 bytes long, more than the 8192",
                "(header_too_large)",
            ],
        ),
        (
            http_run_args(url, &["--server-header-file", large.to_str().unwrap()]),
            &["larger than 256 KiB", "(payload_too_large)"],
        ),
        (
            run_args("legacy", &[], &["--server-env-file", env.to_str().unwrap()]),
            &[
                "line 1025",
                "1025 environment variables, more than the 1024",
                "(environment_too_large)",
            ],
        ),
    ];
    for (args, expected) in cases {
        let started = Instant::now();
        let mut cmd = sb.command(&[]);
        cmd.args(&args);
        let out = finish(cmd, None, COMMAND_TIMEOUT);
        let first = out.fails_with("ModelValidationError").to_string();
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{args:?}: refused only after {:?}",
            started.elapsed()
        );
        for word in expected {
            assert!(first.contains(word), "{word:?} in {first}");
        }
        assert!(!holds(&everything(&sb, &out), SECRET), "{}", out.stderr);
        assert!(
            !sb.db.exists(),
            "{args:?}: a refused run created the database"
        );
    }
}

/// Flags of the other transport are refused as usage errors (exit 2), never silently ignored:
/// `--server-header` and `--server-header-file` with `--server-command` (clap's `requires`
/// alone let that through, the header going nowhere), and the stdio server's flags with
/// `--server-url`.
#[test]
fn flags_of_the_other_transport_are_refused() {
    let sb = Sandbox::new();
    let file = sb.write("headers.txt", "X-Key: v\n");
    let file = file.to_str().unwrap();
    let url = "http://127.0.0.1:9/mcp";
    let cases: Vec<Vec<String>> = vec![
        run_args("legacy", &[], &["--server-header", "X-Key=v"]),
        run_args("legacy", &[], &["--server-header-file", file]),
        http_run_args(url, &["--server-env", "A=1"]),
        http_run_args(url, &["--server-env-file", file]),
        http_run_args(url, &["--server-arg", "x"]),
        http_run_args(url, &["--server-cwd", "/"]),
        http_run_args(url, &["--server-command", M3]),
    ];
    for args in cases {
        let mut cmd = sb.command(&[]);
        cmd.args(&args);
        let out = finish(cmd, None, COMMAND_TIMEOUT);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", out.stderr);
        let first = out.fails_with("ManagedInputValidationError");
        assert!(
            first.contains("invalid_command_line") && first.contains("cannot be used with"),
            "{args:?}: {first}"
        );
        assert!(
            !sb.db.exists(),
            "{args:?}: a refused run created the database"
        );
    }
}

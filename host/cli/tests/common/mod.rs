//! What the command's tests share: running the real binary with timeouts and guards, a
//! sandbox directory with its database, and checks of the contract's JSON shapes.
#![allow(dead_code)]

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The binary under test.
pub const M3: &str = env!("CARGO_BIN_EXE_m3");
/// The longest any one short command may take.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest a background `run` may take to print its next line or to end.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// The typed error names a first stderr line may start with.
pub const TYPED_ERRORS: [&str; 8] = [
    "ManagedInputValidationError",
    "ManagedInputConflict",
    "ManagedInputStateError",
    "ManagedInputRecoveryError",
    "ModelValidationError",
    "OperationTimeout",
    "StorageError",
    "EngineError",
];
/// The answer's values (distinctive, so "no answer value in the output" is a real check).
pub const STREET: &str = "742 Evergreen Terrace";
pub const CITY: &str = "Springfield";

/// The key set of a pending round.
pub const ROUND_KEYS: &[&str] = &[
    "round_id",
    "execution_id",
    "logical_operation_id",
    "server",
    "operation_kind",
    "operation_name",
    "requests",
    "created_at",
    "request_state",
    "deadline",
];
/// The key set of one request of a round.
pub const REQUEST_KEYS: &[&str] = &[
    "mode",
    "message",
    "requested_schema",
    "url",
    "elicitation_id",
    "meta",
    "task",
    "server",
    "operation_kind",
    "operation_name",
];
/// The keys a stored record adds to its pending round.
pub const RECORD_EXTRA_KEYS: &[&str] = &[
    "round_index",
    "round_limit",
    "status",
    "owner_id",
    "lease_expires_at",
    "responses",
    "redacted",
    "idempotency_key",
    "delivery_idempotency_key",
    "delivery_attempts",
    "updated_at",
    "response_validated_at",
    "delivery_started_at",
    "delivered_at",
    "resolved_at",
    "failed_at",
    "failure_code",
    "failure_message",
];
/// The key set of an execution (`executions --json`, `cancel --json`).
pub const EXECUTION_KEYS: &[&str] = &[
    "execution_id",
    "lifecycle",
    "outcome",
    "failure_kind",
    "failure_code",
    "failure_message",
    "cancel_requested",
    "created_at",
    "updated_at",
];
/// The keys `status --json` adds to an execution.
pub const STATUS_EXTRA_KEYS: &[&str] = &[
    "rounds",
    "tool_calls",
    "final_message",
    "events",
    "events_dropped",
    "stderr_tail",
];
/// The key set of an execution result (the `result` event).
pub const RESULT_KEYS: &[&str] = &[
    "execution_id",
    "lifecycle",
    "outcome",
    "failure_kind",
    "failure_code",
    "failure_message",
    "tool_calls",
    "final_message",
];
/// The key set of one tool call of a result.
pub const TOOL_CALL_KEYS: &[&str] = &["tool", "kind", "output", "is_error", "result"];
/// The key set of one stored answer.
pub const RESPONSE_KEYS: &[&str] = &["action", "content"];
/// The key set of one answer's redacted projection.
pub const REDACTED_RESPONSE_KEYS: &[&str] = &["action", "content_fields", "content_bytes"];
/// The statuses a round may have once an answer has been accepted.
pub const ANSWERED_STATUSES: &[&str] = &[
    "response_validated",
    "delivery_started",
    "delivered",
    "resolved",
];

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/// A child process that is killed (and reaped) when this guard drops.
pub struct ChildGuard {
    pub child: Child,
}

impl ChildGuard {
    /// Waits up to `timeout` for the child to exit; `None` if it has not.
    pub fn wait_for(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("polling a child") {
                return Some(status);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the child with SIGKILL (on Unix, `Child::kill` sends SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads all of `pipe` on a thread; the text arrives on the returned channel at end of file.
pub fn read_all(mut pipe: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
    });
    rx
}

/// Reads `pipe` line by line on a thread; the channel disconnects at end of file.
pub fn read_lines(pipe: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// What a finished command did.
#[derive(Debug)]
pub struct Output {
    /// What was run (for messages).
    pub what: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// Builds the output and checks the one rule every command obeys: no panic, no backtrace.
    pub fn new(what: String, status: ExitStatus, stdout: String, stderr: String) -> Self {
        let out = Self {
            what,
            status,
            stdout,
            stderr,
        };
        assert!(
            !out.stderr.contains("panicked") && !out.stderr.contains("stack backtrace"),
            "{} panicked or printed a backtrace:\n{}",
            out.what,
            out.stderr
        );
        assert!(
            !out.stdout.contains("panicked") && !out.stdout.contains("stack backtrace"),
            "{} printed a panic on stdout:\n{}",
            out.what,
            out.stdout
        );
        out
    }

    /// Asserts exit 0.
    pub fn ok(&self) -> &Self {
        assert!(
            self.status.success(),
            "{} failed ({}):\nstdout: {}\nstderr: {}",
            self.what,
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }

    /// Asserts exit 0 and parses stdout as one JSON document.
    pub fn json(&self) -> Value {
        self.ok();
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "{} did not print one JSON document ({e}):\n{}",
                self.what, self.stdout
            )
        })
    }

    /// The first line of stderr.
    pub fn first_stderr_line(&self) -> &str {
        self.stderr.lines().next().unwrap_or_default()
    }

    /// Whether the first stderr line names a typed error: `Type: message`, or with `--json` the
    /// object `{"error": {"type": "Type", ...}}`.
    pub fn typed_first_line(&self) -> bool {
        typed_line(self.first_stderr_line())
    }

    /// Asserts a non-zero exit whose first stderr line starts with `name: `; returns that line.
    pub fn fails_with(&self, name: &str) -> &str {
        assert!(
            !self.status.success(),
            "{} should have failed with {name} but exited 0:\nstdout: {}",
            self.what,
            self.stdout
        );
        let first = self.first_stderr_line();
        // With `--json`, the error is one JSON object: `{"error": {"type", "code", "message"}}`.
        if let Ok(v) = serde_json::from_str::<Value>(first) {
            assert_eq!(
                v["error"]["type"], name,
                "{}: the JSON error should have type `{name}`, got:\n{}",
                self.what, self.stderr
            );
            return first;
        }
        assert!(
            first.starts_with(&format!("{name}: ")),
            "{}: the first stderr line should start with `{name}: `, got:\n{}",
            self.what,
            self.stderr
        );
        first
    }
}

/// Whether `line` names a typed error: `Type: message`, or `{"error": {"type": "Type", ...}}`.
pub fn typed_line(line: &str) -> bool {
    if let Ok(v) = serde_json::from_str::<Value>(line) {
        return v["error"]["type"]
            .as_str()
            .is_some_and(|name| TYPED_ERRORS.contains(&name));
    }
    TYPED_ERRORS
        .iter()
        .any(|name| line.starts_with(&format!("{name}: ")))
}

/// Runs `cmd` to its end (at most `timeout`), feeding it `stdin`.
pub fn finish(mut cmd: Command, stdin: Option<&str>, timeout: Duration) -> Output {
    let what = format!("{cmd:?}");
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut guard = ChildGuard {
        child: cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {what}: {e}")),
    };
    let stdout = read_all(guard.child.stdout.take().expect("piped stdout"));
    let stderr = read_all(guard.child.stderr.take().expect("piped stderr"));
    if let Some(input) = stdin {
        let mut pipe = guard.child.stdin.take().expect("piped stdin");
        let input = input.to_string();
        std::thread::spawn(move || {
            let _ = pipe.write_all(input.as_bytes());
        });
    }
    let until = Instant::now() + timeout;
    let Some(status) = guard.wait_for(timeout) else {
        panic!("{what} did not finish within {timeout:?}");
    };
    let collect = |rx: Receiver<String>, name: &str| {
        let left = until.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
        rx.recv_timeout(left)
            .unwrap_or_else(|_| panic!("{what}: its {name} did not close"))
    };
    let stdout = collect(stdout, "stdout");
    let stderr = collect(stderr, "stderr");
    Output::new(what, status, stdout, stderr)
}

/// A background `m3 run`, its stdout read line by line.
pub struct Running {
    pub guard: ChildGuard,
    pub lines: Receiver<String>,
    pub stderr: Receiver<String>,
    /// The stdout lines read so far.
    pub seen: Vec<String>,
}

impl Running {
    /// The next stdout line (waits at most `RUN_TIMEOUT`).
    pub fn next_line(&mut self) -> String {
        match self.lines.recv_timeout(RUN_TIMEOUT) {
            Ok(line) => {
                self.seen.push(line.clone());
                line
            }
            Err(RecvTimeoutError::Timeout) => {
                panic!("`m3 run` printed no line within {RUN_TIMEOUT:?}")
            }
            Err(RecvTimeoutError::Disconnected) => {
                self.guard.kill();
                let stderr = self.stderr.recv_timeout(Duration::from_secs(5));
                panic!(
                    "`m3 run` closed its stdout after {:?}; stderr: {stderr:?}",
                    self.seen
                )
            }
        }
    }

    /// The next stdout line as JSON.
    pub fn next_json(&mut self) -> Value {
        let line = self.next_line();
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("`m3 run` printed a line that is not JSON ({e}): {line}"))
    }

    /// Waits for the run to end; returns its output (all of stdout) and its stdout lines.
    pub fn finish(mut self) -> (Output, Vec<String>) {
        let until = Instant::now() + RUN_TIMEOUT;
        let Some(status) = self.guard.wait_for(RUN_TIMEOUT) else {
            panic!(
                "`m3 run` did not end within {RUN_TIMEOUT:?} (stdout so far: {:?})",
                self.seen
            );
        };
        loop {
            let left = until.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!("`m3 run`'s stdout did not close"),
            }
        }
        let stderr = self
            .stderr
            .recv_timeout(Duration::from_secs(10))
            .expect("`m3 run`'s stderr did not close");
        let mut stdout = self.seen.join("\n");
        if !stdout.is_empty() {
            stdout.push('\n');
        }
        let out = Output::new("m3 run".into(), status, stdout, stderr);
        (out, self.seen)
    }
}

// ---------------------------------------------------------------------------------------------
// A test's sandbox
// ---------------------------------------------------------------------------------------------

/// A fresh directory with its database, `<tmp>/x.sqlite`.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
}

impl Sandbox {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = dir.path().join("x.sqlite");
        Self { dir, db }
    }

    /// A fresh directory whose `--db` is a fresh database of this process's throwaway
    /// PostgreSQL server (its URL).
    pub fn postgres() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let database = m3_tests::postgres_server::PostgresServer::shared().fresh_database();
        Self {
            dir,
            db: PathBuf::from(database.url),
        }
    }

    /// Adds `broken-round`, a copy of `round_id` (in `execution_id`, or the same execution)
    /// whose document is not the component's: an unreadable record, with its version row.
    pub fn insert_unreadable_round(&self, round_id: &str, execution_id: Option<&str>) {
        let conn = rusqlite::Connection::open(&self.db).expect("opening the database");
        conn.execute(
            "INSERT INTO managed_input_rounds (round_id, execution_id, status, owner_id, \
             deadline_ns, created_at_ns, document) SELECT 'broken-round', \
             coalesce(?2, execution_id), status, owner_id, deadline_ns, created_at_ns + 1, \
             '{not the component''s document' FROM managed_input_rounds WHERE round_id = ?1",
            rusqlite::params![round_id, execution_id],
        )
        .expect("inserting a broken round");
        conn.execute(
            "INSERT INTO managed_input_round_versions SELECT 'broken-round', \
             coalesce(?2, execution_id), version, lease_expires_at_ns, updated_at_ns \
             FROM managed_input_round_versions WHERE round_id = ?1",
            rusqlite::params![round_id, execution_id],
        )
        .expect("inserting the broken round's version row");
    }

    /// Adds `exec-broken`, a copy of execution `execution_id` (finished, so that nothing
    /// recovers it) whose document is not the component's: an unreadable record, with its
    /// version row.
    pub fn insert_unreadable_execution(&self, execution_id: &str) {
        let conn = rusqlite::Connection::open(&self.db).expect("opening the database");
        conn.execute(
            "INSERT INTO executions (execution_id, status, owner_id, created_at_ns, document) \
             SELECT 'exec-broken', 'finished', NULL, created_at_ns + 1, \
             '{not the component''s document' FROM executions WHERE execution_id = ?1",
            rusqlite::params![execution_id],
        )
        .expect("inserting a broken execution");
        conn.execute(
            "INSERT INTO execution_versions SELECT 'exec-broken', version, NULL, updated_at_ns \
             FROM execution_versions WHERE execution_id = ?1",
            rusqlite::params![execution_id],
        )
        .expect("inserting the broken execution's version row");
    }

    /// Creates the sandbox's database, empty, as `m3 run` would (the commands that only read
    /// refuse a database that does not exist).
    pub fn create_database(&self) {
        use m3::ExecutionStore;
        let store: Box<dyn ExecutionStore> = match self.db.to_str() {
            Some(url) if url.starts_with("postgres://") => Box::new(
                m3::PostgresExecutionStore::open(url, m3::StoreOptions::default())
                    .expect("opening the database"),
            ),
            _ => Box::new(m3::SqliteExecutionStore::open(&self.db).expect("opening the database")),
        };
        store
            .managed_input_store()
            .expect("creating the database")
            .expect("a persistent store");
        store.close();
    }

    /// `m3` in the sandbox directory, with no `--db` and no `M3_DB`.
    pub fn bare(&self) -> Command {
        let mut cmd = Command::new(M3);
        cmd.current_dir(self.dir.path())
            .env_remove("M3_DB")
            .env_remove("COLUMNS")
            .env("RUST_BACKTRACE", "1");
        cmd
    }

    /// `m3 --db <tmp>/x.sqlite ARGS...`.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = self.bare();
        cmd.arg("--db").arg(&self.db).args(args);
        cmd
    }

    /// Runs `m3 --db <db> ARGS...` to its end.
    pub fn m3(&self, args: &[&str]) -> Output {
        finish(self.command(args), None, COMMAND_TIMEOUT)
    }

    /// Runs `m3 --db <db> ARGS...` with `input` on stdin.
    pub fn m3_stdin(&self, args: &[&str], input: &str) -> Output {
        finish(self.command(args), Some(input), COMMAND_TIMEOUT)
    }

    /// Writes a file in the sandbox.
    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).expect("writing a test file");
        path
    }

    /// Spawns `m3 --db <db> ARGS...` in the background with stdout piped.
    pub fn spawn(&self, args: &[String]) -> Running {
        self.spawn_command(self.bare(), args)
    }

    /// As [`Sandbox::spawn`], with `vars` added to the process's environment.
    pub fn spawn_with_env(&self, vars: &[(&str, &std::path::Path)], args: &[String]) -> Running {
        let mut cmd = self.bare();
        for (name, value) in vars {
            cmd.env(name, value);
        }
        self.spawn_command(cmd, args)
    }

    /// As [`Sandbox::spawn`], with the process's file-mode creation mask set to `umask`.
    pub fn spawn_under_umask(&self, umask: libc::mode_t, args: &[String]) -> Running {
        use std::os::unix::process::CommandExt;
        let mut cmd = self.bare();
        // SAFETY: umask(2) is async-signal-safe and touches nothing of this process.
        unsafe {
            cmd.pre_exec(move || {
                libc::umask(umask);
                Ok(())
            });
        }
        self.spawn_command(cmd, args)
    }

    fn spawn_command(&self, mut cmd: Command, args: &[String]) -> Running {
        cmd.arg("--db")
            .arg(&self.db)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawning `m3 run`");
        let lines = read_lines(child.stdout.take().expect("piped stdout"));
        let stderr = read_all(child.stderr.take().expect("piped stderr"));
        Running {
            guard: ChildGuard { child },
            lines,
            stderr,
            seen: Vec::new(),
        }
    }

    /// Spawns `run --no-prompt --json` against the bundled server in `era`.
    pub fn spawn_run(&self, era: &str, server_extra: &[&str], run_extra: &[&str]) -> Running {
        self.spawn(&run_args(era, server_extra, run_extra))
    }

    /// `run` as [`run_args`] gives it with the legacy era, on the claude-code harness: the
    /// pinned Claude Code CLI (installed on first use), a loopback Messages API on a thread of
    /// this test, the model's key in the command's environment.
    pub fn spawn_claude_code_run(&self) -> Running {
        let port = m3_tests::fake_anthropic::serve_in_background(
            m3_tests::fake_anthropic::Script::tool(json!({"item": "book"})),
        )
        .expect("the loopback model");
        let claude = m3_tests::peers::claude_code()
            .expect("the pinned Claude Code CLI")
            .display()
            .to_string();
        let base = format!("http://127.0.0.1:{port}");
        let harness = [
            "--harness",
            "claude-code",
            "--model",
            "fake-model",
            "--claude-binary",
            claude.as_str(),
            "--claude-base-url",
            base.as_str(),
            "--no-claude-sign-in",
        ];
        let key = std::path::Path::new("sk-ant-loopback");
        self.spawn_with_env(
            &[("ANTHROPIC_API_KEY", key)],
            &run_args("legacy", &[], &harness),
        )
    }

    /// `pending --wait 20 --json` in its own process: the one pending round.
    pub fn wait_pending(&self) -> Value {
        let rounds = self.m3(&["pending", "--wait", "20", "--json"]).json();
        let rounds = rounds.as_array().expect("pending --json prints an array");
        assert_eq!(rounds.len(), 1, "one pending round: {rounds:?}");
        rounds[0].clone()
    }

    /// `show ROUND --json`.
    pub fn show(&self, round_id: &str) -> Value {
        self.m3(&["show", round_id, "--json"]).json()
    }

    /// `status EXECUTION --json`, checked against the execution key set.
    pub fn status(&self, execution_id: &str) -> Value {
        let status = self.m3(&["status", execution_id, "--json"]).json();
        check_status(&status);
        status
    }
}

/// The arguments of `run --no-prompt --json` against `m3 shipping-server --era ERA`, with
/// `--human-input managed` unless `run_extra` sets it.
pub fn run_args(era: &str, server_extra: &[&str], run_extra: &[&str]) -> Vec<String> {
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
        "--server-arg",
        "--era",
        "--server-arg",
        era,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for extra in server_extra {
        args.push("--server-arg".into());
        args.push(extra.to_string());
    }
    args.extend(["--tool".to_string(), "shipping:book_shipment".to_string()]);
    if !run_extra.contains(&"--human-input") {
        args.extend(["--human-input".to_string(), "managed".to_string()]);
    }
    args.extend(run_extra.iter().map(|s| s.to_string()));
    args.push("Ask for the delivery address, then book the shipment.".into());
    args
}

/// The `--accept` flag with the test's address.
pub fn accept_address() -> String {
    format!(r#"shipping_address={{"street":"{STREET}","city":"{CITY}"}}"#)
}

/// The test's address as a stored answer.
pub fn address_answer() -> Value {
    json!({"action": "accept", "content": {"street": STREET, "city": CITY}})
}

// ---------------------------------------------------------------------------------------------
// JSON shape checks
// ---------------------------------------------------------------------------------------------

/// Asserts `v` is an object with exactly `expected` keys.
pub fn assert_keys(v: &Value, expected: &[&str], what: &str) {
    let keys: BTreeSet<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("{what} is not a JSON object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    let expected: BTreeSet<&str> = expected.iter().copied().collect();
    assert_eq!(
        keys,
        expected,
        "{what}: the key set differs from the contract's (missing: {:?}, extra: {:?})",
        expected.difference(&keys).collect::<Vec<_>>(),
        keys.difference(&expected).collect::<Vec<_>>(),
    );
}

/// Parses an RFC 3339 UTC timestamp (`...Z`).
pub fn timestamp(v: &Value, what: &str) -> DateTime<Utc> {
    let text = v
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v}"));
    assert!(text.ends_with('Z'), "{what} is not in UTC (`Z`): {text}");
    let parsed = DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{what} is not RFC 3339 ({e}): {text}"));
    assert_eq!(parsed.offset().local_minus_utc(), 0, "{what}: {text}");
    parsed.with_timezone(&Utc)
}

/// Checks every timestamp field (`*_at`, `deadline`) anywhere in `v`: null or RFC 3339 UTC.
pub fn check_timestamps(v: &Value) {
    match v {
        Value::Object(map) => {
            for (k, field) in map {
                if (k.ends_with("_at") || k == "deadline") && !field.is_null() {
                    timestamp(field, k);
                } else {
                    check_timestamps(field);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(check_timestamps),
        _ => {}
    }
}

/// Checks one request of the bundled server's round.
pub fn check_request(r: &Value) {
    assert_keys(r, REQUEST_KEYS, "a request");
    assert_eq!(r["mode"], "form");
    assert!(r["message"].is_string(), "message: {r}");
    assert_eq!(r["requested_schema"]["type"], "object");
    assert!(r["requested_schema"]["properties"].is_object(), "{r}");
    assert!(r["url"].is_null() && r["elicitation_id"].is_null(), "{r}");
}

/// Checks a pending round of the bundled server (as `pending --json` prints it).
pub fn check_round(round: &Value) {
    assert_keys(round, ROUND_KEYS, "a pending round");
    assert_eq!(round["operation_kind"], "tool");
    assert_eq!(round["server"], "shipping");
    assert_eq!(round["operation_name"], "book_shipment");
    for field in ["round_id", "execution_id", "logical_operation_id"] {
        assert!(round[field].is_string(), "{field}: {round}");
    }
    let requests = round["requests"]
        .as_object()
        .expect("requests is an object");
    assert!(
        requests.contains_key("shipping_address"),
        "the bundled server always asks for shipping_address: {round}"
    );
    for request in requests.values() {
        check_request(request);
    }
    let address = &requests["shipping_address"]["requested_schema"]["properties"];
    assert!(
        address["street"].is_object() && address["city"].is_object(),
        "the address schema: {round}"
    );
    let created = timestamp(&round["created_at"], "created_at");
    let deadline = timestamp(&round["deadline"], "deadline");
    assert!(
        deadline > created,
        "the deadline follows created_at: {round}"
    );
    check_timestamps(round);
}

/// Checks a stored record (`respond --json`, `show --json`, `status --json`'s rounds).
pub fn check_record(record: &Value) {
    let keys: Vec<&str> = ROUND_KEYS
        .iter()
        .chain(RECORD_EXTRA_KEYS)
        .copied()
        .collect();
    assert_keys(record, &keys, "a stored record");
    assert_eq!(record["operation_kind"], "tool");
    for request in record["requests"].as_object().expect("requests").values() {
        check_request(request);
    }
    timestamp(&record["created_at"], "created_at");
    timestamp(&record["updated_at"], "updated_at");
    assert!(record["status"].is_string() && record["redacted"].is_boolean());
    check_timestamps(record);
    if !record["responses"].is_null() {
        for (key, answer) in record["responses"].as_object().expect("responses") {
            if record["redacted"] == true {
                assert_keys(answer, REDACTED_RESPONSE_KEYS, key);
            } else {
                assert_keys(answer, RESPONSE_KEYS, key);
            }
        }
    }
}

/// Checks an execution (`executions --json`, `cancel --json`).
pub fn check_execution(e: &Value) {
    assert_keys(e, EXECUTION_KEYS, "an execution");
    check_lifecycle(e);
    timestamp(&e["created_at"], "created_at");
    timestamp(&e["updated_at"], "updated_at");
    assert!(e["cancel_requested"].is_boolean());
}

/// Checks the harness events of `status --json` and `events --json`: `events` (each `at`,
/// `kind`, `message`), `events_dropped`, `stderr_tail` (a string or null).
pub fn check_events(s: &Value) {
    for event in s["events"].as_array().expect("events is an array") {
        assert_keys(event, &["at", "kind", "message"], "an event");
        assert!(
            event["message"].is_string() && event["kind"].is_string(),
            "{event}"
        );
    }
    assert!(s["events_dropped"].is_u64(), "{s}");
    assert!(
        s["stderr_tail"].is_null() || s["stderr_tail"].is_string(),
        "{s}"
    );
}

/// Checks `status --json`: an execution plus its rounds and tool calls.
pub fn check_status(s: &Value) {
    let keys: Vec<&str> = EXECUTION_KEYS
        .iter()
        .chain(STATUS_EXTRA_KEYS)
        .copied()
        .collect();
    assert_keys(s, &keys, "status --json");
    check_lifecycle(s);
    check_timestamps(s);
    for round in s["rounds"].as_array().expect("rounds is an array") {
        check_record(round);
        assert_eq!(round["redacted"], true, "status never shows answers");
    }
    check_events(s);
    for call in s["tool_calls"].as_array().expect("tool_calls is an array") {
        assert!(
            call["tool"].is_string() && call["output"].is_string(),
            "{call}"
        );
    }
}

/// `lifecycle` is one of the four names; `outcome` is null exactly until `finished`.
pub fn check_lifecycle(e: &Value) {
    let lifecycle = e["lifecycle"].as_str().expect("lifecycle is a string");
    assert!(
        ["queued", "running", "waiting_for_input", "finished"].contains(&lifecycle),
        "lifecycle: {lifecycle}"
    );
    if lifecycle == "finished" {
        let outcome = e["outcome"]
            .as_str()
            .expect("a finished execution's outcome");
        assert!(
            ["succeeded", "failed", "cancelled"].contains(&outcome),
            "outcome: {outcome}"
        );
    } else {
        assert!(e["outcome"].is_null(), "no outcome before the end: {e}");
    }
    if e["outcome"] == "succeeded" {
        assert!(e["failure_code"].is_null(), "{e}");
    }
}

/// Checks an execution result (the `result` event's `result`).
pub fn check_result(r: &Value) {
    assert_keys(r, RESULT_KEYS, "an execution result");
    assert_eq!(r["lifecycle"], "finished");
    check_lifecycle(r);
    for call in r["tool_calls"].as_array().expect("tool_calls is an array") {
        assert_keys(call, TOOL_CALL_KEYS, "a tool call");
        assert!(call["output"].is_string(), "{call}");
    }
}

/// Checks `run --no-prompt --json`'s whole stdout: pending events, then exactly one result
/// event, last; nothing else. Returns the result.
pub fn check_run_stdout(out: &Output, lines: &[String]) -> Value {
    assert_eq!(
        out.stdout.lines().count(),
        lines.len(),
        "stdout holds only the JSON lines"
    );
    let events: Vec<Value> = lines
        .iter()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("a stdout line of `run` is not JSON ({e}): {l}"))
        })
        .collect();
    let Some((last, pending)) = events.split_last() else {
        panic!(
            "{} printed no line ({}); stderr:\n{}",
            out.what, out.status, out.stderr
        );
    };
    for event in pending {
        assert_keys(event, &["event", "round"], "a pending event");
        assert_eq!(event["event"], "pending");
        check_round(&event["round"]);
    }
    assert_keys(last, &["event", "result"], "the result event");
    assert_eq!(last["event"], "result");
    let result = last["result"].clone();
    check_result(&result);
    assert_eq!(
        out.status.success(),
        result["outcome"] == "succeeded",
        "exit 0 exactly when the outcome is succeeded: {result}"
    );
    result
}

/// Seconds from a round's `created_at` to its `deadline`.
pub fn deadline_secs(round: &Value) -> f64 {
    let created = timestamp(&round["created_at"], "created_at");
    let deadline = timestamp(&round["deadline"], "deadline");
    (deadline - created).num_milliseconds() as f64 / 1000.0
}

/// The round ids and execution id of a round.
pub fn ids(round: &Value) -> (String, String) {
    (
        round["round_id"].as_str().expect("round_id").to_string(),
        round["execution_id"]
            .as_str()
            .expect("execution_id")
            .to_string(),
    )
}

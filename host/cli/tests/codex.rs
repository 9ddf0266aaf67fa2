//! `m3 run --harness codex` and `m3 doctor` with the real, pinned Codex CLI (installed on first
//! use by `m3_tests::peers`) and a loopback model (`m3_tests::fake_model`) on a thread of this
//! test.

use m3_tests::fake_model::{self, FINAL_MESSAGE};
use m3_tests::peers;
use serde_json::Value;
use std::io::Read;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

const M3: &str = env!("CARGO_BIN_EXE_m3");

fn codex() -> std::path::PathBuf {
    peers::codex()
        .expect("the pinned Codex CLI is needed: installed on first use from tests/peers/ (npm ci)")
}

fn m3(db: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(M3)
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("COLUMNS") // text output whole, whatever the caller's shell exports
        .output()
        .expect("run m3")
}

/// The spec's flow on the codex harness from the command line: `run` in one process, `pending`
/// and `respond` in others; the result carries the tool output and the agent's final message.
#[test]
fn run_with_the_codex_harness_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.sqlite");
    let port = fake_model::serve_in_background(fake_model::Script {
        mode: "tool".into(),
        arguments: r#"{"item": "book"}"#.into(),
        marker: dir.path().join("marker").display().to_string(),
    })
    .unwrap();
    let mut run = codex_run(&db, port, &["fake-model"])
        .arg("--no-prompt")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pending = m3(&db, &["pending", "--wait", "120", "--json"]);
    assert!(
        pending.status.success(),
        "{}",
        String::from_utf8_lossy(&pending.stderr)
    );
    let rounds: Value = serde_json::from_slice(&pending.stdout).unwrap();
    let round_id = rounds[0]["round_id"].as_str().unwrap().to_string();
    assert_eq!(rounds[0]["operation_name"], "book_shipment");
    let answered = m3(
        &db,
        &[
            "respond",
            &round_id,
            "--idempotency-key",
            "k",
            "--accept",
            r#"shipping_address={"street": "1 Main Street", "city": "Pune"}"#,
        ],
    );
    assert!(
        answered.status.success(),
        "{}",
        String::from_utf8_lossy(&answered.stderr)
    );
    let stdout = run.stdout.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last = Value::Null;
    for line in BufReader::new(stdout).lines() {
        last = serde_json::from_str(&line.unwrap()).unwrap();
        assert!(Instant::now() < deadline);
    }
    let status = run.wait().unwrap();
    assert_eq!(last["event"], "result", "{last}");
    let result = &last["result"];
    assert_eq!(result["outcome"], "succeeded", "{result}");
    assert_eq!(result["final_message"], FINAL_MESSAGE);
    assert!(
        result["tool_calls"][0]["output"]
            .as_str()
            .unwrap()
            .contains("1 Main Street")
    );
    assert!(status.success());
    // What Codex did is kept with the execution.
    let id = result["execution_id"].as_str().unwrap();
    let events = m3(&db, &["events", id, "--json"]);
    assert!(events.status.success());
    let events: Value = serde_json::from_slice(&events.stdout).unwrap();
    let said = |kind: &str, text: &str| {
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == kind && e["message"].as_str().unwrap().contains(text))
    };
    assert!(said("mcp-server", "is ready"), "{events}");
    assert!(
        said("approval", "approved the call of `book_shipment`"),
        "{events}"
    );
    assert!(
        events["stderr_tail"].is_null(),
        "kept for failed runs only: {events}"
    );
    let shown = m3(&db, &["status", id]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("own tools switched off"), "{shown}");
}

/// `m3 doctor` reports whether the Codex binary is found on `PATH`, and its version.
#[test]
fn doctor_reports_the_codex_binary_and_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let codex = codex();
    let bin = codex.parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(M3)
        .arg("--db")
        .arg(dir.path().join("x.sqlite"))
        .args(["doctor", "--json"])
        .env("PATH", &path)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = &report["harnesses"]["codex"];
    assert_eq!(entry["found"], codex.display().to_string(), "{report}");
    assert_eq!(
        entry["version"],
        format!("codex-cli {}", peers::CODEX_VERSION)
    );
    let without = Command::new(M3)
        .arg("--db")
        .arg(dir.path().join("x.sqlite"))
        .args(["doctor", "--json"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&without.stdout).unwrap();
    assert!(report["harnesses"]["codex"]["found"].is_null(), "{report}");
}

/// `m3 doctor` says whether a Codex sign-in and an API key variable were found, never their
/// values.
#[test]
fn doctor_reports_the_codex_sign_in_without_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("codex-home");
    std::fs::create_dir(&home).unwrap();
    let doctor = |env: &[(&str, &str)]| -> (Value, String) {
        let out = Command::new(M3)
            .arg("--db")
            .arg(dir.path().join("x.sqlite"))
            .args(["doctor", "--json"])
            .env_remove("OPENAI_API_KEY")
            .env_remove("CODEX_API_KEY")
            .env("CODEX_HOME", &home)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (serde_json::from_str(&text).unwrap(), text)
    };
    let (report, _) = doctor(&[]);
    let credentials = &report["harnesses"]["codex"]["credentials"];
    assert_eq!(credentials["signed_in"], false, "{report}");
    assert_eq!(credentials["codex_home"], home.display().to_string());
    std::fs::write(
        home.join("auth.json"),
        r#"{"OPENAI_API_KEY":"sk-doctor-secret"}"#,
    )
    .unwrap();
    let (report, text) = doctor(&[("OPENAI_API_KEY", "sk-env-secret")]);
    let credentials = &report["harnesses"]["codex"]["credentials"];
    assert_eq!(credentials["signed_in"], true, "{report}");
    assert_eq!(credentials["sign_in"], "an API-key sign-in");
    assert_eq!(
        credentials["api_key_variables"],
        serde_json::json!(["OPENAI_API_KEY"])
    );
    assert!(!text.contains("sk-doctor-secret") && !text.contains("sk-env-secret"));
}

/// `m3 run --harness codex ARGS...` against the fake model on `port` and the bundled server
/// (legacy era), managed input, JSON lines on stdout.
fn codex_run(db: &std::path::Path, port: u16, models: &[&str]) -> Command {
    let mut cmd = Command::new(M3);
    cmd.arg("--db")
        .arg(db)
        .args(["run", "--json", "--harness", "codex"]);
    for model in models {
        cmd.args(["--model", model]);
    }
    cmd.arg("--codex-binary")
        .arg(codex())
        .args(["--model-base-url", &format!("http://127.0.0.1:{port}/v1")])
        .args(["--server-name", "shipping", "--server-command", M3])
        .args([
            "--server-arg",
            "shipping-server",
            "--server-arg",
            "--era",
            "--server-arg",
            "legacy",
        ])
        .args([
            "--tool",
            "shipping:book_shipment",
            "--human-input",
            "managed",
        ])
        .arg("Ask for the delivery address, then book the shipment.")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The pending rounds (`m3 pending --json`), waiting until there are `count` of them.
fn wait_for_pending(db: &std::path::Path, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = m3(db, &["pending", "--wait", "120", "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rounds: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        if rounds.len() >= count {
            assert_eq!(rounds.len(), count, "{rounds:?}");
            return rounds;
        }
        assert!(
            Instant::now() < deadline,
            "{count} pending rounds: {rounds:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads a child's stdout and stderr on threads; both arrive when they close.
fn collect(child: &mut std::process::Child) -> (Receiver<String>, Receiver<String>) {
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            let _ = tx.send(text);
        });
        rx
    };
    (
        read(Box::new(child.stdout.take().unwrap())),
        read(Box::new(child.stderr.take().unwrap())),
    )
}

/// Waits up to `timeout` for `child` to exit (killing it if it does not, and failing).
fn wait_exit(child: &mut std::process::Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`m3 run` did not end within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `--model a --model b`: one execution per model, run side by side; each round printed as a
/// `pending` line naming its execution and answered by `m3 respond`; a result per execution;
/// exit 0 since both succeeded; both in `m3 executions`, and the model server saw both models.
#[test]
fn run_with_two_models_runs_one_execution_per_model() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.sqlite");
    let port = fake_model::serve_in_background(fake_model::Script {
        mode: "tool".into(),
        arguments: r#"{"item": "book"}"#.into(),
        marker: dir.path().join("marker").display().to_string(),
    })
    .unwrap();
    let mut run = codex_run(&db, port, &["model-a", "model-b"])
        .spawn()
        .unwrap();
    let (stdout, stderr) = collect(&mut run);
    let rounds = wait_for_pending(&db, 2);
    for round in &rounds {
        let round_id = round["round_id"].as_str().unwrap();
        let answered = m3(
            &db,
            &[
                "respond",
                round_id,
                "--idempotency-key",
                "k",
                "--accept",
                r#"shipping_address={"street": "1 Main Street", "city": "Pune"}"#,
            ],
        );
        assert!(
            answered.status.success(),
            "{}",
            String::from_utf8_lossy(&answered.stderr)
        );
    }
    let status = wait_exit(&mut run, Duration::from_secs(120));
    let stdout = stdout.recv_timeout(Duration::from_secs(10)).unwrap();
    let stderr = stderr.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(status.success(), "stdout: {stdout}\nstderr: {stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let events =
        |name: &str| -> Vec<&Value> { lines.iter().filter(|l| l["event"] == name).collect() };
    let submitted = events("submitted");
    let models: Vec<&str> = submitted
        .iter()
        .map(|s| s["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["model-a", "model-b"], "{stdout}");
    let mut ids: Vec<&str> = submitted
        .iter()
        .map(|s| s["execution_id"].as_str().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 2, "{stdout}");
    let mut pending: Vec<&str> = events("pending")
        .iter()
        .map(|p| p["round"]["execution_id"].as_str().unwrap())
        .collect();
    pending.sort();
    assert_eq!(
        pending, ids,
        "a pending line per execution, naming it: {stdout}"
    );
    let results = events("result");
    let mut finished: Vec<&str> = results
        .iter()
        .map(|r| {
            assert_eq!(r["result"]["outcome"], "succeeded", "{r}");
            assert_eq!(r["result"]["final_message"], FINAL_MESSAGE);
            r["result"]["execution_id"].as_str().unwrap()
        })
        .collect();
    finished.sort();
    assert_eq!(finished, ids, "a result per execution: {stdout}");
    assert_eq!(lines.len(), 6, "{stdout}");

    let listed = m3(&db, &["executions", "--json"]);
    let listed: Vec<Value> = serde_json::from_slice(&listed.stdout).unwrap();
    let mut stored: Vec<&str> = listed
        .iter()
        .map(|e| {
            assert_eq!(e["outcome"], "succeeded", "{e}");
            e["execution_id"].as_str().unwrap()
        })
        .collect();
    stored.sort();
    assert_eq!(stored, ids);

    let mut seen = fake_model::models_seen(port);
    assert!(
        seen.len() >= 4,
        "two requests per execution at least: {seen:?}"
    );
    seen.sort();
    seen.dedup();
    assert_eq!(seen, ["model-a", "model-b"]);
}

/// Every process whose parent chain leads to `root` (from `/proc`), with its command line.
fn descendants(root: u32) -> Vec<(u32, String)> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        parents.push((pid, ppid, cmdline));
    }
    let mut found: Vec<(u32, String)> = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (pid, ppid, cmdline) in &parents {
            if *ppid == parent && !found.iter().any(|(p, _)| p == pid) {
                found.push((*pid, cmdline.clone()));
                frontier.push(*pid);
            }
        }
    }
    found
}

/// A process that exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("State:"))
            .is_some_and(|l| !l.contains('Z'))
    })
}

/// SIGTERM to `m3 run --harness codex --human-input managed` while its round is pending: the
/// run ends, the execution is `cancelled`, Codex's app-server and the MCP server it started
/// are gone, and the temporary directory (`TMPDIR`, where the scratch directory was) is empty.
#[test]
fn sigterm_cancels_a_codex_run_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.sqlite");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let port = fake_model::serve_in_background(fake_model::Script {
        mode: "tool".into(),
        arguments: r#"{"item": "book"}"#.into(),
        marker: dir.path().join("marker").display().to_string(),
    })
    .unwrap();
    let mut run = codex_run(&db, port, &["fake-model"])
        .env("TMPDIR", &tmp)
        .spawn()
        .unwrap();
    let (stdout, stderr) = collect(&mut run);
    let rounds = wait_for_pending(&db, 1);
    let execution_id = rounds[0]["execution_id"].as_str().unwrap().to_string();
    let children = descendants(run.id());
    assert!(
        children.iter().any(|(_, c)| c.contains("app-server")),
        "Codex's app-server runs: {children:?}"
    );
    assert!(
        children.iter().any(|(_, c)| c.contains("shipping-server")),
        "the MCP server runs: {children:?}"
    );
    assert!(
        std::fs::read_dir(&tmp).unwrap().next().is_some(),
        "the scratch directory is under TMPDIR"
    );

    // SAFETY: kill(2) on the child this test started.
    assert_eq!(unsafe { libc::kill(run.id() as i32, libc::SIGTERM) }, 0);
    let status = wait_exit(&mut run, Duration::from_secs(60));
    let stdout = stdout.recv_timeout(Duration::from_secs(10)).unwrap();
    let stderr = stderr.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(!status.success(), "a cancelled execution is not a success");
    assert!(
        status.code().is_some(),
        "`m3 run` exits by itself, not by the signal: {status:?}; stderr: {stderr}"
    );
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "result", "{stdout}");
    assert_eq!(last["result"]["outcome"], "cancelled", "{stdout}");

    let shown = m3(&db, &["status", &execution_id, "--json"]);
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["outcome"], "cancelled", "{shown}");

    let deadline = Instant::now() + Duration::from_secs(20);
    while children.iter().any(|(pid, _)| alive(*pid)) {
        let left: Vec<_> = children.iter().filter(|(pid, _)| alive(*pid)).collect();
        assert!(Instant::now() < deadline, "still running: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}

/// `--model-env-key NAME` hands the key in this process's `NAME` to Codex alone: the endpoint
/// that requires it answers; without it the endpoint's 401 ends the run as `model_error`.
#[test]
fn the_model_key_comes_from_the_named_environment_variable() {
    const KEY: &str = "sk-cli-3b9d";
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.sqlite");
    let port = fake_model::serve_in_background(fake_model::Script {
        mode: format!("auth:{KEY}"),
        arguments: r#"{"item": "book"}"#.into(),
        marker: dir.path().join("marker").display().to_string(),
    })
    .unwrap();
    let refused = codex_run(&db, port, &["fake-model"])
        .args(["--no-codex-sign-in", "--model-retries", "1"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stdout = String::from_utf8_lossy(&refused.stdout);
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["result"]["failure_kind"], "model_error", "{last}");
    assert!(
        last["result"]["failure_message"]
            .as_str()
            .unwrap()
            .contains("401"),
        "{last}"
    );
    let missing = codex_run(&db, port, &["fake-model"])
        .args(["--model-env-key", "M3_CLI_KEY_UNSET"])
        .env_remove("M3_CLI_KEY_UNSET")
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("M3_CLI_KEY_UNSET"),
        "the missing variable is named"
    );
    let run = codex_run(&db, port, &["fake-model"])
        .args(["--no-codex-sign-in", "--model-env-key", "M3_CLI_KEY"])
        .env("M3_CLI_KEY", KEY)
        .spawn()
        .unwrap();
    let rounds = wait_for_pending(&db, 1);
    let round_id = rounds[0]["round_id"].as_str().unwrap();
    let answered = m3(
        &db,
        &[
            "respond",
            round_id,
            "--idempotency-key",
            "k",
            "--accept",
            r#"shipping_address={"street": "1 Main Street", "city": "Pune"}"#,
        ],
    );
    assert!(answered.status.success());
    let out = run.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(!stdout.contains(KEY) && !String::from_utf8_lossy(&out.stderr).contains(KEY));
}

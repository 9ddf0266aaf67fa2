//! `m3 run --harness claude-code` and `m3 doctor` with the real, pinned Claude Code CLI
//! (installed on first use by `m3_tests::peers`) and a loopback Messages API
//! (`m3_tests::fake_anthropic`) on a thread of this test.

use m3_tests::fake_anthropic::{self, FINAL_MESSAGE};
use m3_tests::peers;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const M3: &str = env!("CARGO_BIN_EXE_m3");

fn m3(db: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(M3)
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("COLUMNS")
        .output()
        .expect("run m3")
}

/// The specification's flow on the claude-code harness from the command line: `run` in one
/// process (the model's key from its environment), `pending` and `respond` in others; the result
/// carries the tool output and the agent's final message, the events what Claude Code did.
#[test]
fn run_with_the_claude_code_harness_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.sqlite");
    let key = "sk-ant-cli-0042";
    let port = fake_anthropic::serve_in_background(fake_anthropic::Script {
        mode: format!("auth:{key}"),
        arguments: json!({"item": "book"}),
        marker: dir.path().join("marker").display().to_string(),
    })
    .unwrap();
    let claude = peers::claude_code().expect(
        "the pinned Claude Code CLI is needed: installed on first use from \
         tests/peers/claude-code/ (npm ci)",
    );
    let mut run = Command::new(M3)
        .arg("--db")
        .arg(&db)
        .args(["run", "--json", "--no-prompt", "--harness", "claude-code"])
        .args(["--model", "fake-model", "--claude-binary"])
        .arg(&claude)
        .args(["--claude-base-url", &format!("http://127.0.0.1:{port}")])
        .arg("--no-claude-sign-in")
        .args(["--server-name", "shipping", "--server-command", M3])
        .args(["--server-arg", "shipping-server", "--server-arg", "--era"])
        .args(["--server-arg", "legacy", "--tool", "shipping:book_shipment"])
        .args(["--human-input", "managed"])
        .arg("Ask for the delivery address, then book the shipment.")
        .env("ANTHROPIC_API_KEY", key)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
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
            r#"elicitation={"street": "1 Main Street", "city": "Pune"}"#,
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
    assert!(said("mcp-server", "`shipping` is connected"), "{events}");
    assert!(said("harness", "own tools switched off"), "{events}");
    let shown = String::from_utf8_lossy(&m3(&db, &["status", id]).stdout).into_owned();
    assert!(!shown.contains(key), "{shown}");
}

/// `m3 doctor` reports the Claude Code binary on `PATH` with its version, whether a sign-in
/// and a key variable were found, never their values.
#[test]
fn doctor_reports_claude_code_and_its_sign_in_without_values() {
    let dir = tempfile::tempdir().unwrap();
    let claude = peers::claude_code().expect("the pinned Claude Code CLI");
    // `claude` on PATH: a link named so to the pinned binary.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(&claude, bin.join("claude")).unwrap();
    let config = dir.path().join("claude-config");
    std::fs::create_dir(&config).unwrap();
    let doctor = |env: &[(&str, &str)]| -> (Value, String) {
        let out = Command::new(M3)
            .arg("--db")
            .arg(dir.path().join("x.sqlite"))
            .args(["doctor", "--json"])
            .env("PATH", &bin)
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("ANTHROPIC_AUTH_TOKEN")
            .env("CLAUDE_CONFIG_DIR", &config)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (serde_json::from_str(&text).unwrap(), text)
    };
    let (report, _) = doctor(&[]);
    let entry = &report["harnesses"]["claude-code"];
    assert_eq!(entry["found"], bin.join("claude").display().to_string());
    assert_eq!(
        entry["version"],
        format!("{} (Claude Code)", peers::CLAUDE_CODE_VERSION)
    );
    assert_eq!(entry["credentials"]["signed_in"], false, "{report}");
    assert_eq!(
        entry["credentials"]["config_dir"],
        config.display().to_string()
    );
    std::fs::write(
        config.join(".credentials.json"),
        r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat-doctor-secret"}}"#,
    )
    .unwrap();
    let (report, text) = doctor(&[("ANTHROPIC_API_KEY", "sk-ant-env-secret")]);
    let credentials = &report["harnesses"]["claude-code"]["credentials"];
    assert_eq!(credentials["signed_in"], true, "{report}");
    assert_eq!(credentials["sign_in"], "a Claude account sign-in");
    assert_eq!(
        credentials["api_key_variables"],
        json!(["ANTHROPIC_API_KEY"])
    );
    assert!(!text.contains("doctor-secret") && !text.contains("env-secret"));
}

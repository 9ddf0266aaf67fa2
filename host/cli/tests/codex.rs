//! `m3 run --harness codex` and `m3 doctor` with the real, pinned Codex CLI (installed on first
//! use by `m3_tests::peers`) and a loopback model (`m3_tests::fake_model`) on a thread of this
//! test.

use m3_tests::fake_model::{self, FINAL_MESSAGE};
use m3_tests::peers;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
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
    let codex = codex();
    let mut run = Command::new(M3)
        .arg("--db")
        .arg(&db)
        .args([
            "run",
            "--no-prompt",
            "--json",
            "--harness",
            "codex",
            "--model",
            "fake-model",
        ])
        .arg("--codex-binary")
        .arg(&codex)
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

//! A fake `codex app-server` that replays a recorded exchange, for the codex harness's error
//! paths without the real binary. The script is a JSON array (path in `$M3_FAKE_CODEX_SCRIPT`),
//! each step one of:
//! - `{"expect": METHOD}`: read lines from the kit until a message with that method arrives
//!   (its id, if any, becomes `$id`);
//! - `{"expect_response": ID}`: read until the kit answers the request ID;
//! - `{"send": MESSAGE}`: write MESSAGE as one line (the string `"$id"` becomes the last
//!   expected request's id);
//! - `{"wait_ms": N}`: sleep.
//!
//! `--version` prints `codex-cli 0.171.0-fake` (the kit checks its program at submission).
//!
//! Every line received is appended to `$M3_FAKE_CODEX_LOG`. After the script it reads until
//! its stdin closes.

use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::io::{BufRead, Write};

fn substitute(value: &Value, id: &Value) -> Value {
    match value {
        Value::String(s) if s == "$id" => id.clone(),
        Value::Array(items) => Value::Array(items.iter().map(|v| substitute(v, id)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, id)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn main() -> Result<()> {
    // The kit checks at submission that its program is the Codex CLI.
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("codex-cli 0.171.0-fake");
        return Ok(());
    }
    let script: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(
        std::env::var("M3_FAKE_CODEX_SCRIPT").context("M3_FAKE_CODEX_SCRIPT")?,
    )?)?;
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::env::var("M3_FAKE_CODEX_LOG").context("M3_FAKE_CODEX_LOG")?)?;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut stdout = std::io::stdout().lock();
    let mut id = Value::Null;
    let mut next = |log: &mut std::fs::File| -> Result<Option<Value>> {
        match lines.next() {
            Some(line) => {
                let line = line?;
                writeln!(log, "{line}")?;
                Ok(Some(serde_json::from_str(&line)?))
            }
            None => Ok(None),
        }
    };
    for step in &script {
        if let Some(method) = step.get("expect").and_then(Value::as_str) {
            loop {
                let Some(message) = next(&mut log)? else {
                    bail!("stdin closed while expecting {method}");
                };
                if message.get("method").and_then(Value::as_str) == Some(method) {
                    id = message.get("id").cloned().unwrap_or(Value::Null);
                    break;
                }
            }
        } else if let Some(wanted) = step.get("expect_response") {
            loop {
                let Some(message) = next(&mut log)? else {
                    bail!("stdin closed while expecting the answer to {wanted}");
                };
                if message.get("method").is_none() && message.get("id") == Some(wanted) {
                    break;
                }
            }
        } else if let Some(message) = step.get("send") {
            writeln!(stdout, "{}", substitute(message, &id))?;
            stdout.flush()?;
        } else if let Some(ms) = step.get("wait_ms").and_then(Value::as_u64) {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        } else {
            bail!("unknown step {step}");
        }
    }
    while next(&mut log)?.is_some() {}
    Ok(())
}

//! A second process on the same store, for tests of what crosses processes.
//!
//! - `m3-test-second-process attach DB EXECUTION_ID`: attaches a handle to an execution that
//!   another process submitted (`McpTestKit::execution`), waits for its pending round, answers it
//!   with the specification's address (printing `answered ROUND`), waits for the result through
//!   the store and prints `result OUTCOME TOOL_TEXT`.
//! - `m3-test-second-process result DB EXECUTION_ID`: attaches and prints `result OUTCOME TOOL_TEXT`
//!   (or `timeout MESSAGE` for an `OperationTimeout` that carries the result).
//! - `m3-test-second-process codex-spec DB MODEL_BASE_URL SHIPPING_SERVER`: the specification's
//!   Codex example as written: `env={}` and the program `codex` found on this process's `PATH`
//!   (the test sets it); prints `result OUTCOME TOOL_TEXT`.
//! - `m3-test-second-process engine`: loads the policy engine as any dependent does (the
//!   library's notices on, its default) and prints where its compiled code came from.

use anyhow::{Context, Result, anyhow, bail};
use m3::{
    AgentSpec, CodexOptions, ElicitationResponse, ExecutionError, ExecutionHandle, HumanInput,
    McpTestKit, ModelProvider, SqliteExecutionStore, StdioServer, Submission,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn address() -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )])
}

fn say(line: String) -> Result<()> {
    println!("{line}");
    std::io::stdout().flush()?;
    Ok(())
}

fn kit(db: &str) -> Result<McpTestKit> {
    let store = Arc::new(SqliteExecutionStore::open(db)?);
    Ok(McpTestKit::new(store, BTreeMap::<String, String>::new())?)
}

fn answer_and_wait(handle: &ExecutionHandle) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(120);
    let pending = loop {
        if let Some(pending) = handle.pending_elicitation()? {
            break pending;
        }
        if Instant::now() > until {
            bail!("no pending round within 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    handle.respond_elicitation(
        &pending.round_id,
        address(),
        &format!("second-{}", pending.round_id),
    )?;
    say(format!("answered {}", pending.round_id))?;
    print_result(handle)
}

fn print_result(handle: &ExecutionHandle) -> Result<()> {
    match handle.result(Some(Duration::from_secs(120))) {
        Ok(result) => say(format!(
            "result {} {}",
            result.outcome.kind.as_str(),
            result
                .outcome
                .tool_results
                .first()
                .map(|t| t.text())
                .unwrap_or_default()
        )),
        Err(ExecutionError::OperationTimeout(timeout)) if timeout.result.is_some() => {
            say(format!("timeout {timeout}"))
        }
        Err(e) => Err(e.into()),
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage =
        || anyhow!("usage: attach|result DB EXECUTION_ID, codex-spec DB URL SERVER, or engine");
    match args.first().map(String::as_str) {
        Some("attach") => {
            let [_, db, execution] = &args[..] else {
                return Err(usage());
            };
            let kit = kit(db)?;
            answer_and_wait(&kit.execution(execution)?)
        }
        Some("engine") => {
            let outcome = m3::health::load_engine()?;
            println!("{outcome:?}");
            Ok(())
        }
        Some("result") => {
            let [_, db, execution] = &args[..] else {
                return Err(usage());
            };
            let kit = kit(db)?;
            print_result(&kit.execution(execution)?)
        }
        Some("codex-spec") => {
            let [_, db, url, server] = &args[..] else {
                return Err(usage());
            };
            // `MCPTestKit(store=store, env={})`: the children get nothing of this process.
            let kit = kit(db)?;
            let options = CodexOptions {
                binary: "codex".into(),
                model_provider: Some(ModelProvider::responses("fake", url.clone())),
                ..CodexOptions::default()
            };
            let agent = kit
                .agents([AgentSpec::codex(["fake-model"], options)])?
                .remove(0);
            let handle = agent
                .submit(
                    Submission::new(
                        "Ask for the delivery address, then book the shipment.",
                        StdioServer::new("shipping", server.clone()).args(["--era", "legacy"]),
                    )
                    .tools(["shipping:book_shipment"])
                    .human_input(HumanInput::Managed),
                )
                .context("submitting the spec's Codex example")?;
            answer_and_wait(&handle)
        }
        _ => Err(usage()),
    }
}

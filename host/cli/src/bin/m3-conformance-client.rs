//! `m3-conformance-client URL`: the kit's MCP client under the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`), which runs it as `<command> <server URL>` against a
//! mock server per scenario and judges what it sends.
//!
//! It reads the scenario from `MCP_CONFORMANCE_SCENARIO`, the protocol version from
//! `MCP_CONFORMANCE_PROTOCOL_VERSION` (2026-07-28: the era is probed with `server/discover`;
//! anything older: the legacy handshake) and, where the scenario gives one,
//! `MCP_CONFORMANCE_CONTEXT`; then submits one execution of the scripted harness against the URL
//! (an `HttpServer` binding), in a throwaway SQLite database, with managed human input, and
//! answers every round as a person would: each form field gets its schema's default, or a plain
//! value of its type. It prints the outcome and exits 0 when the execution did what the scenario
//! asks of a client, 1 when it did not, 2 when it could not run.
//!
//! Which scenarios the kit covers, and why the others fail, is `tests/conformance/
//! expectations.json`, enforced by `host/cli/tests/conformance.rs`.

use anyhow::{Context, Result};
use m3::{
    AgentSpec, ElicitationRequest, ElicitationResponse, ExecutionError, HttpServer, HumanInput,
    McpEra, McpTestKit, Script, SqliteExecutionStore, Submission,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The server's name in the binding and the script.
const SERVER: &str = "conformance";
/// How long a scenario may take (the suite's own timeout is 30 s).
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(25);

/// What the kit is asked to do in one scenario, and whether its execution must succeed.
struct Plan {
    script: Script,
    /// The execution must succeed (else: it must fail, e.g. refusing a tool it may not call).
    succeeds: bool,
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("m3-conformance-client: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<bool> {
    let url = std::env::args()
        .next_back()
        .filter(|a| a.starts_with("http"))
        .context("usage: m3-conformance-client <server URL> (as the conformance suite runs it)")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let version =
        std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION").unwrap_or_else(|_| "2025-11-25".into());
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    let plan = plan(&scenario, &context)?;
    let era = if version == "2026-07-28" {
        McpEra::Auto
    } else {
        McpEra::Legacy
    };
    eprintln!("scenario {scenario} at {version}: {url} ({era:?})");

    let dir = tempfile::tempdir()?;
    let store = Arc::new(SqliteExecutionStore::open(
        dir.path().join("rounds.sqlite"),
    )?);
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    let tools: Vec<String> = plan
        .script
        .steps
        .iter()
        .filter(|s| matches!(s, m3::ScriptStep::Tool { .. }))
        .map(|s| s.target().to_string())
        .collect();
    let agent = kit
        .agents([AgentSpec::scripted(plan.script.clone())])?
        .remove(0);
    let mut submission = Submission::new(
        format!("conformance scenario {scenario}"),
        HttpServer::new(SERVER, &url).era(era),
    )
    .human_input(HumanInput::Managed);
    if !tools.is_empty() {
        submission = submission.tools(tools);
    }
    let handle = agent.submit(submission)?;
    let deadline = Instant::now() + SCENARIO_TIMEOUT;
    let mut answered = Vec::new();
    let result = loop {
        if let Some(round) = handle.pending_elicitation()?
            && !answered.contains(&round.round_id)
        {
            let responses: BTreeMap<String, ElicitationResponse> = round
                .requests
                .iter()
                .map(|(key, request)| (key.clone(), answer(request)))
                .collect();
            eprintln!(
                "answering round {} ({} requests)",
                round.round_id,
                responses.len()
            );
            handle.respond_elicitation(
                &round.round_id,
                responses,
                &format!("conformance-{}", round.round_id),
            )?;
            answered.push(round.round_id);
        }
        match handle.result(Some(Duration::from_millis(20))) {
            Ok(result) => break result,
            Err(ExecutionError::OperationTimeout(_)) if Instant::now() < deadline => continue,
            Err(e) => return Err(e.into()),
        }
    };
    println!("{}", result.outcome);
    for tool in &result.outcome.tool_results {
        println!("{}: {}", tool.tool, tool.result);
    }
    drop(handle);
    drop(kit);
    store.close();
    Ok(result.succeeded() == plan.succeeds)
}

/// The script of a scenario: the calls its mock server expects of a client.
fn plan(scenario: &str, context: &Value) -> Result<Plan> {
    let call = |tool: &str, arguments: Value| Script::call(format!("{SERVER}:{tool}"), arguments);
    let succeeding = |script: Script| Plan {
        script,
        succeeds: true,
    };
    Ok(match scenario {
        // The handshake alone.
        "initialize" => succeeding(Script { steps: Vec::new() }),
        "tools_call" => succeeding(call("add_numbers", json!({"a": 2, "b": 3}))),
        "elicitation-sep1034-client-defaults" => {
            succeeding(call("test_client_elicitation_defaults", json!({})))
        }
        "sse-retry" => succeeding(call("test_reconnection", json!({}))),
        // Any request after the refused first one.
        "request-metadata" => succeeding(call("echo", json!({}))),
        "sep-2322-client-request-state" => succeeding(
            call("test_mrtr_echo_state", json!({}))
                .then(format!("{SERVER}:test_mrtr_unrelated"), json!({}))
                .then(format!("{SERVER}:test_mrtr_no_state"), json!({}))
                .then(format!("{SERVER}:test_mrtr_no_result_type"), json!({})),
        ),
        "http-standard-headers" => succeeding(
            call("test_headers", json!({}))
                .then(format!("{SERVER}:my-hyphenated-tool"), json!({}))
                .then_resource(format!("{SERVER}:file:///path/to/file%20name.txt"))
                .then_prompt(format!("{SERVER}:test_prompt"), json!({})),
        ),
        "http-custom-headers" => {
            let calls = context["toolCalls"]
                .as_array()
                .context("the scenario's context names no toolCalls")?;
            let mut script = Script { steps: Vec::new() };
            for c in calls {
                let name = c["name"].as_str().context("a tool call without a name")?;
                script = script.then(format!("{SERVER}:{name}"), c["arguments"].clone());
            }
            succeeding(script)
        }
        // The valid tool is called; the next one's annotation breaks the rules, so the kit
        // refuses to call it and the execution fails, as it must.
        "http-invalid-tool-headers" => Plan {
            script: call("valid_tool", json!({"region": "us-west1"}))
                .then(format!("{SERVER}:invalid_empty_header"), json!({})),
            succeeds: false,
        },
        // The skills extension: a client that does not use it makes no skills calls.
        s if s.starts_with("sep-2640-") => succeeding(Script { steps: Vec::new() }),
        // OAuth and the rest: the kit has no such client feature; it makes the scenario's
        // first request and reports what it got (see the expectations file).
        _ => succeeding(call("echo", json!({}))),
    })
}

/// A person's answer to one request: a form gets each field's default, or a plain value of its
/// type; a URL request gets consent.
fn answer(request: &ElicitationRequest) -> ElicitationResponse {
    match request {
        ElicitationRequest::Url(_) => ElicitationResponse::accept_url(),
        ElicitationRequest::Form(form) => {
            let mut content = serde_json::Map::new();
            if let Some(properties) = form.requested_schema["properties"].as_object() {
                for (name, property) in properties {
                    if let Some(value) = field(property) {
                        content.insert(name.clone(), value);
                    }
                }
            }
            ElicitationResponse::accept(Value::Object(content))
        }
    }
}

/// A value for one form field: its default, else the first option, else a plain value.
fn field(property: &Value) -> Option<Value> {
    if let Some(default) = property.get("default") {
        return Some(default.clone());
    }
    if let Some(first) = property["enum"].as_array().and_then(|o| o.first()) {
        return Some(first.clone());
    }
    if let Some(first) = property["oneOf"].as_array().and_then(|o| o.first()) {
        return Some(first["const"].clone());
    }
    match property["type"].as_str()? {
        "boolean" => Some(json!(true)),
        "integer" => Some(json!(property["minimum"].as_i64().unwrap_or(1))),
        "number" => Some(json!(property["minimum"].as_f64().unwrap_or(1.0))),
        "string" => Some(json!(match property["format"].as_str() {
            Some("email") => "conformance@example.com",
            Some("uri") => "https://example.com/",
            Some("date") => "2026-01-01",
            Some("date-time") => "2026-01-01T00:00:00Z",
            _ => "conformance",
        })),
        "array" => Some(json!([])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_fields_get_their_defaults_or_a_plain_value() {
        assert_eq!(
            field(&json!({"type": "string", "default": "John"})),
            Some(json!("John"))
        );
        assert_eq!(field(&json!({"type": "boolean"})), Some(json!(true)));
        assert_eq!(
            field(&json!({"type": "string", "enum": ["a", "b"]})),
            Some(json!("a"))
        );
        assert_eq!(
            field(&json!({"type": "integer", "minimum": 3})),
            Some(json!(3))
        );
        assert_eq!(field(&json!({"type": "object"})), None);
    }

    #[test]
    fn every_scenario_has_a_script() {
        assert!(
            plan("sep-2322-client-request-state", &Value::Null)
                .unwrap()
                .succeeds
        );
        assert!(
            !plan("http-invalid-tool-headers", &Value::Null)
                .unwrap()
                .succeeds
        );
        assert!(plan("http-custom-headers", &Value::Null).is_err());
    }
}

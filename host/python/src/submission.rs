//! The JSON form of `agent.submit(...)`'s arguments -> [`m3::Submission`]. Values the Python
//! types cannot hold (a `human_input` other than `"fail"` or `"managed"`, an unknown era) are
//! the specification's `ModelValidationError`, raised at submission.

use crate::failure::{Failure, Outcome};
use m3::{HttpServer, HumanInput, McpEra, ServerBinding, StdioServer, Submission};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmissionJson {
    prompt: String,
    server: ServerJson,
    tools: Vec<String>,
    human_input: Value,
    round_limit: u32,
    round_deadline_secs: Option<f64>,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum ServerJson {
    Stdio {
        name: String,
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<String>,
        era: Value,
    },
    Http {
        name: String,
        url: String,
        headers: BTreeMap<String, String>,
        era: Value,
        delivery_timeout_secs: Option<f64>,
    },
}

fn refused(message: impl Into<String>) -> Failure {
    Failure::ModelValidation(message.into())
}

fn era(value: Value) -> Outcome<McpEra> {
    serde_json::from_value(value)
        .map_err(|_| refused("a server's era must be \"auto\", \"legacy\" or \"modern\""))
}

fn seconds(what: &str, value: Option<f64>) -> Outcome<Option<Duration>> {
    value
        .map(|secs| {
            Duration::try_from_secs_f64(secs)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    refused(format!(
                        "{what} must be a positive, finite number of seconds"
                    ))
                })
        })
        .transpose()
}

/// Reads the JSON of `submit`'s arguments.
pub(crate) fn submission(text: &str) -> Outcome<Submission> {
    let json: SubmissionJson = serde_json::from_str(text).map_err(|e| {
        refused(format!(
            "the submission does not convert: {}",
            crate::new_round::kind_only(&e)
        ))
    })?;
    let human_input = match json.human_input.as_str() {
        Some("fail") => HumanInput::Fail,
        Some("managed") => HumanInput::Managed,
        _ => return Err(refused("human_input must be \"fail\" or \"managed\"")),
    };
    let server: ServerBinding = match json.server {
        ServerJson::Stdio {
            name,
            command,
            args,
            env,
            cwd,
            era: given,
        } => StdioServer {
            name,
            command,
            args,
            env,
            cwd,
            era: era(given)?,
        }
        .into(),
        ServerJson::Http {
            name,
            url,
            headers,
            era: given,
            delivery_timeout_secs,
        } => HttpServer {
            name,
            url,
            headers,
            era: era(given)?,
            delivery_timeout: seconds("delivery_timeout", delivery_timeout_secs)?,
        }
        .into(),
    };
    Ok(Submission {
        prompt: json.prompt,
        server,
        tools: json.tools,
        human_input,
        round_limit: json.round_limit,
        round_deadline: seconds("round_deadline", json.round_deadline_secs)?,
    })
}

//! `m3 respond`: answers a pending round through the same path as `respond_elicitation` (the
//! component validates and commits; the worker, in whatever process, delivers it).

use crate::{Cli, json, print_json, read_input};
use anyhow::{Result, anyhow, bail};
use clap::Args;
use m3::{ManagedInputStatus, ManagedInputStore};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `m3 respond`.
#[derive(Debug, Args)]
pub struct RespondArgs {
    /// The round to answer (or a unique prefix of its id).
    round_id: String,
    /// Makes a retry safe: the same key with the same answers returns the stored record.
    #[arg(long, value_name = "KEY")]
    idempotency_key: String,
    /// Accept request KEY with JSON content (`KEY=JSON`), or with none (`KEY`: URL consent).
    #[arg(long, value_name = "KEY[=JSON]")]
    accept: Vec<String>,
    /// Decline request KEY.
    #[arg(long, value_name = "KEY")]
    decline: Vec<String>,
    /// Cancel request KEY.
    #[arg(long, value_name = "KEY")]
    cancel: Vec<String>,
    /// All answers as a JSON object of request key -> `{"action", "content"}` (`-`: stdin).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["accept", "decline", "cancel"])]
    responses: Option<PathBuf>,
}

/// The response map as JSON text, from the flags. Content is checked to be one JSON value and
/// embedded verbatim, so the component's strict parser sees exactly what was typed.
fn response_map(args: &RespondArgs) -> Result<String> {
    if let Some(file) = &args.responses {
        return read_input(file).map_err(crate::invalid_input);
    }
    let mut entries = Vec::new();
    for accept in &args.accept {
        let (key, content) = match accept.split_once('=') {
            Some((key, content)) => {
                serde_json::from_str::<serde_json::Value>(content).map_err(|_| {
                    anyhow!(
                        "ManagedInputValidationError: the content given for `{key}` is not one JSON value (malformed_json)"
                    )
                })?;
                (key, Some(content))
            }
            None => (accept.as_str(), None),
        };
        let entry = match content {
            Some(content) => format!("{{\"action\":\"accept\",\"content\":{content}}}"),
            None => "{\"action\":\"accept\"}".to_string(),
        };
        entries.push((key.to_string(), entry));
    }
    for key in &args.decline {
        entries.push((key.clone(), "{\"action\":\"decline\"}".into()));
    }
    for key in &args.cancel {
        entries.push((key.clone(), "{\"action\":\"cancel\"}".into()));
    }
    if entries.is_empty() {
        return Err(crate::invalid_input(
            "give --accept, --decline, --cancel (one per request key) or --responses",
        ));
    }
    let body: Vec<String> = entries
        .iter()
        .map(|(k, v)| format!("{}:{v}", serde_json::Value::String(k.clone())))
        .collect();
    Ok(format!("{{{}}}", body.join(",")))
}

/// `m3 respond`.
pub fn respond(cli: &Cli, args: &RespondArgs) -> Result<ExitCode> {
    let text = response_map(args)?;
    let executions = crate::executions(cli)?;
    let round_id = &crate::ids::round(&executions, &args.round_id)?;
    let store = executions.store();
    match store.get_round(round_id) {
        Ok(Some(record)) => executions.respond(
            &record.pending.execution_id,
            round_id,
            &text,
            &args.idempotency_key,
        )?,
        // No such round (or an id the store refuses): the store's own typed error.
        _ => {
            store.submit_responses_json(round_id, &text, &args.idempotency_key)?;
        }
    }
    let record = store
        .get_round(round_id)?
        .ok_or_else(|| anyhow!("StorageError: the round {round_id} disappeared"))?;
    if cli.json {
        print_json(&json::record(&record, None), false);
    }
    // Say what the stored status means, never more: a repeated answer to a round that ended
    // is acknowledged by the store (same key, same answer), but will never be delivered.
    let id = &record.pending.round_id;
    let said = match record.status {
        ManagedInputStatus::ResponseValidated => format!(
            "round {id} is response_validated: the answers are stored and wait for its worker, \
             which delivers them once or fails the round saying why (`m3 show {id}`)"
        ),
        ManagedInputStatus::DeliveryStarted | ManagedInputStatus::Delivered => {
            format!(
                "round {id} is {}: the answers are being delivered",
                record.status
            )
        }
        ManagedInputStatus::Resolved => {
            format!("round {id} is resolved: the answers were delivered and the server replied")
        }
        ManagedInputStatus::Pending | ManagedInputStatus::Failed => {
            let failure = record
                .failure
                .as_ref()
                .map(|f| format!("{} ({})", f.code, f.message))
                .unwrap_or_else(|| record.status.to_string());
            bail!(
                "ManagedInputStateError: round {id} ended failed before its answers were \
                 delivered: {failure}; they are stored but will not be delivered (round_terminal)"
            );
        }
    };
    if !cli.json {
        println!("{said}");
    }
    Ok(ExitCode::SUCCESS)
}

//! Reading and steering what is stored: `rounds`, `show`, `executions`, `status`, `cancel`,
//! `recover`.

use crate::{Cli, json, print_json};
use anyhow::{Result, bail};
use comfy_table::Table;
use m3::{ExecutionState, ManagedInputRecord, ManagedInputStatus, ManagedInputStore, RoundFilter};
use serde_json::Value;
use std::process::ExitCode;

fn status_from(text: &str) -> Result<ManagedInputStatus> {
    match ManagedInputStatus::ALL.iter().find(|s| s.as_str() == text) {
        Some(status) => Ok(*status),
        None => Err(crate::invalid_input(format!(
            "--status must be one of: {}",
            ManagedInputStatus::ALL.map(|s| s.as_str()).join(", ")
        ))),
    }
}

fn rounds_table(records: &[ManagedInputRecord]) -> Table {
    let mut table = Table::new();
    table.set_header([
        "round",
        "execution",
        "operation",
        "index",
        "status",
        "failure",
        "updated",
    ]);
    for r in records {
        table.add_row([
            r.pending.round_id.clone(),
            r.pending.execution_id.clone(),
            format!("{}:{}", r.pending.server, r.pending.operation_name),
            format!("{}/{}", r.round_index, r.round_limit),
            r.status.to_string(),
            r.failure
                .as_ref()
                .and_then(|f| serde_json::to_value(f.code).ok())
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            json::time(r.timestamps.updated_at)
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ]);
    }
    table
}

fn list_rounds(
    cli: &Cli,
    status: Option<&str>,
    execution: Option<&str>,
) -> Result<Vec<ManagedInputRecord>> {
    let filter = RoundFilter {
        execution_id: execution.map(str::to_string),
        status: status.map(status_from).transpose()?,
        limit: None,
    };
    crate::readable_rounds(crate::executions(cli)?.store(), &filter)
}

/// `m3 rounds`.
pub fn rounds(cli: &Cli, status: Option<&str>, execution: Option<&str>) -> Result<ExitCode> {
    crate::recovered_executions(cli)?;
    let records = list_rounds(cli, status, execution)?;
    if cli.json {
        let redacted: Vec<Value> = records
            .iter()
            .map(|r| redacted_record(cli, r))
            .collect::<Result<_>>()?;
        print_json(&Value::Array(redacted), false);
    } else if records.is_empty() {
        println!("no rounds");
    } else {
        println!("{}", rounds_table(&records));
    }
    Ok(ExitCode::SUCCESS)
}

/// A record with its answers replaced by the redacted projection (listings never show answers).
fn redacted_record(cli: &Cli, record: &ManagedInputRecord) -> Result<Value> {
    let projection = crate::executions(cli)?
        .store()
        .redacted_responses(&record.pending.round_id)?
        .unwrap_or_default();
    Ok(json::record(record, Some(&projection)))
}

/// `m3 show`.
pub fn show(cli: &Cli, round_id: &str, redacted: bool) -> Result<ExitCode> {
    let executions = crate::executions(cli)?;
    let store = executions.store();
    // The component's typed error (`round_not_found`) for a round that does not exist.
    let projection = store.redacted_responses(round_id)?.unwrap_or_default();
    let Some(record) = store.get_round(round_id)? else {
        bail!("ManagedInputStateError: the round {round_id} disappeared while it was read");
    };
    let value = if redacted {
        json::record(&record, Some(&projection))
    } else {
        json::record(&record, None)
    };
    if cli.json {
        print_json(&value, false);
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn executions_table(states: &[ExecutionState]) -> Table {
    let mut table = Table::new();
    table.set_header(["execution", "lifecycle", "outcome", "failure", "created"]);
    for s in states {
        let failure = s.outcome.as_ref().and_then(|o| o.failure.as_ref());
        table.add_row([
            s.execution_id.clone(),
            s.lifecycle.as_str().to_string(),
            s.outcome
                .as_ref()
                .map(|o| o.kind.as_str().to_string())
                .unwrap_or_default(),
            failure
                .map(|f| match f.code {
                    Some(code) => format!("{} ({code:?})", f.kind.as_str()),
                    None => f.kind.as_str().to_string(),
                })
                .unwrap_or_default(),
            json::time(s.created_at)
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ]);
    }
    table
}

/// `m3 executions`.
pub fn executions(cli: &Cli) -> Result<ExitCode> {
    let states: Vec<ExecutionState> = crate::recovered_executions(cli)?.states(None)?;
    if cli.json {
        print_json(
            &Value::Array(states.iter().map(json::execution).collect()),
            false,
        );
    } else if states.is_empty() {
        println!("no executions");
    } else {
        println!("{}", executions_table(&states));
    }
    Ok(ExitCode::SUCCESS)
}

/// `m3 status`.
pub fn status(cli: &Cli, execution_id: &str) -> Result<ExitCode> {
    let executions = crate::recovered_executions(cli)?;
    let state = executions.snapshot(execution_id)?;
    let diagnostics = executions.diagnostics(execution_id)?;
    let records = list_rounds(cli, None, Some(execution_id))?;
    if cli.json {
        let mut value = json::execution(&state);
        value["events"] = serde_json::to_value(&diagnostics.events)?;
        value["events_dropped"] = diagnostics.events_dropped.into();
        value["stderr_tail"] = serde_json::json!(diagnostics.stderr_tail);
        let rounds: Vec<Value> = records
            .iter()
            .map(|r| redacted_record(cli, r))
            .collect::<Result<_>>()?;
        value["rounds"] = Value::Array(rounds);
        value["final_message"] =
            serde_json::json!(state.outcome.as_ref().and_then(|o| o.final_message.clone()));
        value["tool_calls"] = Value::Array(
            state
                .outcome
                .iter()
                .flat_map(|o| o.tool_results.iter())
                .map(json::tool_call)
                .collect(),
        );
        print_json(&value, false);
    } else {
        println!("{}", executions_table(std::slice::from_ref(&state)));
        if let Some(failure) = state.outcome.as_ref().and_then(|o| o.failure.as_ref()) {
            println!("failure: {}", failure.message);
        }
        if !records.is_empty() {
            println!("{}", rounds_table(&records));
        }
        print_events(&diagnostics);
    }
    Ok(ExitCode::SUCCESS)
}

/// `m3 events`: what the execution's harness did or reported, and its stderr tail.
pub fn events(cli: &Cli, execution_id: &str) -> Result<ExitCode> {
    let diagnostics = crate::executions(cli)?.diagnostics(execution_id)?;
    if cli.json {
        print_json(&serde_json::to_value(&diagnostics)?, false);
    } else if diagnostics.events.is_empty() && diagnostics.stderr_tail.is_none() {
        println!("no events");
    } else {
        print_events(&diagnostics);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_events(diagnostics: &m3::ExecutionDiagnostics) {
    for event in &diagnostics.events {
        println!(
            "{}  {:<10}  {}",
            event.at.format("%Y-%m-%dT%H:%M:%SZ"),
            event.kind,
            event.message
        );
    }
    if diagnostics.events_dropped > 0 {
        println!("({} more events were not kept)", diagnostics.events_dropped);
    }
    if let Some(tail) = &diagnostics.stderr_tail {
        println!("harness stderr (last lines):");
        for line in tail.lines() {
            println!("  {line}");
        }
    }
}

/// `m3 cancel`.
pub fn cancel(cli: &Cli, execution_id: &str) -> Result<ExitCode> {
    let state = crate::executions(cli)?.request_cancel(execution_id)?;
    if cli.json {
        print_json(&json::execution(&state), false);
    } else if state.cancel_requested {
        println!("cancel requested: its worker ends the execution");
    } else {
        println!(
            "execution {} is {}",
            state.execution_id,
            state.lifecycle.as_str()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `m3 recover`.
pub fn recover(cli: &Cli) -> Result<ExitCode> {
    let report = crate::executions(cli)?.recover()?;
    if cli.json {
        print_json(
            &serde_json::json!({
                "rounds_failed": report.rounds_failed,
                "executions_failed": report.executions_failed,
                "records_unreadable": report.records_unreadable,
            }),
            false,
        );
    } else {
        println!(
            "failed {} round(s) and {} execution(s) whose worker is gone",
            report.rounds_failed, report.executions_failed
        );
        if report.records_unreadable > 0 {
            println!(
                "{} record(s) could not be read and were left as they are (see `m3 doctor`)",
                report.records_unreadable
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

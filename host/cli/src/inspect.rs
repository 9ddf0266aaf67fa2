//! Reading and steering what is stored: `rounds`, `show`, `executions`, `status`, `events`,
//! `cancel`, `recover`. Round and execution ids may be given by a unique prefix (`ids.rs`).

use crate::human::Look;
use crate::ids::ShortIds;
use crate::{Cli, json, print_json};
use anyhow::{Result, bail};
use comfy_table::{Cell, Table};
use m3::{
    ExecutionState, ExecutionStatus, ManagedInputRecord, ManagedInputStatus, ManagedInputStore,
    RoundFilter,
};
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

fn rounds_table(records: &[ManagedInputRecord], look: &Look) -> Table {
    let ids = ShortIds::new(
        records.iter().map(|r| r.pending.execution_id.as_str()),
        look.wide,
    );
    let mut table = look.table(&[
        "round",
        "execution",
        "operation",
        "index",
        "status",
        "failure",
        "updated",
    ]);
    for r in records {
        let status = r.status.to_string();
        look.add_row(
            &mut table,
            vec![
                Cell::new(ids.round(&r.pending.round_id, &r.pending.execution_id)),
                Cell::new(ids.execution(&r.pending.execution_id)),
                look.text(&format!(
                    "{}:{}",
                    r.pending.server, r.pending.operation_name
                )),
                Cell::new(format!("{}/{}", r.round_index, r.round_limit)),
                look.word(&status),
                look.cell_like(
                    r.failure
                        .as_ref()
                        .map(|f| f.code.as_str().to_string())
                        .unwrap_or_default(),
                    "failed",
                ),
                Cell::new(look.time(r.timestamps.updated_at)),
            ],
        );
    }
    look.keep_whole(&mut table, &[0, 1]);
    table
}

fn list_rounds(
    executions: &m3::Executions,
    status: Option<&str>,
    execution: Option<&str>,
) -> Result<Vec<ManagedInputRecord>> {
    let filter = RoundFilter {
        execution_id: execution.map(str::to_string),
        status: status.map(status_from).transpose()?,
        limit: None,
    };
    crate::readable_rounds(executions.store(), &filter)
}

/// `m3 rounds`.
pub fn rounds(cli: &Cli, status: Option<&str>, execution: Option<&str>) -> Result<ExitCode> {
    let executions = crate::recovered_executions(cli)?;
    let execution = crate::ids::execution_filter(&executions, execution)?;
    let records = list_rounds(&executions, status, execution.as_deref())?;
    if cli.json {
        let redacted: Vec<Value> = records
            .iter()
            .map(|r| redacted_record(&executions, r))
            .collect::<Result<_>>()?;
        print_json(&Value::Array(redacted), false);
    } else if records.is_empty() {
        println!("no rounds");
    } else {
        println!("{}", rounds_table(&records, &Look::new(cli)));
    }
    Ok(ExitCode::SUCCESS)
}

/// A record with its answers replaced by the redacted projection (listings never show answers).
fn redacted_record(executions: &m3::Executions, record: &ManagedInputRecord) -> Result<Value> {
    let projection = executions
        .store()
        .redacted_responses(&record.pending.round_id)?
        .unwrap_or_default();
    Ok(json::record(record, Some(&projection)))
}

/// The round `given` (an id or unique prefix) as `m3 show --json` prints it: with its answers,
/// or (`redacted`) their redacted projection.
pub fn round_value(executions: &m3::Executions, given: &str, redacted: bool) -> Result<Value> {
    let round_id = &crate::ids::round(executions, given)?;
    let store = executions.store();
    // The component's typed error (`round_not_found`) for a round that does not exist.
    let projection = store.redacted_responses(round_id)?.unwrap_or_default();
    let Some(record) = store.get_round(round_id)? else {
        bail!("ManagedInputStateError: the round {round_id} disappeared while it was read");
    };
    Ok(if redacted {
        json::record(&record, Some(&projection))
    } else {
        json::record(&record, None)
    })
}

/// `m3 show`.
pub fn show(cli: &Cli, round_id: &str, redacted: bool) -> Result<ExitCode> {
    let value = round_value(&*crate::executions(cli)?, round_id, redacted)?;
    if cli.json {
        print_json(&value, false);
    } else {
        println!("{}", crate::json_text(&value, false));
    }
    Ok(ExitCode::SUCCESS)
}

fn executions_table(states: &[ExecutionState], look: &Look) -> Table {
    let ids = ShortIds::new(states.iter().map(|s| s.execution_id.as_str()), look.wide);
    let mut table = look.table(&["execution", "lifecycle", "outcome", "failure", "created"]);
    for s in states {
        let failure = s.outcome.as_ref().and_then(|o| o.failure.as_ref());
        let outcome = s
            .outcome
            .as_ref()
            .map(|o| o.kind.as_str().to_string())
            .unwrap_or_default();
        look.add_row(
            &mut table,
            vec![
                Cell::new(ids.execution(&s.execution_id)),
                look.word(s.lifecycle.as_str()),
                look.word(&outcome),
                look.cell_like(
                    failure
                        .map(|f| match f.code {
                            Some(code) => format!("{} ({code})", f.kind.as_str()),
                            None => f.kind.as_str().to_string(),
                        })
                        .unwrap_or_default(),
                    "failed",
                ),
                Cell::new(look.time(s.created_at)),
            ],
        );
    }
    look.keep_whole(&mut table, &[0, 1]);
    table
}

/// `m3 executions`.
pub fn executions(cli: &Cli) -> Result<ExitCode> {
    let states: Vec<ExecutionState> =
        crate::readable_executions(&*crate::recovered_executions(cli)?)?;
    if cli.json {
        print_json(
            &Value::Array(states.iter().map(json::execution).collect()),
            false,
        );
    } else if states.is_empty() {
        println!("no executions");
    } else {
        println!("{}", executions_table(&states, &Look::new(cli)));
    }
    Ok(ExitCode::SUCCESS)
}

/// `m3 status`: the execution, its rounds and its harness's events; with `watch`, again at
/// every change until it finishes (or Ctrl-C).
pub fn status(cli: &Cli, execution_id: &str, watch: bool) -> Result<ExitCode> {
    let executions = crate::recovered_executions(cli)?;
    let execution_id = &crate::ids::execution(&executions, execution_id)?;
    if !watch {
        println!(
            "{}",
            status_text(cli, &executions, execution_id, false)?.text
        );
        return Ok(ExitCode::SUCCESS);
    }
    crate::watch::watch(cli, &executions, || {
        status_text(cli, &executions, execution_id, true)
    })
}

/// What `m3 status` prints, and the data it shows (for `--watch`).
fn status_text(
    cli: &Cli,
    executions: &m3::Executions,
    execution_id: &str,
    line: bool,
) -> Result<crate::watch::Snapshot> {
    let (value, state, diagnostics, records) = status_parts(executions, execution_id)?;
    let text = if cli.json {
        crate::json_text(&value, line)
    } else {
        let look = Look::new(cli);
        let mut text = executions_table(std::slice::from_ref(&state), &look).to_string();
        if let Some(failure) = state.outcome.as_ref().and_then(|o| o.failure.as_ref()) {
            text.push_str(&format!(
                "\nfailure: {}",
                crate::escaped::line(&failure.message)
            ));
        }
        if !records.is_empty() {
            text.push_str(&format!("\n{}", rounds_table(&records, &look)));
        }
        text.push_str(&events_text(&diagnostics, &look));
        text
    };
    Ok(crate::watch::Snapshot {
        key: value.to_string(),
        text,
        done: state.lifecycle == ExecutionStatus::Finished,
    })
}

/// The execution `execution_id` (a full id) as `m3 status --json` prints it.
pub fn status_value(executions: &m3::Executions, execution_id: &str) -> Result<Value> {
    Ok(status_parts(executions, execution_id)?.0)
}

/// `m3 status --json`'s value and what it was made of.
fn status_parts(
    executions: &m3::Executions,
    execution_id: &str,
) -> Result<(
    Value,
    ExecutionState,
    m3::ExecutionDiagnostics,
    Vec<ManagedInputRecord>,
)> {
    let state = executions.snapshot(execution_id)?;
    let diagnostics = executions.diagnostics(execution_id)?;
    let records = list_rounds(executions, None, Some(execution_id))?;
    let mut value = json::execution(&state);
    value["events"] = serde_json::to_value(&diagnostics.events)?;
    value["events_dropped"] = diagnostics.events_dropped.into();
    value["stderr_tail"] = serde_json::json!(diagnostics.stderr_tail);
    let rounds: Vec<Value> = records
        .iter()
        .map(|r| redacted_record(executions, r))
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
    Ok((value, state, diagnostics, records))
}

/// The execution `execution_id` (a full id)'s events as `m3 events --json` prints them.
pub fn events_value(executions: &m3::Executions, execution_id: &str) -> Result<Value> {
    let diagnostics = executions.diagnostics(execution_id)?;
    let state = executions.snapshot(execution_id)?;
    let records = list_rounds(executions, None, Some(execution_id))?;
    let happenings = crate::history::history(&state, &records, &diagnostics);
    let mut value = serde_json::to_value(&diagnostics)?;
    value["history"] = happenings.iter().map(|h| h.to_json()).collect();
    Ok(value)
}

/// `m3 events`: what happened to the execution and its rounds (the store's history) merged
/// with what its harness did or reported, and its stderr tail.
pub fn events(cli: &Cli, execution_id: &str) -> Result<ExitCode> {
    let executions = crate::executions(cli)?;
    let execution_id = &crate::ids::execution(&executions, execution_id)?;
    if cli.json {
        print_json(&events_value(&executions, execution_id)?, false);
    } else {
        let diagnostics = executions.diagnostics(execution_id)?;
        let state = executions.snapshot(execution_id)?;
        let records = list_rounds(&executions, None, Some(execution_id))?;
        let happenings = crate::history::history(&state, &records, &diagnostics);
        crate::history::print(&happenings, &state, &Look::new(cli));
        let mut rest = diagnostics.clone();
        rest.events.clear();
        let text = events_text(&rest, &Look::new(cli));
        if !text.is_empty() {
            println!("{}", text.trim_start_matches('\n'));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The harness's events (one line each, after a newline) and its stderr tail.
/// Each line fits the width (cut with `…`) unless `--wide`.
fn events_text(diagnostics: &m3::ExecutionDiagnostics, look: &Look) -> String {
    let mut text = String::new();
    for event in &diagnostics.events {
        let line = format!(
            "{}  {:<10}  {}",
            event.at.format("%Y-%m-%dT%H:%M:%SZ"),
            event.kind,
            event.message
        );
        text.push('\n');
        text.push_str(&look.fit(&line));
    }
    if diagnostics.events_dropped > 0 {
        text.push_str(&format!(
            "\n({} more events were not kept)",
            diagnostics.events_dropped
        ));
    }
    if let Some(tail) = &diagnostics.stderr_tail {
        text.push_str("\nharness stderr (last lines):");
        for line in tail.lines() {
            text.push('\n');
            text.push_str(&look.fit(&format!("  {line}")));
        }
    }
    text
}

/// `m3 cancel`.
pub fn cancel(cli: &Cli, execution_id: &str) -> Result<ExitCode> {
    let executions = crate::executions(cli)?;
    let execution_id = crate::ids::execution(&executions, execution_id)?;
    let state = executions.request_cancel(&execution_id)?;
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

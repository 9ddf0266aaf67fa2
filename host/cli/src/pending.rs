//! `m3 pending`: the pending rounds, as a table or a JSON array; `--wait` blocks until one exists.

use crate::{Cli, json, print_json};
use anyhow::{Result, bail};
use comfy_table::Table;
use m3::{ManagedInputStatus, PendingElicitationRound, RoundFilter};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How often `--wait` looks.
const POLL: Duration = Duration::from_millis(25);

/// The pending rounds (of one execution, if given).
pub fn list(cli: &Cli, execution: Option<&str>) -> Result<Vec<PendingElicitationRound>> {
    let executions = crate::recovered_executions(cli)?;
    let filter = RoundFilter {
        execution_id: execution.map(str::to_string),
        status: Some(ManagedInputStatus::Pending),
        limit: None,
    };
    Ok(crate::readable_rounds(executions.store(), &filter)?
        .into_iter()
        .map(|r| r.pending)
        .collect())
}

/// A table of pending rounds for people.
pub fn table(rounds: &[PendingElicitationRound]) -> Table {
    let mut table = Table::new();
    table.set_header([
        "round",
        "execution",
        "operation",
        "requests",
        "created",
        "deadline",
    ]);
    for r in rounds {
        table.add_row([
            r.round_id.clone(),
            r.execution_id.clone(),
            format!("{}:{}", r.server, r.operation_name),
            r.requests.keys().cloned().collect::<Vec<_>>().join(", "),
            json::time(r.created_at)
                .as_str()
                .unwrap_or_default()
                .to_string(),
            r.deadline
                .map(|d| json::time(d).as_str().unwrap_or_default().to_string())
                .unwrap_or_else(|| "none".into()),
        ]);
    }
    table
}

/// `m3 pending`.
pub fn pending(cli: &Cli, execution: Option<&str>, wait: Option<f64>) -> Result<ExitCode> {
    let until = match wait {
        Some(secs) => {
            let wait = crate::seconds::seconds("--wait", secs, crate::seconds::WAIT)
                .map_err(crate::invalid_input)?;
            Some(Instant::now() + wait)
        }
        None => None,
    };
    // Waiting, on a terminal, shows a spinner; the database may not exist yet when the wait
    // starts (the worker's `m3 run` creates it), so the wait covers its creation too.
    let mut spinner: Option<indicatif::ProgressBar> = None;
    let rounds = loop {
        let waiting = until.is_some_and(|until| Instant::now() < until);
        let rounds = if waiting && !crate::database_exists(cli) {
            Vec::new()
        } else {
            list(cli, execution)?
        };
        match until {
            Some(until) if rounds.is_empty() => {
                if Instant::now() >= until {
                    if let Some(spinner) = spinner.take() {
                        spinner.finish_and_clear();
                    }
                    bail!(
                        "OperationTimeout: no pending round appeared within {} s",
                        wait.unwrap_or_default()
                    );
                }
                if spinner.is_none() {
                    spinner = crate::engine_start::spinner(cli, "waiting for a pending round");
                }
                std::thread::sleep(POLL);
            }
            _ => break rounds,
        }
    };
    if let Some(spinner) = spinner {
        spinner.finish_and_clear();
    }
    if cli.json {
        print_json(
            &serde_json::Value::Array(rounds.iter().map(json::pending_round).collect()),
            false,
        );
    } else if rounds.is_empty() {
        println!("no pending rounds");
    } else {
        println!("{}", table(&rounds));
    }
    Ok(ExitCode::SUCCESS)
}

//! `m3 pending`: the pending rounds, as a table or a JSON array; `--wait` blocks until one
//! exists, `--watch` shows them again whenever the database changes.

use crate::human::Look;
use crate::ids::ShortIds;
use crate::{Cli, json};
use anyhow::{Result, bail};
use comfy_table::{Cell, Table};
use m3::{ManagedInputStatus, PendingElicitationRound, RoundFilter};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How often `--wait` looks.
const POLL: Duration = Duration::from_millis(25);

/// The pending rounds (of one execution, if given: a full id).
pub fn list(cli: &Cli, execution: Option<&str>) -> Result<Vec<PendingElicitationRound>> {
    list_in(&*crate::recovered_executions(cli)?, execution)
}

/// The pending rounds in `executions` (of one execution, if given: a full id).
pub fn list_in(
    executions: &m3::Executions,
    execution: Option<&str>,
) -> Result<Vec<PendingElicitationRound>> {
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
pub fn table(rounds: &[PendingElicitationRound], look: &Look) -> Table {
    let ids = ShortIds::new(rounds.iter().map(|r| r.execution_id.as_str()), look.wide);
    let mut table = look.table(&[
        "round",
        "execution",
        "operation",
        "requests",
        "created",
        "deadline",
    ]);
    for r in rounds {
        look.add_row(
            &mut table,
            vec![
                look.cell_like(ids.round(&r.round_id, &r.execution_id), "pending"),
                Cell::new(ids.execution(&r.execution_id)),
                look.text(&format!("{}:{}", r.server, r.operation_name)),
                look.text(&r.requests.keys().cloned().collect::<Vec<_>>().join(", ")),
                Cell::new(look.time(r.created_at)),
                Cell::new(
                    r.deadline
                        .map(|d| look.time(d))
                        .unwrap_or_else(|| "none".into()),
                ),
            ],
        );
    }
    look.keep_whole(&mut table, &[0, 1]);
    table
}

/// What `m3 pending` prints for `rounds`: a JSON document (or line) or a table.
fn render(cli: &Cli, rounds: &[PendingElicitationRound], line: bool) -> String {
    if cli.json {
        let value = serde_json::Value::Array(rounds.iter().map(json::pending_round).collect());
        crate::json_text(&value, line)
    } else if rounds.is_empty() {
        "no pending rounds".into()
    } else {
        table(rounds, &Look::new(cli)).to_string()
    }
}

/// `m3 pending`.
pub fn pending(
    cli: &Cli,
    execution: Option<&str>,
    wait: Option<f64>,
    watch: bool,
) -> Result<ExitCode> {
    let until = match wait {
        Some(secs) => {
            let wait = crate::seconds::seconds("--wait", secs, crate::seconds::WAIT)
                .map_err(crate::invalid_input)?;
            Some(Instant::now() + wait)
        }
        None => None,
    };
    let execution = match execution {
        Some(given) => Some(crate::ids::execution(&*crate::executions(cli)?, given)?),
        None => None,
    };
    let execution = execution.as_deref();
    if watch {
        let executions = crate::executions(cli)?;
        return crate::watch::watch(cli, &executions, || {
            let rounds = list(cli, execution)?;
            let key = serde_json::Value::Array(rounds.iter().map(json::pending_round).collect());
            Ok(crate::watch::Snapshot {
                key: key.to_string(),
                text: render(cli, &rounds, true),
                done: false,
            })
        });
    }
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
    println!("{}", render(cli, &rounds, false));
    Ok(ExitCode::SUCCESS)
}

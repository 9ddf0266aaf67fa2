//! Recovery: every harness here is non-resumable (a pending native request dies with its
//! worker), so a round whose worker's lease expired can never be delivered. Recovery fails such
//! rounds with `recovery-unavailable` and finishes their executions failed. A round or execution
//! whose worker still renews its lease is never touched, and an unowned round (made directly
//! through the store API, waiting to be claimed) has no worker to lose. A queued execution is
//! held by its submitter for one lease; if no worker claimed it by then, its submitter died with
//! the environment its server needed (never stored), so it is finished failed as well. A worker
//! whose instance stopped is recovered at once by its host (`abandon`), without waiting for its
//! lease to expire.

use super::execution;
use crate::errors::Result;
use crate::exports::m3::managed_input::execution_rules::ExecutionOperation;
use crate::exports::m3::managed_input::runtime::RecoveryReport;
use crate::m3::managed_input::store::{RoundFilter, TransactionMode};
use crate::m3::managed_input::types::{Cursor, ErrorCode, ExecutionStatus, ManagedInputError};
use crate::store_protocol::{self, begin, store_error};
use crate::time;

/// Rows per page while recovering.
const PAGE: u32 = 128;

const GONE: &str = "the worker that owned this round is gone; its request died with it";

/// `abandon`: recovery of one execution whose worker's instance stopped, while its lease still
/// runs: its open rounds fail `recovery-unavailable` (the worker presents its own lease, giving
/// up early) and the execution finishes failed, in one transaction: `round-failed` when a round
/// failed so, else `engine-error` (the instance stopped; no round was involved).
pub fn abandon(
    execution_id: &str,
    owner_id: &str,
    reason: &str,
) -> Result<crate::exports::m3::managed_input::runtime::ExecutionState> {
    let reason = crate::errors::bounded(reason);
    give_up(
        execution_id,
        owner_id,
        true,
        &format!("the worker's component instance stopped ({reason}); its request died with it"),
        &format!("the worker's component instance stopped ({reason})"),
    )
}

/// A worker's own recovery of the execution it held when it can no longer finish it (its lease
/// expired before it could record the outcome, and nobody has recovered it yet): what recovery
/// would do once it looked, done at once.
pub fn give_up_expired(
    execution_id: &str,
    owner_id: &str,
) -> Result<crate::exports::m3::managed_input::runtime::ExecutionState> {
    give_up(
        execution_id,
        owner_id,
        false,
        "the worker's lease expired before it finished; its request died with it",
        "the worker's lease expired before it could record the outcome",
    )
}

fn give_up(
    execution_id: &str,
    owner_id: &str,
    stopped: bool,
    round_message: &str,
    execution_message: &str,
) -> Result<crate::exports::m3::managed_input::runtime::ExecutionState> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let give_up = ExecutionOperation::GiveUp(owner_id.to_string());
    let Some((state, _)) = execution::abandon_in(
        &tx,
        execution_id,
        give_up,
        stopped,
        execution_message,
        round_message,
        now,
    )?
    else {
        // `decide` refuses a give-up of what the worker does not hold, so this is unreachable
        // in practice; it is still not a success.
        return Err(crate::errors::recovery(
            crate::m3::managed_input::types::ErrorCode::RecoveryUnavailable,
            format!("execution {execution_id} is not held by this worker"),
        ));
    };
    tx.commit().map_err(store_error)?;
    Ok(state)
}

/// Whether a hold expiring at `lease_expires_at` has expired at `now`.
fn expired(
    lease_expires_at: Option<&crate::m3::managed_input::types::Timestamp>,
    now: &crate::m3::managed_input::types::Timestamp,
) -> bool {
    lease_expires_at.is_some_and(|at| time::at_or_after(now, at))
}

/// `recover`.
pub fn recover() -> Result<RecoveryReport> {
    let mut report = RecoveryReport {
        rounds_failed: 0,
        executions_failed: 0,
        records_unreadable: 0,
        left_behind: Vec::new(),
    };
    for status in execution::OPEN_STATUSES {
        // Page by page: every page is a host call, so no single stretch of work outgrows the
        // compute budget, and memory holds one page. Rows are decoded one by one: a record that
        // cannot be read is counted and left as it is, never a reason to recover nothing.
        let mut after = None;
        loop {
            let rows = {
                let tx = begin(TransactionMode::Read)?;
                tx.list(&RoundFilter {
                    execution_id: None,
                    status: Some(status),
                    limit: Some(PAGE),
                    after: after.take(),
                })
                .map_err(store_error)?
            };
            let full = rows.len() == PAGE as usize;
            for row in &rows {
                let Ok(round) = crate::record::from_row(row) else {
                    report.records_unreadable += 1;
                    continue;
                };
                if !expired(round.lease.as_ref().map(|l| &l.expires_at), &time::now()) {
                    continue;
                }
                // Re-checked inside its own transaction: a renewal (or any other end) since the
                // list wins, and is no failure of recovery. A store that could not make the
                // write is one: it is returned, never dropped.
                match store_protocol::fail_recovery(&round.pending.round_id, None, GONE.into()) {
                    Ok(_) => report.rounds_failed += 1,
                    Err(ManagedInputError::Storage(detail))
                        if detail.code != ErrorCode::CorruptRecord =>
                    {
                        return Err(ManagedInputError::Storage(detail));
                    }
                    Err(_) => {}
                }
            }
            match rows.last() {
                Some(last) if full => {
                    after = Some(Cursor {
                        created_at: last.created_at,
                        id: last.round_id.clone(),
                    })
                }
                _ => break,
            }
        }
    }
    // Read first: a recovery that finds nothing expired (the common case, run before every
    // listing) takes no write lock, so it never waits behind a writer.
    let mut abandoned = Vec::new();
    let read = begin(TransactionMode::Read)?;
    let now = time::now();
    for status in [ExecutionStatus::Running, ExecutionStatus::Queued] {
        let mut after: Option<Cursor> = None;
        loop {
            let page = read
                .list_executions(Some(status), Some(PAGE), after.as_ref())
                .map_err(store_error)?;
            let full = page.len() == PAGE as usize;
            after = page.last().map(|r| Cursor {
                created_at: r.created_at,
                id: r.execution_id.clone(),
            });
            // Only the expired ones are kept (their rows are small).
            abandoned.extend(
                page.into_iter()
                    .filter(|r| expired(r.lease_expires_at.as_ref(), &now)),
            );
            if !full {
                break;
            }
        }
    }
    drop(read);
    if abandoned.is_empty() {
        return Ok(report);
    }
    // In execution order: on PostgreSQL the write below locks each execution it decides again,
    // and every transaction that locks several (this one, a host's batched renewals) takes them
    // in this one order, so none waits for another in a circle.
    abandoned.sort_by(|a, b| a.execution_id.cmp(&b.execution_id));
    // Each one decided again inside the write: a renewal since the read wins.
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    for row in abandoned {
        let message = if row.status == ExecutionStatus::Queued {
            "the process that submitted the execution is gone and no worker started it"
        } else {
            "the execution's worker is gone"
        };
        match execution::abandon_in(
            &tx,
            &row.execution_id,
            ExecutionOperation::Recover,
            false,
            message,
            GONE,
            now,
        ) {
            Ok(Some((_, spawned))) => {
                report.left_behind.extend(spawned);
                report.executions_failed += 1;
            }
            Ok(None) => {}
            Err(ManagedInputError::Storage(detail)) if detail.code == ErrorCode::CorruptRecord => {
                report.records_unreadable += 1;
            }
            Err(e) => return Err(e),
        }
    }
    tx.commit().map_err(store_error)?;
    Ok(report)
}

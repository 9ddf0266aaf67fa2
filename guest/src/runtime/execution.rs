//! Executions as stored rows: submission, snapshots, cancel requests, the worker's claim and
//! lease, and the final outcome. Every change is one write transaction with compare-and-set on
//! the row version.

use crate::errors::Outcome;
use crate::exports::m3::managed_input::execution_rules::ClaimOutcome;
use crate::exports::m3::managed_input::managed_input::ListFilter;
use crate::exports::m3::managed_input::runtime::{
    ExecutionLifecycle, ExecutionOutcome, ExecutionSpec, ExecutionState, OutcomeKind, ToolResult,
};
use crate::m3::managed_input::store::{ExecutionRow, RoundFilter, Transaction, TransactionMode};
use crate::m3::managed_input::types::{
    Cursor, ErrorCode, ExecutionStatus, PendingRound, Status, Timestamp,
};
use crate::store_protocol::{begin, store_error};
use crate::{execution_rules, lease, time};
use serde::{Deserialize, Serialize};

/// What the component keeps in an execution row's document.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecutionDocument {
    /// The submission.
    pub spec: ExecutionSpec,
    /// A cancel was requested.
    pub cancel_requested: bool,
    /// Tool results so far (kept as they arrive, so a crash keeps them).
    pub tool_results: Vec<ToolResult>,
    /// The final outcome, once finished.
    pub outcome: Option<ExecutionOutcome>,
    /// What the worker started (its child's process group, its scratch directory), so that
    /// recovery can end it if the worker dies. Absent in documents of older versions.
    #[serde(default)]
    pub spawned: Option<crate::m3::managed_input::process::Spawned>,
}

/// An execution row read inside a transaction.
#[derive(Debug, Clone)]
pub struct LoadedExecution {
    /// The row as stored.
    pub row: ExecutionRow,
    /// Its document.
    pub document: ExecutionDocument,
}

fn corrupt(execution_id: &str) -> crate::m3::managed_input::types::ManagedInputError {
    crate::errors::storage(
        ErrorCode::CorruptRecord,
        format!("execution {execution_id} has an unreadable document"),
    )
}

/// Reads the execution `execution_id` inside `tx`.
pub fn load(tx: &Transaction, execution_id: &str) -> Outcome<Option<LoadedExecution>> {
    let Some(row) = tx.get_execution(execution_id).map_err(store_error)? else {
        return Ok(None);
    };
    let document = serde_json::from_str(&row.document).map_err(|_| corrupt(execution_id))?;
    Ok(Some(LoadedExecution { row, document }))
}

fn load_existing(tx: &Transaction, execution_id: &str) -> Outcome<LoadedExecution> {
    load(tx, execution_id)?.ok_or_else(|| execution_rules::not_found(execution_id))
}

/// Writes `loaded` back with compare-and-set, `now` as its update time; returns the new row.
pub fn save(
    tx: &Transaction,
    mut loaded: LoadedExecution,
    now: Timestamp,
) -> Outcome<ExecutionRow> {
    let expected = loaded.row.version;
    loaded.row.version += 1;
    loaded.row.updated_at = now;
    loaded.row.document =
        serde_json::to_string(&loaded.document).map_err(|_| corrupt(&loaded.row.execution_id))?;
    if !tx
        .compare_and_set_execution(&loaded.row, expected)
        .map_err(store_error)?
    {
        return Err(crate::errors::conflict(
            ErrorCode::ConcurrentUpdate,
            format!("execution {} changed concurrently", loaded.row.execution_id),
        ));
    }
    Ok(loaded.row)
}

/// Whether a running execution waits for an answer (one of its rounds is pending), read in
/// `tx`.
pub fn waiting_for_input(tx: &Transaction, row: &ExecutionRow) -> Outcome<bool> {
    if row.status != ExecutionStatus::Running {
        return Ok(false);
    }
    let pending = tx
        .list(&RoundFilter {
            execution_id: Some(row.execution_id.clone()),
            status: Some(Status::Pending),
            limit: Some(1),
            after: None,
        })
        .map_err(store_error)?;
    Ok(!pending.is_empty())
}

/// What a caller sees of a row (`waiting`: see [`waiting_for_input`]).
pub fn state_of(row: &ExecutionRow, document: &ExecutionDocument, waiting: bool) -> ExecutionState {
    let lifecycle = match row.status {
        ExecutionStatus::Queued => ExecutionLifecycle::Queued,
        ExecutionStatus::Running if waiting => ExecutionLifecycle::WaitingForInput,
        ExecutionStatus::Running => ExecutionLifecycle::Running,
        ExecutionStatus::Finished => ExecutionLifecycle::Finished,
    };
    ExecutionState {
        execution_id: row.execution_id.clone(),
        lifecycle,
        outcome: document.outcome.clone(),
        cancel_requested: document.cancel_requested && row.status != ExecutionStatus::Finished,
        created_at: row.created_at,
        updated_at: row.updated_at,
    }
}

fn new_execution_id() -> Outcome<String> {
    let mut bytes = [0u8; 16];
    // wasi:random is the one ambient source the sandbox allows.
    getrandom::fill(&mut bytes).map_err(|_| {
        crate::errors::storage(
            ErrorCode::StorageFailure,
            "no randomness for an execution id",
        )
    })?;
    Ok(format!("exec-{}", hex::encode(bytes)))
}

/// Stores a checked submission as a queued execution held by its submitter `owner_id` for one
/// lease: a submitter that dies before its worker claims the execution leaves a lease that
/// expires, and recovery finishes the execution failed.
pub fn insert(spec: ExecutionSpec, owner_id: &str) -> Outcome<ExecutionState> {
    lease::check_ttl(spec.lease_ttl_ms)?;
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let lease_expires_at = time::add_millis(&now, spec.lease_ttl_ms);
    let document = ExecutionDocument {
        spec,
        cancel_requested: false,
        tool_results: Vec::new(),
        outcome: None,
        spawned: None,
    };
    let row = ExecutionRow {
        execution_id: new_execution_id()?,
        status: ExecutionStatus::Queued,
        version: 1,
        owner_id: Some(owner_id.to_string()),
        lease_expires_at: Some(lease_expires_at),
        created_at: now,
        updated_at: now,
        document: serde_json::to_string(&document).map_err(|_| corrupt("new"))?,
    };
    if !tx.insert_execution(&row).map_err(store_error)? {
        return Err(crate::errors::conflict(
            ErrorCode::ConcurrentUpdate,
            "a fresh execution id collided; submit again",
        ));
    }
    tx.commit().map_err(store_error)?;
    Ok(state_of(&row, &document, false))
}

/// `snapshot`.
pub fn snapshot(execution_id: &str) -> Outcome<ExecutionState> {
    let tx = begin(TransactionMode::Read)?;
    let loaded = load_existing(&tx, execution_id)?;
    let waiting = waiting_for_input(&tx, &loaded.row)?;
    Ok(state_of(&loaded.row, &loaded.document, waiting))
}

/// `list-executions`.
pub fn list(
    status: Option<ExecutionStatus>,
    limit: Option<u32>,
    after: Option<Cursor>,
) -> Outcome<Vec<ExecutionState>> {
    let tx = begin(TransactionMode::Read)?;
    let rows = tx
        .list_executions(status, limit, after.as_ref())
        .map_err(store_error)?;
    let mut states = Vec::with_capacity(rows.len());
    for row in rows {
        let document: ExecutionDocument =
            serde_json::from_str(&row.document).map_err(|_| corrupt(&row.execution_id))?;
        let waiting = waiting_for_input(&tx, &row)?;
        states.push(state_of(&row, &document, waiting));
    }
    Ok(states)
}

/// `pending-round`: the single pending round of the execution, or none.
pub fn pending_round(execution_id: &str) -> Outcome<Option<PendingRound>> {
    // Two are enough to tell one from several.
    let pending = crate::store_protocol::list_rounds(ListFilter {
        execution_id: Some(execution_id.to_string()),
        status: Some(Status::Pending),
        limit: Some(2),
        after: None,
    })?;
    execution_rules::pending_round_of(execution_id, &pending)
}

/// `respond`: answers a round of this execution.
pub fn respond(execution_id: &str, round_id: &str, responses: &str, key: &str) -> Outcome<()> {
    if !round_id.is_empty()
        && let Some(record) = crate::store_protocol::get_round(round_id)?
    {
        execution_rules::check_round_of(execution_id, &record)?;
    }
    let record = crate::store_protocol::submit_responses(round_id, responses, key)?;
    // A repeat of a stored answer (same key, same answer) to a round that has since failed is
    // not acknowledged: the answer will never be delivered.
    if record.status == Status::Failed {
        let code = record
            .failure
            .as_ref()
            .map(|f| crate::lifecycle::failure_name(f.code))
            .unwrap_or("failed");
        return Err(crate::errors::state(
            ErrorCode::RoundTerminal,
            format!(
                "round {round_id} ended failed ({code}) before its answers were delivered; they \
                 are stored but will not be delivered"
            ),
        ));
    }
    Ok(())
}

/// The final outcome of a cancelled execution.
pub fn cancelled_outcome(tool_results: Vec<ToolResult>) -> ExecutionOutcome {
    ExecutionOutcome {
        kind: OutcomeKind::Cancelled,
        failure: None,
        tool_results,
        final_message: None,
    }
}

/// `request-cancel`: a queued execution finishes cancelled at once; a running one is marked
/// and its worker carries the cancel out; a finished one is left as it is.
pub fn request_cancel(execution_id: &str) -> Outcome<ExecutionState> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load_existing(&tx, execution_id)?;
    match loaded.row.status {
        ExecutionStatus::Finished => return Ok(state_of(&loaded.row, &loaded.document, false)),
        ExecutionStatus::Queued => {
            loaded.row.status = ExecutionStatus::Finished;
            loaded.document.outcome = Some(cancelled_outcome(Vec::new()));
        }
        ExecutionStatus::Running => loaded.document.cancel_requested = true,
    }
    let document = loaded.document.clone();
    let row = save(&tx, loaded, now)?;
    let waiting = waiting_for_input(&tx, &row)?;
    tx.commit().map_err(store_error)?;
    Ok(state_of(&row, &document, waiting))
}

/// The worker's hold on a running execution.
#[derive(Debug, Clone)]
pub struct ExecutionLease {
    /// The execution.
    pub execution_id: String,
    /// The worker.
    pub owner_id: String,
    /// Lease length.
    pub ttl_ms: u64,
}

/// What claiming found.
pub enum Claim {
    /// The worker now runs it.
    Run(Box<ExecutionDocument>),
    /// It had already finished.
    Finished(ExecutionState),
}

/// Takes a queued execution for `owner_id` (status `running`, leased).
pub fn claim(execution_id: &str, owner_id: &str) -> Outcome<Claim> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let loaded = load(&tx, execution_id)?;
    let outcome = execution_rules::claim(execution_id, loaded.as_ref().map(|l| l.row.status))?;
    let mut loaded = loaded.ok_or_else(|| execution_rules::not_found(execution_id))?;
    if outcome == ClaimOutcome::Finished {
        return Ok(Claim::Finished(state_of(
            &loaded.row,
            &loaded.document,
            false,
        )));
    }
    let ttl = loaded.document.spec.lease_ttl_ms;
    lease::check_ttl(ttl)?;
    loaded.row.status = ExecutionStatus::Running;
    loaded.row.owner_id = Some(owner_id.to_string());
    loaded.row.lease_expires_at = Some(time::add_millis(&now, ttl));
    let document = loaded.document.clone();
    save(&tx, loaded, now)?;
    tx.commit().map_err(store_error)?;
    Ok(Claim::Run(Box::new(document)))
}

fn load_owned(tx: &Transaction, held: &ExecutionLease) -> Outcome<LoadedExecution> {
    let loaded = load_existing(tx, &held.execution_id)?;
    if loaded.row.status != ExecutionStatus::Running
        || loaded.row.owner_id.as_deref() != Some(held.owner_id.as_str())
    {
        return Err(crate::errors::recovery(
            ErrorCode::RecoveryUnavailable,
            format!(
                "execution {} is no longer run by this worker",
                held.execution_id
            ),
        ));
    }
    Ok(loaded)
}

/// Extends the worker's lease; returns whether a cancel was requested.
pub fn renew(held: &ExecutionLease) -> Outcome<bool> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load_owned(&tx, held)?;
    let cancel = loaded.document.cancel_requested;
    loaded.row.lease_expires_at = Some(time::add_millis(&now, held.ttl_ms));
    save(&tx, loaded, now)?;
    tx.commit().map_err(store_error)?;
    Ok(cancel)
}

/// Whether a cancel was requested (a read).
pub fn cancel_requested(execution_id: &str) -> Outcome<bool> {
    let tx = begin(TransactionMode::Read)?;
    Ok(load(&tx, execution_id)?.is_some_and(|l| l.document.cancel_requested))
}

/// What a waiting worker looks at after a wake-up.
pub struct Observed {
    /// A cancel was requested.
    pub cancel_requested: bool,
    /// The round it waits on, if it asked for one and it exists.
    pub round: Option<crate::m3::managed_input::types::ManagedInputRecord>,
}

/// Reads the cancel flag and the round `round_id` in one read transaction.
pub fn observe(execution_id: &str, round_id: Option<&str>) -> Outcome<Observed> {
    let tx = begin(TransactionMode::Read)?;
    let cancel_requested = load(&tx, execution_id)?.is_some_and(|l| l.document.cancel_requested);
    let round = match round_id {
        Some(id) => tx
            .get(id)
            .map_err(store_error)?
            .as_ref()
            .map(crate::record::from_row)
            .transpose()?,
        None => None,
    };
    Ok(Observed {
        cancel_requested,
        round,
    })
}

/// Records what the running execution's worker started.
pub fn record_spawned(
    held: &ExecutionLease,
    spawned: crate::m3::managed_input::process::Spawned,
) -> Outcome<()> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load_owned(&tx, held)?;
    loaded.document.spawned = Some(spawned);
    save(&tx, loaded, now)?;
    tx.commit().map_err(store_error)
}

/// Appends a tool result to the running execution.
pub fn record_tool_result(held: &ExecutionLease, result: ToolResult) -> Outcome<()> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load_owned(&tx, held)?;
    loaded.document.tool_results.push(result);
    save(&tx, loaded, now)?;
    tx.commit().map_err(store_error)
}

/// Finishes the running execution with `outcome` (its tool results are filled in from the
/// row); returns the final state. In the same transaction every round of the execution that
/// this worker still owns and that is not terminal is failed, so no round outlives the worker
/// that could deliver its answer (the session machines end their rounds themselves; this is the
/// net under paths that stop early, such as a failed store write).
pub fn finish(held: &ExecutionLease, mut outcome: ExecutionOutcome) -> Outcome<ExecutionState> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    fail_open_rounds(&tx, held, &outcome, &now)?;
    let mut loaded = load_owned(&tx, held)?;
    outcome.tool_results = std::mem::take(&mut loaded.document.tool_results);
    loaded.document.tool_results = outcome.tool_results.clone();
    loaded.document.outcome = Some(outcome);
    loaded.row.status = ExecutionStatus::Finished;
    loaded.row.lease_expires_at = None;
    let document = loaded.document.clone();
    let row = save(&tx, loaded, now)?;
    tx.commit().map_err(store_error)?;
    Ok(state_of(&row, &document, false))
}

/// The statuses of a round that has not ended.
pub const OPEN_STATUSES: [Status; 4] = [
    Status::Pending,
    Status::ResponseValidated,
    Status::DeliveryStarted,
    Status::Delivered,
];

/// Fails, inside `tx`, every open round of the execution owned by `held`'s worker: with the
/// outcome's own code where the store accepts it, else with `recovery-unavailable` (the worker
/// presents its current lease: it cannot deliver).
fn fail_open_rounds(
    tx: &Transaction,
    held: &ExecutionLease,
    outcome: &ExecutionOutcome,
    now: &Timestamp,
) -> Outcome<()> {
    use crate::exports::m3::managed_input::round_protocol::{
        FailureReport, Operation, RecoveryReport,
    };
    use crate::m3::managed_input::types::FailureCode;
    let (code, why) = match (&outcome.kind, &outcome.failure) {
        (OutcomeKind::Cancelled, _) => (FailureCode::Cancelled, "the execution was cancelled"),
        (OutcomeKind::Failed, Some(failure)) => (
            match failure.code {
                Some(code) if code != FailureCode::RecoveryUnavailable => code,
                _ => FailureCode::ServerError,
            },
            failure.message.as_str(),
        ),
        _ => (
            FailureCode::RequestWithdrawn,
            "the operation ended without the answer",
        ),
    };
    for status in OPEN_STATUSES {
        let rows = tx
            .list(&RoundFilter {
                execution_id: Some(held.execution_id.clone()),
                status: Some(status),
                limit: None,
                after: None,
            })
            .map_err(store_error)?;
        for row in rows {
            let record = crate::record::from_row(&row)?;
            let Some(lease) = record.lease.filter(|l| l.owner_id == held.owner_id) else {
                continue;
            };
            let round_id = &record.pending.round_id;
            let message = format!("the execution ended while this round was open: {why}");
            let failed = crate::store_protocol::apply_in(
                tx,
                round_id,
                Operation::Fail(FailureReport {
                    lease: lease.clone(),
                    code,
                    message: message.clone(),
                }),
                now,
            );
            if failed.is_err() {
                crate::store_protocol::apply_in(
                    tx,
                    round_id,
                    Operation::FailRecovery(RecoveryReport {
                        lease: Some(lease),
                        message,
                    }),
                    now,
                )?;
            }
        }
    }
    Ok(())
}

/// Finishes `loaded` (whose worker is gone) failed, inside `tx`.
pub fn finish_abandoned(
    tx: &Transaction,
    mut loaded: LoadedExecution,
    outcome: ExecutionOutcome,
    now: Timestamp,
) -> Outcome<ExecutionState> {
    let mut outcome = outcome;
    outcome.tool_results = loaded.document.tool_results.clone();
    loaded.document.outcome = Some(outcome);
    loaded.row.status = ExecutionStatus::Finished;
    loaded.row.lease_expires_at = None;
    let document = loaded.document.clone();
    let row = save(tx, loaded, now)?;
    Ok(state_of(&row, &document, false))
}

pub use crate::execution_rules::check_execution_id;

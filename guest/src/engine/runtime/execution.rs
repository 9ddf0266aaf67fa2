//! Executions as stored rows: submission, snapshots, cancel requests, the worker's claim and
//! lease, and the final outcome. Every change is one write transaction with compare-and-set on
//! the row version.

use crate::errors::Result;
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
use crate::{execution_rules, lease, stored, time};

/// What the component keeps about an execution, in the WIT types the runtime works with. It is
/// stored as a `stored::execution::ExecutionDocument` (see [`load`] and [`save`]).
#[derive(Debug, Clone)]
pub struct ExecutionData {
    /// The submission.
    pub spec: ExecutionSpec,
    /// A cancel was requested.
    pub cancel_requested: bool,
    /// Tool results so far (kept as they arrive, so a crash keeps them).
    pub tool_results: Vec<ToolResult>,
    /// The final outcome, once finished.
    pub outcome: Option<ExecutionOutcome>,
    /// What the worker started (its child's process group, its scratch directory), so that
    /// recovery can end it if the worker dies.
    pub spawned: Option<crate::m3::managed_input::process::Spawned>,
    /// The token of the current lease (owner and expiry are the row's).
    pub lease_token: Option<String>,
}

impl ExecutionData {
    fn encode(&self, execution_id: &str) -> Result<String> {
        let document = stored::execution::ExecutionDocument {
            format: stored::FORMAT,
            spec: (&self.spec).into(),
            cancel_requested: self.cancel_requested,
            tool_results: self.tool_results.iter().map(Into::into).collect(),
            outcome: self.outcome.as_ref().map(Into::into),
            spawned: self.spawned.as_ref().map(Into::into),
            lease_token: self.lease_token.clone(),
        };
        stored::encode(&document).map_err(|e| corrupt(execution_id, &e))
    }

    fn decode(text: &str, execution_id: &str) -> Result<Self> {
        let document: stored::execution::ExecutionDocument =
            stored::decode(text).map_err(|e| corrupt(execution_id, &e))?;
        Ok(ExecutionData {
            spec: document.spec.into(),
            cancel_requested: document.cancel_requested,
            tool_results: document.tool_results.into_iter().map(Into::into).collect(),
            outcome: document.outcome.map(Into::into),
            spawned: document.spawned.map(Into::into),
            lease_token: document.lease_token,
        })
    }
}

/// An execution row read inside a transaction.
#[derive(Debug, Clone)]
pub struct LoadedExecution {
    /// The row as stored.
    pub row: ExecutionRow,
    /// Its document, decoded.
    pub data: ExecutionData,
}

fn corrupt(
    execution_id: &str,
    unreadable: &stored::Unreadable,
) -> crate::m3::managed_input::types::ManagedInputError {
    crate::errors::storage(
        ErrorCode::CorruptRecord,
        unreadable.describe(&format!("execution {execution_id}")),
    )
}

/// Reads the execution `execution_id` inside `tx`.
pub fn load(tx: &Transaction, execution_id: &str) -> Result<Option<LoadedExecution>> {
    let Some(row) = tx.get_execution(execution_id).map_err(store_error)? else {
        return Ok(None);
    };
    let data = ExecutionData::decode(&row.document, execution_id)?;
    Ok(Some(LoadedExecution { row, data }))
}

fn load_existing(tx: &Transaction, execution_id: &str) -> Result<LoadedExecution> {
    load(tx, execution_id)?.ok_or_else(|| execution_rules::not_found(execution_id))
}

/// Writes `loaded` back with compare-and-set, `now` as its update time; returns the new row.
pub fn save(tx: &Transaction, mut loaded: LoadedExecution, now: Timestamp) -> Result<ExecutionRow> {
    let expected = loaded.row.version;
    loaded.row.version += 1;
    loaded.row.updated_at = now;
    loaded.row.document = loaded.data.encode(&loaded.row.execution_id)?;
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
pub fn waiting_for_input(tx: &Transaction, row: &ExecutionRow) -> Result<bool> {
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
pub fn state_of(row: &ExecutionRow, data: &ExecutionData, waiting: bool) -> ExecutionState {
    let lifecycle = match row.status {
        ExecutionStatus::Queued => ExecutionLifecycle::Queued,
        ExecutionStatus::Running if waiting => ExecutionLifecycle::WaitingForInput,
        ExecutionStatus::Running => ExecutionLifecycle::Running,
        ExecutionStatus::Finished => ExecutionLifecycle::Finished,
    };
    ExecutionState {
        execution_id: row.execution_id.clone(),
        lifecycle,
        outcome: data.outcome.clone(),
        cancel_requested: data.cancel_requested && row.status != ExecutionStatus::Finished,
        created_at: row.created_at,
        updated_at: row.updated_at,
    }
}

fn new_execution_id() -> Result<String> {
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
pub fn insert(spec: ExecutionSpec, owner_id: &str) -> Result<ExecutionState> {
    lease::check_ttl(spec.lease_ttl_ms)?;
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let execution_id = new_execution_id()?;
    // The submitter's hold: its owner and expiry are what recovery reads; the token is never
    // presented (the worker that claims the execution gets a lease of its own).
    let hold = lease::grant(owner_id, spec.lease_ttl_ms, &now)?;
    let data = ExecutionData {
        spec,
        cancel_requested: false,
        tool_results: Vec::new(),
        outcome: None,
        spawned: None,
        lease_token: Some(hold.lease_token),
    };
    let row = ExecutionRow {
        document: data.encode(&execution_id)?,
        execution_id,
        status: ExecutionStatus::Queued,
        version: 1,
        owner_id: Some(hold.owner_id),
        lease_expires_at: Some(hold.expires_at),
        created_at: now,
        updated_at: now,
    };
    if !tx.insert_execution(&row).map_err(store_error)? {
        return Err(crate::errors::conflict(
            ErrorCode::ConcurrentUpdate,
            "a fresh execution id collided; submit again",
        ));
    }
    tx.commit().map_err(store_error)?;
    Ok(state_of(&row, &data, false))
}

/// `snapshot`.
pub fn snapshot(execution_id: &str) -> Result<ExecutionState> {
    let tx = begin(TransactionMode::Read)?;
    let loaded = load_existing(&tx, execution_id)?;
    let waiting = waiting_for_input(&tx, &loaded.row)?;
    Ok(state_of(&loaded.row, &loaded.data, waiting))
}

/// `list-executions`.
pub fn list(
    status: Option<ExecutionStatus>,
    limit: Option<u32>,
    after: Option<Cursor>,
) -> Result<Vec<ExecutionState>> {
    let tx = begin(TransactionMode::Read)?;
    let rows = tx
        .list_executions(status, limit, after.as_ref())
        .map_err(store_error)?;
    let mut states = Vec::with_capacity(rows.len());
    for row in rows {
        let data = ExecutionData::decode(&row.document, &row.execution_id)?;
        let waiting = waiting_for_input(&tx, &row)?;
        states.push(state_of(&row, &data, waiting));
    }
    Ok(states)
}

/// `pending-round`: the single pending round of the execution, or none.
pub fn pending_round(execution_id: &str) -> Result<Option<PendingRound>> {
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
pub fn respond(execution_id: &str, round_id: &str, responses: &str, key: &str) -> Result<()> {
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
pub fn request_cancel(execution_id: &str) -> Result<ExecutionState> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load_existing(&tx, execution_id)?;
    match loaded.row.status {
        ExecutionStatus::Finished => return Ok(state_of(&loaded.row, &loaded.data, false)),
        ExecutionStatus::Queued => {
            loaded.row.status = ExecutionStatus::Finished;
            loaded.data.outcome = Some(cancelled_outcome(Vec::new()));
        }
        ExecutionStatus::Running => loaded.data.cancel_requested = true,
    }
    let data = loaded.data.clone();
    let row = save(&tx, loaded, now)?;
    let waiting = waiting_for_input(&tx, &row)?;
    tx.commit().map_err(store_error)?;
    Ok(state_of(&row, &data, waiting))
}

/// The worker's hold on a running execution: the same lease rules as a round's
/// (`lease::authorize`): owner and token must match, and it must not have expired.
#[derive(Debug, Clone)]
pub struct ExecutionLease {
    /// The execution.
    pub execution_id: String,
    /// The lease the claim granted (renewals move its expiry).
    pub lease: crate::m3::managed_input::types::Lease,
    /// Lease length.
    pub ttl_ms: u64,
}

/// What claiming found.
pub enum Claim {
    /// The worker now runs it, under this lease.
    Run(Box<ExecutionData>, ExecutionLease),
    /// It had already finished.
    Finished(ExecutionState),
}

/// Takes a queued execution for `owner_id` (status `running`, with a fresh lease).
pub fn claim(execution_id: &str, owner_id: &str) -> Result<Claim> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let loaded = load(&tx, execution_id)?;
    let outcome = execution_rules::claim(execution_id, loaded.as_ref().map(|l| l.row.status))?;
    let mut loaded = loaded.ok_or_else(|| execution_rules::not_found(execution_id))?;
    if outcome == ClaimOutcome::Finished {
        return Ok(Claim::Finished(state_of(&loaded.row, &loaded.data, false)));
    }
    let ttl = loaded.data.spec.lease_ttl_ms;
    let granted = lease::grant(owner_id, ttl, &now)?;
    loaded.row.status = ExecutionStatus::Running;
    loaded.row.owner_id = Some(granted.owner_id.clone());
    loaded.row.lease_expires_at = Some(granted.expires_at);
    loaded.data.lease_token = Some(granted.lease_token.clone());
    let data = loaded.data.clone();
    save(&tx, loaded, now)?;
    tx.commit().map_err(store_error)?;
    let held = ExecutionLease {
        execution_id: execution_id.to_string(),
        lease: granted,
        ttl_ms: ttl,
    };
    Ok(Claim::Run(Box::new(data), held))
}

/// The lease stored on a running execution's row, if it has one.
fn stored_lease(loaded: &LoadedExecution) -> Option<crate::m3::managed_input::types::Lease> {
    match (
        &loaded.row.owner_id,
        &loaded.data.lease_token,
        loaded.row.lease_expires_at,
    ) {
        (Some(owner_id), Some(token), Some(expires_at))
            if loaded.row.status == ExecutionStatus::Running =>
        {
            Some(crate::m3::managed_input::types::Lease {
                owner_id: owner_id.clone(),
                lease_token: token.clone(),
                expires_at,
            })
        }
        _ => None,
    }
}

/// Loads the execution `held` names, accepting it only from the current, live lease holder.
fn load_owned(tx: &Transaction, held: &ExecutionLease, now: &Timestamp) -> Result<LoadedExecution> {
    let loaded = load_existing(tx, &held.execution_id)?;
    lease::authorize_held(
        &format!("execution {}", held.execution_id),
        stored_lease(&loaded).as_ref(),
        &held.lease,
        now,
    )?;
    Ok(loaded)
}

/// Extends the worker's lease (refused once it has expired, like a round's); returns whether a
/// cancel was requested.
pub fn renew(held: &mut ExecutionLease) -> Result<bool> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load_owned(&tx, held, &now)?;
    let cancel = loaded.data.cancel_requested;
    let expires_at = time::add_millis(&now, held.ttl_ms);
    loaded.row.lease_expires_at = Some(expires_at);
    save(&tx, loaded, now)?;
    tx.commit().map_err(store_error)?;
    held.lease.expires_at = expires_at;
    Ok(cancel)
}

/// Whether a cancel was requested (a read).
pub fn cancel_requested(execution_id: &str) -> Result<bool> {
    let tx = begin(TransactionMode::Read)?;
    Ok(load(&tx, execution_id)?.is_some_and(|l| l.data.cancel_requested))
}

/// What a waiting worker looks at after a wake-up.
pub struct Observed {
    /// A cancel was requested.
    pub cancel_requested: bool,
    /// The round it waits on, if it asked for one and it exists.
    pub round: Option<crate::m3::managed_input::types::ManagedInputRecord>,
}

/// Reads the cancel flag and the round `round_id` in one read transaction.
pub fn observe(execution_id: &str, round_id: Option<&str>) -> Result<Observed> {
    let tx = begin(TransactionMode::Read)?;
    let cancel_requested = load(&tx, execution_id)?.is_some_and(|l| l.data.cancel_requested);
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
) -> Result<()> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load_owned(&tx, held, &now)?;
    loaded.data.spawned = Some(spawned);
    save(&tx, loaded, now)?;
    tx.commit().map_err(store_error)
}

/// Appends a tool result to the running execution.
pub fn record_tool_result(held: &ExecutionLease, result: ToolResult) -> Result<()> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load_owned(&tx, held, &now)?;
    loaded.data.tool_results.push(result);
    save(&tx, loaded, now)?;
    tx.commit().map_err(store_error)
}

/// Finishes the running execution with `outcome` (its tool results are filled in from the
/// row); returns the final state. In the same transaction every round of the execution that
/// this worker still owns and that is not terminal is failed, so no round outlives the worker
/// that could deliver its answer (the session machines end their rounds themselves; this is the
/// net under paths that stop early, such as a failed store write).
pub fn finish(held: &ExecutionLease, mut outcome: ExecutionOutcome) -> Result<ExecutionState> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    fail_open_rounds(&tx, held, &outcome, &now)?;
    let mut loaded = load_owned(&tx, held, &now)?;
    outcome.tool_results = std::mem::take(&mut loaded.data.tool_results);
    loaded.data.tool_results = outcome.tool_results.clone();
    loaded.data.outcome = Some(outcome);
    loaded.row.status = ExecutionStatus::Finished;
    loaded.row.lease_expires_at = None;
    loaded.data.lease_token = None;
    let data = loaded.data.clone();
    let row = save(&tx, loaded, now)?;
    tx.commit().map_err(store_error)?;
    Ok(state_of(&row, &data, false))
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
) -> Result<()> {
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
            let Some(lease) = record.lease.filter(|l| l.owner_id == held.lease.owner_id) else {
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
) -> Result<ExecutionState> {
    let mut outcome = outcome;
    outcome.tool_results = loaded.data.tool_results.clone();
    loaded.data.outcome = Some(outcome);
    loaded.row.status = ExecutionStatus::Finished;
    loaded.row.lease_expires_at = None;
    loaded.data.lease_token = None;
    let data = loaded.data.clone();
    let row = save(tx, loaded, now)?;
    Ok(state_of(&row, &data, false))
}

pub use crate::execution_rules::check_execution_id;

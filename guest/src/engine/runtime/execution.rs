//! Executions as stored rows: submission, snapshots, cancel requests, the worker's claim and
//! lease, and the final outcome. Every change is one write transaction with compare-and-set on
//! the row version.

use crate::errors::Result;
use crate::exports::m3::managed_input::execution_rules::{
    ExecutionClaim, ExecutionDecision, ExecutionEnding, ExecutionHead, ExecutionOperation,
    ExecutionRenewal, ExecutionWrite,
};
use crate::exports::m3::managed_input::managed_input::ListFilter;
use crate::exports::m3::managed_input::round_protocol::{
    Operation as RoundOperation, Renewal as RoundRenewal,
};
use crate::exports::m3::managed_input::runtime::HeldRenewal;
use crate::exports::m3::managed_input::runtime::{
    ExecutionDiagnostics, ExecutionEvent, ExecutionFailure, ExecutionLifecycle, ExecutionOutcome,
    ExecutionSpec, ExecutionState, FailureKind, OutcomeKind, ToolResult,
};
use crate::m3::managed_input::store::{
    ExecutionRow, LeaseExpiry, RoundFilter, Transaction, TransactionMode,
};
use crate::m3::managed_input::types::{
    Cursor, ErrorCode, ExecutionStatus, FailureCode, HeldLeases, Lease, ManagedInputError,
    PendingRound, Status, Timestamp,
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
    /// The harness's events, oldest first (at most [`MAX_EVENTS`]).
    pub events: Vec<stored::execution::ExecutionEvent>,
    /// How many events were not kept.
    pub events_dropped: u32,
    /// The tail of the harness's stderr, kept when the execution finished.
    pub stderr_tail: Option<String>,
}

/// Most events kept per execution (the first ones: how it started matters most).
pub const MAX_EVENTS: usize = 64;
/// Longest event message kept, in bytes.
pub const MAX_EVENT_BYTES: usize = 512;

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
            events: self.events.clone(),
            events_dropped: self.events_dropped,
            stderr_tail: self.stderr_tail.clone(),
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
            events: document.events,
            events_dropped: document.events_dropped,
            stderr_tail: document.stderr_tail,
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

/// Reads the execution `execution_id` inside `tx`; a missing one is `execution-not-found`.
fn load_existing(tx: &Transaction, execution_id: &str) -> Result<LoadedExecution> {
    load(tx, execution_id)?.ok_or_else(|| execution_rules::not_found(execution_id))
}

/// Writes `loaded` back with compare-and-set, `now` as its update time; returns the new row.
pub fn save(tx: &Transaction, mut loaded: LoadedExecution, now: Timestamp) -> Result<ExecutionRow> {
    loaded.row.document = loaded.data.encode(&loaded.row.execution_id)?;
    put_row(tx, loaded.row, now)
}

/// Writes `row` as the next version of itself (compare-and-set on the version it was read at),
/// `now` as its update time; returns the row written.
fn put_row(tx: &Transaction, mut row: ExecutionRow, now: Timestamp) -> Result<ExecutionRow> {
    let expected = row.version;
    row.version += 1;
    row.updated_at = now;
    if !tx
        .compare_and_set_execution(&row, expected)
        .map_err(store_error)?
    {
        return Err(crate::errors::conflict(
            ErrorCode::ConcurrentUpdate,
            format!("execution {} changed concurrently", row.execution_id),
        ));
    }
    Ok(row)
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
        events: Vec::new(),
        events_dropped: 0,
        stderr_tail: None,
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

/// `diagnostics`: the execution's harness events and stderr tail.
pub fn diagnostics(execution_id: &str) -> Result<ExecutionDiagnostics> {
    let tx = begin(TransactionMode::Read)?;
    let loaded = load_existing(&tx, execution_id)?;
    let data = loaded.data;
    Ok(ExecutionDiagnostics {
        events: data
            .events
            .into_iter()
            .map(|e| ExecutionEvent {
                at: e.at.into(),
                kind: e.kind,
                message: e.message,
            })
            .collect(),
        events_dropped: data.events_dropped,
        stderr_tail: data.stderr_tail,
    })
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
    // not acknowledged; the error says whether the server received it.
    execution_rules::check_acknowledged(&record)
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

/// An execution read and decided inside one transaction: the decided head is already applied
/// to `loaded`; the caller changes the payload it carries, then [`Decided::write`]s it.
pub struct Decided {
    /// The execution, with the decided head.
    pub loaded: LoadedExecution,
    /// What `execution_rules::decide` decided.
    pub decision: ExecutionDecision,
}

impl Decided {
    /// Writes the execution back (compare-and-set) unless the decision left it unchanged, then
    /// fails the open rounds the decision names, in the same transaction; returns the row.
    fn write(self, tx: &Transaction, now: Timestamp, rounds: RoundsEnd) -> Result<ExecutionRow> {
        if let Some(owner_id) = &self.decision.fail_rounds_of {
            fail_open_rounds(tx, &self.loaded.row.execution_id, owner_id, rounds, &now)?;
        }
        // Whoever waits for its result learns it finished.
        if self.decision.write == ExecutionWrite::Update && self.decision.ended.is_some() {
            tx.wake_execution(&self.loaded.row.execution_id)
                .map_err(store_error)?;
        }
        match self.decision.write {
            ExecutionWrite::Unchanged => Ok(self.loaded.row),
            ExecutionWrite::Update => save(tx, self.loaded, now),
        }
    }
}

impl LoadedExecution {
    /// What the state machine reads of it.
    fn head(&self) -> ExecutionHead {
        head_of(
            &self.row,
            self.data.lease_token.clone(),
            self.data.cancel_requested,
        )
    }

    /// Takes the decided head. A finished execution keeps its last holder's owner id (for
    /// diagnostics), never a token or an expiry.
    fn set_head(&mut self, head: &ExecutionHead) {
        set_row_head(&mut self.row, head);
        self.data.cancel_requested = head.cancel_requested;
        self.data.lease_token = head.lease.as_ref().map(|l| l.lease_token.clone());
    }
}

/// What of `head` the row's columns hold: status, owner and expiry. A finished execution keeps
/// its last holder's owner id.
fn set_row_head(row: &mut ExecutionRow, head: &ExecutionHead) {
    row.status = head.status;
    match &head.lease {
        Some(lease) => {
            row.owner_id = Some(lease.owner_id.clone());
            row.lease_expires_at = Some(lease.expires_at);
        }
        None => row.lease_expires_at = None,
    }
}

/// The head of an execution whose row is `row` and whose document holds `lease_token` and
/// `cancel_requested` (owner and expiry are the row's).
fn head_of(
    row: &ExecutionRow,
    lease_token: Option<String>,
    cancel_requested: bool,
) -> ExecutionHead {
    let lease = match (&row.owner_id, lease_token, row.lease_expires_at) {
        (Some(owner_id), Some(lease_token), Some(expires_at)) => Some(Lease {
            owner_id: owner_id.clone(),
            lease_token,
            expires_at,
        }),
        _ => None,
    };
    ExecutionHead {
        status: row.status,
        lease,
        cancel_requested,
    }
}

/// A renewal decided on an execution's head alone (`decide_head_in`): its row, and the head as
/// read.
pub struct HeadDecided {
    row: ExecutionRow,
    before: ExecutionHead,
    /// What `execution_rules::decide` decided.
    pub decision: ExecutionDecision,
}

/// Reads execution `execution_id`'s row and the head of its document in `tx` (without decoding
/// the rest) and decides `operation` (a lease renewal) at `now`.
pub fn decide_head_in(
    tx: &Transaction,
    execution_id: &str,
    operation: ExecutionOperation,
    now: &Timestamp,
) -> Result<HeadDecided> {
    let Some(row) = tx.get_execution(execution_id).map_err(store_error)? else {
        return Err(execution_rules::not_found(execution_id));
    };
    let head: stored::execution::ExecutionHeadDocument =
        stored::decode(&row.document).map_err(|unreadable| {
            crate::errors::storage(
                ErrorCode::CorruptRecord,
                unreadable.describe(&format!("execution {execution_id}")),
            )
        })?;
    let before = head_of(&row, head.lease_token, head.cancel_requested);
    let decision = execution_rules::decide(execution_id, Some(&before), operation, now)?;
    Ok(HeadDecided {
        row,
        before,
        decision,
    })
}

impl HeadDecided {
    /// When the decision moves the execution's lease expiry and nothing else (its status, owner,
    /// token and cancel flag as they were, nothing ended): the row's version and the new expiry.
    fn lease_move(&self) -> Option<(u64, Timestamp)> {
        let (next, before) = (&self.decision.next, &self.before);
        if !execution_rules::keeps_the_document(&self.decision, before) {
            return None;
        }
        let (lease, held) = (next.lease.as_ref()?, before.lease.as_ref()?);
        let unmoved = next.status == before.status && lease.owner_id == held.owner_id;
        unmoved.then_some((self.row.version, lease.expires_at))
    }

    /// Writes the decision: when it changes only what the row's columns hold (the expiry, the
    /// owner, the status) and ends nothing, the row alone, its document kept as it is; else the
    /// whole execution, read again, as [`Decided::write`] does.
    fn write(self, tx: &Transaction, now: Timestamp) -> Result<ExecutionRow> {
        let columns_only = execution_rules::keeps_the_document(&self.decision, &self.before);
        match self.decision.write {
            ExecutionWrite::Unchanged => Ok(self.row),
            ExecutionWrite::Update if columns_only => {
                let mut row = self.row;
                set_row_head(&mut row, &self.decision.next);
                put_row(tx, row, now)
            }
            ExecutionWrite::Update => {
                let execution_id = self.row.execution_id.clone();
                let mut loaded = load(tx, &execution_id)?
                    .ok_or_else(|| execution_rules::not_found(&execution_id))?;
                loaded.set_head(&self.decision.next);
                Decided {
                    loaded,
                    decision: self.decision,
                }
                .write(tx, now, RoundsEnd::NONE)
            }
        }
    }
}

/// Reads execution `execution_id` in `tx` and decides `operation` on it at `now`.
pub fn decide_in(
    tx: &Transaction,
    execution_id: &str,
    operation: ExecutionOperation,
    now: &Timestamp,
) -> Result<Decided> {
    decide_on(execution_id, load(tx, execution_id)?, operation, now)
}

/// Decides `operation` on `loaded`, the execution `execution_id` as read (none: missing).
fn decide_on(
    execution_id: &str,
    loaded: Option<LoadedExecution>,
    operation: ExecutionOperation,
    now: &Timestamp,
) -> Result<Decided> {
    let head = loaded.as_ref().map(LoadedExecution::head);
    let decision = execution_rules::decide(execution_id, head.as_ref(), operation, now)?;
    // `decide` refuses a missing execution, so there is one here.
    let mut loaded = loaded.ok_or_else(|| execution_rules::not_found(execution_id))?;
    loaded.set_head(&decision.next);
    Ok(Decided { loaded, decision })
}

/// `request-cancel`: a queued execution finishes cancelled at once; a running one is marked
/// and its worker carries the cancel out; a finished one is left as it is.
pub fn request_cancel(execution_id: &str) -> Result<ExecutionState> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut decided = decide_in(&tx, execution_id, ExecutionOperation::RequestCancel, &now)?;
    if decided.decision.ended == Some(ExecutionEnding::Cancelled) {
        decided.loaded.data.outcome = Some(cancelled_outcome(Vec::new()));
    }
    let data = decided.loaded.data.clone();
    let marked = decided.decision.write == ExecutionWrite::Update;
    let row = decided.write(&tx, now, RoundsEnd::NONE)?;
    if marked {
        // Its worker carries the cancel out: wake it (a finished one wakes result waiters).
        tx.wake_execution(execution_id).map_err(store_error)?;
    }
    let waiting = waiting_for_input(&tx, &row)?;
    tx.commit().map_err(store_error)?;
    Ok(state_of(&row, &data, waiting))
}

/// The worker's hold on a running execution: the same lease rules as a round's
/// (`lease::authorize_held`): owner and token must match, and it must not have expired.
#[derive(Debug, Clone)]
pub struct ExecutionLease {
    /// The execution.
    pub execution_id: String,
    /// The lease the claim granted (renewals move its expiry).
    pub lease: Lease,
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
    // The lease length is the submission's, read with the row that is decided on.
    let loaded = load(&tx, execution_id)?;
    let ttl = loaded
        .as_ref()
        .map(|l| l.data.spec.lease_ttl_ms)
        .ok_or_else(|| execution_rules::not_found(execution_id))?;
    let claim = ExecutionOperation::Claim(ExecutionClaim {
        owner_id: owner_id.to_string(),
        lease_ttl_ms: ttl,
    });
    let decided = decide_on(execution_id, loaded, claim, &now)?;
    let data = decided.loaded.data.clone();
    let granted = match (&decided.decision.write, &decided.decision.next.lease) {
        (ExecutionWrite::Update, Some(granted)) => granted.clone(),
        _ => {
            return Ok(Claim::Finished(state_of(&decided.loaded.row, &data, false)));
        }
    };
    decided.write(&tx, now, RoundsEnd::NONE)?;
    tx.commit().map_err(store_error)?;
    let held = ExecutionLease {
        execution_id: execution_id.to_string(),
        lease: granted,
        ttl_ms: ttl,
    };
    Ok(Claim::Run(Box::new(data), held))
}

/// Extends, in one write transaction, the worker's lease and the lease of its open round
/// (`round`: its id and lease, renewed in place), and reads what the worker watches: the cancel
/// flag and that round. A refused renewal (a lease lost or expired, the round ended by someone
/// else) writes nothing.
pub fn renew_and_observe(
    held: &mut ExecutionLease,
    round: Option<(&str, &mut Lease)>,
) -> Result<Observed> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let renewal = ExecutionOperation::Renew(ExecutionRenewal {
        lease: held.lease.clone(),
        lease_ttl_ms: held.ttl_ms,
    });
    let decided = decide_head_in(&tx, &held.execution_id, renewal, &now)?;
    let cancel_requested = decided.decision.next.cancel_requested;
    let renewed = decided.decision.next.lease.clone();
    decided.write(&tx, now)?;
    let mut observed_round = None;
    let mut round_lease = None;
    if let Some((round_id, lease)) = round {
        let renewal = crate::exports::m3::managed_input::round_protocol::Operation::Renew(
            crate::exports::m3::managed_input::round_protocol::Renewal {
                lease: lease.clone(),
                lease_ttl_ms: held.ttl_ms,
            },
        );
        crate::round_protocol::check_arguments(round_id, &renewal)?;
        let (record, _) = crate::store_protocol::apply_in(&tx, round_id, renewal, &now)?;
        round_lease = Some((lease, record.lease.clone()));
        observed_round = Some(record);
    }
    tx.commit().map_err(store_error)?;
    if let Some(renewed) = renewed {
        held.lease.expires_at = renewed.expires_at;
    }
    if let Some((lease, Some(granted))) = round_lease {
        *lease = granted;
    }
    Ok(Observed {
        cancel_requested,
        round: observed_round,
    })
}

/// The most entries [`renew_held`] takes in one call (and transaction).
pub const MAX_HELD: usize = 256;

/// Renews, in one write transaction, the leases parked workers hold (each as the worker's own
/// [`renew_and_observe`] would, both leases or neither) and says, per entry, whether its
/// worker should look (its cancel flag set, or its awaited round no longer pending). A refused
/// entry writes nothing; a failing write fails the whole transaction, which writes nothing.
pub fn renew_held(held: Vec<HeldLeases>) -> Result<Vec<HeldRenewal>> {
    if held.len() > MAX_HELD {
        return Err(crate::errors::validation(
            ErrorCode::PayloadTooLarge,
            format!("at most {MAX_HELD} workers' leases are renewed at once"),
        ));
    }
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut results = Vec::with_capacity(held.len());
    let mut written = false;
    for entry in held {
        match renew_one(&tx, entry, &now)? {
            Ok((renewal, wrote)) => {
                written |= wrote;
                results.push(renewal);
            }
            Err(refusal) => results.push(HeldRenewal::Refused(refusal)),
        }
    }
    if written {
        tx.commit().map_err(store_error)?;
    }
    Ok(results)
}

/// One entry of [`renew_held`]: the outer error fails the transaction (a write that failed), the
/// inner one refuses the entry alone (decided before anything of it is written).
fn renew_one(
    tx: &Transaction,
    mut entry: HeldLeases,
    now: &Timestamp,
) -> Result<std::result::Result<(HeldRenewal, bool), ManagedInputError>> {
    let execution_id = entry.execution_id.clone();
    if let Err(e) = check_execution_id(&execution_id) {
        return Ok(Err(e));
    }
    if let Some(renewed) = renew_unchanged(tx, &mut entry, now)? {
        return Ok(Ok(renewed));
    }
    let renewal = ExecutionOperation::Renew(ExecutionRenewal {
        lease: entry.lease.clone(),
        lease_ttl_ms: entry.ttl_ms,
    });
    let decided = match decide_head_in(tx, &execution_id, renewal, now) {
        Ok(decided) => decided,
        // A refusal concerns this entry alone; a busy or failing store fails the batch.
        Err(e) if !is_storage_fault(&e) => return Ok(Err(e)),
        Err(e) => return Err(e),
    };
    let round = match &entry.round {
        Some(held) => {
            let renewal = RoundOperation::Renew(RoundRenewal {
                lease: held.lease.clone(),
                lease_ttl_ms: entry.ttl_ms,
            });
            if let Err(e) = crate::round_protocol::check_arguments(&held.round_id, &renewal) {
                return Ok(Err(e));
            }
            match crate::store_protocol::decide_in(tx, &held.round_id, renewal, now) {
                Ok(decided) => Some(decided),
                Err(e) if !is_storage_fault(&e) => return Ok(Err(e)),
                Err(e) => return Err(e),
            }
        }
        None => None,
    };
    let cancel_requested = decided.decision.next.cancel_requested;
    let (wrote, round_status) = match expiries_alone(tx, &mut entry, &decided, round.as_ref(), now)?
    {
        Some(round_status) => (true, round_status),
        None => {
            let renewed = decided.decision.next.lease.clone();
            let mut wrote = decided.decision.write == ExecutionWrite::Update;
            entry.version = decided.write(tx, *now)?.version;
            if let Some(renewed) = renewed {
                entry.lease.expires_at = renewed.expires_at;
            }
            let mut round_status = None;
            if let (Some(held), Some(round)) = (entry.round.as_mut(), round) {
                held.version = round.version_after();
                let (record, round_wrote) = round.write(tx)?;
                wrote |= round_wrote;
                round_status = Some(record.status);
                if let Some(granted) = record.lease {
                    held.lease = granted;
                }
            }
            (wrote, round_status)
        }
    };
    let mut attention = cancel_requested;
    if let (Some(held), Some(status)) = (entry.round.as_ref(), round_status) {
        attention |= held.awaiting_answer && status != Status::Pending;
    }
    entry.renew_at = time::add_millis(now, entry.renew_every_ms);
    let renewal = if attention {
        // The worker looks and parks again with fresh leases: the versions are not carried on.
        entry.version = 0;
        if let Some(held) = entry.round.as_mut() {
            held.version = 0;
        }
        HeldRenewal::Attention(entry)
    } else {
        HeldRenewal::Renewed(entry)
    };
    Ok(Ok((renewal, wrote)))
}

/// Writes a renewal read and decided in full (`renew_one`) as the two expiries alone, when that
/// is all it moves: the execution's lease expiry (its status, owner, token and cancel flag as
/// they were, nothing ended) and the round's (`RoundDecided::lease_move`), so that neither
/// document is rewritten. Returns the round's status (`Some(None)`: no round) once written and
/// `entry` updated, or `None` (nothing written) when the decision moves anything else.
fn expiries_alone(
    tx: &Transaction,
    entry: &mut HeldLeases,
    decided: &HeadDecided,
    round: Option<&crate::store_protocol::RoundDecided>,
    now: &Timestamp,
) -> Result<Option<Option<Status>>> {
    let Some((execution_version, execution_expiry)) = decided.lease_move() else {
        return Ok(None);
    };
    let round_move = match (&entry.round, round) {
        (Some(held), Some(round)) => match round.lease_move() {
            Some((version, expires_at)) => Some((held.round_id.clone(), version, expires_at)),
            None => return Ok(None),
        },
        (None, None) => None,
        _ => return Ok(None),
    };
    let execution = LeaseExpiry {
        id: entry.execution_id.clone(),
        expected_version: execution_version,
        expires_at: execution_expiry,
    };
    let round_expiry = round_move
        .as_ref()
        .map(|(id, version, expires_at)| LeaseExpiry {
            id: id.clone(),
            expected_version: *version,
            expires_at: *expires_at,
        });
    if !tx
        .set_lease_expiries(&execution, round_expiry.as_ref(), *now)
        .map_err(store_error)?
    {
        // Both rows were read in this write transaction: neither can have moved since.
        return Err(crate::errors::conflict(
            ErrorCode::ConcurrentUpdate,
            format!("execution {} changed concurrently", entry.execution_id),
        ));
    }
    entry.version = execution_version + 1;
    entry.lease.expires_at = execution_expiry;
    let mut round_status = None;
    if let (Some(held), Some(round), Some((_, version, _))) =
        (entry.round.as_mut(), round, round_move)
    {
        held.version = version + 1;
        if let Some(granted) = &round.next().lease {
            held.lease = granted.clone();
        }
        round_status = Some(round.next().status);
    }
    Ok(Some(round_status))
}

/// The renewal of an entry whose rows are unchanged since its last renewal (both versions known
/// and still stored): decided on the leases as held, which are the stored ones (an execution
/// running, its cancel flag clear, its round open and as awaited, or the last renewal would have
/// asked the worker to look), and written as the two expiries alone. `None`: a version is not
/// known or moved, or the rule refuses (the full renewal then reads, decides and reports).
fn renew_unchanged(
    tx: &Transaction,
    entry: &mut HeldLeases,
    now: &Timestamp,
) -> Result<Option<(HeldRenewal, bool)>> {
    if entry.version == 0 || entry.round.as_ref().is_some_and(|r| r.version == 0) {
        return Ok(None);
    }
    let before = ExecutionHead {
        status: ExecutionStatus::Running,
        lease: Some(entry.lease.clone()),
        cancel_requested: false,
    };
    let renewal = ExecutionOperation::Renew(ExecutionRenewal {
        lease: entry.lease.clone(),
        lease_ttl_ms: entry.ttl_ms,
    });
    let Ok(decision) = execution_rules::decide(&entry.execution_id, Some(&before), renewal, now)
    else {
        return Ok(None);
    };
    if !execution_rules::keeps_the_document(&decision, &before) {
        return Ok(None);
    }
    let Some(execution_lease) = decision.next.lease else {
        return Ok(None);
    };
    let round_lease = match &entry.round {
        Some(held) => {
            let renewal = RoundRenewal {
                lease: held.lease.clone(),
                lease_ttl_ms: entry.ttl_ms,
            };
            match crate::round_protocol::renew_unchanged(&held.round_id, &held.lease, renewal, now)
            {
                Ok(granted) => Some(granted),
                Err(_) => return Ok(None),
            }
        }
        None => None,
    };
    let execution = LeaseExpiry {
        id: entry.execution_id.clone(),
        expected_version: entry.version,
        expires_at: execution_lease.expires_at,
    };
    let round = match (&entry.round, &round_lease) {
        (Some(held), Some(granted)) => Some(LeaseExpiry {
            id: held.round_id.clone(),
            expected_version: held.version,
            expires_at: granted.expires_at,
        }),
        _ => None,
    };
    if !tx
        .set_lease_expiries(&execution, round.as_ref(), *now)
        .map_err(store_error)?
    {
        // A row moved on since: the full renewal reads both.
        return Ok(None);
    }
    entry.version += 1;
    entry.lease.expires_at = execution_lease.expires_at;
    if let (Some(held), Some(granted)) = (entry.round.as_mut(), round_lease) {
        held.version += 1;
        held.lease = granted;
    }
    entry.renew_at = time::add_millis(now, entry.renew_every_ms);
    Ok(Some((HeldRenewal::Renewed(entry.clone()), true)))
}

/// Whether an error is the database failing (busy past its timeout, I/O), not a decision.
pub fn is_storage_fault(e: &ManagedInputError) -> bool {
    matches!(
        e,
        ManagedInputError::Storage(d)
            if matches!(d.code, ErrorCode::StorageBusy | ErrorCode::StorageFailure)
    )
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

/// Changes the running execution's payload under the worker's live lease.
fn progress(held: &ExecutionLease, change: impl FnOnce(&mut ExecutionData)) -> Result<()> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let progress = ExecutionOperation::Progress(held.lease.clone());
    let mut decided = decide_in(&tx, &held.execution_id, progress, &now)?;
    change(&mut decided.loaded.data);
    decided.write(&tx, now, RoundsEnd::NONE)?;
    tx.commit().map_err(store_error)
}

/// Records what the running execution's worker started.
pub fn record_spawned(
    held: &ExecutionLease,
    spawned: crate::m3::managed_input::process::Spawned,
) -> Result<()> {
    progress(held, |data| data.spawned = Some(spawned))
}

/// Appends events of the running execution's harness (the first [`MAX_EVENTS`] are kept, each
/// message cut to [`MAX_EVENT_BYTES`]; the rest are counted).
pub fn record_events(held: &ExecutionLease, events: Vec<(String, String)>) -> Result<()> {
    let at: stored::values::Timestamp = time::now().into();
    progress(held, |data| {
        for (kind, message) in events {
            if data.events.len() >= MAX_EVENTS {
                data.events_dropped = data.events_dropped.saturating_add(1);
                continue;
            }
            data.events.push(stored::execution::ExecutionEvent {
                at,
                kind,
                message: crate::errors::cut(&message, MAX_EVENT_BYTES - 3),
            });
        }
    })
}

/// Appends a tool result to the running execution, in a row of its own under the worker's live
/// lease (authorised like any progress; the execution's document is not rewritten).
pub fn record_tool_result(held: &ExecutionLease, result: ToolResult) -> Result<()> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let progress = ExecutionOperation::Progress(held.lease.clone());
    decide_in(&tx, &held.execution_id, progress, &now)?;
    let item = stored::execution::ToolResultItem {
        format: stored::FORMAT,
        result: (&result).into(),
    };
    let document = stored::encode(&item).map_err(|e| corrupt(&held.execution_id, &e))?;
    tx.append_execution_item(
        &held.execution_id,
        stored::execution::TOOL_RESULT_ITEM,
        &document,
    )
    .map_err(store_error)?;
    tx.commit().map_err(store_error)
}

/// Every tool result of `loaded`, read in `tx`: those an older build kept in the document, then
/// the rows of their own.
fn tool_results_in(tx: &Transaction, loaded: &LoadedExecution) -> Result<Vec<ToolResult>> {
    let execution_id = &loaded.row.execution_id;
    let mut results = loaded.data.tool_results.clone();
    for document in tx
        .list_execution_items(execution_id, stored::execution::TOOL_RESULT_ITEM)
        .map_err(store_error)?
    {
        let item: stored::execution::ToolResultItem =
            stored::decode(&document).map_err(|e| corrupt(execution_id, &e))?;
        results.push(item.result.into());
    }
    Ok(results)
}

/// Finishes the running execution with `outcome` (its tool results are filled in from the
/// row); returns the final state. In the same transaction every round of the execution that
/// this worker still owns and that is not terminal is failed, so no round outlives the worker
/// that could deliver its answer (the session machines end their rounds themselves; this is the
/// net under paths that stop early, such as a failed store write).
pub fn finish(
    held: &ExecutionLease,
    mut outcome: ExecutionOutcome,
    stderr_tail: Option<String>,
) -> Result<ExecutionState> {
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let finish = ExecutionOperation::Finish(held.lease.clone());
    let mut decided = decide_in(&tx, &held.execution_id, finish, &now)?;
    let rounds = RoundsEnd::for_outcome(&outcome);
    outcome.tool_results = tool_results_in(&tx, &decided.loaded)?;
    decided.loaded.data.outcome = Some(outcome);
    if stderr_tail.is_some() {
        decided.loaded.data.stderr_tail = stderr_tail;
    }
    let data = decided.loaded.data.clone();
    let row = decided.write(&tx, now, rounds)?;
    tx.commit().map_err(store_error)?;
    Ok(state_of(&row, &data, false))
}

/// Ends, inside `tx`, an execution whose holder is gone or gives up (`operation` is `give-up`
/// or `recover`): failed `recovery-unavailable` with `message`; the rounds the decision names
/// fail `recovery-unavailable` with `round_message`. When `stopped` (its worker's instance
/// stopped: a trap, a limit) and that worker held no open round, no round failed: the
/// execution fails `engine-error`, without a round's code. Returns the final state and what
/// its worker had started, or none when the decision left it unchanged (it had finished).
pub fn abandon_in(
    tx: &Transaction,
    execution_id: &str,
    operation: ExecutionOperation,
    stopped: bool,
    message: &str,
    round_message: &str,
    now: Timestamp,
) -> Result<
    Option<(
        ExecutionState,
        Option<crate::m3::managed_input::process::Spawned>,
    )>,
> {
    let mut decided = decide_in(tx, execution_id, operation, &now)?;
    if decided.decision.ended != Some(ExecutionEnding::Abandoned) {
        return Ok(None);
    }
    let spawned = decided.loaded.data.spawned.clone();
    let round_open = match &decided.decision.fail_rounds_of {
        Some(owner_id) => holds_open_round(tx, execution_id, owner_id)?,
        None => false,
    };
    let (kind, code) = if stopped && !round_open {
        (FailureKind::EngineError, None)
    } else {
        (
            FailureKind::RoundFailed,
            Some(FailureCode::RecoveryUnavailable),
        )
    };
    decided.loaded.data.outcome = Some(ExecutionOutcome {
        kind: OutcomeKind::Failed,
        failure: Some(ExecutionFailure {
            kind,
            code,
            message: message.to_string(),
        }),
        tool_results: tool_results_in(tx, &decided.loaded)?,
        final_message: None,
    });
    let data = decided.loaded.data.clone();
    let row = decided.write(tx, now, RoundsEnd::recovery(round_message))?;
    Ok(Some((state_of(&row, &data, false), spawned)))
}

/// Whether `owner_id` holds an open round of execution `execution_id`, read in `tx`.
fn holds_open_round(tx: &Transaction, execution_id: &str, owner_id: &str) -> Result<bool> {
    Ok(!open_rounds_held(tx, execution_id, owner_id)?.is_empty())
}

/// The open rounds of execution `execution_id` that `owner_id` holds, each with its lease,
/// read in `tx`.
fn open_rounds_held(
    tx: &Transaction,
    execution_id: &str,
    owner_id: &str,
) -> Result<Vec<(String, Lease)>> {
    let mut held = Vec::new();
    for status in OPEN_STATUSES {
        let rows = tx
            .list(&RoundFilter {
                execution_id: Some(execution_id.to_string()),
                status: Some(status),
                limit: None,
                after: None,
            })
            .map_err(store_error)?;
        for row in rows {
            let record = crate::record::from_row(&row)?;
            if let Some(lease) = record.lease.filter(|l| l.owner_id == owner_id) {
                held.push((record.pending.round_id, lease));
            }
        }
    }
    Ok(held)
}

/// The statuses of a round that has not ended.
pub const OPEN_STATUSES: [Status; 4] = [
    Status::Pending,
    Status::ResponseValidated,
    Status::DeliveryStarted,
    Status::Delivered,
];

/// How the open rounds of an ending execution fail.
pub struct RoundsEnd {
    /// The code to fail them with first (`fail`); `recovery-unavailable` (`fail-recovery`, the
    /// worker presenting its lease) when none, or when the store refuses the code.
    code: Option<FailureCode>,
    message: String,
}

impl RoundsEnd {
    /// For decisions that name no rounds.
    const NONE: RoundsEnd = RoundsEnd {
        code: None,
        message: String::new(),
    };

    /// `recovery-unavailable` with `message`.
    fn recovery(message: &str) -> Self {
        RoundsEnd {
            code: None,
            message: message.to_string(),
        }
    }

    /// The outcome's own code where the store accepts it.
    fn for_outcome(outcome: &ExecutionOutcome) -> Self {
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
        RoundsEnd {
            code: Some(code),
            message: format!("the execution ended while this round was open: {why}"),
        }
    }
}

/// Fails, inside `tx`, every open round of execution `execution_id` that `owner_id` holds (the
/// one walk for a finishing worker, a worker giving up and an abandoned instance).
fn fail_open_rounds(
    tx: &Transaction,
    execution_id: &str,
    owner_id: &str,
    end: RoundsEnd,
    now: &Timestamp,
) -> Result<()> {
    use crate::exports::m3::managed_input::round_protocol::{
        FailureReport, Operation, RecoveryReport,
    };
    for (round_id, lease) in open_rounds_held(tx, execution_id, owner_id)? {
        let round_id = &round_id;
        let failed = match end.code {
            Some(code) => crate::store_protocol::apply_in(
                tx,
                round_id,
                Operation::Fail(FailureReport {
                    lease: lease.clone(),
                    code,
                    message: end.message.clone(),
                }),
                now,
            )
            .is_ok(),
            None => false,
        };
        if !failed {
            crate::store_protocol::apply_in(
                tx,
                round_id,
                Operation::FailRecovery(RecoveryReport {
                    lease: Some(lease),
                    message: end.message.clone(),
                }),
                now,
            )?;
        }
    }
    Ok(())
}

pub use crate::execution_rules::check_execution_id;

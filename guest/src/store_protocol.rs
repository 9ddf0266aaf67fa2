//! The `ManagedInputStore` protocol: every operation is one host transaction in which the
//! component reads the row, decides, and writes with compare-and-set on the row version.

use crate::errors::{Outcome, conflict, state, storage, validation};
use crate::exports::m3::managed_input::managed_input::{
    DeadlineChoice, ListFilter, NewRound, OwnerClaim,
};
use crate::m3::managed_input::store::{RoundFilter, StoreError, Transaction, TransactionMode};
use crate::m3::managed_input::types::{
    ElicitationRequest, ErrorCode, Failure, FailureCode, Lease, LifecycleTimestamps,
    ManagedInputError, ManagedInputRecord, PendingRound, RedactedResponse, RequestContext, Status,
    Timestamp,
};
use crate::{canonical, lease, lifecycle, record, redaction, responses, schema, strict_json, time};

/// Default deadline of a round: 24 hours after creation.
pub const DEFAULT_DEADLINE_MS: u64 = 24 * 60 * 60 * 1000;
/// Longest id, key or name accepted, in bytes.
pub const MAX_ID_BYTES: usize = 512;
/// Longest message (request message, failure message) accepted, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Most requests in one round.
pub const MAX_REQUESTS: usize = 64;

pub(crate) fn store_error(e: StoreError) -> ManagedInputError {
    match e {
        StoreError::Busy(m) => storage(ErrorCode::StorageBusy, m),
        StoreError::Failure(m) => storage(ErrorCode::StorageFailure, m),
    }
}

pub(crate) fn begin(mode: TransactionMode) -> Outcome<Transaction> {
    Transaction::begin(mode).map_err(store_error)
}

fn check_id(what: &str, value: &str, empty_code: ErrorCode) -> Outcome<()> {
    if value.is_empty() {
        return Err(validation(empty_code, format!("{what} must not be empty")));
    }
    if value.len() > MAX_ID_BYTES || value.chars().any(char::is_control) {
        return Err(validation(
            ErrorCode::InvalidId,
            format!("{what} must be at most {MAX_ID_BYTES} bytes with no control characters"),
        ));
    }
    Ok(())
}

fn check_round_id(round_id: &str) -> Outcome<()> {
    check_id("round id", round_id, ErrorCode::EmptyRoundId)
}

fn check_text(what: &str, value: &str) -> Outcome<()> {
    if value.len() > MAX_MESSAGE_BYTES {
        return Err(validation(
            ErrorCode::InvalidRound,
            format!(
                "{what} is {} bytes; the limit is {MAX_MESSAGE_BYTES}",
                value.len()
            ),
        ));
    }
    Ok(())
}

fn check_json_object(what: &str, text: &str) -> Outcome<()> {
    match strict_json::parse(text) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        Ok(_) => Err(validation(
            ErrorCode::InvalidRound,
            format!("{what} must be a JSON object"),
        )),
        Err(e) => Err(validation(
            ErrorCode::MalformedJson,
            format!("{what}: {}", e.0),
        )),
    }
}

fn check_context(key: &str, context: &RequestContext) -> Outcome<()> {
    if let Some(meta) = &context.meta {
        check_json_object(&format!("request `{key}` meta"), meta)?;
    }
    if let Some(task) = &context.task {
        check_json_object(&format!("request `{key}` task"), task)?;
    }
    for name in [&context.server, &context.operation_name]
        .into_iter()
        .flatten()
    {
        check_id("request context name", name, ErrorCode::InvalidId)?;
    }
    Ok(())
}

fn check_requests(requests: &[(String, ElicitationRequest)]) -> Outcome<()> {
    if requests.is_empty() {
        return Err(validation(
            ErrorCode::InvalidRound,
            "a round needs at least one request",
        ));
    }
    if requests.len() > MAX_REQUESTS {
        return Err(validation(
            ErrorCode::InvalidRound,
            format!("{} requests; the limit is {MAX_REQUESTS}", requests.len()),
        ));
    }
    let mut keys = std::collections::BTreeSet::new();
    for (key, request) in requests {
        check_id("request key", key, ErrorCode::InvalidId)?;
        if !keys.insert(key.as_str()) {
            return Err(validation(
                ErrorCode::InvalidRound,
                "request keys must be unique",
            ));
        }
        match request {
            ElicitationRequest::Form(form) => {
                check_text("request message", &form.message)?;
                schema::check_requested_schema(&form.requested_schema)?;
                check_context(key, &form.context)?;
            }
            ElicitationRequest::Url(url) => {
                check_text("request message", &url.message)?;
                if url.url.is_empty()
                    || url.url.len() > 8192
                    || url.url.chars().any(char::is_control)
                {
                    return Err(validation(
                        ErrorCode::InvalidRound,
                        format!(
                            "request `{key}`: the URL must be 1 to 8192 bytes with no control characters"
                        ),
                    ));
                }
                if let Some(id) = &url.elicitation_id {
                    check_id("elicitation id", id, ErrorCode::InvalidId)?;
                }
                check_context(key, &url.context)?;
            }
        }
    }
    Ok(())
}

/// `create-round`.
pub fn create_round(new: NewRound) -> Outcome<ManagedInputRecord> {
    check_round_id(&new.round_id)?;
    check_id("execution id", &new.execution_id, ErrorCode::InvalidId)?;
    check_id(
        "logical operation id",
        &new.logical_operation_id,
        ErrorCode::InvalidId,
    )?;
    check_id("server", &new.server, ErrorCode::InvalidId)?;
    check_id("operation name", &new.operation_name, ErrorCode::InvalidId)?;
    check_requests(&new.requests)?;
    if let Some(state) = &new.request_state {
        check_text("request state", state)?;
    }
    check_json_object("operation parameters", &new.operation_parameters)?;
    if new.round_limit == 0 || new.round_index >= new.round_limit {
        return Err(validation(
            ErrorCode::RoundIndexOutOfRange,
            format!(
                "round index {} must be below round limit {} (and the limit at least 1)",
                new.round_index, new.round_limit
            ),
        ));
    }
    if let Some(owner) = &new.owner {
        check_id("owner id", &owner.owner_id, ErrorCode::InvalidId)?;
        lease::check_ttl(owner.lease_ttl_ms)?;
    }

    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let deadline = match new.deadline {
        DeadlineChoice::DefaultDeadline => Some(time::add_millis(&now, DEFAULT_DEADLINE_MS)),
        DeadlineChoice::NoDeadline => None,
        DeadlineChoice::At(at) => {
            if at.nanoseconds >= 1_000_000_000 || time::at_or_after(&now, &at) {
                return Err(validation(
                    ErrorCode::InvalidDeadline,
                    "the deadline must be a valid instant after now",
                ));
            }
            Some(at)
        }
    };
    let lease = match &new.owner {
        Some(owner) => Some(lease::grant(&owner.owner_id, owner.lease_ttl_ms, &now)?),
        None => None,
    };
    let mut requests = new.requests;
    requests.sort_by(|a, b| a.0.cmp(&b.0));
    let record = ManagedInputRecord {
        pending: PendingRound {
            round_id: new.round_id,
            execution_id: new.execution_id,
            logical_operation_id: new.logical_operation_id,
            server: new.server,
            operation_kind: new.operation_kind,
            operation_name: new.operation_name,
            requests,
            created_at: now,
            request_state: new.request_state,
            deadline,
        },
        round_index: new.round_index,
        round_limit: new.round_limit,
        status: Status::Pending,
        lease,
        responses: None,
        idempotency_key: None,
        delivery_idempotency_key: None,
        harness: new.harness,
        operation_parameters: new.operation_parameters,
        delivery_attempts: 0,
        timestamps: LifecycleTimestamps {
            created_at: now,
            updated_at: now,
            response_validated_at: None,
            delivery_started_at: None,
            delivered_at: None,
            resolved_at: None,
            failed_at: None,
        },
        failure: None,
    };
    let row = record::to_row(&record, 1)?;
    if !tx.insert(&row).map_err(store_error)? {
        return Err(conflict(
            ErrorCode::RoundExists,
            format!("round {} already exists", record.pending.round_id),
        ));
    }
    tx.commit().map_err(store_error)?;
    Ok(record)
}

/// A round read inside a transaction, with its row version.
struct Loaded {
    record: ManagedInputRecord,
    version: u64,
}

fn load(tx: &Transaction, round_id: &str) -> Outcome<Loaded> {
    let row = tx.get(round_id).map_err(store_error)?.ok_or_else(|| {
        state(
            ErrorCode::RoundNotFound,
            format!("round {round_id} does not exist"),
        )
    })?;
    Ok(Loaded {
        record: record::from_row(&row)?,
        version: row.version,
    })
}

fn save(tx: Transaction, loaded: Loaded) -> Outcome<ManagedInputRecord> {
    let row = record::to_row(&loaded.record, loaded.version + 1)?;
    if !tx
        .compare_and_set(&row, loaded.version)
        .map_err(store_error)?
    {
        return Err(conflict(
            ErrorCode::ConcurrentUpdate,
            format!(
                "round {} changed concurrently",
                loaded.record.pending.round_id
            ),
        ));
    }
    tx.commit().map_err(store_error)?;
    Ok(loaded.record)
}

/// `get-round`.
pub fn get_round(round_id: &str) -> Outcome<Option<ManagedInputRecord>> {
    check_round_id(round_id)?;
    let tx = begin(TransactionMode::Read)?;
    let row = tx.get(round_id).map_err(store_error)?;
    row.as_ref().map(record::from_row).transpose()
}

/// `list-rounds`.
pub fn list_rounds(filter: ListFilter) -> Outcome<Vec<ManagedInputRecord>> {
    if let Some(execution_id) = &filter.execution_id {
        check_id("execution id", execution_id, ErrorCode::InvalidId)?;
    }
    let tx = begin(TransactionMode::Read)?;
    let rows = tx
        .list(&RoundFilter {
            execution_id: filter.execution_id,
            status: filter.status,
            limit: filter.limit,
            after: filter.after,
        })
        .map_err(store_error)?;
    rows.iter().map(record::from_row).collect()
}

/// `claim-round`.
pub fn claim_round(round_id: &str, claim: OwnerClaim) -> Outcome<Lease> {
    check_round_id(round_id)?;
    check_id("owner id", &claim.owner_id, ErrorCode::InvalidId)?;
    lease::check_ttl(claim.lease_ttl_ms)?;
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load(&tx, round_id)?;
    lifecycle::ensure_open(&loaded.record)?;
    if let Some(held) = &loaded.record.lease {
        if !lease::is_live(held, &now) {
            return Err(crate::errors::recovery(
                ErrorCode::ReclaimUnsafe,
                format!(
                    "round {round_id}: its worker's lease expired; the native request may be gone, so it cannot be reclaimed"
                ),
            ));
        }
        if held.owner_id != claim.owner_id {
            return Err(conflict(
                ErrorCode::LeaseHeld,
                format!("round {round_id} is owned by another live worker"),
            ));
        }
    }
    let granted = lease::grant(&claim.owner_id, claim.lease_ttl_ms, &now)?;
    loaded.record.lease = Some(granted.clone());
    loaded.record.timestamps.updated_at = now;
    save(tx, loaded)?;
    Ok(granted)
}

/// `renew`.
pub fn renew(round_id: &str, presented: Lease, ttl_ms: u64) -> Outcome<Lease> {
    check_round_id(round_id)?;
    lease::check_ttl(ttl_ms)?;
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load(&tx, round_id)?;
    lifecycle::ensure_open(&loaded.record)?;
    lease::authorize(&loaded.record, &presented, &now)?;
    let renewed = Lease {
        expires_at: time::add_millis(&now, ttl_ms),
        ..presented
    };
    loaded.record.lease = Some(renewed.clone());
    loaded.record.timestamps.updated_at = now;
    save(tx, loaded)?;
    Ok(renewed)
}

/// `submit-responses`.
pub fn submit_responses(
    round_id: &str,
    text: &str,
    idempotency_key: &str,
) -> Outcome<ManagedInputRecord> {
    check_round_id(round_id)?;
    check_id(
        "idempotency key",
        idempotency_key,
        ErrorCode::EmptyIdempotencyKey,
    )?;
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load(&tx, round_id)?;
    let record = &loaded.record;

    if record.idempotency_key.as_deref() == Some(idempotency_key) {
        let submitted = responses::validate_responses(&record.pending.requests, text)?;
        let stored = record.responses.as_deref().unwrap_or_default();
        if canonical::same_responses(&submitted, stored) {
            return Ok(loaded.record);
        }
        return Err(conflict(
            ErrorCode::IdempotencyConflict,
            format!(
                "round {round_id}: this idempotency key was already used with a different response"
            ),
        ));
    }
    lifecycle::ensure_open(record)?;
    if record.status != Status::Pending {
        return Err(state(
            ErrorCode::InvalidTransition,
            format!(
                "round {round_id} is {} and no longer accepts responses",
                lifecycle::name(record.status)
            ),
        ));
    }
    if record
        .lease
        .as_ref()
        .is_some_and(|l| !lease::is_live(l, &now))
    {
        return Err(crate::errors::recovery(
            ErrorCode::RecoveryUnavailable,
            format!(
                "round {round_id}: its worker's lease expired, so a response could never be delivered"
            ),
        ));
    }
    if record
        .pending
        .deadline
        .as_ref()
        .is_some_and(|d| time::at_or_after(&now, d))
    {
        return Err(state(
            ErrorCode::DeadlineExceeded,
            format!("round {round_id}: its deadline has passed"),
        ));
    }
    let validated = responses::validate_responses(&record.pending.requests, text)?;
    let record = &mut loaded.record;
    record.status = Status::ResponseValidated;
    record.responses = Some(validated);
    record.idempotency_key = Some(idempotency_key.to_string());
    record.timestamps.response_validated_at = Some(now);
    record.timestamps.updated_at = now;
    save(tx, loaded)
}

fn advance(
    round_id: &str,
    presented: &Lease,
    to: Status,
    apply: impl FnOnce(&mut ManagedInputRecord, &Timestamp),
) -> Outcome<ManagedInputRecord> {
    check_round_id(round_id)?;
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load(&tx, round_id)?;
    lifecycle::ensure_open(&loaded.record)?;
    lease::authorize(&loaded.record, presented, &now)?;
    lifecycle::ensure_transition(&loaded.record, to)?;
    loaded.record.status = to;
    loaded.record.timestamps.updated_at = now;
    apply(&mut loaded.record, &now);
    save(tx, loaded)
}

/// `start-delivery`.
pub fn start_delivery(
    round_id: &str,
    presented: Lease,
    delivery_key: String,
) -> Outcome<ManagedInputRecord> {
    check_id(
        "delivery idempotency key",
        &delivery_key,
        ErrorCode::EmptyIdempotencyKey,
    )?;
    advance(round_id, &presented, Status::DeliveryStarted, |r, now| {
        r.delivery_attempts += 1;
        r.delivery_idempotency_key = Some(delivery_key);
        r.timestamps.delivery_started_at = Some(*now);
    })
}

/// `mark-delivered`.
pub fn mark_delivered(round_id: &str, presented: Lease) -> Outcome<ManagedInputRecord> {
    advance(round_id, &presented, Status::Delivered, |r, now| {
        r.timestamps.delivered_at = Some(*now)
    })
}

/// `resolve`.
pub fn resolve(round_id: &str, presented: Lease) -> Outcome<ManagedInputRecord> {
    advance(round_id, &presented, Status::Resolved, |r, now| {
        r.timestamps.resolved_at = Some(*now)
    })
}

/// `fail`.
pub fn fail(
    round_id: &str,
    presented: Lease,
    code: FailureCode,
    message: String,
) -> Outcome<ManagedInputRecord> {
    if code == FailureCode::RecoveryUnavailable {
        return Err(validation(
            ErrorCode::InvalidFailure,
            "recovery_unavailable is recorded only by fail-recovery",
        ));
    }
    check_failure_message(&message)?;
    check_round_id(round_id)?;
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load(&tx, round_id)?;
    lifecycle::ensure_open(&loaded.record)?;
    lease::authorize(&loaded.record, &presented, &now)?;
    if code == FailureCode::DeadlineExceeded
        && !loaded
            .record
            .pending
            .deadline
            .as_ref()
            .is_some_and(|d| time::at_or_after(&now, d))
    {
        return Err(state(
            ErrorCode::InvalidTransition,
            format!("round {round_id}: deadline_exceeded needs a deadline that has passed"),
        ));
    }
    mark_failed(&mut loaded.record, code, message, &now);
    save(tx, loaded)
}

fn check_failure_message(message: &str) -> Outcome<()> {
    if message.len() > 4096 {
        return Err(validation(
            ErrorCode::InvalidFailure,
            "failure messages are limited to 4096 bytes",
        ));
    }
    Ok(())
}

fn mark_failed(
    record: &mut ManagedInputRecord,
    code: FailureCode,
    message: String,
    now: &Timestamp,
) {
    record.status = Status::Failed;
    record.failure = Some(Failure { code, message });
    record.timestamps.failed_at = Some(*now);
    record.timestamps.updated_at = *now;
}

/// `fail-recovery`.
pub fn fail_recovery(
    round_id: &str,
    presented: Option<Lease>,
    message: String,
) -> Outcome<ManagedInputRecord> {
    check_round_id(round_id)?;
    check_failure_message(&message)?;
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let mut loaded = load(&tx, round_id)?;
    if lifecycle::is_terminal(loaded.record.status) {
        return Err(state(
            ErrorCode::RoundTerminal,
            format!(
                "round {round_id} is {} already",
                lifecycle::name(loaded.record.status)
            ),
        ));
    }
    match (&presented, &loaded.record.lease) {
        (Some(presented), _) => {
            let held = loaded.record.lease.as_ref().filter(|held| {
                held.owner_id == presented.owner_id && held.lease_token == presented.lease_token
            });
            if held.is_none() {
                return Err(conflict(
                    ErrorCode::LeaseMismatch,
                    format!("round {round_id}: the lease presented is not the current one"),
                ));
            }
        }
        (None, Some(held)) if lease::is_live(held, &now) => {
            return Err(conflict(
                ErrorCode::LeaseHeld,
                format!("round {round_id}: its worker still holds a live lease"),
            ));
        }
        (None, _) => {}
    }
    let message = if message.is_empty() {
        "the worker that owned the native request is gone; the round cannot be recovered"
            .to_string()
    } else {
        message
    };
    mark_failed(
        &mut loaded.record,
        FailureCode::RecoveryUnavailable,
        message,
        &now,
    );
    save(tx, loaded)
}

/// `redacted-responses`.
pub fn redacted_responses(round_id: &str) -> Outcome<Option<Vec<RedactedResponse>>> {
    check_round_id(round_id)?;
    let tx = begin(TransactionMode::Read)?;
    let loaded = load(&tx, round_id)?;
    Ok(loaded.record.responses.as_deref().map(redaction::redact))
}

//! The round state machine as a pure function (WIT `round-protocol`): given a round's stored
//! record, one operation and the time, decide the next record or the typed error. No storage and
//! no clock: `store_protocol` runs this decision inside each transaction, and the `policy-only`
//! component exports it as it is.

use crate::errors::{Result, conflict, recovery, state, storage, validation};
use crate::exports::m3::managed_input::round_protocol::{
    Answer, Decision, DeliveryStart, FailureReport, Operation, RecoveryReport, Renewal, Write,
};
use crate::m3::managed_input::types::{
    DeadlineChoice, ElicitationRequest, ErrorCode, Failure, FailureCode, Lease,
    LifecycleTimestamps, ManagedInputRecord, NewRound, OwnerClaim, PendingRound, RequestContext,
    Status, Timestamp,
};
use crate::mutation;
use crate::{canonical, lease, lifecycle, responses, schema, strict_json, time};

/// Default deadline of a round: 24 hours after creation.
pub const DEFAULT_DEADLINE_MS: u64 = 24 * 60 * 60 * 1000;
/// The furthest a round's deadline may be set after its creation: 366 days (farther instants
/// would outgrow the store's nanosecond timestamps long before they mean anything to a person).
pub const MAX_DEADLINE_MS: u64 = 366 * 24 * 60 * 60 * 1000;
/// Longest id, key or name accepted, in bytes.
pub const MAX_ID_BYTES: usize = 512;
/// Longest message (request message, failure message) accepted, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Most requests in one round.
pub const MAX_REQUESTS: usize = 64;

pub(crate) fn check_id(what: &str, value: &str, empty_code: ErrorCode) -> Result<()> {
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

pub(crate) fn check_round_id(round_id: &str) -> Result<()> {
    check_id("round id", round_id, ErrorCode::EmptyRoundId)
}

fn check_text(what: &str, value: &str) -> Result<()> {
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

fn check_json_object(what: &str, text: &str) -> Result<()> {
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

fn check_context(key: &str, context: &RequestContext) -> Result<()> {
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

fn check_requests(requests: &[(String, ElicitationRequest)]) -> Result<()> {
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

/// Longest failure message accepted, in bytes.
pub const MAX_FAILURE_MESSAGE_BYTES: usize = 4096;

fn check_failure_message(message: &str) -> Result<()> {
    if message.len() > MAX_FAILURE_MESSAGE_BYTES {
        return Err(validation(
            ErrorCode::InvalidFailure,
            format!("failure messages are limited to {MAX_FAILURE_MESSAGE_BYTES} bytes"),
        ));
    }
    Ok(())
}

fn check_new_round(new: &NewRound) -> Result<()> {
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
        check_claim(owner)?;
    }
    Ok(())
}

fn check_claim(claim: &OwnerClaim) -> Result<()> {
    check_id("owner id", &claim.owner_id, ErrorCode::InvalidId)?;
    lease::check_ttl(claim.lease_ttl_ms)
}

/// Checks an operation's own arguments, before anything stored is looked at: bad input is a
/// `validation` error whatever the store holds.
pub fn check_arguments(round_id: &str, operation: &Operation) -> Result<()> {
    match operation {
        Operation::Create(new) => {
            check_round_id(round_id)?;
            check_new_round(new)
        }
        Operation::Claim(claim) => {
            check_round_id(round_id)?;
            check_claim(claim)
        }
        Operation::Renew(Renewal { lease_ttl_ms, .. }) => {
            check_round_id(round_id)?;
            lease::check_ttl(*lease_ttl_ms)
        }
        Operation::Submit(Answer {
            idempotency_key, ..
        }) => {
            check_round_id(round_id)?;
            check_id(
                "idempotency key",
                idempotency_key,
                ErrorCode::EmptyIdempotencyKey,
            )
        }
        Operation::StartDelivery(DeliveryStart {
            delivery_idempotency_key,
            ..
        }) => {
            check_id(
                "delivery idempotency key",
                delivery_idempotency_key,
                ErrorCode::EmptyIdempotencyKey,
            )?;
            check_round_id(round_id)
        }
        Operation::MarkDelivered(_) | Operation::Resolve(_) => check_round_id(round_id),
        Operation::Fail(FailureReport { code, message, .. }) => {
            if *code == FailureCode::RecoveryUnavailable {
                return Err(validation(
                    ErrorCode::InvalidFailure,
                    "recovery_unavailable is recorded only by fail-recovery",
                ));
            }
            check_failure_message(message)?;
            check_round_id(round_id)
        }
        Operation::FailRecovery(RecoveryReport { message, .. }) => {
            check_round_id(round_id)?;
            check_failure_message(message)
        }
    }
}

/// Decides `operation` on round `round_id` whose stored record is `stored` at `now`
/// (`round-protocol.decide`).
pub fn decide(
    round_id: &str,
    stored: Option<&ManagedInputRecord>,
    operation: Operation,
    now: &Timestamp,
) -> Result<Decision> {
    check_arguments(round_id, &operation)?;
    decide_checked(round_id, stored, operation, now)
}

/// [`decide`] for arguments that already passed [`check_arguments`].
pub fn decide_checked(
    round_id: &str,
    stored: Option<&ManagedInputRecord>,
    operation: Operation,
    now: &Timestamp,
) -> Result<Decision> {
    if let Some(record) = stored
        && record.pending.round_id != round_id
    {
        return Err(storage(
            ErrorCode::CorruptRecord,
            format!("the stored record given for round {round_id} belongs to another round"),
        ));
    }
    let operation = match operation {
        Operation::Create(new) => return create(new, stored, now),
        other => other,
    };
    let Some(stored) = stored else {
        return Err(state(
            ErrorCode::RoundNotFound,
            format!("round {round_id} does not exist"),
        ));
    };
    let mut next = stored.clone();
    match operation {
        Operation::Create(_) => unreachable!("handled above"),
        Operation::Claim(claim) => claim_round(&mut next, claim, now)?,
        Operation::Renew(renewal) => renew(&mut next, renewal, now)?,
        Operation::Submit(submission) => {
            if submit(&mut next, submission, now)? == Write::Unchanged {
                return Ok(Decision {
                    next,
                    write: Write::Unchanged,
                });
            }
        }
        Operation::StartDelivery(DeliveryStart {
            lease: presented,
            delivery_idempotency_key,
        }) => advance(&mut next, &presented, Status::DeliveryStarted, now, |r| {
            r.delivery_attempts += 1;
            r.delivery_idempotency_key = Some(delivery_idempotency_key);
            r.timestamps.delivery_started_at = Some(*now);
        })?,
        Operation::MarkDelivered(presented) => {
            advance(&mut next, &presented, Status::Delivered, now, |r| {
                r.timestamps.delivered_at = Some(*now)
            })?
        }
        Operation::Resolve(presented) => {
            advance(&mut next, &presented, Status::Resolved, now, |r| {
                r.timestamps.resolved_at = Some(*now)
            })?
        }
        Operation::Fail(report) => fail(&mut next, report, now)?,
        Operation::FailRecovery(report) => fail_recovery(&mut next, report, now)?,
    }
    Ok(Decision {
        next,
        write: Write::Update,
    })
}

fn create(new: NewRound, stored: Option<&ManagedInputRecord>, now: &Timestamp) -> Result<Decision> {
    let deadline = match new.deadline {
        DeadlineChoice::DefaultDeadline => Some(time::add_millis(now, DEFAULT_DEADLINE_MS)),
        DeadlineChoice::NoDeadline => None,
        DeadlineChoice::At(at) => {
            if at.nanoseconds >= 1_000_000_000 || time::at_or_after(now, &at) {
                return Err(validation(
                    ErrorCode::InvalidDeadline,
                    "the deadline must be a valid instant after now",
                ));
            }
            if time::at_or_after(&at, &time::add_millis(now, MAX_DEADLINE_MS + 1)) {
                return Err(validation(
                    ErrorCode::InvalidDeadline,
                    format!(
                        "the deadline must be at most {} days after now",
                        MAX_DEADLINE_MS / 86_400_000
                    ),
                ));
            }
            Some(at)
        }
    };
    if stored.is_some() {
        return Err(conflict(
            ErrorCode::RoundExists,
            format!("round {} already exists", new.round_id),
        ));
    }
    let lease = match &new.owner {
        Some(owner) => Some(lease::grant(&owner.owner_id, owner.lease_ttl_ms, now)?),
        None => None,
    };
    let mut requests = new.requests;
    requests.sort_by(|a, b| a.0.cmp(&b.0));
    let next = ManagedInputRecord {
        pending: PendingRound {
            round_id: new.round_id,
            execution_id: new.execution_id,
            logical_operation_id: new.logical_operation_id,
            server: new.server,
            operation_kind: new.operation_kind,
            operation_name: new.operation_name,
            requests,
            created_at: *now,
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
            created_at: *now,
            updated_at: *now,
            response_validated_at: None,
            delivery_started_at: None,
            delivered_at: None,
            resolved_at: None,
            failed_at: None,
        },
        failure: None,
    };
    Ok(Decision {
        next,
        write: Write::Insert,
    })
}

fn claim_round(record: &mut ManagedInputRecord, claim: OwnerClaim, now: &Timestamp) -> Result<()> {
    lifecycle::ensure_open(record)?;
    let round_id = &record.pending.round_id;
    if let Some(held) = &record.lease {
        if !lease::is_live(held, now) {
            return Err(recovery(
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
    record.lease = Some(lease::grant(&claim.owner_id, claim.lease_ttl_ms, now)?);
    record.timestamps.updated_at = *now;
    Ok(())
}

fn renew(record: &mut ManagedInputRecord, renewal: Renewal, now: &Timestamp) -> Result<()> {
    lifecycle::ensure_open(record)?;
    lease::authorize(record, &renewal.lease, now)?;
    record.lease = Some(renewed_lease(renewal, now));
    record.timestamps.updated_at = *now;
    Ok(())
}

/// `renew` on a round known to be open and to hold `stored` (a round unchanged since a renewal
/// of it was granted): the lease it grants, decided by the same rule without the record.
pub fn renew_unchanged(
    round_id: &str,
    stored: &Lease,
    renewal: Renewal,
    now: &Timestamp,
) -> Result<Lease> {
    lease::check_ttl(renewal.lease_ttl_ms)?;
    lease::authorize_held(
        &format!("round {round_id}"),
        Some(stored),
        &renewal.lease,
        now,
    )?;
    Ok(renewed_lease(renewal, now))
}

fn renewed_lease(renewal: Renewal, now: &Timestamp) -> Lease {
    Lease {
        expires_at: time::add_millis(now, renewal.lease_ttl_ms),
        ..renewal.lease
    }
}

/// Returns `Write::Unchanged` for an idempotent repeat (the record is left as stored).
fn submit(record: &mut ManagedInputRecord, answer: Answer, now: &Timestamp) -> Result<Write> {
    let Answer {
        responses: text,
        idempotency_key,
    } = answer;
    let round_id = &record.pending.round_id;
    if record.idempotency_key.as_deref() == Some(idempotency_key.as_str()) {
        let submitted = responses::validate_responses(&record.pending.requests, &text)?;
        let stored = record.responses.as_deref().unwrap_or_default();
        if canonical::same_responses(&submitted, stored)
            || mutation::broken(mutation::Rule::IdempotencyConflict)
        {
            return Ok(Write::Unchanged);
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
        .is_some_and(|l| !lease::is_live(l, now))
    {
        return Err(recovery(
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
        .is_some_and(|d| time::at_or_after(now, d))
    {
        return Err(state(
            ErrorCode::DeadlineExceeded,
            format!("round {round_id}: its deadline has passed"),
        ));
    }
    let validated = responses::validate_responses(&record.pending.requests, &text)?;
    record.status = Status::ResponseValidated;
    record.responses = Some(validated);
    record.idempotency_key = Some(idempotency_key);
    record.timestamps.response_validated_at = Some(*now);
    record.timestamps.updated_at = *now;
    Ok(Write::Update)
}

fn advance(
    record: &mut ManagedInputRecord,
    presented: &Lease,
    to: Status,
    now: &Timestamp,
    apply: impl FnOnce(&mut ManagedInputRecord),
) -> Result<()> {
    lifecycle::ensure_open(record)?;
    lease::authorize(record, presented, now)?;
    lifecycle::ensure_transition(record, to)?;
    record.status = to;
    record.timestamps.updated_at = *now;
    apply(record);
    Ok(())
}

fn fail(record: &mut ManagedInputRecord, report: FailureReport, now: &Timestamp) -> Result<()> {
    lifecycle::ensure_open(record)?;
    lease::authorize(record, &report.lease, now)?;
    if report.code == FailureCode::DeadlineExceeded
        && !record
            .pending
            .deadline
            .as_ref()
            .is_some_and(|d| time::at_or_after(now, d))
    {
        return Err(state(
            ErrorCode::InvalidTransition,
            format!(
                "round {}: deadline_exceeded needs a deadline that has passed",
                record.pending.round_id
            ),
        ));
    }
    mark_failed(record, report.code, report.message, now);
    Ok(())
}

fn fail_recovery(
    record: &mut ManagedInputRecord,
    report: RecoveryReport,
    now: &Timestamp,
) -> Result<()> {
    let round_id = &record.pending.round_id;
    if lifecycle::is_terminal(record.status) {
        return Err(state(
            ErrorCode::RoundTerminal,
            format!(
                "round {round_id} is {} already",
                lifecycle::name(record.status)
            ),
        ));
    }
    match (&report.lease, &record.lease) {
        (Some(presented), _) => {
            let held = record
                .lease
                .as_ref()
                .filter(|held| lease::same_holder(held, presented));
            if held.is_none() {
                return Err(conflict(
                    ErrorCode::LeaseMismatch,
                    format!("round {round_id}: the lease presented is not the current one"),
                ));
            }
        }
        (None, Some(held)) if lease::is_live(held, now) => {
            return Err(conflict(
                ErrorCode::LeaseHeld,
                format!("round {round_id}: its worker still holds a live lease"),
            ));
        }
        (None, _) => {}
    }
    let message = if report.message.is_empty() {
        "the worker that owned the native request is gone; the round cannot be recovered"
            .to_string()
    } else {
        report.message
    };
    mark_failed(record, FailureCode::RecoveryUnavailable, message, now);
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

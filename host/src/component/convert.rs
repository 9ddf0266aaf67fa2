//! Conversions between the WIT types of the component and the public Rust types. Field by field,
//! no decisions.

use crate::api::error::{
    ErrorCode, ErrorDetail, ManagedInputConflict, ManagedInputError, ManagedInputRecoveryError,
    ManagedInputStateError, ManagedInputValidationError, StorageError,
};
use crate::api::record::{
    FailureCode, LifecycleTimestamps, ManagedInputLease, ManagedInputRecord, ManagedInputStatus,
    RoundFailure, RoundFilter,
};
use crate::api::response::{ElicitationAction, ElicitationResponse, RedactedResponse};
use crate::api::round::HarnessMetadata;
use crate::api::round::{
    Deadline, ElicitationRequest, FormElicitationRequest, NewRound, OperationKind, OwnerClaim,
    PendingElicitationRound, RequestContext, UrlElicitationRequest,
};
use crate::component::bindings::exports::m3::managed_input::managed_input as wit_mi;
use crate::component::bindings::m3::managed_input::types as wit;
use chrono::{DateTime, Utc};
use serde_json::Value;

type Converted<T> = Result<T, ManagedInputError>;

fn corrupt(what: &str) -> ManagedInputError {
    ManagedInputError::Storage(StorageError {
        detail: ErrorDetail {
            code: ErrorCode::CorruptRecord,
            message: format!("the component returned an unreadable {what}"),
            request_key: None,
            field: None,
        },
    })
}

fn parse(text: &str, what: &str) -> Converted<Value> {
    serde_json::from_str(text).map_err(|_| corrupt(what))
}

/// UTC instant -> WIT timestamp.
pub fn timestamp(t: &DateTime<Utc>) -> wit::Timestamp {
    wit::Timestamp {
        seconds: t.timestamp(),
        nanoseconds: t.timestamp_subsec_nanos().min(999_999_999),
    }
}

/// WIT timestamp -> UTC instant.
pub fn datetime(t: &wit::Timestamp) -> Converted<DateTime<Utc>> {
    DateTime::from_timestamp(t.seconds, t.nanoseconds).ok_or_else(|| corrupt("timestamp"))
}

fn opt_datetime(t: &Option<wit::Timestamp>) -> Converted<Option<DateTime<Utc>>> {
    t.as_ref().map(datetime).transpose()
}

/// Public -> WIT operation kind.
pub fn operation_kind(kind: OperationKind) -> wit::OperationKind {
    match kind {
        OperationKind::Tool => wit::OperationKind::Tool,
        OperationKind::Prompt => wit::OperationKind::Prompt,
        OperationKind::Resource => wit::OperationKind::Resource,
    }
}

/// WIT -> public operation kind.
pub fn operation_kind_back(kind: wit::OperationKind) -> OperationKind {
    match kind {
        wit::OperationKind::Tool => OperationKind::Tool,
        wit::OperationKind::Prompt => OperationKind::Prompt,
        wit::OperationKind::Resource => OperationKind::Resource,
    }
}

/// Public -> WIT status.
pub fn status(status: ManagedInputStatus) -> wit::Status {
    match status {
        ManagedInputStatus::Pending => wit::Status::Pending,
        ManagedInputStatus::ResponseValidated => wit::Status::ResponseValidated,
        ManagedInputStatus::DeliveryStarted => wit::Status::DeliveryStarted,
        ManagedInputStatus::Delivered => wit::Status::Delivered,
        ManagedInputStatus::Resolved => wit::Status::Resolved,
        ManagedInputStatus::Failed => wit::Status::Failed,
    }
}

fn status_back(status: wit::Status) -> ManagedInputStatus {
    match status {
        wit::Status::Pending => ManagedInputStatus::Pending,
        wit::Status::ResponseValidated => ManagedInputStatus::ResponseValidated,
        wit::Status::DeliveryStarted => ManagedInputStatus::DeliveryStarted,
        wit::Status::Delivered => ManagedInputStatus::Delivered,
        wit::Status::Resolved => ManagedInputStatus::Resolved,
        wit::Status::Failed => ManagedInputStatus::Failed,
    }
}

/// Public -> WIT failure code.
pub fn failure_code(code: FailureCode) -> wit::FailureCode {
    match code {
        FailureCode::Cancelled => wit::FailureCode::Cancelled,
        FailureCode::DeadlineExceeded => wit::FailureCode::DeadlineExceeded,
        FailureCode::RoundLimitExceeded => wit::FailureCode::RoundLimitExceeded,
        FailureCode::ServerError => wit::FailureCode::ServerError,
        FailureCode::InvalidRequestState => wit::FailureCode::InvalidRequestState,
        FailureCode::ElicitationUnhandled => wit::FailureCode::ElicitationUnhandled,
        FailureCode::RecoveryUnavailable => wit::FailureCode::RecoveryUnavailable,
        FailureCode::RequestWithdrawn => wit::FailureCode::RequestWithdrawn,
    }
}

/// WIT -> public failure code.
pub fn failure_code_back(code: wit::FailureCode) -> FailureCode {
    match code {
        wit::FailureCode::Cancelled => FailureCode::Cancelled,
        wit::FailureCode::DeadlineExceeded => FailureCode::DeadlineExceeded,
        wit::FailureCode::RoundLimitExceeded => FailureCode::RoundLimitExceeded,
        wit::FailureCode::ServerError => FailureCode::ServerError,
        wit::FailureCode::InvalidRequestState => FailureCode::InvalidRequestState,
        wit::FailureCode::ElicitationUnhandled => FailureCode::ElicitationUnhandled,
        wit::FailureCode::RecoveryUnavailable => FailureCode::RecoveryUnavailable,
        wit::FailureCode::RequestWithdrawn => FailureCode::RequestWithdrawn,
    }
}

fn action_back(action: wit::ElicitationAction) -> ElicitationAction {
    match action {
        wit::ElicitationAction::Accept => ElicitationAction::Accept,
        wit::ElicitationAction::Decline => ElicitationAction::Decline,
        wit::ElicitationAction::Cancel => ElicitationAction::Cancel,
    }
}

fn action(action: ElicitationAction) -> wit::ElicitationAction {
    match action {
        ElicitationAction::Accept => wit::ElicitationAction::Accept,
        ElicitationAction::Decline => wit::ElicitationAction::Decline,
        ElicitationAction::Cancel => wit::ElicitationAction::Cancel,
    }
}

fn context(c: &RequestContext) -> wit::RequestContext {
    wit::RequestContext {
        meta: c.meta.as_ref().map(Value::to_string),
        task: c.task.as_ref().map(Value::to_string),
        server: c.server.clone(),
        operation_kind: c.operation_kind.map(operation_kind),
        operation_name: c.operation_name.clone(),
    }
}

fn context_back(c: wit::RequestContext) -> Converted<RequestContext> {
    Ok(RequestContext {
        meta: c.meta.as_deref().map(|m| parse(m, "meta")).transpose()?,
        task: c.task.as_deref().map(|t| parse(t, "task")).transpose()?,
        server: c.server,
        operation_kind: c.operation_kind.map(operation_kind_back),
        operation_name: c.operation_name,
    })
}

/// Public -> WIT request.
pub fn request(r: &ElicitationRequest) -> wit::ElicitationRequest {
    match r {
        ElicitationRequest::Form(f) => wit::ElicitationRequest::Form(wit::FormRequest {
            message: f.message.clone(),
            requested_schema: f.requested_schema.to_string(),
            context: context(&f.context),
        }),
        ElicitationRequest::Url(u) => wit::ElicitationRequest::Url(wit::UrlRequest {
            message: u.message.clone(),
            url: u.url.clone(),
            elicitation_id: u.elicitation_id.clone(),
            context: context(&u.context),
        }),
    }
}

fn request_back(r: wit::ElicitationRequest) -> Converted<ElicitationRequest> {
    Ok(match r {
        wit::ElicitationRequest::Form(f) => ElicitationRequest::Form(FormElicitationRequest {
            requested_schema: parse(&f.requested_schema, "schema")?,
            message: f.message,
            context: context_back(f.context)?,
        }),
        wit::ElicitationRequest::Url(u) => ElicitationRequest::Url(UrlElicitationRequest {
            message: u.message,
            url: u.url,
            elicitation_id: u.elicitation_id,
            context: context_back(u.context)?,
        }),
    })
}

/// Public -> WIT pending round.
pub fn pending_round(p: &PendingElicitationRound) -> wit::PendingRound {
    wit::PendingRound {
        round_id: p.round_id.clone(),
        execution_id: p.execution_id.clone(),
        logical_operation_id: p.logical_operation_id.clone(),
        server: p.server.clone(),
        operation_kind: operation_kind(p.operation_kind),
        operation_name: p.operation_name.clone(),
        requests: p
            .requests
            .iter()
            .map(|(k, r)| (k.clone(), request(r)))
            .collect(),
        created_at: timestamp(&p.created_at),
        request_state: p.request_state.clone(),
        deadline: p.deadline.as_ref().map(timestamp),
    }
}

/// WIT -> public pending round.
pub fn pending_round_back(p: wit::PendingRound) -> Converted<PendingElicitationRound> {
    Ok(PendingElicitationRound {
        created_at: datetime(&p.created_at)?,
        deadline: opt_datetime(&p.deadline)?,
        round_id: p.round_id,
        execution_id: p.execution_id,
        logical_operation_id: p.logical_operation_id,
        server: p.server,
        operation_kind: operation_kind_back(p.operation_kind),
        operation_name: p.operation_name,
        requests: p
            .requests
            .into_iter()
            .map(|(k, r)| Ok((k, request_back(r)?)))
            .collect::<Converted<_>>()?,
        request_state: p.request_state,
    })
}

/// Public -> WIT lease.
pub fn lease(l: &ManagedInputLease) -> wit::Lease {
    wit::Lease {
        owner_id: l.owner_id.clone(),
        lease_token: l.lease_token.clone(),
        expires_at: timestamp(&l.expires_at),
    }
}

/// WIT -> public lease.
pub fn lease_back(l: wit::Lease) -> Converted<ManagedInputLease> {
    Ok(ManagedInputLease {
        expires_at: datetime(&l.expires_at)?,
        owner_id: l.owner_id,
        lease_token: l.lease_token,
    })
}

/// WIT -> public responses.
pub fn responses_back(
    responses: Vec<(String, wit::ElicitationResponse)>,
) -> Converted<std::collections::BTreeMap<String, ElicitationResponse>> {
    responses
        .into_iter()
        .map(|(k, r)| {
            Ok((
                k,
                ElicitationResponse {
                    action: action_back(r.action),
                    content: r
                        .content
                        .as_deref()
                        .map(|c| parse(c, "content"))
                        .transpose()?,
                },
            ))
        })
        .collect()
}

/// Public -> WIT responses.
pub fn responses(
    responses: &std::collections::BTreeMap<String, ElicitationResponse>,
) -> Vec<(String, wit::ElicitationResponse)> {
    responses
        .iter()
        .map(|(k, r)| {
            (
                k.clone(),
                wit::ElicitationResponse {
                    action: action(r.action),
                    content: r.content.as_ref().map(Value::to_string),
                },
            )
        })
        .collect()
}

/// Public -> WIT owner claim.
pub fn owner_claim(c: &OwnerClaim) -> wit::OwnerClaim {
    wit::OwnerClaim {
        owner_id: c.owner_id.clone(),
        lease_ttl_ms: duration_ms(c.lease_ttl),
    }
}

/// A duration in whole milliseconds (saturating).
pub fn duration_ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Public -> WIT new round.
pub fn new_round(n: &NewRound) -> wit::NewRound {
    wit::NewRound {
        round_id: n.round_id.clone(),
        execution_id: n.execution_id.clone(),
        logical_operation_id: n.logical_operation_id.clone(),
        server: n.server.clone(),
        operation_kind: operation_kind(n.operation_kind),
        operation_name: n.operation_name.clone(),
        requests: n
            .requests
            .iter()
            .map(|(k, r)| (k.clone(), request(r)))
            .collect(),
        request_state: n.request_state.clone(),
        deadline: match n.deadline {
            Deadline::Default => wit::DeadlineChoice::DefaultDeadline,
            Deadline::None => wit::DeadlineChoice::NoDeadline,
            Deadline::At(t) => wit::DeadlineChoice::At(timestamp(&t)),
        },
        round_index: n.round_index,
        round_limit: n.round_limit,
        owner: n.owner.as_ref().map(owner_claim),
        operation_parameters: Value::Object(n.operation_parameters.clone()).to_string(),
        harness: wit::HarnessMetadata {
            session_id: n.harness.session_id.clone(),
            resume_token: n.harness.resume_token.clone(),
            turn_id: n.harness.turn_id.clone(),
        },
    }
}

/// A listing position after the row created at `created_at` with this id.
pub fn cursor(created_at: DateTime<Utc>, id: &str) -> wit::Cursor {
    wit::Cursor {
        created_at: timestamp(&created_at),
        id: id.to_string(),
    }
}

/// Public -> WIT list filter.
pub fn filter(f: &RoundFilter) -> wit_mi::ListFilter {
    wit_mi::ListFilter {
        execution_id: f.execution_id.clone(),
        status: f.status.map(status),
        limit: f.limit,
        after: None,
    }
}

/// WIT -> public record.
pub fn record_back(r: wit::ManagedInputRecord) -> Converted<ManagedInputRecord> {
    let parameters = match parse(&r.operation_parameters, "operation parameters")? {
        Value::Object(map) => map,
        _ => return Err(corrupt("operation parameters")),
    };
    Ok(ManagedInputRecord {
        pending: pending_round_back(r.pending)?,
        round_index: r.round_index,
        round_limit: r.round_limit,
        status: status_back(r.status),
        lease: r.lease.map(lease_back).transpose()?,
        responses: r.responses.map(responses_back).transpose()?,
        idempotency_key: r.idempotency_key,
        delivery_idempotency_key: r.delivery_idempotency_key,
        harness: HarnessMetadata {
            session_id: r.harness.session_id,
            resume_token: r.harness.resume_token,
            turn_id: r.harness.turn_id,
        },
        operation_parameters: parameters,
        delivery_attempts: r.delivery_attempts,
        timestamps: LifecycleTimestamps {
            created_at: datetime(&r.timestamps.created_at)?,
            updated_at: datetime(&r.timestamps.updated_at)?,
            response_validated_at: opt_datetime(&r.timestamps.response_validated_at)?,
            delivery_started_at: opt_datetime(&r.timestamps.delivery_started_at)?,
            delivered_at: opt_datetime(&r.timestamps.delivered_at)?,
            resolved_at: opt_datetime(&r.timestamps.resolved_at)?,
            failed_at: opt_datetime(&r.timestamps.failed_at)?,
        },
        failure: r.failure.map(|f| RoundFailure {
            code: failure_code_back(f.code),
            message: f.message,
        }),
    })
}

/// WIT -> public redacted response.
pub fn redacted_back(r: &wit::RedactedResponse) -> RedactedResponse {
    RedactedResponse {
        request_key: r.request_key.clone(),
        action: action_back(r.action),
        content_fields: r.content_fields.clone(),
        content_bytes: r.content_bytes,
    }
}

fn error_code_back(code: wit::ErrorCode) -> ErrorCode {
    use wit::ErrorCode as W;
    match code {
        W::EmptyRoundId => ErrorCode::EmptyRoundId,
        W::EmptyIdempotencyKey => ErrorCode::EmptyIdempotencyKey,
        W::InvalidId => ErrorCode::InvalidId,
        W::MalformedJson => ErrorCode::MalformedJson,
        W::PayloadTooLarge => ErrorCode::PayloadTooLarge,
        W::ResponseKeysMismatch => ErrorCode::ResponseKeysMismatch,
        W::InvalidResponse => ErrorCode::InvalidResponse,
        W::InvalidAction => ErrorCode::InvalidAction,
        W::ContentNotAllowed => ErrorCode::ContentNotAllowed,
        W::ContentRequired => ErrorCode::ContentRequired,
        W::SchemaViolation => ErrorCode::SchemaViolation,
        W::UnsupportedSchema => ErrorCode::UnsupportedSchema,
        W::InvalidRound => ErrorCode::InvalidRound,
        W::RoundIndexOutOfRange => ErrorCode::RoundIndexOutOfRange,
        W::InvalidDeadline => ErrorCode::InvalidDeadline,
        W::InvalidFailure => ErrorCode::InvalidFailure,
        W::InvalidLease => ErrorCode::InvalidLease,
        W::IdempotencyConflict => ErrorCode::IdempotencyConflict,
        W::LeaseHeld => ErrorCode::LeaseHeld,
        W::LeaseMismatch => ErrorCode::LeaseMismatch,
        W::LeaseExpired => ErrorCode::LeaseExpired,
        W::RoundExists => ErrorCode::RoundExists,
        W::ConcurrentUpdate => ErrorCode::ConcurrentUpdate,
        W::RoundNotFound => ErrorCode::RoundNotFound,
        W::InvalidTransition => ErrorCode::InvalidTransition,
        W::RoundTerminal => ErrorCode::RoundTerminal,
        W::DeliveredThenFailed => ErrorCode::DeliveredThenFailed,
        W::DeliveryUnconfirmed => ErrorCode::DeliveryUnconfirmed,
        W::DeadlineExceeded => ErrorCode::DeadlineExceeded,
        W::ExecutionNotFound => ErrorCode::ExecutionNotFound,
        W::ExecutionNotRunnable => ErrorCode::ExecutionNotRunnable,
        W::AmbiguousPendingRound => ErrorCode::AmbiguousPendingRound,
        W::RecoveryUnavailable => ErrorCode::RecoveryUnavailable,
        W::ReclaimUnsafe => ErrorCode::ReclaimUnsafe,
        W::StorageBusy => ErrorCode::StorageBusy,
        W::StorageFailure => ErrorCode::StorageFailure,
        W::CorruptRecord => ErrorCode::CorruptRecord,
    }
}

fn detail_back(d: &wit::ErrorDetail) -> ErrorDetail {
    ErrorDetail {
        code: error_code_back(d.code),
        message: d.message.clone(),
        request_key: d.request_key.clone(),
        field: d.field.clone(),
    }
}

/// WIT -> public error.
pub fn error_back(e: &wit::ManagedInputError) -> ManagedInputError {
    match e {
        wit::ManagedInputError::Validation(d) => ManagedInputValidationError {
            detail: detail_back(d),
        }
        .into(),
        wit::ManagedInputError::Conflict(d) => ManagedInputConflict {
            detail: detail_back(d),
        }
        .into(),
        wit::ManagedInputError::State(d) => ManagedInputStateError {
            detail: detail_back(d),
        }
        .into(),
        wit::ManagedInputError::Recovery(d) => ManagedInputRecoveryError {
            detail: detail_back(d),
        }
        .into(),
        wit::ManagedInputError::Storage(d) => StorageError {
            detail: detail_back(d),
        }
        .into(),
    }
}

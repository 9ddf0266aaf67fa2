//! The stored document of a round (format 1): everything the store keeps about it, the lease
//! token included (the host never reads it; callers never see it).

use super::values::{FailureCode, OperationKind, Timestamp};
use crate::m3::managed_input::types as wit;
use serde::{Deserialize, Serialize};

/// A round's document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundDocument {
    /// The format it was written in (absent: 1).
    #[serde(default = "super::first_format")]
    pub format: u32,
    pub pending: PendingRound,
    pub round_index: u32,
    pub round_limit: u32,
    pub status: Status,
    pub lease: Option<Lease>,
    pub responses: Option<Vec<(String, ElicitationResponse)>>,
    pub idempotency_key: Option<String>,
    pub delivery_idempotency_key: Option<String>,
    pub harness: HarnessMetadata,
    pub operation_parameters: String,
    pub delivery_attempts: u32,
    pub timestamps: LifecycleTimestamps,
    pub failure: Option<Failure>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingRound {
    pub round_id: String,
    pub execution_id: String,
    pub logical_operation_id: String,
    pub server: String,
    pub operation_kind: OperationKind,
    pub operation_name: String,
    pub requests: Vec<(String, ElicitationRequest)>,
    pub created_at: Timestamp,
    pub request_state: Option<String>,
    pub deadline: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ElicitationRequest {
    Form(FormRequest),
    Url(UrlRequest),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormRequest {
    pub message: String,
    pub requested_schema: String,
    pub context: RequestContext,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UrlRequest {
    pub message: String,
    pub url: String,
    pub elicitation_id: Option<String>,
    pub context: RequestContext,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestContext {
    pub meta: Option<String>,
    pub task: Option<String>,
    pub server: Option<String>,
    pub operation_kind: Option<OperationKind>,
    pub operation_name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Status {
    Pending,
    ResponseValidated,
    DeliveryStarted,
    Delivered,
    Resolved,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum ElicitationAction {
    Accept,
    Decline,
    Cancel,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitationResponse {
    pub action: ElicitationAction,
    pub content: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    pub owner_id: String,
    pub lease_token: String,
    pub expires_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarnessMetadata {
    pub session_id: Option<String>,
    pub resume_token: Option<String>,
    pub turn_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifecycleTimestamps {
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub response_validated_at: Option<Timestamp>,
    pub delivery_started_at: Option<Timestamp>,
    pub delivered_at: Option<Timestamp>,
    pub resolved_at: Option<Timestamp>,
    pub failed_at: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub code: FailureCode,
    pub message: String,
}

fn ts(t: Option<wit::Timestamp>) -> Option<Timestamp> {
    t.map(Timestamp::from)
}

fn wit_ts(t: Option<Timestamp>) -> Option<wit::Timestamp> {
    t.map(wit::Timestamp::from)
}

impl super::Document for RoundDocument {
    fn format(&self) -> u32 {
        self.format
    }
}

impl From<&wit::ManagedInputRecord> for RoundDocument {
    fn from(r: &wit::ManagedInputRecord) -> Self {
        let p = &r.pending;
        RoundDocument {
            format: super::FORMAT,
            pending: PendingRound {
                round_id: p.round_id.clone(),
                execution_id: p.execution_id.clone(),
                logical_operation_id: p.logical_operation_id.clone(),
                server: p.server.clone(),
                operation_kind: p.operation_kind.into(),
                operation_name: p.operation_name.clone(),
                requests: p
                    .requests
                    .iter()
                    .map(|(key, request)| (key.clone(), request.into()))
                    .collect(),
                created_at: p.created_at.into(),
                request_state: p.request_state.clone(),
                deadline: ts(p.deadline),
            },
            round_index: r.round_index,
            round_limit: r.round_limit,
            status: r.status.into(),
            lease: r.lease.as_ref().map(|l| Lease {
                owner_id: l.owner_id.clone(),
                lease_token: l.lease_token.clone(),
                expires_at: l.expires_at.into(),
            }),
            responses: r.responses.as_ref().map(|responses| {
                responses
                    .iter()
                    .map(|(key, response)| {
                        (
                            key.clone(),
                            ElicitationResponse {
                                action: response.action.into(),
                                content: response.content.clone(),
                            },
                        )
                    })
                    .collect()
            }),
            idempotency_key: r.idempotency_key.clone(),
            delivery_idempotency_key: r.delivery_idempotency_key.clone(),
            harness: HarnessMetadata {
                session_id: r.harness.session_id.clone(),
                resume_token: r.harness.resume_token.clone(),
                turn_id: r.harness.turn_id.clone(),
            },
            operation_parameters: r.operation_parameters.clone(),
            delivery_attempts: r.delivery_attempts,
            timestamps: LifecycleTimestamps {
                created_at: r.timestamps.created_at.into(),
                updated_at: r.timestamps.updated_at.into(),
                response_validated_at: ts(r.timestamps.response_validated_at),
                delivery_started_at: ts(r.timestamps.delivery_started_at),
                delivered_at: ts(r.timestamps.delivered_at),
                resolved_at: ts(r.timestamps.resolved_at),
                failed_at: ts(r.timestamps.failed_at),
            },
            failure: r.failure.as_ref().map(|f| Failure {
                code: f.code.into(),
                message: f.message.clone(),
            }),
        }
    }
}

impl From<RoundDocument> for wit::ManagedInputRecord {
    fn from(d: RoundDocument) -> Self {
        let p = d.pending;
        wit::ManagedInputRecord {
            pending: wit::PendingRound {
                round_id: p.round_id,
                execution_id: p.execution_id,
                logical_operation_id: p.logical_operation_id,
                server: p.server,
                operation_kind: p.operation_kind.into(),
                operation_name: p.operation_name,
                requests: p
                    .requests
                    .into_iter()
                    .map(|(key, request)| (key, request.into()))
                    .collect(),
                created_at: p.created_at.into(),
                request_state: p.request_state,
                deadline: wit_ts(p.deadline),
            },
            round_index: d.round_index,
            round_limit: d.round_limit,
            status: d.status.into(),
            lease: d.lease.map(|l| wit::Lease {
                owner_id: l.owner_id,
                lease_token: l.lease_token,
                expires_at: l.expires_at.into(),
            }),
            responses: d.responses.map(|responses| {
                responses
                    .into_iter()
                    .map(|(key, response)| {
                        (
                            key,
                            wit::ElicitationResponse {
                                action: response.action.into(),
                                content: response.content,
                            },
                        )
                    })
                    .collect()
            }),
            idempotency_key: d.idempotency_key,
            delivery_idempotency_key: d.delivery_idempotency_key,
            harness: wit::HarnessMetadata {
                session_id: d.harness.session_id,
                resume_token: d.harness.resume_token,
                turn_id: d.harness.turn_id,
            },
            operation_parameters: d.operation_parameters,
            delivery_attempts: d.delivery_attempts,
            timestamps: wit::LifecycleTimestamps {
                created_at: d.timestamps.created_at.into(),
                updated_at: d.timestamps.updated_at.into(),
                response_validated_at: wit_ts(d.timestamps.response_validated_at),
                delivery_started_at: wit_ts(d.timestamps.delivery_started_at),
                delivered_at: wit_ts(d.timestamps.delivered_at),
                resolved_at: wit_ts(d.timestamps.resolved_at),
                failed_at: wit_ts(d.timestamps.failed_at),
            },
            failure: d.failure.map(|f| wit::Failure {
                code: f.code.into(),
                message: f.message,
            }),
        }
    }
}

impl From<&wit::ElicitationRequest> for ElicitationRequest {
    fn from(r: &wit::ElicitationRequest) -> Self {
        match r {
            wit::ElicitationRequest::Form(f) => ElicitationRequest::Form(FormRequest {
                message: f.message.clone(),
                requested_schema: f.requested_schema.clone(),
                context: (&f.context).into(),
            }),
            wit::ElicitationRequest::Url(u) => ElicitationRequest::Url(UrlRequest {
                message: u.message.clone(),
                url: u.url.clone(),
                elicitation_id: u.elicitation_id.clone(),
                context: (&u.context).into(),
            }),
        }
    }
}

impl From<ElicitationRequest> for wit::ElicitationRequest {
    fn from(r: ElicitationRequest) -> Self {
        match r {
            ElicitationRequest::Form(f) => wit::ElicitationRequest::Form(wit::FormRequest {
                message: f.message,
                requested_schema: f.requested_schema,
                context: f.context.into(),
            }),
            ElicitationRequest::Url(u) => wit::ElicitationRequest::Url(wit::UrlRequest {
                message: u.message,
                url: u.url,
                elicitation_id: u.elicitation_id,
                context: u.context.into(),
            }),
        }
    }
}

impl From<&wit::RequestContext> for RequestContext {
    fn from(c: &wit::RequestContext) -> Self {
        RequestContext {
            meta: c.meta.clone(),
            task: c.task.clone(),
            server: c.server.clone(),
            operation_kind: c.operation_kind.map(OperationKind::from),
            operation_name: c.operation_name.clone(),
        }
    }
}

impl From<RequestContext> for wit::RequestContext {
    fn from(c: RequestContext) -> Self {
        wit::RequestContext {
            meta: c.meta,
            task: c.task,
            server: c.server,
            operation_kind: c.operation_kind.map(wit::OperationKind::from),
            operation_name: c.operation_name,
        }
    }
}

impl From<wit::Status> for Status {
    fn from(s: wit::Status) -> Self {
        match s {
            wit::Status::Pending => Status::Pending,
            wit::Status::ResponseValidated => Status::ResponseValidated,
            wit::Status::DeliveryStarted => Status::DeliveryStarted,
            wit::Status::Delivered => Status::Delivered,
            wit::Status::Resolved => Status::Resolved,
            wit::Status::Failed => Status::Failed,
        }
    }
}

impl From<Status> for wit::Status {
    fn from(s: Status) -> Self {
        match s {
            Status::Pending => wit::Status::Pending,
            Status::ResponseValidated => wit::Status::ResponseValidated,
            Status::DeliveryStarted => wit::Status::DeliveryStarted,
            Status::Delivered => wit::Status::Delivered,
            Status::Resolved => wit::Status::Resolved,
            Status::Failed => wit::Status::Failed,
        }
    }
}

impl From<wit::ElicitationAction> for ElicitationAction {
    fn from(a: wit::ElicitationAction) -> Self {
        match a {
            wit::ElicitationAction::Accept => ElicitationAction::Accept,
            wit::ElicitationAction::Decline => ElicitationAction::Decline,
            wit::ElicitationAction::Cancel => ElicitationAction::Cancel,
        }
    }
}

impl From<ElicitationAction> for wit::ElicitationAction {
    fn from(a: ElicitationAction) -> Self {
        match a {
            ElicitationAction::Accept => wit::ElicitationAction::Accept,
            ElicitationAction::Decline => wit::ElicitationAction::Decline,
            ElicitationAction::Cancel => wit::ElicitationAction::Cancel,
        }
    }
}

//! What the store keeps about a round: status, lease, answers and lifecycle.

use crate::api::response::ElicitationResponse;
use crate::api::round::{HarnessMetadata, PendingElicitationRound};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// The lifecycle of a round. `Resolved` and `Failed` are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ManagedInputStatus {
    /// Waiting for an answer.
    Pending,
    /// An answer passed validation and is durable.
    ResponseValidated,
    /// Committed before the answer is written to the server; it is never sent again.
    DeliveryStarted,
    /// Written to the server (at most once).
    Delivered,
    /// The server replied to the delivered answer.
    Resolved,
    /// Ended without resolution; see the record's `failure`.
    Failed,
}

impl ManagedInputStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [ManagedInputStatus; 6] = [
        Self::Pending,
        Self::ResponseValidated,
        Self::DeliveryStarted,
        Self::Delivered,
        Self::Resolved,
        Self::Failed,
    ];

    /// The specification's name (`pending`, `response_validated`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::ResponseValidated => "response_validated",
            Self::DeliveryStarted => "delivery_started",
            Self::Delivered => "delivered",
            Self::Resolved => "resolved",
            Self::Failed => "failed",
        }
    }
}

impl fmt::Display for ManagedInputStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a round failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    /// The execution or the request was cancelled.
    Cancelled,
    /// The deadline passed.
    DeadlineExceeded,
    /// The operation asked for more rounds than allowed.
    RoundLimitExceeded,
    /// The server answered the delivery with an error, or died.
    ServerError,
    /// The server rejected the echoed `requestState`.
    InvalidRequestState,
    /// Human input mode `fail`.
    ElicitationUnhandled,
    /// The owning worker disappeared; the round can never be answered or resumed.
    RecoveryUnavailable,
    /// The server stopped waiting (it cancelled the request, or completed or failed the operation
    /// while the round was open); an answer committed before that is kept but never delivered.
    RequestWithdrawn,
}

impl FailureCode {
    /// The code as written in JSON (`snake_case`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cancelled => "cancelled",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::RoundLimitExceeded => "round_limit_exceeded",
            Self::ServerError => "server_error",
            Self::InvalidRequestState => "invalid_request_state",
            Self::ElicitationUnhandled => "elicitation_unhandled",
            Self::RecoveryUnavailable => "recovery_unavailable",
            Self::RequestWithdrawn => "request_withdrawn",
        }
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure: code and a message free of answers and secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundFailure {
    /// Why.
    pub code: FailureCode,
    /// Details.
    pub message: String,
}

/// The compare-and-set worker lease (the specification's `ManagedInputLease`). `Debug` never
/// shows the token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagedInputLease {
    /// The worker that holds the lease.
    pub owner_id: String,
    /// The secret every write of that worker presents.
    pub lease_token: String,
    /// When the lease lapses unless renewed.
    pub expires_at: DateTime<Utc>,
}

impl fmt::Debug for ManagedInputLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagedInputLease")
            .field("owner_id", &self.owner_id)
            .field("lease_token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// When each lifecycle step happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleTimestamps {
    /// Creation.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// `pending` -> `response_validated`.
    pub response_validated_at: Option<DateTime<Utc>>,
    /// -> `delivery_started`.
    pub delivery_started_at: Option<DateTime<Utc>>,
    /// -> `delivered`.
    pub delivered_at: Option<DateTime<Utc>>,
    /// -> `resolved`.
    pub resolved_at: Option<DateTime<Utc>>,
    /// -> `failed`.
    pub failed_at: Option<DateTime<Utc>>,
}

/// Everything the store keeps about a round (the specification's `ManagedInputRecord`).
/// `Debug` never shows answers, lease tokens or idempotency keys.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct ManagedInputRecord {
    /// The round as callers see it.
    pub pending: PendingElicitationRound,
    /// Zero-based index of the round within its operation.
    pub round_index: u32,
    /// How many rounds the operation may have.
    pub round_limit: u32,
    /// Where the round is in its lifecycle.
    pub status: ManagedInputStatus,
    /// The current worker lease.
    pub lease: Option<ManagedInputLease>,
    /// The validated answers, once submitted.
    pub responses: Option<BTreeMap<String, ElicitationResponse>>,
    /// The idempotency key persisted with the answers.
    pub idempotency_key: Option<String>,
    /// The key the worker used to start delivery.
    pub delivery_idempotency_key: Option<String>,
    /// Harness session metadata.
    pub harness: HarnessMetadata,
    /// The operation's parameters (empty by default).
    pub operation_parameters: serde_json::Map<String, Value>,
    /// How many times delivery was started (never more than 1).
    pub delivery_attempts: u32,
    /// Lifecycle timestamps.
    pub timestamps: LifecycleTimestamps,
    /// Why the round failed, if it did.
    pub failure: Option<RoundFailure>,
}

impl fmt::Debug for ManagedInputRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |o: &Option<String>| o.as_ref().map(|_| "<redacted>");
        f.debug_struct("ManagedInputRecord")
            .field("pending", &self.pending)
            .field("round_index", &self.round_index)
            .field("round_limit", &self.round_limit)
            .field("status", &self.status)
            .field("lease", &self.lease)
            .field("responses", &self.responses)
            .field("idempotency_key", &redacted(&self.idempotency_key))
            .field(
                "delivery_idempotency_key",
                &redacted(&self.delivery_idempotency_key),
            )
            .field("harness", &self.harness)
            .field(
                "operation_parameters",
                &self.operation_parameters.keys().collect::<Vec<_>>(),
            )
            .field("delivery_attempts", &self.delivery_attempts)
            .field("timestamps", &self.timestamps)
            .field("failure", &self.failure)
            .finish()
    }
}

/// Which rounds `list_rounds` returns (oldest first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundFilter {
    /// Only this execution's rounds.
    pub execution_id: Option<String>,
    /// Only rounds in this status.
    pub status: Option<ManagedInputStatus>,
    /// At most this many.
    pub limit: Option<u32>,
}

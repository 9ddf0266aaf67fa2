//! Values shared by the stored documents.

use crate::m3::managed_input::types as wit;
use serde::{Deserialize, Serialize};

/// A UTC instant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timestamp {
    pub seconds: i64,
    pub nanoseconds: u32,
}

impl From<wit::Timestamp> for Timestamp {
    fn from(t: wit::Timestamp) -> Self {
        Timestamp {
            seconds: t.seconds,
            nanoseconds: t.nanoseconds,
        }
    }
}

impl From<Timestamp> for wit::Timestamp {
    fn from(t: Timestamp) -> Self {
        wit::Timestamp {
            seconds: t.seconds,
            nanoseconds: t.nanoseconds,
        }
    }
}

/// The MCP operation category.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum OperationKind {
    Tool,
    Prompt,
    Resource,
}

impl From<wit::OperationKind> for OperationKind {
    fn from(k: wit::OperationKind) -> Self {
        match k {
            wit::OperationKind::Tool => OperationKind::Tool,
            wit::OperationKind::Prompt => OperationKind::Prompt,
            wit::OperationKind::Resource => OperationKind::Resource,
        }
    }
}

impl From<OperationKind> for wit::OperationKind {
    fn from(k: OperationKind) -> Self {
        match k {
            OperationKind::Tool => wit::OperationKind::Tool,
            OperationKind::Prompt => wit::OperationKind::Prompt,
            OperationKind::Resource => wit::OperationKind::Resource,
        }
    }
}

/// Why a round failed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum FailureCode {
    Cancelled,
    DeadlineExceeded,
    RoundLimitExceeded,
    ServerError,
    InvalidRequestState,
    ElicitationUnhandled,
    RecoveryUnavailable,
    RequestWithdrawn,
}

impl From<wit::FailureCode> for FailureCode {
    fn from(c: wit::FailureCode) -> Self {
        use wit::FailureCode as W;
        match c {
            W::Cancelled => FailureCode::Cancelled,
            W::DeadlineExceeded => FailureCode::DeadlineExceeded,
            W::RoundLimitExceeded => FailureCode::RoundLimitExceeded,
            W::ServerError => FailureCode::ServerError,
            W::InvalidRequestState => FailureCode::InvalidRequestState,
            W::ElicitationUnhandled => FailureCode::ElicitationUnhandled,
            W::RecoveryUnavailable => FailureCode::RecoveryUnavailable,
            W::RequestWithdrawn => FailureCode::RequestWithdrawn,
        }
    }
}

impl From<FailureCode> for wit::FailureCode {
    fn from(c: FailureCode) -> Self {
        use wit::FailureCode as W;
        match c {
            FailureCode::Cancelled => W::Cancelled,
            FailureCode::DeadlineExceeded => W::DeadlineExceeded,
            FailureCode::RoundLimitExceeded => W::RoundLimitExceeded,
            FailureCode::ServerError => W::ServerError,
            FailureCode::InvalidRequestState => W::InvalidRequestState,
            FailureCode::ElicitationUnhandled => W::ElicitationUnhandled,
            FailureCode::RecoveryUnavailable => W::RecoveryUnavailable,
            FailureCode::RequestWithdrawn => W::RequestWithdrawn,
        }
    }
}

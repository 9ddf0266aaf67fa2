//! Answers to requests, and their redacted projection.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// What the human did with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElicitationAction {
    /// Accepted (with content in form mode; consent only in URL mode).
    Accept,
    /// Declined.
    Decline,
    /// Dismissed without a choice.
    Cancel,
}

/// The answer to one request. `Debug` never shows the content.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitationResponse {
    /// What was done.
    pub action: ElicitationAction,
    /// The form content (`accept` in form mode only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
}

impl ElicitationResponse {
    /// An accept with form content.
    pub fn accept(content: Value) -> Self {
        Self {
            action: ElicitationAction::Accept,
            content: Some(content),
        }
    }

    /// A URL accept: consent only, no content.
    pub fn accept_url() -> Self {
        Self {
            action: ElicitationAction::Accept,
            content: None,
        }
    }

    /// A decline.
    pub fn decline() -> Self {
        Self {
            action: ElicitationAction::Decline,
            content: None,
        }
    }

    /// A cancel.
    pub fn cancel() -> Self {
        Self {
            action: ElicitationAction::Cancel,
            content: None,
        }
    }
}

impl fmt::Debug for ElicitationResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ElicitationResponse")
            .field("action", &self.action)
            .field("content", &self.content.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The diagnostic view of one answer: what was done, never the values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedactedResponse {
    /// The request key.
    pub request_key: String,
    /// What was done.
    pub action: ElicitationAction,
    /// Field names present in the content, sorted.
    pub content_fields: Vec<String>,
    /// Length of the canonical content JSON in bytes. (No digest of the content: an unkeyed
    /// hash of a short answer is reversed by guessing.)
    pub content_bytes: u32,
}

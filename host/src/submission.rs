//! Submission checks (the specification's `ModelValidationError`), decided by the component.

use crate::bindings::exports::m3::managed_input::policy as wit;

/// How a submission handles an MCP elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HumanInput {
    /// The default: an elicitation fails the operation (or the agent's plan answers it).
    #[default]
    Fail,
    /// Persist the round and wait for an answer.
    Managed,
}

/// A submission that cannot run: an unknown human-input value, managed input with an
/// elicitation plan or without a managed-input store, or a malformed tool allow-list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ModelValidationError: {message}")]
pub struct ModelValidationError {
    /// What is wrong.
    pub message: String,
}

impl From<wit::SubmissionError> for ModelValidationError {
    fn from(e: wit::SubmissionError) -> Self {
        Self { message: e.message }
    }
}

/// Public -> WIT human input.
pub(crate) fn to_wit(mode: HumanInput) -> wit::HumanInput {
    match mode {
        HumanInput::Fail => wit::HumanInput::Fail,
        HumanInput::Managed => wit::HumanInput::Managed,
    }
}

/// WIT -> public human input.
pub(crate) fn from_wit(mode: wit::HumanInput) -> HumanInput {
    match mode {
        wit::HumanInput::Fail => HumanInput::Fail,
        wit::HumanInput::Managed => HumanInput::Managed,
    }
}

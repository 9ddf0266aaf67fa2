//! Constructors for the typed errors of the specification.
//!
//! Messages name ids, request keys, field names, lengths and hashes only: never answer content,
//! lease tokens or idempotency keys.

use crate::m3::managed_input::types::{ErrorCode, ErrorDetail, ManagedInputError};

/// Result of a component operation (its error is a typed `ManagedInputError` unless named).
pub type Result<T, E = ManagedInputError> = std::result::Result<T, E>;

fn detail(code: ErrorCode, message: impl Into<String>) -> ErrorDetail {
    ErrorDetail {
        code,
        message: message.into(),
        request_key: None,
        field: None,
    }
}

/// A `ManagedInputValidationError`.
pub fn validation(code: ErrorCode, message: impl Into<String>) -> ManagedInputError {
    ManagedInputError::Validation(detail(code, message))
}

/// A `ManagedInputValidationError` about one request key and, optionally, one content field.
pub fn validation_at(
    code: ErrorCode,
    request_key: &str,
    field: Option<&str>,
    message: impl Into<String>,
) -> ManagedInputError {
    ManagedInputError::Validation(ErrorDetail {
        code,
        message: message.into(),
        request_key: Some(bounded(request_key)),
        field: field.map(bounded),
    })
}

/// A `ManagedInputConflict`.
pub fn conflict(code: ErrorCode, message: impl Into<String>) -> ManagedInputError {
    ManagedInputError::Conflict(detail(code, message))
}

/// A `ManagedInputStateError`.
pub fn state(code: ErrorCode, message: impl Into<String>) -> ManagedInputError {
    ManagedInputError::State(detail(code, message))
}

/// A `ManagedInputRecoveryError`.
pub fn recovery(code: ErrorCode, message: impl Into<String>) -> ManagedInputError {
    ManagedInputError::Recovery(detail(code, message))
}

/// A storage failure reported by the host.
pub fn storage(code: ErrorCode, message: impl Into<String>) -> ManagedInputError {
    ManagedInputError::Storage(detail(code, message))
}

/// Caller-chosen names (request keys, field names) shown in messages are cut to a bounded length.
pub fn bounded(name: &str) -> String {
    cut(name, 64)
}

/// `text` cut to its first `max` bytes (on a character boundary), marked `...` when cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

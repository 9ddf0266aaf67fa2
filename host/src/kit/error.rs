//! The kit's error type.

use crate::api::error::{EngineError, ManagedInputError};
use crate::api::execution::OperationTimeout;
use crate::api::execution_store::ExecutionStoreError;
use crate::api::submission::ModelValidationError;

/// Errors of the execution API. Match them flatly by [`ExecutionError::code`] (the
/// specification's codes, `operation_timeout`, `invalid_submission`, ...) or
/// [`ExecutionError::kind_name`] (the specification's kinds); `Debug` (what `?` out of `main`
/// prints) reads as `Kind (code): message`.
#[derive(thiserror::Error)]
pub enum ExecutionError {
    /// The submission cannot run.
    #[error(transparent)]
    ModelValidation(#[from] ModelValidationError),
    /// A managed-input error (validation, conflict, state, recovery, storage, engine).
    #[error(transparent)]
    ManagedInput(#[from] ManagedInputError),
    /// A wait ran out.
    #[error(transparent)]
    OperationTimeout(#[from] OperationTimeout),
    /// The execution store failed or was closed.
    #[error(transparent)]
    Store(#[from] ExecutionStoreError),
    /// The kit's tokio runtime failed (a task panicked or was cancelled).
    #[error("EngineError: the kit's runtime failed: {0}")]
    Runtime(String),
}

impl From<EngineError> for ExecutionError {
    fn from(e: EngineError) -> Self {
        Self::ManagedInput(ManagedInputError::Engine(e))
    }
}

impl ExecutionError {
    /// The machine-readable reason, one flat code for every error: the component's for a
    /// managed-input error (`schema_violation`, `idempotency_conflict`, `round_terminal`,
    /// `storage_busy`, ...), `invalid_submission` for a submission that cannot run,
    /// `operation_timeout` for a wait that ran out, the store's (`store_closed`,
    /// `incompatible_database`, ...) and `engine_error` for a fault of the engine itself.
    pub fn code(&self) -> &'static str {
        match self {
            Self::ModelValidation(_) => "invalid_submission",
            Self::ManagedInput(e) => e.code().map_or("engine_error", |c| c.as_str()),
            Self::OperationTimeout(_) => "operation_timeout",
            Self::Store(e) => e.code(),
            Self::Runtime(_) => "engine_error",
        }
    }

    /// The specification's name of the error's kind: `ModelValidationError`,
    /// `ManagedInputValidationError`, `ManagedInputConflict`, `ManagedInputStateError`,
    /// `ManagedInputRecoveryError`, `OperationTimeout`, `StorageError` or `EngineError`.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::ModelValidation(_) => "ModelValidationError",
            Self::ManagedInput(e) => e.kind_name(),
            Self::OperationTimeout(_) => "OperationTimeout",
            Self::Store(e) => e.kind_name(),
            Self::Runtime(_) => "EngineError",
        }
    }
}

impl std::fmt::Debug for ExecutionError {
    /// `Kind (code): message`, what a `main` returning this error prints. The message is the
    /// `Display` text without the kind it may start with; it never holds an answer, a key or a
    /// lease token (no error text does).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = self.kind_name();
        let text = self.to_string();
        let message = text
            .strip_prefix(kind)
            .and_then(|rest| rest.strip_prefix(": "))
            .unwrap_or(&text);
        write!(f, "{kind} ({}): {message}", self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::error::{ErrorCode, ErrorDetail, ManagedInputValidationError};
    use crate::api::execution::TimeoutCause;

    /// Every kind the kit can return has one flat code and the specification's kind name, and
    /// its `Debug` is `Kind (code): message`.
    #[test]
    fn every_execution_error_has_one_flat_code_and_its_kind() {
        let validation =
            ExecutionError::from(ManagedInputError::Validation(ManagedInputValidationError {
                detail: ErrorDetail {
                    code: ErrorCode::PayloadTooLarge,
                    message: "responses are too large".into(),
                    request_key: Some("shipping_address".into()),
                    field: None,
                },
            }));
        assert_eq!(validation.code(), "payload_too_large");
        assert_eq!(validation.kind_name(), "ManagedInputValidationError");
        let shown = format!("{validation:?}");
        assert!(
            shown.starts_with("ManagedInputValidationError (payload_too_large): "),
            "{shown}"
        );
        assert!(
            !shown.contains("detail") && !shown.contains("Validation("),
            "{shown}"
        );
        let cases: Vec<(ExecutionError, &str, &str)> = vec![
            (
                ModelValidationError {
                    message: "no such tool".into(),
                }
                .into(),
                "invalid_submission",
                "ModelValidationError",
            ),
            (
                OperationTimeout {
                    execution_id: "exec-1".into(),
                    cause: TimeoutCause::Wait(std::time::Duration::from_secs(1)),
                    result: None,
                }
                .into(),
                "operation_timeout",
                "OperationTimeout",
            ),
            (
                ExecutionStoreError::Closed.into(),
                "store_closed",
                "StorageError",
            ),
            (
                ExecutionError::Runtime("a task panicked".into()),
                "engine_error",
                "EngineError",
            ),
        ];
        for (error, code, kind) in cases {
            assert_eq!((error.code(), error.kind_name()), (code, kind), "{error}");
            assert!(
                format!("{error:?}").starts_with(&format!("{kind} ({code}): ")),
                "{error:?}"
            );
        }
    }
}

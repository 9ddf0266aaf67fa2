//! The kit's error type.

use crate::api::error::{EngineError, ManagedInputError};
use crate::api::execution::OperationTimeout;
use crate::api::execution_store::ExecutionStoreError;
use crate::api::submission::ModelValidationError;

/// Errors of the execution API.
#[derive(Debug, thiserror::Error)]
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

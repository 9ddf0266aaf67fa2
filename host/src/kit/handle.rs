//! Execution handles: read the pending round, answer it, watch and cancel the execution.

use super::execution::{
    ExecutionError, ExecutionResult, ExecutionState, ExecutionStatus, OperationTimeout, state_back,
};
use crate::response::ElicitationResponse;
use crate::round::PendingElicitationRound;
use crate::worker::Executions;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// What the worker task reports when it ends.
pub(crate) type WorkerEnd = Option<Result<(), String>>;

pub(crate) struct Shared {
    pub execution_id: String,
    pub executions: Arc<Executions>,
    pub wake: Arc<Notify>,
    pub worker: watch::Receiver<WorkerEnd>,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ExecutionError> + Send + 'static,
) -> Result<T, ExecutionError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ExecutionError::Runtime(e.to_string()))?
}

/// An execution, for async callers (tokio).
#[derive(Clone)]
pub struct AsyncExecutionHandle {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for AsyncExecutionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncExecutionHandle")
            .field("execution_id", &self.shared.execution_id)
            .finish_non_exhaustive()
    }
}

impl AsyncExecutionHandle {
    /// The execution's id.
    pub fn execution_id(&self) -> &str {
        &self.shared.execution_id
    }

    /// The execution's single pending round, or `None`. More than one pending round is a
    /// `ManagedInputStateError`.
    pub async fn pending_elicitation(
        &self,
    ) -> Result<Option<PendingElicitationRound>, ExecutionError> {
        let shared = self.shared.clone();
        blocking(move || Ok(shared.executions.pending_round(&shared.execution_id)?)).await
    }

    /// Validates and commits answers to one of this execution's rounds, then wakes its worker,
    /// which delivers them once. `round_id` and `idempotency_key` must be non-empty.
    pub async fn respond_elicitation(
        &self,
        round_id: &str,
        responses: BTreeMap<String, ElicitationResponse>,
        idempotency_key: &str,
    ) -> Result<(), ExecutionError> {
        let text = serde_json::to_string(&responses)
            .map_err(|e| ExecutionError::Runtime(format!("responses cannot be encoded: {e}")))?;
        let shared = self.shared.clone();
        let (round_id, key) = (round_id.to_string(), idempotency_key.to_string());
        blocking(move || {
            shared
                .executions
                .respond(&shared.execution_id, &round_id, &text, &key)?;
            shared.wake.notify_one();
            Ok(())
        })
        .await
    }

    /// The execution's lifecycle and, once finished, its outcome.
    pub async fn snapshot(&self) -> Result<ExecutionState, ExecutionError> {
        let shared = self.shared.clone();
        blocking(move || snapshot(&shared)).await
    }

    /// Waits for the terminal result; `OperationTimeout` when `timeout` (if any) runs out first.
    pub async fn result(
        &self,
        timeout: Option<Duration>,
    ) -> Result<ExecutionResult, ExecutionError> {
        let wait = self.finished();
        let state = match timeout {
            Some(limit) => tokio::time::timeout(limit, wait).await.map_err(|_| {
                ExecutionError::OperationTimeout(OperationTimeout {
                    execution_id: self.shared.execution_id.clone(),
                    waited: limit,
                })
            })??,
            None => wait.await?,
        };
        let outcome = state
            .outcome
            .ok_or_else(|| ExecutionError::Runtime("a finished execution has no outcome".into()))?;
        Ok(ExecutionResult {
            execution_id: state.execution_id,
            outcome,
        })
    }

    async fn finished(&self) -> Result<ExecutionState, ExecutionError> {
        let mut worker = self.shared.worker.clone();
        loop {
            let state = self.snapshot().await?;
            if state.lifecycle == ExecutionStatus::Finished {
                return Ok(state);
            }
            let ended = worker.borrow_and_update().clone();
            if let Some(Err(message)) = ended {
                return Err(ExecutionError::Runtime(message));
            }
            if ended.is_some() {
                // The worker ended without finishing it (lost its lease): recovery finishes it.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            let _ = tokio::time::timeout(Duration::from_millis(250), worker.changed()).await;
        }
    }

    /// Cancels the execution: its open round ends `failed` with `cancelled`, the server gets
    /// `cancel` for a pending request and `notifications/cancelled` for the call.
    pub async fn cancel(&self) -> Result<(), ExecutionError> {
        let shared = self.shared.clone();
        blocking(move || {
            shared.executions.request_cancel(&shared.execution_id)?;
            shared.wake.notify_one();
            Ok(())
        })
        .await
    }
}

fn snapshot(shared: &Shared) -> Result<ExecutionState, ExecutionError> {
    Ok(state_back(
        &shared.executions.snapshot(&shared.execution_id)?,
    ))
}

/// An execution, for blocking callers.
#[derive(Debug, Clone)]
pub struct ExecutionHandle {
    pub(crate) inner: AsyncExecutionHandle,
    pub(crate) runtime: Arc<tokio::runtime::Runtime>,
}

impl ExecutionHandle {
    /// The execution's id.
    pub fn execution_id(&self) -> &str {
        self.inner.execution_id()
    }

    /// See [`AsyncExecutionHandle::pending_elicitation`].
    pub fn pending_elicitation(&self) -> Result<Option<PendingElicitationRound>, ExecutionError> {
        self.runtime.block_on(self.inner.pending_elicitation())
    }

    /// See [`AsyncExecutionHandle::respond_elicitation`].
    pub fn respond_elicitation(
        &self,
        round_id: &str,
        responses: BTreeMap<String, ElicitationResponse>,
        idempotency_key: &str,
    ) -> Result<(), ExecutionError> {
        self.runtime.block_on(
            self.inner
                .respond_elicitation(round_id, responses, idempotency_key),
        )
    }

    /// See [`AsyncExecutionHandle::snapshot`].
    pub fn snapshot(&self) -> Result<ExecutionState, ExecutionError> {
        self.runtime.block_on(self.inner.snapshot())
    }

    /// See [`AsyncExecutionHandle::result`].
    pub fn result(&self, timeout: Option<Duration>) -> Result<ExecutionResult, ExecutionError> {
        self.runtime.block_on(self.inner.result(timeout))
    }

    /// See [`AsyncExecutionHandle::cancel`].
    pub fn cancel(&self) -> Result<(), ExecutionError> {
        self.runtime.block_on(self.inner.cancel())
    }
}

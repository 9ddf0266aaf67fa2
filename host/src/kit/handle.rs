//! Execution handles: read the pending round, answer it, watch and cancel the execution.

use super::ExecutionError;
use crate::api::error::ManagedInputError;
use crate::api::execution::{
    ExecutionResult, ExecutionState, ExecutionStatus, FailureKind, OperationTimeout, TimeoutCause,
};
use crate::api::response::ElicitationResponse;
use crate::api::round::PendingElicitationRound;
use crate::worker::Executions;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// What the worker task reports when it ends (its error keeps its type).
pub(crate) type WorkerEnd = Option<Result<(), ManagedInputError>>;

pub(crate) struct Shared {
    pub execution_id: String,
    pub executions: Arc<Executions>,
    pub wake: Arc<Notify>,
    pub worker: watch::Receiver<WorkerEnd>,
    /// For a handle whose worker runs elsewhere: keeps `worker` open (it never reports).
    pub _no_worker: Option<watch::Sender<WorkerEnd>>,
}

impl Shared {
    /// A handle's state for an execution whose worker is not this kit's.
    pub(crate) fn attached(execution_id: &str, executions: Arc<Executions>) -> Self {
        let (sender, worker) = watch::channel(None);
        Self {
            execution_id: execution_id.to_string(),
            executions,
            wake: Arc::new(Notify::new()),
            worker,
            _no_worker: Some(sender),
        }
    }
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
    /// which delivers them once, or fails the round saying why (the server stopped waiting, a
    /// deadline, a cancel). `round_id` and `idempotency_key` must be non-empty.
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

    /// The execution's diagnostics: its harness's events (Codex: MCP server start-up,
    /// approvals, commands, model errors) and, once it failed, its harness's stderr tail.
    pub async fn diagnostics(&self) -> Result<crate::ExecutionDiagnostics, ExecutionError> {
        let shared = self.shared.clone();
        blocking(move || Ok(shared.executions.diagnostics(&shared.execution_id)?)).await
    }

    /// Waits for the terminal result, through the store (the worker may run in another
    /// process). `Err(OperationTimeout)` when `timeout` (if any) runs out first, and when the
    /// execution ended because a deadline passed (a round's, or a Codex turn's): that error
    /// carries the execution's result, so nothing of it is lost. A worker that failed reports
    /// its own typed error.
    pub async fn result(
        &self,
        timeout: Option<Duration>,
    ) -> Result<ExecutionResult, ExecutionError> {
        let wait = self.finished();
        let state = match timeout {
            Some(limit) => tokio::time::timeout(limit, wait).await.map_err(|_| {
                ExecutionError::OperationTimeout(OperationTimeout {
                    execution_id: self.shared.execution_id.clone(),
                    cause: TimeoutCause::Wait(limit),
                    result: None,
                })
            })??,
            None => wait.await?,
        };
        let outcome = state.outcome.ok_or_else(|| {
            ExecutionError::Runtime(format!(
                "execution {} is finished without an outcome",
                state.execution_id
            ))
        })?;
        let result = ExecutionResult {
            execution_id: state.execution_id,
            outcome,
        };
        if let Some(failure) = &result.outcome.failure
            && failure.kind == FailureKind::OperationTimeout
        {
            return Err(ExecutionError::OperationTimeout(OperationTimeout {
                execution_id: result.execution_id.clone(),
                cause: TimeoutCause::Deadline(failure.message.clone()),
                result: Some(Box::new(result)),
            }));
        }
        Ok(result)
    }

    async fn finished(&self) -> Result<ExecutionState, ExecutionError> {
        let mut worker = self.shared.worker.clone();
        // A commit by any process that finishes it (its worker, one elsewhere, recovery) wakes
        // this wait, and nothing else does; registered before the first read.
        let finishing = Arc::new(Notify::new());
        let _waiting = self
            .shared
            .executions
            .register(&self.shared.execution_id, &finishing);
        loop {
            let state = self.snapshot().await?;
            if state.lifecycle == ExecutionStatus::Finished {
                return Ok(state);
            }
            if let Some(Err(e)) = worker.borrow_and_update().clone() {
                return Err(ExecutionError::ManagedInput(e));
            }
            // A worker that ended without finishing it lost its lease: recovery finishes it.
            tokio::select! {
                _ = worker.changed() => {}
                _ = finishing.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
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
    Ok(shared.executions.snapshot(&shared.execution_id)?)
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

    /// See [`AsyncExecutionHandle::diagnostics`].
    pub fn diagnostics(&self) -> Result<crate::ExecutionDiagnostics, ExecutionError> {
        self.runtime.block_on(self.inner.diagnostics())
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

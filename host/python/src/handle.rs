//! `m3._native.Handle`: an execution's handle, each method blocking (GIL released, Ctrl-C
//! honoured) or awaitable (`*_async`).

use crate::failure::{Failure, Outcome, raise};
use crate::wait::Runtime;
use m3::AsyncExecutionHandle;
use pyo3::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// An execution's handle.
#[pyclass(frozen, module = "m3._native")]
pub(crate) struct Handle {
    pub(crate) inner: AsyncExecutionHandle,
    pub(crate) runtime: Arc<Runtime>,
}

fn json<T: serde::Serialize>(value: &T) -> Outcome<String> {
    serde_json::to_string(value).map_err(|e| {
        Failure::Execution(m3::ExecutionError::Runtime(format!(
            "a result could not be encoded: {e}"
        )))
    })
}

fn answers(text: &str) -> Outcome<BTreeMap<String, m3::ElicitationResponse>> {
    // The Python side sends a JSON object of ElicitationResponse forms; the component checks
    // them (keys, actions, content) when they are submitted.
    // The messages name what is wrong, never the value given.
    serde_json::from_str(text).map_err(|e| {
        if e.to_string().starts_with("unknown variant") {
            crate::failure::invalid(
                "invalid_action",
                "an action must be \"accept\", \"decline\" or \"cancel\"",
            )
        } else {
            crate::failure::invalid(
                "invalid_response",
                "each response must be an ElicitationResponse (an action and optional content)",
            )
        }
    })
}

fn timeout(secs: Option<f64>) -> Outcome<Option<Duration>> {
    secs.map(|s| {
        Duration::try_from_secs_f64(s).map_err(|_| {
            Failure::Python(pyo3::exceptions::PyValueError::new_err(
                "timeout must be a non-negative, finite number of seconds",
            ))
        })
    })
    .transpose()
}

/// The handle's operations, for `block` and `awaitable`.
mod work {
    use super::*;

    pub(super) async fn pending(h: AsyncExecutionHandle) -> Outcome<Option<String>> {
        match h.pending_elicitation().await? {
            Some(round) => Ok(Some(json(&round)?)),
            None => Ok(None),
        }
    }

    pub(super) async fn respond(
        h: AsyncExecutionHandle,
        round_id: String,
        responses: String,
        key: String,
    ) -> Outcome<()> {
        let responses = answers(&responses)?;
        Ok(h.respond_elicitation(&round_id, responses, &key).await?)
    }

    pub(super) async fn snapshot(h: AsyncExecutionHandle) -> Outcome<String> {
        json(&h.snapshot().await?)
    }

    pub(super) async fn diagnostics(h: AsyncExecutionHandle) -> Outcome<String> {
        json(&h.diagnostics().await?)
    }

    pub(super) async fn result(
        h: AsyncExecutionHandle,
        limit: Option<Duration>,
    ) -> Outcome<String> {
        json(&h.result(limit).await?)
    }

    pub(super) async fn cancel(h: AsyncExecutionHandle) -> Outcome<()> {
        Ok(h.cancel().await?)
    }
}

#[pymethods]
impl Handle {
    /// The execution's id.
    #[getter]
    fn execution_id(&self) -> String {
        self.inner.execution_id().to_string()
    }

    fn pending_elicitation(&self, py: Python<'_>) -> PyResult<Option<String>> {
        raise(
            py,
            self.runtime.block(py, work::pending(self.inner.clone())),
        )
    }

    fn pending_elicitation_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.runtime
            .awaitable(py, work::pending(self.inner.clone()))
    }

    fn respond_elicitation(
        &self,
        py: Python<'_>,
        round_id: String,
        responses: String,
        idempotency_key: String,
    ) -> PyResult<()> {
        let work = work::respond(self.inner.clone(), round_id, responses, idempotency_key);
        raise(py, self.runtime.block(py, self.runtime.to_completion(work)))
    }

    fn respond_elicitation_async<'py>(
        &self,
        py: Python<'py>,
        round_id: String,
        responses: String,
        idempotency_key: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let work = work::respond(self.inner.clone(), round_id, responses, idempotency_key);
        self.runtime.awaitable(py, self.runtime.to_completion(work))
    }

    fn snapshot(&self, py: Python<'_>) -> PyResult<String> {
        raise(
            py,
            self.runtime.block(py, work::snapshot(self.inner.clone())),
        )
    }

    fn snapshot_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.runtime
            .awaitable(py, work::snapshot(self.inner.clone()))
    }

    fn diagnostics(&self, py: Python<'_>) -> PyResult<String> {
        raise(
            py,
            self.runtime
                .block(py, work::diagnostics(self.inner.clone())),
        )
    }

    fn diagnostics_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.runtime
            .awaitable(py, work::diagnostics(self.inner.clone()))
    }

    #[pyo3(signature = (timeout_secs=None))]
    fn result(&self, py: Python<'_>, timeout_secs: Option<f64>) -> PyResult<String> {
        let limit = raise(py, timeout(timeout_secs))?;
        raise(
            py,
            self.runtime
                .block(py, work::result(self.inner.clone(), limit)),
        )
    }

    #[pyo3(signature = (timeout_secs=None))]
    fn result_async<'py>(
        &self,
        py: Python<'py>,
        timeout_secs: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let limit = raise(py, timeout(timeout_secs))?;
        self.runtime
            .awaitable(py, work::result(self.inner.clone(), limit))
    }

    fn cancel(&self, py: Python<'_>) -> PyResult<()> {
        raise(
            py,
            self.runtime.block(
                py,
                self.runtime.to_completion(work::cancel(self.inner.clone())),
            ),
        )
    }

    fn cancel_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.runtime.awaitable(
            py,
            self.runtime.to_completion(work::cancel(self.inner.clone())),
        )
    }
}

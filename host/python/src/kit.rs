//! `m3._native.Kit` and `m3._native.Agent`: an [`m3::AsyncMcpTestKit`] on a runtime of its own,
//! used by both the blocking and the asyncio kit of the Python package.

use crate::execution_store::ExecutionStore;
use crate::failure::{Failure, Outcome, raise};
use crate::handle::Handle;
use crate::submission::submission;
use crate::wait::Runtime;
use m3::{AgentSpec, AsyncAgent, AsyncMcpTestKit, KitOptions};
use pyo3::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A test kit.
#[pyclass(frozen, module = "m3._native")]
pub(crate) struct Kit {
    inner: AsyncMcpTestKit,
    runtime: Arc<Runtime>,
}

fn duration(what: &str, secs: f64) -> Outcome<Duration> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            Failure::Python(pyo3::exceptions::PyValueError::new_err(format!(
                "{what} must be a positive, finite number of seconds"
            )))
        })
}

impl Kit {
    fn handle(&self, inner: m3::AsyncExecutionHandle) -> Handle {
        Handle {
            inner,
            runtime: self.runtime.clone(),
        }
    }
}

#[pymethods]
impl Kit {
    /// A kit over `store` whose child processes get exactly `env`.
    #[new]
    fn new(
        py: Python<'_>,
        store: &ExecutionStore,
        env: BTreeMap<String, String>,
        lease_ttl: f64,
        lease_renew: f64,
    ) -> PyResult<Self> {
        let options = KitOptions {
            lease_ttl: raise(py, duration("lease_ttl", lease_ttl))?,
            lease_renew: raise(py, duration("lease_renew", lease_renew))?,
        };
        let runtime = Runtime::new().map_err(|e| {
            Failure::Execution(m3::ExecutionError::Runtime(e.to_string())).into_pyerr(py)
        })?;
        Ok(Self {
            inner: AsyncMcpTestKit::with_options(store.store.clone(), env, options),
            runtime,
        })
    }

    /// The id this kit's workers own rounds under.
    #[getter]
    fn owner_id(&self) -> String {
        self.inner.owner_id().to_string()
    }

    /// Agents from specs in their JSON (dict) form.
    fn agents(&self, py: Python<'_>, specs: Vec<String>) -> PyResult<Vec<Agent>> {
        let made = specs
            .iter()
            .map(|text| AgentSpec::from_json(text))
            .collect::<Result<Vec<_>, _>>()
            .and_then(|specs| self.inner.agents(specs));
        let agents = raise(py, made.map_err(Failure::from))?;
        Ok(agents
            .into_iter()
            .map(|inner| Agent {
                inner,
                runtime: self.runtime.clone(),
            })
            .collect())
    }

    /// A handle on any execution of the store.
    fn execution(&self, py: Python<'_>, execution_id: String) -> PyResult<Handle> {
        let kit = self.inner.clone();
        let work = async move { Ok(kit.execution(&execution_id).await?) };
        raise(py, self.runtime.block(py, work)).map(|inner| self.handle(inner))
    }

    fn execution_async<'py>(
        &self,
        py: Python<'py>,
        execution_id: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (kit, runtime) = (self.inner.clone(), self.runtime.clone());
        self.runtime.awaitable(py, async move {
            let inner = kit.execution(&execution_id).await?;
            Ok(Handle { inner, runtime })
        })
    }

    /// Fails what dead workers left: (rounds, executions).
    fn recover(&self, py: Python<'_>) -> PyResult<(u32, u32)> {
        let kit = self.inner.clone();
        raise(
            py,
            self.runtime
                .block(py, async move { Ok(kit.recover().await?) }),
        )
    }

    fn recover_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let kit = self.inner.clone();
        self.runtime
            .awaitable(py, async move { Ok(kit.recover().await?) })
    }

    /// Cancels the running executions and waits up to `grace_secs` for their workers; the
    /// number still running after it.
    fn shutdown(&self, py: Python<'_>, grace_secs: f64) -> PyResult<usize> {
        let grace = raise(py, duration("grace", grace_secs))?;
        let kit = self.inner.clone();
        let shutting = self
            .runtime
            .to_completion(async move { Ok(kit.shutdown(grace).await) });
        raise(py, self.runtime.block(py, shutting))
    }

    fn shutdown_async<'py>(&self, py: Python<'py>, grace_secs: f64) -> PyResult<Bound<'py, PyAny>> {
        let grace = raise(py, duration("grace", grace_secs))?;
        let kit = self.inner.clone();
        let shutting = self
            .runtime
            .to_completion(async move { Ok(kit.shutdown(grace).await) });
        self.runtime.awaitable(py, shutting)
    }
}

impl Drop for Kit {
    /// A kit dropped without `close()` still cancels its executions and waits for their
    /// workers, with the GIL released (a worker may need it, for a store's Python clock).
    fn drop(&mut self) {
        let kit = self.inner.clone();
        let runtime = self.runtime.clone();
        let shutdown = move || {
            runtime.block_quietly(async move {
                kit.shutdown(crate::wait::SHUTDOWN_GRACE).await;
            })
        };
        Python::attach(|py| py.detach(shutdown));
    }
}

/// An agent of a kit.
#[pyclass(frozen, module = "m3._native")]
pub(crate) struct Agent {
    inner: AsyncAgent,
    runtime: Arc<Runtime>,
}

#[pymethods]
impl Agent {
    /// The agent's model, if its harness has models.
    #[getter]
    fn model(&self) -> Option<String> {
        self.inner.model().map(str::to_string)
    }

    /// Submits work given in its JSON form.
    fn submit(&self, py: Python<'_>, work: String) -> PyResult<Handle> {
        let (agent, runtime) = (self.inner.clone(), self.runtime.clone());
        let submitting = self.runtime.to_completion(async move {
            let inner = agent.submit(submission(&work)?).await?;
            Ok(Handle { inner, runtime })
        });
        let submitted = self.runtime.block(py, submitting);
        raise(py, submitted)
    }

    fn submit_async<'py>(&self, py: Python<'py>, work: String) -> PyResult<Bound<'py, PyAny>> {
        let (agent, runtime) = (self.inner.clone(), self.runtime.clone());
        let submitting = self.runtime.to_completion(async move {
            let inner = agent.submit(submission(&work)?).await?;
            Ok(Handle { inner, runtime })
        });
        self.runtime.awaitable(py, submitting)
    }
}

//! Waiting without holding up Python: a blocking call runs with the GIL released and wakes
//! every 50 ms to let Python handle signals (Ctrl-C interrupts it with `KeyboardInterrupt`); an
//! async call is a tokio task whose result settles an asyncio future on its own event loop.

use crate::failure::{Failure, Outcome};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a blocking wait looks for a pending signal.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

/// The tokio runtime of a kit (its workers and waits). Dropped without waiting for its tasks:
/// a kit's `shutdown` has waited for its workers already.
pub(crate) struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    /// A runtime with two worker threads.
    pub(crate) fn new() -> std::io::Result<Arc<Self>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("m3-python")
            .enable_all()
            .build()?;
        Ok(Arc::new(Self(Some(runtime))))
    }

    fn handle(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("the runtime lives until dropped")
    }

    /// Runs `work` to its end on this thread with the GIL released; a signal handler that
    /// raises (Ctrl-C's `KeyboardInterrupt`) stops the wait and its exception is returned.
    /// Work already handed to a worker (a committed answer, a running execution) goes on.
    pub(crate) fn block<T, F>(&self, py: Python<'_>, work: F) -> Outcome<T>
    where
        F: Future<Output = Outcome<T>> + Send,
        T: Send,
    {
        py.detach(|| {
            self.handle().block_on(async {
                tokio::pin!(work);
                loop {
                    tokio::select! {
                        done = &mut work => return done,
                        _ = tokio::time::sleep(SIGNAL_CHECK) => {
                            Python::attach(|py| py.check_signals())?;
                        }
                    }
                }
            })
        })
    }

    /// Starts `work` on the runtime and returns an asyncio future of its result, settled on
    /// the running event loop. Cancelling the future aborts the task (the wait, not what it
    /// started).
    pub(crate) fn awaitable<'py, T, F>(
        &self,
        py: Python<'py>,
        work: F,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        F: Future<Output = Outcome<T>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
        let future = event_loop.call_method0("create_future")?;
        let (loop_ref, future_ref) = (event_loop.clone().unbind(), future.clone().unbind());
        let task = self.handle().spawn(async move {
            let outcome = work.await;
            Python::attach(|py| {
                let (ok, value) = match outcome.map_err(|f| f.into_pyerr(py)) {
                    Ok(value) => match value.into_py_any(py) {
                        Ok(value) => (true, value),
                        Err(e) => (false, e.into_value(py).into_any()),
                    },
                    Err(e) => (false, e.into_value(py).into_any()),
                };
                let settle = Settle {
                    future: future_ref.clone_ref(py),
                };
                // A closed loop has nobody to tell.
                let _ = loop_ref
                    .bind(py)
                    .call_method1("call_soon_threadsafe", (settle, ok, value));
            });
        });
        let cancel = Cancel(Mutex::new(Some(task.abort_handle())));
        future.call_method1("add_done_callback", (cancel,))?;
        Ok(future)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Settles an asyncio future with a task's result, on the future's loop (unless the future was
/// cancelled meanwhile).
#[pyclass(frozen)]
struct Settle {
    future: Py<PyAny>,
}

#[pymethods]
impl Settle {
    fn __call__(&self, py: Python<'_>, ok: bool, value: Py<PyAny>) -> PyResult<()> {
        let future = self.future.bind(py);
        if future.call_method0("done")?.is_truthy()? {
            return Ok(());
        }
        if ok {
            future.call_method1("set_result", (value,))?;
        } else {
            future.call_method1("set_exception", (value,))?;
        }
        Ok(())
    }
}

/// Aborts a task when its asyncio future was cancelled.
#[pyclass(frozen)]
struct Cancel(Mutex<Option<tokio::task::AbortHandle>>);

#[pymethods]
impl Cancel {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        if future.call_method0("cancelled")?.is_truthy()?
            && let Some(task) = self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
        {
            task.abort();
        }
        Ok(())
    }
}

/// How long a kit dropped without `close()` waits for its cancelled workers.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

impl Runtime {
    /// Runs `work` as a task of its own and gives a future of its result: an interrupted
    /// (Ctrl-C) or cancelled wait on that future stops the waiting, never the work, so a
    /// submission is never left stored without its worker, nor a cancel half requested.
    pub(crate) fn to_completion<T, F>(
        &self,
        work: F,
    ) -> impl Future<Output = Outcome<T>> + Send + 'static
    where
        F: Future<Output = Outcome<T>> + Send + 'static,
        T: Send + 'static,
    {
        let task = self.handle().spawn(work);
        async move {
            task.await.unwrap_or_else(|e| {
                Err(Failure::Execution(m3::ExecutionError::Runtime(format!(
                    "a task of the binding failed: {e}"
                ))))
            })
        }
    }

    /// Runs `work` to its end on this thread (no signal checks: for drops).
    pub(crate) fn block_quietly<F: Future>(&self, work: F) -> F::Output {
        self.handle().block_on(work)
    }
}

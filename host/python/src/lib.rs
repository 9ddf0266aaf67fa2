//! The native module of the m3 Python package (`m3._native`): the m3 crate's public API for
//! the package's Python modules (`python/m3/`), which give it the specification's names.
//!
//! A thin binding: values cross as JSON text in the forms the crate serialises, and every
//! decision stays in the component. Every call that touches a store or waits runs with the GIL
//! released; blocking waits let Python handle signals (Ctrl-C); async calls settle asyncio
//! futures from the kit's own tokio runtime.
//!
//! # Files
//!
//! - `lib.rs`: the module and its classes.
//! - `store.rs`: `ManagedInputStore`, the twelve operations of a SQLite, PostgreSQL or resolved
//!   store, each with the GIL released.
//! - `execution_store.rs`: `ExecutionStore` (SQLite, PostgreSQL, in memory).
//! - `kit.rs`: `Kit` (an `AsyncMcpTestKit` on a tokio runtime of its own, for both Python kits;
//!   dropping it cancels its executions) and `Agent`.
//! - `handle.rs`: `Handle`, every method blocking and `*_async`.
//! - `wait.rs`: how a call waits: blocking, with the GIL released and a signal check every 50 ms
//!   (Ctrl-C raises `KeyboardInterrupt`; work already handed to a worker goes on); async, a tokio
//!   task that settles an asyncio future on its loop through `call_soon_threadsafe`, aborted when
//!   the future is cancelled. What changes state (a submission, an answer, a cancel, the kit's
//!   shutdown) runs as a task of its own (`to_completion`), so an interrupted or cancelled wait
//!   stops only the waiting: no submission is left stored without its worker.
//! - `clock.rs`: a Python `clock=` callable as an `m3::Clock` (refused at construction when it
//!   returns a naive `datetime`; a later bad reading keeps the previous one and is raised by the
//!   call that made it, with the call's own error as its cause).
//! - `failure.rs`: the crate's errors -> the classes of `m3.errors`, each with the Rust error's
//!   code. `new_round.rs` and `submission.rs`: the JSON forms of `create_round`'s and `submit`'s
//!   arguments -> `NewRound` and `Submission` (a refusal names fields, never a value given: it may
//!   be an environment variable's or a header's).
//! - `python/m3/__init__.py`: the specification's top-level names.
//! - `python/m3/_kit.py`: `MCPTestKit`, `AsyncMCPTestKit`, agents, handles, `AgentSpec`,
//!   `StdioServer`, `HttpServer`.
//! - `python/m3/storage.py`: `m3.storage`: the stores, the `ManagedInputStore` protocol, records,
//!   leases, statuses.
//! - `python/m3/types.py`: `m3.types`: executions, rounds, requests, `ElicitationResponse`.
//! - `python/m3/errors.py`: `m3.errors`: the exception classes and their hierarchy.
//! - `python/m3/_convert.py`: times and numbers between JSON and Python.
//! - `python/m3/pytest_plugin.py`: the `m3_kit` fixture, the PostgreSQL option and the failure
//!   report (a `pytest11` entry point).
//! - `python/m3/_native.pyi`: the native module's types (and `py.typed`: the package is typed).

mod clock;
mod execution_store;
mod failure;
mod handle;
mod kit;
mod new_round;
mod store;
mod submission;
mod wait;

use pyo3::prelude::*;

/// The module.
#[pymodule]
#[pyo3(name = "_native")]
fn native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<execution_store::ExecutionStore>()?;
    module.add_class::<store::ManagedInputStore>()?;
    module.add_class::<kit::Kit>()?;
    module.add_class::<kit::Agent>()?;
    module.add_class::<handle::Handle>()?;
    module.add_function(wrap_pyfunction!(set_engine_notices, module)?)?;
    Ok(())
}

/// Whether the library says on stderr when it compiles its component and when its
/// compiled-code cache cannot be used (`m3.set_engine_notices`).
#[pyfunction]
fn set_engine_notices(on: bool) {
    m3::health::set_engine_notices(on);
}

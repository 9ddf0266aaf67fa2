//! `m3._native.ExecutionStore`: where a kit keeps its executions and rounds (SQLite, PostgreSQL
//! or in memory).

use crate::failure::{Failure, raise};
use crate::store::ManagedInputStore;
use pyo3::prelude::*;
use std::sync::Arc;

/// An execution store.
#[pyclass(frozen, module = "m3._native")]
pub(crate) struct ExecutionStore {
    pub(crate) store: Arc<dyn m3::ExecutionStore>,
}

#[pymethods]
impl ExecutionStore {
    /// Executions in the SQLite file `path` (nothing is opened until used).
    #[staticmethod]
    fn sqlite(py: Python<'_>, path: String) -> PyResult<Self> {
        let store = raise(
            py,
            m3::SqliteExecutionStore::open(path).map_err(Failure::from),
        )?;
        Ok(Self {
            store: Arc::new(store),
        })
    }

    /// Executions in the PostgreSQL database at `url`.
    #[staticmethod]
    fn postgres(py: Python<'_>, url: String, busy_timeout_ms: u64) -> PyResult<Self> {
        let options = m3::StoreOptions {
            busy_timeout_ms,
            ..m3::StoreOptions::default()
        };
        let store = raise(
            py,
            m3::PostgresExecutionStore::open(&url, options).map_err(Failure::from),
        )?;
        Ok(Self {
            store: Arc::new(store),
        })
    }

    /// Executions kept in memory while the store lives (no managed input).
    #[staticmethod]
    fn in_memory() -> Self {
        Self {
            store: Arc::new(m3::InMemoryExecutionStore::default()),
        }
    }

    /// Releases the store's connections; later use is an error.
    fn close(&self, py: Python<'_>) {
        let store = self.store.clone();
        py.detach(|| store.close());
    }

    /// The managed-input store on the same database (a `StorageError` for one in memory).
    fn managed_input_store(&self, py: Python<'_>) -> PyResult<ManagedInputStore> {
        let store = self.store.clone();
        let resolved = py.detach(|| store.managed_input_store());
        match raise(py, resolved.map_err(Failure::from))? {
            Some(store) => Ok(ManagedInputStore::resolved(store)),
            None => Err(Failure::Storage(
                "an in-memory execution store has no managed-input store".into(),
            )
            .into_pyerr(py)),
        }
    }
}

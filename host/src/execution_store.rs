//! Where executions are kept, and how a persistent one resolves its managed-input store.
//!
//! `HumanInput::Managed` needs a persistent execution store that can resolve a managed-input
//! store; an in-memory one cannot, and submitting managed input with it is refused.

use crate::error::OpenError;
use crate::store::{ManagedInputStore, SqliteManagedInputStore, StoreOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Errors of an execution store.
#[derive(Debug, thiserror::Error)]
pub enum ExecutionStoreError {
    /// The store was closed.
    #[error("the execution store is closed")]
    Closed,
    /// The database could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
}

/// An execution store.
pub trait ExecutionStore: Send + Sync {
    /// The managed-input store on the same storage, opened on first use; `None` when this store
    /// is not persistent (then managed input is not available).
    fn managed_input_store(
        &self,
    ) -> Result<Option<Arc<dyn ManagedInputStore>>, ExecutionStoreError>;
}

/// Executions in a SQLite file. The managed-input store is resolved lazily, on the same file:
/// a [`SqliteManagedInputStore`] opened on the same path reads what it wrote.
#[derive(Debug)]
pub struct SqliteExecutionStore {
    path: PathBuf,
    options: StoreOptions,
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    Open(Option<Arc<SqliteManagedInputStore>>),
    Closed,
}

impl SqliteExecutionStore {
    /// An execution store on `path` with default options. Nothing is opened until used.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ExecutionStoreError> {
        Self::open_with(path, StoreOptions::default())
    }

    /// An execution store on `path` whose managed-input store uses `options`.
    pub fn open_with(
        path: impl AsRef<Path>,
        options: StoreOptions,
    ) -> Result<Self, ExecutionStoreError> {
        crate::sqlite::database::check_path(path.as_ref())?;
        Ok(Self {
            path: path.as_ref().to_path_buf(),
            options,
            state: Mutex::new(State::Open(None)),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the store: its connections are released and later use is an error. Rounds and
    /// records stay in the file.
    pub fn close(&self) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = State::Closed;
    }
}

impl ExecutionStore for SqliteExecutionStore {
    fn managed_input_store(
        &self,
    ) -> Result<Option<Arc<dyn ManagedInputStore>>, ExecutionStoreError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *state {
            State::Closed => Err(ExecutionStoreError::Closed),
            State::Open(Some(store)) => Ok(Some(store.clone() as Arc<dyn ManagedInputStore>)),
            State::Open(resolved) => {
                let store = Arc::new(SqliteManagedInputStore::open(
                    &self.path,
                    self.options.clone(),
                )?);
                *resolved = Some(store.clone());
                Ok(Some(store as Arc<dyn ManagedInputStore>))
            }
        }
    }
}

/// Executions kept in memory only: no managed input.
#[derive(Debug, Default, Clone, Copy)]
pub struct InMemoryExecutionStore;

impl ExecutionStore for InMemoryExecutionStore {
    fn managed_input_store(
        &self,
    ) -> Result<Option<Arc<dyn ManagedInputStore>>, ExecutionStoreError> {
        Ok(None)
    }
}

//! Where executions are kept, and how a persistent one resolves its managed-input store.
//!
//! `HumanInput::Managed` needs a persistent execution store that can resolve a managed-input
//! store; an in-memory one cannot, and submitting managed input with it is refused. An in-memory
//! store still runs `fail`-mode executions: it keeps them in a private database file that is
//! deleted with the store, so nothing outlives it.

use crate::api::error::OpenError;
use crate::api::managed_input::{
    DatabaseStore, ManagedInputStore, PostgresManagedInputStore, SqliteManagedInputStore,
    StoreOptions,
};
use crate::process::ScratchDir;
use crate::worker::Executions;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Errors of an execution store.
#[derive(Debug, thiserror::Error)]
pub enum ExecutionStoreError {
    /// The store was closed.
    #[error("StorageError: the execution store is closed")]
    Closed,
    /// The database could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The private directory of an in-memory store could not be made.
    #[error("StorageError: the in-memory store's private directory could not be created: {0}")]
    Scratch(String),
}

impl ExecutionStoreError {
    /// The machine-readable reason: `store_closed`, the database's (`invalid_database_path`,
    /// `storage_busy`, `storage_failure`, `incompatible_database`, ...), `engine_error` for a
    /// component that did not load.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Closed => "store_closed",
            Self::Open(e) => e.code().unwrap_or("engine_error"),
            Self::Scratch(_) => "storage_failure",
        }
    }

    /// The specification's name of the error's kind (`StorageError`, or
    /// `ManagedInputValidationError` for a database path or URL that cannot be one,
    /// `EngineError` for a component that did not load).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::Open(e) => e.kind_name(),
            Self::Closed | Self::Scratch(_) => "StorageError",
        }
    }
}

/// An execution store.
pub trait ExecutionStore: Send + Sync {
    /// The managed-input store on the same storage, opened on first use; `None` when this store
    /// is not persistent (then managed input is not available).
    fn managed_input_store(
        &self,
    ) -> Result<Option<Arc<dyn ManagedInputStore>>, ExecutionStoreError>;

    /// Where the kit keeps this store's executions and rounds.
    fn executions(&self) -> Result<Arc<Executions>, ExecutionStoreError>;

    /// Closes the store: its connections are released and later use is an error; what it
    /// stored stays. A store that holds nothing open does nothing.
    fn close(&self) {}
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
    Open(Option<Arc<Executions>>),
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
        crate::store::sqlite::database::check_path(path.as_ref())
            .map_err(crate::OpenError::from_store)?;
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
    /// records stay in the database.
    pub fn close(&self) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = State::Closed;
    }
}

impl ExecutionStore for SqliteExecutionStore {
    fn close(&self) {
        SqliteExecutionStore::close(self);
    }

    fn managed_input_store(
        &self,
    ) -> Result<Option<Arc<dyn ManagedInputStore>>, ExecutionStoreError> {
        store_of(self.executions()?)
    }

    fn executions(&self) -> Result<Arc<Executions>, ExecutionStoreError> {
        resolve(&self.state, || {
            Ok(SqliteManagedInputStore::open(&self.path, self.options.clone())?.into_inner())
        })
    }
}

/// The managed-input store of a persistent store's executions.
fn store_of(
    executions: Arc<Executions>,
) -> Result<Option<Arc<dyn ManagedInputStore>>, ExecutionStoreError> {
    Ok(Some(
        executions.store().clone() as Arc<dyn ManagedInputStore>
    ))
}

/// The executions of `state`, opened with `open` on first use.
fn resolve(
    state: &Mutex<State>,
    open: impl FnOnce() -> Result<DatabaseStore, ExecutionStoreError>,
) -> Result<Arc<Executions>, ExecutionStoreError> {
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    match &mut *state {
        State::Closed => Err(ExecutionStoreError::Closed),
        State::Open(Some(executions)) => Ok(executions.clone()),
        State::Open(resolved) => {
            let executions = Arc::new(Executions::new(Arc::new(open()?)));
            *resolved = Some(executions.clone());
            Ok(executions)
        }
    }
}

/// Executions in a PostgreSQL database, shared by workers and answerers on many machines. The
/// managed-input store is resolved lazily, on the same database: a
/// [`PostgresManagedInputStore`] opened on the same URL reads what it wrote.
#[derive(Debug)]
pub struct PostgresExecutionStore {
    url: String,
    options: StoreOptions,
    state: Mutex<State>,
}

impl PostgresExecutionStore {
    /// An execution store on `url` (`postgres://user@host/database`) whose managed-input store
    /// uses `options`. Nothing is opened until used.
    pub fn open(url: &str, options: StoreOptions) -> Result<Self, ExecutionStoreError> {
        if !crate::store::postgres::database::is_url(url) {
            return Err(ExecutionStoreError::Open(OpenError::InvalidUrl(
                "a PostgreSQL database is named by a postgres:// URL".into(),
            )));
        }
        Ok(Self {
            url: url.to_string(),
            options,
            state: Mutex::new(State::Open(None)),
        })
    }

    /// Closes the store: its connections are released and later use is an error. Rounds and
    /// records stay in the database.
    pub fn close(&self) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = State::Closed;
    }
}

impl ExecutionStore for PostgresExecutionStore {
    fn close(&self) {
        PostgresExecutionStore::close(self);
    }

    fn managed_input_store(
        &self,
    ) -> Result<Option<Arc<dyn ManagedInputStore>>, ExecutionStoreError> {
        store_of(self.executions()?)
    }

    fn executions(&self) -> Result<Arc<Executions>, ExecutionStoreError> {
        resolve(&self.state, || {
            Ok(PostgresManagedInputStore::open(&self.url, self.options.clone())?.into_inner())
        })
    }
}

/// Executions kept only as long as this object lives: no managed input.
#[derive(Debug, Default)]
pub struct InMemoryExecutionStore {
    private: Mutex<Option<(Arc<Executions>, ScratchDir)>>,
}

impl ExecutionStore for InMemoryExecutionStore {
    fn managed_input_store(
        &self,
    ) -> Result<Option<Arc<dyn ManagedInputStore>>, ExecutionStoreError> {
        Ok(None)
    }

    fn executions(&self) -> Result<Arc<Executions>, ExecutionStoreError> {
        let mut private = self.private.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((executions, _)) = private.as_ref() {
            return Ok(executions.clone());
        }
        let dir = ScratchDir::create("m3-in-memory")
            .map_err(|e| ExecutionStoreError::Scratch(e.to_string()))?;
        let store = Arc::new(
            SqliteManagedInputStore::open(
                dir.path().join("executions.sqlite"),
                StoreOptions::default(),
            )?
            .into_inner(),
        );
        let executions = Arc::new(Executions::new(store));
        *private = Some((executions.clone(), dir));
        Ok(executions)
    }
}

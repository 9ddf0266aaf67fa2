//! Hooks for m3's own tests and tools: reads and writes below the public API, for checks that
//! need them (a fixture read without a kit, a queued execution nobody runs). Not part of the API:
//! anything here may change in any release.

use crate::api::execution::ExecutionState;
use crate::api::execution_store::ExecutionStore;
use crate::kit::ExecutionError;

/// The state of execution `execution_id` as stored, read without a kit (a kit recovers what it
/// finds expired; this reads only).
pub fn execution_state(
    store: &dyn ExecutionStore,
    execution_id: &str,
) -> Result<ExecutionState, ExecutionError> {
    Ok(store.executions()?.snapshot(execution_id)?)
}

/// Every stored execution's state, oldest first, read without a kit.
pub fn execution_states(store: &dyn ExecutionStore) -> Result<Vec<ExecutionState>, ExecutionError> {
    let states = store.executions()?.list(None, None)?;
    Ok(states
        .iter()
        .map(crate::api::execution::state_back)
        .collect())
}

/// Stores `submission` as a queued execution held by `agent`'s kit, without starting a worker
/// (what a submitter that dies right after submitting leaves behind). Returns its id.
pub fn submit_without_running(
    agent: &crate::kit::Agent,
    submission: crate::api::submission::Submission,
) -> Result<String, ExecutionError> {
    agent.store_only(submission)
}

/// A waiter on one execution through the path its worker and its result waiters use
/// (`wake-execution` rows, the database's watcher), for the tests of targeted wake-ups.
#[derive(Debug)]
pub struct ExecutionWaiter {
    notify: std::sync::Arc<tokio::sync::Notify>,
    _waiting: crate::worker::changes::Waiting,
}

impl ExecutionWaiter {
    /// Waits on `execution_id` of `executions`' database. Call it inside a tokio runtime.
    pub fn on(executions: &crate::worker::Executions, execution_id: &str) -> Self {
        let notify = std::sync::Arc::new(tokio::sync::Notify::new());
        let waiting = executions.register(execution_id, &notify);
        Self {
            notify,
            _waiting: waiting,
        }
    }

    /// Waits up to `timeout` for a wake-up not yet seen; whether one came.
    pub async fn wait(&self, timeout: std::time::Duration) -> bool {
        tokio::time::timeout(timeout, self.notify.notified())
            .await
            .is_ok()
    }
}

/// The worker's change signal on a database (`worker/changes.rs`: one `data_version` poller per
/// database), for the tests of that one path.
#[derive(Debug)]
pub struct ChangeSignal {
    subscription: crate::worker::changes::Subscription,
}

impl ChangeSignal {
    /// Subscribes to commits on `executions`' database by other connections and processes.
    /// Call it inside a tokio runtime (the poller is a task on it).
    pub fn on(executions: &crate::worker::Executions) -> Self {
        Self {
            subscription: executions.changes(),
        }
    }

    /// Waits up to `timeout` for a commit not yet reported; whether one came.
    pub async fn wait(&mut self, timeout: std::time::Duration) -> bool {
        matches!(
            tokio::time::timeout(timeout, self.subscription.receiver.changed()).await,
            Ok(Ok(()))
        )
    }
}

/// Stores opened on an explicit component runtime, and the modules below the API, for the
/// benchmarks that measure them (cargo feature `internals`, never in a shipped build).
#[cfg(feature = "internals")]
pub mod internals {
    /// The generated bindings.
    pub mod bindings {
        pub use crate::component::bindings::*;
    }
    /// The compiled-artifact cache.
    pub mod component_cache {
        pub use crate::component::cache::*;
    }
    /// WIT <-> public types.
    pub mod convert {
        pub use crate::component::convert::*;
    }
    /// The compiled component.
    pub mod engine {
        pub use crate::component::engine::*;
    }
    /// The host's import implementations.
    pub mod guest_imports {
        pub use crate::imports::*;
    }
    /// Instances and their limits.
    pub mod instance {
        pub use crate::component::instance::*;
    }
    /// The SQLite backend.
    pub mod sqlite {
        pub use crate::store::sqlite::*;
    }
    /// The PostgreSQL backend.
    pub mod postgres {
        pub use crate::store::postgres::*;
    }
    /// Either backend, and what both share.
    pub mod backend {
        pub use crate::store::*;
    }
    /// Executions, hosted.
    pub mod worker {
        pub use crate::worker::*;
    }

    /// The database behind `store` (either backend), for tests that run the store's own
    /// transactions on it.
    pub fn backend_of(store: &crate::DatabaseStore) -> &crate::store::Backend {
        store.backend()
    }

    /// [`crate::SqliteManagedInputStore::open`] on `runtime`.
    pub fn open_with_runtime(
        path: impl AsRef<std::path::Path>,
        options: crate::StoreOptions,
        runtime: std::sync::Arc<crate::component::engine::ComponentRuntime>,
    ) -> Result<crate::SqliteManagedInputStore, crate::OpenError> {
        crate::SqliteManagedInputStore::open_with_runtime(path, options, runtime)
    }
}

/// The engine component compiled through the artifact cache at `cache_dir` (for the cache's
/// tests): where the compiled code came from.
#[derive(Debug)]
pub struct CompiledEngine {
    /// Where the compiled code came from.
    pub cache: crate::component::cache::CacheOutcome,
    runtime: std::sync::Arc<crate::component::engine::ComponentRuntime>,
}

impl CompiledEngine {
    /// Runs the component's `check-requested-schema` on `schema` (JSON text) through this
    /// compiled code: whether the component accepts it.
    pub fn accepts_schema(&self, schema: &str) -> bool {
        let pool = crate::component::instance::InstancePool::new(
            self.runtime.clone(),
            std::sync::Arc::new(crate::api::clock::SystemClock),
            None,
            crate::component::instance::GuestLimits::default(),
        );
        let text = schema.to_string();
        matches!(
            pool.call(|b, s| b
                .m3_managed_input_policy()
                .call_check_requested_schema(s, &text)),
            Ok(Ok(()))
        )
    }
}

/// Compiles (or loads) the engine component with the cache at `cache_dir`, as every process does
/// on first use, but without sharing the result.
pub fn compile_engine(
    cache_dir: Option<&std::path::Path>,
) -> Result<CompiledEngine, crate::api::error::EngineError> {
    let runtime = crate::component::engine::ComponentRuntime::new(
        crate::component::engine::GUEST_WASM,
        crate::component::engine::GUEST_WASM_SHA256,
        cache_dir,
    )?;
    Ok(CompiledEngine {
        cache: runtime.cache.clone(),
        runtime: std::sync::Arc::new(runtime),
    })
}

/// The child processes of executions: spawning, the environment they get, their process group
/// and scratch directory (for the tests of those promises).
pub mod process {
    pub use crate::process::child::is_running;
    pub use crate::process::{ChildProcess, ProcessError, ProcessEvent, ProcessSpec, ScratchDir};
}

/// Runs execution `execution_id` as worker `owner_id` to its end (blocking, on a runtime of its
/// own), as a second worker would try to.
pub fn run_as_worker(
    executions: &crate::worker::Executions,
    execution_id: &str,
    owner_id: &str,
) -> Result<ExecutionState, crate::api::error::ManagedInputError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            crate::api::error::ManagedInputError::Engine(crate::api::error::EngineError {
                kind: crate::api::error::EngineErrorKind::Load,
                message: format!("no runtime: {e}"),
            })
        })?;
    let state = runtime.block_on(executions.run(
        execution_id,
        owner_id,
        std::collections::BTreeMap::new(),
        std::collections::BTreeMap::new(),
        crate::imports::network::NetworkGrant::none(),
        std::sync::Arc::new(tokio::sync::Notify::new()),
    ))?;
    Ok(crate::api::execution::state_back(&state))
}

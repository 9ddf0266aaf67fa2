//! Bounded calls into the component: a pool of live instances per store object, each call
//! under a memory limit and a CPU budget; an instance that traps is discarded.

use crate::bindings;
use crate::clock::Clock;
use crate::cpu_time::ThreadCpuTime;
use crate::engine::ComponentRuntime;
use crate::error::{EngineError, EngineErrorKind};
use crate::guest_imports::HostState;
use crate::sqlite::database::Database;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime::{Store, UpdateDeadline};

/// Limits of one component instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestLimits {
    /// Most bytes of linear memory (default 64 MiB).
    pub max_memory: usize,
    /// Most CPU time the component may use between two host calls (default 500 ms; measured
    /// in the thread's CPU time, so a descheduled thread never counts). The largest input the
    /// edge limits let through (a 1 MiB answer of ~96,000 fields) takes about 100 ms on a slow
    /// 2-core machine: the default leaves a margin of five for slower ones.
    pub cpu_budget: Duration,
}

impl Default for GuestLimits {
    fn default() -> Self {
        Self {
            max_memory: 64 << 20,
            cpu_budget: Duration::from_millis(500),
        }
    }
}

/// A live instance with its store.
pub struct Instance {
    store: Store<HostState>,
    bindings: bindings::Engine,
}

/// Idle instances kept for reuse (their compiled-validator caches stay warm).
const MAX_IDLE: usize = 8;

/// Instances of one store object.
pub struct InstancePool {
    runtime: Arc<ComponentRuntime>,
    clock: Arc<dyn Clock>,
    db: Option<Arc<Database>>,
    limits: GuestLimits,
    idle: Mutex<Vec<Instance>>,
}

impl std::fmt::Debug for InstancePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstancePool")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// What a trap was: the memory limit, the CPU budget, a forbidden import, or another trap.
pub(crate) fn classify(error: &wasmtime::Error, state: &HostState) -> EngineError {
    let message = format!("{error:#}");
    let kind = if state.limiter.refused {
        EngineErrorKind::MemoryLimitExceeded
    } else if matches!(
        error.downcast_ref::<wasmtime::Trap>(),
        Some(wasmtime::Trap::Interrupt)
    ) {
        EngineErrorKind::CpuBudgetExceeded
    } else if message.contains("unknown import") {
        EngineErrorKind::ForbiddenImport
    } else {
        EngineErrorKind::Trap
    };
    EngineError { kind, message }
}

/// A store for one instance under `limits`: the memory limiter, and an epoch callback that
/// traps once the component has used more than the CPU budget since the host last returned.
pub fn bounded_store(
    engine: &wasmtime::Engine,
    state: HostState,
    limits: GuestLimits,
) -> Store<HostState> {
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    let budget = limits.cpu_budget;
    store.epoch_deadline_callback(move |ctx| {
        if ctx.data().last_host_call.elapsed() > budget {
            Ok(UpdateDeadline::Interrupt)
        } else {
            Ok(UpdateDeadline::Continue(1))
        }
    });
    store.set_epoch_deadline(1);
    store
}

impl InstancePool {
    /// A pool over `runtime` for one database and clock.
    pub fn new(
        runtime: Arc<ComponentRuntime>,
        clock: Arc<dyn Clock>,
        db: Option<Arc<Database>>,
        limits: GuestLimits,
    ) -> Self {
        Self {
            runtime,
            clock,
            db,
            limits,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The component runtime this pool instantiates.
    pub fn runtime(&self) -> &Arc<ComponentRuntime> {
        &self.runtime
    }

    /// The limits of this pool's instances.
    pub fn limits(&self) -> GuestLimits {
        self.limits
    }

    /// The database this pool's instances use.
    pub fn database(&self) -> Option<&Arc<Database>> {
        self.db.as_ref()
    }

    fn instantiate(&self) -> Result<Instance, EngineError> {
        let state = HostState::new(self.clock.clone(), self.db.clone(), self.limits.max_memory);
        let mut store = bounded_store(&self.runtime.engine, state, self.limits);
        let bindings = self
            .runtime
            .pre
            .instantiate(&mut store)
            .map_err(|e| EngineError {
                kind: EngineErrorKind::Load,
                message: format!("{e:#}"),
            })?;
        Ok(Instance { store, bindings })
    }

    /// Runs `f` on an instance. A trap discards the instance and becomes an [`EngineError`].
    pub fn call<T>(
        &self,
        f: impl FnOnce(&bindings::Engine, &mut Store<HostState>) -> wasmtime::Result<T>,
    ) -> Result<T, EngineError> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut instance = match idle {
            Some(instance) => instance,
            None => self.instantiate()?,
        };
        instance.store.data_mut().last_host_call = ThreadCpuTime::now();
        instance.store.set_epoch_deadline(1);
        match f(&instance.bindings, &mut instance.store) {
            Ok(value) => {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                if idle.len() < MAX_IDLE {
                    idle.push(instance);
                }
                Ok(value)
            }
            Err(error) => Err(classify(&error, instance.store.data())),
        }
    }
}

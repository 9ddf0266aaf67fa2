//! Bounded calls into the component: a pool of live instances per store object, each call
//! under a memory limit and a compute budget (fuel, refilled whenever an m3 import returns to
//! the component); an instance that traps is discarded.

use crate::api::clock::Clock;
use crate::api::error::{EngineError, EngineErrorKind};
use crate::component::bindings;
use crate::component::engine::ComponentRuntime;
use crate::imports::HostState;
use crate::store::Backend;
use std::sync::{Arc, Mutex};
use wasmtime::{CallHook, Store};

/// Limits of one component instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestLimits {
    /// Most bytes of linear memory (default 64 MiB).
    pub max_memory: usize,
    /// Most fuel (WebAssembly operations, about) the component may use between two host
    /// calls (default [`DEFAULT_COMPUTE_BUDGET`]). Fuel, not time: the same input gets the same
    /// answer on every machine, however slow or loaded.
    pub compute_budget: u64,
}

/// The default compute budget ([`GuestLimits::compute_budget`]): 6,000,000,000 units of fuel
/// between two host calls, more than nine times what the largest answer the size limits let
/// through costs (a 1 MiB answer of about 96,000 fields costs about 656 million), and a second
/// or two of computing for a runaway loop before it traps. Fuel counts WebAssembly operations,
/// so the budget is the same on every machine.
pub const DEFAULT_COMPUTE_BUDGET: u64 = 6_000_000_000;

impl Default for GuestLimits {
    fn default() -> Self {
        Self {
            max_memory: 64 << 20,
            compute_budget: DEFAULT_COMPUTE_BUDGET,
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
    db: Option<Arc<Backend>>,
    limits: GuestLimits,
    idle: Mutex<Vec<Instance>>,
    /// The most fuel the last call used between two refills (diagnostics and benchmarks).
    last_fuel_used: std::sync::atomic::AtomicU64,
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
        Some(wasmtime::Trap::OutOfFuel)
    ) {
        EngineErrorKind::ComputeBudgetExceeded
    } else if state.forbidden_import.is_some() {
        EngineErrorKind::ForbiddenImport
    } else {
        EngineErrorKind::Trap
    };
    EngineError { kind, message }
}

/// A store for one instance under `limits`: the memory limiter, and a compute budget in fuel,
/// full whenever the host calls into the component and whenever one of the m3 imports returns
/// to it; the component traps (`Trap::OutOfFuel`) once it has used more since.
pub fn bounded_store(
    engine: &wasmtime::Engine,
    state: HostState,
    limits: GuestLimits,
) -> Store<HostState> {
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    let budget = limits.compute_budget;
    // A store made here always has fuel enabled (`engine_config`); an engine without it fails
    // the first call instead.
    let _ = store.set_fuel(budget);
    store.call_hook(move |mut ctx, hook| {
        let refill = match hook {
            CallHook::CallingWasm => true,
            CallHook::ReturningFromHost => std::mem::take(&mut ctx.data_mut().host_returned),
            CallHook::CallingHost | CallHook::ReturningFromWasm => false,
        };
        if refill {
            let used = budget.saturating_sub(ctx.get_fuel()?);
            let state = ctx.data_mut();
            state.fuel_peak = state.fuel_peak.max(used);
            ctx.set_fuel(budget)?;
        }
        Ok(())
    });
    store
}

impl InstancePool {
    /// A pool over `runtime` for one database and clock.
    pub fn new(
        runtime: Arc<ComponentRuntime>,
        clock: Arc<dyn Clock>,
        db: Option<Arc<Backend>>,
        limits: GuestLimits,
    ) -> Self {
        Self {
            runtime,
            clock,
            db,
            limits,
            idle: Mutex::new(Vec::new()),
            last_fuel_used: std::sync::atomic::AtomicU64::new(0),
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

    /// The most fuel the last call used between two refills (the whole call when it made no
    /// host call): the figure the compute budget is checked against, the same on every
    /// machine.
    pub fn last_fuel_used(&self) -> u64 {
        self.last_fuel_used
            .load(std::sync::atomic::Ordering::Relaxed)
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
        let value = self.call_on(&mut instance, f)?;
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(instance);
        }
        Ok(value)
    }

    /// An instance of this pool's for one owner alone (one that keeps a resource of the
    /// component's in it); call it with [`InstancePool::call_on`].
    pub(crate) fn own_instance(&self) -> Result<Instance, EngineError> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match idle {
            Some(instance) => Ok(instance),
            None => self.instantiate(),
        }
    }

    /// Runs `f` on `instance` under this pool's limits. After an error the instance must not
    /// be used again (a trap may have left it in any state).
    pub(crate) fn call_on<T>(
        &self,
        instance: &mut Instance,
        f: impl FnOnce(&bindings::Engine, &mut Store<HostState>) -> wasmtime::Result<T>,
    ) -> Result<T, EngineError> {
        instance.store.data_mut().fuel_peak = 0;
        let result = f(&instance.bindings, &mut instance.store);
        let left = instance.store.get_fuel().unwrap_or(0);
        let last = self.limits.compute_budget.saturating_sub(left);
        self.last_fuel_used.store(
            instance.store.data().fuel_peak.max(last),
            std::sync::atomic::Ordering::Relaxed,
        );
        result.map_err(|error| classify(&error, instance.store.data()))
    }
}

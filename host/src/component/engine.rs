//! The process-wide wasmtime engine, the compiled component and its `InstancePre`.
//!
//! Compiled once per process (from the on-disk cache when possible) and shared by every store
//! object; instances are cheap to make from the `InstancePre`.

use crate::api::error::{EngineError, EngineErrorKind};
use crate::component::bindings;
use crate::component::cache::{self, CacheOutcome};
use crate::component::sandbox;
use crate::imports::HostState;
use std::sync::{Arc, OnceLock};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

/// The guest component, built from `guest/` by `m3-components`.
pub static GUEST_WASM: &[u8] = m3_components::GUEST;

/// SHA-256 (hex) of [`GUEST_WASM`], computed by `m3-components`' build script.
pub const GUEST_WASM_SHA256: &str = m3_components::GUEST_SHA256;

/// The compiled engine component, ready to instantiate.
pub struct ComponentRuntime {
    /// The engine (fuel on: the compute budget of every guest call is counted in it).
    pub engine: Engine,
    /// The compiled component.
    pub component: Component,
    /// Imports resolved once, instantiated many times (synchronous calls: no `process` or
    /// `events`).
    pub pre: bindings::EnginePre<HostState>,
    /// The same component with every import linked, for `run-execution` (async calls).
    pub execution_pre: bindings::EnginePre<HostState>,
    /// Where the compiled code came from.
    pub cache: CacheOutcome,
}

impl std::fmt::Debug for ComponentRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentRuntime")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

/// The engine configuration every m3 host uses.
pub fn engine_config() -> Config {
    let mut config = Config::new();
    // The component's compute budget is counted in fuel (one unit per WebAssembly operation,
    // about): the same input costs the same on every machine, loaded or not.
    config.consume_fuel(true);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    config
}

fn load_error(e: impl std::fmt::Display) -> EngineError {
    EngineError {
        kind: EngineErrorKind::Load,
        message: e.to_string(),
    }
}

impl ComponentRuntime {
    /// Builds a runtime for `wasm` (whose SHA-256 is `wasm_sha256`), caching its compiled code in
    /// `cache_dir`.
    pub fn new(
        wasm: &[u8],
        wasm_sha256: &str,
        cache_dir: Option<&std::path::Path>,
    ) -> Result<Self, EngineError> {
        let engine = Engine::new(&engine_config()).map_err(load_error)?;
        let started = std::time::Instant::now();
        let compiling = || crate::component::notice::compiling(cache_dir);
        let (component, cache) =
            cache::load(&engine, wasm, wasm_sha256, cache_dir, &compiling).map_err(load_error)?;
        if !matches!(cache, CacheOutcome::Hit(_)) {
            crate::component::notice::compiled(started.elapsed(), &cache);
        }
        let mut linker = Linker::<HostState>::new(&engine);
        sandbox::link_sync(&mut linker, &component).map_err(load_error)?;
        let instance_pre = linker.instantiate_pre(&component).map_err(load_error)?;
        let pre = bindings::EnginePre::new(instance_pre).map_err(load_error)?;
        let mut linker = Linker::<HostState>::new(&engine);
        sandbox::link(&mut linker, &component).map_err(load_error)?;
        let instance_pre = linker.instantiate_pre(&component).map_err(load_error)?;
        let execution_pre = bindings::EnginePre::new(instance_pre).map_err(load_error)?;
        Ok(Self {
            engine,
            component,
            pre,
            execution_pre,
            cache,
        })
    }

    /// The runtime of this process: the embedded component, compiled once.
    pub fn shared() -> Result<Arc<Self>, EngineError> {
        SHARED
            .get_or_init(|| {
                let dir = cache::default_cache_dir();
                if let Some(mutant) = crate::checks::mutation::component() {
                    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(mutant));
                    return Self::new(mutant, &digest, dir.as_deref()).map(Arc::new);
                }
                Self::new(GUEST_WASM, GUEST_WASM_SHA256, dir.as_deref()).map(Arc::new)
            })
            .clone()
    }

    /// The shared runtime if this process has loaded it (never loads it).
    pub fn shared_if_loaded() -> Option<Arc<Self>> {
        SHARED.get().and_then(|r| r.as_ref().ok()).cloned()
    }
}

/// The process's shared runtime, once loaded.
static SHARED: OnceLock<Result<Arc<ComponentRuntime>, EngineError>> = OnceLock::new();

//! What the component may reach: the m3 imports, `wasi:random`, and nothing else.
//!
//! Every other import (environment, stdio, clocks, filesystem, sockets) is defined as a function
//! that traps, so the component has no ambient authority.

use crate::bindings;
use crate::guest_imports::HostState;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime_wasi::random::WasiRandom;

/// Who provides one import of the component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportProvider {
    /// The host's m3 interfaces (`clock`, `store`, `types`).
    M3Host,
    /// Host randomness (`wasi:random/*`).
    WasiRandom,
    /// Nothing: calling it traps.
    Trap,
}

/// One import of the component and what the sandbox binds it to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportBinding {
    /// The import's name (`package:namespace/interface@version`).
    pub name: String,
    /// What it is bound to.
    pub provider: ImportProvider,
}

/// The binding policy for one import name.
pub fn provider_for(name: &str) -> ImportProvider {
    if name.starts_with("m3:managed-input/") {
        ImportProvider::M3Host
    } else if name.starts_with("wasi:random/") {
        ImportProvider::WasiRandom
    } else {
        ImportProvider::Trap
    }
}

/// Defines every import of `component` in `linker` according to [`provider_for`], for
/// executions: `process` and `events` included (async host functions, so stores made from this
/// linker are called with `call_async`).
pub fn link(linker: &mut Linker<HostState>, component: &Component) -> wasmtime::Result<()> {
    bindings::Engine::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    link_random_and_traps(linker, component)
}

/// Like [`link`] for stores that only make synchronous calls (the store API, policy checks,
/// submissions): `clock` and `store` are linked; `process` and `events` trap if called.
pub fn link_sync(linker: &mut Linker<HostState>, component: &Component) -> wasmtime::Result<()> {
    use bindings::m3::managed_input::{clock, store, types};
    types::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    clock::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    store::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    link_random_and_traps(linker, component)
}

fn link_random_and_traps(
    linker: &mut Linker<HostState>,
    component: &Component,
) -> wasmtime::Result<()> {
    use wasmtime_wasi::p2::bindings::random;
    random::random::add_to_linker::<HostState, WasiRandom>(linker, |s| &mut s.random)?;
    random::insecure::add_to_linker::<HostState, WasiRandom>(linker, |s| &mut s.random)?;
    random::insecure_seed::add_to_linker::<HostState, WasiRandom>(linker, |s| &mut s.random)?;
    linker.define_unknown_imports_as_traps(component)?;
    Ok(())
}

/// Every import of `component`, with what the sandbox binds it to.
pub fn imports(engine: &wasmtime::Engine, component: &Component) -> Vec<ImportBinding> {
    component
        .component_type()
        .imports(engine)
        .map(|(name, _)| ImportBinding {
            name: name.to_string(),
            provider: provider_for(name),
        })
        .collect()
}

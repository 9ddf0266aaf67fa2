//! What the component may reach: the m3 imports, `wasi:random`, and (for an execution) the
//! `wasi:http` requests its grant allows, and nothing else.
//!
//! Every other import (environment, stdio, clocks, filesystem, sockets) is defined as a function
//! that traps, so the component has no ambient authority. `wasi:http` is linked only for
//! executions: its requests go to the execution's server origin alone (see
//! [`crate::imports::network`]); in every other store (the store API, policy checks,
//! submissions) it traps like the rest.

use crate::component::bindings;
use crate::imports::HostState;
use crate::imports::process::ProcessContext;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime_wasi::random::WasiRandom;

/// Who provides one import of the component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportProvider {
    /// The host's m3 interfaces (`clock`, `store`, `types`).
    M3Host,
    /// Host randomness (`wasi:random/*`).
    WasiRandom,
    /// `wasi:http/*` in executions (requests to the server's origin alone); traps elsewhere.
    WasiHttp,
    /// `wasi:io/*` (the streams and pollables of `wasi:http`) in executions; traps elsewhere.
    WasiIo,
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

/// A probe of the sandbox, run inside the component ([`crate::Policy::probe`]): each tries one
/// thing the sandbox must refuse (or, for `Random`, allow).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxProbe {
    /// Read the environment (`wasi:cli/environment`): traps.
    Environment,
    /// Read the WASI wall clock: traps.
    WallClock,
    /// Write to standard output: traps.
    Stdout,
    /// Read a file: traps (there is no preopened directory).
    Filesystem,
    /// Read `wasi:random`: allowed, returns normally.
    Random,
    /// Compute forever: traps at the compute budget.
    Spin,
    /// Allocate the given number of bytes: traps above the memory limit.
    Allocate,
    /// Send an HTTP request to `127.0.0.1` at the given port: traps (no network outside an
    /// execution granted its server's origin).
    Network,
}

impl From<SandboxProbe> for bindings::exports::m3::managed_input::sandbox_probe::Probe {
    fn from(probe: SandboxProbe) -> Self {
        use bindings::exports::m3::managed_input::sandbox_probe::Probe;
        match probe {
            SandboxProbe::Environment => Probe::Environment,
            SandboxProbe::WallClock => Probe::WallClock,
            SandboxProbe::Stdout => Probe::Stdout,
            SandboxProbe::Filesystem => Probe::Filesystem,
            SandboxProbe::Random => Probe::Random,
            SandboxProbe::Spin => Probe::Spin,
            SandboxProbe::Allocate => Probe::Allocate,
            SandboxProbe::Network => Probe::Network,
        }
    }
}

/// The binding policy for one import name.
pub fn provider_for(name: &str) -> ImportProvider {
    if name.starts_with("m3:managed-input/") {
        ImportProvider::M3Host
    } else if name.starts_with("wasi:random/") {
        ImportProvider::WasiRandom
    } else if name.starts_with("wasi:http/") {
        ImportProvider::WasiHttp
    } else if name.starts_with("wasi:io/") {
        ImportProvider::WasiIo
    } else {
        ImportProvider::Trap
    }
}

/// Defines every import of `component` in `linker` according to [`provider_for`], for
/// executions: `process` and `events` included (async host functions, so stores made from this
/// linker are called with `call_async`).
pub fn link(linker: &mut Linker<HostState>, component: &Component) -> wasmtime::Result<()> {
    use bindings::m3::managed_input::{events, process};
    use wasmtime::component::ResourceTable;
    use wasmtime_wasi::p2::bindings::io;
    link_clock_and_store(linker)?;
    process::add_to_linker::<HostState, HasSelf<ProcessContext>>(linker, HostState::for_process)?;
    events::add_to_linker::<HostState, HasSelf<ProcessContext>>(linker, HostState::for_process)?;
    io::error::add_to_linker::<HostState, HasSelf<ResourceTable>>(linker, HostState::for_io)?;
    io::poll::add_to_linker::<HostState, HasSelf<ResourceTable>>(linker, HostState::for_io)?;
    io::streams::add_to_linker::<HostState, HasSelf<ResourceTable>>(linker, HostState::for_io)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    link_random_and_traps(linker, component, &|name| {
        provider_for(name) != ImportProvider::Trap
    })
}

/// Like [`link`] for stores that only make synchronous calls (the store API, policy checks,
/// submissions): `clock` and `store` are linked; `process`, `events`, `wasi:http` and
/// `wasi:io` trap if called.
pub fn link_sync(linker: &mut Linker<HostState>, component: &Component) -> wasmtime::Result<()> {
    link_clock_and_store(linker)?;
    link_random_and_traps(linker, component, &|name| {
        provider_for(name) == ImportProvider::WasiRandom
            || ["clock@", "store@", "types@"]
                .iter()
                .any(|i| name.starts_with(&format!("m3:managed-input/{i}")))
    })
}

/// The `clock` and `store` imports, each linked to its own context by a projection of
/// [`HostState`] (which also marks the return to the component for the compute budget's refill).
fn link_clock_and_store(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    use crate::imports::{clock::ClockContext, store::StoreContext};
    use bindings::m3::managed_input::{clock, store, types};
    types::add_to_linker::<HostState, HasSelf<ClockContext>>(linker, HostState::for_clock)?;
    clock::add_to_linker::<HostState, HasSelf<ClockContext>>(linker, HostState::for_clock)?;
    store::add_to_linker::<HostState, HasSelf<StoreContext>>(linker, HostState::for_store)?;
    Ok(())
}

/// Links `wasi:random`, and makes every function of an import that is not `linked` (by the
/// caller, or randomness) trap.
fn link_random_and_traps(
    linker: &mut Linker<HostState>,
    component: &Component,
    linked: &dyn Fn(&str) -> bool,
) -> wasmtime::Result<()> {
    use wasmtime_wasi::p2::bindings::random;
    random::random::add_to_linker::<HostState, WasiRandom>(linker, |s| &mut s.random)?;
    random::insecure::add_to_linker::<HostState, WasiRandom>(linker, |s| &mut s.random)?;
    random::insecure_seed::add_to_linker::<HostState, WasiRandom>(linker, |s| &mut s.random)?;
    // Every function of a forbidden interface traps and records which one was called, so a
    // trap is told to be a forbidden import by the host's state, not by its message.
    use wasmtime::component::types::ComponentItem;
    let engine = linker.engine().clone();
    let imports: Vec<(String, ComponentItem)> = component
        .component_type()
        .imports(&engine)
        .map(|(name, item)| (name.to_string(), item.ty))
        .collect();
    // The resources the linked interfaces define: a forbidden interface that names one of them
    // (`use`, as `wasi:cli/stdout` names `wasi:io`'s `output-stream`) must not define it again.
    let mut linked_resources = Vec::new();
    for (name, item) in &imports {
        if let ComponentItem::ComponentInstance(instance) = item
            && linked(name)
        {
            for (_, export) in instance.exports(&engine) {
                if let ComponentItem::Resource(resource) = export.ty {
                    linked_resources.push(resource);
                }
            }
        }
    }
    for (name, item) in &imports {
        if linked(name) {
            continue;
        }
        let ComponentItem::ComponentInstance(instance) = item else {
            continue;
        };
        let mut defined = linker.instance(name)?;
        for (export_name, export) in instance.exports(&engine) {
            match export.ty {
                ComponentItem::ComponentFunc(_) => {
                    let called = format!("{name}#{export_name}");
                    defined.func_new(export_name, move |mut ctx, _, _, _| {
                        ctx.data_mut().forbidden_import = Some(called.clone());
                        Err(wasmtime::Error::msg(format!(
                            "forbidden import `{called}`: the sandbox gives the component no \
                             such capability"
                        )))
                    })?;
                }
                // A resource of its own is defined inertly (nothing can make one).
                ComponentItem::Resource(resource) if !linked_resources.contains(&resource) => {
                    defined.resource(
                        export_name,
                        wasmtime::component::ResourceType::host::<()>(),
                        |_, _| Ok(()),
                    )?;
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Every import of `component`, with what the sandbox binds it to in an execution.
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

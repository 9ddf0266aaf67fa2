//! What the host gives the component: the per-instance state, holding one context per
//! capability (`clock`, `store`, `process` and `events`, and `wasi:http` for an execution whose
//! server is reached over HTTP), each import linked to its own context by a projection. Pure
//! I/O: the host tells the time, runs transactions, reports what its child process does and
//! carries the HTTP requests it is allowed to; it decides nothing.
//!
//! # Files
//!
//! What the host gives the component, one context per capability: `mod.rs`: `HostState`, the state
//! of one instance (its memory limiter, `wasi:random`, the budget mark and the contexts), and its
//! projections `for_clock`, `for_store`, `for_process`, the one place an import marks the return to
//! the component for the compute budget's refill.
//!
//! - `clock.rs`: `ClockContext`, the `clock` host function.
//! - `store.rs`: `StoreContext`, the `store` host functions (transactions as resources on the
//!   database).
//! - `process.rs`: `ProcessContext` and `ExecutionIo`, the `process` and `events` host functions:
//!   the child gets exactly the kit's `env` plus the binding's `env` (held by the host only; for a
//!   harness that starts the server itself, the binding's `env` goes to the private home's
//!   `config.toml` instead, for that server alone), stdout events come before exit, `next` selects
//!   over output, the execution's wake-up `Notify` (registered on its id: only commits that concern
//!   it), the timeout and the watched `wasi:io` pollables (polled on the instance's resource table,
//!   `ready`); the child is reaped whatever ends the call. The context also holds the instance's
//!   `wasi:http` state (resource table, settings, grant), linked by `HostState`'s `WasiHttpView`
//!   and `for_io`, neither an m3 import (returning from them refills no budget).
//! - `network.rs`: `NetworkGrant`, the execution's grant as `wasi:http`'s send hook: a request
//!   whose origin is not the server's is refused (`HttpRequestDenied`, before any connection),
//!   redirects included (each hop is a request of the component's own); the binding's headers are
//!   added to every request let through (marked sensitive; their values never enter the component);
//!   `server_origin` and `header` check a binding at submission (typed errors that name a header,
//!   never its value).

pub mod clock;
pub mod network;
pub mod process;
pub mod store;

use crate::api::clock::Clock;
use crate::store::Backend;
use std::sync::Arc;
use wasmtime_wasi::random::WasiRandomCtx;

/// Memory limiter of one instance; remembers whether it refused a growth.
pub struct GuestLimiter {
    /// Most bytes of linear memory.
    pub max_memory: usize,
    /// Set when a growth past the limit was refused (and trapped).
    pub refused: bool,
}

impl wasmtime::ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_memory {
            self.refused = true;
            wasmtime::bail!("guest memory limit of {} bytes exceeded", self.max_memory);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// The state of one component instance.
pub struct HostState {
    /// `wasi:random`.
    pub random: WasiRandomCtx,
    /// Memory limits.
    pub limiter: GuestLimiter,
    /// The `clock` import's context.
    clock: clock::ClockContext,
    /// The `store` import's context (no database for policy-only use: every transaction
    /// fails).
    store: store::StoreContext,
    /// An m3 import ran since the component's budget was last refilled: the component's fuel
    /// is refilled as the host returns to it (only m3 imports refill it: a loop on a runtime
    /// library call or `wasi:random` never does).
    pub host_returned: bool,
    /// The most fuel used between two refills since the host last reset it (diagnostics).
    pub fuel_peak: u64,
    /// The forbidden import the component called (`interface#function`), if it called one: its
    /// trap is then a `ForbiddenImport`, told by this, not by the trap's message.
    pub forbidden_import: Option<String>,
    /// The execution's child process and events (`None` outside `run-execution`: the
    /// `process` import then refuses and `events.next` only times out).
    pub process: process::ProcessContext,
}

impl HostState {
    /// State for a new instance.
    pub fn new(clock: Arc<dyn Clock>, db: Option<Arc<Backend>>, max_memory: usize) -> Self {
        Self {
            random: WasiRandomCtx::default(),
            limiter: GuestLimiter {
                max_memory,
                refused: false,
            },
            clock: clock::ClockContext::new(clock),
            store: store::StoreContext::new(db),
            host_returned: false,
            fuel_peak: 0,
            forbidden_import: None,
            process: process::ProcessContext::default(),
        }
    }

    /// Marks that the host is about to return to the component: the call hook then refills its
    /// compute budget. Every m3 import is reached through one of the projections below, which
    /// call this: the one place it happens.
    fn returning(&mut self) {
        self.host_returned = true;
    }

    /// The `clock` capability (the `types` interface, which has no functions, is linked here
    /// too).
    pub(crate) fn for_clock(&mut self) -> &mut clock::ClockContext {
        self.returning();
        &mut self.clock
    }

    /// The `store` capability.
    pub(crate) fn for_store(&mut self) -> &mut store::StoreContext {
        self.returning();
        &mut self.store
    }

    /// The `process` and `events` capabilities (one child process, its events).
    pub(crate) fn for_process(&mut self) -> &mut process::ProcessContext {
        self.returning();
        &mut self.process
    }

    /// The resources of `wasi:io` (pollables and streams of the execution's HTTP exchanges).
    /// Not an m3 import: returning from it does not refill the compute budget.
    pub(crate) fn for_io(&mut self) -> &mut wasmtime::component::ResourceTable {
        &mut self.process.table
    }
}

impl wasmtime_wasi_http::WasiHttpView for HostState {
    /// `wasi:http`, limited to the execution's [`network::NetworkGrant`] (nothing outside an
    /// execution whose server is reached over HTTP). Not an m3 import: returning from it does
    /// not refill the compute budget.
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        let process = &mut self.process;
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut process.http,
            table: &mut process.table,
            hooks: &mut process.network,
        }
    }
}

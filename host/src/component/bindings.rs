//! Host bindings generated from `wit/` (world `engine`).
//!
//! `events.next`, `events.next-holding`, `process.write-line` and the `runtime.run-execution` export are async: an
//! execution waiting for its server or for an answer suspends on tokio instead of holding a
//! thread. Stores that only use the synchronous exports never link the async imports (see
//! `sandbox::link_sync`), so they keep plain synchronous calls.

#![allow(missing_docs)]

wasmtime::component::bindgen!({
    world: "engine",
    path: "../wit",
    imports: {
        "m3:managed-input/events.next": async | trappable,
        "m3:managed-input/events.next-holding": async | trappable,
        "m3:managed-input/process.write-line": async | trappable,
        default: trappable,
    },
    exports: {
        "m3:managed-input/runtime.run-execution": async,
    },
    with: {
        "m3:managed-input/store.transaction": crate::store::Transaction,
        "wasi:io/poll": wasmtime_wasi::p2::bindings::io::poll,
    },
});

/// Bindings of the `policy-only` world, for hosts that embed only the validation rules.
pub mod policy_only {
    wasmtime::component::bindgen!({
        world: "policy-only",
        path: "../wit",
    });
}

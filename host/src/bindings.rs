//! Host bindings generated from `wit/` (world `engine`).

#![allow(missing_docs)]

wasmtime::component::bindgen!({
    world: "engine",
    path: "../wit",
    imports: { default: trappable },
    with: {
        "m3:managed-input/store.transaction": crate::sqlite::transaction::Transaction,
    },
});

/// Bindings of the `policy-only` world, for hosts that embed only the validation rules.
pub mod policy_only {
    wasmtime::component::bindgen!({
        world: "policy-only",
        path: "../wit",
    });
}

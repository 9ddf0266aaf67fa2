//! The WebAssembly components the `m3` host embeds, built from `guest/` by this crate's build
//! script (a crate of its own so that the build starts as soon as its helper is compiled, not
//! after the host's native dependencies' build scripts).

/// The engine component (`wasm32-wasip2`, profile `guest`).
pub static GUEST: &[u8] = include_bytes!(env!("M3_GUEST_WASM_PATH"));

/// SHA-256 (hex) of [`GUEST`], computed by the build script.
pub const GUEST_SHA256: &str = env!("M3_GUEST_WASM_SHA256");

/// The policy-only component (`wasm32-unknown-unknown` encoded as a component, profile
/// `policy`): validation and the round state machine, importing only `wasi:random`.
pub static POLICY: &[u8] = include_bytes!(env!("M3_POLICY_WASM_PATH"));

/// The mutation check's components, each with one rule broken (feature `mutations` only).
#[cfg(feature = "mutations")]
pub mod mutants {
    /// A conflicting answer under a used idempotency key taken as a repeat.
    pub static IDEMPOTENCY_CONFLICT: &[u8] =
        include_bytes!(env!("M3_MUTANT_IDEMPOTENCY_CONFLICT_PATH"));
    /// Any lease accepted, not only the current, live holder's.
    pub static LEASE_FENCING: &[u8] = include_bytes!(env!("M3_MUTANT_LEASE_FENCING_PATH"));
    /// Ended rounds treated as open.
    pub static TERMINAL_REFUSAL: &[u8] = include_bytes!(env!("M3_MUTANT_TERMINAL_REFUSAL_PATH"));
    /// A server's withdrawal of its request ignored.
    pub static WITHDRAWN_CLOSURE: &[u8] = include_bytes!(env!("M3_MUTANT_WITHDRAWN_CLOSURE_PATH"));
}

//! The WebAssembly components the `m3` host embeds, built from `guest/` by this crate's build
//! script (a crate of its own so that the build starts as soon as its helper is compiled, not
//! after the host's native dependencies' build scripts).
//!
//! # Files
//!
//! - `host/components/` (crate `m3-components`): `build.rs` builds the guest component (and its
//!   SHA-256) and the policy-only component, and `lib.rs` embeds them (`GUEST`, `POLICY`; the host
//!   re-exports them as `GUEST_WASM` and `POLICY_COMPONENT`). A crate of its own with no dependency
//!   that declares `links`, because cargo runs a build script only after the build scripts of such
//!   dependencies (`libsqlite3-sys` compiles SQLite's C source): this one, the longest step of a
//!   first build, starts as soon as its helper is compiled. The helper is
//!   `host/build-support/src/lib.rs` (crate `m3-build-support`: the nested `cargo rustc` with a
//!   target directory per profile, `wasm-guest/<profile>`, and a clean environment, per target,
//!   profile and features, and the `wit-component` encoding of a `wasm32-unknown-unknown` module,
//!   under a lock per profile so concurrent builds never read each other's output; shared with the
//!   minimal example). The engine and the policy-only component build at the same time, on two
//!   threads of the build script. With the host's test feature `mutations` (which turns on the
//!   crate's own) it also builds the mutation check's components (profile `mutant`, one
//!   `mutate-<rule>` feature each, their paths in `mutants::*`) and refuses two identical ones.

/// The engine component (`wasm32-wasip2`, profile `guest`).
pub static GUEST: &[u8] = include_bytes!(env!("M3_GUEST_WASM_PATH"));

/// SHA-256 (hex) of [`GUEST`], computed by the build script.
pub const GUEST_SHA256: &str = env!("M3_GUEST_WASM_SHA256");

/// The policy-only component (`wasm32-unknown-unknown` encoded as a component, profile
/// `policy`): validation and the round state machine, importing only `wasi:random`.
pub static POLICY: &[u8] = include_bytes!(env!("M3_POLICY_WASM_PATH"));

/// The paths of the mutation check's components, each with one rule broken (feature
/// `mutations` only). Read when a process runs with a mutation, not embedded: embedded, they
/// added megabytes to every test binary.
#[cfg(feature = "mutations")]
pub mod mutants {
    /// A conflicting answer under a used idempotency key taken as a repeat.
    pub const IDEMPOTENCY_CONFLICT: &str = env!("M3_MUTANT_IDEMPOTENCY_CONFLICT_PATH");
    /// Any lease accepted, not only the current, live holder's.
    pub const LEASE_FENCING: &str = env!("M3_MUTANT_LEASE_FENCING_PATH");
    /// Ended rounds treated as open.
    pub const TERMINAL_REFUSAL: &str = env!("M3_MUTANT_TERMINAL_REFUSAL_PATH");
    /// A server's withdrawal of its request ignored.
    pub const WITHDRAWN_CLOSURE: &str = env!("M3_MUTANT_WITHDRAWN_CLOSURE_PATH");
}

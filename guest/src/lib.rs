//! The m3 managed-input component.
//!
//! Every validation rule and every state-machine decision of managed elicitation input lives here;
//! the host only stores rows and tells the time. Built for `wasm32-wasip2` with wit-bindgen.
//!
//! Two artifacts come from this crate. With the default `engine` feature it is the `engine` world
//! (store protocol, runtime, sandbox probes over the host's imports). Without it (`--profile
//! policy --no-default-features`) it is the small `policy-only` world: validation and the pure
//! round state machine, importing nothing but `wasi:random`.
//!
//! # Files
//!
//! - `lib.rs`: bindings, the `Component` type and `export!`, the two folders below re-exported at
//!   the crate root (so every path reads `crate::<module>`), and (policy-only build) getrandom's
//!   custom backend over the imported `wasi:random`. The two worlds meet only here: `policy/` is
//!   always built, `engine/` only with the feature `engine`.

#![allow(missing_docs)] // the generated bindings carry the WIT documentation

#[cfg(feature = "engine")]
wit_bindgen::generate!({
    world: "engine",
    path: "../wit",
    additional_derives: [serde::Serialize, serde::Deserialize, PartialEq],
    // The pollables of `wasi:http` exchanges, as the `wasip2` bindings make them.
    with: { "wasi:io/poll@0.2.12": wasip2::io::poll },
});

#[cfg(not(feature = "engine"))]
wit_bindgen::generate!({
    world: "policy-only",
    path: "../wit",
    generate_all,
    additional_derives: [serde::Serialize, serde::Deserialize, PartialEq],
});

/// Lease tokens in the policy-only component: getrandom's custom backend over the imported
/// `wasi:random/random` (the component is built for `wasm32-unknown-unknown`, which has no
/// source of randomness of its own).
#[cfg(not(feature = "engine"))]
mod entropy {
    /// getrandom 0.3's custom backend hook (`--cfg getrandom_backend="custom"`).
    ///
    /// # Safety
    ///
    /// getrandom calls it with `dest` valid for writes of `len` bytes.
    #[unsafe(no_mangle)]
    unsafe extern "Rust" fn __getrandom_v03_custom(
        dest: *mut u8,
        len: usize,
    ) -> Result<(), getrandom::Error> {
        let bytes = crate::wasi::random::random::get_random_bytes(len as u64);
        if bytes.len() != len {
            return Err(getrandom::Error::UNEXPECTED);
        }
        // SAFETY: `dest` is valid for `len` bytes (the caller's contract) and `bytes` has `len`.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), dest, len) };
        Ok(())
    }
}

mod policy;
pub use policy::{
    canonical, errors, execution_rules, lease, lifecycle, mutation, responses, round_protocol,
    schema, strict_json, submission,
};

#[cfg(feature = "engine")]
mod engine;
#[cfg(feature = "engine")]
pub use engine::{mcp, probe, record, record_cache, redaction, runtime, store_protocol, stored};

/// Time: the pure arithmetic of the policy rules, and (in the engine) the host's clock.
pub mod time {
    #[cfg(feature = "engine")]
    pub use crate::engine::clock::now;
    pub use crate::policy::time::*;
}

/// The component's export implementations (`policy/exports.rs`, `engine/exports.rs`).
struct Component;

export!(Component);

//! The engine: the store protocol over the host's `store` import, the stored format, the
//! execution runtime (workers, harness sessions, recovery), the MCP client, redaction and the
//! sandbox probes. Only in the engine component (cargo feature `engine`).
//!
//! # Files
//!
//! Every file of this folder is built into the engine only.
//!
//! - `exports.rs`: the `managed-input`, `runtime` and `sandbox-probe` exports.
//! - `clock.rs`: the host's `clock`.
//! - `store_protocol.rs`: the twelve operations, each one host transaction: read the row,
//!   `round_protocol::decide`, write with compare-and-set (or nothing for an idempotent repeat).
//! - `record.rs`: record <-> row (indexed columns + the round's stored document; the lease expiry
//!   and update time read from the columns, which a renewal moves alone).
//! - `record_cache.rs`: the rounds this instance decoded or wrote lately, each with its document's
//!   text: the same text read again is cloned, not decoded (bounded in bytes).
//! - `redaction.rs`: the diagnostic projection.
//! - `probe.rs`: sandbox probes.

pub mod clock;
mod exports;
pub mod mcp;
pub mod probe;
pub mod record;
pub mod record_cache;
pub mod redaction;
pub mod runtime;
pub mod store_protocol;
pub mod stored;

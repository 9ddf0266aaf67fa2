//! The engine: the store protocol over the host's `store` import, the stored format, the
//! execution runtime (workers, harness sessions, recovery), the MCP client, redaction and the
//! sandbox probes. Only in the engine component (cargo feature `engine`).

pub mod clock;
mod exports;
pub mod mcp;
pub mod probe;
pub mod record;
pub mod redaction;
pub mod runtime;
pub mod store_protocol;
pub mod stored;

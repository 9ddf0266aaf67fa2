//! The MCP client side of managed elicitation, as pure functions over JSON-RPC messages: no I/O.
//! The execution runtime feeds it the server's messages (lines of its stdout, or the bodies and
//! events of its HTTP responses) and sends what it returns.
//!
//! - [`framing`]: newline-delimited JSON-RPC over stdio, with a bounded line length.
//! - [`sse`]: Server-Sent Events framing (Streamable HTTP responses), with bounds.
//! - [`endpoint`]: a Streamable HTTP server's URL, its origin and its redirects.
//! - [`param_headers`]: the headers that carry a request's values in 2026-07-28 (`Mcp-Name`,
//!   `x-mcp-header` parameters).
//! - [`message`]: routing an incoming message by kind (request to us, notification, response).
//! - [`era`]: choosing the protocol era (`server/discover` probe, `initialize` fallback).
//! - [`legacy`]: server-initiated `elicitation/create` (MCP 2025-06-18 and 2025-11-25).
//! - [`mrtr`]: multi round-trip requests (`input_required`, MCP 2026-07-28).
//! - [`request`]: turning a server's elicitation parameters into a round's request.
//! - [`schema_order`]: the order in which a server wrote a schema's properties.

pub mod endpoint;
pub mod era;
pub mod framing;
pub mod legacy;
pub mod message;
pub mod mrtr;
pub mod param_headers;
pub mod request;
pub mod schema_order;
pub mod sse;

/// The `_meta` key a server may set to name the request key of a single elicitation.
pub const REQUEST_KEY_HINT: &str = "m3/request_key";
/// The request key of a single elicitation without a hint.
pub const DEFAULT_REQUEST_KEY: &str = "elicitation";
/// The modern protocol version.
pub const MODERN_VERSION: &str = "2026-07-28";
/// The legacy protocol version the client asks for.
pub const LEGACY_VERSION: &str = "2025-11-25";
/// Default cap on the rounds of one operation (every MCP SDK uses 10).
pub const DEFAULT_ROUND_LIMIT: u32 = 10;

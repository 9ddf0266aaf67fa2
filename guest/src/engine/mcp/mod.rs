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
//!
//! # Files
//!
//! The MCP client side as pure functions over JSON-RPC values (the worker drives them).
//!
//! - `mod.rs`: the module's map.
//! - `framing.rs`: bounded newline framing.
//! - `message.rs`: routing by kind (server requests share our id space).
//! - `era.rs`: `server/discover` probe, `initialize` fallback, modern `_meta`.
//! - `request.rs`: elicitation params -> round request, request keys (`_meta["m3/request_key"]` or
//!   `elicitation`).
//! - `schema_order.rs`: the order a server wrote a `requestedSchema`'s properties in, read from the
//!   line (a thread-local kept until the next line), and the schema's text in it.
//! - `legacy.rs`: `elicitation/create`, -32042 URL lists keyed `url-N`.
//! - `mrtr.rs`: `input_required` (keys and `requestState` verbatim, retries, `-32602` ->
//!   `invalid_request_state`).
//! - `sse.rs`: Server-Sent Events framing of Streamable HTTP responses (every line ending,
//!   comments, `id` and `retry` kept for resumption, an event's own id for de-duplication), bounded
//!   per event.
//! - `endpoint.rs`: a server URL's scheme, authority and path, its origin (normalised as the host
//!   normalises it) and the targets of its redirects.
//! - `param_headers.rs`: SEP-2243 header values (plain, or `=?base64?...?=`) and a tool's
//!   `x-mcp-header` annotations, with the rules that make a tool uncallable.

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

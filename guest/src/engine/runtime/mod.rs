//! The execution runtime: executions as stored rows, the worker that drives one to its end, and
//! recovery. Each harness session is a state machine written "sans I/O" that speaks the
//! [`session`] protocol; the worker performs its actions against the host's `process`/`events`
//! imports and the store.
//!
//! - `session`: the protocol between a session and the worker (inputs, actions, how it ended).
//! - `scripted`: one MCP server connection driven by the scripted harness: era probe,
//!   handshake, the script's tool calls in order, and elicitation rounds in both eras.
//! - `codex`: one `codex app-server` connection driven by the codex harness.
//! - `worker`: `run-execution`: claim, spawn (or connect), wait, deliver, renew, finish.
//! - `http_link`: the Streamable HTTP transport of a server reached over HTTP (`wasi:http`).
//! - `execution`: the executions table (submit, snapshot, cancel requests, leases, outcome).
//! - `plan`: elicitation plans for human input mode `fail`.
//! - `recovery`: `recover`.

pub mod codex;
pub mod execution;
pub mod http_link;
pub mod plan;
pub mod recovery;
pub mod scripted;
pub mod session;
pub mod worker;

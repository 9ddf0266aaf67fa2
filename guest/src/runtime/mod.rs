//! The execution runtime's decisions, written "sans I/O": a session is a state machine that takes
//! inputs (lines from the server, a committed answer, a timeout, a cancel) and returns actions
//! (lines to write, rounds to open, answers to deliver, results). The driver that performs the
//! actions against the host's `process`/`events` imports and the store comes with issue 3's
//! runtime; the machine is complete and unit-tested on its own.
//!
//! - [`scripted`]: one MCP server connection driven by the scripted harness: era probe,
//!   handshake, the script's tool calls in order, and elicitation rounds in both eras.

pub mod scripted;

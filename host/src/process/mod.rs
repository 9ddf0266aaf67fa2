//! Child processes (agent harnesses and MCP servers) for the execution runtime: each gets exactly
//! the environment it is given, a private scratch directory handed out as a capability, and is
//! killed (with its whole process group and session, `session.rs`) and reaped on every exit
//! path. Programs and working
//! directories are resolved once, at submission (`resolve.rs`).
//!
//! The host frames nothing: a child's stdout arrives as byte chunks, and the component's MCP
//! client does the line framing. Protocol knowledge stays in the component.

pub mod child;
pub mod home;
pub(crate) mod launch;
pub mod resolve;
pub mod scratch;
pub(crate) mod session;

pub use child::{ChildProcess, ProcessError, ProcessEvent, ProcessSpec};
pub use scratch::ScratchDir;

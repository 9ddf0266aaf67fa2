//! The public types: the specification's API in plain Rust types. `lib.rs` re-exports them;
//! nothing here names a generated binding type in a public signature.

pub mod clock;
pub mod error;
pub mod execution;
pub mod execution_store;
pub mod health;
pub mod managed_input;
pub mod policy;
pub mod record;
pub mod response;
pub mod round;
pub mod server;
pub mod submission;

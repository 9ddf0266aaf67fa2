//! Switches the reliability checks use: named crash points (`fault`) and the mutation check's
//! broken rules (`mutation`). Without their cargo features both compile to nothing.
//!
//! # Files
//!
//! - `mutation.rs`: with the test-only cargo feature `mutations`, `M3_MUTATION` names one broken
//!   rule: a guest rule runs a component built with it broken (`host/components/build.rs` builds
//!   one per rule), a host rule (the database path refusals) is skipped here; without the feature
//!   nothing is built and nothing can be switched.
//! - `fault.rs`: named fault points (`commit.before`, `commit.after`, `<operation>.returned`, and
//!   `server_output.matched`, reached when server output holding the text `M3_FAULT_MATCH`
//!   names is about to reach the component) that kill the process with SIGKILL
//!   when the cargo feature `fault-points` is on and `M3_FAULT_POINT` names them, or, with
//!   `M3_FAULT_PAUSE=<dir>`, pause it (`<dir>/paused`, until `<dir>/resume`, at most 60 s);
//!   nothing at all without the feature.

pub mod fault;
pub mod mutation;

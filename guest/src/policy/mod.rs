//! The policy rules: validation and the pure state machines, without storage or time. This is
//! all the policy-only component carries; the engine adds `crate::engine` on top.

pub mod canonical;
pub mod errors;
pub mod execution_rules;
mod exports;
pub mod lease;
pub mod lifecycle;
pub mod mutation;
pub mod prepared_round;
pub mod responses;
pub mod round_protocol;
pub mod schema;
pub mod strict_json;
pub mod submission;
pub mod time;

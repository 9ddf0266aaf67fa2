//! Switches the reliability checks use: named crash points (`fault`) and the mutation check's
//! broken rules (`mutation`). Without their cargo features both compile to nothing.

pub mod fault;
pub mod mutation;

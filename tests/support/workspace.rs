//! Where the workspace is and which cargo builds it: what the tests that read or build the
//! workspace share (the paths are the benchmarks' own, `m3_bench`).

use std::path::PathBuf;

pub use m3_bench::{target_dir, workspace_dir as workspace_root};

/// The cargo running the tests (`$CARGO`), else the one that built them.
pub fn cargo() -> PathBuf {
    std::env::var_os("CARGO").map_or_else(|| PathBuf::from(env!("CARGO")), PathBuf::from)
}

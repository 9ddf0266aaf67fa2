//! What the benchmarks of the three benchmark folders (`host/benches/`, `host/cli/benches/`,
//! `tests/benches/`) share, in one place: how a run was started (a full run or a smoke pass),
//! the fixtures, order statistics and their formatting, the printed table, where reports go
//! and the bundled shipping server's binary. A dev-dependency of the crates whose benchmarks
//! use it; nothing that ships depends on it.
//!
//! # Files
//!
//! - `run.rs`: [`RunArgs`], a full run or a smoke pass, and `--only=`.
//! - `fixture.rs`: the every-kind form and its answer, the booking agent, server and answer,
//!   pending address rounds, era names.
//! - `stats.rs`: [`Stats`] (order statistics), quantiles, timing and number formatting.
//! - `table.rs`: [`Table`], a printed table with padded columns.
//! - `report.rs`: the workspace and target directories, the JSON report's file, the load
//!   average.
//! - `shipping_server.rs`: the bundled shipping server's binary, built when missing.

pub mod fixture;
mod report;
mod run;
mod shipping_server;
pub mod stats;
mod table;

pub use report::{loadavg, target_dir, workspace_dir, write_report};
pub use run::RunArgs;
pub use shipping_server::shipping_server_binary;
pub use stats::Stats;
pub use table::Table;

/// What a benchmark step returns.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

//! PostgreSQL behind the component's `store` import: the same tables, rows and compare-and-set
//! as SQLite's (`sqlite/`), for executions and rounds shared by many machines.
//!
//! Every operation has a connection of its own for its duration (an idle one of its store
//! object's, or a new one). Writes are one sequence: each holds the database's write lock, an
//! advisory lock, until it ends (`transaction.rs`). Commits are heard by other processes through
//! `LISTEN`/`NOTIFY` (`database.rs`). The host knows tables and columns, never what a status
//! means.

pub mod connection;
pub mod database;
pub mod migrations;
pub mod server_clock;
pub(crate) mod store_error;
pub mod transaction;

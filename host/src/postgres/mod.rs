//! PostgreSQL behind the component's `store` import: the same tables, rows and compare-and-set
//! as SQLite's (`sqlite/`), for executions and rounds shared by many machines.
//!
//! Every operation has a connection of its own for its duration (an idle one of its store
//! object's, or a new one). Writes are one sequence: each holds the database's write lock, an
//! advisory lock, until it ends (`transaction.rs`). Commits are heard by other processes through
//! `LISTEN`/`NOTIFY` (`database.rs`). The host knows tables and columns, never what a status
//! means.
//!
//! # Files
//!
//! `mod.rs` (the module's rules), `connection.rs` (a connection driven on the backend's own
//! one-thread I/O runtime and called synchronously from any thread, its statements prepared once),
//! `server_clock.rs` (the server's time as a store's clock: the local clock plus its measured
//! offset from the server's), `database.rs` (the URL, shown without its password; opening and
//! migrating; the listening connection whose notifications move `data_version`; wake-up rows; `m3
//! doctor`'s health), `migrations.rs` (`m3_schema`: application and version; one migration: the
//! SQLite schema's tables at its version 6, ids compared byte by byte; a database already at the
//! version is opened by reading, the migration lock taken only to migrate, so stores opening at
//! once never queue), `transaction.rs` (the same rows and compare-and-set as
//! `host/src/sqlite/transaction.rs` and `host/src/sqlite/execution_rows.rs`, under the database's
//! write lock), `store_error.rs` (PostgreSQL's errors as the store import's, by SQLSTATE and
//! message, never the detail that quotes a row).

pub mod connection;
pub mod database;
pub mod migrations;
pub mod server_clock;
pub(crate) mod store_error;
pub mod transaction;

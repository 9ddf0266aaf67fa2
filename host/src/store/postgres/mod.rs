//! PostgreSQL behind the component's `store` import: the same tables, rows and compare-and-set
//! as SQLite's (`store/sqlite/`), for executions and rounds shared by many machines.
//!
//! The statements on the rows are SQLite's too, written once (`store/statements/`).
//!
//! Every operation has a connection of its own for its duration (an idle one of its store
//! object's, or a new one). The writes of one execution are one sequence: each write holds the
//! lock of every execution it touches, an advisory lock, until it ends, and writes of different
//! executions run side by side (`transaction.rs`, decision 0077). Commits are heard by other
//! processes through `LISTEN`/`NOTIFY`, the woken executions named in the payload (`database.rs`). The host knows tables and columns, never what a status
//! means.
//!
//! # Files
//!
//! `mod.rs` (the module's rules), `connection.rs` (a connection driven on the backend's own
//! one-thread I/O runtime and called synchronously from any thread, its statements prepared once,
//! several sent in one flight), `health.rs` (what `m3 doctor` reports of a database), `database.rs` (the URL, shown without its password; opening and
//! migrating; the listening connection whose notifications move `data_version` and name the
//! woken executions; `m3 doctor`'s health), `migrations.rs` (`m3_schema`: application and
//! version; migration 1: the SQLite schema's tables at its version 6, ids compared byte by byte;
//! 2: the wake-up numbers' sequence; a database already at the version is opened by reading, the
//! migration lock taken only to migrate, so stores opening at once never queue), `transaction.rs`
//! (a transaction: a read's snapshot, a write under the locks of the executions it touches, each
//! taken in one flight with the first statement that needs it; the commit's wake-ups and
//! notification), `adapter.rs` (the statements written once, `store/statements/`, prepared once
//! per connection with `?N` as `$N`, run under the locks `On` names), `store_error.rs` (PostgreSQL's errors as the store import's, by SQLSTATE and
//! message, never the detail that quotes a row).

pub(crate) mod adapter;
pub mod connection;
pub mod database;
pub mod health;
pub mod migrations;
pub(crate) mod store_error;
pub mod transaction;

//! SQLite behind the component's `store` import: opening, migrations and transactions.
//!
//! Every read has a connection of its own for its duration (an idle one of its store object's,
//! or a new one: `idle.rs`). Every write is a savepoint in a `BEGIN IMMEDIATE`
//! transaction that the writes of one store object waiting for each other share (group commit:
//! one durable commit for a burst, each write's `commit` returning only once it is durable).
//! The host knows tables and columns, never what a status means.

pub mod database;
pub mod execution_rows;
pub(crate) mod group_commit;
pub mod migrations;
pub(crate) mod store_error;
pub mod transaction;
pub mod wakeups;

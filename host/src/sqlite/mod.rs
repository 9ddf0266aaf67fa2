//! SQLite behind the component's `store` import: opening, migrations and transactions.
//!
//! Every operation opens its own connection; every write is one `BEGIN IMMEDIATE` transaction.
//! The host knows tables and columns, never what a status means.

pub mod database;
pub mod execution_rows;
pub mod id_prefix;
pub mod migrations;
pub mod transaction;
pub mod wakeups;

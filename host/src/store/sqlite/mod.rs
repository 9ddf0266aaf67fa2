//! SQLite behind the component's `store` import: opening, migrations and transactions.
//!
//! Every read has a connection of its own for its duration (an idle one of its store object's,
//! or a new one: `idle.rs`). Every write is a savepoint in a `BEGIN IMMEDIATE`
//! transaction that the writes of one store object waiting for each other share (group commit:
//! one durable commit for a burst, each write's `commit` returning only once it is durable).
//! The host knows tables and columns, never what a status means.
//!
//! # Files
//!
//! `mod.rs` (the module's rules: a connection per read, writes in savepoints of a shared `BEGIN
//! IMMEDIATE` transaction), `store_error.rs` (SQLite's errors as the store import's: `busy` or
//! `failure`), `group_commit.rs` (group commit: one write turn per store object; writes that wait
//! for each other share one SQLite transaction and one durable commit, each told the group's
//! outcome), `database.rs` (path checks, pragmas, WAL, the keeper connection; opening an up-to-date
//! store writes nothing), `migrations.rs` (`user_version`, `application_id`, six migrations),
//! `transaction.rs` (the `transaction` resource: a read on its own connection, a write in its
//! group's turn; wake-ups told on commit), `adapter.rs` (the statements written once,
//! `store/statements/`, run as cached prepared statements on the transaction's connection), `control.rs` (`BEGIN`,
//! `COMMIT`, `ROLLBACK` and savepoints from the connection's statement cache), `wakeups.rs` (targeted wake-ups: `wake-execution` stamps the execution's row of
//! `execution_wakeups` with the next number in the writing transaction; a commit tells this
//! process's waiters on that execution at once, the watcher tells the others), `synchronous.rs`
//! (`Synchronous`, how hard a commit is made durable), `health.rs` (what `m3 doctor` reads of a
//! file, opened read-only). Commits by other connections
//! and processes are noticed in one place, the worker's `host/src/worker/changes.rs`.

pub(crate) mod adapter;
pub(crate) mod control;
pub mod database;
pub(crate) mod group_commit;
pub mod health;
pub mod migrations;
pub(crate) mod store_error;
pub mod synchronous;
pub mod transaction;
pub mod wakeups;

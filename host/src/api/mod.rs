//! The public types: the specification's API in plain Rust types. `lib.rs` re-exports them;
//! nothing here names a generated binding type in a public signature.
//!
//! # Files
//!
//! - `health.rs`: `m3::health`, what `m3 doctor` reports: a database file's health read-only, the
//!   schema version, the engine component's bytes and digest, where its compiled code came from.
//! - `clock.rs`: `Clock` (UTC only), `SystemClock` and the tests' `ManualClock`.
//! - `managed_input.rs`: the `ManagedInputStore` trait (the spec's twelve methods, plus
//!   `submit_responses_json` for raw JSON) and `SqliteManagedInputStore`; edge size limits.
//! - `policy.rs`: `Policy`, the pure rules without a database (and the sandbox probes), and
//!   `POLICY_COMPONENT`, the same rules as a component for other hosts.
//! - `submission.rs`: `Submission`, `HumanInput` (default `Fail`) and `ModelValidationError`; the
//!   checks are the component's (`Policy::parse_human_input`, `check_human_input`,
//!   `check_tool_allow_list`).
//! - `execution_store.rs`: the `ExecutionStore` trait; `SqliteExecutionStore::open(path)` resolves
//!   its `SqliteManagedInputStore` (and its `Executions`) lazily on the same file and has
//!   `close()`; `InMemoryExecutionStore` resolves no managed-input store (managed input is refused
//!   with it) and keeps `fail`-mode executions in a private file deleted with it.
//! - `execution.rs`: what an execution is, for the kit and `Executions` alike: `ExecutionStatus`,
//!   `ExecutionState`, `ExecutionOutcome`, `ExecutionResult`, `ToolResult` (with its operation
//!   kind), `OperationTimeout` / `TimeoutCause`, and the conversion from the WIT state.
//! - `server.rs`: `StdioServer`, `HttpServer` (a Streamable HTTP server: URL, headers whose values
//!   `Debug` hides, era), `ServerBinding` (either, what a `Submission` holds; `From` both),
//!   `McpEra`.
//! - `round.rs`, `response.rs`, `record.rs`: public record types with the spec's names; `Debug`
//!   hides answers, lease tokens and idempotency keys.
//! - `migrate.rs`: `m3 migrate`: `migrate_sqlite_to_postgres` copies the eight tables of a SQLite
//!   file at the current schema version into an empty PostgreSQL database, every column verbatim
//!   (text, integer, NULL), the source read-only in one read snapshot, the target in one
//!   transaction holding its write lock exclusively; refused (`MigrateError`, nothing written)
//!   while a version row's lease is later than now or when the target holds rows; before `COMMIT`
//!   the rows are read back and compared, per table, by count and by a SHA-256 over a canonical
//!   encoding of each cell in primary-key order, any difference rolling back; `MigrationReport`:
//!   counts and digests.
//! - `notifications.rs`: the notification ledger of `m3 serve --notify` on a `DatabaseStore`:
//!   targets by id with the time their events start, events queued once per target by id,
//!   claimed by one server for a lease (a round's events in order), settled (delivered, due
//!   again after a backoff, abandoned), pruned, reported for `m3 doctor`.
//! - `server_clock.rs`: a PostgreSQL store's clock, the server's time: the local clock plus its
//!   measured offset from the server's.
//! - `error.rs`: `ManagedInputValidationError`, `ManagedInputConflict`, `ManagedInputStateError`,
//!   `ManagedInputRecoveryError` (plus `StorageError`, `EngineError`) in `ManagedInputError`, and
//!   `ErrorCode`.

pub mod clock;
pub mod error;
pub mod execution;
pub mod execution_store;
pub mod health;
pub mod managed_input;
pub mod migrate;
pub mod notifications;
pub mod policy;
pub mod record;
pub mod response;
pub mod round;
pub mod server;
pub mod server_clock;
pub mod submission;

//! The database behind a store object: SQLite (`sqlite/`) or PostgreSQL (`postgres/`), chosen
//! by how the database is named. Both run the same transactions for the same component over the
//! same rows, with the same statements (`statements/`), each database through its adapter. The store's own types only (`rows.rs`, `error.rs`): no other folder of the host is
//! used here but `checks/` (`tidy::host_folders_in_circles_are_only_the_known_ones`), and no
//! database client's type leaves it (`tidy::no_database_client_type_in_the_public_api`);
//! `component/store_rows.rs` maps the rows to the component's WIT records.
//!
//! # Files
//!
//! `mod.rs` (`Backend`, a store object's database, SQLite or PostgreSQL, and `Transaction`, the
//! `store` import's resource on either: dispatch to the statements; the ids of rounds and
//! executions read without decoding rows), `statements/` (each statement on the rows written
//! once for both databases, and the row logic around them, over each database's adapter: its own
//! code map), `schema.rs` (the one description of the schema: tables, columns, keys,
//! indexes and the status vocabulary; `m3 migrate` copies by it, and the backends' migrations
//! are held to it by tests), `rows.rs` (the rows as the store keeps them: ids, documents and statuses as
//! text, times as nanoseconds; a compare-and-set's wide row checked), `error.rs` (`StoreError`
//! and `OpenFailure`, described without the values they carried), `waiters.rs` (this process's
//! waiters by execution, woken by a commit here or by the change watcher), `idle.rs` (connections
//! between operations, of either backend: lent to one at a time, closed within a second of their
//! last use, never across a `fork`), `id_prefix.rs` (ids by prefix for people who type them
//! short: `IdMatches` and the bound `successor(p)`, so that `id >= p AND id < successor(p)` on the
//! primary key, with `%` and `_` literal, lists nothing in full; a full id is a point lookup;
//! `DatabaseStore::round_ids_with_prefix`, `Executions::execution_ids_with_prefix`),
//! `sqlite/` and `postgres/` (each backend, with its own code map).

pub mod error;
pub mod id_prefix;
pub mod idle;
pub mod postgres;
pub mod rows;
pub mod schema;
pub mod sqlite;
pub(crate) mod statements;
pub mod waiters;

pub use error::{OpenFailure, StoreError};

use rows::{Cursor, ExecutionRow, LeaseExpiry, Mode, RoundFilter, RoundRow};
use statements::{executions, ids, notifications, rounds};
use std::sync::Arc;
use waiters::Waiters;

/// A store object's database.
#[derive(Debug)]
pub enum Backend {
    /// A SQLite file.
    Sqlite(crate::store::sqlite::database::Database),
    /// A PostgreSQL database.
    Postgres(Box<crate::store::postgres::database::Database>),
}

/// One transaction of either backend: the resource behind the `store` import.
pub enum Transaction {
    /// On SQLite.
    Sqlite(crate::store::sqlite::transaction::Transaction),
    /// On PostgreSQL.
    Postgres(crate::store::postgres::transaction::Transaction),
}

/// Calls the same method on whichever backend's transaction this is.
macro_rules! each {
    ($self:expr, $tx:ident => $call:expr) => {
        match $self {
            Transaction::Sqlite($tx) => $call,
            Transaction::Postgres($tx) => $call,
        }
    };
}

impl Transaction {
    /// Begins a transaction on `backend`.
    pub fn begin(backend: &Backend, mode: Mode) -> Result<Self, StoreError> {
        Ok(match backend {
            Backend::Sqlite(db) => Self::Sqlite(
                crate::store::sqlite::transaction::Transaction::begin(db, mode)?,
            ),
            Backend::Postgres(db) => Self::Postgres(
                crate::store::postgres::transaction::Transaction::begin(db, mode)?,
            ),
        })
    }

    /// The row of `round_id`.
    pub fn get(&self, round_id: &str) -> Result<Option<RoundRow>, StoreError> {
        each!(self, tx => rounds::get(tx, round_id))
    }

    /// Rows matching `filter`, oldest first.
    pub fn list(&self, filter: &RoundFilter) -> Result<Vec<RoundRow>, StoreError> {
        each!(self, tx => rounds::list(tx, filter))
    }

    /// Inserts a round; `false` if its id exists.
    pub fn insert(&self, row: RoundRow) -> Result<bool, StoreError> {
        each!(self, tx => rounds::insert(tx, row))
    }

    /// Replaces a round's row if its version is still `expected_version`.
    pub fn compare_and_set(&self, row: RoundRow, expected: u64) -> Result<bool, StoreError> {
        each!(self, tx => rounds::compare_and_set(tx, row, expected))
    }

    /// Moves an execution's (and a round's) lease expiry over their expected versions.
    pub fn set_lease_expiries(
        &self,
        execution: &LeaseExpiry,
        round: Option<&LeaseExpiry>,
        updated_at: i64,
    ) -> Result<bool, StoreError> {
        each!(self, tx => rounds::set_lease_expiries(tx, execution, round, updated_at))
    }

    /// The execution `execution_id`.
    pub fn get_execution(&self, execution_id: &str) -> Result<Option<ExecutionRow>, StoreError> {
        each!(self, tx => executions::get(tx, execution_id))
    }

    /// Executions with `status`, oldest first, after `after`.
    pub fn list_executions(
        &self,
        status: Option<&str>,
        limit: Option<u32>,
        after: Option<&Cursor>,
    ) -> Result<Vec<ExecutionRow>, StoreError> {
        each!(self, tx => executions::list(tx, status, limit, after))
    }

    /// Inserts an execution; `false` if its id exists.
    pub fn insert_execution(&self, row: ExecutionRow) -> Result<bool, StoreError> {
        each!(self, tx => executions::insert(tx, row))
    }

    /// Replaces an execution's row if its version is still `expected`.
    pub fn compare_and_set_execution(
        &self,
        row: ExecutionRow,
        expected: u64,
    ) -> Result<bool, StoreError> {
        each!(self, tx => executions::compare_and_set(tx, row, expected))
    }

    /// Appends an item to an execution; returns its number.
    pub fn append_execution_item(
        &self,
        execution_id: &str,
        kind: &str,
        document: String,
    ) -> Result<u64, StoreError> {
        each!(self, tx => executions::append_item(tx, execution_id, kind, document))
    }

    /// An execution's items of `kind`, oldest first.
    pub fn list_execution_items(
        &self,
        execution_id: &str,
        kind: &str,
    ) -> Result<Vec<String>, StoreError> {
        each!(self, tx => executions::list_items(tx, execution_id, kind))
    }

    /// Stamps an execution's wake-up row.
    pub fn wake_execution(&mut self, execution_id: &str) -> Result<(), StoreError> {
        each!(self, tx => tx.wake_execution(execution_id))
    }

    /// Commits.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        each!(self, tx => tx.commit())
    }
}

/// Runs `$call` with `$conn` bound to a connection of `$backend`'s database, outside any
/// transaction (an idle one, or a new one).
macro_rules! on_connection {
    ($backend:expr, $conn:ident => $call:expr) => {
        match $backend {
            Backend::Sqlite(db) => {
                let lent = db
                    .connect()
                    .map_err(crate::store::sqlite::store_error::store_error)?;
                let $conn: &rusqlite::Connection = &lent;
                $call
            }
            Backend::Postgres(db) => {
                let lent = db
                    .connect()
                    .map_err(crate::store::postgres::store_error::store_error)?;
                let $conn: &crate::store::postgres::connection::Connection = &lent;
                $call
            }
        }
    };
}

impl Backend {
    /// This process's waiters on the executions of this database.
    pub fn waiters(&self) -> &Arc<Waiters> {
        match self {
            Self::Sqlite(db) => db.waiters(),
            Self::Postgres(db) => db.waiters(),
        }
    }

    /// A number that moves when another connection commits (`PRAGMA data_version` on SQLite,
    /// notifications heard on PostgreSQL).
    pub fn data_version(&self) -> Result<i64, StoreError> {
        match self {
            Self::Sqlite(db) => db
                .data_version()
                .map_err(|e| StoreError::Failure(e.to_string())),
            Self::Postgres(db) => db.data_version(),
        }
    }

    /// The highest wake-up number so far.
    pub fn latest_wakeup(&self) -> Result<i64, StoreError> {
        match self {
            Self::Sqlite(db) => db
                .latest_wakeup()
                .map_err(|e| StoreError::Failure(e.to_string())),
            Self::Postgres(db) => db.latest_wakeup(),
        }
    }

    /// The executions woken after `seq`, and the highest number among them.
    pub fn wakeups_since(&self, seq: i64) -> Result<(Vec<String>, i64), StoreError> {
        match self {
            Self::Sqlite(db) => db
                .wakeups_since(seq)
                .map_err(|e| StoreError::Failure(e.to_string())),
            Self::Postgres(db) => db.wakeups_since(seq),
        }
    }

    /// The ids of the rounds of `execution_id` and `status` (each when given), oldest first, at
    /// most `limit`, read without decoding the rows.
    pub fn round_ids(
        &self,
        execution_id: Option<&str>,
        status: Option<&str>,
        limit: Option<u32>,
    ) -> Result<Vec<String>, StoreError> {
        on_connection!(self, conn => ids::round_ids(conn, execution_id, status, limit))
    }

    /// The ids of `table` that start with `prefix` (the first `limit` of them, and how many in
    /// all), read with one range query on the primary key; a full id is a point lookup.
    pub(crate) fn ids_with_prefix(
        &self,
        table: id_prefix::IdTable,
        prefix: &str,
        limit: u32,
    ) -> Result<id_prefix::IdMatches, StoreError> {
        on_connection!(self, conn => ids::ids_with_prefix(conn, table, prefix, limit))
    }

    /// The ids of every execution, oldest first, read without decoding the rows.
    pub fn execution_ids(&self) -> Result<Vec<String>, StoreError> {
        on_connection!(self, conn => ids::execution_ids(conn))
    }

    /// Runs `call` with the notification ledger's statements on a connection of this database,
    /// outside any transaction (each statement commits on its own).
    pub(crate) fn on_ledger<T>(
        &self,
        call: impl FnOnce(&dyn LedgerSql) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        on_connection!(self, conn => call(conn))
    }
}

/// The notification ledger's statements on one connection of either backend.
pub(crate) trait LedgerSql {
    fn register(&self, target_id: &str, label: &str, now_ns: i64) -> Result<i64, StoreError>;
    fn enqueue(
        &self,
        target_id: &str,
        rows: &[notifications::QueuedRow],
        now_ns: i64,
    ) -> Result<u64, StoreError>;
    fn claim(
        &self,
        target_id: &str,
        owner: &str,
        now_ns: i64,
        until_ns: i64,
        limit: u32,
    ) -> Result<Vec<notifications::ClaimedRow>, StoreError>;
    fn settle(
        &self,
        target_id: &str,
        event_id: &str,
        owner: &str,
        settled: notifications::Settled<'_>,
        now_ns: i64,
    ) -> Result<bool, StoreError>;
    fn next_due(&self, target_id: &str) -> Result<Option<i64>, StoreError>;
    fn prune(&self, target_id: &str, before_ns: i64) -> Result<u64, StoreError>;
    fn report(&self) -> Result<Vec<notifications::TargetRow>, StoreError>;
}

impl<S: statements::Sql> LedgerSql for S {
    fn register(&self, target_id: &str, label: &str, now_ns: i64) -> Result<i64, StoreError> {
        notifications::register(self, target_id, label, now_ns)
    }
    fn enqueue(
        &self,
        target_id: &str,
        rows: &[notifications::QueuedRow],
        now_ns: i64,
    ) -> Result<u64, StoreError> {
        notifications::enqueue(self, target_id, rows, now_ns)
    }
    fn claim(
        &self,
        target_id: &str,
        owner: &str,
        now_ns: i64,
        until_ns: i64,
        limit: u32,
    ) -> Result<Vec<notifications::ClaimedRow>, StoreError> {
        notifications::claim(self, target_id, owner, now_ns, until_ns, limit)
    }
    fn settle(
        &self,
        target_id: &str,
        event_id: &str,
        owner: &str,
        settled: notifications::Settled<'_>,
        now_ns: i64,
    ) -> Result<bool, StoreError> {
        notifications::settle(self, target_id, event_id, owner, settled, now_ns)
    }
    fn next_due(&self, target_id: &str) -> Result<Option<i64>, StoreError> {
        notifications::next_due(self, target_id)
    }
    fn prune(&self, target_id: &str, before_ns: i64) -> Result<u64, StoreError> {
        notifications::prune(self, target_id, before_ns)
    }
    fn report(&self) -> Result<Vec<notifications::TargetRow>, StoreError> {
        notifications::report(self)
    }
}

//! One transaction on PostgreSQL, the resource behind the component's `store` import when the
//! database is PostgreSQL: the same rows and the same compare-and-set as on SQLite.
//!
//! Isolation (docs/decisions/0009-postgresql-one-write-at-a-time-snapshots-for.md): a write
//! transaction takes the database's one write lock (a transaction-level advisory lock) before its
//! first statement, as SQLite's `BEGIN IMMEDIATE` takes the file's, so the writes of every worker
//! on every machine are one sequence and each sees all that committed before it (`READ COMMITTED`
//! reads after the lock was granted); a read is one `REPEATABLE READ` snapshot. A lock not granted
//! within the busy timeout is `busy`.

use super::connection::{Connection, params};
use super::database::{CHANGES_CHANNEL, Database};
use super::store_error::store_error;
use crate::backend::idle::Lent;
use crate::component::bindings::m3::managed_input::store::{
    ExecutionRow, LeaseExpiry, RoundFilter, RoundRow, StoreError, TransactionMode,
};
use crate::component::bindings::m3::managed_input::types::{
    Cursor, ExecutionStatus, Status, Timestamp,
};
use crate::sqlite::transaction::{from_ns, to_ns, wide_row_written};
use crate::sqlite::wakeups::Waiters;
use std::sync::Arc;
use tokio_postgres::Row;

/// The advisory lock every write transaction holds until it ends: the database's write lock.
pub const WRITE_LOCK: i64 = 0x4d33_4d49;

/// An open transaction. Dropped without [`Transaction::commit`], it rolls back.
pub struct Transaction {
    connection: Option<Lent<Connection>>,
    write: bool,
    open: bool,
    waiters: Arc<Waiters>,
    woken: Vec<String>,
}

fn status_text(status: Status) -> &'static str {
    match status {
        Status::Pending => "pending",
        Status::ResponseValidated => "response_validated",
        Status::DeliveryStarted => "delivery_started",
        Status::Delivered => "delivered",
        Status::Resolved => "resolved",
        Status::Failed => "failed",
    }
}

fn status_from_text(text: &str) -> Result<Status, StoreError> {
    Ok(match text {
        "pending" => Status::Pending,
        "response_validated" => Status::ResponseValidated,
        "delivery_started" => Status::DeliveryStarted,
        "delivered" => Status::Delivered,
        "resolved" => Status::Resolved,
        "failed" => Status::Failed,
        _ => {
            return Err(StoreError::Failure(
                "a round row has an unknown status".into(),
            ));
        }
    })
}

fn execution_status_text(status: ExecutionStatus) -> &'static str {
    match status {
        ExecutionStatus::Queued => "queued",
        ExecutionStatus::Running => "running",
        ExecutionStatus::Finished => "finished",
    }
}

fn execution_status_from_text(text: &str) -> Result<ExecutionStatus, StoreError> {
    Ok(match text {
        "queued" => ExecutionStatus::Queued,
        "running" => ExecutionStatus::Running,
        "finished" => ExecutionStatus::Finished,
        _ => {
            return Err(StoreError::Failure(
                "an execution row has an unknown status".into(),
            ));
        }
    })
}

/// A column that must be there: a missing version row (a damaged database) is an error.
fn required<T: for<'a> tokio_postgres::types::FromSql<'a>>(
    r: &Row,
    i: usize,
    what: &str,
) -> Result<T, StoreError> {
    r.try_get::<_, T>(i)
        .map_err(|_| StoreError::Failure(format!("the {what}'s version row is missing")))
}

/// A round: the wide row (`r`) and its version row (`v`), left-joined so that a wide row
/// without its version row is an error, never a round missing.
const SELECT: &str = "SELECT r.round_id, r.execution_id, r.status, v.version, r.owner_id, \
                      v.lease_expires_at_ns, r.deadline_ns, r.created_at_ns, v.updated_at_ns, \
                      r.document FROM managed_input_rounds r \
                      LEFT JOIN managed_input_round_versions v ON v.round_id = r.round_id";

fn round_from(r: &Row) -> Result<RoundRow, StoreError> {
    Ok(RoundRow {
        round_id: r.get(0),
        execution_id: r.get(1),
        status: status_from_text(r.get(2))?,
        version: required::<i64>(r, 3, "round")? as u64,
        owner_id: r.get(4),
        lease_expires_at: r.get::<_, Option<i64>>(5).map(from_ns),
        deadline: r.get::<_, Option<i64>>(6).map(from_ns),
        created_at: from_ns(r.get(7)),
        updated_at: from_ns(required(r, 8, "round")?),
        document: r.get(9),
    })
}

/// An execution: the wide row (`e`) and its version row (`v`), left-joined likewise.
const SELECT_EXECUTION: &str = "SELECT e.execution_id, e.status, v.version, e.owner_id, \
                                v.lease_expires_at_ns, e.created_at_ns, v.updated_at_ns, \
                                e.document FROM executions e \
                                LEFT JOIN execution_versions v ON v.execution_id = e.execution_id";

fn execution_from(r: &Row) -> Result<ExecutionRow, StoreError> {
    Ok(ExecutionRow {
        execution_id: r.get(0),
        status: execution_status_from_text(r.get(1))?,
        version: required::<i64>(r, 2, "execution")? as u64,
        owner_id: r.get(3),
        lease_expires_at: r.get::<_, Option<i64>>(4).map(from_ns),
        created_at: from_ns(r.get(5)),
        updated_at: from_ns(required(r, 6, "execution")?),
        document: r.get(7),
    })
}

/// `u64` versions as PostgreSQL's `BIGINT`: a version past `i64::MAX` is refused, not wrapped.
fn version(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Failure("a version is out of range".into()))
}

impl Transaction {
    /// Begins: a read in a `REPEATABLE READ` snapshot, a write once it holds the write lock.
    pub fn begin(db: &Database, mode: TransactionMode) -> Result<Self, StoreError> {
        let connection = db.connect().map_err(store_error)?;
        let write = matches!(mode, TransactionMode::Write);
        let begin = if write {
            format!(
                "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '{}ms'; \
                 SELECT pg_advisory_xact_lock({WRITE_LOCK})",
                db.busy_timeout().as_millis().max(1)
            )
        } else {
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY".to_string()
        };
        connection.set_in_transaction(true);
        if let Err(e) = connection.batch(&begin) {
            connection.discard();
            return Err(store_error(e));
        }
        Ok(Self {
            connection: Some(connection),
            write,
            open: true,
            waiters: db.waiters().clone(),
            woken: Vec::new(),
        })
    }

    fn connection(&self) -> Result<&Connection, StoreError> {
        match (&self.connection, self.open) {
            (Some(connection), true) => Ok(connection),
            _ => Err(StoreError::Failure(
                "the transaction has already been committed".into(),
            )),
        }
    }

    fn writable(&self) -> Result<&Connection, StoreError> {
        if !self.write {
            return Err(StoreError::Failure(
                "a read transaction cannot write".into(),
            ));
        }
        self.connection()
    }

    /// The row of `round_id`.
    pub fn get(&self, round_id: &str) -> Result<Option<RoundRow>, StoreError> {
        let rows = self
            .connection()?
            .query(
                &format!("{SELECT} WHERE r.round_id = $1"),
                params![round_id.to_string()],
            )
            .map_err(store_error)?;
        rows.first().map(round_from).transpose()
    }

    /// Rows matching `filter`, oldest first.
    pub fn list(&self, filter: &RoundFilter) -> Result<Vec<RoundRow>, StoreError> {
        let mut sql = format!("{SELECT} WHERE true");
        let mut args: Vec<super::connection::Param> = Vec::new();
        if let Some(execution_id) = &filter.execution_id {
            args.push(Box::new(execution_id.clone()));
            sql.push_str(&format!(" AND r.execution_id = ${}", args.len()));
        }
        if let Some(status) = filter.status {
            args.push(Box::new(status_text(status).to_string()));
            sql.push_str(&format!(" AND r.status = ${}", args.len()));
        }
        if let Some(after) = &filter.after {
            args.push(Box::new(to_ns(&after.created_at)));
            let at = args.len();
            args.push(Box::new(after.id.clone()));
            sql.push_str(&format!(
                " AND (r.created_at_ns > ${at} OR (r.created_at_ns = ${at} AND r.round_id > ${}))",
                args.len()
            ));
        }
        sql.push_str(" ORDER BY r.created_at_ns, r.round_id");
        if let Some(limit) = filter.limit {
            args.push(Box::new(i64::from(limit)));
            sql.push_str(&format!(" LIMIT ${}", args.len()));
        }
        let rows = self.connection()?.query(&sql, args).map_err(store_error)?;
        rows.iter().map(round_from).collect()
    }

    /// Inserts `row` (its wide row and its version row); `false` if the round id exists.
    pub fn insert(&self, row: &RoundRow) -> Result<bool, StoreError> {
        let connection = self.writable()?;
        let changed = connection
            .execute(
                "INSERT INTO managed_input_rounds (round_id, execution_id, status, owner_id, \
                 deadline_ns, created_at_ns, document) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (round_id) DO NOTHING",
                params![
                    row.round_id.clone(),
                    row.execution_id.clone(),
                    status_text(row.status).to_string(),
                    row.owner_id.clone(),
                    row.deadline.as_ref().map(to_ns),
                    to_ns(&row.created_at),
                    row.document.clone(),
                ],
            )
            .map_err(store_error)?;
        if changed != 1 {
            return Ok(false);
        }
        connection
            .execute(
                "INSERT INTO managed_input_round_versions (round_id, execution_id, version, \
                 lease_expires_at_ns, updated_at_ns) VALUES ($1, $2, $3, $4, $5)",
                params![
                    row.round_id.clone(),
                    row.execution_id.clone(),
                    version(row.version)?,
                    row.lease_expires_at.as_ref().map(to_ns),
                    to_ns(&row.updated_at),
                ],
            )
            .map_err(store_error)?;
        Ok(true)
    }

    /// Replaces the mutable columns of the row if its version is still `expected_version`: the
    /// version row first (checked by affected-row count), then the wide row.
    pub fn compare_and_set(
        &self,
        row: &RoundRow,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        let connection = self.writable()?;
        let changed = connection
            .execute(
                "UPDATE managed_input_round_versions SET version = $2, lease_expires_at_ns = $3, \
                 updated_at_ns = $4 WHERE round_id = $1 AND version = $5 AND execution_id = $6",
                params![
                    row.round_id.clone(),
                    version(row.version)?,
                    row.lease_expires_at.as_ref().map(to_ns),
                    to_ns(&row.updated_at),
                    version(expected_version)?,
                    row.execution_id.clone(),
                ],
            )
            .map_err(store_error)?;
        if changed != 1 {
            return Ok(false);
        }
        let changed = connection
            .execute(
                "UPDATE managed_input_rounds SET status = $2, owner_id = $3, document = $4 \
                 WHERE round_id = $1",
                params![
                    row.round_id.clone(),
                    status_text(row.status).to_string(),
                    row.owner_id.clone(),
                    row.document.clone(),
                ],
            )
            .map_err(store_error)?;
        wide_row_written(changed as usize, "round")
    }

    /// Sets the lease expiry and update time of an execution's version row and, when given, of
    /// one of its rounds', moving each version on, only if each version is still the one
    /// expected: both or neither (a savepoint undoes the first when the second does not match).
    pub fn set_lease_expiries(
        &self,
        execution: &LeaseExpiry,
        round: Option<&LeaseExpiry>,
        updated_at: &Timestamp,
    ) -> Result<bool, StoreError> {
        let connection = self.writable()?;
        connection
            .batch("SAVEPOINT lease_expiries")
            .map_err(store_error)?;
        let written = (|| {
            let mut changed = connection.execute(
                "UPDATE execution_versions SET lease_expires_at_ns = $2, updated_at_ns = $3, \
                 version = version + 1 WHERE execution_id = $1 AND version = $4",
                params![
                    execution.id.clone(),
                    to_ns(&execution.expires_at),
                    to_ns(updated_at),
                    version(execution.expected_version).unwrap_or(-1),
                ],
            )?;
            if let Some(round) = round.filter(|_| changed == 1) {
                changed = connection.execute(
                    "UPDATE managed_input_round_versions SET lease_expires_at_ns = $3, \
                     updated_at_ns = $4, version = version + 1 \
                     WHERE round_id = $1 AND version = $5 AND execution_id = $2",
                    params![
                        round.id.clone(),
                        execution.id.clone(),
                        to_ns(&round.expires_at),
                        to_ns(updated_at),
                        version(round.expected_version).unwrap_or(-1),
                    ],
                )?;
            }
            Ok::<bool, tokio_postgres::Error>(changed == 1)
        })();
        let end = match written {
            Ok(true) => "RELEASE SAVEPOINT lease_expiries",
            _ => "ROLLBACK TO SAVEPOINT lease_expiries; RELEASE SAVEPOINT lease_expiries",
        };
        let ended = connection.batch(end);
        let written = written.map_err(store_error)?;
        ended.map_err(store_error)?;
        Ok(written)
    }

    /// The execution `execution_id`.
    pub fn get_execution(&self, execution_id: &str) -> Result<Option<ExecutionRow>, StoreError> {
        let rows = self
            .connection()?
            .query(
                &format!("{SELECT_EXECUTION} WHERE e.execution_id = $1"),
                params![execution_id.to_string()],
            )
            .map_err(store_error)?;
        rows.first().map(execution_from).transpose()
    }

    /// Executions with `status` (all when `None`), oldest first, after `after`.
    pub fn list_executions(
        &self,
        status: Option<ExecutionStatus>,
        limit: Option<u32>,
        after: Option<&Cursor>,
    ) -> Result<Vec<ExecutionRow>, StoreError> {
        let mut sql = format!("{SELECT_EXECUTION} WHERE true");
        let mut args: Vec<super::connection::Param> = Vec::new();
        if let Some(status) = status {
            args.push(Box::new(execution_status_text(status).to_string()));
            sql.push_str(&format!(" AND e.status = ${}", args.len()));
        }
        if let Some(after) = after {
            args.push(Box::new(to_ns(&after.created_at)));
            let at = args.len();
            args.push(Box::new(after.id.clone()));
            sql.push_str(&format!(
                " AND (e.created_at_ns > ${at} OR (e.created_at_ns = ${at} AND e.execution_id > ${}))",
                args.len()
            ));
        }
        sql.push_str(" ORDER BY e.created_at_ns, e.execution_id");
        if let Some(limit) = limit {
            args.push(Box::new(i64::from(limit)));
            sql.push_str(&format!(" LIMIT ${}", args.len()));
        }
        let rows = self.connection()?.query(&sql, args).map_err(store_error)?;
        rows.iter().map(execution_from).collect()
    }

    /// Inserts `row` (its wide row and its version row); `false` if the execution id exists.
    pub fn insert_execution(&self, row: &ExecutionRow) -> Result<bool, StoreError> {
        let connection = self.writable()?;
        let changed = connection
            .execute(
                "INSERT INTO executions (execution_id, status, owner_id, created_at_ns, document) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (execution_id) DO NOTHING",
                params![
                    row.execution_id.clone(),
                    execution_status_text(row.status).to_string(),
                    row.owner_id.clone(),
                    to_ns(&row.created_at),
                    row.document.clone(),
                ],
            )
            .map_err(store_error)?;
        if changed != 1 {
            return Ok(false);
        }
        connection
            .execute(
                "INSERT INTO execution_versions (execution_id, version, lease_expires_at_ns, \
                 updated_at_ns) VALUES ($1, $2, $3, $4)",
                params![
                    row.execution_id.clone(),
                    version(row.version)?,
                    row.lease_expires_at.as_ref().map(to_ns),
                    to_ns(&row.updated_at),
                ],
            )
            .map_err(store_error)?;
        Ok(true)
    }

    /// Replaces the mutable columns if the stored version is still `expected_version`.
    pub fn compare_and_set_execution(
        &self,
        row: &ExecutionRow,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        let connection = self.writable()?;
        let changed = connection
            .execute(
                "UPDATE execution_versions SET version = $2, lease_expires_at_ns = $3, \
                 updated_at_ns = $4 WHERE execution_id = $1 AND version = $5",
                params![
                    row.execution_id.clone(),
                    version(row.version)?,
                    row.lease_expires_at.as_ref().map(to_ns),
                    to_ns(&row.updated_at),
                    version(expected_version)?,
                ],
            )
            .map_err(store_error)?;
        if changed != 1 {
            return Ok(false);
        }
        let changed = connection
            .execute(
                "UPDATE executions SET status = $2, owner_id = $3, document = $4 \
                 WHERE execution_id = $1",
                params![
                    row.execution_id.clone(),
                    execution_status_text(row.status).to_string(),
                    row.owner_id.clone(),
                    row.document.clone(),
                ],
            )
            .map_err(store_error)?;
        wide_row_written(changed as usize, "execution")
    }

    /// Appends `document` as the execution's next item; returns its number among them.
    pub fn append_execution_item(
        &self,
        execution_id: &str,
        kind: &str,
        document: &str,
    ) -> Result<u64, StoreError> {
        let rows = self
            .writable()?
            .query(
                "INSERT INTO execution_items (execution_id, seq, kind, document) \
                 SELECT $1, coalesce(max(seq), 0) + 1, $2, $3 FROM execution_items \
                 WHERE execution_id = $1 RETURNING seq",
                params![
                    execution_id.to_string(),
                    kind.to_string(),
                    document.to_string()
                ],
            )
            .map_err(store_error)?;
        Ok(rows.first().map_or(0, |r| r.get::<_, i64>(0)) as u64)
    }

    /// The execution's items of `kind`, oldest first.
    pub fn list_execution_items(
        &self,
        execution_id: &str,
        kind: &str,
    ) -> Result<Vec<String>, StoreError> {
        let rows = self
            .connection()?
            .query(
                "SELECT document FROM execution_items WHERE execution_id = $1 AND kind = $2 \
                 ORDER BY seq",
                params![execution_id.to_string(), kind.to_string()],
            )
            .map_err(store_error)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Stamps `execution_id`'s wake-up row with the next number (the write lock orders the
    /// numbers as the commits); its waiters in this process are told on commit, those
    /// elsewhere hear the commit's notification and read the row.
    pub fn wake_execution(&mut self, execution_id: &str) -> Result<(), StoreError> {
        self.writable()?
            .execute(
                "INSERT INTO execution_wakeups (execution_id, seq) \
                 SELECT $1, coalesce(max(seq), 0) + 1 FROM execution_wakeups \
                 ON CONFLICT (execution_id) DO UPDATE SET seq = excluded.seq",
                params![execution_id.to_string()],
            )
            .map_err(store_error)?;
        if !self.woken.iter().any(|id| id == execution_id) {
            self.woken.push(execution_id.to_string());
        }
        Ok(())
    }

    /// Commits (a write tells every listening connection), then wakes this process's waiters
    /// on the executions it woke. A commit whose answer was lost with the connection is a
    /// failure: the caller cannot know whether it took effect, and reads to find out.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        self.connection()?;
        let end = if self.write {
            format!("NOTIFY {CHANGES_CHANNEL}; COMMIT")
        } else {
            "COMMIT".to_string()
        };
        self.open = false;
        let connection = self.connection.take();
        let committed = match &connection {
            Some(connection) => connection.batch(&end),
            None => Ok(()),
        };
        match committed {
            Ok(()) => {
                if let Some(connection) = connection {
                    connection.set_in_transaction(false);
                }
            }
            Err(e) => {
                if let Some(connection) = connection {
                    connection.discard();
                }
                return Err(store_error(e));
            }
        }
        for execution_id in self.woken.drain(..) {
            self.waiters.wake(&execution_id);
        }
        Ok(())
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        // Still open: rolled back, and its connection kept idle for the next operation; one
        // whose rollback fails is closed instead (the server then rolls back).
        if let Some(connection) = self.connection.take() {
            if connection.batch("ROLLBACK").is_ok() {
                connection.set_in_transaction(false);
            } else {
                connection.discard();
            }
        }
    }
}

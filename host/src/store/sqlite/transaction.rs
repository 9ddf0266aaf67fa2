//! One transaction, the resource behind the component's `store` import: a read on its own
//! connection, a write in its store object's group (`group_commit.rs`).

use super::database::Database;
use super::group_commit::{Turn, Writer};
use super::store_error::store_error;
use crate::store::error::StoreError;
use crate::store::idle::Lent;
use crate::store::rows::{LeaseExpiry, Mode, RoundFilter, RoundRow, wide_row_written};
use crate::store::waiters::Waiters;
use rusqlite::{Connection, OptionalExtension, params};
use std::sync::Arc;

/// An open transaction. Dropped without [`Transaction::commit`], it rolls back. A read runs on a
/// connection of its own; a write runs in its store object's group (`group_commit.rs`).
pub struct Transaction {
    access: Access,
    open: bool,
    /// This process's waiters, and the executions this transaction woke (told once it commits).
    waiters: Arc<Waiters>,
    woken: Vec<String>,
}

/// How a transaction reaches the database.
enum Access {
    /// A read: its own connection, `BEGIN DEFERRED`.
    Read(Lent<Connection>),
    /// A write: the turn of its store object's writer (`None` once ended).
    Write(Arc<Writer>, Option<Turn>),
}

/// A round as the component sees it: the wide row (`r`) and its version row (`v`, migration 6).
/// A left join, so that a wide row without its version row is an error, never a round missing.
const SELECT: &str = "SELECT r.round_id, r.execution_id, r.status, v.version, r.owner_id, \
                      v.lease_expires_at_ns, r.deadline_ns, r.created_at_ns, v.updated_at_ns, \
                      r.document FROM managed_input_rounds r \
                      LEFT JOIN managed_input_round_versions v ON v.round_id = r.round_id";

fn row_from_sql(r: &rusqlite::Row<'_>) -> rusqlite::Result<RoundRow> {
    Ok(RoundRow {
        round_id: r.get(0)?,
        execution_id: r.get(1)?,
        status: r.get(2)?,
        version: r.get::<_, i64>(3)? as u64,
        owner_id: r.get(4)?,
        lease_expires_at_ns: r.get(5)?,
        deadline_ns: r.get(6)?,
        created_at_ns: r.get(7)?,
        updated_at_ns: r.get(8)?,
        document: r.get(9)?,
    })
}

impl Transaction {
    /// Begins: a read on a connection of its own (`BEGIN DEFERRED`), a write once it has its store
    /// object's write turn (in a savepoint of the group's `BEGIN IMMEDIATE` transaction).
    pub fn begin(db: &Database, mode: Mode) -> Result<Self, StoreError> {
        let access = match mode {
            Mode::Read => {
                let conn = db.connect().map_err(store_error)?;
                conn.execute_batch("BEGIN DEFERRED").map_err(store_error)?;
                Access::Read(conn)
            }
            Mode::Write => {
                let writer = db.writer().clone();
                let turn = writer.begin(|| db.connect(), db.busy_timeout())?;
                Access::Write(writer, Some(turn))
            }
        };
        Ok(Self {
            access,
            open: true,
            waiters: db.waiters().clone(),
            woken: Vec::new(),
        })
    }

    pub(super) fn connection(&self) -> Result<&Connection, StoreError> {
        self.ensure_open()?;
        match &self.access {
            Access::Read(conn) => Ok(conn),
            Access::Write(_, turn) => turn
                .as_ref()
                .and_then(Turn::connection)
                .ok_or_else(|| StoreError::Failure("the transaction has already ended".into())),
        }
    }

    fn ensure_open(&self) -> Result<(), StoreError> {
        if self.open {
            Ok(())
        } else {
            Err(StoreError::Failure(
                "the transaction has already been committed".into(),
            ))
        }
    }

    /// The row of `round_id`.
    pub fn get(&self, round_id: &str) -> Result<Option<RoundRow>, StoreError> {
        self.ensure_open()?;
        self.connection()?
            .prepare_cached(&format!("{SELECT} WHERE r.round_id = ?1"))
            .and_then(|mut s| s.query_row([round_id], row_from_sql).optional())
            .map_err(store_error)
    }

    /// Rows matching `filter`, oldest first.
    pub fn list(&self, filter: &RoundFilter) -> Result<Vec<RoundRow>, StoreError> {
        self.ensure_open()?;
        let mut sql = format!("{SELECT} WHERE 1 = 1");
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        if let Some(execution_id) = &filter.execution_id {
            args.push(execution_id.clone().into());
            sql.push_str(&format!(" AND r.execution_id = ?{}", args.len()));
        }
        if let Some(status) = &filter.status {
            args.push(status.clone().into());
            sql.push_str(&format!(" AND r.status = ?{}", args.len()));
        }
        if let Some(after) = &filter.after {
            args.push(after.created_at_ns.into());
            let at = args.len();
            args.push(after.id.clone().into());
            sql.push_str(&format!(
                " AND (r.created_at_ns > ?{at} OR (r.created_at_ns = ?{at} AND r.round_id > ?{}))",
                args.len()
            ));
        }
        sql.push_str(" ORDER BY r.created_at_ns, r.round_id");
        if let Some(limit) = filter.limit {
            args.push(i64::from(limit).into());
            sql.push_str(&format!(" LIMIT ?{}", args.len()));
        }
        let mut statement = self
            .connection()?
            .prepare_cached(&sql)
            .map_err(store_error)?;
        let rows = statement
            .query_map(rusqlite::params_from_iter(args), row_from_sql)
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(store_error)?;
        Ok(rows)
    }

    /// Inserts `row` (its wide row and its version row); `false` if the round id exists.
    pub fn insert(&self, row: &RoundRow) -> Result<bool, StoreError> {
        self.ensure_open()?;
        let connection = self.connection()?;
        let changed = connection
            .prepare_cached(
                "INSERT INTO managed_input_rounds (round_id, execution_id, status, owner_id, \
                 deadline_ns, created_at_ns, document) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                 ON CONFLICT (round_id) DO NOTHING",
            )
            .and_then(|mut s| {
                s.execute(params![
                    row.round_id,
                    row.execution_id,
                    row.status,
                    row.owner_id,
                    row.deadline_ns,
                    row.created_at_ns,
                    row.document,
                ])
            })
            .map_err(store_error)?;
        if changed != 1 {
            return Ok(false);
        }
        connection
            .prepare_cached(
                "INSERT INTO managed_input_round_versions (round_id, execution_id, version, \
                 lease_expires_at_ns, updated_at_ns) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    row.round_id,
                    row.execution_id,
                    row.version as i64,
                    row.lease_expires_at_ns,
                    row.updated_at_ns,
                ])
            })
            .map_err(store_error)?;
        Ok(true)
    }

    /// Replaces the mutable columns of the row if its version is still `expected_version`: one
    /// conditional `UPDATE` of the version row (checked by affected-row count), then the wide
    /// row's status, owner and document. The round id, execution, creation time and deadline
    /// never change; leaving them out of the `SET` lists keeps SQLite from rewriting the indexes
    /// on them.
    pub fn compare_and_set(
        &self,
        row: &RoundRow,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        self.ensure_open()?;
        let connection = self.connection()?;
        let changed = connection
            .prepare_cached(
                "UPDATE managed_input_round_versions SET version = ?2, lease_expires_at_ns = ?3, \
                 updated_at_ns = ?4 WHERE round_id = ?1 AND version = ?5 AND execution_id = ?6",
            )
            .and_then(|mut s| {
                s.execute(params![
                    row.round_id,
                    row.version as i64,
                    row.lease_expires_at_ns,
                    row.updated_at_ns,
                    expected_version as i64,
                    row.execution_id,
                ])
            })
            .map_err(store_error)?;
        if changed != 1 {
            return Ok(false);
        }
        let changed = connection
            .prepare_cached(
                "UPDATE managed_input_rounds SET status = ?2, owner_id = ?3, document = ?4 \
                 WHERE round_id = ?1",
            )
            .and_then(|mut s| {
                s.execute(params![
                    row.round_id,
                    row.status,
                    row.owner_id,
                    row.document,
                ])
            })
            .map_err(store_error)?;
        wide_row_written(changed, "round")
    }

    /// Sets the lease expiry and update time of an execution's row and, when given, of one of
    /// its rounds' rows, moving each version on, only if each version is still the one expected:
    /// both or neither (a savepoint undoes the first when the second does not match). Only the
    /// two version rows are written; the wide rows and their documents are not touched.
    pub fn set_lease_expiries(
        &self,
        execution: &LeaseExpiry,
        round: Option<&LeaseExpiry>,
        updated_at: i64,
    ) -> Result<bool, StoreError> {
        self.ensure_open()?;
        let connection = self.connection()?;
        connection
            .execute_batch("SAVEPOINT lease_expiries")
            .map_err(store_error)?;
        let written = (|| {
            let mut changed = connection
                .prepare_cached(
                    "UPDATE execution_versions SET lease_expires_at_ns = ?2, updated_at_ns = ?3, \
                     version = version + 1 WHERE execution_id = ?1 AND version = ?4",
                )?
                .execute(params![
                    execution.id,
                    execution.expires_at_ns,
                    updated_at,
                    execution.expected_version as i64,
                ])?;
            if let Some(round) = round.filter(|_| changed == 1) {
                changed = connection
                    .prepare_cached(
                        "UPDATE managed_input_round_versions SET lease_expires_at_ns = ?3, \
                         updated_at_ns = ?4, version = version + 1 \
                         WHERE round_id = ?1 AND version = ?5 AND execution_id = ?2",
                    )?
                    .execute(params![
                        round.id,
                        execution.id,
                        round.expires_at_ns,
                        updated_at,
                        round.expected_version as i64,
                    ])?;
            }
            Ok::<bool, rusqlite::Error>(changed == 1)
        })();
        let end = match written {
            Ok(true) => "RELEASE lease_expiries",
            _ => "ROLLBACK TO lease_expiries; RELEASE lease_expiries",
        };
        let ended = connection.execute_batch(end);
        let written = written.map_err(store_error)?;
        ended.map_err(store_error)?;
        Ok(written)
    }

    /// Stamps `execution_id`'s wake-up row; its waiters in this process are told on commit (those
    /// elsewhere read the row).
    pub fn wake_execution(&mut self, execution_id: &str) -> Result<(), StoreError> {
        self.ensure_open()?;
        super::wakeups::record(self.connection()?, execution_id).map_err(store_error)?;
        if !self.woken.iter().any(|id| id == execution_id) {
            self.woken.push(execution_id.to_string());
        }
        Ok(())
    }

    /// Commits, then wakes this process's waiters on the executions it woke.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        self.ensure_open()?;
        self.open = false;
        match &mut self.access {
            Access::Read(conn) => conn.execute_batch("COMMIT").map_err(store_error)?,
            Access::Write(writer, turn) => match turn.take() {
                Some(turn) => writer.commit(turn)?,
                None => {
                    return Err(StoreError::Failure(
                        "the transaction has already ended".into(),
                    ));
                }
            },
        }
        for execution_id in self.woken.drain(..) {
            self.waiters.wake(&execution_id);
        }
        Ok(())
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        // A read still open is rolled back, so that its connection can wait idle for the next
        // operation (one whose rollback fails still holds its transaction, and is closed
        // instead); a write still holding its turn undoes its savepoint and gives the turn back.
        match &mut self.access {
            Access::Read(conn) if self.open => {
                let _ = conn.execute_batch("ROLLBACK");
            }
            Access::Read(_) => {}
            Access::Write(writer, turn) => {
                if let Some(turn) = turn.take() {
                    writer.roll_back(turn);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::rows::ExecutionRow;
    use crate::store::sqlite::database::Synchronous;
    use std::time::Duration;

    /// A fresh database in `dir`.
    fn open(dir: &tempfile::TempDir) -> Database {
        Database::open(
            &dir.path().join("m3.db"),
            Duration::from_secs(5),
            Synchronous::Full,
        )
        .unwrap()
    }

    #[test]
    fn a_read_ended_without_a_commit_leaves_its_connection_to_the_next_operation() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let tx = Transaction::begin(&db, Mode::Read).unwrap();
        tx.get("no-such-round").unwrap();
        // A mark that lives with the connection (and nowhere else), outside any transaction.
        tx.connection()
            .unwrap()
            .execute_batch("PRAGMA cache_size = -777")
            .unwrap();
        drop(tx);
        let next = Transaction::begin(&db, Mode::Read).unwrap();
        let marked: i64 = next
            .connection()
            .unwrap()
            .query_row("PRAGMA cache_size", [], |r| r.get(0))
            .unwrap();
        assert_eq!(marked, -777, "the next read got the same connection");
    }

    /// `set-lease-expiries` writes the execution's and the round's expiries over the versions
    /// expected, and only the expiry, update time and version; when either version moved it
    /// writes neither.
    #[test]
    fn lease_expiries_are_set_on_both_rows_or_neither() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let mut tx = Transaction::begin(&db, Mode::Write).unwrap();
        assert!(
            tx.insert_execution(&ExecutionRow {
                execution_id: "e".into(),
                status: "running".into(),
                version: 1,
                owner_id: Some("w".into()),
                lease_expires_at_ns: Some(10),
                created_at_ns: 1,
                updated_at_ns: 1,
                document: "execution document".into(),
            })
            .unwrap()
        );
        assert!(
            tx.insert(&RoundRow {
                round_id: "r".into(),
                execution_id: "e".into(),
                status: "pending".into(),
                version: 1,
                owner_id: Some("w".into()),
                lease_expires_at_ns: Some(10),
                deadline_ns: None,
                created_at_ns: 1,
                updated_at_ns: 1,
                document: "round document".into(),
            })
            .unwrap()
        );
        tx.commit().unwrap();
        let expiry = |id: &str, version: u64, ns: i64| LeaseExpiry {
            id: id.into(),
            expected_version: version,
            expires_at_ns: ns,
        };
        let rows = || {
            let tx = Transaction::begin(&db, Mode::Read).unwrap();
            let execution = tx.get_execution("e").unwrap().unwrap();
            let round = tx.get("r").unwrap().unwrap();
            (execution, round)
        };

        // Both versions as expected: both rows move, their documents kept.
        let mut tx = Transaction::begin(&db, Mode::Write).unwrap();
        let written = tx
            .set_lease_expiries(&expiry("e", 1, 20), Some(&expiry("r", 1, 30)), 5)
            .unwrap();
        tx.commit().unwrap();
        assert!(written);
        let (execution, round) = rows();
        assert_eq!(
            (
                execution.version,
                execution.lease_expires_at_ns,
                execution.updated_at_ns
            ),
            (2, Some(20), 5)
        );
        assert_eq!(
            (
                round.version,
                round.lease_expires_at_ns,
                round.updated_at_ns
            ),
            (2, Some(30), 5)
        );
        assert_eq!(execution.document, "execution document");
        assert_eq!(round.document, "round document");

        // The round's version moved: neither row is written, the transaction goes on.
        let mut tx = Transaction::begin(&db, Mode::Write).unwrap();
        let written = tx
            .set_lease_expiries(&expiry("e", 2, 40), Some(&expiry("r", 1, 40)), 6)
            .unwrap();
        assert!(!written);
        // The execution's version moved: neither either.
        assert!(
            !tx.set_lease_expiries(&expiry("e", 1, 40), Some(&expiry("r", 2, 40)), 6)
                .unwrap()
        );
        // A round of another execution is not touched through this one.
        assert!(
            !tx.set_lease_expiries(&expiry("x", 2, 40), Some(&expiry("r", 2, 40)), 6)
                .unwrap()
        );
        tx.commit().unwrap();
        let (execution, round) = rows();
        assert_eq!(
            (execution.version, execution.lease_expires_at_ns),
            (2, Some(20))
        );
        assert_eq!((round.version, round.lease_expires_at_ns), (2, Some(30)));

        // The execution alone.
        let mut tx = Transaction::begin(&db, Mode::Write).unwrap();
        assert!(tx.set_lease_expiries(&expiry("e", 2, 50), None, 7).unwrap());
        tx.commit().unwrap();
        let (execution, round) = rows();
        assert_eq!(
            (execution.version, execution.lease_expires_at_ns),
            (3, Some(50))
        );
        assert_eq!(round.version, 2);
    }
}

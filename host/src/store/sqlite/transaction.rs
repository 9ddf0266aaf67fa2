//! One transaction, the resource behind the component's `store` import: a read on its own
//! connection, a write in its store object's group (`group_commit.rs`).

use super::control::control;
use super::database::Database;
use super::group_commit::{Turn, Writer};
use super::store_error::store_error;
use crate::store::error::StoreError;
use crate::store::idle::Lent;
use crate::store::rows::Mode;
use crate::store::waiters::Waiters;
use rusqlite::Connection;
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

impl Transaction {
    /// Begins: a read on a connection of its own (`BEGIN DEFERRED`), a write once it has its store
    /// object's write turn (in a savepoint of the group's `BEGIN IMMEDIATE` transaction).
    pub fn begin(db: &Database, mode: Mode) -> Result<Self, StoreError> {
        let access = match mode {
            Mode::Read => {
                let conn = db.connect().map_err(store_error)?;
                control(&conn, "BEGIN DEFERRED").map_err(store_error)?;
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

    /// Refuses a read transaction: a read cannot write. Else the connection is open.
    pub(super) fn writable(&self) -> Result<(), StoreError> {
        match self.access {
            Access::Write(..) => self.connection().map(drop),
            Access::Read(_) => Err(StoreError::Failure(
                "a read transaction cannot write".into(),
            )),
        }
    }

    /// Stamps `execution_id`'s wake-up row; its waiters in this process are told on commit (those
    /// elsewhere read the row). A read transaction refuses, as it refuses every write.
    pub fn wake_execution(&mut self, execution_id: &str) -> Result<(), StoreError> {
        self.writable()?;
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
            Access::Read(conn) => control(conn, "COMMIT").map_err(store_error)?,
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
                let _ = control(conn, "ROLLBACK");
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
    use crate::store::rows::{ExecutionRow, LeaseExpiry, RoundRow};
    use crate::store::sqlite::database::Synchronous;
    use crate::store::statements::{executions, rounds};
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
        rounds::get(&tx, "no-such-round").unwrap();
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

    /// A write's statement journal, and every temporary table or sort, stays in memory on a
    /// store connection (`temp_store`, `database.rs`), for writes and reads alike.
    #[test]
    fn a_store_connection_keeps_its_temporary_data_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        for mode in [Mode::Read, Mode::Write] {
            let tx = Transaction::begin(&db, mode).unwrap();
            let temp_store: i64 = tx
                .connection()
                .unwrap()
                .query_row("PRAGMA temp_store", [], |r| r.get(0))
                .unwrap();
            assert_eq!(temp_store, 2, "MEMORY");
        }
    }

    /// A statement is planned once per connection, whatever is bound to it (the query planner's
    /// stability guarantee, `database.rs`). The control: on a connection with SQLite's defaults
    /// the same statement, a round's wide row joined to its version row, is planned again at
    /// each execution.
    #[test]
    fn a_statement_is_planned_once_per_connection_whatever_is_bound() {
        use rusqlite::StatementStatus::RePrepare;
        let dir = tempfile::tempdir().unwrap();
        let db = open(&dir);
        let ids = ["a", "b", "c", "d"];
        let tx = Transaction::begin(&db, Mode::Read).unwrap();
        for id in ids {
            rounds::get(&tx, id).unwrap();
        }
        let conn = tx.connection().unwrap();
        let planned_again = conn
            .prepare_cached(rounds::GET)
            .unwrap()
            .get_status(RePrepare);
        assert_eq!(planned_again, 0, "the store's connection planned GET again");
        drop(tx);
        let plain = rusqlite::Connection::open(dir.path().join("m3.db")).unwrap();
        for id in ids {
            let mut statement = plain.prepare_cached(rounds::GET).unwrap();
            let mut rows = statement.query([id]).unwrap();
            assert!(rows.next().unwrap().is_none());
        }
        let planned_again = plain
            .prepare_cached(rounds::GET)
            .unwrap()
            .get_status(RePrepare);
        assert!(
            planned_again >= ids.len() as i32 - 1,
            "SQLite's default planned GET again {planned_again} times: the control no longer shows \
             the cost the setting removes"
        );
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
            executions::insert(
                &tx,
                ExecutionRow {
                    execution_id: "e".into(),
                    status: "running".into(),
                    version: 1,
                    owner_id: Some("w".into()),
                    lease_expires_at_ns: Some(10),
                    created_at_ns: 1,
                    updated_at_ns: 1,
                    document: "execution document".into(),
                }
            )
            .unwrap()
        );
        assert!(
            rounds::insert(
                &tx,
                RoundRow {
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
                }
            )
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
            let execution = executions::get(&tx, "e").unwrap().unwrap();
            let round = rounds::get(&tx, "r").unwrap().unwrap();
            (execution, round)
        };

        // Both versions as expected: both rows move, their documents kept.
        let mut tx = Transaction::begin(&db, Mode::Write).unwrap();
        let written =
            rounds::set_lease_expiries(&tx, &expiry("e", 1, 20), Some(&expiry("r", 1, 30)), 5)
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
        let written =
            rounds::set_lease_expiries(&tx, &expiry("e", 2, 40), Some(&expiry("r", 1, 40)), 6)
                .unwrap();
        assert!(!written);
        // The execution's version moved: neither either.
        assert!(
            !rounds::set_lease_expiries(&tx, &expiry("e", 1, 40), Some(&expiry("r", 2, 40)), 6)
                .unwrap()
        );
        // A round of another execution is not touched through this one.
        assert!(
            !rounds::set_lease_expiries(&tx, &expiry("x", 2, 40), Some(&expiry("r", 2, 40)), 6)
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
        assert!(rounds::set_lease_expiries(&tx, &expiry("e", 2, 50), None, 7).unwrap());
        tx.commit().unwrap();
        let (execution, round) = rows();
        assert_eq!(
            (execution.version, execution.lease_expires_at_ns),
            (3, Some(50))
        );
        assert_eq!(round.version, 2);
    }
}

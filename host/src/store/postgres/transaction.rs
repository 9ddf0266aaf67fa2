//! One transaction on PostgreSQL, the resource behind the component's `store` import when the
//! database is PostgreSQL: the same rows and the same compare-and-set as on SQLite.
//!
//! Isolation (docs/decisions/0077-postgresql-writes-lock-their-execution.md): a write transaction
//! holds the lock of every execution it touches (a transaction-level advisory lock keyed by the
//! execution id), taken before its first statement on that execution's rows, in the same flight
//! as that statement. The writes of one execution (its rounds, its lease, its finish) are
//! therefore one sequence, and each sees all that committed before it (`READ COMMITTED` reads
//! after the lock was granted), exactly as under the one write lock every write held before;
//! writes of different executions share no rows and run side by side. Every write also holds the
//! database's write lock shared, which `m3 migrate` takes exclusively. A read is one
//! `REPEATABLE READ` snapshot. A lock not granted within the busy timeout is `busy`.
//!
//! Wake-ups: a committing write stamps its woken executions' rows with numbers from a sequence
//! (unique, not in commit order) in the commit's flight, and after the commit says the ids on
//! [`super::database::CHANGES_CHANNEL`] in a transaction of its own that does not wait for its flush (a `NOTIFY`
//! inside the commit would hold PostgreSQL's notification lock through the commit's flush and
//! serialise every writer again). Listeners take the ids from the payload (`database.rs`).

use super::connection::{Answer, Connection, Param, Step, params};
use super::database::Database;
use super::store_error::store_error;
use crate::store::error::StoreError;
use crate::store::idle::Lent;
use crate::store::rows::{
    Cursor, ExecutionRow, LeaseExpiry, Mode, RoundFilter, RoundRow, wide_row_written,
};
use crate::store::waiters::Waiters;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio_postgres::Row;

/// The database's write lock: every write transaction holds it shared until it ends, `m3
/// migrate` exclusively (it then writes alone).
pub const WRITE_LOCK: i64 = 0x4d33_4d49;

/// Takes the lock of execution `$1`: the two-key advisory lock whose first key is the write
/// lock's number and whose second is `hashtext(execution_id)` (two executions whose ids hash alike
/// share a lock, which only orders their writes).
pub const LOCK_EXECUTION: &str = "SELECT pg_advisory_xact_lock(1295207753, hashtext($1))";

/// Takes the lock of round `$1`'s execution (none if the round does not exist) and names it.
const LOCK_ROUND_EXECUTION: &str = "SELECT v.execution_id, \
                                    pg_advisory_xact_lock(1295207753, hashtext(v.execution_id)) \
                                    FROM managed_input_round_versions v WHERE v.round_id = $1";

/// The write lock taken exclusively, for the one kind of write that names no execution (a
/// listing of every execution's rows inside a write transaction; the component makes none).
const LOCK_EVERYTHING: &str = "SELECT pg_advisory_xact_lock(1295207753)";

/// Stamps the executions `$1` with the next numbers of the wake-up sequence.
const STAMP_WAKEUPS: &str = "INSERT INTO execution_wakeups (execution_id, seq) \
                             SELECT id, nextval('execution_wakeup_numbers') \
                             FROM unnest($1::TEXT[]) AS id \
                             ON CONFLICT (execution_id) DO UPDATE SET seq = excluded.seq";

/// Says the woken execution ids `$1` (one per line) on the changes channel, in a transaction of
/// its own whose commit does not wait for its flush.
const NOTIFY: &str = "SELECT set_config('synchronous_commit', 'off', true), \
                      pg_notify('m3_changes', $1)";

/// The most bytes of ids one notification carries (PostgreSQL's payload limit is 8000).
const PAYLOAD_BYTES: usize = 7000;

/// An open transaction. Dropped without [`Transaction::commit`], it rolls back.
pub struct Transaction {
    connection: Option<Lent<Connection>>,
    write: bool,
    open: bool,
    waiters: Arc<Waiters>,
    woken: Vec<String>,
    /// The executions whose locks this write transaction holds; `None` once it holds the write
    /// lock exclusively (then every execution's writes wait for it).
    locked: Mutex<Option<HashSet<String>>>,
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
        status: r.get(2),
        version: required::<i64>(r, 3, "round")? as u64,
        owner_id: r.get(4),
        lease_expires_at_ns: r.get(5),
        deadline_ns: r.get(6),
        created_at_ns: r.get(7),
        updated_at_ns: required(r, 8, "round")?,
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
        status: r.get(1),
        version: required::<i64>(r, 2, "execution")? as u64,
        owner_id: r.get(3),
        lease_expires_at_ns: r.get(4),
        created_at_ns: r.get(5),
        updated_at_ns: required(r, 6, "execution")?,
        document: r.get(7),
    })
}

/// `u64` versions as PostgreSQL's `BIGINT`: a version past `i64::MAX` is refused, not wrapped.
fn version(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Failure("a version is out of range".into()))
}

impl Transaction {
    /// Begins: a read in a `REPEATABLE READ` snapshot, a write once it holds the write lock.
    pub fn begin(db: &Database, mode: Mode) -> Result<Self, StoreError> {
        let connection = db.connect().map_err(store_error)?;
        let write = matches!(mode, Mode::Write);
        let begin = if write {
            format!(
                "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '{}ms'; \
                 SELECT pg_advisory_xact_lock_shared({WRITE_LOCK})",
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
            locked: Mutex::new(Some(HashSet::new())),
        })
    }

    /// Whether a statement on `execution_id`'s rows needs its lock first: in a write
    /// transaction that does not hold it yet.
    fn needs_lock(&self, execution_id: &str) -> bool {
        self.write
            && self
                .locked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_some_and(|held| !held.contains(execution_id))
    }

    fn holds(&self, execution_id: &str) {
        if let Some(held) = self
            .locked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            held.insert(execution_id.to_string());
        }
    }

    /// `step` on `execution_id`'s rows, its lock taken first in the same flight when needed.
    fn on_execution(&self, execution_id: &str, step: Step<'_>) -> Result<Answer, StoreError> {
        let connection = self.connection()?;
        if !self.needs_lock(execution_id) {
            let mut answers = connection.flight(vec![step]).map_err(store_error)?;
            return answers
                .pop()
                .ok_or_else(|| StoreError::Failure("a statement went unanswered".into()));
        }
        let mut answers = connection
            .flight(vec![
                Step::Query(LOCK_EXECUTION, params![execution_id.to_string()]),
                step,
            ])
            .map_err(store_error)?;
        self.holds(execution_id);
        answers
            .pop()
            .ok_or_else(|| StoreError::Failure("a statement went unanswered".into()))
    }

    /// Takes `execution_id`'s lock now, if this write transaction does not hold it.
    fn lock_execution(&self, execution_id: &str) -> Result<(), StoreError> {
        if self.needs_lock(execution_id) {
            self.connection()?
                .query(LOCK_EXECUTION, params![execution_id.to_string()])
                .map_err(store_error)?;
            self.holds(execution_id);
        }
        Ok(())
    }

    /// Takes the write lock exclusively (a write that reads rows of every execution), once.
    fn lock_everything(&self) -> Result<(), StoreError> {
        let mut locked = self.locked.lock().unwrap_or_else(|e| e.into_inner());
        if self.write && locked.is_some() {
            self.connection()?
                .query(LOCK_EVERYTHING, vec![])
                .map_err(store_error)?;
            *locked = None;
        }
        Ok(())
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

    /// The row of `round_id`. In a write transaction its execution's lock is taken first (in the
    /// same flight), so the row read is the latest one and stays so until this transaction ends.
    pub fn get(&self, round_id: &str) -> Result<Option<RoundRow>, StoreError> {
        let select = format!("{SELECT} WHERE r.round_id = $1");
        let connection = self.connection()?;
        if !self.write {
            let rows = connection
                .query(&select, params![round_id.to_string()])
                .map_err(store_error)?;
            return rows.first().map(round_from).transpose();
        }
        let mut answers = connection
            .flight(vec![
                Step::Query(LOCK_ROUND_EXECUTION, params![round_id.to_string()]),
                Step::Query(&select, params![round_id.to_string()]),
            ])
            .map_err(store_error)?
            .into_iter();
        let locked = answers.next().map(Answer::rows).unwrap_or_default();
        if let Some(execution_id) = locked.first().map(|r| r.get::<_, String>(0)) {
            self.holds(&execution_id);
        }
        let row = answers
            .next()
            .map(Answer::rows)
            .unwrap_or_default()
            .first()
            .map(round_from)
            .transpose()?;
        match row {
            // Committed by another transaction between the two statements: its execution's
            // lock is taken now and the row read again under it.
            Some(row) if self.needs_lock(&row.execution_id) => {
                let rows = self
                    .on_execution(
                        &row.execution_id,
                        Step::Query(&select, params![round_id.to_string()]),
                    )?
                    .rows();
                rows.first().map(round_from).transpose()
            }
            row => Ok(row),
        }
    }

    /// Rows matching `filter`, oldest first.
    pub fn list(&self, filter: &RoundFilter) -> Result<Vec<RoundRow>, StoreError> {
        let mut sql = format!("{SELECT} WHERE true");
        let mut args: Vec<Param> = Vec::new();
        if let Some(execution_id) = &filter.execution_id {
            args.push(Box::new(execution_id.clone()));
            sql.push_str(&format!(" AND r.execution_id = ${}", args.len()));
        }
        if let Some(status) = &filter.status {
            args.push(Box::new(status.clone()));
            sql.push_str(&format!(" AND r.status = ${}", args.len()));
        }
        if let Some(after) = &filter.after {
            args.push(Box::new(after.created_at_ns));
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
        let rows = match &filter.execution_id {
            Some(execution_id) => self
                .on_execution(execution_id, Step::Query(&sql, args))?
                .rows(),
            None => {
                self.lock_everything()?;
                self.connection()?.query(&sql, args).map_err(store_error)?
            }
        };
        rows.iter().map(round_from).collect()
    }

    /// Inserts `row` (its wide row and its version row); `false` if the round id exists.
    pub fn insert(&self, row: &RoundRow) -> Result<bool, StoreError> {
        let connection = self.writable()?;
        let changed = self
            .on_execution(
                &row.execution_id,
                Step::Execute(
                    "INSERT INTO managed_input_rounds (round_id, execution_id, status, owner_id, \
                     deadline_ns, created_at_ns, document) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (round_id) DO NOTHING",
                    params![
                        row.round_id.clone(),
                        row.execution_id.clone(),
                        row.status.clone(),
                        row.owner_id.clone(),
                        row.deadline_ns,
                        row.created_at_ns,
                        row.document.clone(),
                    ],
                ),
            )?
            .count();
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
                    row.lease_expires_at_ns,
                    row.updated_at_ns,
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
        let changed = self
            .on_execution(
                &row.execution_id,
                Step::Execute(
                    "UPDATE managed_input_round_versions SET version = $2, \
                     lease_expires_at_ns = $3, updated_at_ns = $4 \
                     WHERE round_id = $1 AND version = $5 AND execution_id = $6",
                    params![
                        row.round_id.clone(),
                        version(row.version)?,
                        row.lease_expires_at_ns,
                        row.updated_at_ns,
                        version(expected_version)?,
                        row.execution_id.clone(),
                    ],
                ),
            )?
            .count();
        if changed != 1 {
            return Ok(false);
        }
        let changed = connection
            .execute(
                "UPDATE managed_input_rounds SET status = $2, owner_id = $3, document = $4 \
                 WHERE round_id = $1",
                params![
                    row.round_id.clone(),
                    row.status.clone(),
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
        updated_at: i64,
    ) -> Result<bool, StoreError> {
        let connection = self.writable()?;
        self.on_execution(&execution.id, Step::Batch("SAVEPOINT lease_expiries"))?;
        let written = (|| {
            let mut changed = connection.execute(
                "UPDATE execution_versions SET lease_expires_at_ns = $2, updated_at_ns = $3, \
                 version = version + 1 WHERE execution_id = $1 AND version = $4",
                params![
                    execution.id.clone(),
                    execution.expires_at_ns,
                    updated_at,
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
                        round.expires_at_ns,
                        updated_at,
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
            .on_execution(
                execution_id,
                Step::Query(
                    &format!("{SELECT_EXECUTION} WHERE e.execution_id = $1"),
                    params![execution_id.to_string()],
                ),
            )?
            .rows();
        rows.first().map(execution_from).transpose()
    }

    /// Executions with `status` (all when `None`), oldest first, after `after`.
    pub fn list_executions(
        &self,
        status: Option<&str>,
        limit: Option<u32>,
        after: Option<&Cursor>,
    ) -> Result<Vec<ExecutionRow>, StoreError> {
        self.lock_everything()?;
        let mut sql = format!("{SELECT_EXECUTION} WHERE true");
        let mut args: Vec<Param> = Vec::new();
        if let Some(status) = status {
            args.push(Box::new(status.to_string()));
            sql.push_str(&format!(" AND e.status = ${}", args.len()));
        }
        if let Some(after) = after {
            args.push(Box::new(after.created_at_ns));
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
        let changed = self
            .on_execution(
                &row.execution_id,
                Step::Execute(
                    "INSERT INTO executions (execution_id, status, owner_id, created_at_ns, \
                     document) VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (execution_id) DO NOTHING",
                    params![
                        row.execution_id.clone(),
                        row.status.clone(),
                        row.owner_id.clone(),
                        row.created_at_ns,
                        row.document.clone(),
                    ],
                ),
            )?
            .count();
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
                    row.lease_expires_at_ns,
                    row.updated_at_ns,
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
        let changed = self
            .on_execution(
                &row.execution_id,
                Step::Execute(
                    "UPDATE execution_versions SET version = $2, lease_expires_at_ns = $3, \
                     updated_at_ns = $4 WHERE execution_id = $1 AND version = $5",
                    params![
                        row.execution_id.clone(),
                        version(row.version)?,
                        row.lease_expires_at_ns,
                        row.updated_at_ns,
                        version(expected_version)?,
                    ],
                ),
            )?
            .count();
        if changed != 1 {
            return Ok(false);
        }
        let changed = connection
            .execute(
                "UPDATE executions SET status = $2, owner_id = $3, document = $4 \
                 WHERE execution_id = $1",
                params![
                    row.execution_id.clone(),
                    row.status.clone(),
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
        self.writable()?;
        let rows = self
            .on_execution(
                execution_id,
                Step::Query(
                    "INSERT INTO execution_items (execution_id, seq, kind, document) \
                     SELECT $1, coalesce(max(seq), 0) + 1, $2, $3 FROM execution_items \
                     WHERE execution_id = $1 RETURNING seq",
                    params![
                        execution_id.to_string(),
                        kind.to_string(),
                        document.to_string()
                    ],
                ),
            )?
            .rows();
        Ok(rows.first().map_or(0, |r| r.get::<_, i64>(0)) as u64)
    }

    /// The execution's items of `kind`, oldest first.
    pub fn list_execution_items(
        &self,
        execution_id: &str,
        kind: &str,
    ) -> Result<Vec<String>, StoreError> {
        let rows = self
            .on_execution(
                execution_id,
                Step::Query(
                    "SELECT document FROM execution_items WHERE execution_id = $1 AND kind = $2 \
                     ORDER BY seq",
                    params![execution_id.to_string(), kind.to_string()],
                ),
            )?
            .rows();
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Wakes `execution_id` when this transaction commits: its wake-up row is stamped in the
    /// commit's flight (under its lock, taken now if not yet held), its waiters in this process
    /// are told on commit, those elsewhere hear its id in the notification after the commit.
    pub fn wake_execution(&mut self, execution_id: &str) -> Result<(), StoreError> {
        self.writable()?;
        self.lock_execution(execution_id)?;
        if !self.woken.iter().any(|id| id == execution_id) {
            self.woken.push(execution_id.to_string());
        }
        Ok(())
    }

    /// Commits, in one flight with the woken executions' wake-up rows and, for a write, the
    /// notification that tells every listening connection (with the woken ids); then wakes this
    /// process's waiters on them. A commit whose answer was lost with the connection is a
    /// failure: the caller cannot know whether it took effect, and reads to find out. A
    /// notification that fails after the commit succeeded is only a hint lost: listeners
    /// elsewhere notice at their next look (a renewal), as when a process dies between the two.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        self.connection()?;
        self.open = false;
        let Some(connection) = self.connection.take() else {
            return Ok(());
        };
        let mut steps = Vec::new();
        if !self.woken.is_empty() {
            steps.push(Step::Execute(STAMP_WAKEUPS, params![self.woken.clone()]));
        }
        steps.push(Step::Batch("COMMIT"));
        if self.write {
            for payload in payloads(&self.woken) {
                steps.push(Step::Query(NOTIFY, params![payload]));
            }
        }
        let answers = connection.flight_each(steps);
        // The rows and the commit come first; the notifications after a successful commit are
        // hints, and a failing one does not undo what committed.
        let committed = answers.and_then(|answers| {
            let notifications = if self.write {
                payloads(&self.woken).len()
            } else {
                0
            };
            let durable = answers.len() - notifications;
            answers
                .into_iter()
                .take(durable)
                .try_for_each(|a| a.map(drop))
        });
        match committed {
            Ok(()) => connection.set_in_transaction(false),
            Err(e) => {
                connection.discard();
                return Err(store_error(e));
            }
        }
        for execution_id in self.woken.drain(..) {
            self.waiters.wake(&execution_id);
        }
        Ok(())
    }
}

/// The notifications that say `woken`: the ids one per line, as many to a payload as fit under
/// [`PAYLOAD_BYTES`]; one empty payload when nothing was woken (something still changed).
fn payloads(woken: &[String]) -> Vec<String> {
    let mut payloads = vec![String::new()];
    for id in woken {
        let last = payloads.last_mut().expect("one payload at least");
        if !last.is_empty() && last.len() + 1 + id.len() > PAYLOAD_BYTES {
            payloads.push(id.clone());
        } else {
            if !last.is_empty() {
                last.push('\n');
            }
            last.push_str(id);
        }
    }
    payloads
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn woken_ids_fill_payloads_one_per_line_under_the_limit() {
        assert_eq!(
            payloads(&[]),
            vec![String::new()],
            "a write with no wake-up still says so"
        );
        assert_eq!(
            payloads(&["a".to_string(), "b".to_string()]),
            vec!["a\nb".to_string()]
        );
        let ids: Vec<String> = (0..100).map(|i| format!("{i:0>299}")).collect();
        let split = payloads(&ids);
        assert!(split.len() > 1, "300-byte ids split over notifications");
        assert!(split.iter().all(|p| p.len() <= PAYLOAD_BYTES));
        let joined: Vec<&str> = split.iter().flat_map(|p| p.split('\n')).collect();
        assert_eq!(joined, ids.iter().map(String::as_str).collect::<Vec<_>>());
    }
}

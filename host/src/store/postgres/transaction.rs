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

use super::connection::{Answer, Connection, Kind, Step, params};
use super::database::Database;
use super::store_error::store_error;
use crate::store::error::StoreError;
use crate::store::idle::Lent;
use crate::store::rows::Mode;
use crate::store::statements::{On, Value};
use crate::store::waiters::Waiters;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// The database's write lock: every write transaction holds it shared until it ends, `m3
/// migrate` exclusively (it then writes alone).
pub const WRITE_LOCK: i64 = 0x4d33_4d49;

/// Takes the lock of execution `$1`: the two-key advisory lock whose first key is the write
/// lock's number and whose second is `hashtext(execution_id)` (two executions whose ids hash alike
/// share a lock, which only orders their writes).
pub const LOCK_EXECUTION: &str = "SELECT pg_advisory_xact_lock(1295207753, hashtext($1))";

/// Takes the lock of round `$1`'s execution (none if the round does not exist) and names it:
/// by the wide row, whose execution is fixed at insert (a wide row without its version row is
/// then locked and read as the damaged database it is).
const LOCK_ROUND_EXECUTION: &str = "SELECT r.execution_id, \
                                    pg_advisory_xact_lock(1295207753, hashtext(r.execution_id)) \
                                    FROM managed_input_rounds r WHERE r.round_id = $1";

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
        if !self.needs_lock(execution_id) {
            return self.alone(step);
        }
        let mut answers = self
            .connection()?
            .flight(vec![
                Step::Query(LOCK_EXECUTION, params![execution_id.to_string()]),
                step,
            ])
            .map_err(store_error)?;
        self.holds(execution_id);
        answers.pop().ok_or_else(unanswered)
    }

    /// One statement on the rows `on` names, in a write under the locks they need (taken in the
    /// same flight when not yet held).
    pub(super) fn run(
        &self,
        on: On<'_>,
        kind: Kind,
        sql: &str,
        args: Vec<Value>,
    ) -> Result<Answer, StoreError> {
        match on {
            On::Execution(execution_id) => self.on_execution(execution_id, kind.step(sql, args)),
            On::Round(round_id) if self.write => self.on_round(round_id, kind, sql, args),
            On::Everything => {
                self.lock_everything()?;
                self.alone(kind.step(sql, args))
            }
            On::Round(_) | On::Nothing => self.alone(kind.step(sql, args)),
        }
    }

    /// `step` with no lock before it.
    fn alone(&self, step: Step<'_>) -> Result<Answer, StoreError> {
        self.connection()?
            .flight(vec![step])
            .map_err(store_error)?
            .pop()
            .ok_or_else(unanswered)
    }

    /// A statement on round `round_id`'s rows in a write: its execution's lock, found by the
    /// round's version row, is taken in the same flight, so what the statement reads is the
    /// latest and stays so until this transaction ends. A round committed by another
    /// transaction between the two (the lock found no round, the statement found rows) is
    /// locked now and the statement run again; rounds are never deleted, so the second flight
    /// finds it.
    fn on_round(
        &self,
        round_id: &str,
        kind: Kind,
        sql: &str,
        args: Vec<Value>,
    ) -> Result<Answer, StoreError> {
        for _ in 0..3 {
            let mut answers = self
                .connection()?
                .flight(vec![
                    Step::Query(LOCK_ROUND_EXECUTION, params![round_id.to_string()]),
                    kind.step(sql, args.clone()),
                ])
                .map_err(store_error)?
                .into_iter();
            let locked = answers.next().map(Answer::rows).unwrap_or_default();
            let answer = answers.next().ok_or_else(unanswered)?;
            match locked.first() {
                Some(row) => {
                    self.holds(&row.get::<_, String>(0));
                    return Ok(answer);
                }
                None if !answer.found() => return Ok(answer),
                None => continue,
            }
        }
        Err(StoreError::Busy(
            "a round's execution could not be locked".into(),
        ))
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

    /// Refuses a write in a read transaction.
    pub(super) fn writable(&self) -> Result<&Connection, StoreError> {
        if !self.write {
            return Err(StoreError::Failure(
                "a read transaction cannot write".into(),
            ));
        }
        self.connection()
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

/// A flight that answered fewer steps than it sent.
fn unanswered() -> StoreError {
    StoreError::Failure("a statement went unanswered".into())
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

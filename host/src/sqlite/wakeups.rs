//! Targeted wake-ups: the `wake-execution` rows a transaction writes, and the waiters of this
//! process registered by execution.
//!
//! A write that concerns whoever waits on an execution (its round answered or failed, a cancel
//! request, the execution finished; the component decides which) stamps the execution's row of
//! `execution_wakeups` with the next sequence number, in the same transaction. Once it commits,
//! waiters in this process are notified at once, and every process's watcher
//! (`worker/changes.rs`) reads the rows with a sequence number above the last it saw (one indexed
//! range read) and notifies only those executions' waiters. The table holds one row per execution
//! ever woken, rewritten in place: it grows with executions, never with answers.

use rusqlite::{Connection, params};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::Notify;

/// Stamps `execution_id`'s row with the next sequence number (inside the caller's write
/// transaction, which serialises the numbers).
pub fn record(conn: &Connection, execution_id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO execution_wakeups (execution_id, seq) \
         SELECT ?1, coalesce(max(seq), 0) + 1 FROM execution_wakeups WHERE true \
         ON CONFLICT (execution_id) DO UPDATE SET seq = excluded.seq",
    )?
    .execute(params![execution_id])?;
    Ok(())
}

/// The highest sequence number stamped so far (0: none).
pub fn latest(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT coalesce(max(seq), 0) FROM execution_wakeups")?
        .query_row([], |r| r.get(0))
}

/// The executions stamped after `seq`, and the highest number among them (`seq` if none).
pub fn since(conn: &Connection, seq: i64) -> rusqlite::Result<(Vec<String>, i64)> {
    let mut statement = conn.prepare_cached(
        "SELECT execution_id, seq FROM execution_wakeups WHERE seq > ?1 ORDER BY seq",
    )?;
    let mut highest = seq;
    let ids = statement
        .query_map([seq], |r| {
            let seq: i64 = r.get(1)?;
            highest = highest.max(seq);
            r.get::<_, String>(0)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok((ids, highest))
}

/// The waiters of this process, by execution: a worker's `events.next`, a caller's `result`.
#[derive(Debug, Default)]
pub struct Waiters {
    by_execution: Mutex<HashMap<String, Vec<Weak<Notify>>>>,
}

impl Waiters {
    /// Registers `notify` as a waiter on `execution_id` while the returned guard lives.
    pub fn register(self: &Arc<Self>, execution_id: &str, notify: &Arc<Notify>) -> Registration {
        let mut map = self.by_execution.lock().unwrap_or_else(|e| e.into_inner());
        let list = map.entry(execution_id.to_string()).or_default();
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(notify));
        Registration {
            waiters: Arc::downgrade(self),
            execution_id: execution_id.to_string(),
            notify: Arc::downgrade(notify),
        }
    }

    /// Wakes every waiter on `execution_id` (a waiter not waiting at that moment finds the
    /// wake-up when it next waits).
    pub fn wake(&self, execution_id: &str) {
        let map = self.by_execution.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(list) = map.get(execution_id) {
            for notify in list.iter().filter_map(Weak::upgrade) {
                notify.notify_one();
            }
        }
    }

    /// The executions anyone in this process waits on.
    pub fn execution_ids(&self) -> Vec<String> {
        self.by_execution
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Whether anyone in this process waits on an execution.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.by_execution
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}

/// A waiter's registration; dropping it unregisters the waiter.
#[derive(Debug)]
pub struct Registration {
    waiters: Weak<Waiters>,
    execution_id: String,
    notify: Weak<Notify>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let Some(waiters) = self.waiters.upgrade() else {
            return;
        };
        let mut map = waiters
            .by_execution
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(list) = map.get_mut(&self.execution_id) {
            list.retain(|w| w.strong_count() > 0 && !Weak::ptr_eq(w, &self.notify));
            if list.is_empty() {
                map.remove(&self.execution_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_execution_s_waiters_wake() {
        let waiters = Arc::new(Waiters::default());
        let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let _ra = waiters.register("exec-a", &a);
        let rb = waiters.register("exec-b", &b);
        waiters.wake("exec-a");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(1), a.notified())
                .await
                .expect("a is woken");
            let b_woken =
                tokio::time::timeout(std::time::Duration::from_millis(50), b.notified()).await;
            assert!(b_woken.is_err(), "b must sleep through a's wake-up");
        });
        drop(rb);
        waiters.wake("exec-b");
        assert!(!waiters.is_empty());
        drop(_ra);
        assert!(
            waiters.is_empty(),
            "dropped registrations leave nothing behind"
        );
    }

    #[test]
    fn a_commit_wakes_its_executions_and_the_rows_say_which() {
        use crate::component::bindings::m3::managed_input::store::TransactionMode;
        use crate::sqlite::database::{Database, Synchronous};
        use crate::sqlite::transaction::Transaction;
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(
            &dir.path().join("m3.db"),
            std::time::Duration::from_secs(5),
            Synchronous::Normal,
        )
        .unwrap();
        let stamp = |ids: &[&str], commit: bool| {
            let mut tx = Transaction::begin(&db, TransactionMode::Write).unwrap();
            for id in ids {
                tx.wake_execution(id).unwrap();
            }
            if commit {
                tx.commit().unwrap();
            }
        };
        assert_eq!(db.latest_wakeup().unwrap(), 0);
        let notify = Arc::new(Notify::new());
        let _registered = db.waiters().register("a", &notify);
        stamp(&["a", "b"], true);
        let seen = db.latest_wakeup().unwrap();
        assert_eq!(seen, 2);
        stamp(&["c"], false); // rolled back: no row, no number
        stamp(&["a"], true);
        let (ids, highest) = db.wakeups_since(seen).unwrap();
        assert_eq!(ids, vec!["a".to_string()]);
        assert_eq!(highest, 3);
        let (none, same) = db.wakeups_since(highest).unwrap();
        assert!(none.is_empty());
        assert_eq!(same, 3);
        let rows: i64 = db
            .connect()
            .unwrap()
            .query_row("SELECT count(*) FROM execution_wakeups", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 2, "one row per execution, rewritten in place");
        // The waiter in this process was told at commit, without any watcher.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(1), notify.notified())
                .await
                .expect("the commit woke a's waiter");
        });
    }
}

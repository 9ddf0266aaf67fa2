//! Targeted wake-ups on SQLite: the `wake-execution` rows a transaction writes (the waiters of
//! this process, registered by execution, are `store/waiters.rs`).
//!
//! A write that concerns whoever waits on an execution (its round answered or failed, a cancel
//! request, the execution finished; the component decides which) stamps the execution's row of
//! `execution_wakeups` with the next sequence number, in the same transaction. Once it commits,
//! waiters in this process are notified at once, and every process's watcher
//! (`worker/changes.rs`) reads the rows with a sequence number above the last it saw (one indexed
//! range read) and notifies only those executions' waiters. The table holds one row per execution
//! ever woken, rewritten in place: it grows with executions, never with answers.

use rusqlite::{Connection, params};

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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use tokio::sync::Notify;

    #[test]
    fn a_commit_wakes_its_executions_and_the_rows_say_which() {
        use crate::store::rows::Mode as TransactionMode;
        use crate::store::sqlite::database::{Database, Synchronous};
        use crate::store::sqlite::transaction::Transaction;
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

//! Versioned schema migrations, tracked in `PRAGMA user_version`.

/// `PRAGMA application_id` of an m3 database ("M3MI").
pub const APPLICATION_ID: i64 = 0x4d33_4d49;
use crate::store::error::OpenFailure;
use rusqlite::Connection;

/// Migrations in order; index `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: rounds, with the columns the host indexes and the component's document. Only `status`
    // is both indexed and changed by transitions (here one index entry per transition;
    // migration 3's index by execution and status makes it two).
    "CREATE TABLE managed_input_rounds (
        round_id            TEXT PRIMARY KEY NOT NULL,
        execution_id        TEXT NOT NULL,
        status              TEXT NOT NULL,
        version             INTEGER NOT NULL,
        owner_id            TEXT,
        lease_expires_at_ns INTEGER,
        deadline_ns         INTEGER,
        created_at_ns       INTEGER NOT NULL,
        updated_at_ns       INTEGER NOT NULL,
        document            TEXT NOT NULL
    ) STRICT;
    CREATE INDEX managed_input_rounds_by_execution
        ON managed_input_rounds (execution_id, created_at_ns);
    CREATE INDEX managed_input_rounds_by_status
        ON managed_input_rounds (status, created_at_ns);",
    // 2: executions, the same way: indexed columns plus the component's document.
    "CREATE TABLE executions (
        execution_id        TEXT PRIMARY KEY NOT NULL,
        status              TEXT NOT NULL,
        version             INTEGER NOT NULL,
        owner_id            TEXT,
        lease_expires_at_ns INTEGER,
        created_at_ns       INTEGER NOT NULL,
        updated_at_ns       INTEGER NOT NULL,
        document            TEXT NOT NULL
    ) STRICT;
    CREATE INDEX executions_by_status ON executions (status, created_at_ns);",
    // 3: an execution's rounds in one status (`pending_elicitation`, `list_rounds` by execution
    // and status) read that execution's rows only; without it SQLite chose the status index and
    // walked every round in that status (found by the scale benchmark at 10^6 rounds).
    "CREATE INDEX managed_input_rounds_by_execution_status
        ON managed_input_rounds (execution_id, status, created_at_ns);",
    // 4: targeted wake-ups (`wakeups.rs`): one row per execution, stamped with a rising number
    // by a write that concerns its waiters; watchers read the rows above the last number seen.
    "CREATE TABLE execution_wakeups (
        execution_id TEXT PRIMARY KEY NOT NULL,
        seq          INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX execution_wakeups_by_seq ON execution_wakeups (seq);",
    // 5: an execution's items (its tool results), appended one row each, so that a long
    // execution never rewrites a document that grows with every result.
    "CREATE TABLE execution_items (
        execution_id TEXT NOT NULL,
        seq          INTEGER NOT NULL,
        kind         TEXT NOT NULL,
        document     TEXT NOT NULL,
        PRIMARY KEY (execution_id, seq)
    ) STRICT, WITHOUT ROWID;",
    // 6: the columns every write changes (version, lease expiry, update time) move to narrow
    // tables of their own, so that a lease renewal, the one write that parked executions keep
    // making, rewrites a few short rows packed many to a page instead of each wide row's page
    // (`transaction.rs`, `execution_rows.rs`). A round's execution is repeated in its version
    // row so that a compare-and-set checks it without reading the wide row.
    "CREATE TABLE managed_input_round_versions (
        round_id            TEXT PRIMARY KEY NOT NULL,
        execution_id        TEXT NOT NULL,
        version             INTEGER NOT NULL,
        lease_expires_at_ns INTEGER,
        updated_at_ns       INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID;
    INSERT INTO managed_input_round_versions
        SELECT round_id, execution_id, version, lease_expires_at_ns, updated_at_ns
        FROM managed_input_rounds;
    ALTER TABLE managed_input_rounds DROP COLUMN version;
    ALTER TABLE managed_input_rounds DROP COLUMN lease_expires_at_ns;
    ALTER TABLE managed_input_rounds DROP COLUMN updated_at_ns;
    CREATE TABLE execution_versions (
        execution_id        TEXT PRIMARY KEY NOT NULL,
        version             INTEGER NOT NULL,
        lease_expires_at_ns INTEGER,
        updated_at_ns       INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID;
    INSERT INTO execution_versions
        SELECT execution_id, version, lease_expires_at_ns, updated_at_ns FROM executions;
    ALTER TABLE executions DROP COLUMN version;
    ALTER TABLE executions DROP COLUMN lease_expires_at_ns;
    ALTER TABLE executions DROP COLUMN updated_at_ns;",
    // 7: the notification ledger of `m3 serve --notify` (`statements/notifications.rs`): each
    // target (by a digest of its address, which may hold a secret) with the time its events
    // start from, and each event's delivery to it, so that a restart resumes where it left off
    // and several servers on one database deliver each event once between them.
    "CREATE TABLE notification_targets (
        target_id TEXT PRIMARY KEY NOT NULL,
        label     TEXT NOT NULL,
        since_ns  INTEGER NOT NULL
    ) STRICT, WITHOUT ROWID;
    CREATE TABLE notifications (
        target_id        TEXT NOT NULL,
        event_id         TEXT NOT NULL,
        seq              INTEGER NOT NULL,
        round_id         TEXT,
        status           TEXT NOT NULL,
        attempts         INTEGER NOT NULL,
        due_at_ns        INTEGER NOT NULL,
        claimed_by       TEXT,
        claimed_until_ns INTEGER,
        created_at_ns    INTEGER NOT NULL,
        updated_at_ns    INTEGER NOT NULL,
        last_error       TEXT,
        document         TEXT NOT NULL,
        PRIMARY KEY (target_id, event_id)
    ) STRICT, WITHOUT ROWID;
    CREATE INDEX notifications_by_status ON notifications (target_id, status, seq);",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database to [`SCHEMA_VERSION`]. The check runs in a read transaction, so an
/// up-to-date database is opened without waiting for a writer; only a migration takes the write
/// lock (`BEGIN IMMEDIATE`), and it checks again under it.
pub fn migrate(conn: &Connection) -> Result<(), OpenFailure> {
    match in_transaction(conn, "BEGIN DEFERRED", |conn| {
        inspect(conn).map(|s| s.is_current())
    })? {
        true => Ok(()),
        false => in_transaction(conn, "BEGIN IMMEDIATE", apply),
    }
}

/// Refuses, in a read transaction that writes nothing, a file that is not (or not yet) an m3
/// database this build can use: run before anything else touches the file.
pub fn check(conn: &Connection) -> Result<(), OpenFailure> {
    in_transaction(conn, "BEGIN DEFERRED", inspect).map(|_| ())
}

fn in_transaction<T>(
    conn: &Connection,
    begin: &str,
    body: impl FnOnce(&Connection) -> Result<T, OpenFailure>,
) -> Result<T, OpenFailure> {
    conn.execute_batch(begin)
        .map_err(super::store_error::open_failure)?;
    match body(conn) {
        Ok(value) => {
            conn.execute_batch("COMMIT")
                .map_err(super::store_error::open_failure)?;
            Ok(value)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// What a file holds, as far as opening it is concerned.
struct Stamp {
    application_id: i64,
    version: i64,
}

impl Stamp {
    fn is_current(&self) -> bool {
        self.version == SCHEMA_VERSION && self.application_id == APPLICATION_ID
    }
}

/// Reads the file's stamp and refuses a file that is not (or not yet) an m3 database this build
/// can use: another application's, one with tables but no application id, or a schema version
/// outside `0..=SCHEMA_VERSION`.
fn inspect(conn: &Connection) -> Result<Stamp, OpenFailure> {
    let read = |pragma: &str| {
        conn.query_row(pragma, [], |r| r.get::<_, i64>(0))
            .map_err(super::store_error::open_failure)
    };
    let application_id = read("PRAGMA application_id")?;
    let version = read("PRAGMA user_version")?;
    let tables = read("SELECT count(*) FROM sqlite_schema WHERE type = 'table'")?;
    let fresh = application_id == 0 && version == 0 && tables == 0;
    if application_id != APPLICATION_ID && !fresh {
        return Err(OpenFailure::Incompatible(
            "the file is a SQLite database of another application (left as it is)".into(),
        ));
    }
    if !(0..=SCHEMA_VERSION).contains(&version) {
        return Err(OpenFailure::Incompatible(format!(
            "schema version {version} is not one this build knows (0 to {SCHEMA_VERSION})"
        )));
    }
    Ok(Stamp {
        application_id,
        version,
    })
}

fn apply(conn: &Connection) -> Result<(), OpenFailure> {
    let stamp = inspect(conn)?;
    if stamp.is_current() {
        return Ok(()); // another process migrated it meanwhile
    }
    let from = usize::try_from(stamp.version).unwrap_or(MIGRATIONS.len());
    for migration in MIGRATIONS.get(from..).unwrap_or_default() {
        conn.execute_batch(migration)
            .map_err(super::store_error::open_failure)?;
    }
    conn.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(super::store_error::open_failure)?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(super::store_error::open_failure)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database written at schema version 5 (before the version tables) keeps every round's
    /// and execution's version, lease expiry and update time through migration 6, and its wide
    /// tables lose those columns.
    #[test]
    fn migration_6_moves_versions_and_leases_into_their_own_rows() {
        let conn = Connection::open_in_memory().unwrap();
        for migration in &MIGRATIONS[..5] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        conn.pragma_update(None, "user_version", 5).unwrap();
        conn.execute_batch(
            "INSERT INTO managed_input_rounds VALUES
                 ('r1', 'e1', 'pending', 7, 'w', 1500, 9000, 100, 1200, '{\"a\":1}'),
                 ('r2', 'e1', 'failed', 3, NULL, NULL, NULL, 200, 300, '{\"b\":2}');
             INSERT INTO executions VALUES
                 ('e1', 'running', 11, 'w', 1600, 50, 1250, '{\"c\":3}');",
        )
        .unwrap();
        migrate(&conn).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        /// Round id, execution, version, expiry, update time, status, document.
        type Round = (String, String, i64, Option<i64>, i64, String, String);
        let rounds: Vec<Round> = conn
            .prepare(
                "SELECT r.round_id, v.execution_id, v.version, v.lease_expires_at_ns, \
                 v.updated_at_ns, r.status, r.document FROM managed_input_rounds r \
                 JOIN managed_input_round_versions v USING (round_id) ORDER BY round_id",
            )
            .unwrap()
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            rounds,
            [
                (
                    "r1".into(),
                    "e1".into(),
                    7,
                    Some(1500),
                    1200,
                    "pending".into(),
                    "{\"a\":1}".into()
                ),
                (
                    "r2".into(),
                    "e1".into(),
                    3,
                    None,
                    300,
                    "failed".into(),
                    "{\"b\":2}".into()
                ),
            ]
        );
        let execution: (i64, Option<i64>, i64, String) = conn
            .query_row(
                "SELECT v.version, v.lease_expires_at_ns, v.updated_at_ns, e.document \
                 FROM executions e JOIN execution_versions v USING (execution_id)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(execution, (11, Some(1600), 1250, "{\"c\":3}".into()));
        for table in ["managed_input_rounds", "executions"] {
            let moved: i64 = conn
                .query_row(
                    &format!(
                        "SELECT count(*) FROM pragma_table_info('{table}') WHERE name IN \
                         ('version', 'lease_expires_at_ns', 'updated_at_ns')"
                    ),
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(moved, 0, "{table} still has a moved column");
        }
    }
}

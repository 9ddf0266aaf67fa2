//! Versioned schema migrations, tracked in `PRAGMA user_version`.

/// `PRAGMA application_id` of an m3 database ("M3MI").
pub const APPLICATION_ID: i64 = 0x4d33_4d49;
use crate::api::error::OpenError;
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
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database to [`SCHEMA_VERSION`]. The check runs in a read transaction, so an
/// up-to-date database is opened without waiting for a writer; only a migration takes the write
/// lock (`BEGIN IMMEDIATE`), and it checks again under it.
pub fn migrate(conn: &Connection) -> Result<(), OpenError> {
    match in_transaction(conn, "BEGIN DEFERRED", |conn| {
        inspect(conn).map(|s| s.is_current())
    })? {
        true => Ok(()),
        false => in_transaction(conn, "BEGIN IMMEDIATE", apply),
    }
}

/// Refuses, in a read transaction that writes nothing, a file that is not (or not yet) an m3
/// database this build can use: run before anything else touches the file.
pub fn check(conn: &Connection) -> Result<(), OpenError> {
    in_transaction(conn, "BEGIN DEFERRED", inspect).map(|_| ())
}

fn in_transaction<T>(
    conn: &Connection,
    begin: &str,
    body: impl FnOnce(&Connection) -> Result<T, OpenError>,
) -> Result<T, OpenError> {
    conn.execute_batch(begin).map_err(OpenError::Sqlite)?;
    match body(conn) {
        Ok(value) => {
            conn.execute_batch("COMMIT").map_err(OpenError::Sqlite)?;
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
fn inspect(conn: &Connection) -> Result<Stamp, OpenError> {
    let read = |pragma: &str| {
        conn.query_row(pragma, [], |r| r.get::<_, i64>(0))
            .map_err(OpenError::Sqlite)
    };
    let application_id = read("PRAGMA application_id")?;
    let version = read("PRAGMA user_version")?;
    let tables = read("SELECT count(*) FROM sqlite_schema WHERE type = 'table'")?;
    let fresh = application_id == 0 && version == 0 && tables == 0;
    if application_id != APPLICATION_ID && !fresh {
        return Err(OpenError::Incompatible(
            "the file is a SQLite database of another application (left as it is)".into(),
        ));
    }
    if !(0..=SCHEMA_VERSION).contains(&version) {
        return Err(OpenError::Incompatible(format!(
            "schema version {version} is not one this build knows (0 to {SCHEMA_VERSION})"
        )));
    }
    Ok(Stamp {
        application_id,
        version,
    })
}

fn apply(conn: &Connection) -> Result<(), OpenError> {
    let stamp = inspect(conn)?;
    if stamp.is_current() {
        return Ok(()); // another process migrated it meanwhile
    }
    let from = usize::try_from(stamp.version).unwrap_or(MIGRATIONS.len());
    for migration in MIGRATIONS.get(from..).unwrap_or_default() {
        conn.execute_batch(migration).map_err(OpenError::Sqlite)?;
    }
    conn.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(OpenError::Sqlite)?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(OpenError::Sqlite)?;
    Ok(())
}

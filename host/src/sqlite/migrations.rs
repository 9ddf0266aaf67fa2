//! Versioned schema migrations, tracked in `PRAGMA user_version`.

use super::database::APPLICATION_ID;
use crate::error::OpenError;
use rusqlite::Connection;

/// Migrations in order; index `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: rounds, with the columns the host indexes and the component's document. Only `status`
    // is both indexed and changed by transitions, so a transition rewrites one index entry.
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
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database to [`SCHEMA_VERSION`] in one `BEGIN IMMEDIATE` transaction.
pub fn migrate(conn: &Connection) -> Result<(), OpenError> {
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(OpenError::Sqlite)?;
    let result = apply(conn);
    match result {
        Ok(()) => conn.execute_batch("COMMIT").map_err(OpenError::Sqlite),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

fn apply(conn: &Connection) -> Result<(), OpenError> {
    let read = |pragma: &str| {
        conn.query_row(pragma, [], |r| r.get::<_, i64>(0))
            .map_err(OpenError::Sqlite)
    };
    let app = read("PRAGMA application_id")?;
    let version = read("PRAGMA user_version")?;
    let tables = read("SELECT count(*) FROM sqlite_schema WHERE type = 'table'")?;
    if app != APPLICATION_ID && (app != 0 || (version == 0 && tables > 0)) {
        return Err(OpenError::Incompatible(
            "the file is a SQLite database of another application".into(),
        ));
    }
    if version > SCHEMA_VERSION {
        return Err(OpenError::Incompatible(format!(
            "schema version {version} is newer than this build supports ({SCHEMA_VERSION})"
        )));
    }
    if version == SCHEMA_VERSION && app == APPLICATION_ID {
        return Ok(()); // up to date: opening writes nothing
    }
    for migration in &MIGRATIONS[version as usize..] {
        conn.execute_batch(migration).map_err(OpenError::Sqlite)?;
    }
    conn.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(OpenError::Sqlite)?;
    conn.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(OpenError::Sqlite)?;
    Ok(())
}

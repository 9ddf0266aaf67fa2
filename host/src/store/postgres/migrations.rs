//! Versioned schema migrations of a PostgreSQL database, tracked in the table `m3_schema`.
//!
//! The tables are those of the SQLite schema at its version 7 (migration 3 adds what its 7 did) (`store/sqlite/migrations.rs`): wide
//! rows with the indexed columns and the component's document, narrow version rows with the
//! columns every write changes, wake-up rows and execution items. Ids and statuses compare
//! byte by byte (`COLLATE "C"`), as SQLite's do, so listings and cursors order alike on both.

use super::connection::Connection;
use super::store_error::describe;
use crate::store::error::OpenFailure;

/// The name `m3_schema` carries for an m3 database.
pub const APPLICATION: &str = "m3-managed-input";

/// Migrations in order; index `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: everything the SQLite schema holds at its version 6.
    r#"CREATE TABLE managed_input_rounds (
        round_id      TEXT COLLATE "C" PRIMARY KEY,
        execution_id  TEXT COLLATE "C" NOT NULL,
        status        TEXT COLLATE "C" NOT NULL,
        owner_id      TEXT,
        deadline_ns   BIGINT,
        created_at_ns BIGINT NOT NULL,
        document      TEXT NOT NULL
    );
    CREATE INDEX managed_input_rounds_by_execution
        ON managed_input_rounds (execution_id, created_at_ns);
    CREATE INDEX managed_input_rounds_by_status
        ON managed_input_rounds (status, created_at_ns);
    CREATE INDEX managed_input_rounds_by_execution_status
        ON managed_input_rounds (execution_id, status, created_at_ns);
    CREATE TABLE managed_input_round_versions (
        round_id            TEXT COLLATE "C" PRIMARY KEY,
        execution_id        TEXT COLLATE "C" NOT NULL,
        version             BIGINT NOT NULL,
        lease_expires_at_ns BIGINT,
        updated_at_ns       BIGINT NOT NULL
    );
    CREATE TABLE executions (
        execution_id  TEXT COLLATE "C" PRIMARY KEY,
        status        TEXT COLLATE "C" NOT NULL,
        owner_id      TEXT,
        created_at_ns BIGINT NOT NULL,
        document      TEXT NOT NULL
    );
    CREATE INDEX executions_by_status ON executions (status, created_at_ns);
    CREATE TABLE execution_versions (
        execution_id        TEXT COLLATE "C" PRIMARY KEY,
        version             BIGINT NOT NULL,
        lease_expires_at_ns BIGINT,
        updated_at_ns       BIGINT NOT NULL
    );
    CREATE TABLE execution_wakeups (
        execution_id TEXT COLLATE "C" PRIMARY KEY,
        seq          BIGINT NOT NULL
    );
    CREATE INDEX execution_wakeups_by_seq ON execution_wakeups (seq);
    CREATE TABLE execution_items (
        execution_id TEXT COLLATE "C" NOT NULL,
        seq          BIGINT NOT NULL,
        kind         TEXT COLLATE "C" NOT NULL,
        document     TEXT NOT NULL,
        PRIMARY KEY (execution_id, seq)
    );"#,
    // 2: wake-up numbers from a sequence, as writes of different executions commit side by
    // side (decision 0077); it starts after the highest number already stamped. `IF NOT
    // EXISTS`: a database put back to version 1 by hand migrates again without harm.
    r#"CREATE SEQUENCE IF NOT EXISTS execution_wakeup_numbers AS BIGINT;
    SELECT setval('execution_wakeup_numbers', coalesce(max(seq), 0) + 1, false)
        FROM execution_wakeups;"#,
    // 3: the notification ledger of `m3 serve --notify`, as SQLite's migration 7 (`IF NOT
    // EXISTS`, as 2).
    r#"CREATE TABLE IF NOT EXISTS notification_targets (
        target_id TEXT COLLATE "C" PRIMARY KEY,
        label     TEXT NOT NULL,
        since_ns  BIGINT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS notifications (
        target_id        TEXT COLLATE "C" NOT NULL,
        event_id         TEXT COLLATE "C" NOT NULL,
        seq              BIGINT NOT NULL,
        round_id         TEXT COLLATE "C",
        status           TEXT COLLATE "C" NOT NULL,
        attempts         BIGINT NOT NULL,
        due_at_ns        BIGINT NOT NULL,
        claimed_by       TEXT,
        claimed_until_ns BIGINT,
        created_at_ns    BIGINT NOT NULL,
        updated_at_ns    BIGINT NOT NULL,
        last_error       TEXT,
        document         TEXT NOT NULL,
        PRIMARY KEY (target_id, event_id)
    );
    CREATE INDEX IF NOT EXISTS notifications_by_status
        ON notifications (target_id, status, seq);"#,
];

/// Moves the wake-up sequence past every number in `execution_wakeups` (after rows were copied
/// in by `m3 migrate`).
pub const ADVANCE_WAKEUP_NUMBERS: &str = "SELECT setval('execution_wakeup_numbers', \
     coalesce(max(seq), 0) + 1, false) FROM execution_wakeups";

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock a migration holds (per database), so that two processes opening a new
/// database at once do not both create its tables.
const MIGRATION_LOCK: i64 = 0x4d33_4d47;

/// Brings the database to [`SCHEMA_VERSION`], in one transaction under [`MIGRATION_LOCK`]:
/// refuses a database of another application (tables but no `m3_schema`) or a schema version
/// this build does not know, and changes nothing then.
pub fn migrate(conn: &Connection, lock_timeout_ms: u64) -> Result<(), OpenFailure> {
    // A database already at this version is opened by reading, without the migration lock:
    // many stores opening at once (worker processes, answerers) never queue behind each other,
    // as SQLite's opening reads before it writes. Anything else is checked again under the lock.
    if version(conn)? == SCHEMA_VERSION {
        return Ok(());
    }
    let failed = |e: tokio_postgres::Error| OpenFailure::Postgres(describe(&e));
    conn.batch(&format!(
        "BEGIN; SET LOCAL lock_timeout = '{lock_timeout_ms}ms'; \
         SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"
    ))
    .map_err(failed)?;
    conn.set_in_transaction(true);
    let outcome = apply(conn);
    let end = if outcome.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    let ended = conn.batch(end);
    conn.set_in_transaction(false);
    outcome?;
    ended.map_err(failed)
}

/// The schema version a database is at (0: no m3 tables yet), refusing a foreign one.
pub fn version(conn: &Connection) -> Result<i64, OpenFailure> {
    let failed = |e: tokio_postgres::Error| OpenFailure::Postgres(describe(&e));
    let marked = conn
        .query(
            "SELECT count(*) FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name = 'm3_schema'",
            vec![],
        )
        .map_err(failed)?;
    let marked: i64 = marked.first().map_or(0, |r| r.get(0));
    if marked == 0 {
        let tables = conn
            .query(
                "SELECT count(*) FROM information_schema.tables \
                 WHERE table_schema = current_schema()",
                vec![],
            )
            .map_err(failed)?;
        let tables: i64 = tables.first().map_or(0, |r| r.get(0));
        if tables > 0 {
            return Err(OpenFailure::Incompatible(
                "the database's schema holds tables of another application (left as it is)".into(),
            ));
        }
        return Ok(0);
    }
    // A table of that name with other columns is another application's: refused by name, never
    // queried into a raw "column does not exist" (or a panic on a column of another type).
    let columns = conn
        .query(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = 'm3_schema' \
             ORDER BY column_name",
            vec![],
        )
        .map_err(failed)?;
    let columns: Vec<(String, String)> = columns
        .iter()
        .map(|r| (r.try_get(0), r.try_get(1)))
        .filter_map(|(name, kind)| Some((name.ok()?, kind.ok()?)))
        .collect();
    let ours = [("application", "text"), ("version", "bigint")];
    if columns.len() != ours.len()
        || columns
            .iter()
            .zip(ours)
            .any(|((name, kind), (n, k))| name != n || kind != k)
    {
        return Err(OpenFailure::Incompatible(
            "the database holds an m3_schema table that is not m3's (another application's; \
             left as it is)"
                .into(),
        ));
    }
    let rows = conn
        .query("SELECT application, version FROM m3_schema", vec![])
        .map_err(failed)?;
    let [row] = rows.as_slice() else {
        return Err(OpenFailure::Incompatible(
            "m3_schema does not hold exactly one row".into(),
        ));
    };
    let (Ok(application), Ok(version)) = (row.try_get::<_, String>(0), row.try_get::<_, i64>(1))
    else {
        return Err(OpenFailure::Incompatible(
            "m3_schema's row is not m3's (left as it is)".into(),
        ));
    };
    if application != APPLICATION {
        return Err(OpenFailure::Incompatible(
            "the database belongs to another application (left as it is)".into(),
        ));
    }
    if !(1..=SCHEMA_VERSION).contains(&version) {
        return Err(OpenFailure::Incompatible(format!(
            "schema version {version} is not one this build knows (1 to {SCHEMA_VERSION})"
        )));
    }
    Ok(version)
}

fn apply(conn: &Connection) -> Result<(), OpenFailure> {
    let failed = |e: tokio_postgres::Error| OpenFailure::Postgres(describe(&e));
    let from = version(conn)?;
    if from == SCHEMA_VERSION {
        return Ok(());
    }
    if from == 0 {
        conn.batch(
            "CREATE TABLE m3_schema (application TEXT NOT NULL, version BIGINT NOT NULL); \
             INSERT INTO m3_schema VALUES ('m3-managed-input', 0)",
        )
        .map_err(failed)?;
    }
    for migration in MIGRATIONS.get(from as usize..).unwrap_or_default() {
        conn.batch(migration).map_err(failed)?;
    }
    conn.batch(&format!("UPDATE m3_schema SET version = {SCHEMA_VERSION}"))
        .map_err(failed)
}

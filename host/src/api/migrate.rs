//! Copies a SQLite database's rounds and executions into an empty PostgreSQL one (`m3 migrate`):
//! every row of the eight tables, verbatim, in one PostgreSQL transaction that is committed only
//! once the copy reads back the same as the source.
//!
//! The host knows tables and columns here as everywhere, never what a row means: nothing is
//! decoded, nothing is chosen; each column's value goes across as it is (text, integer, NULL).
//!
//! - **The source** must be an m3 SQLite file at this build's schema version
//!   ([`crate::store::sqlite::migrations::SCHEMA_VERSION`]). It is opened read-only and read in one read
//!   transaction: one snapshot, whatever its workers commit meanwhile.
//! - **Refusals**, before anything is written: a live lease in that snapshot (a version row of a
//!   round or an execution whose `lease_expires_at_ns` is later than the system clock's now: a
//!   worker may still be writing, and what it writes after the snapshot would be lost), and a
//!   target that already holds rows (nothing is merged).
//! - **The target** is opened (its tables created or brought up to date) and written in one
//!   transaction holding the database's write lock ([`crate::store::postgres::transaction::WRITE_LOCK`])
//!   exclusively (every store write holds it shared), so no worker writes meanwhile. Its rows are read back in the same transaction and compared
//!   with the source's before `COMMIT`; any difference rolls everything back.
//!
//! **The digest.** Each side's rows are hashed the same way, with SHA-256, table by table in
//! [`TABLES`] order, each table's rows in primary-key order (byte order of the ids on both
//! backends). A table's stream is its name as a text cell, its row count as an integer cell, then
//! every row's cells in column order, where a cell is `0x00` for NULL, `0x01` and the value as 8
//! bytes big-endian for an integer, `0x02`, the length as 8 bytes big-endian and the UTF-8 bytes
//! for text. A table's digest is the SHA-256 of its stream; the database's digest is the SHA-256
//! of the eight streams one after the other.

use crate::store::postgres::connection::{Connection, Param, params};
use crate::store::postgres::store_error::{describe, is_busy};
use rusqlite::OpenFlags;
use rusqlite::types::ValueRef;
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Duration;

/// How long each side waits for a lock: the source for a checkpoint's or a migration's, the
/// target for its write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Rows written to the target per statement, at most.
const WRITE_ROWS: usize = 1000;
/// Bytes of text written to the target per statement, at most (about: a row is never split).
const WRITE_BYTES: usize = 16 << 20;
/// Rows read back from the target per statement.
const READ_ROWS: i64 = 256;

use crate::store::schema::{Kind, TABLES, Table};
use Kind::{Integer, Text};

/// How `m3 migrate` reads and writes a table of the description.
trait Copied {
    fn column_list(&self) -> String;
    fn key_list(&self) -> String;
    fn select_all(&self) -> String;
    fn select_after(&self) -> String;
    fn select_first(&self) -> String;
    fn insert(&self) -> String;
}

impl Copied for Table {
    fn column_list(&self) -> String {
        self.columns
            .iter()
            .map(|c| c.name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn key_list(&self) -> String {
        self.key.join(", ")
    }

    /// Every row in key order (on either backend).
    fn select_all(&self) -> String {
        format!(
            "SELECT {} FROM {} ORDER BY {}",
            self.column_list(),
            self.name,
            self.key_list()
        )
    }

    /// PostgreSQL: the next rows after the key given as `$1` (and `$2`), in key order.
    fn select_after(&self) -> String {
        let key = match self.key {
            [one] => format!("{one} > $1"),
            _ => format!("({}) > ($1, $2)", self.key_list()),
        };
        format!(
            "SELECT {} FROM {} WHERE {key} ORDER BY {} LIMIT {READ_ROWS}",
            self.column_list(),
            self.name,
            self.key_list()
        )
    }

    /// PostgreSQL: the first rows in key order.
    fn select_first(&self) -> String {
        format!(
            "SELECT {} FROM {} ORDER BY {} LIMIT {READ_ROWS}",
            self.column_list(),
            self.name,
            self.key_list()
        )
    }

    /// PostgreSQL: many rows in one statement, one typed array per column.
    fn insert(&self) -> String {
        let arrays: Vec<String> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, column)| match column.kind {
                Text => format!("${}::TEXT[]", i + 1),
                Integer => format!("${}::BIGINT[]", i + 1),
            })
            .collect();
        format!(
            "INSERT INTO {} ({}) SELECT * FROM unnest({})",
            self.name,
            self.column_list(),
            arrays.join(", ")
        )
    }
}

/// One value of a row, as both backends hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cell {
    Null,
    Integer(i64),
    Text(String),
}

impl Cell {
    /// The cell's canonical bytes (module documentation, "The digest").
    fn encode(&self, out: &mut Hashes) {
        match self {
            Self::Null => out.update(&[0x00]),
            Self::Integer(value) => {
                out.update(&[0x01]);
                out.update(&value.to_be_bytes());
            }
            Self::Text(text) => {
                out.update(&[0x02]);
                out.update(&(text.len() as u64).to_be_bytes());
                out.update(text.as_bytes());
            }
        }
    }

    fn text_len(&self) -> usize {
        match self {
            Self::Text(text) => text.len(),
            _ => 0,
        }
    }
}

/// A table's hash and the whole database's, fed the same bytes.
struct Hashes<'a> {
    table: Sha256,
    database: &'a mut Sha256,
}

impl Hashes<'_> {
    fn update(&mut self, bytes: &[u8]) {
        self.table.update(bytes);
        self.database.update(bytes);
    }
}

/// What one side holds of one table: its rows and their digest.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TableSum {
    table: &'static str,
    rows: u64,
    digest: [u8; 32],
}

/// Hashes one table's rows (counted first) as they come.
struct TableHasher<'a> {
    table: &'static Table,
    expected: u64,
    seen: u64,
    hashes: Hashes<'a>,
}

impl<'a> TableHasher<'a> {
    fn new(table: &'static Table, rows: u64, database: &'a mut Sha256) -> Self {
        let mut hashes = Hashes {
            table: Sha256::new(),
            database,
        };
        Cell::Text(table.name.to_string()).encode(&mut hashes);
        Cell::Integer(rows as i64).encode(&mut hashes);
        Self {
            table,
            expected: rows,
            seen: 0,
            hashes,
        }
    }

    fn row(&mut self, cells: &[Cell]) {
        for cell in cells {
            cell.encode(&mut self.hashes);
        }
        self.seen += 1;
    }

    /// The sum; an error if the rows read were not as many as counted.
    fn finish(self, side: Side) -> Result<TableSum, MigrateError> {
        if self.seen != self.expected {
            return Err(MigrateError::Mismatch {
                table: self.table.name,
                detail: format!(
                    "the {side} counted {} row(s) and then read {}",
                    self.expected, self.seen
                ),
            });
        }
        Ok(TableSum {
            table: self.table.name,
            rows: self.seen,
            digest: self.hashes.table.finalize().into(),
        })
    }
}

/// Which database a message speaks of.
#[derive(Debug, Clone, Copy)]
enum Side {
    Source,
    Target,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Source => "source",
            Self::Target => "target",
        })
    }
}

/// One table of a [`MigrationReport`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MigratedTable {
    /// The table's name (`managed_input_rounds`, ..., `execution_wakeups`).
    pub table: String,
    /// How many rows were copied (as many as the source holds, read back from the target).
    pub rows: u64,
    /// The SHA-256 of the table's rows (module documentation of `m3 migrate`), in hex: the same
    /// on both sides.
    pub digest: String,
}

/// What [`migrate_sqlite_to_postgres`] copied, verified on the target before it committed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MigrationReport {
    /// The source file, as given.
    pub source: String,
    /// The target's URL without its password.
    pub target: String,
    /// Rounds copied (rows of `managed_input_rounds`).
    pub rounds: u64,
    /// Executions copied (rows of `executions`).
    pub executions: u64,
    /// Every table copied, in the order copied and hashed.
    pub tables: Vec<MigratedTable>,
    /// The SHA-256 of every table's rows, in hex: the source's and the target's, which are equal.
    pub digest: String,
}

/// Why [`migrate_sqlite_to_postgres`] copied nothing. Each message starts with the typed error's
/// name (`ManagedInputValidationError: `, `ManagedInputConflict: `, `StorageError: `), as
/// [`crate::OpenError`]'s do, and carries no answer, lease token, idempotency key or password;
/// [`MigrateError::code`] is its machine-readable reason. In every case the target was left as
/// it was (its tables possibly created, but no row written) and the source was not written.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The source path cannot name a database file (a symbolic link, a directory, a URI, ...).
    #[error("ManagedInputValidationError: invalid source path: {0}")]
    InvalidSource(String),
    /// There is no file at the source path.
    #[error(
        "StorageError: there is no database at {0}; nothing was read or written (check --from)"
    )]
    SourceMissing(String),
    /// The source is not an m3 SQLite database, or not at this build's schema version.
    #[error("StorageError: incompatible source: {0}; nothing was written")]
    IncompatibleSource(String),
    /// The target is not named by a `postgres://` (or `postgresql://`) URL.
    #[error("ManagedInputValidationError: invalid target: {0}; nothing was read or written")]
    InvalidTarget(String),
    /// The target could not be opened (the server, the database, or another application's
    /// tables); the message names the server without a password.
    #[error(transparent)]
    Target(crate::OpenError),
    /// Some lease in the source is still live: a worker may still be writing to it.
    #[error(
        "ManagedInputConflict: {live} lease(s) in the source are live, the last until \
         {last_expires_at}: a worker may still be writing to it; stop its workers (or wait until \
         then) and migrate again; nothing was written"
    )]
    LeasesLive {
        /// How many version rows (rounds and executions) hold a lease that has not expired.
        live: u64,
        /// When the last of them expires (RFC 3339, UTC).
        last_expires_at: String,
    },
    /// The target already holds rows: nothing is merged.
    #[error(
        "ManagedInputConflict: the target {target} already holds {rounds} round(s), \
         {executions} execution(s) and {other} other row(s); migrate into an empty database; \
         nothing was written"
    )]
    TargetNotEmpty {
        /// The target's URL without its password.
        target: String,
        /// Rows of `managed_input_rounds`.
        rounds: u64,
        /// Rows of `executions`.
        executions: u64,
        /// Rows of the other four tables.
        other: u64,
    },
    /// Reading the source failed (busy past the timeout, I/O).
    #[error("StorageError: reading the source failed: {message}; nothing was written")]
    SourceRead {
        /// What failed, without values.
        message: String,
        /// Whether the source stayed locked past the busy timeout.
        busy: bool,
    },
    /// Writing or reading the target failed; the transaction was rolled back.
    #[error("StorageError: writing the target failed: {message}; rolled back, nothing was written")]
    TargetWrite {
        /// What failed (SQLSTATE and message, never the detail that quotes a row).
        message: String,
        /// Whether the write lock was not granted within the busy timeout.
        busy: bool,
    },
    /// The rows read back from the target differ from the source's; rolled back.
    #[error(
        "StorageError: the copy does not match the source in {table}: {detail}; rolled back, \
         nothing was written"
    )]
    Mismatch {
        /// The first table that differs.
        table: &'static str,
        /// How it differs (counts, digests, columns; never a value).
        detail: String,
    },
    /// The commit's answer was lost: whether the copy took effect is unknown.
    #[error(
        "StorageError: the commit on the target failed ({0}); whether the copy took effect is \
         unknown: migrating again refuses a target that holds the rows"
    )]
    Commit(String),
}

impl MigrateError {
    /// The machine-readable reason: `invalid_database_path`, `database_missing`,
    /// `incompatible_database`, `invalid_database_url`, the target's [`crate::OpenError::code`],
    /// `leases_live`, `target_not_empty`, `storage_busy`, `storage_failure`, `copy_mismatch`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidSource(_) => "invalid_database_path",
            Self::SourceMissing(_) => "database_missing",
            Self::IncompatibleSource(_) => "incompatible_database",
            Self::InvalidTarget(_) => "invalid_database_url",
            Self::Target(e) => e.code().unwrap_or("storage_failure"),
            Self::LeasesLive { .. } => "leases_live",
            Self::TargetNotEmpty { .. } => "target_not_empty",
            Self::SourceRead { busy: true, .. } | Self::TargetWrite { busy: true, .. } => {
                "storage_busy"
            }
            Self::SourceRead { .. } | Self::TargetWrite { .. } | Self::Commit(_) => {
                "storage_failure"
            }
            Self::Mismatch { .. } => "copy_mismatch",
        }
    }
}

fn source_read(e: rusqlite::Error) -> MigrateError {
    MigrateError::SourceRead {
        busy: crate::store::sqlite::store_error::is_busy(&e),
        message: e.to_string(),
    }
}

fn target_write(e: tokio_postgres::Error) -> MigrateError {
    MigrateError::TargetWrite {
        busy: is_busy(&e),
        message: describe(&e),
    }
}

/// Copies every round and execution of the SQLite database at `source` into the empty
/// PostgreSQL database at `target_url` (its tables created if need be), as the module
/// documentation says: refused while a lease in the source is live or when the target holds
/// rows, verified by counts and digests before the one transaction commits.
pub fn migrate_sqlite_to_postgres(
    source: &Path,
    target_url: &str,
) -> Result<MigrationReport, MigrateError> {
    // The target's name first: a mistake there touches nothing.
    crate::store::postgres::database::Database::named(target_url, BUSY_TIMEOUT).map_err(|e| {
        match crate::OpenError::from_store(e) {
            crate::OpenError::InvalidUrl(message) => MigrateError::InvalidTarget(message),
            other => MigrateError::Target(other),
        }
    })?;
    let shown = crate::store::postgres::database::shown(target_url);

    let mut conn = open_source(source)?;
    let snapshot = conn.transaction().map_err(source_read)?;
    refuse_live_leases(&snapshot)?;
    for table in TABLES {
        let found = sqlite_columns(&snapshot, table.name)?;
        check_columns(table, &found, Side::Source)?;
    }

    let target = crate::store::postgres::database::Database::open(target_url, BUSY_TIMEOUT)
        .map_err(|e| MigrateError::Target(crate::OpenError::from_store(e)))?;
    let writing = Writing::begin(&target)?;
    for table in TABLES {
        let found = postgres_columns(writing.connection(), table.name)?;
        check_columns(table, &found, Side::Target)?;
    }
    refuse_rows(writing.connection(), &shown)?;

    let mut source_all = Sha256::new();
    let mut source_sums = Vec::new();
    for table in TABLES {
        source_sums.push(copy_table(
            &snapshot,
            writing.connection(),
            table,
            &mut source_all,
        )?);
    }
    let mut target_all = Sha256::new();
    let mut target_sums = Vec::new();
    for table in TABLES {
        target_sums.push(read_back(writing.connection(), table, &mut target_all)?);
    }
    let digest: [u8; 32] = source_all.finalize().into();
    let target_digest: [u8; 32] = target_all.finalize().into();
    compare(&source_sums, &target_sums, &digest, &target_digest)?;
    // Wake-ups stamped from now on are numbered after the copied ones.
    writing
        .connection()
        .batch(crate::store::postgres::migrations::ADVANCE_WAKEUP_NUMBERS)
        .map_err(target_write)?;
    writing.commit()?;
    // The snapshot only read: its end changes nothing.
    drop(snapshot);

    let rows_of = |name: &str| {
        source_sums
            .iter()
            .find(|s| s.table == name)
            .map_or(0, |s| s.rows)
    };
    Ok(MigrationReport {
        source: source.display().to_string(),
        target: shown,
        rounds: rows_of("managed_input_rounds"),
        executions: rows_of("executions"),
        tables: source_sums
            .iter()
            .map(|s| MigratedTable {
                table: s.table.to_string(),
                rows: s.rows,
                digest: hex::encode(s.digest),
            })
            .collect(),
        digest: hex::encode(digest),
    })
}

/// Opens the source read-only, refusing what is not an m3 SQLite file at this build's schema
/// version (nothing is created, stamped or migrated).
fn open_source(path: &Path) -> Result<rusqlite::Connection, MigrateError> {
    crate::store::sqlite::database::check_path(path).map_err(
        |e| match crate::OpenError::from_store(e) {
            crate::OpenError::InvalidPath(message) => MigrateError::InvalidSource(message),
            other => MigrateError::IncompatibleSource(other.to_string()),
        },
    )?;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(MigrateError::SourceMissing(path.display().to_string()));
        }
        Err(e) => {
            return Err(MigrateError::InvalidSource(format!(
                "{} cannot be read: {e}",
                path.display()
            )));
        }
        Ok(_) => {}
    }
    check_header(path)?;
    // No URI, no link followed, never created: a path names this file or nothing.
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let conn = rusqlite::Connection::open_with_flags(path, flags).map_err(source_read)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(source_read)?;
    let pragma = |name: &str| {
        conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get::<_, i64>(0))
            .map_err(|e| match e.sqlite_error_code() {
                Some(rusqlite::ErrorCode::NotADatabase) => MigrateError::IncompatibleSource(
                    format!("{} is not a SQLite database", path.display()),
                ),
                _ => source_read(e),
            })
    };
    check_stamp(path, pragma("application_id")?, pragma("user_version")?)?;
    Ok(conn)
}

/// The first bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Refuses, from the file's first 100 bytes and before SQLite opens it (a reader of a WAL-mode
/// file would leave `-wal` and `-shm` files beside it), a file that is not SQLite, and, when no
/// `-wal` file is beside it (so that the header is the database's own), one that is not m3's or
/// not at this build's schema version. Otherwise the PRAGMAs decide, once it is open.
fn check_header(path: &Path) -> Result<(), MigrateError> {
    use std::io::Read;
    let mut header = [0u8; 100];
    let mut read = 0;
    let mut file = std::fs::File::open(path).map_err(|e| {
        MigrateError::InvalidSource(format!("{} cannot be read: {e}", path.display()))
    })?;
    while read < header.len() {
        match file.read(&mut header[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) => {
                return Err(MigrateError::InvalidSource(format!(
                    "{} cannot be read: {e}",
                    path.display()
                )));
            }
        }
    }
    if read == 0 {
        return Err(MigrateError::IncompatibleSource(format!(
            "{} is empty, not an m3 database",
            path.display()
        )));
    }
    if read < header.len() || &header[..16] != SQLITE_MAGIC {
        return Err(MigrateError::IncompatibleSource(format!(
            "{} is not a SQLite database",
            path.display()
        )));
    }
    let mut wal = path.as_os_str().to_os_string();
    wal.push("-wal");
    if std::fs::symlink_metadata(&wal).is_ok() {
        return Ok(());
    }
    let word = |at: usize| {
        i64::from(i32::from_be_bytes([
            header[at],
            header[at + 1],
            header[at + 2],
            header[at + 3],
        ]))
    };
    check_stamp(path, word(68), word(60))
}

/// Refuses a database whose `application_id` is not m3's or whose `user_version` is not this
/// build's schema version.
fn check_stamp(path: &Path, application_id: i64, version: i64) -> Result<(), MigrateError> {
    if application_id != crate::store::sqlite::migrations::APPLICATION_ID {
        return Err(MigrateError::IncompatibleSource(format!(
            "{} is not an m3 database (its application_id is not m3's)",
            path.display()
        )));
    }
    let current = crate::store::sqlite::migrations::SCHEMA_VERSION;
    if version < current {
        return Err(MigrateError::IncompatibleSource(format!(
            "{} is at schema version {version}, this build copies version {current}: open it \
             once with this build (any m3 command on it) to bring it up to date, then migrate",
            path.display()
        )));
    }
    if version > current {
        return Err(MigrateError::IncompatibleSource(format!(
            "{} is at schema version {version}, newer than this build knows ({current})",
            path.display()
        )));
    }
    Ok(())
}

/// Refuses a snapshot in which a round's or an execution's lease has not expired yet.
fn refuse_live_leases(snapshot: &rusqlite::Connection) -> Result<(), MigrateError> {
    let now = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX);
    let (live, last): (i64, Option<i64>) = snapshot
        .query_row(
            "SELECT count(*), max(lease_expires_at_ns) FROM ( \
             SELECT lease_expires_at_ns FROM managed_input_round_versions \
             WHERE lease_expires_at_ns > ?1 UNION ALL \
             SELECT lease_expires_at_ns FROM execution_versions WHERE lease_expires_at_ns > ?1)",
            [now],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(source_read)?;
    match (live, last) {
        (0, _) | (_, None) => Ok(()),
        (live, Some(last)) => Err(MigrateError::LeasesLive {
            live: live as u64,
            last_expires_at: chrono::DateTime::from_timestamp_nanos(last)
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        }),
    }
}

/// A SQLite table's columns in order (none if there is no such table).
fn sqlite_columns(conn: &rusqlite::Connection, table: &str) -> Result<Vec<String>, MigrateError> {
    let mut statement = conn
        .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
        .map_err(source_read)?;
    statement
        .query_map([table], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect())
        .map_err(source_read)
}

/// A PostgreSQL table's columns in order (none if there is no such table).
fn postgres_columns(conn: &Connection, table: &str) -> Result<Vec<String>, MigrateError> {
    let rows = conn
        .query(
            "SELECT column_name::TEXT FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
            params![table.to_string()],
        )
        .map_err(target_write)?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Refuses a table whose columns are not the ones this build copies: every column, no other.
fn check_columns(table: &Table, found: &[String], side: Side) -> Result<(), MigrateError> {
    let expected: Vec<&str> = table.columns.iter().map(|c| c.name).collect();
    if found
        .iter()
        .map(String::as_str)
        .eq(expected.iter().copied())
    {
        return Ok(());
    }
    let detail = format!(
        "the {side}'s columns are ({}), this build copies ({})",
        found.join(", "),
        expected.join(", ")
    );
    Err(match side {
        Side::Source => MigrateError::IncompatibleSource(format!("{}: {detail}", table.name)),
        Side::Target => MigrateError::Mismatch {
            table: table.name,
            detail,
        },
    })
}

/// The target's one transaction: the write lock held from the start, rolled back unless
/// committed.
struct Writing {
    connection: Option<crate::store::idle::Lent<Connection>>,
}

impl Writing {
    fn begin(db: &crate::store::postgres::database::Database) -> Result<Self, MigrateError> {
        let connection = db.connect().map_err(target_write)?;
        connection.set_in_transaction(true);
        let begin = format!(
            "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = '{}ms'; \
             SELECT pg_advisory_xact_lock({})",
            db.busy_timeout().as_millis().max(1),
            crate::store::postgres::transaction::WRITE_LOCK
        );
        if let Err(e) = connection.batch(&begin) {
            connection.discard();
            return Err(target_write(e));
        }
        Ok(Self {
            connection: Some(connection),
        })
    }

    fn connection(&self) -> &Connection {
        self.connection
            .as_ref()
            .expect("the connection is held until the transaction ends")
    }

    /// Commits, telling every listening connection (as every write transaction does).
    fn commit(mut self) -> Result<(), MigrateError> {
        let connection = self
            .connection
            .take()
            .expect("the connection is held until the transaction ends");
        match connection.batch(&format!(
            "NOTIFY {}; COMMIT",
            crate::store::postgres::database::CHANGES_CHANNEL
        )) {
            Ok(()) => {
                connection.set_in_transaction(false);
                Ok(())
            }
            Err(e) => {
                let message = describe(&e);
                connection.discard();
                Err(MigrateError::Commit(message))
            }
        }
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take() {
            if connection.batch("ROLLBACK").is_ok() {
                connection.set_in_transaction(false);
            } else {
                connection.discard();
            }
        }
    }
}

/// Refuses a target that holds any row of the eight tables.
fn refuse_rows(conn: &Connection, shown: &str) -> Result<(), MigrateError> {
    let mut counts = Vec::new();
    for table in TABLES {
        counts.push(postgres_count(conn, table)?);
    }
    let rounds = counts[0];
    let executions = counts[2];
    let other = counts.iter().sum::<u64>() - rounds - executions;
    if rounds + executions + other == 0 {
        return Ok(());
    }
    Err(MigrateError::TargetNotEmpty {
        target: shown.to_string(),
        rounds,
        executions,
        other,
    })
}

fn postgres_count(conn: &Connection, table: &Table) -> Result<u64, MigrateError> {
    let rows = conn
        .query(&format!("SELECT count(*) FROM {}", table.name), vec![])
        .map_err(target_write)?;
    Ok(rows.first().map_or(0, |r| r.get::<_, i64>(0)) as u64)
}

/// A SQLite row's cells, each of the column's kind (the tables are `STRICT`).
fn sqlite_cells(table: &Table, row: &rusqlite::Row<'_>) -> Result<Vec<Cell>, MigrateError> {
    let mut cells = Vec::with_capacity(table.columns.len());
    for (i, (column, kind)) in table.columns.iter().map(|c| (c.name, c.kind)).enumerate() {
        let value = row.get_ref(i).map_err(source_read)?;
        cells.push(match (value, kind) {
            (ValueRef::Null, _) => Cell::Null,
            (ValueRef::Integer(v), Integer) => Cell::Integer(v),
            (ValueRef::Text(bytes), Text) => match std::str::from_utf8(bytes) {
                Ok(text) => Cell::Text(text.to_string()),
                Err(_) => {
                    return Err(MigrateError::IncompatibleSource(format!(
                        "{}.{column} holds text that is not UTF-8",
                        table.name
                    )));
                }
            },
            _ => {
                return Err(MigrateError::IncompatibleSource(format!(
                    "{}.{column} holds a value of another type than its column's",
                    table.name
                )));
            }
        });
    }
    Ok(cells)
}

/// A PostgreSQL row's cells.
fn postgres_cells(table: &Table, row: &tokio_postgres::Row) -> Result<Vec<Cell>, MigrateError> {
    let mut cells = Vec::with_capacity(table.columns.len());
    for (i, kind) in table.columns.iter().map(|c| c.kind).enumerate() {
        let cell = match kind {
            Text => row
                .try_get::<_, Option<String>>(i)
                .map(|v| v.map(Cell::Text)),
            Integer => row
                .try_get::<_, Option<i64>>(i)
                .map(|v| v.map(Cell::Integer)),
        }
        .map_err(target_write)?;
        cells.push(cell.unwrap_or(Cell::Null));
    }
    Ok(cells)
}

/// Copies one table, hashing the source's rows as they are read; the source's sum.
fn copy_table(
    snapshot: &rusqlite::Connection,
    target: &Connection,
    table: &'static Table,
    all: &mut Sha256,
) -> Result<TableSum, MigrateError> {
    let count: i64 = snapshot
        .query_row(&format!("SELECT count(*) FROM {}", table.name), [], |r| {
            r.get(0)
        })
        .map_err(source_read)?;
    let mut hasher = TableHasher::new(table, count as u64, all);
    let mut statement = snapshot.prepare(&table.select_all()).map_err(source_read)?;
    let mut rows = statement.query([]).map_err(source_read)?;
    let mut chunk: Vec<Vec<Cell>> = Vec::new();
    let mut bytes = 0;
    while let Some(row) = rows.next().map_err(source_read)? {
        let cells = sqlite_cells(table, row)?;
        hasher.row(&cells);
        bytes += cells.iter().map(Cell::text_len).sum::<usize>();
        chunk.push(cells);
        if chunk.len() >= WRITE_ROWS || bytes >= WRITE_BYTES {
            write_chunk(target, table, &std::mem::take(&mut chunk))?;
            bytes = 0;
        }
    }
    if !chunk.is_empty() {
        write_chunk(target, table, &chunk)?;
    }
    hasher.finish(Side::Source)
}

/// Inserts rows in one statement, one array per column, NULLs kept.
fn write_chunk(target: &Connection, table: &Table, rows: &[Vec<Cell>]) -> Result<(), MigrateError> {
    let mut arrays: Vec<Param> = Vec::with_capacity(table.columns.len());
    for (i, kind) in table.columns.iter().map(|c| c.kind).enumerate() {
        match kind {
            Text => {
                let column: Vec<Option<String>> = rows
                    .iter()
                    .map(|r| match &r[i] {
                        Cell::Text(text) => Some(text.clone()),
                        _ => None,
                    })
                    .collect();
                arrays.push(Box::new(column));
            }
            Integer => {
                let column: Vec<Option<i64>> = rows
                    .iter()
                    .map(|r| match r[i] {
                        Cell::Integer(value) => Some(value),
                        _ => None,
                    })
                    .collect();
                arrays.push(Box::new(column));
            }
        }
    }
    let written = target
        .execute(&table.insert(), arrays)
        .map_err(target_write)?;
    if written != rows.len() as u64 {
        return Err(MigrateError::Mismatch {
            table: table.name,
            detail: format!("{} row(s) sent, {written} written", rows.len()),
        });
    }
    Ok(())
}

/// Reads one table back from the target in key order, hashing it as the source was; the
/// target's sum.
fn read_back(
    target: &Connection,
    table: &'static Table,
    all: &mut Sha256,
) -> Result<TableSum, MigrateError> {
    let count = postgres_count(target, table)?;
    let mut hasher = TableHasher::new(table, count, all);
    let mut last: Option<Vec<Cell>> = None;
    loop {
        let rows = match &last {
            None => target.query(&table.select_first(), vec![]),
            Some(cells) => {
                let mut args: Vec<Param> = Vec::new();
                for (i, _) in table.key.iter().enumerate() {
                    match &cells[i] {
                        Cell::Text(text) => args.push(Box::new(text.clone())),
                        Cell::Integer(value) => args.push(Box::new(*value)),
                        Cell::Null => args.push(Box::new(Option::<String>::None)),
                    }
                }
                target.query(&table.select_after(), args)
            }
        }
        .map_err(target_write)?;
        for row in &rows {
            let cells = postgres_cells(table, row)?;
            hasher.row(&cells);
            last = Some(cells);
        }
        if (rows.len() as i64) < READ_ROWS {
            break;
        }
    }
    hasher.finish(Side::Target)
}

/// The first difference between the source's sums and the target's, as an error.
fn compare(
    source: &[TableSum],
    target: &[TableSum],
    source_digest: &[u8; 32],
    target_digest: &[u8; 32],
) -> Result<(), MigrateError> {
    for (s, t) in source.iter().zip(target) {
        if s.rows != t.rows {
            return Err(MigrateError::Mismatch {
                table: s.table,
                detail: format!(
                    "{} row(s) in the source, {} read back from the target",
                    s.rows, t.rows
                ),
            });
        }
        if s.digest != t.digest {
            return Err(MigrateError::Mismatch {
                table: s.table,
                detail: format!(
                    "the rows read back hash to {}, the source's to {}",
                    hex::encode(t.digest),
                    hex::encode(s.digest)
                ),
            });
        }
    }
    if source.len() != target.len() || source_digest != target_digest {
        return Err(MigrateError::Mismatch {
            table: "(all tables)",
            detail: format!(
                "the target's digest is {}, the source's {}",
                hex::encode(target_digest),
                hex::encode(source_digest)
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(cells: &[Cell]) -> [u8; 32] {
        let mut all = Sha256::new();
        let mut hashes = Hashes {
            table: Sha256::new(),
            database: &mut all,
        };
        for cell in cells {
            cell.encode(&mut hashes);
        }
        hashes.table.finalize().into()
    }

    /// NULL, the empty text, zero and text split differently all hash apart: each cell carries
    /// its kind and its length.
    #[test]
    fn the_encoding_tells_cells_apart() {
        let text = |s: &str| Cell::Text(s.to_string());
        let distinct = [
            stream(&[Cell::Null]),
            stream(&[text("")]),
            stream(&[Cell::Integer(0)]),
            stream(&[text("ab"), text("c")]),
            stream(&[text("a"), text("bc")]),
            stream(&[text("0")]),
        ];
        for (i, a) in distinct.iter().enumerate() {
            for b in &distinct[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // The documented bytes of one text cell.
        let mut expected = vec![0x02];
        expected.extend_from_slice(&2u64.to_be_bytes());
        expected.extend_from_slice(b"ab");
        let direct: [u8; 32] = Sha256::digest(&expected).into();
        assert_eq!(stream(&[text("ab")]), direct);
    }

    /// Every table this build copies is, column for column, the one SQLite's migrations make.
    #[test]
    fn the_tables_copied_are_the_sqlite_schemas_whole() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        crate::store::sqlite::migrations::migrate(&conn).unwrap();
        let mut tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        tables.sort();
        let mut copied: Vec<String> = TABLES.iter().map(|t| t.name.to_string()).collect();
        copied.sort();
        assert_eq!(tables, copied, "every table and no other");
        for table in TABLES {
            let found = sqlite_columns(&conn, table.name).unwrap();
            check_columns(table, &found, Side::Source).unwrap();
            // Reading back after a row's key takes the key from its first cells.
            for (i, key) in table.key.iter().enumerate() {
                assert_eq!(table.columns[i].name, *key, "{}", table.name);
            }
        }
        let mut short = sqlite_columns(&conn, "executions").unwrap();
        short.pop();
        assert!(check_columns(&TABLES[2], &short, Side::Source).is_err());
    }

    fn sum(table: &'static str, rows: u64, byte: u8) -> TableSum {
        TableSum {
            table,
            rows,
            digest: [byte; 32],
        }
    }

    /// A count or a digest that differs is a mismatch naming the table; equal sums pass.
    #[test]
    fn compare_finds_the_first_difference() {
        let source = [sum("executions", 2, 1), sum("execution_items", 3, 2)];
        compare(&source, &source, &[9; 32], &[9; 32]).unwrap();
        let fewer = [sum("executions", 2, 1), sum("execution_items", 2, 2)];
        let e = compare(&source, &fewer, &[9; 32], &[9; 32]).unwrap_err();
        assert!(
            matches!(
                e,
                MigrateError::Mismatch {
                    table: "execution_items",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(e.code(), "copy_mismatch");
        let changed = [sum("executions", 2, 7), sum("execution_items", 3, 2)];
        let e = compare(&source, &changed, &[9; 32], &[9; 32]).unwrap_err();
        assert!(
            matches!(
                e,
                MigrateError::Mismatch {
                    table: "executions",
                    ..
                }
            ),
            "{e}"
        );
        assert!(compare(&source, &source, &[9; 32], &[8; 32]).is_err());
    }

    /// The refusal names how many leases are live and until when, and nothing else.
    #[test]
    fn a_live_lease_is_refused_and_an_expired_one_is_not() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        crate::store::sqlite::migrations::migrate(&conn).unwrap();
        let now = chrono::Utc::now().timestamp_nanos_opt().unwrap();
        conn.execute(
            "INSERT INTO execution_versions VALUES ('e1', 1, ?1, 0), ('e2', 1, NULL, 0)",
            [now - 1_000_000_000],
        )
        .unwrap();
        refuse_live_leases(&conn).unwrap();
        let until = now + 60_000_000_000;
        conn.execute(
            "INSERT INTO managed_input_round_versions VALUES ('r1', 'e1', 1, ?1, 0), \
             ('r2', 'e1', 1, ?2, 0)",
            [until, now + 30_000_000_000],
        )
        .unwrap();
        let e = refuse_live_leases(&conn).unwrap_err();
        let MigrateError::LeasesLive {
            live,
            ref last_expires_at,
        } = e
        else {
            panic!("{e}");
        };
        assert_eq!(live, 2);
        let expected = chrono::DateTime::from_timestamp_nanos(until)
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        assert_eq!(last_expires_at, &expected);
        assert_eq!(e.code(), "leases_live");
        assert!(
            e.to_string()
                .starts_with("ManagedInputConflict: 2 lease(s)")
        );
    }
}

//! A database file and how connections to it are made.

use super::group_commit::Writer;
use super::store_error::is_busy;
pub use super::synchronous::Synchronous;
use crate::store::error::OpenFailure;
use crate::store::idle::Idle;
use crate::store::waiters::Waiters;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A SQLite connection lent to one operation.
pub type Lent = crate::store::idle::Lent<Connection>;

/// A database file shared by every operation of one store object.
pub struct Database {
    path: PathBuf,
    busy_timeout: Duration,
    synchronous: Synchronous,
    /// One long-lived connection held for the store's life: the last per-operation connection
    /// closing then does not checkpoint and delete the WAL every time, and `PRAGMA data_version`
    /// on it tells when any other connection (of this process or another) committed. It runs the
    /// opening checks, pragmas and migrations when the store opens; after that only the
    /// `data_version` poll, never holding a transaction open.
    keeper: Mutex<Connection>,
    /// This process's waiters on executions of this file (through this object).
    waiters: Arc<Waiters>,
    /// The write turn and open group of this object's write transactions (`group_commit.rs`).
    writer: Arc<Writer>,
    /// Connections between operations (`idle.rs`).
    idle: Arc<Idle<Connection>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Database {
    /// Opens (creating if needed, owner-only) the database at `path`, applies migrations and
    /// checks WAL mode. An existing file is checked before anything is written to it: it must be
    /// an empty file or a SQLite database of m3's (its `application_id`).
    pub fn open(
        path: &Path,
        busy_timeout: Duration,
        synchronous: Synchronous,
    ) -> Result<Self, OpenFailure> {
        check_path(path)?;
        check_header(path)?;
        create_private(path)?;
        let keeper = connect_raw(path, busy_timeout, synchronous)
            .map_err(super::store_error::open_failure)?;
        super::migrations::check(&keeper)?;
        enable_wal(&keeper, busy_timeout)?;
        super::migrations::migrate(&keeper)?;
        Ok(Self {
            path: path.to_path_buf(),
            busy_timeout,
            synchronous,
            keeper: Mutex::new(keeper),
            waiters: Arc::default(),
            writer: Arc::default(),
            idle: Idle::new(),
        })
    }

    /// A connection with the store's pragmas for one operation: an idle one of this object's
    /// (`idle.rs`) or a new one; lent to this operation alone until dropped.
    pub fn connect(&self) -> rusqlite::Result<Lent> {
        self.idle
            .lend(|| connect_raw(&self.path, self.busy_timeout, self.synchronous))
    }

    /// How long a write waits for the write lock before it fails busy.
    pub fn busy_timeout(&self) -> Duration {
        self.busy_timeout
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `PRAGMA data_version` of the keeper connection: it changes whenever another connection,
    /// in any process, commits a change to the file.
    pub fn data_version(&self) -> rusqlite::Result<i64> {
        let keeper = self.keeper.lock().unwrap_or_else(|e| e.into_inner());
        keeper
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))
    }

    /// The write turn shared by this object's write transactions.
    pub(crate) fn writer(&self) -> &Arc<Writer> {
        &self.writer
    }

    /// This process's waiters on the executions of this database.
    pub fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }

    /// The highest wake-up number so far (on the keeper connection, no transaction held).
    pub fn latest_wakeup(&self) -> rusqlite::Result<i64> {
        let keeper = self.keeper.lock().unwrap_or_else(|e| e.into_inner());
        super::wakeups::latest(&keeper)
    }

    /// The executions woken after number `seq`, and the highest number among them.
    pub fn wakeups_since(&self, seq: i64) -> rusqlite::Result<(Vec<String>, i64)> {
        let keeper = self.keeper.lock().unwrap_or_else(|e| e.into_inner());
        super::wakeups::since(&keeper, seq)
    }
}

/// Prepared statements kept per connection: more than the store runs (every filter of a list
/// is a statement of its own), so that a reused connection parses none of them again. rusqlite's
/// default, 16, is fewer: with version rows (migration 6) the store's statements no longer fit
/// and each operation on a busy connection prepared some of its SQL again.
const STATEMENT_CACHE: usize = 64;

/// Page cache per connection, in KiB as SQLite's negative `cache_size` takes it: 16 MB instead
/// of the default 2 MB. An operation reads a wide row and its version row (migration 6), pages
/// of two tables; with thousands of executions the default cache missed on most of them
/// (answering 3,948 parked executions: 30 s with the default, 18 to 25 s with this). Pages are
/// held only while the connection lives (an idle one is closed within a second).
const CACHE_KIB: i64 = -16_000;

fn connect_raw(
    path: &Path,
    busy_timeout: Duration,
    synchronous: Synchronous,
) -> rusqlite::Result<Connection> {
    // No SQLITE_OPEN_URI: a path is a path, never a `file:` URI with options. NOFOLLOW: a
    // database file replaced by a symbolic link after `check_path` looked is refused by SQLite
    // itself, so the check and the open cannot be raced apart.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(busy_timeout)?;
    conn.pragma_update(None, "synchronous", synchronous.pragma())?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // The query planner's stability guarantee: a statement is planned once, not again whenever
    // a value bound to it might change its plan. With SQLite's default every statement that
    // joins a wide row to its version row was planned again at each execution, whatever was
    // bound (a quarter of a read's time; BENCHMARKS.md, section 5, "Reads through the
    // component"). The store's statements are written for their indexes, not for values.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    conn.pragma_update(None, "cache_size", CACHE_KIB)?;
    // The statement journal of the write's savepoint (and any temporary table or sort) in
    // memory: a renewal of hundreds of parked workers modifies more pages than the journal
    // keeps in memory by default, and its spill to a temporary file was a tenth of the idle
    // CPU of 10,000 parked executions (BENCHMARKS.md, section 5). What it holds is bounded by
    // the pages one transaction touches.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    Ok(conn)
}

fn enable_wal(conn: &Connection, busy_timeout: Duration) -> Result<(), OpenFailure> {
    // Switching to WAL needs an exclusive lock that the busy handler does not wait for; retry
    // within the busy timeout when several processes open a new file at once.
    let started = std::time::Instant::now();
    loop {
        match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)) {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => {
                return Err(OpenFailure::Incompatible(format!(
                    "journal mode stays {mode}, WAL is required"
                )));
            }
            Err(e) if is_busy(&e) && started.elapsed() < busy_timeout => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(super::store_error::open_failure(e)),
        }
    }
}

/// The first bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Refuses an existing file that is neither empty nor a SQLite database, or a SQLite database
/// that carries another application's id, before SQLite touches it (so nothing is ever stamped
/// onto a foreign file). A SQLite file with no application id is checked once opened (it may be
/// a fresh m3 database another process is creating).
fn check_header(path: &Path) -> Result<(), OpenFailure> {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else {
        return Ok(()); // it does not exist (yet): created below
    };
    let mut header = [0u8; 100];
    let mut read = 0;
    while read < header.len() {
        match file.read(&mut header[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) => {
                return Err(OpenFailure::InvalidPath(format!(
                    "{} cannot be read: {e}",
                    path.display()
                )));
            }
        }
    }
    if read == 0 {
        return Ok(()); // an empty file becomes a new database
    }
    if read < header.len() || &header[..16] != SQLITE_MAGIC {
        return Err(OpenFailure::Incompatible(format!(
            "{} is not a SQLite database (refused: it is left as it is)",
            path.display()
        )));
    }
    let application_id = i64::from(i32::from_be_bytes([
        header[68], header[69], header[70], header[71],
    ]));
    if application_id != 0 && application_id != super::migrations::APPLICATION_ID {
        return Err(OpenFailure::Incompatible(format!(
            "{} is a SQLite database of another application (application_id {application_id})",
            path.display()
        )));
    }
    Ok(())
}

/// Creates the database file readable and writable by its owner only (whatever the umask), if
/// it does not exist, and makes an existing empty file (one that is about to become a new
/// database, e.g. made by `touch` under a loose umask) owner-only too; SQLite gives its `-wal`
/// and `-shm` files the mode of the database file. An existing database keeps its mode
/// (`m3 doctor` reports one that others may read).
fn create_private(path: &Path) -> Result<(), OpenFailure> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let private = |file: std::fs::File| {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| {
                OpenFailure::InvalidPath(format!("{} cannot be made private: {e}", path.display()))
            })
    };
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(file) => private(file),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Opened without following a link (the path was checked to be a regular file; a
            // link put there since is refused, not followed).
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .map_err(|e| {
                    OpenFailure::InvalidPath(format!("{} cannot be opened: {e}", path.display()))
                })?;
            let empty = file.metadata().is_ok_and(|m| m.is_file() && m.len() == 0);
            if empty { private(file) } else { Ok(()) }
        }
        Err(e) => Err(OpenFailure::InvalidPath(format!(
            "{} cannot be created: {e}",
            path.display()
        ))),
    }
}

/// Refuses paths that would open something other than the plain file the caller named.
pub(crate) fn check_path(path: &Path) -> Result<(), OpenFailure> {
    if crate::checks::mutation::broken(crate::checks::mutation::HostRule::PathRefusals) {
        return Ok(());
    }
    let text = path.as_os_str().as_encoded_bytes();
    if text.is_empty() {
        return Err(OpenFailure::InvalidPath("the path is empty".into()));
    }
    if text.contains(&0) {
        return Err(OpenFailure::InvalidPath(
            "the path contains a NUL byte".into(),
        ));
    }
    if text.starts_with(b"file:") {
        return Err(OpenFailure::InvalidPath(
            "`file:` URIs are not accepted; give a plain path".into(),
        ));
    }
    if text == b":memory:" || text.starts_with(b":") {
        return Err(OpenFailure::InvalidPath(
            "managed input needs a database file; in-memory databases are not persistent".into(),
        ));
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(OpenFailure::InvalidPath(format!(
                "{} is a symbolic link; give the database file itself",
                path.display()
            )));
        }
        Ok(meta) if meta.is_dir() => {
            return Err(OpenFailure::InvalidPath(format!(
                "{} is a directory",
                path.display()
            )));
        }
        Ok(meta) if !meta.is_file() => {
            return Err(OpenFailure::InvalidPath(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        Ok(_) => {}
        Err(_) => {
            let parent = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !parent.is_dir() {
                return Err(OpenFailure::InvalidPath(format!(
                    "the directory {} does not exist",
                    parent.display()
                )));
            }
        }
    }
    Ok(())
}

//! A PostgreSQL database named by a URL, and how connections to it are made.

use super::connection::Connection;
pub use super::health::Health;
use super::store_error::{describe, store_error};
use crate::store::error::OpenFailure;
use crate::store::error::StoreError;
use crate::store::idle::{Idle, Lent};
use crate::store::waiters::Waiters;
use std::collections::VecDeque;
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres::Config;

/// The channel every write transaction notifies on commit (`LISTEN m3_changes`).
pub const CHANGES_CHANNEL: &str = "m3_changes";

/// How long a lost listening connection waits before it is opened again.
const RECONNECT_EVERY: Duration = Duration::from_millis(250);

/// How many wake-ups heard are kept for watchers that have not read them yet; a watcher further
/// behind wakes every waiter of this process.
const HEARD_KEPT: usize = 65_536;

/// Whether `text` names a PostgreSQL database (`postgres://` or `postgresql://`).
pub fn is_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}

/// A PostgreSQL database shared by every operation of one store object.
pub struct Database {
    config: Config,
    /// The URL as it may be shown: without a password.
    shown: String,
    busy_timeout: Duration,
    idle: Arc<Idle<Connection>>,
    waiters: Arc<Waiters>,
    listening: Mutex<Listening>,
    /// Moves on every notification heard on [`CHANGES_CHANNEL`] and every time the listening
    /// connection is opened (what was said while it was lost is then read again).
    heard: Arc<AtomicI64>,
    /// The wake-ups heard, numbered in the order heard.
    wakeups: Arc<Mutex<Wakeups>>,
}

/// The executions woken by commits anywhere, as their notifications said, numbered here in the
/// order this process heard them (the numbers are this process's own, never stored).
#[derive(Debug, Default)]
struct Wakeups {
    /// The number of the latest wake-up heard (0: none yet).
    latest: i64,
    /// The latest [`HEARD_KEPT`] wake-ups: a number and the execution woken, or `None` where
    /// any might have been (the listening connection was lost and opened again).
    kept: VecDeque<(i64, Option<String>)>,
}

impl Wakeups {
    fn push(&mut self, woken: Option<String>) {
        self.latest += 1;
        if self.kept.len() == HEARD_KEPT {
            self.kept.pop_front();
        }
        self.kept.push_back((self.latest, woken));
    }
}

/// The connection that listens for other connections' commits, opened on first need.
#[derive(Default)]
struct Listening {
    connection: Option<Connection>,
    last_try: Option<Instant>,
    /// Whether it was open before (then opening it again may have missed wake-ups).
    opened: bool,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

/// `url` with its password (if any) left out.
pub fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "postgres://".into();
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split(':').next().unwrap_or_default();
            format!("{user}@{host}")
        }
        None => authority.to_string(),
    };
    // Query parameters may carry a password too: only their names are shown.
    let path = match path.split_once('?') {
        Some((path, query)) if query.split('&').any(|kv| kv.starts_with("password")) => {
            format!("{path}?(parameters left out)")
        }
        _ => path.to_string(),
    };
    format!("{scheme}://{authority}{path}")
}

impl Database {
    /// Opens the database at `url` and brings its schema to this build's version, refusing a
    /// database of another application (tables but no `m3_schema`) or of a newer schema.
    pub fn open(url: &str, busy_timeout: Duration) -> Result<Self, OpenFailure> {
        let db = Self::named(url, busy_timeout)?;
        let conn = db
            .connect()
            .map_err(|e| OpenFailure::Postgres(format!("{}: {}", db.shown, describe(&e))))?;
        super::migrations::migrate(&conn, busy_timeout.as_millis() as u64)?;
        drop(conn);
        Ok(db)
    }

    /// The database at `url`, nothing opened or changed yet (`m3 doctor` reads through it).
    pub fn named(url: &str, busy_timeout: Duration) -> Result<Self, OpenFailure> {
        if !is_url(url) {
            return Err(OpenFailure::InvalidUrl(
                "a PostgreSQL database is named by a postgres:// URL".into(),
            ));
        }
        let mut config = Config::from_str(url).map_err(|_| {
            OpenFailure::InvalidUrl(format!("{} is not a PostgreSQL URL", shown(url)))
        })?;
        config.application_name("m3");
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(busy_timeout.max(Duration::from_secs(1)));
        }
        Ok(Self {
            config,
            shown: shown(url),
            busy_timeout,
            idle: Idle::new(),
            waiters: Arc::default(),
            listening: Mutex::default(),
            heard: Arc::new(AtomicI64::new(0)),
            wakeups: Arc::default(),
        })
    }

    /// A connection for one operation: an idle one of this object's or a new one; lent to this
    /// operation alone until dropped.
    pub fn connect(&self) -> Result<Lent<Connection>, tokio_postgres::Error> {
        self.idle.lend(|| Connection::open(&self.config, None))
    }

    /// How long a write waits for the write lock before it fails busy.
    pub fn busy_timeout(&self) -> Duration {
        self.busy_timeout
    }

    /// The URL without its password.
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// This process's waiters on the executions of this database.
    pub fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }

    /// A number that moves whenever a write transaction, of any connection on any machine,
    /// committed since it was last read (heard through `LISTEN`), or when the listening
    /// connection was lost and opened again. The first call opens that connection.
    pub fn data_version(&self) -> Result<i64, StoreError> {
        let mut listening = self.listening.lock().unwrap_or_else(|e| e.into_inner());
        if listening
            .connection
            .as_ref()
            .is_some_and(|c| !c.is_closed())
        {
            return Ok(self.heard.load(Ordering::Acquire));
        }
        listening.connection = None;
        if listening
            .last_try
            .is_some_and(|at| at.elapsed() < RECONNECT_EVERY)
        {
            return Err(StoreError::Failure(
                "the connection listening for changes is lost; it is opened again shortly".into(),
            ));
        }
        listening.last_try = Some(Instant::now());
        let (heard, wakeups) = (self.heard.clone(), self.wakeups.clone());
        let connection = Connection::open(
            &self.config,
            Some(Box::new(move |_, payload| {
                {
                    let mut wakeups = wakeups.lock().unwrap_or_else(|e| e.into_inner());
                    for id in payload.split('\n').filter(|id| !id.is_empty()) {
                        wakeups.push(Some(id.to_string()));
                    }
                }
                heard.fetch_add(1, Ordering::AcqRel);
            })),
        )
        .map_err(store_error)?;
        connection
            .batch(&format!("LISTEN {CHANGES_CHANNEL}"))
            .map_err(store_error)?;
        listening.connection = Some(connection);
        if std::mem::replace(&mut listening.opened, true) {
            // Opened again: whoever waits may have missed a wake-up while it was lost.
            self.wakeups
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(None);
        }
        // Whatever was committed before this connection listened is read again by whoever
        // looks at this number.
        Ok(self.heard.fetch_add(1, Ordering::AcqRel) + 1)
    }

    /// The number of the latest wake-up this process heard (numbers of its own, in the order
    /// heard: commits of different executions have no one order on PostgreSQL).
    pub fn latest_wakeup(&self) -> Result<i64, StoreError> {
        Ok(self
            .wakeups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .latest)
    }

    /// The executions woken after number `seq` (as [`Database::latest_wakeup`] numbers them), and
    /// the latest number. Where a wake-up may have been missed (the listening connection was
    /// lost, or `seq` is older than the wake-ups kept), every execution this process waits on.
    pub fn wakeups_since(&self, seq: i64) -> Result<(Vec<String>, i64), StoreError> {
        let wakeups = self.wakeups.lock().unwrap_or_else(|e| e.into_inner());
        let oldest = wakeups.kept.front().map_or(wakeups.latest + 1, |(n, _)| *n);
        let mut ids: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut everyone = seq + 1 < oldest;
        for (_, woken) in wakeups.kept.iter().filter(|(n, _)| *n > seq) {
            match woken {
                Some(id) if seen.insert(id.as_str()) => ids.push(id.clone()),
                Some(_) => {}
                None => everyone = true,
            }
        }
        if everyone {
            ids = self.waiters.execution_ids();
        }
        Ok((ids, wakeups.latest))
    }

    /// The server's version and this database's schema version (`m3 doctor`).
    pub fn health(&self) -> Result<Health, OpenFailure> {
        let failed = |e: tokio_postgres::Error| {
            OpenFailure::Postgres(format!("{}: {}", self.shown, describe(&e)))
        };
        let conn = self.connect().map_err(failed)?;
        let rows = conn
            .query(
                "SELECT current_setting('server_version'), current_database()",
                vec![],
            )
            .map_err(failed)?;
        let (server_version, database) = rows
            .first()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .unwrap_or_default();
        let schema_version = super::migrations::version(&conn)?;
        Ok(Health {
            server_version,
            database,
            schema_version,
            supported_version: super::migrations::SCHEMA_VERSION,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_ups_heard_are_read_once_and_a_gap_wakes_every_waiter() {
        let db = Database::named("postgres://nobody@localhost/m3", Duration::from_secs(1)).unwrap();
        let notify = Arc::new(tokio::sync::Notify::new());
        let (_a, _b) = (
            db.waiters().register("exec-a", &notify),
            db.waiters().register("exec-b", &notify),
        );
        assert_eq!(db.latest_wakeup().unwrap(), 0);
        let push = |woken: Option<&str>| db.wakeups.lock().unwrap().push(woken.map(str::to_string));
        push(Some("exec-a"));
        push(Some("exec-z"));
        let (ids, latest) = db.wakeups_since(0).unwrap();
        assert_eq!((ids, latest), (vec!["exec-a".into(), "exec-z".into()], 2));
        assert!(db.wakeups_since(2).unwrap().0.is_empty(), "nothing new");
        // The listener was lost and opened again: everyone this process waits on looks.
        push(None);
        let (mut ids, latest) = db.wakeups_since(2).unwrap();
        ids.sort();
        assert_eq!((ids, latest), (vec!["exec-a".into(), "exec-b".into()], 3));
        // A watcher further behind than what is kept wakes everyone too.
        for _ in 0..=HEARD_KEPT {
            push(Some("exec-z"));
        }
        let (mut ids, _) = db.wakeups_since(3).unwrap();
        ids.sort();
        assert_eq!(ids, vec!["exec-a".to_string(), "exec-b".to_string()]);
    }

    #[test]
    fn a_shown_url_carries_no_password() {
        assert_eq!(
            shown("postgres://alice:s3cret@db.example:5432/m3"),
            "postgres://alice@db.example:5432/m3"
        );
        assert_eq!(
            shown("postgresql://db.example/m3?sslmode=disable&password=s3cret"),
            "postgresql://db.example/m3?(parameters left out)"
        );
        assert_eq!(
            shown("postgres://bob@%2Ftmp%2Fpg/m3"),
            "postgres://bob@%2Ftmp%2Fpg/m3"
        );
        assert!(!shown("postgres://a:b@c@d/e").contains("b@c@d"));
    }
}

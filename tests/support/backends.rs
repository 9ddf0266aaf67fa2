//! One set of test bodies on both backends: [`Db`] is a fresh database of either kind, and
//! [`on_both_backends!`] turns each body into a test per backend (`sqlite::name` and
//! `postgres::name`).

use crate::TempDb;
use crate::postgres_server::{PostgresDatabase, PostgresServer};
use m3::{DatabaseStore, ManualClock, PostgresManagedInputStore, StoreOptions, TimeSource};
use std::sync::Arc;

/// A fresh database for one test: a SQLite file in a temporary directory, or a database of its
/// own on this process's throwaway PostgreSQL server.
pub enum Db {
    /// A SQLite file.
    Sqlite(TempDb),
    /// A PostgreSQL database.
    Postgres(PostgresDatabase),
}

impl Db {
    /// A fresh SQLite file.
    pub fn sqlite() -> Self {
        Self::Sqlite(TempDb::new())
    }

    /// A fresh PostgreSQL database (the server is started on first use).
    pub fn postgres() -> Self {
        Self::Postgres(PostgresServer::shared().fresh_database())
    }

    /// A fresh database of the same backend.
    pub fn another(&self) -> Self {
        match self {
            Self::Sqlite(_) => Self::sqlite(),
            Self::Postgres(_) => Self::postgres(),
        }
    }

    /// How the database is named: the SQLite file's path or the PostgreSQL URL.
    pub fn name(&self) -> String {
        match self {
            Self::Sqlite(db) => db.path.display().to_string(),
            Self::Postgres(db) => db.url.clone(),
        }
    }

    /// Whether this is the PostgreSQL backend.
    pub fn is_postgres(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }

    /// A store on this database with `options`, panicking with the error if it cannot open.
    /// The tests' clocks are read as they are on both backends (a manual clock stands where it
    /// is set) unless `options.time` asks for the server's time.
    pub fn open(&self, mut options: StoreOptions) -> DatabaseStore {
        if options.time == TimeSource::Default {
            options.time = TimeSource::Clock;
        }
        match self {
            Self::Sqlite(db) => crate::open(&db.path, options).into_inner(),
            Self::Postgres(db) => PostgresManagedInputStore::open(&db.url, options)
                .unwrap_or_else(|e| panic!("open {}: {e}", db.name))
                .into_inner(),
        }
    }

    /// A store on this database with the system clock.
    pub fn store(&self) -> DatabaseStore {
        self.open(StoreOptions::default())
    }

    /// A store on this database with `clock`.
    pub fn store_with_clock(&self, clock: Arc<ManualClock>) -> DatabaseStore {
        self.open(StoreOptions {
            clock,
            ..StoreOptions::default()
        })
    }
}

/// Each `fn name(db) { ... }` becomes a function taking `db: &Db`, and two tests that run it:
/// `sqlite::name` on a fresh SQLite file and `postgres::name` on a fresh PostgreSQL database.
#[macro_export]
macro_rules! on_both_backends {
    ($( $(#[$meta:meta])* fn $name:ident($db:ident) $body:block )*) => {
        $( $(#[$meta])* fn $name($db: &$crate::backends::Db) $body )*

        /// The bodies above on SQLite.
        mod sqlite {
            $( #[test] fn $name() { super::$name(&$crate::backends::Db::sqlite()) } )*
        }

        /// The bodies above on PostgreSQL.
        mod postgres {
            $( #[test] fn $name() { super::$name(&$crate::backends::Db::postgres()) } )*
        }
    };
}

/// A store on the database `name` names (a SQLite file's path or a PostgreSQL URL), for a thread
/// or process of a test that has only the name; panics with the error if it cannot open.
pub fn open_named(name: &str, options: StoreOptions) -> DatabaseStore {
    DatabaseStore::open(name, options).unwrap_or_else(|e| panic!("open a store: {e}"))
}

/// `ok` when the database of `db` is intact, else every problem found, one per line: the
/// database's own check (SQLite's `integrity_check` and `foreign_key_check`, PostgreSQL's amcheck
/// on every btree index) and the store's invariants on both (`integrity.rs`).
pub fn integrity(db: &Db) -> String {
    crate::integrity::check(db)
}

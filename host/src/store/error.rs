//! The store's own errors: what a transaction or an opening failed with, described without the
//! values it carried, and without any database client's types (`api/error.rs` wraps them for
//! callers, `component/convert.rs` for the component).

/// A transaction's failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The database stayed locked for longer than the busy timeout (or a race the caller may
    /// retry was lost: a serialization failure, a deadlock).
    #[error("{0}")]
    Busy(String),
    /// Any other failure (I/O, a full disk, a damaged database, a lost connection).
    #[error("{0}")]
    Failure(String),
}

/// Why a database could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenFailure {
    /// The path is not acceptable as a database file.
    #[error("{0}")]
    InvalidPath(String),
    /// SQLite could not open or prepare the file.
    #[error("{message}")]
    Sqlite {
        /// SQLite's own words.
        message: String,
        /// Whether the file stayed locked past the busy timeout.
        busy: bool,
    },
    /// The URL does not name a PostgreSQL database.
    #[error("{0}")]
    InvalidUrl(String),
    /// PostgreSQL could not be reached or refused to prepare the database.
    #[error("{0}")]
    Postgres(String),
    /// Not an m3 database, or a schema version this build does not know; left as it is.
    #[error("{0}")]
    Incompatible(String),
}

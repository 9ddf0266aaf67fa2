//! PostgreSQL's errors as the store import's errors, described without the values they carry.

use crate::store::error::StoreError;
use tokio_postgres::error::SqlState;

/// Whether the error means the database stayed locked or the transaction lost a race it may
/// retry: a lock not granted within the busy timeout, a serialization failure, a deadlock.
pub fn is_busy(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|code| {
        [
            SqlState::LOCK_NOT_AVAILABLE,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
        ]
        .contains(code)
    })
}

/// The error's SQLSTATE and message, never its detail (a unique violation's detail quotes the
/// row's key, a check's the row): what a log may carry.
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("PostgreSQL {}: {}", db.code().code(), db.message()),
        None if e.is_closed() => "the connection to the PostgreSQL server was lost".into(),
        None => {
            // Connection-level errors name hosts and system errors, never parameters.
            format!("PostgreSQL: {e}")
        }
    }
}

/// The store import's error for a PostgreSQL error: `busy` as [`is_busy`] says.
pub fn store_error(e: tokio_postgres::Error) -> StoreError {
    if is_busy(&e) {
        StoreError::Busy(format!(
            "database locked past the busy timeout: {}",
            describe(&e)
        ))
    } else {
        StoreError::Failure(describe(&e))
    }
}

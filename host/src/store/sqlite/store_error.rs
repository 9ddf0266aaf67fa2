//! SQLite's errors as the store import's errors.

use crate::store::error::{OpenFailure, StoreError};

/// Whether a SQLite error means the database was locked.
pub fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// The store import's error for a SQLite error: `busy` when the database stayed locked.
pub(crate) fn store_error(e: rusqlite::Error) -> StoreError {
    // SQLite's messages name tables, columns and codes, never bound values.
    if is_busy(&e) {
        StoreError::Busy(format!("database locked past the busy timeout: {e}"))
    } else {
        StoreError::Failure(e.to_string())
    }
}

/// SQLite's error opening a database, in words, busy or not.
pub fn open_failure(e: rusqlite::Error) -> OpenFailure {
    OpenFailure::Sqlite {
        busy: is_busy(&e),
        message: e.to_string(),
    }
}

//! What `m3 doctor` reports about a database file, read without changing it.

use crate::store::error::OpenFailure;
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

/// What `m3 doctor` reports about a database file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// `PRAGMA integrity_check`: `ok` when the file is sound.
    pub integrity: String,
    /// `PRAGMA user_version`: the schema version the file is at.
    pub schema_version: i64,
    /// The schema version this build writes.
    pub supported_version: i64,
    /// Whether the file carries m3's `application_id`.
    pub is_m3_database: bool,
}

/// Reads a database file's health without changing it (opened read-only).
pub fn health(path: &Path) -> Result<Health, OpenFailure> {
    read(path).map_err(super::store_error::open_failure)
}

fn read(path: &Path) -> rusqlite::Result<Health> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    let integrity: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    let schema_version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let application_id: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    Ok(Health {
        integrity,
        schema_version,
        supported_version: super::migrations::SCHEMA_VERSION,
        is_m3_database: application_id == super::migrations::APPLICATION_ID,
    })
}

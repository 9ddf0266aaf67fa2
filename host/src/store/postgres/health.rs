//! What `m3 doctor` reports about a PostgreSQL database.

/// What `m3 doctor` reports about a PostgreSQL database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// The server's `server_version`.
    pub server_version: String,
    /// The database's name.
    pub database: String,
    /// The schema version the database is at.
    pub schema_version: i64,
    /// The schema version this build writes.
    pub supported_version: i64,
}

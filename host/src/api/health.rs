//! What `m3 doctor` reports, for any tool that wants the same: a database file's health read
//! without changing it, the schema version this build writes, and the engine component (its
//! digest, and where its compiled code came from).

use crate::api::error::EngineError;
use std::path::{Path, PathBuf};

pub use crate::component::cache::CacheOutcome;
pub use crate::store::sqlite::health::Health as DatabaseHealth;
/// The PostgreSQL schema version this build writes (`m3_schema.version`).
pub const SCHEMA_VERSION_POSTGRES: i64 = crate::store::postgres::migrations::SCHEMA_VERSION;
/// The SQLite schema version this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = crate::store::sqlite::migrations::SCHEMA_VERSION;

/// The engine component's bytes (WIT world `engine`), as embedded in this build.
pub fn engine_component() -> &'static [u8] {
    crate::component::engine::GUEST_WASM
}

/// The SHA-256 of [`engine_component`], in hex.
pub const ENGINE_COMPONENT_SHA256: &str = crate::component::engine::GUEST_WASM_SHA256;

/// Reads the health of the database file at `path` (opened read-only).
pub fn database_health(path: &Path) -> Result<DatabaseHealth, crate::OpenError> {
    crate::store::sqlite::health::health(path).map_err(crate::OpenError::from_store)
}

/// Where compiled components are cached (`$M3_CACHE_DIR` or the user's cache directory).
pub fn component_cache_dir() -> Option<PathBuf> {
    crate::component::cache::default_cache_dir()
}

/// Whether the library says on stderr that it compiles the component (the first run on a
/// machine, with a warning naming the profile overrides when a debug build's unoptimised
/// Cranelift makes it slow) and that the compiled-code cache cannot be used. On by default;
/// an embedder with its own progress display (the `m3` command's spinner) turns it off. The
/// same notices are always `log` records (target `m3`).
pub fn set_engine_notices(on: bool) {
    crate::component::notice::set_on_stderr(on);
}

/// Loads the engine component (once per process) and says where its compiled code came from.
pub fn load_engine() -> Result<CacheOutcome, EngineError> {
    Ok(crate::component::engine::ComponentRuntime::shared()?
        .cache
        .clone())
}

/// Where the engine's compiled code came from, if this process has loaded it.
pub fn engine_if_loaded() -> Option<CacheOutcome> {
    crate::component::engine::ComponentRuntime::shared_if_loaded().map(|r| r.cache.clone())
}

/// What `m3 doctor` reports about a PostgreSQL database.
pub use crate::store::postgres::health::Health as PostgresHealth;

/// Reads a PostgreSQL database's health without changing it: the server's version, the
/// database's name and its schema version (0 before m3 first used it); a database of another
/// application is an error.
pub fn postgres_health(
    url: &str,
    timeout: std::time::Duration,
) -> Result<PostgresHealth, crate::OpenError> {
    crate::store::postgres::database::Database::named(url, timeout)
        .and_then(|db| db.health())
        .map_err(crate::OpenError::from_store)
}

/// A PostgreSQL URL as it may be shown: without its password.
pub fn postgres_url_shown(url: &str) -> String {
    crate::store::postgres::database::shown(url)
}

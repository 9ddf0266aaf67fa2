//! Transaction control (`BEGIN`, `COMMIT`, `ROLLBACK`, savepoints) run from the connection's
//! cache of prepared statements: parsed once per connection, not at every transaction.

use rusqlite::Connection;

/// Runs `sql`, a statement that returns no row and takes no argument, from `conn`'s cache of
/// prepared statements.
pub(crate) fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

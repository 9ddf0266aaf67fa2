//! Ids by prefix: the rounds or executions whose id starts with what a person typed, read with
//! one indexed range query (`id >= prefix AND id < successor(prefix)`) on the primary key, so
//! no input (`%`, `_`, anything) widens it and nothing is listed in full. Both backends compare
//! ids byte by byte, so the bound is the same on each.

use super::Backend;
use crate::store::error::StoreError;
use crate::store::postgres::connection::params;
use rusqlite::OptionalExtension;

/// The ids that start with a prefix (see [`crate::SqliteManagedInputStore::round_ids_with_prefix`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdMatches {
    /// The prefix is itself a stored id (then `ids` is exactly that id and `total` is 1).
    pub exact: bool,
    /// The first matching ids in id order, at most the limit asked for.
    pub ids: Vec<String>,
    /// How many ids match in all.
    pub total: u64,
}

/// Which table's ids.
#[derive(Debug, Clone, Copy)]
pub(crate) enum IdTable {
    /// `managed_input_rounds.round_id`.
    Rounds,
    /// `executions.execution_id`.
    Executions,
}

impl IdTable {
    fn table_and_column(self) -> (&'static str, &'static str) {
        match self {
            Self::Rounds => ("managed_input_rounds", "round_id"),
            Self::Executions => ("executions", "execution_id"),
        }
    }
}

/// The smallest string greater than every string that starts with `prefix`, if there is one:
/// the prefix with its last character incremented (UTF-8 byte order is code point order).
fn successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let mut next = last as u32 + 1;
        if (0xD800..0xE000).contains(&next) {
            next = 0xE000;
        }
        if let Some(c) = char::from_u32(next) {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// The ids of `table` that start with `prefix` (the first `limit` of them); a full id is found
/// by a point lookup first. An empty prefix matches nothing.
pub(crate) fn ids_with_prefix(
    backend: &Backend,
    table: IdTable,
    prefix: &str,
    limit: u32,
) -> Result<IdMatches, StoreError> {
    if prefix.is_empty() {
        return Ok(IdMatches::default());
    }
    let (table, column) = table.table_and_column();
    match backend {
        Backend::Sqlite(db) => sqlite_ids(db, table, column, prefix, limit)
            .map_err(|e| StoreError::Failure(e.to_string())),
        Backend::Postgres(db) => postgres_ids(db, table, column, prefix, limit),
    }
}

fn postgres_ids(
    db: &crate::store::postgres::database::Database,
    table: &str,
    column: &str,
    prefix: &str,
    limit: u32,
) -> Result<IdMatches, StoreError> {
    use crate::store::postgres::store_error::store_error;
    let conn = db.connect().map_err(store_error)?;
    let exact = conn
        .query(
            &format!("SELECT {column} FROM {table} WHERE {column} = $1"),
            params![prefix.to_string()],
        )
        .map_err(store_error)?;
    if let Some(row) = exact.first() {
        return Ok(IdMatches {
            exact: true,
            ids: vec![row.get(0)],
            total: 1,
        });
    }
    let upper = successor(prefix);
    let bound = if upper.is_some() {
        format!("{column} >= $1 AND {column} < $2")
    } else {
        format!("{column} >= $1 AND $2::TEXT IS NULL")
    };
    let ids = conn
        .query(
            &format!("SELECT {column} FROM {table} WHERE {bound} ORDER BY {column} LIMIT $3"),
            params![prefix.to_string(), upper.clone(), i64::from(limit)],
        )
        .map_err(store_error)?
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let total = conn
        .query(
            &format!("SELECT count(*) FROM {table} WHERE {bound}"),
            params![prefix.to_string(), upper],
        )
        .map_err(store_error)?
        .first()
        .map_or(0, |r| r.get::<_, i64>(0));
    Ok(IdMatches {
        exact: false,
        ids,
        total: total.max(0) as u64,
    })
}

fn sqlite_ids(
    db: &crate::store::sqlite::database::Database,
    table: &str,
    column: &str,
    prefix: &str,
    limit: u32,
) -> rusqlite::Result<IdMatches> {
    let conn = db.connect()?;
    let exact: Option<String> = conn
        .query_row(
            &format!("SELECT {column} FROM {table} WHERE {column} = ?1"),
            [prefix],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(id) = exact {
        return Ok(IdMatches {
            exact: true,
            ids: vec![id],
            total: 1,
        });
    }
    let upper = successor(prefix);
    let bound = if upper.is_some() {
        format!("{column} >= ?1 AND {column} < ?2")
    } else {
        format!("{column} >= ?1 AND ?2 IS NULL")
    };
    let mut statement = conn.prepare(&format!(
        "SELECT {column} FROM {table} WHERE {bound} ORDER BY {column} LIMIT ?3"
    ))?;
    let ids = statement
        .query_map(rusqlite::params![prefix, upper, limit], |r| {
            r.get::<_, String>(0)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let total: i64 = conn.query_row(
        &format!("SELECT count(*) FROM {table} WHERE {bound}"),
        rusqlite::params![prefix, upper],
        |r| r.get(0),
    )?;
    Ok(IdMatches {
        exact: false,
        ids,
        total: total.max(0) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::successor;

    #[test]
    fn the_successor_bounds_exactly_the_strings_with_the_prefix() {
        assert_eq!(successor("exec-4").as_deref(), Some("exec-5"));
        assert_eq!(successor("a%").as_deref(), Some("a&"));
        assert_eq!(successor("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
        assert_eq!(successor("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(successor("\u{10FFFF}"), None);
    }
}

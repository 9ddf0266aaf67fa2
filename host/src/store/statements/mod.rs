//! Every statement on the store's rows, written once for both databases, and the row logic
//! around them (decoding, the two-row insert and compare-and-set, both-or-neither lease
//! expiries, listings). The SQL is the part SQLite and PostgreSQL share: `?N` placeholders
//! (PostgreSQL's adapter rewrites them to `$N` once per prepared statement), `ON CONFLICT`,
//! `RETURNING`, `SAVEPOINT`, no casts. What differs lives in each database's adapter
//! ([`Sql`], in `sqlite/adapter.rs` and `postgres/adapter.rs`): how a statement reaches the
//! connection, and on PostgreSQL the execution lock a write takes first ([`On`]).
//!
//! # Files
//!
//! `mod.rs` (the adapter's trait [`Sql`], parameters [`Value`], what a statement's rows belong
//! to [`On`], a row's cells [`Cells`], listings built by filter, versions as stored),
//! `rounds.rs` (a round's wide row and version row), `executions.rs` (an execution's rows and
//! its items), `ids.rs` (ids read without decoding rows, in full or by prefix), `notifications.rs` (the
//! notification ledger of `m3 serve --notify`: targets, queued events, claims, settling).

pub(crate) mod executions;
pub(crate) mod ids;
pub(crate) mod notifications;
pub(crate) mod rounds;

use crate::store::error::StoreError;
use crate::store::rows::{Cursor, wide_row_written};

/// One statement parameter, typed even when null (PostgreSQL prepares by type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    /// A `BIGINT` / `INTEGER`.
    Int(Option<i64>),
    /// A `TEXT`.
    Text(Option<String>),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Self::Int(Some(v))
    }
}

impl From<Option<i64>> for Value {
    fn from(v: Option<i64>) -> Self {
        Self::Int(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Self::Text(Some(v.to_string()))
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Self::Text(Some(v))
    }
}

impl From<Option<String>> for Value {
    fn from(v: Option<String>) -> Self {
        Self::Text(v)
    }
}

/// Whose rows a statement reads or writes: on PostgreSQL a write transaction takes that
/// execution's lock before the statement, in the same flight (decision 0077); SQLite's one
/// writer needs none.
#[derive(Debug, Clone, Copy)]
pub(crate) enum On<'a> {
    /// One execution's rows (its own, its rounds', its items).
    Execution(&'a str),
    /// One round's rows, whose execution is found by the round's version row.
    Round(&'a str),
    /// Rows of any execution (a listing of them all).
    Everything,
    /// No rows of an execution (a savepoint's end, ids outside a transaction).
    Nothing,
}

/// The cells of one result row, by position.
pub(crate) trait Cells {
    /// An integer cell.
    fn int(&self, i: usize) -> Result<Option<i64>, StoreError>;
    /// A text cell.
    fn text(&self, i: usize) -> Result<Option<String>, StoreError>;
}

/// A database's adapter: runs the statements written here on one connection or transaction.
pub(crate) trait Sql {
    /// Refuses a write where this cannot write (a read transaction).
    fn writable(&self) -> Result<(), StoreError>;
    /// Runs `sql`; how many rows it changed.
    fn execute(&self, on: On<'_>, sql: &str, args: Vec<Value>) -> Result<u64, StoreError>;
    /// Runs `sql`; each row it returns through `each`.
    fn query<T>(
        &self,
        on: On<'_>,
        sql: &str,
        args: Vec<Value>,
        each: impl FnMut(&dyn Cells) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError>;
    /// Runs statements without parameters (`SAVEPOINT x`).
    fn batch(&self, on: On<'_>, sql: &str) -> Result<(), StoreError>;
}

/// A row's insert: its wide row first (`ON CONFLICT DO NOTHING`: `false` when the id exists),
/// then its version row.
pub(crate) fn insert_pair(
    s: &impl Sql,
    on: On<'_>,
    wide: (&str, Vec<Value>),
    version: (&str, Vec<Value>),
) -> Result<bool, StoreError> {
    if s.execute(on, wide.0, wide.1)? != 1 {
        return Ok(false);
    }
    s.execute(on, version.0, version.1)?;
    Ok(true)
}

/// A row's compare-and-set: its version row's conditional `UPDATE` decides (checked by
/// affected-row count), then its wide row must be written too (`what` names the row).
pub(crate) fn compare_and_set_pair(
    s: &impl Sql,
    on: On<'_>,
    version: (&str, Vec<Value>),
    wide: (&str, Vec<Value>),
    what: &str,
) -> Result<bool, StoreError> {
    if s.execute(on, version.0, version.1)? != 1 {
        return Ok(false);
    }
    wide_row_written(s.execute(on, wide.0, wide.1)? as usize, what)
}

/// A text cell that is never null.
pub(crate) fn text(c: &dyn Cells, i: usize) -> Result<String, StoreError> {
    c.text(i)?
        .ok_or_else(|| StoreError::Failure(format!("column {i} is null where it never is")))
}

/// An integer cell that is never null.
pub(crate) fn int(c: &dyn Cells, i: usize) -> Result<i64, StoreError> {
    c.int(i)?
        .ok_or_else(|| StoreError::Failure(format!("column {i} is null where it never is")))
}

/// A cell of a version row, left-joined to its wide row: null when the version row is missing
/// (a damaged database), which is an error, never a row missing.
pub(crate) fn versioned(c: &dyn Cells, i: usize, what: &str) -> Result<i64, StoreError> {
    c.int(i)?
        .ok_or_else(|| StoreError::Failure(format!("the {what}'s version row is missing")))
}

/// A stored version as the component's: one below zero is a damaged database.
pub(crate) fn version_read(stored: i64) -> Result<u64, StoreError> {
    u64::try_from(stored).map_err(|_| StoreError::Failure("a stored version is negative".into()))
}

/// A version to store (`BIGINT` on both databases): one past `i64::MAX` is refused, not
/// wrapped.
pub(crate) fn version_stored(version: u64) -> Result<i64, StoreError> {
    i64::try_from(version).map_err(|_| StoreError::Failure("a version is out of range".into()))
}

/// A version a write expects: one past `i64::MAX` is never stored, so it matches no row.
pub(crate) fn version_expected(version: u64) -> i64 {
    i64::try_from(version).unwrap_or(-1)
}

/// A listing's statement, built from the conditions given: one prepared statement per shape.
pub(crate) struct Listing {
    sql: String,
    args: Vec<Value>,
}

impl Listing {
    /// Rows of `select`, every row until narrowed.
    pub(crate) fn of(select: &str) -> Self {
        Self {
            sql: format!("{select} WHERE true"),
            args: Vec::new(),
        }
    }

    /// The next placeholder, bound to `value`.
    fn bind(&mut self, value: Value) -> String {
        self.args.push(value);
        format!("?{}", self.args.len())
    }

    /// Only rows whose `column` is `value`, when given.
    pub(crate) fn equal(mut self, column: &str, value: Option<&str>) -> Self {
        if let Some(value) = value {
            let at = self.bind(value.into());
            self.sql.push_str(&format!(" AND {column} = {at}"));
        }
        self
    }

    /// Only rows after `after`, by `created` then `id`, when given.
    pub(crate) fn after(mut self, created: &str, id: &str, after: Option<&Cursor>) -> Self {
        if let Some(after) = after {
            let at = self.bind(after.created_at_ns.into());
            let key = self.bind(after.id.as_str().into());
            self.sql.push_str(&format!(
                " AND ({created} > {at} OR ({created} = {at} AND {id} > {key}))"
            ));
        }
        self
    }

    /// Ordered by `order`, at most `limit` rows when given; the statement and its arguments.
    pub(crate) fn ordered(mut self, order: &str, limit: Option<u32>) -> (String, Vec<Value>) {
        self.sql.push_str(&format!(" ORDER BY {order}"));
        if let Some(limit) = limit {
            let at = self.bind(i64::from(limit).into());
            self.sql.push_str(&format!(" LIMIT {at}"));
        }
        (self.sql, self.args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_binds_only_the_conditions_given_in_order() {
        let (sql, args) = Listing::of("SELECT x FROM t")
            .equal("a", None)
            .equal("b", Some("B"))
            .after(
                "c",
                "d",
                Some(&Cursor {
                    created_at_ns: 5,
                    id: "D".into(),
                }),
            )
            .ordered("c, d", Some(7));
        assert_eq!(
            sql,
            "SELECT x FROM t WHERE true AND b = ?1 AND (c > ?2 OR (c = ?2 AND d > ?3)) \
             ORDER BY c, d LIMIT ?4"
        );
        assert_eq!(
            args,
            vec![
                Value::from("B"),
                Value::from(5_i64),
                Value::from("D"),
                Value::from(7_i64)
            ]
        );
        let (sql, args) = Listing::of("SELECT x FROM t").ordered("c", None);
        assert_eq!(sql, "SELECT x FROM t WHERE true ORDER BY c");
        assert!(args.is_empty());
    }

    #[test]
    fn versions_past_the_stored_range_are_refused_or_match_nothing() {
        assert_eq!(version_stored(7).unwrap(), 7);
        assert!(version_stored(u64::MAX).is_err());
        assert_eq!(version_expected(u64::MAX), -1);
        assert!(version_read(-1).is_err());
        assert_eq!(version_read(i64::MAX).unwrap(), i64::MAX as u64);
    }
}

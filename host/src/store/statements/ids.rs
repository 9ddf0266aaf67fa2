//! Ids read without decoding rows: a listing's round ids, every execution id, and the ids that
//! start with what a person typed (one range query on the primary key,
//! `id >= prefix AND id < successor(prefix)`, so no input widens it; a full id is a point
//! lookup first).

use super::{Listing, On, Sql, int, text};
use crate::store::error::StoreError;
use crate::store::id_prefix::{IdMatches, IdTable, successor};

const EXECUTION_IDS: &str =
    "SELECT execution_id FROM executions ORDER BY created_at_ns, execution_id";

/// The ids of the rounds of `execution_id` and `status` (each when given), oldest first, at
/// most `limit`.
pub(crate) fn round_ids(
    s: &impl Sql,
    execution_id: Option<&str>,
    status: Option<&str>,
    limit: Option<u32>,
) -> Result<Vec<String>, StoreError> {
    let (sql, args) = Listing::of("SELECT r.round_id FROM managed_input_rounds r")
        .equal("r.execution_id", execution_id)
        .equal("r.status", status)
        .ordered("r.created_at_ns, r.round_id", limit);
    s.query(On::Nothing, &sql, args, |c| text(c, 0))
}

/// The ids of every execution, oldest first.
pub(crate) fn execution_ids(s: &impl Sql) -> Result<Vec<String>, StoreError> {
    s.query(On::Nothing, EXECUTION_IDS, Vec::new(), |c| text(c, 0))
}

/// The ids of `table` that start with `prefix` (the first `limit` of them, and how many in
/// all); a full id is found by a point lookup first. An empty prefix matches nothing.
pub(crate) fn ids_with_prefix(
    s: &impl Sql,
    table: IdTable,
    prefix: &str,
    limit: u32,
) -> Result<IdMatches, StoreError> {
    if prefix.is_empty() {
        return Ok(IdMatches::default());
    }
    let (table, column) = match table {
        IdTable::Rounds => ("managed_input_rounds", "round_id"),
        IdTable::Executions => ("executions", "execution_id"),
    };
    let exact = s.query(
        On::Nothing,
        &format!("SELECT {column} FROM {table} WHERE {column} = ?1"),
        vec![prefix.into()],
        |c| text(c, 0),
    )?;
    if let Some(id) = exact.into_iter().next() {
        return Ok(IdMatches {
            exact: true,
            ids: vec![id],
            total: 1,
        });
    }
    let mut bounds = vec![prefix.into()];
    let bound = match successor(prefix) {
        Some(upper) => {
            bounds.push(upper.into());
            format!("{column} >= ?1 AND {column} < ?2")
        }
        None => format!("{column} >= ?1"),
    };
    let mut listed = bounds.clone();
    listed.push(i64::from(limit).into());
    let ids = s.query(
        On::Nothing,
        &format!(
            "SELECT {column} FROM {table} WHERE {bound} ORDER BY {column} LIMIT ?{}",
            listed.len()
        ),
        listed,
        |c| text(c, 0),
    )?;
    let total = s.query(
        On::Nothing,
        &format!("SELECT count(*) FROM {table} WHERE {bound}"),
        bounds,
        |c| int(c, 0),
    )?;
    Ok(IdMatches {
        exact: false,
        ids,
        total: total.first().copied().unwrap_or(0).max(0) as u64,
    })
}

//! Execution rows inside a [`Transaction`]: the `executions` table behind the component's
//! `store` import. Like rounds, the host stores the indexed columns and the component's
//! document (the wide row) and, in `execution_versions`, the columns every write changes; it
//! never reads the document.

use super::store_error::store_error;
use super::transaction::Transaction;
use crate::store::error::StoreError;
use crate::store::rows::{Cursor, ExecutionRow, wide_row_written};
use rusqlite::{OptionalExtension, params};

/// An execution as the component sees it: the wide row (`e`) and its version row (`v`,
/// migration 6), left-joined so that a missing version row is an error, never a lost execution.
const SELECT: &str = "SELECT e.execution_id, e.status, v.version, e.owner_id, \
                      v.lease_expires_at_ns, e.created_at_ns, v.updated_at_ns, e.document \
                      FROM executions e \
                      LEFT JOIN execution_versions v ON v.execution_id = e.execution_id";

fn row_from_sql(r: &rusqlite::Row<'_>) -> rusqlite::Result<ExecutionRow> {
    Ok(ExecutionRow {
        execution_id: r.get(0)?,
        status: r.get(1)?,
        version: r.get::<_, i64>(2)? as u64,
        owner_id: r.get(3)?,
        lease_expires_at_ns: r.get(4)?,
        created_at_ns: r.get(5)?,
        updated_at_ns: r.get(6)?,
        document: r.get(7)?,
    })
}

impl Transaction {
    /// The execution `execution_id`.
    pub fn get_execution(&self, execution_id: &str) -> Result<Option<ExecutionRow>, StoreError> {
        self.connection()?
            .prepare_cached(&format!("{SELECT} WHERE e.execution_id = ?1"))
            .and_then(|mut s| s.query_row([execution_id], row_from_sql).optional())
            .map_err(store_error)
    }

    /// Executions with `status` (all when `None`), oldest first, after `after`.
    pub fn list_executions(
        &self,
        status: Option<&str>,
        limit: Option<u32>,
        after: Option<&Cursor>,
    ) -> Result<Vec<ExecutionRow>, StoreError> {
        let conn = self.connection()?;
        let mut sql = format!("{SELECT} WHERE 1 = 1");
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        if let Some(status) = status {
            args.push(status.to_string().into());
            sql.push_str(&format!(" AND e.status = ?{}", args.len()));
        }
        if let Some(after) = after {
            args.push(after.created_at_ns.into());
            let at = args.len();
            args.push(after.id.clone().into());
            sql.push_str(&format!(
                " AND (e.created_at_ns > ?{at} OR (e.created_at_ns = ?{at} AND e.execution_id > ?{}))",
                args.len()
            ));
        }
        sql.push_str(" ORDER BY e.created_at_ns, e.execution_id");
        args.push(limit.map_or(-1, i64::from).into());
        sql.push_str(&format!(" LIMIT ?{}", args.len()));
        let mut statement = conn.prepare_cached(&sql).map_err(store_error)?;
        let rows = statement
            .query_map(rusqlite::params_from_iter(args), row_from_sql)
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(store_error)?;
        Ok(rows)
    }

    /// Inserts `row` (its wide row and its version row); `false` if the execution id exists.
    pub fn insert_execution(&self, row: &ExecutionRow) -> Result<bool, StoreError> {
        let connection = self.connection()?;
        let changed = connection
            .prepare_cached(
                "INSERT INTO executions (execution_id, status, owner_id, created_at_ns, document) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (execution_id) DO NOTHING",
            )
            .and_then(|mut s| {
                s.execute(params![
                    row.execution_id,
                    row.status,
                    row.owner_id,
                    row.created_at_ns,
                    row.document,
                ])
            })
            .map_err(store_error)?;
        if changed != 1 {
            return Ok(false);
        }
        connection
            .prepare_cached(
                "INSERT INTO execution_versions (execution_id, version, lease_expires_at_ns, \
                 updated_at_ns) VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    row.execution_id,
                    row.version as i64,
                    row.lease_expires_at_ns,
                    row.updated_at_ns,
                ])
            })
            .map_err(store_error)?;
        Ok(true)
    }

    /// Replaces the mutable columns if the stored version is still `expected_version`: the
    /// version row first (checked by affected-row count), then the wide row.
    pub fn compare_and_set_execution(
        &self,
        row: &ExecutionRow,
        expected_version: u64,
    ) -> Result<bool, StoreError> {
        let connection = self.connection()?;
        let changed = connection
            .prepare_cached(
                "UPDATE execution_versions SET version = ?2, lease_expires_at_ns = ?3, \
                 updated_at_ns = ?4 WHERE execution_id = ?1 AND version = ?5",
            )
            .and_then(|mut s| {
                s.execute(params![
                    row.execution_id,
                    row.version as i64,
                    row.lease_expires_at_ns,
                    row.updated_at_ns,
                    expected_version as i64,
                ])
            })
            .map_err(store_error)?;
        if changed != 1 {
            return Ok(false);
        }
        let changed = connection
            .prepare_cached(
                "UPDATE executions SET status = ?2, owner_id = ?3, document = ?4 \
                 WHERE execution_id = ?1",
            )
            .and_then(|mut s| {
                s.execute(params![
                    row.execution_id,
                    row.status,
                    row.owner_id,
                    row.document,
                ])
            })
            .map_err(store_error)?;
        wide_row_written(changed, "execution")
    }

    /// Appends `document` as the execution's next item (one row; nothing else is rewritten);
    /// returns its number among the execution's items.
    pub fn append_execution_item(
        &self,
        execution_id: &str,
        kind: &str,
        document: &str,
    ) -> Result<u64, StoreError> {
        self.connection()?
            .prepare_cached(
                "INSERT INTO execution_items (execution_id, seq, kind, document) \
                 SELECT ?1, coalesce(max(seq), 0) + 1, ?2, ?3 FROM execution_items \
                 WHERE execution_id = ?1 RETURNING seq",
            )
            .and_then(|mut s| s.query_row(params![execution_id, kind, document], |r| r.get(0)))
            .map(|seq: i64| seq as u64)
            .map_err(store_error)
    }

    /// The execution's items of `kind`, oldest first.
    pub fn list_execution_items(
        &self,
        execution_id: &str,
        kind: &str,
    ) -> Result<Vec<String>, StoreError> {
        let conn = self.connection()?;
        let mut statement = conn
            .prepare_cached(
                "SELECT document FROM execution_items WHERE execution_id = ?1 AND kind = ?2 \
                 ORDER BY seq",
            )
            .map_err(store_error)?;
        statement
            .query_map(params![execution_id, kind], |r| r.get(0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<String>>>())
            .map_err(store_error)
    }
}

//! An execution's rows: its wide row (`executions`: the indexed columns and the component's
//! document), its version row (`execution_versions`), and its items (`execution_items`:
//! documents appended with the next number, listed by kind).

use super::{Cells, Listing, On, Sql, int, text, version_expected, version_read};
use super::{compare_and_set_pair, insert_pair, version_stored, versioned};
use crate::store::error::StoreError;
use crate::store::rows::{Cursor, ExecutionRow, LeaseExpiry};

/// An execution as the component sees it: the wide row (`e`) and its version row (`v`),
/// left-joined so that a missing version row is an error, never an execution missing.
macro_rules! select {
    () => {
        "SELECT e.execution_id, e.status, v.version, e.owner_id, v.lease_expires_at_ns, \
         e.created_at_ns, v.updated_at_ns, e.document FROM executions e \
         LEFT JOIN execution_versions v ON v.execution_id = e.execution_id"
    };
}

const GET: &str = concat!(select!(), " WHERE e.execution_id = ?1");

const INSERT: &str = "INSERT INTO executions (execution_id, status, owner_id, created_at_ns, \
                      document) VALUES (?1, ?2, ?3, ?4, ?5) \
                      ON CONFLICT (execution_id) DO NOTHING";

const INSERT_VERSION: &str = "INSERT INTO execution_versions (execution_id, version, \
                              lease_expires_at_ns, updated_at_ns) VALUES (?1, ?2, ?3, ?4)";

const SET_VERSION: &str = "UPDATE execution_versions SET version = ?2, lease_expires_at_ns = ?3, \
                           updated_at_ns = ?4 WHERE execution_id = ?1 AND version = ?5";

const SET_WIDE: &str = "UPDATE executions SET status = ?2, owner_id = ?3, document = ?4 \
                        WHERE execution_id = ?1";

const SET_LEASE_EXPIRY: &str = "UPDATE execution_versions SET lease_expires_at_ns = ?2, \
                                updated_at_ns = ?3, version = version + 1 \
                                WHERE execution_id = ?1 AND version = ?4";

const APPEND_ITEM: &str = "INSERT INTO execution_items (execution_id, seq, kind, document) \
                           SELECT ?1, coalesce(max(seq), 0) + 1, ?2, ?3 FROM execution_items \
                           WHERE execution_id = ?1 RETURNING seq";

const LIST_ITEMS: &str = "SELECT document FROM execution_items \
                          WHERE execution_id = ?1 AND kind = ?2 ORDER BY seq";

/// One result row of [`select!`].
fn decode(c: &dyn Cells) -> Result<ExecutionRow, StoreError> {
    Ok(ExecutionRow {
        execution_id: text(c, 0)?,
        status: text(c, 1)?,
        version: version_read(versioned(c, 2, "execution")?)?,
        owner_id: c.text(3)?,
        lease_expires_at_ns: c.int(4)?,
        created_at_ns: int(c, 5)?,
        updated_at_ns: versioned(c, 6, "execution")?,
        document: text(c, 7)?,
    })
}

/// The execution `execution_id`.
pub(crate) fn get(s: &impl Sql, execution_id: &str) -> Result<Option<ExecutionRow>, StoreError> {
    Ok(s.query(
        On::Execution(execution_id),
        GET,
        vec![execution_id.into()],
        decode,
    )?
    .pop())
}

/// Executions with `status` (all when `None`), oldest first, after `after`.
pub(crate) fn list(
    s: &impl Sql,
    status: Option<&str>,
    limit: Option<u32>,
    after: Option<&Cursor>,
) -> Result<Vec<ExecutionRow>, StoreError> {
    let (sql, args) = Listing::of(select!())
        .equal("e.status", status)
        .after("e.created_at_ns", "e.execution_id", after)
        .ordered("e.created_at_ns, e.execution_id", limit);
    s.query(On::Everything, &sql, args, decode)
}

/// Inserts `row` (its wide row, then its version row); `false` if the execution id exists.
pub(crate) fn insert(s: &impl Sql, row: ExecutionRow) -> Result<bool, StoreError> {
    s.writable()?;
    let version = version_stored(row.version)?;
    let on = On::Execution(&row.execution_id);
    insert_pair(
        s,
        on,
        (
            INSERT,
            vec![
                row.execution_id.as_str().into(),
                row.status.into(),
                row.owner_id.into(),
                row.created_at_ns.into(),
                row.document.into(),
            ],
        ),
        (
            INSERT_VERSION,
            vec![
                row.execution_id.as_str().into(),
                version.into(),
                row.lease_expires_at_ns.into(),
                row.updated_at_ns.into(),
            ],
        ),
    )
}

/// Replaces the mutable columns if the stored version is still `expected`: the version row
/// first (checked by affected-row count), then the wide row.
pub(crate) fn compare_and_set(
    s: &impl Sql,
    row: ExecutionRow,
    expected: u64,
) -> Result<bool, StoreError> {
    s.writable()?;
    let on = On::Execution(&row.execution_id);
    compare_and_set_pair(
        s,
        on,
        (
            SET_VERSION,
            vec![
                row.execution_id.as_str().into(),
                version_stored(row.version)?.into(),
                row.lease_expires_at_ns.into(),
                row.updated_at_ns.into(),
                version_expected(expected).into(),
            ],
        ),
        (
            SET_WIDE,
            vec![
                row.execution_id.as_str().into(),
                row.status.into(),
                row.owner_id.into(),
                row.document.into(),
            ],
        ),
        "execution",
    )
}

/// Moves the execution's lease expiry and version on, if its version is still the one
/// expected (the first half of [`super::rounds::set_lease_expiries`]).
pub(super) fn set_lease_expiry(
    s: &impl Sql,
    execution: &LeaseExpiry,
    updated_at: i64,
) -> Result<bool, StoreError> {
    let changed = s.execute(
        On::Execution(&execution.id),
        SET_LEASE_EXPIRY,
        vec![
            execution.id.as_str().into(),
            execution.expires_at_ns.into(),
            updated_at.into(),
            version_expected(execution.expected_version).into(),
        ],
    )?;
    Ok(changed == 1)
}

/// Appends `document` as the execution's next item (one row; nothing else is rewritten);
/// returns its number among the execution's items.
pub(crate) fn append_item(
    s: &impl Sql,
    execution_id: &str,
    kind: &str,
    document: String,
) -> Result<u64, StoreError> {
    s.writable()?;
    let numbers = s.query(
        On::Execution(execution_id),
        APPEND_ITEM,
        vec![execution_id.into(), kind.into(), document.into()],
        |c| int(c, 0),
    )?;
    let number = numbers
        .first()
        .ok_or_else(|| StoreError::Failure("an appended item has no number".into()))?;
    u64::try_from(*number).map_err(|_| StoreError::Failure("an item's number is negative".into()))
}

/// The execution's items of `kind`, oldest first.
pub(crate) fn list_items(
    s: &impl Sql,
    execution_id: &str,
    kind: &str,
) -> Result<Vec<String>, StoreError> {
    s.query(
        On::Execution(execution_id),
        LIST_ITEMS,
        vec![execution_id.into(), kind.into()],
        |c| text(c, 0),
    )
}

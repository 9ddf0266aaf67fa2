//! A round's rows: its wide row (`managed_input_rounds`: the indexed columns and the
//! component's document) and its version row (`managed_input_round_versions`: the columns every
//! write changes), written together and read left-joined.

use super::{Cells, Listing, On, Sql, int, text, version_expected, version_read};
use super::{compare_and_set_pair, insert_pair, version_stored, versioned};
use crate::store::error::StoreError;
use crate::store::rows::{LeaseExpiry, RoundFilter, RoundRow};

/// A round as the component sees it: the wide row (`r`) and its version row (`v`), left-joined
/// so that a wide row without its version row is an error, never a round missing.
macro_rules! select {
    () => {
        "SELECT r.round_id, r.execution_id, r.status, v.version, r.owner_id, \
         v.lease_expires_at_ns, r.deadline_ns, r.created_at_ns, v.updated_at_ns, r.document \
         FROM managed_input_rounds r \
         LEFT JOIN managed_input_round_versions v ON v.round_id = r.round_id"
    };
}

/// A round's two rows by its id.
pub(crate) const GET: &str = concat!(select!(), " WHERE r.round_id = ?1");

const INSERT: &str = "INSERT INTO managed_input_rounds (round_id, execution_id, status, \
                      owner_id, deadline_ns, created_at_ns, document) \
                      VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (round_id) DO NOTHING";

const INSERT_VERSION: &str = "INSERT INTO managed_input_round_versions (round_id, execution_id, \
                              version, lease_expires_at_ns, updated_at_ns) \
                              VALUES (?1, ?2, ?3, ?4, ?5)";

const SET_VERSION: &str = "UPDATE managed_input_round_versions SET version = ?2, \
                           lease_expires_at_ns = ?3, updated_at_ns = ?4 \
                           WHERE round_id = ?1 AND version = ?5 AND execution_id = ?6";

const SET_WIDE: &str = "UPDATE managed_input_rounds SET status = ?2, owner_id = ?3, \
                        document = ?4 WHERE round_id = ?1";

const SET_LEASE_EXPIRY: &str = "UPDATE managed_input_round_versions SET \
                                lease_expires_at_ns = ?3, updated_at_ns = ?4, \
                                version = version + 1 \
                                WHERE round_id = ?1 AND version = ?5 AND execution_id = ?2";

/// One result row of [`select!`].
fn decode(c: &dyn Cells) -> Result<RoundRow, StoreError> {
    Ok(RoundRow {
        round_id: text(c, 0)?,
        execution_id: text(c, 1)?,
        status: text(c, 2)?,
        version: version_read(versioned(c, 3, "round")?)?,
        owner_id: c.text(4)?,
        lease_expires_at_ns: c.int(5)?,
        deadline_ns: c.int(6)?,
        created_at_ns: int(c, 7)?,
        updated_at_ns: versioned(c, 8, "round")?,
        document: text(c, 9)?,
    })
}

/// The row of `round_id`. In a PostgreSQL write its execution's lock is taken first, so the row
/// read is the latest and stays so until the transaction ends.
pub(crate) fn get(s: &impl Sql, round_id: &str) -> Result<Option<RoundRow>, StoreError> {
    Ok(
        s.query(On::Round(round_id), GET, vec![round_id.into()], decode)?
            .pop(),
    )
}

/// Rows matching `filter`, oldest first.
pub(crate) fn list(s: &impl Sql, filter: &RoundFilter) -> Result<Vec<RoundRow>, StoreError> {
    let (sql, args) = Listing::of(select!())
        .equal("r.execution_id", filter.execution_id.as_deref())
        .equal("r.status", filter.status.as_deref())
        .after("r.created_at_ns", "r.round_id", filter.after.as_ref())
        .ordered("r.created_at_ns, r.round_id", filter.limit);
    let on = match &filter.execution_id {
        Some(execution_id) => On::Execution(execution_id),
        None => On::Everything,
    };
    s.query(on, &sql, args, decode)
}

/// Inserts `row` (its wide row, then its version row); `false` if the round id exists.
pub(crate) fn insert(s: &impl Sql, row: RoundRow) -> Result<bool, StoreError> {
    s.writable()?;
    let version = version_stored(row.version)?;
    let on = On::Execution(&row.execution_id);
    insert_pair(
        s,
        on,
        (
            INSERT,
            vec![
                row.round_id.as_str().into(),
                row.execution_id.as_str().into(),
                row.status.into(),
                row.owner_id.into(),
                row.deadline_ns.into(),
                row.created_at_ns.into(),
                row.document.into(),
            ],
        ),
        (
            INSERT_VERSION,
            vec![
                row.round_id.as_str().into(),
                row.execution_id.as_str().into(),
                version.into(),
                row.lease_expires_at_ns.into(),
                row.updated_at_ns.into(),
            ],
        ),
    )
}

/// Replaces the mutable columns of the row if its version is still `expected`: one conditional
/// `UPDATE` of the version row (checked by affected-row count), then the wide row's status,
/// owner and document. The id, execution, creation time and deadline never change; leaving them
/// out of the `SET` lists keeps the indexes on them unwritten.
pub(crate) fn compare_and_set(
    s: &impl Sql,
    row: RoundRow,
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
                row.round_id.as_str().into(),
                version_stored(row.version)?.into(),
                row.lease_expires_at_ns.into(),
                row.updated_at_ns.into(),
                version_expected(expected).into(),
                row.execution_id.as_str().into(),
            ],
        ),
        (
            SET_WIDE,
            vec![
                row.round_id.as_str().into(),
                row.status.into(),
                row.owner_id.into(),
                row.document.into(),
            ],
        ),
        "round",
    )
}

/// Sets the lease expiry and update time of an execution's version row and, when given, of one
/// of its rounds', moving each version on, only if each version is still the one expected: both
/// or neither (a savepoint undoes the first when the second does not match). Only the version
/// rows are written; the wide rows and their documents are not touched.
pub(crate) fn set_lease_expiries(
    s: &impl Sql,
    execution: &LeaseExpiry,
    round: Option<&LeaseExpiry>,
    updated_at: i64,
) -> Result<bool, StoreError> {
    s.writable()?;
    let on = On::Execution(&execution.id);
    s.batch(on, "SAVEPOINT lease_expiries")?;
    let written = (|| {
        let mut changed = super::executions::set_lease_expiry(s, execution, updated_at)?;
        if let Some(round) = round.filter(|_| changed) {
            changed = s.execute(
                on,
                SET_LEASE_EXPIRY,
                vec![
                    round.id.as_str().into(),
                    execution.id.as_str().into(),
                    round.expires_at_ns.into(),
                    updated_at.into(),
                    version_expected(round.expected_version).into(),
                ],
            )? == 1;
        }
        Ok::<bool, StoreError>(changed)
    })();
    let end = match written {
        Ok(true) => "RELEASE SAVEPOINT lease_expiries",
        _ => "ROLLBACK TO SAVEPOINT lease_expiries; RELEASE SAVEPOINT lease_expiries",
    };
    let ended = s.batch(On::Nothing, end);
    let written = written?;
    ended?;
    Ok(written)
}

//! The rows the store keeps, in the store's own plain types: ids and documents as text, times
//! as nanoseconds since the Unix epoch, statuses as the text stored (the store never reads
//! one). `component/convert.rs` maps them to and from the `store` import's WIT records.

/// Read-only or exclusive write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A snapshot read.
    Read,
    /// A write.
    Write,
}

/// One stored round: the columns the store indexes and the component's document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundRow {
    /// The round's id.
    pub round_id: String,
    /// Its execution's id (fixed at insert).
    pub execution_id: String,
    /// Its status, as stored.
    pub status: String,
    /// The compare-and-set version.
    pub version: u64,
    /// Its owner, if owned.
    pub owner_id: Option<String>,
    /// When its lease expires (ns).
    pub lease_expires_at_ns: Option<i64>,
    /// Its deadline (ns; fixed at insert).
    pub deadline_ns: Option<i64>,
    /// When it was created (ns; fixed at insert).
    pub created_at_ns: i64,
    /// When it was last written (ns).
    pub updated_at_ns: i64,
    /// The component's record, stored byte for byte.
    pub document: String,
}

/// One stored execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionRow {
    /// The execution's id.
    pub execution_id: String,
    /// Its status, as stored.
    pub status: String,
    /// The compare-and-set version.
    pub version: u64,
    /// Its worker, if held.
    pub owner_id: Option<String>,
    /// When its lease expires (ns).
    pub lease_expires_at_ns: Option<i64>,
    /// When it was created (ns; fixed at insert).
    pub created_at_ns: i64,
    /// When it was last written (ns).
    pub updated_at_ns: i64,
    /// The component's record, stored byte for byte.
    pub document: String,
}

/// A row's new lease expiry, written only over the version expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseExpiry {
    /// The execution's or round's id.
    pub id: String,
    /// The version the row must still have.
    pub expected_version: u64,
    /// The new expiry (ns).
    pub expires_at_ns: i64,
}

/// A position in a listing: rows after it (by creation time, then id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The creation time of the last row seen (ns).
    pub created_at_ns: i64,
    /// Its id.
    pub id: String,
}

/// Which rounds to list, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundFilter {
    /// Only this execution's.
    pub execution_id: Option<String>,
    /// Only rounds with this status text.
    pub status: Option<String>,
    /// At most this many.
    pub limit: Option<u32>,
    /// Only rows after this position.
    pub after: Option<Cursor>,
}

/// The end of a compare-and-set whose version row matched: its wide row must have been written
/// too, or the two tables disagree (a damaged database), which is an error, not a lost write.
pub(crate) fn wide_row_written(
    changed: usize,
    what: &str,
) -> Result<bool, super::error::StoreError> {
    match changed {
        1 => Ok(true),
        _ => Err(super::error::StoreError::Failure(format!(
            "the {what}'s version row has no row of its own (a damaged database)"
        ))),
    }
}

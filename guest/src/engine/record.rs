//! How a record is kept in the host's store: indexed columns plus the component's own document
//! (`stored::round`, never the WIT type itself).

use crate::errors::{Result, storage};
use crate::m3::managed_input::store::RoundRow;
use crate::m3::managed_input::types::{ErrorCode, ManagedInputRecord};
use crate::record_cache;
use crate::stored::{self, round::RoundDocument};

/// The row for `record` at `version`.
pub fn to_row(record: &ManagedInputRecord, version: u64) -> Result<RoundRow> {
    let document = stored::encode(&RoundDocument::from(record))
        .map_err(|_| storage(ErrorCode::CorruptRecord, "a record could not be encoded"))?;
    // The stored format keeps every field of a record as it is
    // (`stored::tests::a_round_document_decodes_to_the_record_it_was_encoded_from`).
    record_cache::keep(&record.pending.round_id, &document, record);
    Ok(RoundRow {
        round_id: record.pending.round_id.clone(),
        execution_id: record.pending.execution_id.clone(),
        status: record.status,
        version,
        owner_id: record.lease.as_ref().map(|l| l.owner_id.clone()),
        lease_expires_at: record.lease.as_ref().map(|l| l.expires_at),
        deadline: record.pending.deadline,
        created_at: record.timestamps.created_at,
        updated_at: record.timestamps.updated_at,
        document,
    })
}

/// The record kept in `row`. A document that does not decode, is of a newer format, or
/// disagrees with its row, is a corrupt record: the store refuses to act on it.
pub fn from_row(row: &RoundRow) -> Result<ManagedInputRecord> {
    let mut record = match record_cache::get(&row.round_id, &row.document) {
        Some(record) => record,
        None => {
            let document: RoundDocument = stored::decode(&row.document).map_err(|unreadable| {
                storage(
                    ErrorCode::CorruptRecord,
                    unreadable.describe(&format!("round {}", row.round_id)),
                )
            })?;
            let record = ManagedInputRecord::from(document);
            record_cache::keep(&row.round_id, &row.document, &record);
            record
        }
    };
    // A renewal moves the row's expiry and update time alone (`set-round-lease-expiry`): the
    // row's are the current ones.
    if let (Some(lease), Some(expires_at)) = (record.lease.as_mut(), row.lease_expires_at) {
        lease.expires_at = expires_at;
    }
    record.timestamps.updated_at = row.updated_at;
    if record.pending.round_id != row.round_id || record.status != row.status {
        return Err(storage(
            ErrorCode::CorruptRecord,
            format!(
                "round {}: stored record disagrees with its row",
                row.round_id
            ),
        ));
    }
    Ok(record)
}

//! The `store` import's WIT records as the store's own rows and back (`store/rows.rs`): times
//! as nanoseconds since the Unix epoch, statuses as the text stored (the schema's vocabulary,
//! `store/schema.rs`, held to this map by a test). The one place a status is spelled for the
//! database at run time.

use crate::component::bindings::m3::managed_input::store as wit;
use crate::component::bindings::m3::managed_input::types::{
    Cursor, ExecutionStatus, Status, Timestamp,
};
use crate::store::rows;

/// Nanoseconds since the Unix epoch (clamped to what 64 bits hold).
pub fn to_ns(t: &Timestamp) -> i64 {
    (i128::from(t.seconds) * 1_000_000_000 + i128::from(t.nanoseconds))
        .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The timestamp `ns` nanoseconds after the Unix epoch.
pub fn from_ns(ns: i64) -> Timestamp {
    Timestamp {
        seconds: ns.div_euclid(1_000_000_000),
        nanoseconds: ns.rem_euclid(1_000_000_000) as u32,
    }
}

/// A round's status as stored.
pub fn status_text(status: Status) -> &'static str {
    match status {
        Status::Pending => "pending",
        Status::ResponseValidated => "response_validated",
        Status::DeliveryStarted => "delivery_started",
        Status::Delivered => "delivered",
        Status::Resolved => "resolved",
        Status::Failed => "failed",
    }
}

fn status_from_text(text: &str) -> Result<Status, wit::StoreError> {
    Ok(match text {
        "pending" => Status::Pending,
        "response_validated" => Status::ResponseValidated,
        "delivery_started" => Status::DeliveryStarted,
        "delivered" => Status::Delivered,
        "resolved" => Status::Resolved,
        "failed" => Status::Failed,
        _ => {
            return Err(wit::StoreError::Failure(
                "a round row has an unknown status".into(),
            ));
        }
    })
}

/// An execution's status as stored.
pub fn execution_status_text(status: ExecutionStatus) -> &'static str {
    match status {
        ExecutionStatus::Queued => "queued",
        ExecutionStatus::Running => "running",
        ExecutionStatus::Finished => "finished",
    }
}

fn execution_status_from_text(text: &str) -> Result<ExecutionStatus, wit::StoreError> {
    Ok(match text {
        "queued" => ExecutionStatus::Queued,
        "running" => ExecutionStatus::Running,
        "finished" => ExecutionStatus::Finished,
        _ => {
            return Err(wit::StoreError::Failure(
                "an execution row has an unknown status".into(),
            ));
        }
    })
}

/// The store's error as the import's.
pub fn store_error(e: crate::store::StoreError) -> wit::StoreError {
    match e {
        crate::store::StoreError::Busy(message) => wit::StoreError::Busy(message),
        crate::store::StoreError::Failure(message) => wit::StoreError::Failure(message),
    }
}

/// The transaction mode as the store's.
pub fn mode(mode: wit::TransactionMode) -> rows::Mode {
    match mode {
        wit::TransactionMode::Read => rows::Mode::Read,
        wit::TransactionMode::Write => rows::Mode::Write,
    }
}

/// A round's row as the store keeps it (its text moved, not copied).
pub fn round_row(r: wit::RoundRow) -> rows::RoundRow {
    rows::RoundRow {
        status: status_text(r.status).to_string(),
        lease_expires_at_ns: r.lease_expires_at.as_ref().map(to_ns),
        deadline_ns: r.deadline.as_ref().map(to_ns),
        created_at_ns: to_ns(&r.created_at),
        updated_at_ns: to_ns(&r.updated_at),
        round_id: r.round_id,
        execution_id: r.execution_id,
        version: r.version,
        owner_id: r.owner_id,
        document: r.document,
    }
}

/// A stored round's row as the component reads it; an unknown status is a failure.
pub fn round_row_back(r: rows::RoundRow) -> Result<wit::RoundRow, wit::StoreError> {
    Ok(wit::RoundRow {
        status: status_from_text(&r.status)?,
        round_id: r.round_id,
        execution_id: r.execution_id,
        version: r.version,
        owner_id: r.owner_id,
        lease_expires_at: r.lease_expires_at_ns.map(from_ns),
        deadline: r.deadline_ns.map(from_ns),
        created_at: from_ns(r.created_at_ns),
        updated_at: from_ns(r.updated_at_ns),
        document: r.document,
    })
}

/// An execution's row as the store keeps it (its text moved, not copied).
pub fn execution_row(r: wit::ExecutionRow) -> rows::ExecutionRow {
    rows::ExecutionRow {
        status: execution_status_text(r.status).to_string(),
        lease_expires_at_ns: r.lease_expires_at.as_ref().map(to_ns),
        created_at_ns: to_ns(&r.created_at),
        updated_at_ns: to_ns(&r.updated_at),
        execution_id: r.execution_id,
        version: r.version,
        owner_id: r.owner_id,
        document: r.document,
    }
}

/// A stored execution's row as the component reads it; an unknown status is a failure.
pub fn execution_row_back(r: rows::ExecutionRow) -> Result<wit::ExecutionRow, wit::StoreError> {
    Ok(wit::ExecutionRow {
        status: execution_status_from_text(&r.status)?,
        execution_id: r.execution_id,
        version: r.version,
        owner_id: r.owner_id,
        lease_expires_at: r.lease_expires_at_ns.map(from_ns),
        created_at: from_ns(r.created_at_ns),
        updated_at: from_ns(r.updated_at_ns),
        document: r.document,
    })
}

/// A lease expiry as the store's.
pub fn lease_expiry(l: &wit::LeaseExpiry) -> rows::LeaseExpiry {
    rows::LeaseExpiry {
        id: l.id.clone(),
        expected_version: l.expected_version,
        expires_at_ns: to_ns(&l.expires_at),
    }
}

/// A listing's position as the store's.
pub fn cursor(c: &Cursor) -> rows::Cursor {
    rows::Cursor {
        created_at_ns: to_ns(&c.created_at),
        id: c.id.clone(),
    }
}

/// A round filter as the store's.
pub fn round_filter(f: &wit::RoundFilter) -> rows::RoundFilter {
    rows::RoundFilter {
        execution_id: f.execution_id.clone(),
        status: f.status.map(|s| status_text(s).to_string()),
        limit: f.limit,
        after: f.after.as_ref().map(cursor),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schema::{EXECUTION_STATUSES, ROUND_STATUSES};

    /// The statuses spelled here are the schema's vocabulary, each once, and read back as the
    /// same status; anything else is a failure, never a status.
    #[test]
    fn statuses_are_the_schema_s_vocabulary_both_ways() {
        let rounds = [
            Status::Pending,
            Status::ResponseValidated,
            Status::DeliveryStarted,
            Status::Delivered,
            Status::Resolved,
            Status::Failed,
        ];
        let texts: Vec<&str> = rounds.iter().map(|s| status_text(*s)).collect();
        assert_eq!(texts, ROUND_STATUSES);
        for status in rounds {
            assert!(matches!(status_from_text(status_text(status)), Ok(s) if s == status));
        }
        assert!(status_from_text("Pending").is_err());
        let executions = [
            ExecutionStatus::Queued,
            ExecutionStatus::Running,
            ExecutionStatus::Finished,
        ];
        let texts: Vec<&str> = executions
            .iter()
            .map(|s| execution_status_text(*s))
            .collect();
        assert_eq!(texts, EXECUTION_STATUSES);
        for status in executions {
            assert!(matches!(
                execution_status_from_text(execution_status_text(status)),
                Ok(s) if s == status
            ));
        }
        assert!(execution_status_from_text("done").is_err());
    }
}

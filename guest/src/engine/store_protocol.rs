//! The `ManagedInputStore` protocol: every operation is one host transaction in which the
//! component reads the row, decides with [`round_protocol`], and writes with compare-and-set on
//! the row version.

use crate::errors::{Result, conflict, storage};
use crate::exports::m3::managed_input::managed_input::ListFilter;
use crate::exports::m3::managed_input::round_protocol::{
    Answer, Decision, DeliveryStart, FailureReport, Operation, RecoveryReport, Renewal, Write,
};
use crate::m3::managed_input::store::{RoundFilter, StoreError, Transaction, TransactionMode};
use crate::m3::managed_input::types::{
    ErrorCode, FailureCode, Lease, ManagedInputError, ManagedInputRecord, NewRound, OwnerClaim,
    RedactedResponse, Status, Timestamp,
};
use crate::round_protocol::{self, check_id, check_round_id};
use crate::{record, redaction, time};

pub(crate) fn store_error(e: StoreError) -> ManagedInputError {
    match e {
        StoreError::Busy(m) => storage(ErrorCode::StorageBusy, m),
        StoreError::Failure(m) => storage(ErrorCode::StorageFailure, m),
    }
}

pub(crate) fn begin(mode: TransactionMode) -> Result<Transaction> {
    Transaction::begin(mode).map_err(store_error)
}

/// Runs one write operation: checks its arguments, then in one transaction reads the round,
/// decides, and writes what the decision says.
fn apply(round_id: &str, operation: Operation) -> Result<ManagedInputRecord> {
    round_protocol::check_arguments(round_id, &operation)?;
    let tx = begin(TransactionMode::Write)?;
    let now = time::now();
    let (next, written) = apply_in(&tx, round_id, operation, &now)?;
    if written {
        tx.commit().map_err(store_error)?;
    }
    Ok(next)
}

/// Reads the round inside `tx`, decides `operation` (whose arguments were checked) at `now`,
/// and writes what the decision says with compare-and-set; the caller commits. Returns the
/// round as decided and whether anything was written.
pub(crate) fn apply_in(
    tx: &Transaction,
    round_id: &str,
    operation: Operation,
    now: &Timestamp,
) -> Result<(ManagedInputRecord, bool)> {
    decide_in(tx, round_id, operation, now)?.write(tx)
}

/// A round operation decided inside a transaction, not yet written.
pub(crate) struct RoundDecided {
    round_id: String,
    row: Option<crate::m3::managed_input::store::RoundRow>,
    stored: Option<ManagedInputRecord>,
    decision: Decision,
}

/// Reads the round inside `tx` and decides `operation` (whose arguments were checked) at
/// `now`, writing nothing: [`RoundDecided::write`] does.
pub(crate) fn decide_in(
    tx: &Transaction,
    round_id: &str,
    operation: Operation,
    now: &Timestamp,
) -> Result<RoundDecided> {
    let row = tx.get(round_id).map_err(store_error)?;
    let stored = row.as_ref().map(record::from_row).transpose()?;
    let decision = round_protocol::decide_checked(round_id, stored.as_ref(), operation, now)?;
    Ok(RoundDecided {
        round_id: round_id.to_string(),
        stored,
        row,
        decision,
    })
}

impl RoundDecided {
    /// The round row's version once [`RoundDecided::write`] wrote the decision (0: no row).
    pub(crate) fn version_after(&self) -> u64 {
        match (&self.decision.write, &self.row) {
            (Write::Update, Some(row)) => row.version + 1,
            (Write::Unchanged, Some(row)) => row.version,
            (Write::Insert, _) => 1,
            (_, None) => 0,
        }
    }

    /// The round as decided.
    pub(crate) fn next(&self) -> &ManagedInputRecord {
        &self.decision.next
    }

    /// When the decision moves the round's lease expiry (and its update time) and nothing else,
    /// as a renewal does: the row's version and the new expiry, which the row's columns alone
    /// can hold (`record::from_row` reads both from them), the document kept as it is.
    pub(crate) fn lease_move(&self) -> Option<(u64, Timestamp)> {
        let (Write::Update, Some(row), Some(stored)) =
            (&self.decision.write, &self.row, &self.stored)
        else {
            return None;
        };
        let expires_at = self.decision.next.lease.as_ref()?.expires_at;
        let mut unmoved = self.decision.next.clone();
        unmoved.lease.as_mut()?.expires_at = stored.lease.as_ref()?.expires_at;
        unmoved.timestamps.updated_at = stored.timestamps.updated_at;
        (unmoved == *stored).then_some((row.version, expires_at))
    }

    /// Writes what the decision says with compare-and-set; the caller commits. Returns the
    /// round as decided and whether anything was written.
    pub(crate) fn write(self, tx: &Transaction) -> Result<(ManagedInputRecord, bool)> {
        let RoundDecided {
            round_id,
            row,
            stored,
            decision,
        } = self;
        let was = stored.map(|r| r.status);
        match (decision.write, row) {
            (Write::Unchanged, _) => return Ok((decision.next, false)),
            (Write::Insert, _) => {
                if !tx
                    .insert(&record::to_row(&decision.next, 1)?)
                    .map_err(store_error)?
                {
                    return Err(conflict(
                        ErrorCode::RoundExists,
                        format!("round {round_id} already exists"),
                    ));
                }
            }
            (Write::Update, Some(row)) => {
                let next = record::to_row(&decision.next, row.version + 1)?;
                if !tx
                    .compare_and_set(&next, row.version)
                    .map_err(store_error)?
                {
                    return Err(conflict(
                        ErrorCode::ConcurrentUpdate,
                        format!("round {round_id} changed concurrently"),
                    ));
                }
            }
            (Write::Update, None) => {
                return Err(storage(
                    ErrorCode::StorageFailure,
                    format!(
                        "round {round_id}: an update was decided for a round that is not stored"
                    ),
                ));
            }
        }
        // The round's worker waits for exactly these: its answer, or its round failed (by anyone).
        if was != Some(decision.next.status)
            && matches!(
                decision.next.status,
                Status::ResponseValidated | Status::Failed
            )
        {
            tx.wake_execution(&decision.next.pending.execution_id)
                .map_err(store_error)?;
        }
        Ok((decision.next, true))
    }
}

/// The lease a `claim` or `renew` decision granted.
fn granted_lease(record: ManagedInputRecord) -> Result<Lease> {
    record.lease.ok_or_else(|| {
        storage(
            ErrorCode::StorageFailure,
            "a lease was decided but not recorded",
        )
    })
}

/// `create-round`.
pub fn create_round(new: NewRound) -> Result<ManagedInputRecord> {
    let round_id = new.round_id.clone();
    apply(&round_id, Operation::Create(new))
}

/// `get-round`.
pub fn get_round(round_id: &str) -> Result<Option<ManagedInputRecord>> {
    check_round_id(round_id)?;
    let tx = begin(TransactionMode::Read)?;
    let row = tx.get(round_id).map_err(store_error)?;
    row.as_ref().map(record::from_row).transpose()
}

/// `list-rounds`.
pub fn list_rounds(filter: ListFilter) -> Result<Vec<ManagedInputRecord>> {
    if let Some(execution_id) = &filter.execution_id {
        check_id("execution id", execution_id, ErrorCode::InvalidId)?;
    }
    let tx = begin(TransactionMode::Read)?;
    let rows = tx
        .list(&RoundFilter {
            execution_id: filter.execution_id,
            status: filter.status,
            limit: filter.limit,
            after: filter.after,
        })
        .map_err(store_error)?;
    rows.iter().map(record::from_row).collect()
}

/// `claim-round`.
pub fn claim_round(round_id: &str, claim: OwnerClaim) -> Result<Lease> {
    granted_lease(apply(round_id, Operation::Claim(claim))?)
}

/// `renew`.
pub fn renew(round_id: &str, lease: Lease, lease_ttl_ms: u64) -> Result<Lease> {
    granted_lease(apply(
        round_id,
        Operation::Renew(Renewal {
            lease,
            lease_ttl_ms,
        }),
    )?)
}

/// `submit-responses`.
pub fn submit_responses(
    round_id: &str,
    responses: &str,
    idempotency_key: &str,
) -> Result<ManagedInputRecord> {
    apply(
        round_id,
        Operation::Submit(Answer {
            responses: responses.to_string(),
            idempotency_key: idempotency_key.to_string(),
        }),
    )
}

/// `start-delivery`.
pub fn start_delivery(
    round_id: &str,
    lease: Lease,
    delivery_idempotency_key: String,
) -> Result<ManagedInputRecord> {
    apply(
        round_id,
        Operation::StartDelivery(DeliveryStart {
            lease,
            delivery_idempotency_key,
        }),
    )
}

/// `mark-delivered`.
pub fn mark_delivered(round_id: &str, lease: Lease) -> Result<ManagedInputRecord> {
    apply(round_id, Operation::MarkDelivered(lease))
}

/// `resolve`.
pub fn resolve(round_id: &str, lease: Lease) -> Result<ManagedInputRecord> {
    apply(round_id, Operation::Resolve(lease))
}

/// `fail`.
pub fn fail(
    round_id: &str,
    lease: Lease,
    code: FailureCode,
    message: String,
) -> Result<ManagedInputRecord> {
    apply(
        round_id,
        Operation::Fail(FailureReport {
            lease,
            code,
            message,
        }),
    )
}

/// `fail-recovery`.
pub fn fail_recovery(
    round_id: &str,
    lease: Option<Lease>,
    message: String,
) -> Result<ManagedInputRecord> {
    apply(
        round_id,
        Operation::FailRecovery(RecoveryReport { lease, message }),
    )
}

/// `redacted-responses`.
pub fn redacted_responses(round_id: &str) -> Result<Option<Vec<RedactedResponse>>> {
    check_round_id(round_id)?;
    let tx = begin(TransactionMode::Read)?;
    let row = tx.get(round_id).map_err(store_error)?.ok_or_else(|| {
        crate::errors::state(
            ErrorCode::RoundNotFound,
            format!("round {round_id} does not exist"),
        )
    })?;
    Ok(record::from_row(&row)?
        .responses
        .as_deref()
        .map(redaction::redact))
}

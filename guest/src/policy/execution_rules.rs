//! The execution decisions that need no storage (WIT `execution-rules`): whether a worker may take
//! an execution, which pending round a handle sees, whether a round is a handle's to answer.
//! `runtime::execution` makes these decisions with these functions; the policy-only component
//! exports them as they are.

use crate::errors::{Result, state, validation};
use crate::exports::m3::managed_input::execution_rules::ClaimOutcome;
use crate::m3::managed_input::types::{
    ErrorCode, ExecutionStatus, ManagedInputRecord, PendingRound, Status,
};
use crate::round_protocol::MAX_ID_BYTES;

/// Checks an execution id given by a caller.
pub fn check_execution_id(execution_id: &str) -> Result<()> {
    if execution_id.is_empty() || execution_id.len() > MAX_ID_BYTES {
        return Err(validation(
            ErrorCode::InvalidId,
            format!("an execution id must be non-empty and at most {MAX_ID_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// The error for an execution id with no execution.
pub fn not_found(execution_id: &str) -> crate::m3::managed_input::types::ManagedInputError {
    state(
        ErrorCode::ExecutionNotFound,
        format!(
            "execution {} does not exist",
            crate::errors::bounded(execution_id)
        ),
    )
}

/// `execution-rules.claim`.
pub fn claim(execution_id: &str, status: Option<ExecutionStatus>) -> Result<ClaimOutcome> {
    check_execution_id(execution_id)?;
    match status {
        None => Err(not_found(execution_id)),
        Some(ExecutionStatus::Queued) => Ok(ClaimOutcome::Run),
        Some(ExecutionStatus::Finished) => Ok(ClaimOutcome::Finished),
        Some(ExecutionStatus::Running) => Err(state(
            ErrorCode::ExecutionNotRunnable,
            format!(
                "execution {} is already running",
                crate::errors::bounded(execution_id)
            ),
        )),
    }
}

/// `execution-rules.pending-round-of`.
pub fn pending_round_of(
    execution_id: &str,
    rounds: &[ManagedInputRecord],
) -> Result<Option<PendingRound>> {
    check_execution_id(execution_id)?;
    let mut pending = rounds
        .iter()
        .filter(|r| r.status == Status::Pending && r.pending.execution_id == execution_id);
    let first = pending.next();
    if pending.next().is_some() {
        return Err(state(
            ErrorCode::AmbiguousPendingRound,
            format!(
                "execution {} has more than one pending round",
                crate::errors::bounded(execution_id)
            ),
        ));
    }
    Ok(first.map(|r| r.pending.clone()))
}

/// `execution-rules.check-round-of`.
pub fn check_round_of(execution_id: &str, round: &ManagedInputRecord) -> Result<()> {
    check_execution_id(execution_id)?;
    if round.pending.execution_id != execution_id {
        return Err(state(
            ErrorCode::RoundNotFound,
            format!(
                "round {} does not belong to execution {}",
                crate::errors::bounded(&round.pending.round_id),
                crate::errors::bounded(execution_id)
            ),
        ));
    }
    Ok(())
}

//! The round lifecycle: which status may follow which.
//!
//! `pending` -> `response-validated` -> `delivery-started` -> `delivered` -> `resolved`, and any
//! non-terminal status -> `failed`. `resolved` and `failed` absorb: nothing leaves them.

use crate::errors::{Result, recovery, state};
use crate::m3::managed_input::types::{ErrorCode, FailureCode, ManagedInputRecord, Status};

/// Whether nothing may follow `status`.
pub fn is_terminal(status: Status) -> bool {
    matches!(status, Status::Resolved | Status::Failed)
}

/// The spec's name of a status.
pub fn name(status: Status) -> &'static str {
    match status {
        Status::Pending => "pending",
        Status::ResponseValidated => "response_validated",
        Status::DeliveryStarted => "delivery_started",
        Status::Delivered => "delivered",
        Status::Resolved => "resolved",
        Status::Failed => "failed",
    }
}

/// A failure code's name as users see it (`snake_case`).
pub fn failure_name(code: crate::m3::managed_input::types::FailureCode) -> &'static str {
    use crate::m3::managed_input::types::FailureCode as C;
    match code {
        C::Cancelled => "cancelled",
        C::DeadlineExceeded => "deadline_exceeded",
        C::RoundLimitExceeded => "round_limit_exceeded",
        C::ServerError => "server_error",
        C::InvalidRequestState => "invalid_request_state",
        C::ElicitationUnhandled => "elicitation_unhandled",
        C::RecoveryUnavailable => "recovery_unavailable",
        C::RequestWithdrawn => "request_withdrawn",
    }
}

/// Whether the lifecycle allows `from` -> `to`.
pub fn allows(from: Status, to: Status) -> bool {
    matches!(
        (from, to),
        (Status::Pending, Status::ResponseValidated)
            | (Status::ResponseValidated, Status::DeliveryStarted)
            | (Status::DeliveryStarted, Status::Delivered)
            | (Status::Delivered, Status::Resolved)
    ) || (to == Status::Failed && !is_terminal(from))
}

/// Refuses any change to a round that already ended. A round failed with
/// `recovery-unavailable` gets a recovery error: it can never be answered or reclaimed.
pub fn ensure_open(record: &ManagedInputRecord) -> Result<()> {
    if !is_terminal(record.status)
        || crate::mutation::broken(crate::mutation::Rule::TerminalRefusal)
    {
        return Ok(());
    }
    let round = &record.pending.round_id;
    if record
        .failure
        .as_ref()
        .is_some_and(|f| f.code == FailureCode::RecoveryUnavailable)
    {
        return Err(recovery(
            ErrorCode::RecoveryUnavailable,
            format!(
                "round {round} failed with recovery_unavailable: it cannot be answered, claimed or resumed"
            ),
        ));
    }
    Err(state(
        ErrorCode::RoundTerminal,
        format!("round {round} is {} and cannot change", name(record.status)),
    ))
}

/// Checks `record.status` -> `to`.
pub fn ensure_transition(record: &ManagedInputRecord, to: Status) -> Result<()> {
    ensure_open(record)?;
    if allows(record.status, to) {
        return Ok(());
    }
    Err(state(
        ErrorCode::InvalidTransition,
        format!(
            "round {} is {}; it cannot become {}",
            record.pending.round_id,
            name(record.status),
            name(to)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Status; 6] = [
        Status::Pending,
        Status::ResponseValidated,
        Status::DeliveryStarted,
        Status::Delivered,
        Status::Resolved,
        Status::Failed,
    ];

    #[test]
    fn terminal_statuses_absorb() {
        for from in [Status::Resolved, Status::Failed] {
            for to in ALL {
                assert!(!allows(from, to), "{} -> {}", name(from), name(to));
            }
        }
    }

    #[test]
    fn no_status_moves_backwards_or_skips() {
        for (i, from) in ALL.iter().enumerate().take(4) {
            for (j, to) in ALL.iter().enumerate().take(5) {
                assert_eq!(
                    allows(*from, *to),
                    j == i + 1,
                    "{} -> {}",
                    name(*from),
                    name(*to)
                );
            }
            assert!(allows(*from, Status::Failed));
        }
    }
}

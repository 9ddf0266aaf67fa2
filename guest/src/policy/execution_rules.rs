//! The execution decisions that need no storage (WIT `execution-rules`): the execution state
//! machine as a pure function ([`decide`], the way `round_protocol::decide` is the rounds'),
//! whether a worker may take an execution, which pending round a handle sees, whether a round is
//! a handle's to answer. `runtime::execution` makes these decisions with these functions inside
//! its transactions; the policy-only component exports them as they are.

use crate::errors::{Result, conflict, recovery, state, validation};
use crate::exports::m3::managed_input::execution_rules::{
    ClaimOutcome, ExecutionClaim, ExecutionDecision, ExecutionEnding, ExecutionHead,
    ExecutionOperation, ExecutionRenewal, ExecutionWrite,
};
use crate::m3::managed_input::types::{
    ErrorCode, ExecutionStatus, Lease, ManagedInputRecord, PendingRound, Status, Timestamp,
};
use crate::round_protocol::{MAX_ID_BYTES, check_id};
use crate::{lease, time};

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

/// `execution-rules.check-acknowledged`: a `failed` round does not acknowledge the answer it
/// stores, and the error says exactly what became of that answer, from the round's own
/// timestamps: delivered (and when) before the round failed, delivery started and never
/// confirmed, or never delivered. Any other status acknowledges it.
pub fn check_acknowledged(round: &ManagedInputRecord) -> Result<()> {
    if round.status != Status::Failed {
        return Ok(());
    }
    let id = crate::errors::bounded(&round.pending.round_id);
    let failure = match &round.failure {
        Some(f) => format!(
            "{} ({})",
            crate::lifecycle::failure_name(f.code),
            crate::errors::cut(&f.message, 200)
        ),
        None => "with no reason stored".to_string(),
    };
    let times = &round.timestamps;
    Err(match (&times.delivered_at, &times.delivery_started_at) {
        (Some(delivered), _) => state(
            ErrorCode::DeliveredThenFailed,
            format!(
                "round {id}: its answers were delivered to the server at {}, then the round \
                 failed: {failure}; the server received them, and they are not delivered again",
                time::rfc3339(delivered)
            ),
        ),
        (None, Some(started)) => state(
            ErrorCode::DeliveryUnconfirmed,
            format!(
                "round {id}: delivery of its answers started at {} and was never confirmed \
                 before the round failed: {failure}; the server may have received them, and \
                 they are not delivered again",
                time::rfc3339(started)
            ),
        ),
        (None, None) => state(
            ErrorCode::RoundTerminal,
            format!(
                "round {id} failed before delivery of its answers started: {failure}; the \
                 server never received them, and they are stored but will never be delivered"
            ),
        ),
    })
}

/// Whether `decision`, taken on `before`, updates the execution and changes only what its row's
/// columns hold (its status, lease owner and expiry): nothing ended, no rounds to fail, its
/// cancel flag and lease token as they were. Such a write keeps the execution's document.
pub fn keeps_the_document(decision: &ExecutionDecision, before: &ExecutionHead) -> bool {
    fn token(head: &ExecutionHead) -> Option<&str> {
        head.lease.as_ref().map(|l| l.lease_token.as_str())
    }
    decision.write == ExecutionWrite::Update
        && decision.ended.is_none()
        && decision.fail_rounds_of.is_none()
        && decision.next.cancel_requested == before.cancel_requested
        && token(&decision.next) == token(before)
}

/// `execution-rules.decide`: the execution state machine. Given execution `execution_id`'s
/// stored head (none: it does not exist), one operation and the time, decides the next head or
/// the typed error. Arguments are checked before the stored head.
pub fn decide(
    execution_id: &str,
    stored: Option<&ExecutionHead>,
    operation: ExecutionOperation,
    now: &Timestamp,
) -> Result<ExecutionDecision> {
    check_execution_id(execution_id)?;
    check_arguments(&operation)?;
    let Some(stored) = stored else {
        return Err(not_found(execution_id));
    };
    let subject = format!("execution {}", crate::errors::bounded(execution_id));
    let unchanged = || ExecutionDecision {
        next: stored.clone(),
        write: ExecutionWrite::Unchanged,
        ended: None,
        fail_rounds_of: None,
    };
    let mut next = stored.clone();
    let mut ended = None;
    let mut fail_rounds_of = None;
    match operation {
        ExecutionOperation::Claim(ExecutionClaim {
            owner_id,
            lease_ttl_ms,
        }) => match claim(execution_id, Some(stored.status))? {
            ClaimOutcome::Finished => return Ok(unchanged()),
            ClaimOutcome::Run => {
                next.status = ExecutionStatus::Running;
                next.lease = Some(lease::grant(&owner_id, lease_ttl_ms, now)?);
            }
        },
        ExecutionOperation::Renew(ExecutionRenewal {
            lease: presented,
            lease_ttl_ms,
        }) => {
            authorize_worker(&subject, stored, &presented, now)?;
            if let Some(held) = next.lease.as_mut() {
                held.expires_at = time::add_millis(now, lease_ttl_ms);
            }
        }
        ExecutionOperation::Progress(presented) => {
            authorize_worker(&subject, stored, &presented, now)?;
        }
        ExecutionOperation::Finish(presented) => {
            authorize_worker(&subject, stored, &presented, now)?;
            next.status = ExecutionStatus::Finished;
            next.lease = None;
            ended = Some(ExecutionEnding::ByWorker);
            fail_rounds_of = Some(presented.owner_id);
        }
        ExecutionOperation::RequestCancel => match stored.status {
            ExecutionStatus::Finished => return Ok(unchanged()),
            ExecutionStatus::Queued => {
                next.status = ExecutionStatus::Finished;
                next.lease = None;
                ended = Some(ExecutionEnding::Cancelled);
            }
            ExecutionStatus::Running if stored.cancel_requested => return Ok(unchanged()),
            ExecutionStatus::Running => next.cancel_requested = true,
        },
        ExecutionOperation::GiveUp(owner_id) => {
            let held_by_owner = stored.status != ExecutionStatus::Finished
                && stored
                    .lease
                    .as_ref()
                    .is_some_and(|l| l.owner_id == owner_id);
            if !held_by_owner {
                return Err(recovery(
                    ErrorCode::RecoveryUnavailable,
                    format!("{subject} is not held by this worker"),
                ));
            }
            next.status = ExecutionStatus::Finished;
            next.lease = None;
            ended = Some(ExecutionEnding::Abandoned);
            fail_rounds_of = Some(owner_id);
        }
        ExecutionOperation::Recover => {
            if stored.status == ExecutionStatus::Finished {
                return Ok(unchanged());
            }
            if let Some(held) = &stored.lease
                && lease::is_live(held, now)
            {
                return Err(conflict(
                    ErrorCode::LeaseHeld,
                    format!("{subject}'s holder keeps its lease alive"),
                ));
            }
            next.status = ExecutionStatus::Finished;
            next.lease = None;
            ended = Some(ExecutionEnding::Abandoned);
        }
    }
    Ok(ExecutionDecision {
        next,
        write: ExecutionWrite::Update,
        ended,
        fail_rounds_of,
    })
}

/// Bad arguments are a `validation` error whatever is stored.
fn check_arguments(operation: &ExecutionOperation) -> Result<()> {
    match operation {
        ExecutionOperation::Claim(claim) => {
            check_id("owner id", &claim.owner_id, ErrorCode::InvalidId)?;
            lease::check_ttl(claim.lease_ttl_ms)
        }
        ExecutionOperation::Renew(renewal) => lease::check_ttl(renewal.lease_ttl_ms),
        ExecutionOperation::GiveUp(owner_id) => {
            check_id("owner id", owner_id, ErrorCode::InvalidId)
        }
        ExecutionOperation::Progress(_)
        | ExecutionOperation::Finish(_)
        | ExecutionOperation::RequestCancel
        | ExecutionOperation::Recover => Ok(()),
    }
}

/// A worker's write: only the live lease of a `running` execution (the one lease rule).
fn authorize_worker(
    subject: &str,
    stored: &ExecutionHead,
    presented: &Lease,
    now: &Timestamp,
) -> Result<()> {
    let held = stored
        .lease
        .as_ref()
        .filter(|_| stored.status == ExecutionStatus::Running);
    lease::authorize_held(subject, held, presented, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::m3::managed_input::types::ManagedInputError;

    fn at(seconds: i64) -> Timestamp {
        Timestamp {
            seconds,
            nanoseconds: 0,
        }
    }

    fn held(owner: &str, expires: i64) -> Lease {
        Lease {
            owner_id: owner.into(),
            lease_token: "0123456789abcdef0123456789abcdef".into(),
            expires_at: at(expires),
        }
    }

    fn head(status: ExecutionStatus, lease: Option<Lease>) -> ExecutionHead {
        ExecutionHead {
            status,
            lease,
            cancel_requested: false,
        }
    }

    fn code(result: Result<ExecutionDecision>) -> ErrorCode {
        match result.expect_err("refused") {
            ManagedInputError::Validation(d)
            | ManagedInputError::Conflict(d)
            | ManagedInputError::State(d)
            | ManagedInputError::Recovery(d)
            | ManagedInputError::Storage(d) => d.code,
        }
    }

    #[test]
    fn a_claim_runs_a_queued_execution_under_a_fresh_lease() {
        let queued = head(ExecutionStatus::Queued, Some(held("submitter", 50)));
        let claim = ExecutionOperation::Claim(ExecutionClaim {
            owner_id: "worker".into(),
            lease_ttl_ms: 30_000,
        });
        let decision = decide("exec-1", Some(&queued), claim.clone(), &at(10)).unwrap();
        assert_eq!(decision.write, ExecutionWrite::Update);
        assert_eq!(decision.next.status, ExecutionStatus::Running);
        let granted = decision.next.lease.unwrap();
        assert_eq!(granted.owner_id, "worker");
        assert_eq!(granted.expires_at, at(40));
        assert_ne!(granted.lease_token, held("x", 0).lease_token);
        let running = head(ExecutionStatus::Running, Some(held("other", 50)));
        assert_eq!(
            code(decide("exec-1", Some(&running), claim.clone(), &at(10))),
            ErrorCode::ExecutionNotRunnable
        );
        assert_eq!(
            code(decide("exec-1", None, claim, &at(10))),
            ErrorCode::ExecutionNotFound
        );
    }

    #[test]
    fn worker_writes_need_the_live_lease_of_a_running_execution() {
        let lease = held("worker", 50);
        let running = head(ExecutionStatus::Running, Some(lease.clone()));
        let renew = |lease: Lease| {
            ExecutionOperation::Renew(ExecutionRenewal {
                lease,
                lease_ttl_ms: 30_000,
            })
        };
        let renewed = decide("exec-1", Some(&running), renew(lease.clone()), &at(40)).unwrap();
        assert_eq!(renewed.next.lease.unwrap().expires_at, at(70));
        assert_eq!(
            code(decide(
                "exec-1",
                Some(&running),
                renew(lease.clone()),
                &at(50)
            )),
            ErrorCode::LeaseExpired
        );
        let mut stolen = lease.clone();
        stolen.lease_token = "fedcba9876543210fedcba9876543210".into();
        assert_eq!(
            code(decide(
                "exec-1",
                Some(&running),
                ExecutionOperation::Progress(stolen),
                &at(10)
            )),
            ErrorCode::LeaseMismatch
        );
        let finished = head(ExecutionStatus::Finished, Some(lease.clone()));
        assert_eq!(
            code(decide(
                "exec-1",
                Some(&finished),
                ExecutionOperation::Finish(lease.clone()),
                &at(10)
            )),
            ErrorCode::LeaseMismatch
        );
        let done = decide(
            "exec-1",
            Some(&running),
            ExecutionOperation::Finish(lease),
            &at(10),
        )
        .unwrap();
        assert_eq!(done.next.status, ExecutionStatus::Finished);
        assert_eq!(done.next.lease, None);
        assert_eq!(done.ended, Some(ExecutionEnding::ByWorker));
        assert_eq!(done.fail_rounds_of.as_deref(), Some("worker"));
    }

    /// A renewal changes only the row's columns; a claim (a new token), a cancel request and a
    /// finish change the document.
    #[test]
    fn only_a_decision_on_the_columns_keeps_the_document() {
        let lease = held("worker", 50);
        let running = head(ExecutionStatus::Running, Some(lease.clone()));
        let keeps = |operation| {
            let decision = decide("exec-1", Some(&running), operation, &at(10)).unwrap();
            keeps_the_document(&decision, &running)
        };
        assert!(keeps(ExecutionOperation::Renew(ExecutionRenewal {
            lease: lease.clone(),
            lease_ttl_ms: 30_000,
        })));
        assert!(!keeps(ExecutionOperation::RequestCancel));
        assert!(!keeps(ExecutionOperation::Finish(lease.clone())));
        let queued = head(ExecutionStatus::Queued, Some(held("submitter", 50)));
        let claim = ExecutionOperation::Claim(ExecutionClaim {
            owner_id: "worker".into(),
            lease_ttl_ms: 30_000,
        });
        let claimed = decide("exec-1", Some(&queued), claim, &at(10)).unwrap();
        assert!(
            !keeps_the_document(&claimed, &queued),
            "a claim hands out a new token"
        );
    }

    #[test]
    fn recovery_ends_only_an_expired_hold() {
        let queued = head(ExecutionStatus::Queued, Some(held("submitter", 50)));
        assert_eq!(
            code(decide(
                "exec-1",
                Some(&queued),
                ExecutionOperation::Recover,
                &at(49)
            )),
            ErrorCode::LeaseHeld
        );
        let recovered = decide(
            "exec-1",
            Some(&queued),
            ExecutionOperation::Recover,
            &at(50),
        )
        .unwrap();
        assert_eq!(recovered.ended, Some(ExecutionEnding::Abandoned));
        assert_eq!(recovered.fail_rounds_of, None);
        let finished = head(ExecutionStatus::Finished, None);
        let again = decide(
            "exec-1",
            Some(&finished),
            ExecutionOperation::Recover,
            &at(50),
        )
        .unwrap();
        assert_eq!(again.write, ExecutionWrite::Unchanged);
        let give_up = |owner: &str| ExecutionOperation::GiveUp(owner.into());
        assert_eq!(
            code(decide("exec-1", Some(&queued), give_up("someone"), &at(99))),
            ErrorCode::RecoveryUnavailable
        );
        let given = decide("exec-1", Some(&queued), give_up("submitter"), &at(99)).unwrap();
        assert_eq!(given.fail_rounds_of.as_deref(), Some("submitter"));
    }

    #[test]
    fn a_cancel_ends_a_queued_execution_and_marks_a_running_one_once() {
        let queued = head(ExecutionStatus::Queued, Some(held("submitter", 50)));
        let cancelled = decide(
            "exec-1",
            Some(&queued),
            ExecutionOperation::RequestCancel,
            &at(1),
        )
        .unwrap();
        assert_eq!(cancelled.ended, Some(ExecutionEnding::Cancelled));
        assert_eq!(cancelled.next.lease, None);
        let running = head(ExecutionStatus::Running, Some(held("worker", 50)));
        let marked = decide(
            "exec-1",
            Some(&running),
            ExecutionOperation::RequestCancel,
            &at(1),
        )
        .unwrap();
        assert!(marked.next.cancel_requested);
        assert_eq!(marked.ended, None);
        let again = decide(
            "exec-1",
            Some(&marked.next),
            ExecutionOperation::RequestCancel,
            &at(1),
        )
        .unwrap();
        assert_eq!(again.write, ExecutionWrite::Unchanged);
    }
}

//! The engine's exports (`managed-input`, `runtime`, `sandbox-probe`): the engine component only.

use super::{probe, runtime, store_protocol};
use crate::Component;
use crate::exports::m3::managed_input::{managed_input, runtime as runtime_export, sandbox_probe};
use crate::m3::managed_input::types::{
    Lease, ManagedInputError, ManagedInputRecord, PendingRound, RedactedResponse,
};

impl managed_input::Guest for Component {
    fn create_round(
        round: crate::m3::managed_input::types::NewRound,
    ) -> Result<ManagedInputRecord, ManagedInputError> {
        store_protocol::create_round(round)
    }

    fn get_round(round_id: String) -> Result<Option<ManagedInputRecord>, ManagedInputError> {
        store_protocol::get_round(&round_id)
    }

    fn list_rounds(
        filter: managed_input::ListFilter,
    ) -> Result<Vec<ManagedInputRecord>, ManagedInputError> {
        store_protocol::list_rounds(filter)
    }

    fn claim_round(
        round_id: String,
        claim: crate::m3::managed_input::types::OwnerClaim,
    ) -> Result<Lease, ManagedInputError> {
        store_protocol::claim_round(&round_id, claim)
    }

    fn renew(
        round_id: String,
        lease: Lease,
        lease_ttl_ms: u64,
    ) -> Result<Lease, ManagedInputError> {
        store_protocol::renew(&round_id, lease, lease_ttl_ms)
    }

    fn submit_responses(
        round_id: String,
        responses: String,
        idempotency_key: String,
    ) -> Result<ManagedInputRecord, ManagedInputError> {
        store_protocol::submit_responses(&round_id, &responses, &idempotency_key)
    }

    fn start_delivery(
        round_id: String,
        lease: Lease,
        delivery_idempotency_key: String,
    ) -> Result<ManagedInputRecord, ManagedInputError> {
        store_protocol::start_delivery(&round_id, lease, delivery_idempotency_key)
    }

    fn mark_delivered(
        round_id: String,
        lease: Lease,
    ) -> Result<ManagedInputRecord, ManagedInputError> {
        store_protocol::mark_delivered(&round_id, lease)
    }

    fn resolve(round_id: String, lease: Lease) -> Result<ManagedInputRecord, ManagedInputError> {
        store_protocol::resolve(&round_id, lease)
    }

    fn fail(
        round_id: String,
        lease: Lease,
        code: crate::m3::managed_input::types::FailureCode,
        message: String,
    ) -> Result<ManagedInputRecord, ManagedInputError> {
        store_protocol::fail(&round_id, lease, code, message)
    }

    fn fail_recovery(
        round_id: String,
        lease: Option<Lease>,
        message: String,
    ) -> Result<ManagedInputRecord, ManagedInputError> {
        store_protocol::fail_recovery(&round_id, lease, message)
    }

    fn redacted_responses(
        round_id: String,
    ) -> Result<Option<Vec<RedactedResponse>>, ManagedInputError> {
        store_protocol::redacted_responses(&round_id)
    }
}

impl runtime_export::Guest for Component {
    fn submit(
        spec: runtime_export::ExecutionSpec,
        owner_id: String,
    ) -> Result<runtime_export::ExecutionState, runtime_export::SubmitError> {
        runtime::worker::check_spec(&spec).map_err(runtime_export::SubmitError::Invalid)?;
        if owner_id.is_empty() {
            return Err(runtime_export::SubmitError::Invalid(
                "the submitter's owner id must not be empty".into(),
            ));
        }
        runtime::execution::insert(spec, &owner_id).map_err(runtime_export::SubmitError::Failed)
    }

    fn snapshot(execution_id: String) -> Result<runtime_export::ExecutionState, ManagedInputError> {
        runtime::execution::check_execution_id(&execution_id)?;
        runtime::execution::snapshot(&execution_id)
    }

    fn diagnostics(
        execution_id: String,
    ) -> Result<runtime_export::ExecutionDiagnostics, ManagedInputError> {
        runtime::execution::check_execution_id(&execution_id)?;
        runtime::execution::diagnostics(&execution_id)
    }

    fn list_executions(
        status: Option<crate::m3::managed_input::types::ExecutionStatus>,
        limit: Option<u32>,
        after: Option<crate::m3::managed_input::types::Cursor>,
    ) -> Result<Vec<runtime_export::ExecutionState>, ManagedInputError> {
        runtime::execution::list(status, limit, after)
    }

    fn pending_elicitation(
        execution_id: String,
    ) -> Result<Option<PendingRound>, ManagedInputError> {
        runtime::execution::check_execution_id(&execution_id)?;
        runtime::execution::pending_round(&execution_id)
    }

    fn respond(
        execution_id: String,
        round_id: String,
        responses: String,
        idempotency_key: String,
    ) -> Result<(), ManagedInputError> {
        runtime::execution::check_execution_id(&execution_id)?;
        runtime::execution::respond(&execution_id, &round_id, &responses, &idempotency_key)
    }

    fn request_cancel(
        execution_id: String,
    ) -> Result<runtime_export::ExecutionState, ManagedInputError> {
        runtime::execution::check_execution_id(&execution_id)?;
        runtime::execution::request_cancel(&execution_id)
    }

    fn run_execution(
        execution_id: String,
        owner_id: String,
    ) -> Result<runtime_export::ExecutionState, ManagedInputError> {
        runtime::worker::run(&execution_id, &owner_id)
    }

    fn recover() -> Result<runtime_export::RecoveryReport, ManagedInputError> {
        runtime::recovery::recover()
    }

    fn abandon(
        execution_id: String,
        owner_id: String,
        reason: String,
    ) -> Result<runtime_export::ExecutionState, ManagedInputError> {
        runtime::execution::check_execution_id(&execution_id)?;
        runtime::recovery::abandon(&execution_id, &owner_id, &reason)
    }

    fn renew_held(
        held: Vec<crate::m3::managed_input::types::HeldLeases>,
    ) -> Result<Vec<runtime_export::HeldRenewal>, ManagedInputError> {
        runtime::execution::renew_held(held)
    }
}

impl sandbox_probe::Guest for Component {
    fn run(which: sandbox_probe::Probe, amount: u64) -> String {
        probe::run(which, amount)
    }
}

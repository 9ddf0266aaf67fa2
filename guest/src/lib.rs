//! The m3 managed-input component.
//!
//! Every validation rule and every state-machine decision of managed elicitation input lives here;
//! the host only stores rows and tells the time. Built for `wasm32-wasip2` with wit-bindgen.
//!
//! Two artifacts come from this crate. With the default `engine` feature it is the `engine` world
//! (store protocol, runtime, sandbox probes over the host's imports). Without it (`--profile
//! policy --no-default-features`) it is the small `policy-only` world: validation and the pure
//! round state machine, importing nothing but `wasi:random`.

#![allow(missing_docs)] // the generated bindings carry the WIT documentation

#[cfg(feature = "engine")]
wit_bindgen::generate!({
    world: "engine",
    path: "../wit",
    additional_derives: [serde::Serialize, serde::Deserialize, PartialEq],
});

#[cfg(not(feature = "engine"))]
wit_bindgen::generate!({
    world: "policy-only",
    path: "../wit",
    generate_all,
    additional_derives: [serde::Serialize, serde::Deserialize, PartialEq],
});

/// Lease tokens in the policy-only component: getrandom's custom backend over the imported
/// `wasi:random/random` (the component is built for `wasm32-unknown-unknown`, which has no
/// source of randomness of its own).
#[cfg(not(feature = "engine"))]
mod entropy {
    /// getrandom 0.3's custom backend hook (`--cfg getrandom_backend="custom"`).
    ///
    /// # Safety
    ///
    /// getrandom calls it with `dest` valid for writes of `len` bytes.
    #[unsafe(no_mangle)]
    unsafe extern "Rust" fn __getrandom_v03_custom(
        dest: *mut u8,
        len: usize,
    ) -> Result<(), getrandom::Error> {
        let bytes = crate::wasi::random::random::get_random_bytes(len as u64);
        if bytes.len() != len {
            return Err(getrandom::Error::UNEXPECTED);
        }
        // SAFETY: `dest` is valid for `len` bytes (the caller's contract) and `bytes` has `len`.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), dest, len) };
        Ok(())
    }
}

pub mod canonical;
pub mod errors;
pub mod execution_rules;
pub mod lease;
pub mod lifecycle;
#[cfg(feature = "engine")]
pub mod mcp;
pub mod mutation;
#[cfg(feature = "engine")]
pub mod probe;
#[cfg(feature = "engine")]
pub mod record;
#[cfg(feature = "engine")]
pub mod redaction;
pub mod responses;
pub mod round_protocol;
#[cfg(feature = "engine")]
pub mod runtime;
pub mod schema;
#[cfg(feature = "engine")]
pub mod store_protocol;
#[cfg(feature = "engine")]
pub mod stored;
pub mod strict_json;
pub mod submission;
pub mod time;

use exports::m3::managed_input::{
    execution_rules as execution_rules_export, policy, round_protocol as round_protocol_export,
};
#[cfg(feature = "engine")]
use exports::m3::managed_input::{managed_input, runtime as runtime_export, sandbox_probe};
use m3::managed_input::types::{
    ElicitationResponse, ManagedInputError, ManagedInputRecord, PendingRound, Timestamp,
};
#[cfg(feature = "engine")]
use m3::managed_input::types::{Lease, RedactedResponse};

/// The component's export implementations.
struct Component;

impl policy::Guest for Component {
    fn check_requested_schema(schema: String) -> Result<(), ManagedInputError> {
        schema::check_requested_schema(&schema).map(|_| ())
    }

    fn validate_responses(
        round: PendingRound,
        responses: String,
    ) -> Result<Vec<(String, ElicitationResponse)>, ManagedInputError> {
        responses::validate_responses(&round.requests, &responses)
    }

    fn same_responses(
        a: Vec<(String, ElicitationResponse)>,
        b: Vec<(String, ElicitationResponse)>,
    ) -> bool {
        canonical::same_responses(&a, &b)
    }

    fn parse_human_input(value: String) -> Result<policy::HumanInput, policy::SubmissionError> {
        submission::parse_human_input(&value)
    }

    fn check_human_input(
        mode: policy::HumanInput,
        agent_has_plan: bool,
        store_resolves_managed_input: bool,
    ) -> Result<(), policy::SubmissionError> {
        submission::check_human_input(mode, agent_has_plan, store_resolves_managed_input)
    }

    fn check_tool_allow_list(
        server: String,
        tools: Vec<String>,
    ) -> Result<Vec<String>, policy::SubmissionError> {
        submission::check_tool_allow_list(&server, &tools)
    }
}

impl round_protocol_export::Guest for Component {
    fn decide(
        round_id: String,
        stored: Option<ManagedInputRecord>,
        operation: round_protocol_export::Operation,
        now: Timestamp,
    ) -> Result<round_protocol_export::Decision, ManagedInputError> {
        round_protocol::decide(&round_id, stored.as_ref(), operation, &now)
    }
}

impl execution_rules_export::Guest for Component {
    fn claim(
        execution_id: String,
        status: Option<m3::managed_input::types::ExecutionStatus>,
    ) -> Result<execution_rules_export::ClaimOutcome, ManagedInputError> {
        execution_rules::claim(&execution_id, status)
    }

    fn pending_round_of(
        execution_id: String,
        rounds: Vec<ManagedInputRecord>,
    ) -> Result<Option<PendingRound>, ManagedInputError> {
        execution_rules::pending_round_of(&execution_id, &rounds)
    }

    fn check_round_of(
        execution_id: String,
        round: ManagedInputRecord,
    ) -> Result<(), ManagedInputError> {
        execution_rules::check_round_of(&execution_id, &round)
    }
}

#[cfg(feature = "engine")]
impl managed_input::Guest for Component {
    fn create_round(
        round: m3::managed_input::types::NewRound,
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
        claim: m3::managed_input::types::OwnerClaim,
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
        code: m3::managed_input::types::FailureCode,
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

#[cfg(feature = "engine")]
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

    fn list_executions(
        status: Option<m3::managed_input::types::ExecutionStatus>,
        limit: Option<u32>,
        after: Option<m3::managed_input::types::Cursor>,
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
}

#[cfg(feature = "engine")]
impl sandbox_probe::Guest for Component {
    fn run(which: sandbox_probe::Probe, amount: u64) -> String {
        probe::run(which, amount)
    }
}

export!(Component);

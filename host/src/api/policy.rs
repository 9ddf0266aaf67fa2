//! The component's pure validation rules (`policy` export), callable without a database.

use crate::api::clock::SystemClock;
use crate::api::error::{EngineError, ErrorCode, ManagedInputError};
use crate::api::response::ElicitationResponse;
use crate::api::round::PendingElicitationRound;
use crate::api::submission::{self, HumanInput, ModelValidationError};
use crate::component::convert;
use crate::component::engine::ComponentRuntime;
use crate::component::instance::{GuestLimits, InstancePool};
use crate::component::sandbox::{self, ImportBinding};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The policy-only component (WIT world `policy-only`: exports `policy`, `round-protocol` and
/// `execution-rules`, imports only `wasi:random`), built by `build.rs` from the same guest crate
/// for size: the same rules as [`Policy`], for embedding in other component hosts (EMBEDDING.md).
pub static POLICY_COMPONENT: &[u8] = include_bytes!(env!("M3_POLICY_WASM_PATH"));

/// Largest response map [`Policy::validate_responses_json`] passes to the component.
pub const MAX_RESPONSES_BYTES: usize = 1024 * 1024;

/// A round in the component's form, ready to validate answers against.
#[derive(Debug, Clone)]
pub struct PreparedRound {
    round: crate::component::bindings::m3::managed_input::types::PendingRound,
}

/// The validation rules of the component, without storage.
#[derive(Debug)]
pub struct Policy {
    pool: InstancePool,
    runtime: Arc<ComponentRuntime>,
}

impl Policy {
    /// Rules from the process's shared component.
    pub fn new() -> Result<Self, EngineError> {
        Self::with_limits(GuestLimits::default())
    }

    /// Rules with explicit instance limits.
    pub fn with_limits(limits: GuestLimits) -> Result<Self, EngineError> {
        Ok(Self::with_runtime(ComponentRuntime::shared()?, limits))
    }

    /// Rules from an explicit component runtime (benchmarks, embedders with their own cache).
    pub(crate) fn with_runtime(runtime: Arc<ComponentRuntime>, limits: GuestLimits) -> Self {
        let clock = Arc::new(SystemClock);
        Self {
            pool: InstancePool::new(runtime.clone(), clock, None, limits),
            runtime,
        }
    }

    /// Converts a round once for repeated validation (its schemas are serialised only here).
    pub fn prepare(&self, round: &PendingElicitationRound) -> PreparedRound {
        PreparedRound {
            round: convert::pending_round(round),
        }
    }

    /// Checks a server's `requestedSchema` against the MCP form subset.
    pub fn check_requested_schema(
        &self,
        schema: &serde_json::Value,
    ) -> Result<(), ManagedInputError> {
        self.check_requested_schema_json(schema.to_string())
    }

    /// [`Policy::check_requested_schema`] for the schema's JSON text as given: the component
    /// parses it strictly (`malformed_json` for invalid JSON or duplicate keys).
    pub fn check_requested_schema_json(&self, text: String) -> Result<(), ManagedInputError> {
        self.pool
            .call(|b, s| {
                b.m3_managed_input_policy()
                    .call_check_requested_schema(s, &text)
            })?
            .map_err(|e| convert::error_back(&e))
    }

    /// Validates a response map (JSON text) against a round's requests; returns the canonical
    /// answers.
    pub fn validate_responses_json(
        &self,
        round: &PendingElicitationRound,
        responses: &str,
    ) -> Result<BTreeMap<String, ElicitationResponse>, ManagedInputError> {
        self.validate_prepared_json(&self.prepare(round), responses)
    }

    /// [`Policy::validate_responses_json`] for a round converted once with [`Policy::prepare`].
    pub fn validate_prepared_json(
        &self,
        round: &PreparedRound,
        responses: &str,
    ) -> Result<BTreeMap<String, ElicitationResponse>, ManagedInputError> {
        if responses.len() > MAX_RESPONSES_BYTES {
            return Err(ManagedInputError::edge_validation(
                ErrorCode::PayloadTooLarge,
                format!(
                    "responses are {} bytes; the limit is {MAX_RESPONSES_BYTES}",
                    responses.len()
                ),
            ));
        }
        let responses = responses.to_owned();
        let validated = self
            .pool
            .call(|b, s| {
                b.m3_managed_input_policy()
                    .call_validate_responses(s, &round.round, &responses)
            })?
            .map_err(|e| convert::error_back(&e))?;
        convert::responses_back(&validated)
    }

    /// Whether two answers are the same after canonicalisation.
    pub fn same_responses(
        &self,
        a: &BTreeMap<String, ElicitationResponse>,
        b: &BTreeMap<String, ElicitationResponse>,
    ) -> Result<bool, EngineError> {
        let (a, b) = (convert::responses(a), convert::responses(b));
        self.pool.call(|bind, s| {
            bind.m3_managed_input_policy()
                .call_same_responses(s, &a, &b)
        })
    }

    /// Parses a human-input value (`fail` or `managed`), as written in a CLI flag or config.
    pub fn parse_human_input(
        &self,
        value: &str,
    ) -> Result<Result<HumanInput, ModelValidationError>, EngineError> {
        let value = value.to_owned();
        let parsed = self.pool.call(|b, s| {
            b.m3_managed_input_policy()
                .call_parse_human_input(s, &value)
        })?;
        Ok(parsed
            .map(submission::from_wit)
            .map_err(ModelValidationError::from))
    }

    /// Checks a human-input mode against the agent (has it an elicitation plan?) and the store
    /// (does it resolve a managed-input store?).
    pub fn check_human_input(
        &self,
        mode: HumanInput,
        agent_has_plan: bool,
        store_resolves_managed_input: bool,
    ) -> Result<Result<(), ModelValidationError>, EngineError> {
        let checked = self.pool.call(|b, s| {
            b.m3_managed_input_policy().call_check_human_input(
                s,
                submission::to_wit(mode),
                agent_has_plan,
                store_resolves_managed_input,
            )
        })?;
        Ok(checked.map_err(ModelValidationError::from))
    }

    /// Checks a tool allow-list (`server:tool` entries) for the server binding `server`; returns
    /// the tool names.
    pub fn check_tool_allow_list(
        &self,
        server: &str,
        tools: &[String],
    ) -> Result<Result<Vec<String>, ModelValidationError>, EngineError> {
        let checked = self.pool.call(|b, s| {
            b.m3_managed_input_policy()
                .call_check_tool_allow_list(s, server, tools)
        })?;
        Ok(checked.map_err(ModelValidationError::from))
    }

    /// Runs one sandbox probe inside the component (see the WIT `sandbox-probe`).
    pub fn probe(
        &self,
        which: crate::component::sandbox::SandboxProbe,
        amount: u64,
    ) -> Result<String, EngineError> {
        self.pool.call(|b, s| {
            b.m3_managed_input_sandbox_probe()
                .call_run(s, which.into(), amount)
        })
    }

    /// The most fuel the last call used between two host calls: what the compute budget is
    /// checked against, the same on every machine.
    pub fn last_fuel_used(&self) -> u64 {
        self.pool.last_fuel_used()
    }

    /// Every import of the component and what the sandbox binds it to.
    pub fn imports(&self) -> Vec<ImportBinding> {
        sandbox::imports(&self.runtime.engine, &self.runtime.component)
    }
}

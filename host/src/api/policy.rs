//! The component's pure validation rules (`policy` export), callable without a database.

use crate::api::clock::SystemClock;
use crate::api::error::{EngineError, ErrorCode, ManagedInputError};
use crate::api::response::ElicitationResponse;
use crate::api::round::PendingElicitationRound;
use crate::api::submission::{self, HumanInput, ModelValidationError};
use crate::component::bindings::m3::managed_input::types;
use crate::component::convert;
use crate::component::engine::ComponentRuntime;
use crate::component::instance::{GuestLimits, Instance, InstancePool};
use crate::component::sandbox::{self, ImportBinding};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use wasmtime::component::ResourceAny;

/// The policy-only component (WIT world `policy-only`: exports `policy`, `round-protocol` and
/// `execution-rules`, imports only `wasi:random`), built by `m3-components` from the same guest crate
/// for size: the same rules as [`Policy`], for embedding in other component hosts (EMBEDDING.md).
pub static POLICY_COMPONENT: &[u8] = m3_components::POLICY;

/// Largest response map [`Policy::validate_responses_json`] passes to the component.
pub const MAX_RESPONSES_BYTES: usize = 1024 * 1024;

/// A round ready to validate answers against: the component's `prepared-round`, which keeps
/// the round's requests and compiled validators inside an instance of its own, so that each
/// validation carries only the answer. It holds that instance (its memory) until dropped; a
/// clone makes its own on first use.
pub struct PreparedRound {
    round: types::PendingRound,
    /// The instance and the resource in it, once made.
    kept: Mutex<Kept>,
}

/// Where a [`PreparedRound`]'s resource is.
enum Kept {
    /// Not made yet, or dropped after a trap.
    Empty,
    /// In use by one validation; others validate as one-off calls meanwhile.
    Busy,
    /// Made and idle: the instance that owns it, and the resource.
    Ready(Box<Instance>, ResourceAny),
}

impl Clone for PreparedRound {
    fn clone(&self) -> Self {
        Self {
            round: self.round.clone(),
            kept: Mutex::new(Kept::Empty),
        }
    }
}

impl std::fmt::Debug for PreparedRound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedRound")
            .field("round_id", &self.round.round_id)
            .finish_non_exhaustive()
    }
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

    /// Converts a round once for repeated validation: the component keeps its requests and
    /// compiled validators (made on first use), and each validation passes only the answer.
    pub fn prepare(&self, round: &PendingElicitationRound) -> PreparedRound {
        PreparedRound {
            round: convert::pending_round(round),
            kept: Mutex::new(Kept::Empty),
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
        if responses.len() > MAX_RESPONSES_BYTES {
            return Err(too_large(responses.len()));
        }
        self.validate_once(&convert::pending_round(round), responses)
    }

    /// [`Policy::validate_responses_json`] for a round converted once with [`Policy::prepare`].
    pub fn validate_prepared_json(
        &self,
        round: &PreparedRound,
        responses: &str,
    ) -> Result<BTreeMap<String, ElicitationResponse>, ManagedInputError> {
        if responses.len() > MAX_RESPONSES_BYTES {
            return Err(too_large(responses.len()));
        }
        let taken = {
            let mut kept = round.kept.lock().unwrap_or_else(|e| e.into_inner());
            match std::mem::replace(&mut *kept, Kept::Busy) {
                Kept::Busy => None,
                Kept::Empty => Some(None),
                Kept::Ready(instance, prepared) => Some(Some((*instance, prepared))),
            }
        };
        let Some(taken) = taken else {
            // Another thread is validating against this round's instance: validate as a
            // one-off call rather than wait for it.
            return self.validate_once(&round.round, responses);
        };
        let outcome = self.validate_kept(round, taken, responses);
        let mut kept = round.kept.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok((instance, prepared, validated)) => {
                *kept = Kept::Ready(Box::new(instance), prepared);
                drop(kept);
                convert::responses_back(validated.map_err(|e| convert::error_back(&e))?)
            }
            Err(error) => {
                // A trap may have left the instance in any state: drop it with the resource in
                // it; the next call makes both again.
                *kept = Kept::Empty;
                Err(error.into())
            }
        }
    }

    /// One validation against the round's kept resource, made (in an instance of its own) when
    /// `taken` holds none yet.
    #[allow(clippy::type_complexity)]
    fn validate_kept(
        &self,
        round: &PreparedRound,
        taken: Option<(Instance, ResourceAny)>,
        responses: &str,
    ) -> Result<
        (
            Instance,
            ResourceAny,
            Result<Vec<(String, types::ElicitationResponse)>, types::ManagedInputError>,
        ),
        EngineError,
    > {
        let (mut instance, prepared) = match taken {
            Some(kept) => kept,
            None => {
                let mut instance = self.pool.own_instance()?;
                let prepared = self.pool.call_on(&mut instance, |b, s| {
                    b.m3_managed_input_policy()
                        .prepared_round()
                        .call_constructor(s, &round.round)
                })?;
                (instance, prepared)
            }
        };
        let responses = responses.to_owned();
        let validated = self.pool.call_on(&mut instance, |b, s| {
            b.m3_managed_input_policy()
                .prepared_round()
                .call_validate_responses(s, prepared, &responses)
        })?;
        Ok((instance, prepared, validated))
    }

    /// `validate-responses` as a single call carrying the round, on any idle instance.
    fn validate_once(
        &self,
        round: &types::PendingRound,
        responses: &str,
    ) -> Result<BTreeMap<String, ElicitationResponse>, ManagedInputError> {
        let responses = responses.to_owned();
        let validated = self
            .pool
            .call(|b, s| {
                b.m3_managed_input_policy()
                    .call_validate_responses(s, round, &responses)
            })?
            .map_err(|e| convert::error_back(&e))?;
        convert::responses_back(validated)
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

/// The error for a response map over [`MAX_RESPONSES_BYTES`].
fn too_large(len: usize) -> ManagedInputError {
    ManagedInputError::edge_validation(
        ErrorCode::PayloadTooLarge,
        format!("responses are {len} bytes; the limit is {MAX_RESPONSES_BYTES}"),
    )
}

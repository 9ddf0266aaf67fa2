//! The policy-only exports (`policy`, `round-protocol`, `execution-rules`): in both components.

use super::{
    canonical, execution_rules, prepared_round, responses, round_protocol, schema, submission,
};
use crate::Component;
use crate::exports::m3::managed_input::{
    execution_rules as execution_rules_export, policy, round_protocol as round_protocol_export,
};
use crate::m3::managed_input::types::{
    ElicitationResponse, ManagedInputError, ManagedInputRecord, PendingRound, Timestamp,
};

impl policy::Guest for Component {
    type PreparedRound = prepared_round::PreparedRound;

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
    fn decide(
        execution_id: String,
        stored: Option<execution_rules_export::ExecutionHead>,
        operation: execution_rules_export::ExecutionOperation,
        now: Timestamp,
    ) -> Result<execution_rules_export::ExecutionDecision, ManagedInputError> {
        execution_rules::decide(&execution_id, stored.as_ref(), operation, &now)
    }

    fn claim(
        execution_id: String,
        status: Option<crate::m3::managed_input::types::ExecutionStatus>,
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

    fn check_acknowledged(round: ManagedInputRecord) -> Result<(), ManagedInputError> {
        execution_rules::check_acknowledged(&round)
    }
}

impl policy::GuestPreparedRound for prepared_round::PreparedRound {
    fn new(round: PendingRound) -> Self {
        Self::new(round)
    }

    fn validate_responses(
        &self,
        responses: String,
    ) -> Result<Vec<(String, ElicitationResponse)>, ManagedInputError> {
        Self::validate_responses(self, &responses)
    }
}

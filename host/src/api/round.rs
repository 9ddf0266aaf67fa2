//! Pending rounds and their requests, as callers see them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// The MCP operation category that produced a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// A `tools/call`.
    Tool,
    /// A `prompts/get`.
    Prompt,
    /// A `resources/read`.
    Resource,
}

/// Optional context carried with each request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestContext {
    /// The request's `_meta` object, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// The request's `task` object, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Value>,
    /// The server that produced this request, when it differs from the round's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The operation category of this request, when it differs from the round's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_kind: Option<OperationKind>,
    /// The tool name, prompt name or resource URI of this request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_name: Option<String>,
}

/// A form-mode request: structured data matching `requested_schema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormElicitationRequest {
    /// Text shown to the human.
    pub message: String,
    /// The server's `requestedSchema` (the MCP form subset).
    pub requested_schema: Value,
    /// Optional context.
    #[serde(flatten)]
    pub context: RequestContext,
}

/// A URL-mode request. Accepting it records consent only; the URL is never fetched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UrlElicitationRequest {
    /// Text shown to the human.
    pub message: String,
    /// The URL the human is asked to open.
    pub url: String,
    /// The server's elicitation id, when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation_id: Option<String>,
    /// Optional context.
    #[serde(flatten)]
    pub context: RequestContext,
}

/// One request of a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum ElicitationRequest {
    /// Form mode.
    Form(FormElicitationRequest),
    /// URL mode.
    Url(UrlElicitationRequest),
}

impl ElicitationRequest {
    /// A form request with no context.
    pub fn form(message: impl Into<String>, requested_schema: Value) -> Self {
        Self::Form(FormElicitationRequest {
            message: message.into(),
            requested_schema,
            context: RequestContext::default(),
        })
    }

    /// A URL request with no context.
    pub fn url(message: impl Into<String>, url: impl Into<String>) -> Self {
        Self::Url(UrlElicitationRequest {
            message: message.into(),
            url: url.into(),
            elicitation_id: None,
            context: RequestContext::default(),
        })
    }
}

/// A durable request round (the specification's `PendingElicitationRound`). Never holds lease
/// tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingElicitationRound {
    /// Durable identifier of this round.
    pub round_id: String,
    /// The execution that owns the round.
    pub execution_id: String,
    /// The logical tool, prompt or resource action (the same across its rounds).
    pub logical_operation_id: String,
    /// The server name that produced the request.
    pub server: String,
    /// The MCP operation category.
    pub operation_kind: OperationKind,
    /// Tool name, prompt name or resource URI.
    pub operation_name: String,
    /// Non-empty requests keyed by request key.
    pub requests: BTreeMap<String, ElicitationRequest>,
    /// When the round was created.
    pub created_at: DateTime<Utc>,
    /// The opaque `requestState`, kept verbatim for the server retry.
    pub request_state: Option<String>,
    /// When the round expires (`None` only when its creator asked for no deadline).
    pub deadline: Option<DateTime<Utc>>,
}

/// When a new round expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Deadline {
    /// The documented default: 24 hours after creation.
    #[default]
    Default,
    /// No deadline at all (an explicit choice: the round may wait forever).
    None,
    /// This instant (must be in the future).
    At(DateTime<Utc>),
}

/// The worker that owns a round, and for how long its lease lasts unless renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerClaim {
    /// The worker's id.
    pub owner_id: String,
    /// Lease duration (default 15 s).
    pub lease_ttl: Duration,
}

impl OwnerClaim {
    /// The default lease duration.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

    /// A claim with the default lease duration.
    pub fn new(owner_id: impl Into<String>) -> Self {
        Self {
            owner_id: owner_id.into(),
            lease_ttl: Self::DEFAULT_TTL,
        }
    }
}

/// Everything needed to create a round.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRound {
    /// Durable identifier of the new round.
    pub round_id: String,
    /// The owning execution.
    pub execution_id: String,
    /// The logical operation.
    pub logical_operation_id: String,
    /// The server name.
    pub server: String,
    /// The operation category.
    pub operation_kind: OperationKind,
    /// The operation's name.
    pub operation_name: String,
    /// The requests, keyed by request key.
    pub requests: BTreeMap<String, ElicitationRequest>,
    /// The server's opaque `requestState`.
    pub request_state: Option<String>,
    /// When the round expires.
    pub deadline: Deadline,
    /// Zero-based index of this round within its operation.
    pub round_index: u32,
    /// How many rounds the operation may have.
    pub round_limit: u32,
    /// The creating worker (`None`: unowned until claimed).
    pub owner: Option<OwnerClaim>,
    /// The operation's parameters (a JSON object).
    pub operation_parameters: serde_json::Map<String, Value>,
    /// Harness session metadata.
    pub harness: HarnessMetadata,
}

impl NewRound {
    /// A first round (index 0 of 10) of a tool call, with the default deadline and no owner.
    pub fn new(
        round_id: impl Into<String>,
        execution_id: impl Into<String>,
        server: impl Into<String>,
        tool: impl Into<String>,
        requests: BTreeMap<String, ElicitationRequest>,
    ) -> Self {
        let round_id = round_id.into();
        let tool = tool.into();
        Self {
            logical_operation_id: format!("{round_id}-operation"),
            round_id,
            execution_id: execution_id.into(),
            server: server.into(),
            operation_kind: OperationKind::Tool,
            operation_name: tool,
            requests,
            request_state: None,
            deadline: Deadline::Default,
            round_index: 0,
            round_limit: 10,
            owner: None,
            operation_parameters: serde_json::Map::new(),
            harness: Default::default(),
        }
    }

    /// The same round, owned by `owner`.
    pub fn owned_by(mut self, owner: OwnerClaim) -> Self {
        self.owner = Some(owner);
        self
    }
}

/// Harness session metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HarnessMetadata {
    /// The harness's session id.
    pub session_id: Option<String>,
    /// The native resume token.
    pub resume_token: Option<String>,
    /// The harness turn id.
    pub turn_id: Option<String>,
}

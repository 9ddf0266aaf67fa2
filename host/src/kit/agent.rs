//! Agent specs, scripts and elicitation plans.

use crate::response::ElicitationResponse;
use serde::{Deserialize, Serialize};

/// The agent harness that runs a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Harness {
    /// No model: the kit itself is the MCP client and calls the script's tools in order.
    #[default]
    Scripted,
    /// The Codex CLI (`codex app-server`) with a model: one agent per model.
    Codex,
}

impl Harness {
    /// The harness's name (`scripted`, `codex`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scripted => "scripted",
            Self::Codex => "codex",
        }
    }
}

/// A Responses-compatible model endpoint for Codex (any base URL: a service, or a loopback
/// server in tests).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelProvider {
    /// A display name.
    pub name: String,
    /// The base URL (`http://127.0.0.1:PORT/v1`).
    pub base_url: String,
    /// The wire API: `responses` (the default) or `chat`.
    pub wire_api: String,
    /// Whether Codex must send OpenAI credentials (from its environment or login).
    pub requires_openai_auth: bool,
}

impl ModelProvider {
    /// A Responses API at `base_url` that needs no OpenAI credentials.
    pub fn responses(name: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            base_url: base_url.into(),
            wire_api: "responses".into(),
            requires_openai_auth: false,
        }
    }
}

/// What the kit answers to Codex's own permission requests (command and file-change approvals,
/// approvals of tools outside the allow-list). Calls to allow-listed tools are always approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionPolicy {
    /// Decline them (the default).
    #[default]
    Decline,
}

/// Settings of the `codex` harness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodexOptions {
    /// The `codex` program: a path, or a name looked up in the kit's `PATH` (default `codex`).
    pub binary: String,
    /// The model endpoint (default: Codex's own configuration).
    pub model_provider: Option<ModelProvider>,
    /// How long a turn may run before the kit interrupts it (default 10 minutes; Codex retries
    /// forever when no model answers).
    pub turn_deadline: std::time::Duration,
    /// How long any request to Codex may go unanswered (default 60 s).
    pub request_timeout: std::time::Duration,
    /// Codex's own permission requests.
    pub permission_policy: PermissionPolicy,
}

impl Default for CodexOptions {
    fn default() -> Self {
        Self {
            binary: "codex".into(),
            model_provider: None,
            turn_deadline: std::time::Duration::from_secs(600),
            request_timeout: std::time::Duration::from_secs(60),
            permission_policy: PermissionPolicy::Decline,
        }
    }
}

/// One tool call of a script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptStep {
    /// `server:tool`.
    pub tool: String,
    /// The tool's arguments (a JSON object).
    #[serde(default = "empty_object")]
    pub arguments: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// A scripted agent's tool calls, in the JSON form `{"steps": [{"tool", "arguments"}]}`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The calls, in order.
    pub steps: Vec<ScriptStep>,
}

impl Script {
    /// A script of one call.
    pub fn call(tool: impl Into<String>, arguments: serde_json::Value) -> Self {
        Self::default().then(tool, arguments)
    }

    /// Appends a call.
    pub fn then(mut self, tool: impl Into<String>, arguments: serde_json::Value) -> Self {
        self.steps.push(ScriptStep {
            tool: tool.into(),
            arguments,
        });
        self
    }

    /// Reads the JSON form (as the CLI does from a file).
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// Which rounds a plan entry answers; every given field must equal the round's.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanMatch {
    /// The server name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The tool name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_name: Option<String>,
    /// The request key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_key: Option<String>,
}

/// One elicitation plan entry: the first matching unused entry answers a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanEntry {
    /// Which requests it answers.
    #[serde(rename = "match")]
    pub matcher: PlanMatch,
    /// The answer (validated like any other).
    pub response: ElicitationResponse,
}

/// An agent to create with [`crate::AsyncMcpTestKit::agents`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentSpec {
    /// The harness.
    pub harness: Harness,
    /// Models (one agent each); the scripted harness takes none.
    pub models: Vec<String>,
    /// The scripted harness's tool calls.
    pub script: Script,
    /// Answers for human input mode `fail` (an empty plan is still a plan).
    pub elicitation_plan: Option<Vec<PlanEntry>>,
    /// Settings of the `codex` harness.
    pub codex: CodexOptions,
}

impl AgentSpec {
    /// A scripted agent running `script`.
    pub fn scripted(script: Script) -> Self {
        Self {
            harness: Harness::Scripted,
            script,
            ..Self::default()
        }
    }

    /// Codex agents, one per model.
    pub fn codex<I, S>(models: I, options: CodexOptions) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            harness: Harness::Codex,
            models: models.into_iter().map(Into::into).collect(),
            codex: options,
            ..Self::default()
        }
    }

    /// Gives the agent an elicitation plan.
    pub fn with_plan(mut self, plan: Vec<PlanEntry>) -> Self {
        self.elicitation_plan = Some(plan);
        self
    }
}

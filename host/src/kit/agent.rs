//! Agent specs, scripts and elicitation plans.

use crate::api::response::ElicitationResponse;
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
    /// The Claude Code CLI (`claude -p` over stream-json) with a model: one agent per model.
    #[serde(rename = "claude-code", alias = "claude_code")]
    ClaudeCode,
}

impl Harness {
    /// The harness's name (`scripted`, `codex`, `claude-code`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scripted => "scripted",
            Self::Codex => "codex",
            Self::ClaudeCode => "claude-code",
        }
    }

    /// Whether the harness runs an agent with a model (one agent per model).
    pub fn has_models(self) -> bool {
        !matches!(self, Self::Scripted)
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
    /// Whether Codex sends the OpenAI sign-in (the `auth.json` the private `CODEX_HOME`
    /// receives, see [`CodexCredentials`]) as the bearer token.
    #[serde(default)]
    pub requires_openai_auth: bool,
    /// The environment variable (in the kit's `env`) whose value Codex sends as the API key
    /// (`Authorization: Bearer`); only Codex's own environment holds it.
    #[serde(default)]
    pub env_key: Option<String>,
    /// Extra HTTP headers with fixed values. They are stored with the execution: put secrets
    /// in [`ModelProvider::env_http_headers`].
    #[serde(default)]
    pub http_headers: std::collections::BTreeMap<String, String>,
    /// Extra HTTP headers whose values Codex reads from environment variables of the kit's
    /// `env` (header name -> variable name).
    #[serde(default)]
    pub env_http_headers: std::collections::BTreeMap<String, String>,
    /// How often Codex retries a failed model request or stream (default: Codex's own, 5).
    #[serde(default)]
    pub max_retries: Option<u32>,
}

impl ModelProvider {
    /// A Responses API at `base_url` that needs no OpenAI credentials.
    pub fn responses(name: impl Into<String>, base_url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            base_url: base_url.into(),
            wire_api: "responses".into(),
            requires_openai_auth: false,
            env_key: None,
            http_headers: Default::default(),
            env_http_headers: Default::default(),
            max_retries: None,
        }
    }

    /// The API key comes from the environment variable `name` of the kit's `env`.
    pub fn env_key(mut self, name: impl Into<String>) -> Self {
        self.env_key = Some(name.into());
        self
    }

    /// Codex sends the copied OpenAI sign-in (`auth.json`) as the bearer token.
    pub fn with_openai_auth(mut self) -> Self {
        self.requires_openai_auth = true;
        self
    }
}

/// Where the private `CODEX_HOME` of each execution gets the user's Codex sign-in
/// (`auth.json`, copied owner-only; nothing else of their configuration or history).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CodexCredentials {
    /// `$CODEX_HOME` of this process, else `~/.codex` (the default): the spec's "signed-in
    /// Codex account".
    #[default]
    UserHome,
    /// Another Codex home directory.
    From(std::path::PathBuf),
    /// No sign-in: only keyless endpoints or an [`ModelProvider::env_key`] work.
    None,
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
    /// The model endpoint (default: Codex's own provider, OpenAI, with the copied sign-in).
    pub model_provider: Option<ModelProvider>,
    /// How long a turn may run before the kit interrupts it (default 10 minutes; Codex retries
    /// forever when no model answers).
    pub turn_deadline: std::time::Duration,
    /// How long any request to Codex may go unanswered (default 60 s).
    pub request_timeout: std::time::Duration,
    /// Codex's own permission requests (outside the allow-list).
    pub permission_policy: PermissionPolicy,
    /// Where the sign-in comes from.
    pub credentials: CodexCredentials,
}

impl Default for CodexOptions {
    fn default() -> Self {
        Self {
            binary: "codex".into(),
            model_provider: None,
            turn_deadline: std::time::Duration::from_secs(600),
            request_timeout: std::time::Duration::from_secs(60),
            permission_policy: PermissionPolicy::Decline,
            credentials: CodexCredentials::UserHome,
        }
    }
}

/// Where the private `CLAUDE_CONFIG_DIR` of each execution gets the user's Claude Code sign-in
/// (`.credentials.json`, copied owner-only; nothing else of their configuration or history).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ClaudeCodeCredentials {
    /// `$CLAUDE_CONFIG_DIR` of this process, else `~/.claude` (the default).
    #[default]
    UserConfig,
    /// Another Claude Code configuration directory.
    From(std::path::PathBuf),
    /// No sign-in: the model's key is `ANTHROPIC_API_KEY` or `ANTHROPIC_AUTH_TOKEN` of the
    /// kit's `env`, or the endpoint needs none.
    None,
}

/// Settings of the `claude-code` harness. The model's key, when one is used, is
/// `ANTHROPIC_API_KEY` (sent as `x-api-key`) or `ANTHROPIC_AUTH_TOKEN` (a bearer token) of the
/// kit's `env`: Claude Code gets it, the MCP server never does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaudeCodeOptions {
    /// The `claude` program: a path, or a name looked up in the kit's `PATH` (default `claude`).
    pub binary: String,
    /// The Messages API's base URL (default: Anthropic's): a gateway, or a loopback server in
    /// tests.
    pub base_url: Option<String>,
    /// How long a turn may run before the kit interrupts it (default 10 minutes; time spent
    /// waiting for answers does not count).
    pub turn_deadline: std::time::Duration,
    /// How long Claude Code may take to start its session or to end an interrupted turn
    /// (default 60 s).
    pub request_timeout: std::time::Duration,
    /// Claude Code's own permission prompts (outside the allow-list).
    pub permission_policy: PermissionPolicy,
    /// Where the sign-in comes from.
    pub credentials: ClaudeCodeCredentials,
    /// How often Claude Code retries a failed model request (0 to 100; default: Claude Code's
    /// own, 10, which takes about three minutes against an endpoint that keeps failing).
    pub max_retries: Option<u32>,
}

impl Default for ClaudeCodeOptions {
    fn default() -> Self {
        Self {
            binary: "claude".into(),
            base_url: None,
            turn_deadline: std::time::Duration::from_secs(600),
            request_timeout: std::time::Duration::from_secs(60),
            permission_policy: PermissionPolicy::Decline,
            credentials: ClaudeCodeCredentials::UserConfig,
            max_retries: None,
        }
    }
}

/// One step of a script: a tool call, a prompt to get or a resource to read, each one logical
/// operation whose elicitations become rounds of that kind. JSON: `{"tool": "server:tool",
/// "arguments": {..}}`, `{"prompt": "server:name", "arguments": {..}}` (string values) or
/// `{"resource": "server:uri"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "StepJson", into = "StepJson")]
pub enum ScriptStep {
    /// `tools/call` of an allow-listed tool.
    Tool {
        /// `server:tool`.
        tool: String,
        /// The tool's arguments (a JSON object).
        arguments: serde_json::Value,
    },
    /// `prompts/get`.
    Prompt {
        /// `server:name`.
        prompt: String,
        /// The prompt's arguments (a JSON object of strings).
        arguments: serde_json::Value,
    },
    /// `resources/read`.
    Resource {
        /// `server:uri`.
        resource: String,
    },
}

/// The JSON form of a [`ScriptStep`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepJson {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    arguments: Option<serde_json::Value>,
}

impl TryFrom<StepJson> for ScriptStep {
    type Error = String;

    fn try_from(step: StepJson) -> Result<Self, String> {
        let arguments = || step.arguments.clone().unwrap_or_else(empty_object);
        match (&step.tool, &step.prompt, &step.resource) {
            (Some(tool), None, None) => Ok(Self::Tool {
                tool: tool.clone(),
                arguments: arguments(),
            }),
            (None, Some(prompt), None) => Ok(Self::Prompt {
                prompt: prompt.clone(),
                arguments: arguments(),
            }),
            (None, None, Some(resource)) if step.arguments.is_none() => Ok(Self::Resource {
                resource: resource.clone(),
            }),
            (None, None, Some(_)) => Err("a `resource` step takes no `arguments`".into()),
            _ => Err("a script step has exactly one of `tool`, `prompt` or `resource`".into()),
        }
    }
}

impl From<ScriptStep> for StepJson {
    fn from(step: ScriptStep) -> Self {
        let none = Self {
            tool: None,
            prompt: None,
            resource: None,
            arguments: None,
        };
        match step {
            ScriptStep::Tool { tool, arguments } => Self {
                tool: Some(tool),
                arguments: Some(arguments),
                ..none
            },
            ScriptStep::Prompt { prompt, arguments } => Self {
                prompt: Some(prompt),
                arguments: Some(arguments),
                ..none
            },
            ScriptStep::Resource { resource } => Self {
                resource: Some(resource),
                ..none
            },
        }
    }
}

impl ScriptStep {
    /// `server:name` of the tool, prompt or resource.
    pub fn target(&self) -> &str {
        match self {
            Self::Tool { tool, .. } => tool,
            Self::Prompt { prompt, .. } => prompt,
            Self::Resource { resource } => resource,
        }
    }
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// A scripted agent's operations, in the JSON form `{"steps": [step, ..]}` (see [`ScriptStep`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The steps, in order.
    pub steps: Vec<ScriptStep>,
}

impl Script {
    /// A script of one tool call.
    pub fn call(tool: impl Into<String>, arguments: serde_json::Value) -> Self {
        Self::default().then(tool, arguments)
    }

    /// Appends a tool call (`server:tool`).
    pub fn then(mut self, tool: impl Into<String>, arguments: serde_json::Value) -> Self {
        self.steps.push(ScriptStep::Tool {
            tool: tool.into(),
            arguments,
        });
        self
    }

    /// Appends a `prompts/get` of `server:name` (string arguments).
    pub fn then_prompt(mut self, prompt: impl Into<String>, arguments: serde_json::Value) -> Self {
        self.steps.push(ScriptStep::Prompt {
            prompt: prompt.into(),
            arguments,
        });
        self
    }

    /// Appends a `resources/read` of `server:uri`.
    pub fn then_resource(mut self, resource: impl Into<String>) -> Self {
        self.steps.push(ScriptStep::Resource {
            resource: resource.into(),
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
    /// Settings of the `claude-code` harness.
    pub claude_code: ClaudeCodeOptions,
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

    /// Claude Code agents, one per model.
    pub fn claude_code<I, S>(models: I, options: ClaudeCodeOptions) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            harness: Harness::ClaudeCode,
            models: models.into_iter().map(Into::into).collect(),
            claude_code: options,
            ..Self::default()
        }
    }

    /// Gives the agent an elicitation plan.
    pub fn with_plan(mut self, plan: Vec<PlanEntry>) -> Self {
        self.elicitation_plan = Some(plan);
        self
    }
}

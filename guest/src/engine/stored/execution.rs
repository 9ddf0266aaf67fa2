//! The stored document of an execution (format 1): its submission, cancel flag, results so far,
//! outcome, what its worker started, and the token of its worker's lease.

use super::values::{FailureCode, OperationKind};
use crate::exports::m3::managed_input::runtime as wit;
use crate::m3::managed_input::process as wit_process;
use serde::{Deserialize, Serialize};

/// An execution's document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionDocument {
    /// The format it was written in (absent: 1).
    #[serde(default = "super::first_format")]
    pub format: u32,
    /// The submission.
    pub spec: ExecutionSpec,
    /// A cancel was requested.
    pub cancel_requested: bool,
    /// Tool results so far (kept as they arrive, so a crash keeps them).
    pub tool_results: Vec<ToolResult>,
    /// The final outcome, once finished.
    pub outcome: Option<ExecutionOutcome>,
    /// What the worker started (absent in early documents).
    #[serde(default)]
    pub spawned: Option<Spawned>,
    /// The token of the lease on the row (owner and expiry are the row's columns); absent in
    /// early documents and while nobody holds the execution.
    #[serde(default)]
    pub lease_token: Option<String>,
    /// What the harness did or reported (absent in early documents), oldest first, bounded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<ExecutionEvent>,
    /// How many events were not kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub events_dropped: u32,
    /// The tail of the harness's stderr, kept when it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
}

/// What a lease renewal reads of an execution's document: the lease's token and the cancel
/// flag. The rest is skipped unread (and the document is kept byte for byte: a renewal moves
/// only the row's expiry).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ExecutionHeadDocument {
    /// The format it was written in (absent: 1).
    #[serde(default = "super::first_format")]
    pub format: u32,
    /// A cancel was requested.
    pub cancel_requested: bool,
    /// The token of the lease on the row.
    #[serde(default)]
    pub lease_token: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One event of an execution's harness.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionEvent {
    pub at: super::values::Timestamp,
    pub kind: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionSpec {
    pub harness: String,
    pub codex: Option<CodexSettings>,
    /// Absent in documents written before the `claude-code` harness, and for other harnesses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_code: Option<ClaudeCodeSettings>,
    pub model: Option<String>,
    pub prompt: String,
    pub script: String,
    pub server: ServerBinding,
    pub tools: Vec<String>,
    pub human_input: HumanInputMode,
    pub plan: Option<String>,
    pub round_limit: u32,
    pub lease_ttl_ms: u64,
    pub lease_renew_ms: u64,
    pub round_deadline_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodexSettings {
    pub binary: String,
    pub model_provider: Option<ModelProvider>,
    /// Absent in early documents: no sign-in was copied then.
    #[serde(default)]
    pub credentials_from: Option<String>,
    /// Absent in early documents: `decline`, the only policy then.
    #[serde(default)]
    pub permission_policy: PermissionPolicy,
    pub turn_deadline_ms: u64,
    pub request_timeout_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaudeCodeSettings {
    pub binary: String,
    pub base_url: Option<String>,
    pub credentials_from: Option<String>,
    pub permission_policy: PermissionPolicy,
    pub turn_deadline_ms: u64,
    pub request_timeout_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub enum PermissionPolicy {
    #[default]
    Decline,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelProvider {
    pub name: String,
    pub base_url: String,
    pub wire_api: String,
    pub requires_openai_auth: bool,
    #[serde(default)]
    pub env_key: Option<String>,
    #[serde(default)]
    pub http_headers: Vec<(String, String)>,
    #[serde(default)]
    pub env_http_headers: Vec<(String, String)>,
    #[serde(default)]
    pub max_retries: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerBinding {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub cwd: Option<String>,
    pub era: EraChoice,
    pub env_names: Vec<String>,
    /// A Streamable HTTP server's URL (absent in early documents and for stdio servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The names of the headers the host adds (absent in early documents).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub header_names: Vec<String>,
    /// An HTTP server's delivery timeout (absent in early documents and when the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum EraChoice {
    Auto,
    Legacy,
    Modern,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum HumanInputMode {
    Fail,
    Managed,
}

/// One tool result in a row of its own (an execution item of kind [`TOOL_RESULT_ITEM`]); the
/// execution's document is not rewritten for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultItem {
    #[serde(default = "super::first_format")]
    pub format: u32,
    #[serde(flatten)]
    pub result: ToolResult,
}

impl super::Document for ExecutionDocument {
    fn format(&self) -> u32 {
        self.format
    }
}

impl super::Document for ExecutionHeadDocument {
    fn format(&self) -> u32 {
        self.format
    }
}

impl super::Document for ToolResultItem {
    fn format(&self) -> u32 {
        self.format
    }
}

/// The item kind of a tool result.
pub const TOOL_RESULT_ITEM: &str = "tool-result";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub tool: String,
    pub result: String,
    pub kind: Option<OperationKind>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionOutcome {
    pub kind: OutcomeKind,
    pub failure: Option<ExecutionFailure>,
    pub tool_results: Vec<ToolResult>,
    pub final_message: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum OutcomeKind {
    Succeeded,
    Failed,
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionFailure {
    pub kind: FailureKind,
    pub code: Option<FailureCode>,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum FailureKind {
    OperationTimeout,
    RoundFailed,
    ServerError,
    InvalidSubmission,
    ModelError,
    ToolNotFound,
    EngineError,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spawned {
    pub scratch: String,
    pub process_group: u32,
    pub started_at: u64,
}

impl From<&wit::ExecutionSpec> for ExecutionSpec {
    fn from(s: &wit::ExecutionSpec) -> Self {
        ExecutionSpec {
            harness: s.harness.clone(),
            codex: s.codex.as_ref().map(|c| CodexSettings {
                binary: c.binary.clone(),
                model_provider: c.model_provider.as_ref().map(|p| ModelProvider {
                    name: p.name.clone(),
                    base_url: p.base_url.clone(),
                    wire_api: p.wire_api.clone(),
                    requires_openai_auth: p.requires_openai_auth,
                    env_key: p.env_key.clone(),
                    http_headers: p.http_headers.clone(),
                    env_http_headers: p.env_http_headers.clone(),
                    max_retries: p.max_retries,
                }),
                credentials_from: c.credentials_from.clone(),
                permission_policy: match c.permission_policy {
                    wit::PermissionPolicy::Decline => PermissionPolicy::Decline,
                },
                turn_deadline_ms: c.turn_deadline_ms,
                request_timeout_ms: c.request_timeout_ms,
            }),
            claude_code: s.claude_code.as_ref().map(|c| ClaudeCodeSettings {
                binary: c.binary.clone(),
                base_url: c.base_url.clone(),
                credentials_from: c.credentials_from.clone(),
                permission_policy: match c.permission_policy {
                    wit::PermissionPolicy::Decline => PermissionPolicy::Decline,
                },
                turn_deadline_ms: c.turn_deadline_ms,
                request_timeout_ms: c.request_timeout_ms,
                max_retries: c.max_retries,
            }),
            model: s.model.clone(),
            prompt: s.prompt.clone(),
            script: s.script.clone(),
            server: ServerBinding {
                name: s.server.name.clone(),
                command: s.server.command.clone(),
                args: s.server.args.clone(),
                cwd: s.server.cwd.clone(),
                era: match s.server.era {
                    wit::EraChoice::Auto => EraChoice::Auto,
                    wit::EraChoice::Legacy => EraChoice::Legacy,
                    wit::EraChoice::Modern => EraChoice::Modern,
                },
                env_names: s.server.env_names.clone(),
                url: s.server.url.clone(),
                header_names: s.server.header_names.clone(),
                delivery_timeout_ms: s.server.delivery_timeout_ms,
            },
            tools: s.tools.clone(),
            human_input: match s.human_input {
                wit::HumanInputMode::Fail => HumanInputMode::Fail,
                wit::HumanInputMode::Managed => HumanInputMode::Managed,
            },
            plan: s.plan.clone(),
            round_limit: s.round_limit,
            lease_ttl_ms: s.lease_ttl_ms,
            lease_renew_ms: s.lease_renew_ms,
            round_deadline_ms: s.round_deadline_ms,
        }
    }
}

impl From<ExecutionSpec> for wit::ExecutionSpec {
    fn from(s: ExecutionSpec) -> Self {
        wit::ExecutionSpec {
            harness: s.harness,
            codex: s.codex.map(|c| wit::CodexSettings {
                binary: c.binary,
                model_provider: c.model_provider.map(|p| wit::ModelProvider {
                    name: p.name,
                    base_url: p.base_url,
                    wire_api: p.wire_api,
                    requires_openai_auth: p.requires_openai_auth,
                    env_key: p.env_key,
                    http_headers: p.http_headers,
                    env_http_headers: p.env_http_headers,
                    max_retries: p.max_retries,
                }),
                credentials_from: c.credentials_from,
                permission_policy: match c.permission_policy {
                    PermissionPolicy::Decline => wit::PermissionPolicy::Decline,
                },
                turn_deadline_ms: c.turn_deadline_ms,
                request_timeout_ms: c.request_timeout_ms,
            }),
            claude_code: s.claude_code.map(|c| wit::ClaudeCodeSettings {
                binary: c.binary,
                base_url: c.base_url,
                credentials_from: c.credentials_from,
                permission_policy: match c.permission_policy {
                    PermissionPolicy::Decline => wit::PermissionPolicy::Decline,
                },
                turn_deadline_ms: c.turn_deadline_ms,
                request_timeout_ms: c.request_timeout_ms,
                max_retries: c.max_retries,
            }),
            model: s.model,
            prompt: s.prompt,
            script: s.script,
            server: wit::ServerBinding {
                name: s.server.name,
                command: s.server.command,
                args: s.server.args,
                cwd: s.server.cwd,
                era: match s.server.era {
                    EraChoice::Auto => wit::EraChoice::Auto,
                    EraChoice::Legacy => wit::EraChoice::Legacy,
                    EraChoice::Modern => wit::EraChoice::Modern,
                },
                env_names: s.server.env_names,
                url: s.server.url,
                header_names: s.server.header_names,
                delivery_timeout_ms: s.server.delivery_timeout_ms,
            },
            tools: s.tools,
            human_input: match s.human_input {
                HumanInputMode::Fail => wit::HumanInputMode::Fail,
                HumanInputMode::Managed => wit::HumanInputMode::Managed,
            },
            plan: s.plan,
            round_limit: s.round_limit,
            lease_ttl_ms: s.lease_ttl_ms,
            lease_renew_ms: s.lease_renew_ms,
            round_deadline_ms: s.round_deadline_ms,
        }
    }
}

impl From<&wit::ToolResult> for ToolResult {
    fn from(r: &wit::ToolResult) -> Self {
        ToolResult {
            tool: r.tool.clone(),
            result: r.result.clone(),
            kind: r.kind.map(OperationKind::from),
        }
    }
}

impl From<ToolResult> for wit::ToolResult {
    fn from(r: ToolResult) -> Self {
        wit::ToolResult {
            tool: r.tool,
            result: r.result,
            kind: r.kind.map(Into::into),
        }
    }
}

impl From<&wit::ExecutionOutcome> for ExecutionOutcome {
    fn from(o: &wit::ExecutionOutcome) -> Self {
        ExecutionOutcome {
            kind: match o.kind {
                wit::OutcomeKind::Succeeded => OutcomeKind::Succeeded,
                wit::OutcomeKind::Failed => OutcomeKind::Failed,
                wit::OutcomeKind::Cancelled => OutcomeKind::Cancelled,
            },
            failure: o.failure.as_ref().map(|f| ExecutionFailure {
                kind: match f.kind {
                    wit::FailureKind::OperationTimeout => FailureKind::OperationTimeout,
                    wit::FailureKind::RoundFailed => FailureKind::RoundFailed,
                    wit::FailureKind::ServerError => FailureKind::ServerError,
                    wit::FailureKind::InvalidSubmission => FailureKind::InvalidSubmission,
                    wit::FailureKind::ModelError => FailureKind::ModelError,
                    wit::FailureKind::ToolNotFound => FailureKind::ToolNotFound,
                    wit::FailureKind::EngineError => FailureKind::EngineError,
                },
                code: f.code.map(FailureCode::from),
                message: f.message.clone(),
            }),
            tool_results: o.tool_results.iter().map(ToolResult::from).collect(),
            final_message: o.final_message.clone(),
        }
    }
}

impl From<ExecutionOutcome> for wit::ExecutionOutcome {
    fn from(o: ExecutionOutcome) -> Self {
        wit::ExecutionOutcome {
            kind: match o.kind {
                OutcomeKind::Succeeded => wit::OutcomeKind::Succeeded,
                OutcomeKind::Failed => wit::OutcomeKind::Failed,
                OutcomeKind::Cancelled => wit::OutcomeKind::Cancelled,
            },
            failure: o.failure.map(|f| wit::ExecutionFailure {
                kind: match f.kind {
                    FailureKind::OperationTimeout => wit::FailureKind::OperationTimeout,
                    FailureKind::RoundFailed => wit::FailureKind::RoundFailed,
                    FailureKind::ServerError => wit::FailureKind::ServerError,
                    FailureKind::InvalidSubmission => wit::FailureKind::InvalidSubmission,
                    FailureKind::ModelError => wit::FailureKind::ModelError,
                    FailureKind::ToolNotFound => wit::FailureKind::ToolNotFound,
                    FailureKind::EngineError => wit::FailureKind::EngineError,
                },
                code: f.code.map(Into::into),
                message: f.message,
            }),
            tool_results: o.tool_results.into_iter().map(Into::into).collect(),
            final_message: o.final_message,
        }
    }
}

impl From<&wit_process::Spawned> for Spawned {
    fn from(s: &wit_process::Spawned) -> Self {
        Spawned {
            scratch: s.scratch.clone(),
            process_group: s.process_group,
            started_at: s.started_at,
        }
    }
}

impl From<Spawned> for wit_process::Spawned {
    fn from(s: Spawned) -> Self {
        wit_process::Spawned {
            scratch: s.scratch,
            process_group: s.process_group,
            started_at: s.started_at,
        }
    }
}

//! What a caller sees of an execution: its lifecycle, its outcome, and the typed errors of the
//! execution API.

use crate::api::record::FailureCode;
use crate::component::bindings::exports::m3::managed_input::runtime as wit;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// The lifecycle of an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Submitted; its worker has not started it yet.
    Queued,
    /// Its worker drives it.
    Running,
    /// Running, and one of its rounds is pending: it waits for an answer.
    WaitingForInput,
    /// Ended; the outcome is final.
    Finished,
}

impl ExecutionStatus {
    /// The name scripts see: `queued`, `running`, `waiting_for_input`, `finished`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::WaitingForInput => "waiting_for_input",
            Self::Finished => "finished",
        }
    }
}

impl OutcomeKind {
    /// `succeeded`, `failed` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

impl FailureKind {
    /// `operation_timeout`, `round_failed`, `server_error`, `invalid_submission`,
    /// `model_error`, `tool_not_found` or `engine_error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OperationTimeout => "operation_timeout",
            Self::RoundFailed => "round_failed",
            Self::ServerError => "server_error",
            Self::InvalidSubmission => "invalid_submission",
            Self::ModelError => "model_error",
            Self::ToolNotFound => "tool_not_found",
            Self::EngineError => "engine_error",
        }
    }
}

/// How an execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// Every step completed.
    Succeeded,
    /// A step failed.
    Failed,
    /// It was cancelled.
    Cancelled,
}

/// Why an execution failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// A round's deadline passed: the specification's `OperationTimeout` for the operation.
    OperationTimeout,
    /// A round failed with a code.
    RoundFailed,
    /// The server could not be started, misbehaved or died.
    ServerError,
    /// The submission could not be run.
    InvalidSubmission,
    /// The model endpoint could not be reached or refused the request (the message names the
    /// HTTP status or the connection error).
    ModelError,
    /// An allow-listed tool is not among the server's tools.
    ToolNotFound,
    /// The worker's component instance stopped (a trap, its memory or compute budget) while
    /// it held no open round (one it held fails `recovery_unavailable`, and the execution
    /// [`FailureKind::RoundFailed`]); the message says how it stopped.
    EngineError,
}

/// Something an agent harness did or reported (Codex: MCP server start-up, approvals given or
/// declined, commands, model errors), kept with the execution.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExecutionEvent {
    /// When the worker recorded it (UTC).
    pub at: chrono::DateTime<chrono::Utc>,
    /// `mcp-server`, `approval`, `command`, `refused` (a call of a tool Codex does not
    /// offer: nothing ran), `model` or `harness`.
    pub kind: String,
    /// What happened.
    pub message: String,
}

/// An execution's diagnostics: its harness's events and the tail of its stderr.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct ExecutionDiagnostics {
    /// Oldest first (the first 64 are kept).
    pub events: Vec<ExecutionEvent>,
    /// How many events were not kept.
    pub events_dropped: u32,
    /// The tail (at most 4 KiB) of the harness's stderr, kept when the execution failed.
    pub stderr_tail: Option<String>,
}

/// A failed execution's reason. The message never carries answers or secrets.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExecutionFailure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// The failure code of the round involved, if any.
    pub code: Option<FailureCode>,
    /// What happened.
    pub message: String,
}

/// One operation's result: a tool call's, a prompt's or a resource read's.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolResult {
    /// `server:name`: the tool name, prompt name or resource URI after the server's name.
    pub tool: String,
    /// Tool, prompt or resource.
    pub kind: crate::api::round::OperationKind,
    /// The MCP result object (`CallToolResult`, `GetPromptResult` or `ReadResourceResult`).
    pub result: serde_json::Value,
}

impl ToolResult {
    /// The result's text, joined by newlines: a tool's `text` content blocks, a prompt's text
    /// messages, a resource's text contents.
    pub fn text(&self) -> String {
        use serde_json::Value;
        let list = |field: &str| {
            self.result
                .get(field)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let texts: Vec<Value> = match self.kind {
            crate::api::round::OperationKind::Tool => list("content"),
            crate::api::round::OperationKind::Prompt => list("messages")
                .into_iter()
                .filter_map(|m| m.get("content").cloned())
                .collect(),
            crate::api::round::OperationKind::Resource => list("contents"),
        };
        texts
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The outcome of a finished execution.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ExecutionOutcome {
    /// How it ended.
    pub kind: OutcomeKind,
    /// Why it failed, when it did.
    pub failure: Option<ExecutionFailure>,
    /// The tool results, in call order.
    pub tool_results: Vec<ToolResult>,
    /// The agent's final message (harnesses with a model).
    pub final_message: Option<String>,
}

impl std::fmt::Display for ExecutionOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.kind, &self.failure) {
            // The JSON names; the round's code only when it says more than the kind.
            (OutcomeKind::Failed, Some(failure)) => {
                write!(f, "failed ({}", failure.kind.as_str())?;
                if let Some(code) = failure.code
                    && code.as_str() != failure.kind.as_str()
                {
                    write!(f, ", {}", code.as_str())?;
                }
                write!(f, "): {}", failure.message)
            }
            (kind, _) => f.write_str(kind.as_str()),
        }
    }
}

/// A snapshot of an execution.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ExecutionState {
    /// The execution's id.
    pub execution_id: String,
    /// Its lifecycle.
    pub lifecycle: ExecutionStatus,
    /// Its outcome, once finished.
    pub outcome: Option<ExecutionOutcome>,
    /// A cancel was requested and not yet carried out.
    pub cancel_requested: bool,
    /// When it was submitted.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

/// The terminal result of an execution.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ExecutionResult {
    /// The execution's id.
    pub execution_id: String,
    /// Its outcome.
    pub outcome: ExecutionOutcome,
}

impl ExecutionResult {
    /// Whether every step completed.
    pub fn succeeded(&self) -> bool {
        self.outcome.kind == OutcomeKind::Succeeded
    }

    /// A deadline passed (a round's or a Codex turn's): the specification's `OperationTimeout`,
    /// which [`crate::AsyncExecutionHandle::result`] returns as an error carrying this result.
    pub fn timed_out(&self) -> bool {
        self.outcome
            .failure
            .as_ref()
            .is_some_and(|f| f.kind == FailureKind::OperationTimeout)
    }
}

/// The specification's `OperationTimeout`: a wait ran out, or the execution ended because a
/// deadline passed. The message never carries answers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("OperationTimeout: execution {execution_id}: {cause}")]
pub struct OperationTimeout {
    /// The execution.
    pub execution_id: String,
    /// What ran out.
    pub cause: TimeoutCause,
    /// The execution's result when it finished because of the deadline (its tool results
    /// and failure, so nothing is lost); `None` when only the caller's wait ran out.
    pub result: Option<Box<ExecutionResult>>,
}

/// What ran out for an [`OperationTimeout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeoutCause {
    /// The caller's wait (`result(timeout)`) ran out; the execution goes on.
    Wait(Duration),
    /// A round's deadline (its round failed with `deadline_exceeded`) or a Codex turn's
    /// deadline passed, and the execution finished failed; the text says which.
    Deadline(String),
}

impl std::fmt::Display for TimeoutCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Wait(waited) => write!(f, "did not finish within {waited:?}"),
            Self::Deadline(message) => write!(f, "{message}"),
        }
    }
}

fn timestamp(t: &crate::component::bindings::m3::managed_input::types::Timestamp) -> DateTime<Utc> {
    DateTime::from_timestamp(t.seconds, t.nanoseconds).unwrap_or_default()
}

/// WIT -> public execution state.
pub(crate) fn state_back(s: &wit::ExecutionState) -> ExecutionState {
    use wit::ExecutionLifecycle as W;
    ExecutionState {
        execution_id: s.execution_id.clone(),
        lifecycle: match s.lifecycle {
            W::Queued => ExecutionStatus::Queued,
            W::Running => ExecutionStatus::Running,
            W::WaitingForInput => ExecutionStatus::WaitingForInput,
            W::Finished => ExecutionStatus::Finished,
        },
        outcome: s.outcome.as_ref().map(outcome_back),
        cancel_requested: s.cancel_requested,
        created_at: timestamp(&s.created_at),
        updated_at: timestamp(&s.updated_at),
    }
}

fn outcome_back(o: &wit::ExecutionOutcome) -> ExecutionOutcome {
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
            code: f.code.map(crate::component::convert::failure_code_back),
            message: f.message.clone(),
        }),
        tool_results: o
            .tool_results
            .iter()
            .map(|t| ToolResult {
                tool: t.tool.clone(),
                kind: t.kind.map_or(
                    crate::api::round::OperationKind::Tool,
                    crate::component::convert::operation_kind_back,
                ),
                result: serde_json::from_str(&t.result).unwrap_or(serde_json::Value::Null),
            })
            .collect(),
        final_message: o.final_message.clone(),
    }
}

/// The component's diagnostics, in public types.
pub(crate) fn diagnostics_back(d: &wit::ExecutionDiagnostics) -> ExecutionDiagnostics {
    ExecutionDiagnostics {
        events: d
            .events
            .iter()
            .map(|e| ExecutionEvent {
                at: timestamp(&e.at),
                kind: e.kind.clone(),
                message: e.message.clone(),
            })
            .collect(),
        events_dropped: d.events_dropped,
        stderr_tail: d.stderr_tail.clone(),
    }
}

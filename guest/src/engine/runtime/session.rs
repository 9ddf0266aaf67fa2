//! The session protocol every harness session speaks with the worker, "sans I/O": the worker
//! feeds a session [`Input`]s (a line from the child, a committed answer, a timer, a cancel) and
//! performs the [`Action`]s it returns, in order (write a line, open, deliver, resolve or fail a
//! round, record a result, arm the timer, finish). `scripted` (an MCP server driven by a script)
//! and `codex` (Codex's app-server) are the two sessions; `worker` is the one driver.

use crate::m3::managed_input::types::{
    ElicitationRequest, ElicitationResponse, FailureCode, OperationKind,
};
use serde_json::Value;

/// The word for an operation kind in messages.
pub fn kind_name(kind: OperationKind) -> &'static str {
    match kind {
        OperationKind::Tool => "tool",
        OperationKind::Prompt => "prompt",
        OperationKind::Resource => "resource",
    }
}

/// What the kit does when the server asks for input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Persist the round and wait for an answer.
    Managed,
    /// Record the round, answer `cancel`, fail it with `elicitation_unhandled`.
    Fail,
}

/// Something that happened.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Begin.
    Start,
    /// One line from the server's stdout.
    Line(String),
    /// The era probe (or the session's timer, see [`Action::ArmTimer`]) ran out.
    ProbeTimedOut,
    /// The open round's answer is committed (validated by the store): deliver it.
    Answer(Vec<(String, ElicitationResponse)>),
    /// The execution was cancelled.
    Cancel,
    /// The open round's deadline passed.
    DeadlineExpired,
    /// The server process exited or closed its output; how, as a phrase after "the server"
    /// (`exited with code 3`, `was killed by a signal`, `closed its output`).
    ServerExited(String),
    /// The server broke a limit of the kit (its output) and is stopped: like an exit, with what
    /// it did.
    ServerFault(String),
    /// Nobody will answer the open round (mode `fail` with a plan that has no matching entry):
    /// answer `cancel` and fail it with `elicitation_unhandled`, as mode `fail` does.
    Unhandled,
}

/// The operation a round belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    /// Index of the step in the script (or of the call, for harnesses with a model).
    pub step: usize,
    /// Tool, prompt or resource.
    pub kind: OperationKind,
    /// The tool name, prompt name or resource URI.
    pub name: String,
    /// The operation's arguments.
    pub arguments: Value,
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Finished {
    /// Every step completed.
    Succeeded,
    /// A step failed; the code says why when a round was involved.
    Failed {
        /// The failure code of the round that failed, if any.
        code: Option<FailureCode>,
        /// What happened (no answers or secrets).
        message: String,
    },
    /// The execution was cancelled.
    Cancelled,
    /// A deadline of the kit's own passed (the specification's `OperationTimeout`) while no
    /// round's deadline was involved, e.g. a Codex turn's.
    TimedOut {
        /// What happened.
        message: String,
    },
    /// The model endpoint could not be reached or refused (HTTP status or connection error).
    ModelError {
        /// What happened.
        message: String,
    },
    /// An allow-listed tool is not among the server's tools.
    ToolNotFound {
        /// Which.
        message: String,
    },
}

/// Something the driver must do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Write this message as one line to the server.
    Send(Value),
    /// Arm the probe timer (feed [`Input::ProbeTimedOut`] when it fires first).
    StartProbeTimer,
    /// Persist a new round and wait for its answer.
    OpenRound {
        /// The operation asking.
        operation: Operation,
        /// Zero-based round index within the operation.
        round_index: u32,
        /// The requests, keyed.
        requests: Vec<(String, ElicitationRequest)>,
        /// The opaque state of a 2026-07-28 round.
        request_state: Option<String>,
    },
    /// Deliver the open round's answer: commit `delivery-started`, write this line, commit
    /// `delivered`.
    Deliver(Value),
    /// The server replied to the delivered answer: resolve the open round.
    ResolveRound,
    /// End the open round with a failure.
    FailRound {
        /// Why.
        code: FailureCode,
        /// Details (no answers).
        message: String,
    },
    /// A step's result (a tool call's, a prompt's or a resource's).
    ToolResult {
        /// The step.
        step: usize,
        /// Tool, prompt or resource.
        kind: OperationKind,
        /// The tool name, prompt name or resource URI.
        name: String,
        /// The result object.
        result: Value,
    },
    /// Arm the session's timer for this many milliseconds (feed [`Input::ProbeTimedOut`] when
    /// it fires first; arming again replaces it). The timer stands still while a round waits
    /// for its answer: a wait for a human never counts against the kit's own timeouts.
    ArmTimer(u64),
    /// The agent's final message (harnesses with a model).
    FinalMessage(String),
    /// Keep an event of the harness with the execution (diagnostics).
    Event {
        /// `mcp-server`, `approval`, `command`, `refused`, `model` or `harness`.
        kind: &'static str,
        /// What happened (no answers).
        message: String,
    },
    /// The session is over: close the server's stdin.
    Finish(Finished),
}

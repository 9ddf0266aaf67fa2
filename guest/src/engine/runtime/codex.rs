//! The `codex` harness: one `codex app-server` connection (JSON-RPC lines on stdio), as a
//! sans-I/O state machine with the same inputs and actions as the scripted session.
//!
//! `initialize` + `initialized`; `thread/start` with the submission's server as a per-thread MCP
//! server (its allow-list as `enabled_tools`), approval policy `on-request` (so elicitations
//! reach the client) and a read-only sandbox; `turn/start` with the prompt; `turn/completed`
//! ends the session. Each forwarded `mcpServer/elicitation/request` opens a round (paired with
//! the `mcpToolCall` item in progress); its delivered answer is the JSON-RPC result of that
//! request. Codex's tool-approval prompts (`_meta.codex_approval_kind`) are never rounds: calls
//! to allow-listed tools are approved, anything else is declined (the default permission
//! policy), as is every other request Codex sends, so a turn never waits on the kit. Every
//! request the kit sends has a timeout (Codex never answers an unknown method), and the turn has
//! a deadline, after which it is interrupted (Codex retries forever when no model answers); the
//! turn's clock stands still while a round waits for a human. Whatever ends a round's wait ends
//! the round in the same step: Codex clearing the request (`serverRequest/resolved`), the tool
//! call completing or the turn ending while it is open withdraw it (`request-withdrawn`).

use super::agent_rounds::{self, AgentRounds, Forwarded};
use super::session::{Action, Finished, Input, Mode};
use crate::m3::managed_input::types::FailureCode;
use crate::mcp::message::{self, Incoming, RpcError};
use serde_json::{Value, json};

/// The method Codex uses to forward an MCP elicitation (and its tool-approval prompts).
pub const ELICITATION_METHOD: &str = "mcpServer/elicitation/request";

/// How a Codex session is set up.
#[derive(Debug, Clone, PartialEq)]
pub struct CodexConfig {
    /// The MCP server binding's name.
    pub server: String,
    /// Its program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its working directory (an absolute path; `None`: Codex's default).
    pub server_cwd: Option<String>,
    /// The allow-listed tool names (without the server prefix).
    pub tools: Vec<String>,
    /// The prompt.
    pub prompt: String,
    /// The thread's working directory (the execution's scratch directory).
    pub cwd: String,
    /// What to do with elicitations.
    pub mode: Mode,
    /// Most rounds per operation.
    pub round_limit: u32,
    /// How long any request to Codex may go unanswered.
    pub request_timeout_ms: u64,
    /// How long the turn may run.
    pub turn_deadline_ms: u64,
}

/// What the session waits for.
#[derive(Debug, Clone, PartialEq)]
enum State {
    Idle,
    Initializing {
        id: u64,
    },
    StartingThread {
        id: u64,
    },
    /// `mcpServerStatus/list` sent: is the server up, and has it every allow-listed tool?
    CheckingServer {
        id: u64,
    },
    /// The server is still starting: wait for its start-up status, then check again.
    WaitingForServer,
    StartingTurn {
        id: u64,
    },
    InTurn,
    /// `turn/interrupt` sent; `turn/completed` ends the session with this.
    Interrupting {
        then: Finished,
    },
    Done,
}

/// The state machine of one Codex app-server session.
#[derive(Debug)]
pub struct CodexSession {
    config: CodexConfig,
    state: State,
    next_id: u64,
    thread_id: Option<String>,
    turn_id: Option<String>,
    rounds: AgentRounds,
    final_message: Option<String>,
}

/// The thread and turn ids, once known (the thread id is the native resume token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodexIds {
    /// `thread/start`'s thread.
    pub thread_id: Option<String>,
    /// `turn/start`'s turn.
    pub turn_id: Option<String>,
}

fn field<'a>(v: &'a Value, name: &str) -> &'a Value {
    v.get(name).unwrap_or(&Value::Null)
}

fn text(v: &Value, name: &str) -> Option<String> {
    v.get(name).and_then(Value::as_str).map(str::to_string)
}

/// Codex's elicitation result: the MCP result with `content` and `_meta` always present, as a
/// JSON-RPC result of the forwarded request.
fn reply(id: &Value, mut answer: Value) -> Value {
    if let Value::Object(map) = &mut answer {
        map.entry("content").or_insert(Value::Null);
        map.insert("_meta".into(), Value::Null);
    }
    message::result(id, answer)
}

impl CodexSession {
    /// A session that has not started.
    pub fn new(config: CodexConfig) -> Self {
        Self {
            rounds: AgentRounds::new(config.mode, config.round_limit, reply),
            config,
            state: State::Idle,
            next_id: 1,
            thread_id: None,
            turn_id: None,
            final_message: None,
        }
    }

    /// The thread and turn, once Codex has named them.
    pub fn ids(&self) -> CodexIds {
        CodexIds {
            thread_id: self.thread_id.clone(),
            turn_id: self.turn_id.clone(),
        }
    }

    /// Whether the session has finished.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    fn request(&mut self, method: &str, params: Value, out: &mut Vec<Action>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        out.push(Action::Send(message::request(id, method, params)));
        out.push(Action::ArmTimer(self.config.request_timeout_ms));
        id
    }

    fn finish(&mut self, finished: Finished, out: &mut Vec<Action>) {
        if self.state == State::Done {
            return;
        }
        if let Some(message) = self.final_message.take() {
            out.push(Action::FinalMessage(message));
        }
        self.state = State::Done;
        out.push(Action::Finish(finished));
    }

    fn failed(&mut self, code: Option<FailureCode>, message: String, out: &mut Vec<Action>) {
        self.end(Finished::Failed { code, message }, out);
    }

    /// Ends the session with `finished`, failing the open round in the same step.
    fn end(&mut self, finished: Finished, out: &mut Vec<Action>) {
        self.rounds.end(&finished, out);
        self.finish(finished, out);
    }

    fn event(kind: &'static str, message: impl Into<String>, out: &mut Vec<Action>) {
        out.push(Action::Event {
            kind,
            message: message.into(),
        });
    }

    /// Feeds one input; returns the actions to perform, in order.
    pub fn handle(&mut self, input: Input) -> Vec<Action> {
        let mut out = Vec::new();
        match input {
            Input::Start => {
                if self.state == State::Idle {
                    let id = self.request(
                        "initialize",
                        json!({
                            "clientInfo": {"name": "m3", "title": "M3", "version": env!("CARGO_PKG_VERSION")},
                            "capabilities": {"experimentalApi": true}
                        }),
                        &mut out,
                    );
                    self.state = State::Initializing { id };
                }
            }
            Input::Line(line) => self.line(&line, &mut out),
            Input::ProbeTimedOut => self.timer(&mut out),
            Input::Answer(responses) => self.rounds.answer(&responses, &mut out),
            Input::Unhandled => self.rounds.unhandled_round(&mut out),
            input @ (Input::Cancel | Input::DeadlineExpired) => {
                if let Some((then, code, message)) = agent_rounds::interruption(&input) {
                    self.interrupt(then, code, message, &mut out);
                }
            }
            input @ (Input::ServerExited(_) | Input::ServerFault(_)) => {
                if self.state != State::Done
                    && let Some(message) = agent_rounds::process_end("codex app-server", &input)
                {
                    self.failed(Some(FailureCode::ServerError), message, &mut out);
                }
            }
        }
        out
    }

    /// A timer fired: a request went unanswered, or the turn ran out of time.
    fn timer(&mut self, out: &mut Vec<Action>) {
        match &self.state {
            State::Initializing { .. }
            | State::StartingThread { .. }
            | State::CheckingServer { .. }
            | State::StartingTurn { .. } => {
                self.failed(
                    Some(FailureCode::ServerError),
                    "codex app-server did not answer in time".into(),
                    out,
                );
            }
            State::WaitingForServer => {
                self.failed(
                    Some(FailureCode::ServerError),
                    format!(
                        "the MCP server `{}` did not finish starting in time",
                        self.config.server
                    ),
                    out,
                );
            }
            State::InTurn => {
                let message = format!(
                    "the turn's deadline ({} s, not counting time spent waiting for answers) \
                     passed: the kit interrupted the turn",
                    self.config.turn_deadline_ms / 1000
                );
                self.interrupt(
                    Finished::TimedOut {
                        message: message.clone(),
                    },
                    FailureCode::Cancelled,
                    &message,
                    out,
                )
            }
            State::Interrupting { then } => {
                let then = then.clone();
                self.finish(then, out);
            }
            State::Idle | State::Done => {}
        }
    }

    /// Ends the turn with `turn/interrupt` (Codex cancels the MCP call and answers a pending
    /// elicitation with cancel itself); the open round fails with `code`.
    fn interrupt(
        &mut self,
        then: Finished,
        code: FailureCode,
        message: &str,
        out: &mut Vec<Action>,
    ) {
        match &self.state {
            State::Done | State::Interrupting { .. } => return,
            State::InTurn => {}
            _ => {
                // No turn yet: nothing to interrupt.
                self.failed_or(then, out);
                return;
            }
        }
        self.rounds.fail_open(code, message, out);
        let params = json!({"threadId": self.thread_id, "turnId": self.turn_id});
        self.request("turn/interrupt", params, out);
        self.state = State::Interrupting { then };
    }

    fn failed_or(&mut self, then: Finished, out: &mut Vec<Action>) {
        self.finish(then, out);
    }

    fn line(&mut self, line: &str, out: &mut Vec<Action>) {
        let Ok(incoming) = message::parse(line) else {
            return;
        };
        match incoming {
            Incoming::Response { id, outcome } => self.response(&id, outcome, out),
            Incoming::Notification { method, params } => self.notification(&method, &params, out),
            Incoming::Request { id, method, params } => {
                self.server_request(id, &method, &params, out)
            }
        }
    }

    fn response(&mut self, id: &Value, outcome: Result<Value, RpcError>, out: &mut Vec<Action>) {
        let expected = match &self.state {
            State::Initializing { id }
            | State::StartingThread { id }
            | State::CheckingServer { id }
            | State::StartingTurn { id } => *id,
            _ => return,
        };
        if id != &json!(expected) {
            return;
        }
        let result = match outcome {
            Ok(result) => result,
            Err(e) => {
                return self.failed(
                    Some(FailureCode::ServerError),
                    format!("codex app-server refused a request with error {}", e.code),
                    out,
                );
            }
        };
        match self.state {
            State::Initializing { .. } => {
                out.push(Action::Send(message::notification(
                    "initialized",
                    json!({}),
                )));
                // The server's environment is not here: the host wrote it to the private
                // home's `config.toml` for this server alone (Codex merges the two).
                let mut server = json!({
                    "command": self.config.command,
                    "args": self.config.args,
                    "enabled_tools": self.config.tools,
                    "startup_timeout_sec": 20,
                });
                if let Some(cwd) = &self.config.server_cwd {
                    server["cwd"] = json!(cwd);
                }
                // Raw response items: the only place Codex reports a call of a switched-off
                // tool (it answers the model `unsupported call: NAME` and sends no item).
                let params = json!({
                    "cwd": self.config.cwd,
                    "approvalPolicy": "on-request",
                    "sandbox": "read-only",
                    "config": {"mcp_servers": {self.config.server.clone(): server}},
                    "experimentalRawEvents": true,
                });
                let id = self.request("thread/start", params, out);
                self.state = State::StartingThread { id };
            }
            State::StartingThread { .. } => {
                self.thread_id = text(field(&result, "thread"), "id");
                Self::event(
                    "harness",
                    format!(
                        "codex thread started with its own tools switched off; MCP server `{}` \
                         with the tools {}",
                        self.config.server,
                        self.config.tools.join(", ")
                    ),
                    out,
                );
                self.check_server(out);
            }
            State::CheckingServer { .. } => self.server_checked(&result, out),
            State::StartingTurn { .. } => {
                self.turn_id = text(field(&result, "turn"), "id");
                out.push(Action::ArmTimer(self.config.turn_deadline_ms));
                self.state = State::InTurn;
            }
            _ => {}
        }
    }

    /// Asks Codex for the server's status and tools (it answers once the server has started).
    fn check_server(&mut self, out: &mut Vec<Action>) {
        let params = json!({"threadId": self.thread_id, "serverName": self.config.server});
        let id = self.request("mcpServerStatus/list", params, out);
        self.state = State::CheckingServer { id };
    }

    /// The server's status: failed to start -> `server-error` with Codex's message; an
    /// allow-listed tool missing -> `tool-not-found`; still starting -> wait; else the turn.
    fn server_checked(&mut self, result: &Value, out: &mut Vec<Action>) {
        let entry = field(result, "data")
            .as_array()
            .and_then(|d| d.iter().find(|s| s["name"] == self.config.server.as_str()))
            .cloned()
            .unwrap_or(Value::Null);
        let status = entry
            .get("runtimeStatus")
            .and_then(Value::as_str)
            .unwrap_or("");
        let error = entry.get("toolsError").and_then(Value::as_str);
        if status == "failed" || (entry.is_null() && error.is_none()) {
            let why = error.unwrap_or("codex does not know it");
            return self.server_failed(why, out);
        }
        if status == "starting" {
            self.state = State::WaitingForServer;
            out.push(Action::ArmTimer(self.config.request_timeout_ms));
            return;
        }
        if let Some(error) = error {
            return self.server_failed(error, out);
        }
        let tools = field(&entry, "tools");
        let missing: Vec<&str> = self
            .config
            .tools
            .iter()
            .filter(|t| tools.get(t.as_str()).is_none())
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            let message = format!(
                "the server `{}` has no tool {}",
                self.config.server,
                missing
                    .iter()
                    .map(|t| format!("`{}`", crate::errors::bounded(t)))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            Self::event("mcp-server", message.clone(), out);
            return self.end(Finished::ToolNotFound { message }, out);
        }
        let params = json!({
            "threadId": self.thread_id,
            "input": [{"type": "text", "text": self.config.prompt, "text_elements": []}],
        });
        let id = self.request("turn/start", params, out);
        self.state = State::StartingTurn { id };
    }

    fn server_failed(&mut self, why: &str, out: &mut Vec<Action>) {
        let message = format!(
            "the MCP server `{}` did not start: {}",
            self.config.server,
            clip(why)
        );
        self.failed(Some(FailureCode::ServerError), message, out);
    }

    /// Codex's `error` notification: recorded; an endpoint that refuses the credentials (401,
    /// 403) ends the turn at once instead of after Codex's retries.
    fn model_error(&mut self, params: &Value, out: &mut Vec<Action>) {
        let error = field(params, "error");
        let described = describe_model_error(error);
        let retry = params.get("willRetry").and_then(Value::as_bool) == Some(true);
        Self::event(
            "model",
            if retry {
                format!("{described} (codex retries)")
            } else {
                described.clone()
            },
            out,
        );
        if retry && matches!(http_status(error), Some(401 | 403)) && self.state == State::InTurn {
            let message = format!("the model endpoint refused the request: {described}");
            self.interrupt(
                Finished::ModelError {
                    message: message.clone(),
                },
                FailureCode::ServerError,
                &message,
                out,
            );
        }
    }

    /// An item Codex started that is neither the conversation nor an MCP call: recorded (a
    /// command, a file change, a search: none should run with its tools switched off).
    fn other_item(item: &Value, out: &mut Vec<Action>) {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("item");
        if matches!(
            kind,
            "userMessage" | "agentMessage" | "reasoning" | "mcpToolCall" | "plan"
        ) {
            return;
        }
        let what = ["command", "query", "path", "tool", "prompt"]
            .iter()
            .find_map(|k| {
                item.get(*k).map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
            })
            .unwrap_or_default();
        Self::event(
            "command",
            format!("codex started a `{kind}` item: {what}"),
            out,
        );
    }

    /// A raw response item: a call of a tool Codex does not offer is recorded as refused.
    fn raw_item(item: &Value, out: &mut Vec<Action>) {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        if !matches!(kind, "function_call_output" | "custom_tool_call_output") {
            return;
        }
        if let Some(output) = item.get("output").and_then(Value::as_str)
            && let Some(name) = output.strip_prefix("unsupported call: ")
        {
            Self::event(
                "refused",
                format!(
                    "the model called `{}`, which codex does not offer: nothing ran",
                    crate::errors::bounded(name.trim())
                ),
                out,
            );
        }
    }

    fn notification(&mut self, method: &str, params: &Value, out: &mut Vec<Action>) {
        match method {
            "mcpServer/startupStatus/updated" if params["name"] == self.config.server.as_str() => {
                let status = params.get("status").and_then(Value::as_str).unwrap_or("");
                let error = params.get("error").and_then(Value::as_str);
                match (status, error) {
                    ("ready", _) => {
                        Self::event(
                            "mcp-server",
                            format!("`{}` is ready", self.config.server),
                            out,
                        );
                        if self.state == State::WaitingForServer {
                            self.check_server(out);
                        }
                    }
                    ("failed", why) => {
                        let why = why.unwrap_or("no reason given");
                        Self::event(
                            "mcp-server",
                            format!("`{}` failed: {}", self.config.server, why),
                            out,
                        );
                        if matches!(
                            self.state,
                            State::WaitingForServer | State::CheckingServer { .. }
                        ) {
                            self.server_failed(why, out);
                        }
                    }
                    _ => {}
                }
            }
            "error" => self.model_error(params, out),
            "rawResponseItem/completed" => Self::raw_item(field(params, "item"), out),
            "item/started" => {
                let item = field(params, "item");
                Self::other_item(item, out);
                if item["type"] == "mcpToolCall" {
                    self.rounds.call_started(
                        text(item, "id").unwrap_or_default(),
                        text(item, "tool").unwrap_or_default(),
                        field(item, "arguments").clone(),
                    );
                }
            }
            "item/completed" => {
                let item = field(params, "item");
                if item["type"] == "mcpToolCall" {
                    // The call's result resolves its delivered round; a round still waiting for
                    // its answer was withdrawn (the server stopped waiting).
                    let result = match field(item, "result") {
                        Value::Null => json!({"isError": true, "content": [{"type": "text",
                            "text": field(item, "error").get("message").and_then(Value::as_str).unwrap_or("the tool call failed")}]}),
                        result => result.clone(),
                    };
                    self.rounds
                        .call_completed(text(item, "tool").unwrap_or_default(), result, out);
                } else if item["type"] == "agentMessage"
                    && let Some(message) = text(item, "text")
                {
                    self.final_message = Some(message);
                }
            }
            // Codex cleared a request itself before the answer (the MCP server stopped
            // waiting, or the call was cancelled).
            "serverRequest/resolved" if self.rounds.is_open(field(params, "requestId")) => {
                self.rounds.withdraw_waiting(
                    "codex withdrew the request (the MCP server stopped waiting, or the call was \
                     cancelled)",
                    out,
                );
            }
            "turn/completed" => self.turn_completed(field(params, "turn"), out),
            _ => {}
        }
    }

    fn turn_completed(&mut self, turn: &Value, out: &mut Vec<Action>) {
        self.rounds
            .withdraw_waiting("the turn ended while the round was open", out);
        self.rounds.resolve_delivered(out);
        let status = turn.get("status").and_then(Value::as_str).unwrap_or("");
        let state = std::mem::replace(&mut self.state, State::InTurn);
        match (state, status) {
            (State::Interrupting { then }, _) => self.finish(then, out),
            (_, "completed") if self.rounds.any_unhandled() => self.finish(
                Finished::Failed {
                    code: Some(FailureCode::ElicitationUnhandled),
                    message: "the server asked for input and human input mode is `fail`".into(),
                },
                out,
            ),
            (_, "completed") => self.finish(Finished::Succeeded, out),
            (_, other) => {
                let error = field(turn, "error");
                if model_failure(error) {
                    let message =
                        format!("the model request failed: {}", describe_model_error(error));
                    return self.end(Finished::ModelError { message }, out);
                }
                let message = error.get("message").and_then(Value::as_str).map_or_else(
                    || format!("the turn ended {other}"),
                    |m| format!("the turn failed: {}", clip(m)),
                );
                self.failed(None, message, out);
            }
        }
    }

    fn server_request(&mut self, id: Value, method: &str, params: &Value, out: &mut Vec<Action>) {
        if method == ELICITATION_METHOD {
            let meta = field(params, "_meta");
            if meta.get("codex_approval_kind").is_some() {
                // A tool-approval prompt: never a round.
                let tool = meta.get("tool_name").and_then(Value::as_str).unwrap_or("");
                let allowed = self.config.tools.iter().any(|t| t == tool);
                let answer = if allowed {
                    json!({"action": "accept", "content": {}, "_meta": null})
                } else {
                    json!({"action": "decline", "content": null, "_meta": null})
                };
                Self::event(
                    "approval",
                    format!(
                        "{} the call of `{}` ({})",
                        if allowed { "approved" } else { "declined" },
                        crate::errors::bounded(tool),
                        if allowed {
                            "in the allow-list"
                        } else {
                            "not in the allow-list"
                        }
                    ),
                    out,
                );
                out.push(Action::Send(message::result(&id, answer)));
                return;
            }
            return self.elicitation(id, params, out);
        }
        let what = ["command", "reason", "tool"]
            .iter()
            .find_map(|k| params.get(*k))
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default();
        Self::event(
            "approval",
            format!(
                "declined `{}` by the permission policy: {}",
                crate::errors::bounded(method),
                what
            ),
            out,
        );
        out.push(Action::Send(match decline(method) {
            Some(result) => message::result(&id, result),
            None => message::error(&id, -32601, "not supported by this client"),
        }));
    }

    fn elicitation(&mut self, id: Value, params: &Value, out: &mut Vec<Action>) {
        if self.state != State::InTurn {
            out.push(Action::Send(reply(&id, json!({"action": "cancel"}))));
            return;
        }
        let server = text(params, "serverName").unwrap_or_default();
        match self.rounds.forwarded(id.clone(), params, &server, out) {
            Forwarded::Round | Forwarded::Busy => {}
            Forwarded::LimitExceeded => {
                let params = json!({"threadId": self.thread_id, "turnId": self.turn_id});
                self.request("turn/interrupt", params, out);
                self.state = State::Interrupting {
                    then: AgentRounds::limit_exceeded(),
                };
            }
            Forwarded::Unusable(why) => {
                out.push(Action::Send(message::error(&id, -32602, &why)));
            }
        }
    }
}

/// Codex's own text, cut to 300 bytes for a message (it names causes, never answers).
fn clip(text: &str) -> String {
    crate::errors::cut(text, 300)
}

/// The HTTP status in a Codex error's `codexErrorInfo` (`{variant: {httpStatusCode}}`, or the
/// named variants that stand for one).
fn http_status(error: &Value) -> Option<u64> {
    match field(error, "codexErrorInfo") {
        Value::Object(map) => map
            .values()
            .find_map(|v| v.get("httpStatusCode").and_then(Value::as_u64)),
        Value::String(name) => match name.as_str() {
            "unauthorized" => Some(401),
            "badRequest" => Some(400),
            "modelNotFound" => Some(404),
            "rateLimitExceeded" | "usageLimitExceeded" => Some(429),
            "internalServerError" => Some(500),
            "serverOverloaded" => Some(503),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a failed turn's error is the model endpoint's (unreachable, or an HTTP error).
fn model_failure(error: &Value) -> bool {
    match field(error, "codexErrorInfo") {
        Value::Object(map) => map.keys().any(|k| {
            matches!(
                k.as_str(),
                "httpConnectionFailed"
                    | "responseStreamConnectionFailed"
                    | "responseStreamDisconnected"
                    | "responseTooManyFailedAttempts"
            )
        }),
        Value::String(_) => http_status(error).is_some(),
        _ => false,
    }
}

/// A Codex error as one line: the HTTP status (or that the connection failed) and Codex's
/// message.
fn describe_model_error(error: &Value) -> String {
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    let details = error
        .get("additionalDetails")
        .and_then(Value::as_str)
        .unwrap_or("");
    let text = if details.is_empty() || details == message {
        message.to_string()
    } else {
        format!("{message}: {details}")
    };
    let text = clip(&text);
    match http_status(error) {
        Some(status) => format!("HTTP {status}: {text}"),
        None => format!("connection error: {text}"),
    }
}

/// The kit's answer (by the default permission policy: decline) to a request Codex sends that
/// is not an elicitation; `None`: answer with a JSON-RPC error.
fn decline(method: &str) -> Option<Value> {
    match method {
        "item/commandExecution/requestApproval" | "item/fileChange/requestApproval" => {
            Some(json!({"decision": "decline"}))
        }
        "execCommandApproval" | "applyPatchApproval" => Some(json!({
            "decision": {"denied": {"rejection": "declined by the kit's permission policy"}}
        })),
        "item/permissions/requestApproval" => Some(json!({"permissions": {}, "scope": "turn"})),
        "item/tool/requestUserInput" => Some(json!({"answers": {}})),
        "item/tool/call" => Some(json!({"contentItems": [], "success": false})),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(mode: Mode) -> CodexSession {
        CodexSession::new(CodexConfig {
            server: "shipping".into(),
            command: "/bin/shipping".into(),
            args: vec![],
            server_cwd: None,
            tools: vec!["book_shipment".into()],
            prompt: "Book it".into(),
            cwd: "/tmp/x".into(),
            mode,
            round_limit: 10,
            request_timeout_ms: 1000,
            turn_deadline_ms: 5000,
        })
    }

    fn sent(actions: &[Action]) -> Vec<Value> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Send(v) | Action::Deliver(v) => Some(v.clone()),
                _ => None,
            })
            .collect()
    }

    fn line(v: Value) -> Input {
        Input::Line(v.to_string())
    }

    /// Drives a session into its turn; returns it.
    fn in_turn(mode: Mode) -> CodexSession {
        let mut s = session(mode);
        let a = s.handle(Input::Start);
        assert_eq!(sent(&a)[0]["method"], "initialize");
        let a = s.handle(line(json!({"id": 1, "result": {}})));
        let out = sent(&a);
        assert_eq!(out[0]["method"], "initialized");
        assert_eq!(out[1]["method"], "thread/start");
        assert_eq!(out[1]["params"]["approvalPolicy"], "on-request");
        assert_eq!(
            out[1]["params"]["config"]["mcp_servers"]["shipping"]["enabled_tools"],
            json!(["book_shipment"])
        );
        assert!(
            out[1]["params"]["config"]["mcp_servers"]["shipping"]
                .get("cwd")
                .is_none(),
            "no working directory given: Codex's default"
        );
        let a = s.handle(line(json!({"id": 2, "result": {"thread": {"id": "t1"}}})));
        assert_eq!(sent(&a)[0]["method"], "mcpServerStatus/list");
        assert_eq!(sent(&a)[0]["params"]["serverName"], "shipping");
        let a = s.handle(line(server_status(
            "connected",
            &["book_shipment", "other"],
        )));
        assert_eq!(sent(&a)[0]["method"], "turn/start");
        assert_eq!(sent(&a)[0]["params"]["threadId"], "t1");
        s.handle(line(json!({"id": 4, "result": {"turn": {"id": "u1"}}})));
        s.handle(line(json!({"method": "item/started", "params": {"item": {
            "type": "mcpToolCall", "id": "c1", "tool": "book_shipment", "arguments": {"item": "book"}}}})));
        s
    }

    fn server_status(status: &str, tools: &[&str]) -> Value {
        let tools: serde_json::Map<String, Value> = tools
            .iter()
            .map(|t| (t.to_string(), json!({"name": t})))
            .collect();
        json!({"id": 3, "result": {"data": [{"name": "shipping", "runtimeStatus": status,
            "tools": tools, "toolsError": null}]}})
    }

    /// A session that has sent `mcpServerStatus/list` (id 3).
    fn checking_server() -> CodexSession {
        let mut s = session(Mode::Managed);
        s.handle(Input::Start);
        s.handle(line(json!({"id": 1, "result": {}})));
        s.handle(line(json!({"id": 2, "result": {"thread": {"id": "t1"}}})));
        s
    }

    fn finished_with(a: &[Action]) -> Finished {
        match a.last() {
            Some(Action::Finish(f)) => f.clone(),
            other => panic!("not finished: {other:?}"),
        }
    }

    /// Start-up: `initialize` (and every request after it) is bounded by the request timer, so
    /// an app-server that never answers fails the execution instead of hanging.
    #[test]
    fn a_codex_that_never_answers_initialize_fails_when_the_request_timer_fires() {
        let mut s = session(Mode::Managed);
        let a = s.handle(Input::Start);
        assert_eq!(sent(&a)[0]["method"], "initialize");
        assert!(a.contains(&Action::ArmTimer(1000)), "{a:?}");
        let a = s.handle(Input::ProbeTimedOut);
        assert_eq!(
            finished_with(&a),
            Finished::Failed {
                code: Some(FailureCode::ServerError),
                message: "codex app-server did not answer in time".into(),
            }
        );
        assert!(sent(&a).is_empty(), "nothing more is sent: {a:?}");
        assert!(s.is_done());
        assert!(s.handle(Input::ProbeTimedOut).is_empty(), "it ends once");
        // Answered in time, the next request is timed afresh; one unanswered fails the same way.
        let mut s = session(Mode::Managed);
        s.handle(Input::Start);
        let a = s.handle(line(json!({"id": 1, "result": {}})));
        assert_eq!(sent(&a)[1]["method"], "thread/start");
        assert!(a.contains(&Action::ArmTimer(1000)), "{a:?}");
        let a = s.handle(Input::ProbeTimedOut);
        let Finished::Failed { code, message } = finished_with(&a) else {
            panic!("{a:?}")
        };
        assert_eq!(code, Some(FailureCode::ServerError));
        assert!(message.contains("did not answer in time"), "{message}");
    }

    #[test]
    fn a_server_that_did_not_start_fails_at_once_with_codex_s_message() {
        let mut s = checking_server();
        let a = s.handle(line(
            json!({"id": 3, "result": {"data": [{"name": "shipping",
            "runtimeStatus": "failed", "tools": {},
            "toolsError": "MCP startup failed: No such file or directory (os error 2)"}]}}),
        ));
        let Finished::Failed { code, message } = finished_with(&a) else {
            panic!("{a:?}")
        };
        assert_eq!(code, Some(FailureCode::ServerError));
        assert!(message.contains("`shipping` did not start"), "{message}");
        assert!(message.contains("No such file or directory"), "{message}");
    }

    #[test]
    fn a_tool_the_server_does_not_have_fails_tool_not_found() {
        let mut s = checking_server();
        let a = s.handle(line(server_status("connected", &["book_shipmentt"])));
        let Finished::ToolNotFound { message } = finished_with(&a) else {
            panic!("{a:?}")
        };
        assert!(message.contains("no tool `book_shipment`"), "{message}");
        assert!(!sent(&a).iter().any(|m| m["method"] == "turn/start"));
    }

    #[test]
    fn a_server_still_starting_is_waited_for_then_checked_again() {
        let mut s = checking_server();
        let a = s.handle(line(server_status("starting", &[])));
        assert!(sent(&a).is_empty());
        let a = s.handle(line(json!({"method": "mcpServer/startupStatus/updated",
            "params": {"name": "shipping", "status": "ready", "error": null}})));
        assert_eq!(sent(&a)[0]["method"], "mcpServerStatus/list");
        // A failure while waiting ends it.
        let mut s = checking_server();
        s.handle(line(server_status("starting", &[])));
        let a = s.handle(line(json!({"method": "mcpServer/startupStatus/updated",
            "params": {"name": "shipping", "status": "failed", "error": "handshake failed"}})));
        let Finished::Failed { message, .. } = finished_with(&a) else {
            panic!("{a:?}")
        };
        assert!(message.contains("handshake failed"), "{message}");
    }

    #[test]
    fn model_errors_carry_the_http_status_or_the_connection_error() {
        // A refused credential ends the turn at once.
        let mut s = in_turn(Mode::Managed);
        let a = s.handle(line(
            json!({"method": "error", "params": {"willRetry": true, "error": {
            "message": "Reconnecting... 1/5",
            "codexErrorInfo": {"responseStreamDisconnected": {"httpStatusCode": 401}},
            "additionalDetails": "unexpected status 401 Unauthorized"}}}),
        ));
        assert!(
            a.iter()
                .any(|x| matches!(x, Action::Event { kind: "model", .. }))
        );
        assert_eq!(sent(&a)[0]["method"], "turn/interrupt");
        let a = s.handle(line(json!({"method": "turn/completed", "params": {"turn": {"id": "u1", "status": "interrupted"}}})));
        let Finished::ModelError { message } = finished_with(&a) else {
            panic!("{a:?}")
        };
        assert!(message.contains("HTTP 401"), "{message}");
        // A server error after Codex's retries.
        let mut s = in_turn(Mode::Managed);
        let a = s.handle(line(
            json!({"method": "turn/completed", "params": {"turn": {"id": "u1",
            "status": "failed", "error": {"message": "high demand",
            "codexErrorInfo": "internalServerError"}}}}),
        ));
        let Finished::ModelError { message } = finished_with(&a) else {
            panic!("{a:?}")
        };
        assert!(message.contains("HTTP 500"), "{message}");
        // No connection at all.
        let mut s = in_turn(Mode::Managed);
        let a = s.handle(line(
            json!({"method": "turn/completed", "params": {"turn": {"id": "u1",
            "status": "failed", "error": {"message": "Connection failed: error sending request",
            "codexErrorInfo": {"httpConnectionFailed": {"httpStatusCode": null}}}}}}),
        ));
        let Finished::ModelError { message } = finished_with(&a) else {
            panic!("{a:?}")
        };
        assert!(message.contains("connection error"), "{message}");
        // Anything else stays a failed turn.
        let mut s = in_turn(Mode::Managed);
        let a = s.handle(line(json!({"method": "turn/completed", "params": {"turn": {"id": "u1",
            "status": "failed", "error": {"message": "sandbox", "codexErrorInfo": "sandboxError"}}}})));
        assert!(matches!(finished_with(&a), Finished::Failed { .. }));
    }

    #[test]
    fn a_call_of_a_switched_off_tool_is_recorded_as_refused() {
        let mut s = in_turn(Mode::Managed);
        let a = s.handle(line(
            json!({"method": "rawResponseItem/completed", "params": {
            "item": {"type": "function_call_output", "call_id": "c1",
                     "output": "unsupported call: exec_command"}}}),
        ));
        assert!(
            a.iter()
                .any(|x| matches!(x, Action::Event { kind: "refused", message }
            if message.contains("`exec_command`"))),
            "{a:?}"
        );
        // Other raw items are not events.
        let a = s.handle(line(
            json!({"method": "rawResponseItem/completed", "params": {
            "item": {"type": "function_call_output", "call_id": "c2", "output": "Booked"}}}),
        ));
        assert!(a.is_empty(), "{a:?}");
    }

    #[test]
    fn approvals_and_declined_requests_are_recorded_as_events() {
        let mut s = in_turn(Mode::Managed);
        let a = s.handle(line(
            json!({"id": 7, "method": "item/commandExecution/requestApproval", "params": {"command": "env"}}),
        ));
        let events: Vec<&String> = a
            .iter()
            .filter_map(|x| match x {
                Action::Event {
                    kind: "approval",
                    message,
                } => Some(message),
                _ => None,
            })
            .collect();
        assert_eq!(events.len(), 1);
        assert!(
            events[0].contains("declined") && events[0].contains("env"),
            "{}",
            events[0]
        );
        let a = s.handle(line(json!({"method": "item/started", "params": {"item": {
            "type": "commandExecution", "id": "x", "command": "ls /"}}})));
        assert!(a.iter().any(
            |x| matches!(x, Action::Event { kind: "command", message } if message.contains("ls /"))
        ));
    }

    fn elicitation(id: u64) -> Value {
        json!({"id": id, "method": ELICITATION_METHOD, "params": {"threadId": "t1", "turnId": "u1",
            "serverName": "shipping", "mode": "form", "message": "Where?",
            "requestedSchema": {"type": "object", "properties": {"city": {"type": "string"}}},
            "_meta": {"m3/request_key": "shipping_address"}}})
    }

    #[test]
    fn the_server_s_working_directory_is_passed_to_codex() {
        let mut s = CodexSession::new(CodexConfig {
            server_cwd: Some("/srv/shipping".into()),
            ..session(Mode::Managed).config
        });
        s.handle(Input::Start);
        let a = s.handle(line(json!({"id": 1, "result": {}})));
        assert_eq!(
            sent(&a)[1]["params"]["config"]["mcp_servers"]["shipping"]["cwd"],
            "/srv/shipping"
        );
    }

    #[test]
    fn tool_approvals_are_answered_without_a_round() {
        let mut s = in_turn(Mode::Managed);
        let a = s.handle(line(json!({"id": 0, "method": ELICITATION_METHOD, "params": {
            "mode": "form", "message": "Allow?", "requestedSchema": {"type": "object", "properties": {}},
            "_meta": {"codex_approval_kind": "mcp_tool_call", "tool_name": "book_shipment"}}})));
        assert_eq!(sent(&a)[0]["result"]["action"], "accept");
        assert!(!a.iter().any(|x| matches!(x, Action::OpenRound { .. })));
        let a = s.handle(line(json!({"id": 9, "method": ELICITATION_METHOD, "params": {
            "mode": "form", "message": "Allow?", "requestedSchema": {"type": "object", "properties": {}},
            "_meta": {"codex_approval_kind": "mcp_tool_call", "tool_name": "delete_everything"}}})));
        assert_eq!(sent(&a)[0]["result"]["action"], "decline");
    }

    #[test]
    fn an_elicitation_is_a_round_delivered_once_and_resolved_by_the_call_result() {
        let mut s = in_turn(Mode::Managed);
        let a = s.handle(line(elicitation(4)));
        let Some(Action::OpenRound {
            operation,
            requests,
            round_index,
            ..
        }) = a.first()
        else {
            panic!("{a:?}");
        };
        assert_eq!(operation.name, "book_shipment");
        assert_eq!(requests[0].0, "shipping_address");
        assert_eq!(*round_index, 0);
        let answer = vec![(
            "shipping_address".to_string(),
            crate::m3::managed_input::types::ElicitationResponse {
                action: crate::m3::managed_input::types::ElicitationAction::Accept,
                content: Some(r#"{"city":"Pune"}"#.into()),
            },
        )];
        let a = s.handle(Input::Answer(answer.clone()));
        let out = sent(&a);
        assert_eq!(out[0]["id"], 4);
        assert_eq!(out[0]["result"]["content"]["city"], "Pune");
        assert!(s.handle(Input::Answer(answer)).is_empty(), "at most once");
        let a = s.handle(line(
            json!({"method": "item/completed", "params": {"item": {
            "type": "mcpToolCall", "id": "c1", "tool": "book_shipment",
            "result": {"content": [{"type": "text", "text": "Booked"}]}}}}),
        ));
        assert!(matches!(a[0], Action::ResolveRound));
        assert!(matches!(a[1], Action::ToolResult { .. }));
        s.handle(line(
            json!({"method": "item/completed", "params": {"item": {
            "type": "agentMessage", "text": "Done."}}}),
        ));
        let a = s.handle(line(json!({"method": "turn/completed", "params": {"turn": {"id": "u1", "status": "completed"}}})));
        assert_eq!(a[0], Action::FinalMessage("Done.".into()));
        assert_eq!(a[1], Action::Finish(Finished::Succeeded));
    }

    #[test]
    fn other_requests_are_declined_and_unknown_ones_refused() {
        let mut s = in_turn(Mode::Managed);
        let a = s.handle(line(
            json!({"id": 7, "method": "item/commandExecution/requestApproval", "params": {}}),
        ));
        assert_eq!(sent(&a)[0]["result"]["decision"], "decline");
        let a = s.handle(line(
            json!({"id": 8, "method": "something/new", "params": {}}),
        ));
        assert_eq!(sent(&a)[0]["error"]["code"], -32601);
    }

    #[test]
    fn cancel_interrupts_the_turn_and_fails_the_round() {
        let mut s = in_turn(Mode::Managed);
        s.handle(line(elicitation(4)));
        let a = s.handle(Input::Cancel);
        assert!(matches!(
            a[0],
            Action::FailRound {
                code: FailureCode::Cancelled,
                ..
            }
        ));
        assert_eq!(sent(&a)[0]["method"], "turn/interrupt");
        let a = s.handle(line(json!({"method": "turn/completed", "params": {"turn": {"id": "u1", "status": "interrupted"}}})));
        assert_eq!(a.last(), Some(&Action::Finish(Finished::Cancelled)));
    }

    #[test]
    fn the_turn_deadline_interrupts_and_a_silent_codex_is_given_up() {
        let mut s = in_turn(Mode::Managed);
        let a = s.handle(Input::ProbeTimedOut);
        assert_eq!(sent(&a)[0]["method"], "turn/interrupt");
        let a = s.handle(Input::ProbeTimedOut);
        assert!(matches!(
            a.last(),
            Some(Action::Finish(Finished::TimedOut { .. }))
        ));
    }

    fn accept_city() -> Vec<(String, crate::m3::managed_input::types::ElicitationResponse)> {
        vec![(
            "shipping_address".to_string(),
            crate::m3::managed_input::types::ElicitationResponse {
                action: crate::m3::managed_input::types::ElicitationAction::Accept,
                content: Some(r#"{"city":"Pune"}"#.into()),
            },
        )]
    }

    fn codes(a: &[Action]) -> Vec<FailureCode> {
        a.iter()
            .filter_map(|x| match x {
                Action::FailRound { code, .. } => Some(*code),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_turn_deadline_fails_a_delivered_round_with_a_code_the_store_accepts() {
        let mut s = in_turn(Mode::Managed);
        s.handle(line(elicitation(4)));
        s.handle(Input::Answer(accept_city()));
        let a = s.handle(Input::ProbeTimedOut);
        assert_eq!(codes(&a), vec![FailureCode::Cancelled]);
        assert_eq!(sent(&a)[0]["method"], "turn/interrupt");
        let a = s.handle(line(json!({"method": "turn/completed", "params": {"turn": {"id": "u1", "status": "interrupted"}}})));
        assert!(matches!(
            a.last(),
            Some(Action::Finish(Finished::TimedOut { .. }))
        ));
    }

    #[test]
    fn whatever_ends_a_rounds_wait_withdraws_it() {
        // Codex clears the request (its MCP server stopped waiting).
        let mut s = in_turn(Mode::Managed);
        s.handle(line(elicitation(4)));
        let a = s.handle(line(json!({"method": "serverRequest/resolved", "params": {"threadId": "t1", "requestId": 4}})));
        assert_eq!(codes(&a), vec![FailureCode::RequestWithdrawn]);
        assert!(
            s.handle(Input::Answer(accept_city())).is_empty(),
            "never delivered"
        );
        // The tool call completes while the round is open.
        let mut s = in_turn(Mode::Managed);
        s.handle(line(elicitation(4)));
        let a = s.handle(line(json!({"method": "item/completed", "params": {"item": {
            "type": "mcpToolCall", "id": "c1", "tool": "book_shipment", "result": {"content": []}}}})));
        assert_eq!(codes(&a), vec![FailureCode::RequestWithdrawn]);
        assert!(!a.contains(&Action::ResolveRound));
        // The turn ends while the round is open.
        let mut s = in_turn(Mode::Managed);
        s.handle(line(elicitation(4)));
        let a = s.handle(line(json!({"method": "turn/completed", "params": {"turn": {"id": "u1", "status": "failed", "error": {"message": "boom"}}}})));
        assert_eq!(codes(&a), vec![FailureCode::RequestWithdrawn]);
        assert!(matches!(
            a.last(),
            Some(Action::Finish(Finished::Failed { .. }))
        ));
    }

    #[test]
    fn the_round_limit_fails_the_delivered_round_as_in_every_harness() {
        let mut s = CodexSession::new(CodexConfig {
            round_limit: 1,
            ..session(Mode::Managed).config
        });
        let mut s2 = in_turn(Mode::Managed);
        std::mem::swap(&mut s.state, &mut s2.state);
        s.thread_id = s2.thread_id.take();
        s.turn_id = s2.turn_id.take();
        s.next_id = s2.next_id;
        s.handle(line(elicitation(4)));
        s.handle(Input::Answer(accept_city()));
        let a = s.handle(line(elicitation(5)));
        assert_eq!(codes(&a), vec![FailureCode::RoundLimitExceeded]);
        assert!(!a.contains(&Action::ResolveRound));
        assert_eq!(sent(&a)[0]["result"]["action"], "cancel");
        assert_eq!(sent(&a)[1]["method"], "turn/interrupt");
    }

    #[test]
    fn fail_mode_answers_cancel_and_fails_the_execution() {
        let mut s = in_turn(Mode::Fail);
        let a = s.handle(line(elicitation(4)));
        assert_eq!(sent(&a)[0]["result"]["action"], "cancel");
        assert!(a.iter().any(|x| matches!(
            x,
            Action::FailRound {
                code: FailureCode::ElicitationUnhandled,
                ..
            }
        )));
        let a = s.handle(line(json!({"method": "turn/completed", "params": {"turn": {"id": "u1", "status": "completed"}}})));
        assert!(matches!(
            a.last(),
            Some(Action::Finish(Finished::Failed {
                code: Some(FailureCode::ElicitationUnhandled),
                ..
            }))
        ));
    }
}

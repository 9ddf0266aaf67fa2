//! The `claude-code` harness: one headless Claude Code session (`claude -p` speaking stream-json
//! on stdio: one JSON object a line each way), as a sans-I/O state machine with the same inputs
//! and actions as the other sessions.
//!
//! Before the turn, `mcp_status` is asked (again while the server is `pending`) for the
//! server's status and tools: a server that did not start fails `server-error` with Claude Code's
//! reason, an allow-listed tool it lacks `tool-not-found`, and its other tools are denied
//! (`apply_flag_settings`, the complete list), so the agent is offered exactly the allow-list.
//! Then the prompt goes in as the one user message; the session's `system`/`init` starts the
//! turn and its `result` ends the session. Each MCP elicitation Claude Code forwards (`control_request` of subtype
//! `elicitation`) opens a round through [`AgentRounds`], paired with the allow-listed tool call
//! in progress; its delivered answer is the `control_response` to that request. Claude Code's
//! permission prompts (`can_use_tool`) are never rounds: allow-listed tools are allowed,
//! anything else is denied by the permission policy and recorded as `refused`, as is a call of a
//! tool Claude Code does not offer. A `control_cancel_request` for the open round's request, the
//! tool call completing or the turn ending while it waits withdraw it (`request-withdrawn`).
//! Cancel, a round's deadline, the round limit and the turn's deadline (which does not count
//! time spent waiting for answers) interrupt the turn.

use super::agent_rounds::{self, AgentRounds, Forwarded};
use super::session::{Action, Finished, Input, Mode};
use crate::exports::m3::managed_input::runtime::{ClaudeCodeSettings, EraChoice, ExecutionSpec};
use crate::m3::managed_input::process::{HomeFile, McpConfig, ServerEnvFile, SpawnSpec};
use crate::m3::managed_input::types::FailureCode;
use serde_json::{Value, json};

/// The MCP configuration the host writes (`mcp.json` in the private directory, `home` in the
/// scratch directory that is Claude Code's working directory).
const MCP_CONFIG: &str = "home/mcp.json";

/// How long Claude Code lets one MCP tool call run, the wait for an answer included (the
/// server's `timeout` and `MCP_TOOL_TIMEOUT`): about 23 days, under the longest a JavaScript
/// timer can wait, so a round waits for its own deadline, not for Claude Code's default (about
/// 28 hours). Claude Code pauses its idle watchdog while an elicitation waits.
pub const TOOL_TIMEOUT_MS: u64 = 2_000_000_000;

/// Variables of the kit's `env` Claude Code reads as the model's credentials: the MCP server,
/// which would inherit them, gets them empty.
pub const CREDENTIAL_VARIABLES: &[&str] = &["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"];

/// Claude Code's switches, set in its environment: no traffic but the model's, no updates, the
/// MCP tools given to the model directly, the legacy MCP handshake (2.1.332 drops a 2026-07-28
/// server's elicitations in headless mode), the tool call's time limit.
fn fixed_env(settings: &ClaudeCodeSettings) -> Vec<(String, String)> {
    let timeout = TOOL_TIMEOUT_MS.to_string();
    let mut env: Vec<(String, String)> = [
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
        ("DISABLE_UPDATES", "1"),
        ("ENABLE_TOOL_SEARCH", "false"),
        ("MCP_PROTOCOL_NEGOTIATION", "legacy"),
        ("MCP_TOOL_TIMEOUT", timeout.as_str()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if let Some(url) = &settings.base_url {
        env.push(("ANTHROPIC_BASE_URL".into(), url.clone()));
    }
    if let Some(retries) = settings.max_retries {
        env.push(("CLAUDE_CODE_MAX_RETRIES".into(), retries.to_string()));
    }
    env
}

/// Checks a `claude-code` submission (its settings, and what Claude Code cannot do).
pub fn check(spec: &ExecutionSpec, settings: &ClaudeCodeSettings) -> Result<(), String> {
    if settings.binary.is_empty() {
        return Err("the claude-code harness needs the path or name of the claude binary".into());
    }
    if settings.turn_deadline_ms == 0 || settings.request_timeout_ms == 0 {
        return Err("the claude-code harness needs a turn deadline and a request timeout".into());
    }
    if settings.turn_deadline_ms > super::worker::MAX_TURN_DEADLINE_MS {
        return Err(format!(
            "the claude-code turn deadline must be at most {} days",
            super::worker::MAX_TURN_DEADLINE_MS / 86_400_000
        ));
    }
    if settings.request_timeout_ms > crate::lease::MAX_TTL_MS {
        return Err("the claude-code request timeout must be at most 1 day".into());
    }
    if let Some(retries) = settings.max_retries
        && retries > super::worker::MAX_MODEL_RETRIES
    {
        return Err(format!(
            "the claude-code max_retries must be from 0 to {}",
            super::worker::MAX_MODEL_RETRIES
        ));
    }
    if let Some(url) = &settings.base_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err("the claude-code base URL must be an http:// or https:// URL".into());
    }
    if spec.server.cwd.is_some() {
        return Err(
            "the claude-code harness starts the MCP server in its own working directory: a \
             server working directory cannot be given"
                .into(),
        );
    }
    if spec.server.era == EraChoice::Modern {
        return Err(
            "the claude-code harness speaks only the legacy MCP handshake to a server (Claude \
             Code drops a 2026-07-28 server's elicitations in headless mode)"
                .into(),
        );
    }
    crate::submission::check_tool_allow_list(&spec.server.name, &spec.tools)
        .map_err(|e| e.message)?;
    Ok(())
}

/// What the host starts: `claude` headless over stream-json, with the submission's server as
/// its only MCP server (from the private `mcp.json`, which holds the server's environment), no
/// settings, hooks, skills or slash commands of the user's, none of its own tools, the
/// allow-list approved and every other permission prompt asked of the kit; its configuration
/// directory and `HOME` private, the sign-in copied there when one is given.
pub fn spawn_spec(
    spec: &ExecutionSpec,
    settings: &ClaudeCodeSettings,
    tools: &[String],
) -> SpawnSpec {
    let server = &spec.server.name;
    let allowed: Vec<String> = tools.iter().map(|t| tool_name(server, t)).collect();
    let mut args: Vec<String> = [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--strict-mcp-config",
        "--mcp-config",
        MCP_CONFIG,
        "--setting-sources",
        "",
        "--settings",
        r#"{"disableAllHooks":true}"#,
        "--tools",
        "",
        "--permission-prompt-tool",
        "stdio",
        "--no-session-persistence",
        "--disable-slash-commands",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.push("--allowedTools".into());
    args.push(allowed.join(","));
    if let Some(model) = &spec.model {
        args.push("--model".into());
        args.push(model.clone());
    }
    let document = json!({"mcpServers": {server.clone(): {
        "type": "stdio",
        "command": spec.server.command,
        "args": spec.server.args,
        "timeout": TOOL_TIMEOUT_MS,
        "alwaysLoad": true,
    }}});
    SpawnSpec {
        program: settings.binary.clone(),
        args,
        cwd: None,
        fixed_env: fixed_env(settings),
        // Its temporary files and socket go there too (`CLAUDE_CODE_TMPDIR`).
        home_env: ["CLAUDE_CONFIG_DIR", "HOME", "CLAUDE_CODE_TMPDIR"]
            .iter()
            .map(|v| v.to_string())
            .collect(),
        home_files: settings
            .credentials_from
            .iter()
            .map(|dir| HomeFile {
                name: ".credentials.json".into(),
                source: format!("{}/.credentials.json", dir.trim_end_matches('/')),
            })
            .collect(),
        server_env: Some(ServerEnvFile::McpConfig(McpConfig {
            server: server.clone(),
            document: document.to_string(),
            withheld: CREDENTIAL_VARIABLES.iter().map(|v| v.to_string()).collect(),
        })),
    }
}

/// How a Claude Code session is set up.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaudeCodeConfig {
    /// The MCP server binding's name.
    pub server: String,
    /// The allow-listed tool names (without the server prefix).
    pub tools: Vec<String>,
    /// The prompt.
    pub prompt: String,
    /// What to do with elicitations.
    pub mode: Mode,
    /// Most rounds per operation.
    pub round_limit: u32,
    /// How long Claude Code may take to start its session or to end an interrupted turn.
    pub request_timeout_ms: u64,
    /// How long the turn may run.
    pub turn_deadline_ms: u64,
}

/// How often the server's status is asked for while it starts.
pub const STATUS_POLL_MS: u64 = 200;

/// What the session waits for.
#[derive(Debug, Clone, PartialEq)]
enum State {
    Idle,
    /// `mcp_status` sent: has the server started, and with which tools?
    CheckingServer {
        id: String,
        polls: u64,
    },
    /// The server is still starting: the timer asks again.
    WaitingForServer {
        polls: u64,
    },
    /// `apply_flag_settings` sent: the server's tools outside the allow-list denied.
    Restricting {
        id: String,
    },
    /// The prompt is sent: waiting for the session's `init`.
    Starting,
    InTurn,
    /// An interrupt was sent; the turn's `result` ends the session with this.
    Interrupting {
        then: Finished,
    },
    Done,
}

/// The state machine of one Claude Code session.
#[derive(Debug)]
pub struct ClaudeCodeSession {
    config: ClaudeCodeConfig,
    state: State,
    next_id: u64,
    session_id: Option<String>,
    rounds: AgentRounds,
    /// Calls of tools outside the allow-list, by tool use id: their result says what Claude Code
    /// did with them.
    refused: Vec<(String, String)>,
    final_message: Option<String>,
}

/// The name Claude Code gives an MCP server's tool: `mcp__<server>__<tool>`, each part with
/// every character other than an ASCII letter, digit, `_` or `-` written as `_`.
pub fn tool_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("mcp__{}__{}", clean(server), clean(tool))
}

/// The `control_response` answering a request of Claude Code.
fn success(request_id: &Value, response: Value) -> Value {
    json!({"type": "control_response", "response": {
        "subtype": "success", "request_id": request_id, "response": response}})
}

/// The `control_response` refusing a request of Claude Code.
fn refusal(request_id: &Value, error: &str) -> Value {
    json!({"type": "control_response", "response": {
        "subtype": "error", "request_id": request_id, "error": error}})
}

/// Claude Code's elicitation result: the MCP result (`action`, and `content` when accepted).
fn reply(request_id: &Value, answer: Value) -> Value {
    success(request_id, answer)
}

fn field<'a>(v: &'a Value, name: &str) -> &'a Value {
    v.get(name).unwrap_or(&Value::Null)
}

fn text(v: &Value, name: &str) -> Option<String> {
    v.get(name).and_then(Value::as_str).map(str::to_string)
}

/// Claude Code's own text, cut to 300 bytes for a message (it names causes, never answers).
fn clip(text: &str) -> String {
    crate::errors::cut(text, 300)
}

/// A tool result's content (a string, or content blocks) as MCP content blocks.
fn content_blocks(content: &Value) -> Value {
    match content {
        Value::String(s) => json!([{"type": "text", "text": s}]),
        Value::Array(_) => content.clone(),
        Value::Null => json!([]),
        other => json!([{"type": "text", "text": other.to_string()}]),
    }
}

/// A tool result's content as one line of text (for a refusal's event).
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

impl ClaudeCodeSession {
    /// A session that has not started.
    pub fn new(config: ClaudeCodeConfig) -> Self {
        Self {
            rounds: AgentRounds::new(config.mode, config.round_limit, reply),
            config,
            state: State::Idle,
            next_id: 1,
            session_id: None,
            refused: Vec::new(),
            final_message: None,
        }
    }

    /// Claude Code's session id, once its `init` named it.
    pub fn session_id(&self) -> Option<String> {
        self.session_id.clone()
    }

    /// Whether the session has finished.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    fn event(kind: &'static str, message: impl Into<String>, out: &mut Vec<Action>) {
        out.push(Action::Event {
            kind,
            message: message.into(),
        });
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

    /// Ends the session with `finished`, failing the open round in the same step.
    fn end(&mut self, finished: Finished, out: &mut Vec<Action>) {
        self.rounds.end(&finished, out);
        self.finish(finished, out);
    }

    fn failed(&mut self, code: Option<FailureCode>, message: String, out: &mut Vec<Action>) {
        self.end(Finished::Failed { code, message }, out);
    }

    /// Feeds one input; returns the actions to perform, in order.
    pub fn handle(&mut self, input: Input) -> Vec<Action> {
        let mut out = Vec::new();
        match input {
            Input::Start => {
                if self.state == State::Idle {
                    self.check_server(0, &mut out);
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
                    && let Some(message) = agent_rounds::process_end("claude code", &input)
                {
                    self.failed(Some(FailureCode::ServerError), message, &mut out);
                }
            }
        }
        out
    }

    /// Sends a control request of the kit's; returns its id.
    fn control(&mut self, request: Value, out: &mut Vec<Action>) -> String {
        let id = format!("m3-{}", self.next_id);
        self.next_id += 1;
        out.push(Action::Send(json!({
            "type": "control_request", "request_id": id, "request": request
        })));
        out.push(Action::ArmTimer(self.config.request_timeout_ms));
        id
    }

    /// Asks for the server's status and tools (`polls` asked before).
    fn check_server(&mut self, polls: u64, out: &mut Vec<Action>) {
        let id = self.control(json!({"subtype": "mcp_status"}), out);
        self.state = State::CheckingServer { id, polls };
    }

    /// Sends the prompt: the turn begins with the session's `init`.
    fn send_prompt(&mut self, out: &mut Vec<Action>) {
        out.push(Action::Send(json!({
            "type": "user",
            "session_id": "",
            "parent_tool_use_id": null,
            "message": {"role": "user", "content": self.config.prompt},
        })));
        out.push(Action::ArmTimer(self.config.request_timeout_ms));
        self.state = State::Starting;
    }

    /// A timer fired: the session did not start, the turn ran out of time, or an interrupted
    /// turn did not end.
    fn timer(&mut self, out: &mut Vec<Action>) {
        match &self.state {
            State::CheckingServer { .. } | State::Restricting { .. } => self.failed(
                Some(FailureCode::ServerError),
                "claude code did not answer in time".into(),
                out,
            ),
            State::WaitingForServer { polls } => {
                let polls = *polls;
                if polls.saturating_mul(STATUS_POLL_MS) >= self.config.request_timeout_ms {
                    let message = format!(
                        "the MCP server `{}` did not finish starting in time",
                        self.config.server
                    );
                    return self.failed(Some(FailureCode::ServerError), message, out);
                }
                self.check_server(polls, out);
            }
            State::Starting => self.failed(
                Some(FailureCode::ServerError),
                "claude code did not start its session in time".into(),
                out,
            ),
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

    /// Ends the turn with an `interrupt` control request (Claude Code cancels the MCP call and
    /// answers a pending elicitation with `cancel` itself); the open round fails with `code`.
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
            State::Idle
            | State::CheckingServer { .. }
            | State::WaitingForServer { .. }
            | State::Restricting { .. }
            | State::Starting => {
                // No turn under way to interrupt: ending the session closes Claude Code's input.
                self.end(then, out);
                return;
            }
        }
        self.rounds.fail_open(code, message, out);
        self.send_interrupt(out);
        self.state = State::Interrupting { then };
    }

    fn send_interrupt(&mut self, out: &mut Vec<Action>) {
        self.control(json!({"subtype": "interrupt"}), out);
    }

    /// Claude Code's answer to a control request of the kit's.
    fn control_response(&mut self, response: &Value, out: &mut Vec<Action>) {
        let id = field(response, "request_id");
        let expected = match &self.state {
            State::CheckingServer { id, .. } | State::Restricting { id } => id.clone(),
            _ => return,
        };
        if id != expected.as_str() {
            return;
        }
        if response.get("subtype").and_then(Value::as_str) != Some("success") {
            let error = text(response, "error").unwrap_or_default();
            let message = format!("claude code refused a request of the kit: {}", clip(&error));
            return self.failed(Some(FailureCode::ServerError), message, out);
        }
        match std::mem::replace(&mut self.state, State::Idle) {
            State::CheckingServer { polls, .. } => {
                self.server_status(field(response, "response"), polls + 1, out)
            }
            _ => self.send_prompt(out),
        }
    }

    /// The server's status (`mcp_status`): still starting -> ask again soon; started with every
    /// allow-listed tool -> its other tools are denied (so the agent is offered exactly the
    /// allow-list), then the prompt; anything else ends the session.
    fn server_status(&mut self, status: &Value, polls: u64, out: &mut Vec<Action>) {
        let server = self.config.server.clone();
        let entry = field(status, "mcpServers")
            .as_array()
            .and_then(|list| list.iter().find(|s| s["name"] == server.as_str()))
            .cloned()
            .unwrap_or(Value::Null);
        let state = entry.get("status").and_then(Value::as_str).unwrap_or("");
        if state == "pending" {
            self.state = State::WaitingForServer { polls };
            out.push(Action::ArmTimer(STATUS_POLL_MS));
            return;
        }
        if state != "connected" {
            let why = match (state, entry.get("error").and_then(Value::as_str)) {
                ("", _) => "claude code does not know it".to_string(),
                (_, Some(error)) => clip(error),
                (state, None) => format!("claude code reports it `{}`", clip(state)),
            };
            let message = format!("the MCP server `{server}` did not start: {why}");
            Self::event("mcp-server", message.clone(), out);
            return self.failed(Some(FailureCode::ServerError), message, out);
        }
        Self::event("mcp-server", format!("`{server}` is connected"), out);
        let tools: Vec<&str> = field(&entry, "tools")
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t.get("name").and_then(Value::as_str))
            .collect();
        let missing: Vec<String> = self
            .config
            .tools
            .iter()
            .filter(|t| !tools.contains(&t.as_str()))
            .map(|t| format!("`{}`", crate::errors::bounded(t)))
            .collect();
        if !missing.is_empty() {
            let message = format!("the server `{server}` has no tool {}", missing.join(", "));
            Self::event("mcp-server", message.clone(), out);
            return self.end(Finished::ToolNotFound { message }, out);
        }
        let denied: Vec<String> = tools
            .iter()
            .filter(|t| !self.config.tools.iter().any(|a| a == *t))
            .map(|t| tool_name(&server, t))
            .collect();
        if denied.is_empty() {
            return self.send_prompt(out);
        }
        // The complete list each time: a later call replaces an earlier one.
        let id = self.control(
            json!({"subtype": "apply_flag_settings",
                   "settings": {"permissions": {"deny": denied}}}),
            out,
        );
        self.state = State::Restricting { id };
    }

    fn line(&mut self, line: &str, out: &mut Vec<Action>) {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            return;
        };
        match message.get("type").and_then(Value::as_str).unwrap_or("") {
            "system" => self.system(&message, out),
            // Claude Code's own words for a failed model request are not the agent's.
            "assistant" if message.get("is_api_error_message") != Some(&Value::Bool(true)) => {
                self.assistant(field(&message, "message"))
            }
            "user" => self.tool_results(field(&message, "message"), out),
            "control_request" => self.control_request(&message, out),
            "control_response" => self.control_response(field(&message, "response"), out),
            "control_cancel_request" if self.rounds.is_open(field(&message, "request_id")) => {
                self.rounds.withdraw_waiting(
                    "claude code withdrew the request (the MCP server stopped waiting, the tool \
                     call timed out or was cancelled)",
                    out,
                );
            }
            "result" => self.result(&message, out),
            _ => {}
        }
    }

    fn system(&mut self, message: &Value, out: &mut Vec<Action>) {
        match message.get("subtype").and_then(Value::as_str).unwrap_or("") {
            "init" if self.state == State::Starting => self.init(message, out),
            "api_retry" => {
                let status = message.get("error_status").and_then(Value::as_u64);
                let error = text(message, "error").unwrap_or_default();
                let described = match status {
                    Some(status) => format!("HTTP {status}: {}", clip(&error)),
                    None => format!("connection error: {}", clip(&error)),
                };
                Self::event("model", format!("{described} (claude code retries)"), out);
                if matches!(status, Some(401 | 403)) && self.state == State::InTurn {
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
            _ => {}
        }
    }

    /// The session's `init`: the MCP server started and has every allow-listed tool, else the
    /// session ends.
    fn init(&mut self, message: &Value, out: &mut Vec<Action>) {
        self.session_id = text(message, "session_id");
        let server = &self.config.server;
        let entry = field(message, "mcp_servers")
            .as_array()
            .and_then(|list| list.iter().find(|s| s["name"] == server.as_str()))
            .cloned()
            .unwrap_or(Value::Null);
        let status = entry.get("status").and_then(Value::as_str).unwrap_or("");
        if status != "connected" {
            let why = match (status, entry.get("error").and_then(Value::as_str)) {
                ("", _) => "claude code does not know it".to_string(),
                (status, Some(error)) => format!("{status}: {}", clip(error)),
                (status, None) => format!("claude code reports it `{}`", clip(status)),
            };
            let message = format!("the MCP server `{server}` is gone: {why}");
            Self::event("mcp-server", message.clone(), out);
            return self.failed(Some(FailureCode::ServerError), message, out);
        }
        let offered: Vec<&str> = field(message, "tools")
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let missing: Vec<String> = self
            .config
            .tools
            .iter()
            .filter(|t| !offered.contains(&tool_name(server, t).as_str()))
            .map(|t| format!("`{}`", crate::errors::bounded(t)))
            .collect();
        if !missing.is_empty() {
            let message = format!("the server `{server}` has no tool {}", missing.join(", "));
            Self::event("mcp-server", message.clone(), out);
            return self.end(Finished::ToolNotFound { message }, out);
        }
        let allowed: Vec<String> = self
            .config
            .tools
            .iter()
            .map(|t| tool_name(server, t))
            .collect();
        let others: Vec<&str> = offered
            .iter()
            .copied()
            .filter(|t| !allowed.iter().any(|a| a == t))
            .collect();
        Self::event(
            "harness",
            if others.is_empty() {
                format!(
                    "claude code session started with its own tools switched off; MCP server \
                     `{server}` with the tools {}",
                    self.config.tools.join(", ")
                )
            } else {
                // Offered but never allowed: each call is denied and recorded as refused.
                format!(
                    "claude code session started; MCP server `{server}` with the tools {}; \
                     also offered, every call refused: {}",
                    self.config.tools.join(", "),
                    crate::errors::bounded(&others.join(", "))
                )
            },
            out,
        );
        self.state = State::InTurn;
        out.push(Action::ArmTimer(self.config.turn_deadline_ms));
    }

    /// The allow-listed tool's name if `name` is one of Claude Code's names for it.
    fn allowed_tool(&self, name: &str) -> Option<String> {
        self.config
            .tools
            .iter()
            .find(|t| tool_name(&self.config.server, t) == name)
            .cloned()
    }

    fn assistant(&mut self, message: &Value) {
        for block in field(message, "content").as_array().into_iter().flatten() {
            match block.get("type").and_then(Value::as_str).unwrap_or("") {
                "text" => {
                    if let Some(text) = text(block, "text").filter(|t| !t.trim().is_empty()) {
                        self.final_message = Some(text);
                    }
                }
                "tool_use" => {
                    let id = text(block, "id").unwrap_or_default();
                    let name = text(block, "name").unwrap_or_default();
                    match self.allowed_tool(&name) {
                        Some(tool) => {
                            self.rounds
                                .call_started(id, tool, field(block, "input").clone());
                        }
                        None => {
                            if self.refused.len() < 64 {
                                self.refused.push((id, name));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn tool_results(&mut self, message: &Value, out: &mut Vec<Action>) {
        for block in field(message, "content").as_array().into_iter().flatten() {
            if block["type"] != "tool_result" {
                continue;
            }
            let id = text(block, "tool_use_id").unwrap_or_default();
            let content = field(block, "content");
            let is_error = block.get("is_error").and_then(Value::as_bool) == Some(true);
            if self.rounds.call_id() == Some(id.as_str()) {
                let tool = self.rounds.call_tool().unwrap_or_default().to_string();
                let result = json!({"content": content_blocks(content), "isError": is_error});
                self.rounds.call_completed(tool, result, out);
            } else if let Some(at) = self.refused.iter().position(|(i, _)| i == &id) {
                let (_, name) = self.refused.remove(at);
                Self::event(
                    "refused",
                    format!(
                        "the model called `{}`, which is not in the allow-list: nothing ran \
                         (claude code answered: {})",
                        crate::errors::bounded(&name),
                        clip(&content_text(content))
                    ),
                    out,
                );
            }
        }
    }

    fn control_request(&mut self, message: &Value, out: &mut Vec<Action>) {
        let id = field(message, "request_id").clone();
        let request = field(message, "request");
        match request.get("subtype").and_then(Value::as_str).unwrap_or("") {
            "elicitation" => self.elicitation(id, request, out),
            "can_use_tool" => {
                let name = text(request, "tool_name").unwrap_or_default();
                if self.allowed_tool(&name).is_some() {
                    Self::event(
                        "approval",
                        format!(
                            "approved the call of `{}` (in the allow-list)",
                            crate::errors::bounded(&name)
                        ),
                        out,
                    );
                    out.push(Action::Send(success(
                        &id,
                        json!({"behavior": "allow", "updatedInput": field(request, "input")}),
                    )));
                } else {
                    Self::event(
                        "refused",
                        format!(
                            "the model called `{}`, which is not in the allow-list: denied by \
                             the permission policy, nothing ran",
                            crate::errors::bounded(&name)
                        ),
                        out,
                    );
                    // Its result is recorded by the refusal above, not again.
                    let use_id = text(request, "tool_use_id").unwrap_or_default();
                    self.refused.retain(|(i, _)| i != &use_id);
                    out.push(Action::Send(success(
                        &id,
                        json!({"behavior": "deny",
                               "message": "declined by the kit's permission policy: not in the allow-list"}),
                    )));
                }
            }
            other => {
                Self::event(
                    "approval",
                    format!(
                        "refused claude code's `{}` request: not supported by this client",
                        crate::errors::bounded(other)
                    ),
                    out,
                );
                out.push(Action::Send(refusal(&id, "not supported by this client")));
            }
        }
    }

    fn elicitation(&mut self, id: Value, request: &Value, out: &mut Vec<Action>) {
        if self.state != State::InTurn {
            out.push(Action::Send(reply(&id, json!({"action": "cancel"}))));
            return;
        }
        // Claude Code's fields in MCP's `elicitation/create` form.
        let mut params = json!({
            "mode": field(request, "mode").as_str().unwrap_or("form"),
            "message": field(request, "message"),
        });
        for (from, to) in [
            ("requested_schema", "requestedSchema"),
            ("url", "url"),
            ("elicitation_id", "elicitationId"),
        ] {
            if let Some(value) = request.get(from).filter(|v| !v.is_null()) {
                params[to] = value.clone();
            }
        }
        let server = text(request, "mcp_server_name").unwrap_or_default();
        match self.rounds.forwarded(id.clone(), &params, &server, out) {
            Forwarded::Round | Forwarded::Busy => {}
            Forwarded::LimitExceeded => {
                self.send_interrupt(out);
                self.state = State::Interrupting {
                    then: AgentRounds::limit_exceeded(),
                };
            }
            Forwarded::Unusable(why) => out.push(Action::Send(refusal(&id, &why))),
        }
    }

    /// The turn's `result`: the session's end.
    fn result(&mut self, message: &Value, out: &mut Vec<Action>) {
        self.rounds
            .withdraw_waiting("the turn ended while the round was open", out);
        self.rounds.resolve_delivered(out);
        if self.final_message.is_none()
            && let Some(text) = text(message, "result").filter(|t| !t.trim().is_empty())
        {
            self.final_message = Some(text);
        }
        let state = std::mem::replace(&mut self.state, State::InTurn);
        let subtype = message.get("subtype").and_then(Value::as_str).unwrap_or("");
        let is_error = message.get("is_error").and_then(Value::as_bool) == Some(true);
        match state {
            State::Interrupting { then } => self.finish(then, out),
            _ if subtype == "success" && !is_error && self.rounds.any_unhandled() => self.finish(
                Finished::Failed {
                    code: Some(FailureCode::ElicitationUnhandled),
                    message: "the server asked for input and human input mode is `fail`".into(),
                },
                out,
            ),
            _ if subtype == "success" && !is_error => self.finish(Finished::Succeeded, out),
            _ => {
                // `result` says what ended the turn; a failed model request is `api_error` (its
                // subtype may still be `success`).
                let said = text(message, "result")
                    .or_else(|| self.final_message.take())
                    .unwrap_or_default();
                self.final_message = None;
                let status = message.get("api_error_status").and_then(Value::as_u64);
                if status.is_some()
                    || message.get("terminal_reason").and_then(Value::as_str) == Some("api_error")
                    || said.contains("API Error")
                    || said.contains("Not logged in")
                {
                    let message = match status {
                        Some(status) => {
                            format!("the model request failed: HTTP {status}: {}", clip(&said))
                        }
                        None => format!("the model request failed: {}", clip(&said)),
                    };
                    return self.end(Finished::ModelError { message }, out);
                }
                let message = if said.is_empty() {
                    format!("the turn ended `{}`", clip(subtype))
                } else {
                    format!("the turn failed ({}): {}", clip(subtype), clip(&said))
                };
                self.failed(None, message, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::m3::managed_input::types::{
        ElicitationAction, ElicitationRequest, ElicitationResponse,
    };

    fn session(mode: Mode) -> ClaudeCodeSession {
        ClaudeCodeSession::new(ClaudeCodeConfig {
            server: "shipping".into(),
            tools: vec!["book_shipment".into()],
            prompt: "Book it".into(),
            mode,
            round_limit: 2,
            request_timeout_ms: 30_000,
            turn_deadline_ms: 600_000,
        })
    }

    fn line(v: Value) -> Input {
        Input::Line(v.to_string())
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

    fn events(actions: &[Action], kind: &str) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Event { kind: k, message } if *k == kind => Some(message.clone()),
                _ => None,
            })
            .collect()
    }

    fn finished_with(actions: &[Action]) -> Finished {
        actions
            .iter()
            .find_map(|a| match a {
                Action::Finish(f) => Some(f.clone()),
                _ => None,
            })
            .expect("the session finished")
    }

    fn codes(actions: &[Action]) -> Vec<FailureCode> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::FailRound { code, .. } => Some(*code),
                _ => None,
            })
            .collect()
    }

    fn init(status: &str, tools: &[&str]) -> Input {
        line(
            json!({"type": "system", "subtype": "init", "session_id": "sess-1",
            "tools": tools, "mcp_servers": [{"name": "shipping", "status": status}]}),
        )
    }

    /// Claude Code's answer to the kit's control request `id`.
    fn answered(id: &str, response: Value) -> Input {
        line(json!({"type": "control_response", "response": {
            "subtype": "success", "request_id": id, "response": response}}))
    }

    fn status(id: &str, status: &str, tools: &[&str]) -> Input {
        let tools: Vec<Value> = tools.iter().map(|t| json!({"name": t})).collect();
        answered(
            id,
            json!({"mcpServers": [{"name": "shipping", "status": status, "tools": tools}]}),
        )
    }

    /// A session whose server has started with exactly the allow-list: the prompt is sent.
    fn prompted(mode: Mode) -> ClaudeCodeSession {
        let mut s = session(mode);
        let a = s.handle(Input::Start);
        assert_eq!(sent(&a)[0]["request"]["subtype"], "mcp_status");
        assert_eq!(sent(&a)[0]["request_id"], "m3-1");
        let a = s.handle(status("m3-1", "connected", &["book_shipment"]));
        assert_eq!(sent(&a)[0]["type"], "user", "{a:?}");
        s
    }

    fn in_turn(mode: Mode) -> ClaudeCodeSession {
        let mut s = prompted(mode);
        let a = s.handle(init("connected", &["mcp__shipping__book_shipment"]));
        assert!(a.contains(&Action::ArmTimer(600_000)), "{a:?}");
        s
    }

    fn tool_use(id: &str, name: &str) -> Input {
        line(
            json!({"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": name, "input": {"item": "book"}}]}}),
        )
    }

    fn tool_result(id: &str, text: &str, is_error: bool) -> Input {
        line(
            json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": text, "is_error": is_error}]}}),
        )
    }

    fn elicitation(id: &str) -> Input {
        line(
            json!({"type": "control_request", "request_id": id, "request": {
            "subtype": "elicitation", "mcp_server_name": "shipping", "message": "Where to?",
            "mode": "form", "requested_schema": {"type": "object",
                "properties": {"city": {"type": "string"}}, "required": ["city"]}}}),
        )
    }

    fn accept_city() -> Vec<(String, ElicitationResponse)> {
        vec![(
            "elicitation".into(),
            ElicitationResponse {
                action: ElicitationAction::Accept,
                content: Some(r#"{"city":"Pune"}"#.into()),
            },
        )]
    }

    #[test]
    fn tool_names_are_claude_code_s() {
        assert_eq!(tool_name("shipping", "book"), "mcp__shipping__book");
        assert_eq!(tool_name("my server", "a.b"), "mcp__my_server__a_b");
        assert_eq!(tool_name("s-1", "t_2"), "mcp__s-1__t_2");
    }

    #[test]
    fn the_prompt_is_the_one_user_message_and_init_starts_the_turn() {
        let mut s = session(Mode::Managed);
        s.handle(Input::Start);
        let a = s.handle(status("m3-1", "connected", &["book_shipment"]));
        let first = &sent(&a)[0];
        assert_eq!(first["type"], "user");
        assert_eq!(first["message"]["content"], "Book it");
        assert!(a.contains(&Action::ArmTimer(30_000)));
        let a = s.handle(init("connected", &["mcp__shipping__book_shipment"]));
        assert_eq!(s.session_id().as_deref(), Some("sess-1"));
        assert!(events(&a, "harness")[0].contains("own tools switched off"));
        // A session whose `init` never comes is given up on.
        let mut s = prompted(Mode::Managed);
        let a = s.handle(Input::ProbeTimedOut);
        assert!(matches!(
            finished_with(&a),
            Finished::Failed { code: Some(FailureCode::ServerError), message }
                if message.contains("did not start its session")
        ));
    }

    /// The server's tools outside the allow-list are denied before the prompt is sent, so the
    /// agent is offered exactly the allow-list.
    #[test]
    fn the_server_s_other_tools_are_denied_before_the_turn() {
        let mut s = session(Mode::Managed);
        s.handle(Input::Start);
        let a = s.handle(status(
            "m3-1",
            "connected",
            &["report_env", "book_shipment", "a.b"],
        ));
        let out = sent(&a);
        assert_eq!(
            out[0]["request"],
            json!({"subtype": "apply_flag_settings", "settings": {"permissions": {
                "deny": ["mcp__shipping__report_env", "mcp__shipping__a_b"]}}})
        );
        assert_eq!(out.len(), 1, "the prompt waits for the denial");
        let a = s.handle(answered("m3-2", Value::Null));
        assert_eq!(sent(&a)[0]["type"], "user");
    }

    /// A server still starting is asked for again; one that takes longer than the request
    /// timeout, one that failed (with Claude Code's reason), a missing allow-listed tool, a
    /// refused or unanswered status request each end the session.
    #[test]
    fn the_server_is_waited_for_and_its_failures_are_named() {
        let mut s = session(Mode::Managed);
        s.handle(Input::Start);
        let a = s.handle(status("m3-1", "pending", &[]));
        assert_eq!(a, vec![Action::ArmTimer(STATUS_POLL_MS)]);
        let a = s.handle(Input::ProbeTimedOut);
        assert_eq!(sent(&a)[0]["request"]["subtype"], "mcp_status");
        assert_eq!(sent(&a)[0]["request_id"], "m3-2");
        let polls = 30_000 / STATUS_POLL_MS;
        for i in 2..polls {
            s.handle(status(&format!("m3-{i}"), "pending", &[]));
            s.handle(Input::ProbeTimedOut);
        }
        let a = s.handle(status(&format!("m3-{polls}"), "pending", &[]));
        assert_eq!(a, vec![Action::ArmTimer(STATUS_POLL_MS)]);
        let a = s.handle(Input::ProbeTimedOut);
        assert!(matches!(finished_with(&a), Finished::Failed { message, .. }
            if message.contains("did not finish starting in time")));

        let mut s = session(Mode::Managed);
        s.handle(Input::Start);
        let a = s.handle(answered(
            "m3-1",
            json!({"mcpServers": [{"name": "shipping", "status": "failed",
                "error": "ENOENT: no such file or directory"}]}),
        ));
        assert!(matches!(
            finished_with(&a),
            Finished::Failed { code: Some(FailureCode::ServerError), message }
                if message.contains("`shipping` did not start: ENOENT")
        ));

        let mut s = session(Mode::Managed);
        s.handle(Input::Start);
        let a = s.handle(status("m3-1", "connected", &["other"]));
        assert!(matches!(
            finished_with(&a),
            Finished::ToolNotFound { message } if message.contains("`book_shipment`")
        ));

        let mut s = session(Mode::Managed);
        s.handle(Input::Start);
        let a = s.handle(line(json!({"type": "control_response", "response": {
            "subtype": "error", "request_id": "m3-1", "error": "unknown subtype"}})));
        assert!(matches!(finished_with(&a), Finished::Failed { message, .. }
            if message.contains("refused a request")));

        let mut s = session(Mode::Managed);
        s.handle(Input::Start);
        let a = s.handle(Input::ProbeTimedOut);
        assert!(matches!(finished_with(&a), Finished::Failed { message, .. }
            if message.contains("did not answer in time")));
    }

    #[test]
    fn an_elicitation_is_a_round_delivered_once_and_resolved_by_the_call_result() {
        let mut s = in_turn(Mode::Managed);
        s.handle(tool_use("toolu_1", "mcp__shipping__book_shipment"));
        let a = s.handle(elicitation("req-1"));
        let Some(Action::OpenRound {
            operation,
            requests,
            round_index: 0,
            ..
        }) = a.first()
        else {
            panic!("{a:?}")
        };
        assert_eq!(operation.name, "book_shipment");
        assert_eq!(operation.arguments, json!({"item": "book"}));
        assert_eq!(requests[0].0, "elicitation");
        assert!(matches!(&requests[0].1, ElicitationRequest::Form(f) if f.message == "Where to?"));
        let a = s.handle(Input::Answer(accept_city()));
        let out = sent(&a);
        assert_eq!(
            out,
            vec![
                json!({"type": "control_response", "response": {"subtype": "success",
                "request_id": "req-1", "response": {"action": "accept", "content": {"city": "Pune"}}}})
            ]
        );
        assert!(sent(&s.handle(Input::Answer(accept_city()))).is_empty());
        let a = s.handle(tool_result("toolu_1", "Booked to Pune", false));
        assert!(a.contains(&Action::ResolveRound));
        assert!(
            a.iter()
                .any(|x| matches!(x, Action::ToolResult { name, result, .. }
            if name == "book_shipment" && result["content"][0]["text"] == "Booked to Pune"))
        );
        s.handle(line(json!({"type": "assistant", "message": {"content": [
            {"type": "text", "text": "Done."}]}})));
        let a = s.handle(line(
            json!({"type": "result", "subtype": "success", "is_error": false, "result": "Done."}),
        ));
        assert!(a.contains(&Action::FinalMessage("Done.".into())));
        assert_eq!(finished_with(&a), Finished::Succeeded);
        assert!(s.is_done());
    }

    #[test]
    fn permission_prompts_allow_the_allow_list_and_refuse_anything_else() {
        let mut s = in_turn(Mode::Managed);
        let a = s.handle(line(json!({"type": "control_request", "request_id": "p1",
            "request": {"subtype": "can_use_tool", "tool_name": "mcp__shipping__book_shipment",
                "input": {"item": "book"}, "tool_use_id": "toolu_1"}})));
        assert_eq!(
            sent(&a)[0]["response"]["response"],
            json!({"behavior": "allow", "updatedInput": {"item": "book"}})
        );
        let a = s.handle(line(json!({"type": "control_request", "request_id": "p2",
            "request": {"subtype": "can_use_tool", "tool_name": "Bash",
                "input": {"command": "touch /tmp/x"}, "tool_use_id": "toolu_2"}})));
        assert_eq!(sent(&a)[0]["response"]["response"]["behavior"], "deny");
        assert!(events(&a, "refused")[0].contains("`Bash`"));
        let a = s.handle(line(json!({"type": "control_request", "request_id": "p3",
            "request": {"subtype": "hook_callback", "callback_id": "h"}})));
        assert_eq!(sent(&a)[0]["response"]["subtype"], "error");
    }

    #[test]
    fn a_call_of_a_tool_claude_code_does_not_offer_is_recorded_as_refused() {
        let mut s = in_turn(Mode::Managed);
        s.handle(tool_use("toolu_9", "Bash"));
        let a = s.handle(tool_result(
            "toolu_9",
            "<tool_use_error>Error: No such tool available: Bash</tool_use_error>",
            true,
        ));
        let refused = events(&a, "refused");
        assert!(refused[0].contains("`Bash`") && refused[0].contains("No such tool"));
        assert!(!a.iter().any(|x| matches!(x, Action::ToolResult { .. })));
    }

    #[test]
    fn whatever_ends_a_round_s_wait_withdraws_it() {
        // Claude Code withdraws the request.
        let mut s = in_turn(Mode::Managed);
        s.handle(tool_use("toolu_1", "mcp__shipping__book_shipment"));
        s.handle(elicitation("req-1"));
        let a = s.handle(line(
            json!({"type": "control_cancel_request", "request_id": "req-1"}),
        ));
        assert_eq!(codes(&a), vec![FailureCode::RequestWithdrawn]);
        // An answer afterwards is never delivered.
        assert!(sent(&s.handle(Input::Answer(accept_city()))).is_empty());
        // The call completes while the round waits.
        let mut s = in_turn(Mode::Managed);
        s.handle(tool_use("toolu_1", "mcp__shipping__book_shipment"));
        s.handle(elicitation("req-1"));
        let a = s.handle(tool_result("toolu_1", "gave up", true));
        assert_eq!(codes(&a), vec![FailureCode::RequestWithdrawn]);
        // The turn ends while the round waits.
        let mut s = in_turn(Mode::Managed);
        s.handle(elicitation("req-1"));
        let a = s.handle(line(
            json!({"type": "result", "subtype": "error_during_execution",
            "is_error": true}),
        ));
        assert_eq!(codes(&a), vec![FailureCode::RequestWithdrawn]);
        assert!(matches!(
            finished_with(&a),
            Finished::Failed { code: None, .. }
        ));
    }

    #[test]
    fn cancel_and_the_turn_deadline_interrupt_the_turn() {
        let mut s = in_turn(Mode::Managed);
        s.handle(elicitation("req-1"));
        let a = s.handle(Input::Cancel);
        assert_eq!(codes(&a), vec![FailureCode::Cancelled]);
        assert_eq!(sent(&a)[0]["request"]["subtype"], "interrupt");
        let a = s.handle(line(
            json!({"type": "result", "subtype": "error_during_execution",
            "is_error": true}),
        ));
        assert_eq!(finished_with(&a), Finished::Cancelled);

        let mut s = in_turn(Mode::Managed);
        let a = s.handle(Input::ProbeTimedOut);
        assert_eq!(sent(&a)[0]["request"]["subtype"], "interrupt");
        // A Claude Code that does not end the interrupted turn is given up on.
        let a = s.handle(Input::ProbeTimedOut);
        assert!(matches!(finished_with(&a), Finished::TimedOut { message }
            if message.contains("not counting time spent waiting")));
    }

    #[test]
    fn fail_mode_answers_cancel_and_fails_the_execution() {
        let mut s = in_turn(Mode::Fail);
        s.handle(tool_use("toolu_1", "mcp__shipping__book_shipment"));
        let a = s.handle(elicitation("req-1"));
        assert_eq!(
            sent(&a)[0]["response"]["response"],
            json!({"action": "cancel"})
        );
        assert_eq!(codes(&a), vec![FailureCode::ElicitationUnhandled]);
        s.handle(tool_result("toolu_1", "cancelled", false));
        let a = s.handle(line(
            json!({"type": "result", "subtype": "success", "is_error": false}),
        ));
        assert!(matches!(
            finished_with(&a),
            Finished::Failed {
                code: Some(FailureCode::ElicitationUnhandled),
                ..
            }
        ));
    }

    #[test]
    fn the_round_limit_fails_the_delivered_round_and_interrupts() {
        let mut s = in_turn(Mode::Managed);
        s.handle(tool_use("toolu_1", "mcp__shipping__book_shipment"));
        for i in 0..2 {
            s.handle(elicitation(&format!("req-{i}")));
            s.handle(Input::Answer(accept_city()));
        }
        let a = s.handle(elicitation("req-2"));
        assert_eq!(codes(&a), vec![FailureCode::RoundLimitExceeded]);
        let out = sent(&a);
        assert_eq!(out[0]["response"]["response"], json!({"action": "cancel"}));
        assert_eq!(out[1]["request"]["subtype"], "interrupt");
        let a = s.handle(line(
            json!({"type": "result", "subtype": "error_during_execution",
            "is_error": true}),
        ));
        assert!(matches!(
            finished_with(&a),
            Finished::Failed {
                code: Some(FailureCode::RoundLimitExceeded),
                ..
            }
        ));
    }

    #[test]
    fn model_errors_end_the_session_as_model_errors() {
        let mut s = in_turn(Mode::Managed);
        let a = s.handle(line(
            json!({"type": "result", "subtype": "success", "is_error": true,
            "result": "API Error: 401 {\"error\":\"bad key\"}"}),
        ));
        assert!(matches!(finished_with(&a), Finished::ModelError { message }
            if message.contains("401")));
        let mut s = in_turn(Mode::Managed);
        let a = s.handle(line(json!({"type": "system", "subtype": "api_retry",
            "error_status": 401, "error": "authentication_failed"})));
        assert!(events(&a, "model")[0].contains("HTTP 401"));
        assert_eq!(sent(&a)[0]["request"]["subtype"], "interrupt");
    }

    fn spec(era: EraChoice, cwd: Option<&str>) -> ExecutionSpec {
        use crate::exports::m3::managed_input::runtime as rt;
        rt::ExecutionSpec {
            harness: "claude-code".into(),
            codex: None,
            claude_code: Some(settings()),
            model: Some("claude-test".into()),
            prompt: "p".into(),
            script: "{}".into(),
            server: rt::ServerBinding {
                name: "shipping".into(),
                command: "/bin/server".into(),
                args: vec!["--x".into()],
                cwd: cwd.map(str::to_string),
                era,
                env_names: vec!["SECRET".into()],
                url: None,
                header_names: Vec::new(),
                delivery_timeout_ms: None,
            },
            tools: vec!["shipping:book_shipment".into()],
            human_input: rt::HumanInputMode::Managed,
            plan: None,
            round_limit: 2,
            lease_ttl_ms: 100,
            lease_renew_ms: 50,
            round_deadline_ms: None,
        }
    }

    fn settings() -> ClaudeCodeSettings {
        ClaudeCodeSettings {
            binary: "/bin/claude".into(),
            base_url: Some("http://127.0.0.1:9/".into()),
            credentials_from: Some("/home/u/.claude".into()),
            permission_policy:
                crate::exports::m3::managed_input::runtime::PermissionPolicy::Decline,
            turn_deadline_ms: 600_000,
            request_timeout_ms: 30_000,
            max_retries: Some(2),
        }
    }

    #[test]
    fn claude_code_is_started_confined_with_the_server_s_environment_in_its_private_config() {
        let spec = spec(EraChoice::Auto, None);
        let started = spawn_spec(&spec, &settings(), &["book_shipment".into()]);
        let arg = |flag: &str| {
            let at = started.args.iter().position(|a| a == flag).expect(flag);
            started.args[at + 1].clone()
        };
        assert_eq!(arg("--tools"), "");
        assert_eq!(arg("--setting-sources"), "");
        assert_eq!(arg("--allowedTools"), "mcp__shipping__book_shipment");
        assert_eq!(arg("--permission-prompt-tool"), "stdio");
        assert_eq!(arg("--mcp-config"), MCP_CONFIG);
        assert_eq!(arg("--model"), "claude-test");
        assert!(started.args.iter().any(|a| a == "--strict-mcp-config"));
        assert_eq!(
            started.home_env,
            vec!["CLAUDE_CONFIG_DIR", "HOME", "CLAUDE_CODE_TMPDIR"]
        );
        assert_eq!(
            started.home_files[0].source,
            "/home/u/.claude/.credentials.json"
        );
        assert!(started.fixed_env.contains(&(
            "ANTHROPIC_BASE_URL".to_string(),
            "http://127.0.0.1:9/".to_string()
        )));
        assert!(
            started
                .fixed_env
                .contains(&("CLAUDE_CODE_MAX_RETRIES".to_string(), "2".to_string()))
        );
        let Some(ServerEnvFile::McpConfig(config)) = &started.server_env else {
            panic!("{:?}", started.server_env)
        };
        let document: Value = serde_json::from_str(&config.document).unwrap();
        let server = &document["mcpServers"]["shipping"];
        assert_eq!(server["command"], "/bin/server");
        assert!(
            server.get("env").is_none(),
            "the environment is the host's to add"
        );
        assert_eq!(
            config.withheld,
            vec!["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"]
        );
    }

    #[test]
    fn what_claude_code_cannot_do_is_refused_at_submission() {
        assert_eq!(check(&spec(EraChoice::Legacy, None), &settings()), Ok(()));
        let e = check(&spec(EraChoice::Modern, None), &settings()).unwrap_err();
        assert!(e.contains("legacy MCP handshake"), "{e}");
        let e = check(&spec(EraChoice::Auto, Some("/srv")), &settings()).unwrap_err();
        assert!(e.contains("working directory"), "{e}");
        let mut bad = settings();
        bad.base_url = Some("file:///etc".into());
        assert!(check(&spec(EraChoice::Auto, None), &bad).is_err());
        bad = settings();
        bad.turn_deadline_ms = 0;
        assert!(check(&spec(EraChoice::Auto, None), &bad).is_err());
        bad = settings();
        bad.max_retries = Some(101);
        let e = check(&spec(EraChoice::Auto, None), &bad).unwrap_err();
        assert!(e.contains("max_retries must be from 0 to 100"), "{e}");
    }
}

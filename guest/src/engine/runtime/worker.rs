//! The worker: drives one execution to its end.
//!
//! It claims the execution, starts the server through the host's `process` import, feeds the
//! scripted session what happens (`events.next`), and performs the session's actions against
//! the store: rounds are created owned by this worker, their leases (and the execution's) are
//! renewed, an answer is delivered at most once (`delivery-started` committed before the line is
//! written, `delivered` after), deadlines and cancel requests end the open round, and the final
//! outcome is committed with the execution. A store write the worker cannot make is never
//! dropped: it ends the execution, failed, saying which write failed. While a round waits for
//! its answer the session's timer stands still (a human's time never counts against the kit's
//! own timeouts). The host is only asked to do I/O.

use super::claude_code::{self, ClaudeCodeConfig, ClaudeCodeSession};
use super::codex::{CodexConfig, CodexSession};
use super::execution::{self, Claim, ExecutionLease};
use super::http_link::{HttpLink, LinkEvent};
use super::plan::Plan;
use super::scripted::{ScriptedSession, SessionConfig, Step};
use super::session::{Action, Finished, Input, Mode};
use crate::errors::{Result, validation};
use crate::exports::m3::managed_input::runtime::{
    CodexSettings, EraChoice as WitEra, ExecutionFailure, ExecutionOutcome, ExecutionSpec,
    ExecutionState, FailureKind, HumanInputMode, OutcomeKind, ToolResult,
};
use crate::m3::managed_input::events::{self, Event};
use crate::m3::managed_input::process::{self, HomeFile, ServerEnvFile, SpawnSpec, Spawned};
use crate::m3::managed_input::types::{
    DeadlineChoice, HeldLeases, HeldRound, NewRound, OwnerClaim,
};
use crate::m3::managed_input::types::{
    ErrorCode, FailureCode, HarnessMetadata, Lease, ManagedInputError, Status, Timestamp,
};
use crate::mcp::era::EraChoice;
use crate::mcp::framing::{FramingError, LineBuffer};
use crate::{store_protocol, time};
use serde_json::Value;
use std::collections::VecDeque;

/// How long the era probe (`server/discover`) may go unanswered before the legacy fallback.
pub const PROBE_TIMEOUT_MS: u64 = 2_000;
/// The same for a server reached over HTTP (a remote server's round trip, TLS included).
pub const HTTP_PROBE_TIMEOUT_MS: u64 = 10_000;
/// How soon a renewal the database refused (busy) is tried again.
pub const RENEW_RETRY_MS: u64 = 250;
/// The longest a Codex turn may be given (time spent waiting for answers does not count).
pub const MAX_TURN_DEADLINE_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// The most retries of a model request a submission may ask Codex for (Codex's own cap for
/// `request_max_retries` and `stream_max_retries`).
pub const MAX_MODEL_RETRIES: u32 = 100;
/// How long a finished session's server gets to exit after its stdin closes.
pub const EXIT_GRACE_MS: u64 = 1_000;
/// How long an answer's delivery to an HTTP server may wait for the server's response when the
/// binding names no time: a server that accepted the connection answers a small POST at once.
pub const DEFAULT_DELIVERY_TIMEOUT_MS: u64 = 30_000;
/// The longest delivery timeout a binding may ask for.
pub const MAX_DELIVERY_TIMEOUT_MS: u64 = 60 * 60 * 1000;
/// The longest single wait (the worker re-checks its state at least this often).
pub const MAX_WAIT_MS: u64 = 60_000;
/// The longest a parked worker waits when no timer of its own is due sooner. Parked, it needs no
/// look of its own to learn anything: the host wakes it for an answer or a cancel (in this
/// process, or another's commit), its renewals bring the same from the store and wake it when
/// refused or failed, and the watcher of lateness wakes it when its leases are late by a period
/// (a wall clock set forward included). Each look past those costs a read of its rows and a
/// renewal that reads them again, for every parked worker (BENCHMARKS.md section 13 measures it
/// at 10,000 parked).
pub const MAX_PARK_MS: u64 = 10 * 60_000;
/// While the child keeps writing (events never time out), the worker still checks its state
/// (leases, timers, deadlines, cancel requests, answers) at least this often.
pub const BUSY_CHECK_MS: u64 = 1_000;
/// Most bytes a server (or harness) may write to stdout in one execution: past it the server
/// is stopped and the execution fails `server-error` naming the limit (a server that floods its
/// output, valid messages or not, never runs for ever).
pub const MAX_OUTPUT_BYTES: u64 = 128 * 1024 * 1024;
/// Most lines that are not JSON-RPC messages (not JSON objects) a server may write to stdout in
/// one execution (its logs belong on stderr): past it the server is stopped.
pub const MAX_JUNK_LINES: u64 = 10_000;

/// The script's steps as written: `{"tool": "server:tool", "arguments": {..}}` (the tool in the
/// allow-list), `{"prompt": "server:name", "arguments": {..}}` (string values) or
/// `{"resource": "server:uri"}`, each naming the binding's server.
pub fn parse_script(spec: &ExecutionSpec) -> Result<Vec<Step>, String> {
    use crate::m3::managed_input::types::OperationKind;
    let value = crate::strict_json::parse(&spec.script)
        .map_err(|_| "the script is not valid JSON".to_string())?;
    let Some(steps) = value.get("steps").and_then(Value::as_array) else {
        return Err("the script must be an object with a `steps` array".into());
    };
    if value.as_object().is_some_and(|o| o.len() != 1) {
        return Err("the script has fields other than `steps`".into());
    }
    let allowed = crate::submission::check_tool_allow_list(&spec.server.name, &spec.tools)
        .map_err(|e| e.message)?;
    let mut out = Vec::with_capacity(steps.len());
    for (i, step) in steps.iter().enumerate() {
        let Some(object) = step.as_object() else {
            return Err(format!("script step {i} must be an object"));
        };
        if let Some(unknown) = object
            .keys()
            .find(|k| !matches!(k.as_str(), "tool" | "prompt" | "resource" | "arguments"))
        {
            return Err(format!(
                "script step {i}: unknown field `{}`",
                crate::errors::bounded(unknown)
            ));
        }
        let kinds: Vec<(OperationKind, &str)> = [
            (OperationKind::Tool, "tool"),
            (OperationKind::Prompt, "prompt"),
            (OperationKind::Resource, "resource"),
        ]
        .into_iter()
        .filter(|(_, field)| object.contains_key(*field))
        .collect();
        let [(kind, field)] = kinds[..] else {
            return Err(format!(
                "script step {i} needs exactly one of `tool`, `prompt` or `resource`"
            ));
        };
        let Some(target) = object.get(field).and_then(Value::as_str) else {
            return Err(format!("script step {i}: `{field}` must be a string"));
        };
        let arguments = match (kind, object.get("arguments")) {
            (OperationKind::Resource, Some(_)) => {
                return Err(format!("script step {i}: a resource takes no `arguments`"));
            }
            (_, None) => Value::Object(Default::default()),
            (_, Some(arguments)) if !arguments.is_object() => {
                return Err(format!("script step {i}: `arguments` must be an object"));
            }
            (_, Some(arguments)) => arguments.clone(),
        };
        if kind == OperationKind::Prompt
            && arguments
                .as_object()
                .is_some_and(|a| a.values().any(|v| !v.is_string()))
        {
            return Err(format!(
                "script step {i}: a prompt's arguments must be strings"
            ));
        }
        let name = match target.split_once(':') {
            Some((server, name)) if server == spec.server.name && !name.is_empty() => name,
            _ => {
                return Err(format!(
                    "script step {i}: {field} `{}` must be written `{}:{}`",
                    crate::errors::bounded(target),
                    crate::errors::bounded(&spec.server.name),
                    if kind == OperationKind::Resource {
                        "uri"
                    } else {
                        "name"
                    },
                ));
            }
        };
        if kind == OperationKind::Tool && !allowed.iter().any(|a| a == name) {
            return Err(format!(
                "script step {i}: tool `{}` is not in the submission's allow-list",
                crate::errors::bounded(target)
            ));
        }
        out.push(Step {
            kind,
            name: name.to_string(),
            arguments,
        });
    }
    Ok(out)
}

/// Checks a submission that the policy checks already passed: the script, the plan, limits.
pub fn check_spec(spec: &ExecutionSpec) -> Result<(), String> {
    match spec.harness.as_str() {
        "scripted" => {
            parse_script(spec)?;
        }
        "codex" => {
            let Some(codex) = &spec.codex else {
                return Err("the codex harness needs its settings (the codex binary)".into());
            };
            if codex.binary.is_empty() {
                return Err("the codex harness needs the path or name of the codex binary".into());
            }
            if codex.turn_deadline_ms == 0 || codex.request_timeout_ms == 0 {
                return Err("the codex harness needs a turn deadline and a request timeout".into());
            }
            if codex.turn_deadline_ms > MAX_TURN_DEADLINE_MS {
                return Err(format!(
                    "the codex turn deadline must be at most {} days",
                    MAX_TURN_DEADLINE_MS / 86_400_000
                ));
            }
            if codex.request_timeout_ms > crate::lease::MAX_TTL_MS {
                return Err("the codex request timeout must be at most 1 day".into());
            }
            if let Some(retries) = codex.model_provider.as_ref().and_then(|p| p.max_retries)
                && retries > MAX_MODEL_RETRIES
            {
                // Codex would clamp it silently; a value it will not use is refused instead.
                return Err(format!(
                    "the model provider's max_retries must be from 0 to {MAX_MODEL_RETRIES}"
                ));
            }
            crate::submission::check_tool_allow_list(&spec.server.name, &spec.tools)
                .map_err(|e| e.message)?;
        }
        "claude-code" => {
            let Some(claude) = &spec.claude_code else {
                return Err(
                    "the claude-code harness needs its settings (the claude binary)".into(),
                );
            };
            claude_code::check(spec, claude)?;
        }
        other => {
            return Err(format!(
                "harness `{}` is not available (known: scripted, codex, claude-code)",
                crate::errors::bounded(other)
            ));
        }
    }
    if let Some(plan) = &spec.plan {
        if spec.human_input == HumanInputMode::Managed {
            return Err("human input `managed` cannot be combined with an elicitation plan".into());
        }
        Plan::parse(plan).map_err(|e| e.0)?;
    }
    if spec.round_limit == 0 {
        return Err("the round limit must be at least 1".into());
    }
    if spec.lease_ttl_ms == 0
        || spec.lease_renew_ms == 0
        || spec.lease_renew_ms >= spec.lease_ttl_ms
    {
        return Err("leases need 0 < renew interval < lease length".into());
    }
    if spec.lease_ttl_ms > crate::lease::MAX_TTL_MS {
        return Err("a worker's lease must be at most 1 day".into());
    }
    if let Some(ms) = spec.round_deadline_ms
        && (ms == 0 || ms > crate::round_protocol::MAX_DEADLINE_MS)
    {
        return Err(format!(
            "a round's deadline must be 1 ms to {} days after it opens",
            crate::round_protocol::MAX_DEADLINE_MS / 86_400_000
        ));
    }
    match &spec.server.url {
        Some(url) => {
            if spec.harness != "scripted" {
                return Err(
                    "a server reached over HTTP can be used with the scripted harness only".into(),
                );
            }
            if !spec.server.command.is_empty() {
                return Err("a server binding has either a command or a URL, not both".into());
            }
            crate::mcp::endpoint::Endpoint::parse(url)
                .map_err(|e| format!("the server URL is not usable: {}", e.0))?;
            if let Some(ms) = spec.server.delivery_timeout_ms
                && (ms == 0 || ms > MAX_DELIVERY_TIMEOUT_MS)
            {
                return Err(format!(
                    "an HTTP server's delivery timeout must be 1 ms to {} minutes",
                    MAX_DELIVERY_TIMEOUT_MS / 60_000
                ));
            }
        }
        None if spec.server.command.is_empty() => {
            return Err("the server binding needs a command".into());
        }
        None => {}
    }
    Ok(())
}

/// `run-execution`.
pub fn run(execution_id: &str, owner_id: &str) -> Result<ExecutionState> {
    execution::check_execution_id(execution_id)?;
    if owner_id.is_empty() {
        return Err(validation(
            ErrorCode::InvalidId,
            "owner id must not be empty",
        ));
    }
    let (data, held) = match execution::claim(execution_id, owner_id)? {
        Claim::Finished(state) => return Ok(state),
        Claim::Run(data, held) => (*data, held),
    };
    let outcome = match Worker::new(held.clone(), data.spec) {
        Ok(mut worker) => {
            let outcome = worker.drive();
            worker.shut_down();
            outcome
        }
        Err(outcome) => outcome,
    };
    // A failed execution keeps what its harness last said on stderr (diagnostics).
    let stderr_tail = (outcome.kind == OutcomeKind::Failed)
        .then(process::stderr_tail)
        .filter(|tail| !tail.trim().is_empty());
    process::kill();
    match execution::finish(&held, outcome, stderr_tail) {
        // The lease ran out before the outcome could be recorded (the worker stood still past
        // it): the outcome is lost, as recovery would decide, and the execution and its rounds
        // fail now rather than at the next recovery pass.
        Err(ManagedInputError::Conflict(detail)) if detail.code == ErrorCode::LeaseExpired => {
            // If that write fails too, both are said: no store error is dropped.
            super::recovery::give_up_expired(execution_id, owner_id).map_err(|failed| {
                let why = match &failed {
                    ManagedInputError::Validation(d)
                    | ManagedInputError::Conflict(d)
                    | ManagedInputError::State(d)
                    | ManagedInputError::Recovery(d)
                    | ManagedInputError::Storage(d) => d.message.clone(),
                };
                ManagedInputError::Conflict(crate::m3::managed_input::types::ErrorDetail {
                    message: format!(
                        "{}; failing the execution and its rounds failed too ({why}): recovery \
                         fails them once it runs",
                        detail.message
                    ),
                    ..detail
                })
            })
        }
        finished => finished,
    }
}

/// The round the worker waits on.
#[derive(Debug, Clone)]
struct Slot {
    round_id: String,
    lease: Lease,
    deadline: Option<Timestamp>,
    created_at: Timestamp,
    /// The committed answer was fed to the session.
    answered: bool,
}

/// How a child ended, after "the server": its exit code, or a signal.
fn exit_phrase(code: Option<i32>) -> String {
    match code {
        Some(code) => format!("exited with code {code}"),
        None => "was killed by a signal".into(),
    }
}

/// Ends the worker early with this outcome.
struct Stop(ExecutionOutcome);

fn failed(
    kind: FailureKind,
    code: Option<FailureCode>,
    message: impl Into<String>,
) -> ExecutionOutcome {
    ExecutionOutcome {
        kind: OutcomeKind::Failed,
        failure: Some(ExecutionFailure {
            kind,
            code,
            message: message.into(),
        }),
        tool_results: Vec::new(),
        final_message: None,
    }
}

fn outcome_of(finished: Finished) -> ExecutionOutcome {
    match finished {
        Finished::Succeeded => ExecutionOutcome {
            kind: OutcomeKind::Succeeded,
            failure: None,
            tool_results: Vec::new(),
            final_message: None,
        },
        Finished::Cancelled => execution::cancelled_outcome(Vec::new()),
        Finished::TimedOut { message } => failed(FailureKind::OperationTimeout, None, message),
        Finished::ModelError { message } => failed(FailureKind::ModelError, None, message),
        Finished::ToolNotFound { message } => failed(FailureKind::ToolNotFound, None, message),
        Finished::Failed { code, message } => {
            let kind = match code {
                Some(FailureCode::DeadlineExceeded) => FailureKind::OperationTimeout,
                Some(FailureCode::ServerError) | None => FailureKind::ServerError,
                Some(_) => FailureKind::RoundFailed,
            };
            failed(kind, code, message)
        }
    }
}

/// The harness's session machine (both boxed: one per worker; the scripted one holds JSON maps,
/// larger where a native workspace build gives serde_json `preserve_order`).
enum Session {
    Scripted(Box<ScriptedSession>),
    Codex(Box<CodexSession>),
    ClaudeCode(Box<ClaudeCodeSession>),
}

impl Session {
    fn handle(&mut self, input: Input) -> Vec<Action> {
        match self {
            Self::Scripted(s) => s.handle(input),
            Self::Codex(s) => s.handle(input),
            Self::ClaudeCode(s) => s.handle(input),
        }
    }

    /// The harness's ids for a round's metadata (Codex: thread and turn; the thread id is the
    /// native resume token).
    fn harness_metadata(&self) -> HarnessMetadata {
        match self {
            Self::Scripted(_) => HarnessMetadata {
                session_id: None,
                resume_token: None,
                turn_id: None,
            },
            Self::Codex(s) => {
                let ids = s.ids();
                HarnessMetadata {
                    session_id: ids.thread_id.clone(),
                    resume_token: ids.thread_id,
                    turn_id: ids.turn_id,
                }
            }
            // Sessions are not kept (`--no-session-persistence`): nothing to resume.
            Self::ClaudeCode(s) => HarnessMetadata {
                session_id: s.session_id(),
                resume_token: None,
                turn_id: None,
            },
        }
    }
}

/// Codex's features that give the model tools of Codex's own (0.171.0, `codex features
/// list`): all switched off, so the agent has exactly the submission's MCP tools. The real-Codex
/// test `codex::the_agent_is_offered_exactly_the_allowed_tools` fails if a release offers more.
///
/// `shell_tool` removes `exec_command` and `write_stdin` (0.171.0 keeps `unified_exec` on
/// whatever the configuration says, so it is not listed).
pub const CODEX_TOOL_FEATURES: &[&str] = &[
    "shell_tool",
    "view_image",
    "multi_agent",
    "multi_agent_v2",
    "goals",
    "apps",
    "plugins",
    "browser_use",
    "browser_use_external",
    "computer_use",
    "image_generation",
    "tool_suggest",
    "skill_search",
    "sleep_tool",
    "in_app_browser",
    "memories",
    "standalone_web_search",
    "request_permissions_tool",
    "hooks",
    "remote_plugin",
    "skill_mcp_dependency_install",
    "code_mode",
    "code_mode_host",
    "js_repl",
];

/// Codex's features that give the model no tool but start a process or write a file with
/// Codex's environment, which holds the model's key when the provider names an `env_key`: the
/// shell snapshot (0.171.0: on by default, also with the shell switched off) runs the user's
/// shell at start-up and writes the environment it sees to `CODEX_HOME/shell_snapshots/`. Also
/// switched off; `codex::credentials_from_env_key_or_a_copied_sign_in_and_a_clean_refusal_without`
/// fails when the key reaches a file of the scratch directory or a process other than Codex.
pub const CODEX_QUIET_FEATURES: &[&str] = &["shell_snapshot"];

/// The `-c` overrides that confine Codex and point it at the model and its provider (nothing
/// secret: values of keys and headers stay in the environment Codex is given).
fn codex_args(spec: &ExecutionSpec, codex: &CodexSettings) -> Vec<String> {
    let quote = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let table = |pairs: &[(String, String)]| {
        let entries: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{} = {}", quote(k), quote(v)))
            .collect();
        format!("{{ {} }}", entries.join(", "))
    };
    let mut args = vec!["app-server".to_string()];
    let mut set = |key: &str, value: String| {
        args.push("-c".into());
        args.push(format!("{key}={value}"));
    };
    for feature in CODEX_TOOL_FEATURES.iter().chain(CODEX_QUIET_FEATURES) {
        set(&format!("features.{feature}"), "false".into());
    }
    set("web_search", quote("disabled"));
    set(
        "tools.experimental_request_user_input",
        "{ enabled = false }".into(),
    );
    // A model that cannot be reached fails the turn after the provider's retries instead of
    // retrying for ever.
    set("features.unbounded_connection_retries", "false".into());
    // The sign-in is the copied `auth.json` in the private home, never a keyring.
    set("cli_auth_credentials_store", quote("file"));
    if let Some(model) = &spec.model {
        set("model", quote(model));
    }
    if let Some(provider) = &codex.model_provider {
        let id = "m3";
        let key = |field: &str| format!("model_providers.{id}.{field}");
        set("model_provider", quote(id));
        set(&key("name"), quote(&provider.name));
        set(&key("base_url"), quote(&provider.base_url));
        set(&key("wire_api"), quote(&provider.wire_api));
        set(
            &key("requires_openai_auth"),
            provider.requires_openai_auth.to_string(),
        );
        if let Some(env_key) = &provider.env_key {
            set(&key("env_key"), quote(env_key));
        }
        if !provider.http_headers.is_empty() {
            set(&key("http_headers"), table(&provider.http_headers));
        }
        if !provider.env_http_headers.is_empty() {
            set(&key("env_http_headers"), table(&provider.env_http_headers));
        }
        if let Some(retries) = provider.max_retries {
            set(&key("request_max_retries"), retries.to_string());
            set(&key("stream_max_retries"), retries.to_string());
        }
    }
    args
}

struct Worker {
    held: ExecutionLease,
    spec: ExecutionSpec,
    session: Session,
    /// The server's Streamable HTTP transport, when it is reached over HTTP (else its stdio).
    link: Option<Box<HttpLink>>,
    /// An answer went out over HTTP and the server has not accepted it yet: when its delivery
    /// is given up (the binding's delivery timeout after it was sent).
    delivering: Option<Timestamp>,
    lines: LineBuffer,
    plan: Option<Plan>,
    slot: Option<Slot>,
    rounds_created: u32,
    /// When the session's timer fires (the era probe, a request's timeout, a turn's deadline).
    timer: Option<Timestamp>,
    /// What was left of the timer when a round began to wait for its answer.
    paused_ms: Option<u64>,
    next_renewal: Timestamp,
    /// When the worker last checked its state ([`Worker::check`]).
    last_check: Timestamp,
    server_gone: bool,
    stdout_closed: bool,
    /// When a write to the server's input failed (it is expected to end soon).
    input_broken_at: Option<Timestamp>,
    /// When the worker's leases (the execution's and the open round's) expire unless renewed.
    leases_expire: Timestamp,
    /// Bytes the child wrote to stdout so far.
    output_bytes: u64,
    /// Lines of it that were not JSON objects.
    junk_lines: u64,
    cancel_fed: bool,
    /// Why a round could not be stored (reported instead of the session's message).
    store_refusal: Option<String>,
    /// The agent's final message.
    final_message: Option<String>,
    finished: Option<Finished>,
}

impl Worker {
    fn new(held: ExecutionLease, spec: ExecutionSpec) -> Result<Self, ExecutionOutcome> {
        let plan = match &spec.plan {
            Some(text) => Some(
                Plan::parse(text).map_err(|e| failed(FailureKind::InvalidSubmission, None, e.0))?,
            ),
            None => None,
        };
        // With a plan the session waits for an answer; the plan gives it (or declines).
        let mode = match (spec.human_input, &plan) {
            (HumanInputMode::Managed, _) | (HumanInputMode::Fail, Some(_)) => Mode::Managed,
            (HumanInputMode::Fail, None) => Mode::Fail,
        };
        let not_started = |program: &str| {
            let program = program.to_string();
            move |m: String| {
                failed(
                    FailureKind::ServerError,
                    None,
                    format!("`{program}` could not be started: {m}"),
                )
            }
        };
        let mut link = None;
        let session = match (&spec.codex, &spec.claude_code, spec.harness.as_str()) {
            (Some(codex), _, "codex") => {
                let home_files = codex
                    .credentials_from
                    .iter()
                    .map(|dir| HomeFile {
                        name: "auth.json".into(),
                        source: format!("{}/auth.json", dir.trim_end_matches('/')),
                    })
                    .collect();
                let spawned = process::spawn(&SpawnSpec {
                    program: codex.binary.clone(),
                    args: codex_args(&spec, codex),
                    cwd: None,
                    fixed_env: Vec::new(),
                    home_env: vec!["CODEX_HOME".into()],
                    home_files,
                    server_env: Some(ServerEnvFile::CodexConfig(spec.server.name.clone())),
                })
                .map_err(not_started(&codex.binary))?;
                record_spawned(&held, &spawned)?;
                let cwd = spawned.scratch;
                let tools =
                    crate::submission::check_tool_allow_list(&spec.server.name, &spec.tools)
                        .map_err(|e| failed(FailureKind::InvalidSubmission, None, e.message))?;
                Session::Codex(Box::new(CodexSession::new(CodexConfig {
                    server: spec.server.name.clone(),
                    command: spec.server.command.clone(),
                    args: spec.server.args.clone(),
                    server_cwd: spec.server.cwd.clone(),
                    tools,
                    prompt: spec.prompt.clone(),
                    cwd,
                    mode,
                    round_limit: spec.round_limit,
                    request_timeout_ms: codex.request_timeout_ms,
                    turn_deadline_ms: codex.turn_deadline_ms,
                })))
            }
            (_, Some(claude), "claude-code") => {
                let tools =
                    crate::submission::check_tool_allow_list(&spec.server.name, &spec.tools)
                        .map_err(|e| failed(FailureKind::InvalidSubmission, None, e.message))?;
                let spawned = process::spawn(&claude_code::spawn_spec(&spec, claude, &tools))
                    .map_err(not_started(&claude.binary))?;
                record_spawned(&held, &spawned)?;
                Session::ClaudeCode(Box::new(ClaudeCodeSession::new(ClaudeCodeConfig {
                    server: spec.server.name.clone(),
                    tools,
                    prompt: spec.prompt.clone(),
                    mode,
                    round_limit: spec.round_limit,
                    request_timeout_ms: claude.request_timeout_ms,
                    turn_deadline_ms: claude.turn_deadline_ms,
                })))
            }
            _ => {
                let steps = parse_script(&spec)
                    .map_err(|m| failed(FailureKind::InvalidSubmission, None, m))?;
                let era = match spec.server.era {
                    WitEra::Auto => EraChoice::Auto,
                    WitEra::Legacy => EraChoice::Legacy,
                    WitEra::Modern => EraChoice::Modern,
                };
                match &spec.server.url {
                    Some(url) => {
                        link =
                            Some(Box::new(HttpLink::new(url).map_err(|m| {
                                failed(FailureKind::InvalidSubmission, None, m)
                            })?));
                    }
                    None => {
                        let spawned = process::spawn(&SpawnSpec {
                            program: spec.server.command.clone(),
                            args: spec.server.args.clone(),
                            cwd: spec.server.cwd.clone(),
                            fixed_env: Vec::new(),
                            home_env: Vec::new(),
                            home_files: Vec::new(),
                            server_env: None,
                        })
                        .map_err(not_started(&spec.server.command))?;
                        record_spawned(&held, &spawned)?;
                    }
                }
                Session::Scripted(Box::new(ScriptedSession::new(SessionConfig {
                    era,
                    steps,
                    round_limit: spec.round_limit,
                    mode,
                })))
            }
        };
        let now = time::now();
        let leases_expire = time::add_millis(&now, spec.lease_ttl_ms);
        Ok(Self {
            next_renewal: time::add_millis(&now, spec.lease_renew_ms),
            last_check: now,
            held,
            spec,
            session,
            link,
            delivering: None,
            lines: LineBuffer::default(),
            plan,
            slot: None,
            rounds_created: 0,
            timer: None,
            paused_ms: None,
            server_gone: false,
            stdout_closed: false,
            input_broken_at: None,
            output_bytes: 0,
            junk_lines: 0,
            leases_expire,
            cancel_fed: false,
            store_refusal: None,
            final_message: None,
            finished: None,
        })
    }

    fn drive(&mut self) -> ExecutionOutcome {
        let mut inputs = VecDeque::from([Input::Start]);
        // A cancel requested before the worker started is carried out at once.
        if execution::cancel_requested(&self.held.execution_id).unwrap_or(false) {
            self.cancel_fed = true;
            inputs.push_back(Input::Cancel);
        }
        loop {
            while let Some(input) = inputs.pop_front() {
                for action in self.session.handle(input) {
                    match self.perform(action) {
                        Ok(more) => inputs.extend(more),
                        Err(Stop(outcome)) => return outcome,
                    }
                }
            }
            if let Some(finished) = self.finished.take() {
                let mut outcome = outcome_of(finished);
                outcome.final_message = self.final_message.take();
                if let (Some(refusal), Some(failure)) =
                    (self.store_refusal.take(), outcome.failure.as_mut())
                {
                    failure.message = refusal;
                }
                return outcome;
            }
            // A child that writes without pause never lets `events::next` time out: whatever
            // is due (a lease renewal above all) is checked between its events too.
            if self.overdue() {
                match self.check() {
                    Ok(more) => inputs.extend(more),
                    Err(Stop(outcome)) => return outcome,
                }
                if !inputs.is_empty() {
                    continue;
                }
            }
            // Parked: the host renews the leases while the worker waits (with those of its other
            // parked workers, in one transaction) and hands back what it renewed.
            let timeout = self.park_ms();
            let held = self.held_leases();
            let (event, renewed) = match &self.link {
                Some(link) => events::next_holding(timeout, &held, &link.pollables()),
                None => events::next_holding(timeout, &held, &[]),
            };
            self.take_back(renewed);
            if self.link.is_some() {
                match self.link_progress() {
                    Ok(more) => inputs.extend(more),
                    Err(Stop(outcome)) => return outcome,
                }
            }
            match event {
                Event::Ready(_) => {}
                Event::Stdout(bytes) => {
                    self.output_bytes = self.output_bytes.saturating_add(bytes.len() as u64);
                    if self.output_bytes > MAX_OUTPUT_BYTES {
                        inputs.extend(self.server_fault(format!(
                            "it wrote more than {} MiB to its output",
                            MAX_OUTPUT_BYTES >> 20
                        )));
                        continue;
                    }
                    match self.lines.push(&bytes) {
                        Ok(lines) => {
                            self.junk_lines += lines
                                .iter()
                                .filter(|l| !l.trim_start().starts_with('{'))
                                .count() as u64;
                            if self.junk_lines > MAX_JUNK_LINES {
                                inputs.extend(self.server_fault(format!(
                                    "it wrote more than {MAX_JUNK_LINES} lines that are not \
                                     JSON-RPC messages to its output (logs belong on stderr)"
                                )));
                                continue;
                            }
                            inputs.extend(lines.into_iter().map(Input::Line));
                        }
                        Err(e) => inputs.extend(self.server_fault(match e {
                            FramingError::LineTooLong => format!(
                                "it wrote a line longer than {} MiB",
                                crate::mcp::framing::MAX_LINE_BYTES >> 20
                            ),
                            FramingError::NotUtf8 => "it wrote a line that is not UTF-8".into(),
                        })),
                    }
                }
                Event::StdoutClosed => {
                    self.stdout_closed = true;
                    // The exit normally follows the closed output at once: wait a moment for it,
                    // so the failure can say how the server ended.
                    let how = self.await_exit();
                    inputs.extend(self.server_lost(how));
                }
                Event::Exited(code) => {
                    self.stdout_closed = true;
                    inputs.extend(self.server_lost(exit_phrase(code)));
                }
                Event::Wake | Event::Timeout => {
                    if let Some(input) = self.input_broken_for_good() {
                        inputs.push_back(input);
                        continue;
                    }
                    match self.check() {
                        Ok(more) => inputs.extend(more),
                        Err(Stop(outcome)) => return outcome,
                    }
                }
            }
        }
    }

    /// Closes the server's stdin and gives it a moment to exit; the caller kills it after. Over
    /// HTTP: ends the session (`DELETE`, given a moment) and stops every exchange.
    fn shut_down(&mut self) {
        if let Some(link) = self.link.as_mut() {
            link.close();
            let until = time::add_millis(&time::now(), EXIT_GRACE_MS);
            while !link.is_idle() {
                let left = millis_until(&time::now(), &until);
                if left == 0 {
                    break;
                }
                events::next(left, &link.pollables());
                link.progress();
            }
            self.link = None;
            return;
        }
        process::close_stdin();
        if self.stdout_closed {
            return;
        }
        let until = time::add_millis(&time::now(), EXIT_GRACE_MS);
        loop {
            let left = millis_until(&time::now(), &until);
            if left == 0 {
                return;
            }
            if matches!(
                events::next(left, &[]),
                Event::StdoutClosed | Event::Exited(_)
            ) {
                return;
            }
        }
    }

    fn server_lost(&mut self, how: String) -> Option<Input> {
        if self.server_gone {
            return None;
        }
        self.server_gone = true;
        Some(Input::ServerExited(how))
    }

    /// After the child's output closed: how it ended, if it exits within [`EXIT_GRACE_MS`].
    fn await_exit(&mut self) -> String {
        let until = time::add_millis(&time::now(), EXIT_GRACE_MS);
        loop {
            let left = millis_until(&time::now(), &until);
            if left == 0 {
                return "closed its output".into();
            }
            if let Event::Exited(code) = events::next(left, &[]) {
                return exit_phrase(code);
            }
        }
    }

    /// The server broke a limit: it is stopped now (its further output is never read).
    fn server_fault(&mut self, what: String) -> Option<Input> {
        if self.server_gone {
            return None;
        }
        self.server_gone = true;
        self.stdout_closed = true;
        process::kill();
        if let Some(link) = self.link.as_mut() {
            link.close();
        }
        Some(Input::ServerFault(what))
    }

    /// Whether something is due that only [`Worker::check`] does: the wait until it is over,
    /// or the last check is [`BUSY_CHECK_MS`] old.
    fn overdue(&self) -> bool {
        let now = time::now();
        self.wait_from(&now) == 0
            || time::at_or_after(&now, &time::add_millis(&self.last_check, BUSY_CHECK_MS))
    }

    /// How long to wait parked: until the next timer or deadline, renewals being the host's
    /// while the worker waits (`events.next-holding`).
    fn park_ms(&self) -> u64 {
        self.wait_for(&time::now(), false).clamp(1, MAX_PARK_MS)
    }

    /// Milliseconds from `now` until the next renewal, timer or deadline (0: one is due).
    fn wait_from(&self, now: &Timestamp) -> u64 {
        self.wait_for(now, true)
    }

    /// Milliseconds from `now` until the next timer or deadline, and the next renewal when
    /// `renewal` (0: one is due).
    fn wait_for(&self, now: &Timestamp, renewal: bool) -> u64 {
        let now = *now;
        let mut wait = if renewal {
            millis_until(&now, &self.next_renewal)
        } else {
            u64::MAX
        };
        if let Some(timer) = &self.timer {
            wait = wait.min(millis_until(&now, timer));
        }
        if let Some(slot) = &self.slot
            && (!slot.answered || self.delivering.is_some())
            && let Some(deadline) = &slot.deadline
        {
            wait = wait.min(millis_until(&now, deadline));
        }
        if let Some(due) = &self.delivering {
            wait = wait.min(millis_until(&now, due));
        }
        if let Some(due) = self.link.as_ref().and_then(|l| l.next_due()) {
            wait = wait.min(millis_until(&now, &due));
        }
        if let Some(since) = &self.input_broken_at
            && !self.server_gone
        {
            wait = wait.min(millis_until(&now, &time::add_millis(since, EXIT_GRACE_MS)));
        }
        wait
    }

    /// Writes one line to the server; `false` when it no longer reads. Usually it exited: its
    /// closed output and exit code follow (and say how it ended); if they do not within the
    /// grace, it stopped reading ([`Worker::input_broken_for_good`]).
    fn write(&mut self, line: &str) -> bool {
        if process::write_line(line).is_ok() {
            return true;
        }
        if self.input_broken_at.is_none() {
            self.input_broken_at = Some(time::now());
        }
        false
    }

    /// The server stopped reading its input [`EXIT_GRACE_MS`] ago and did not end.
    fn input_broken_for_good(&mut self) -> Option<Input> {
        let since = self.input_broken_at?;
        let until = time::add_millis(&since, EXIT_GRACE_MS);
        if millis_until(&time::now(), &until) == 0 {
            return self.server_lost("stopped reading its input".into());
        }
        None
    }

    fn perform(&mut self, action: Action) -> Result<Vec<Input>, Stop> {
        let mut more = Vec::new();
        match action {
            Action::Send(message) => match self.link.as_mut() {
                Some(link) => link.send(message, false),
                None => {
                    self.write(&message.to_string());
                }
            },
            Action::StartProbeTimer => self.arm(if self.link.is_some() {
                HTTP_PROBE_TIMEOUT_MS
            } else {
                PROBE_TIMEOUT_MS
            }),
            Action::ArmTimer(ms) => self.arm(ms),
            Action::FinalMessage(message) => self.final_message = Some(message),
            Action::OpenRound {
                operation,
                round_index,
                requests,
                request_state,
            } => more.extend(self.open_round(operation, round_index, requests, request_state)),
            Action::Deliver(message) => self.deliver(message)?,
            Action::ResolveRound => {
                if let Some(slot) = self.take_slot() {
                    store_protocol::resolve(&slot.round_id, slot.lease)
                        .map_err(|e| lost_write("resolve", &slot.round_id, &e))?;
                }
            }
            Action::FailRound { code, message } => {
                if let Some(slot) = self.take_slot() {
                    let message = if code == FailureCode::RequestWithdrawn {
                        withdrawn_message(&message, &slot.created_at)
                    } else {
                        message
                    };
                    store_protocol::fail(&slot.round_id, slot.lease, code, message)
                        .map_err(|e| lost_write("fail", &slot.round_id, &e))?;
                }
            }
            Action::ToolResult {
                kind, name, result, ..
            } => {
                let result = ToolResult {
                    tool: format!("{}:{name}", self.spec.server.name),
                    result: result.to_string(),
                    kind: Some(kind),
                };
                execution::record_tool_result(&self.held, result).map_err(|e| {
                    Stop(failed(
                        FailureKind::ServerError,
                        None,
                        format!("the tool result could not be stored: {}", error_text(&e)),
                    ))
                })?;
            }
            Action::Event { kind, message } => {
                execution::record_events(&self.held, vec![(kind.to_string(), message)]).map_err(
                    |e| {
                        Stop(failed(
                            FailureKind::ServerError,
                            None,
                            format!(
                                "the harness's event could not be stored: {}",
                                error_text(&e)
                            ),
                        ))
                    },
                )?;
            }
            Action::Finish(finished) => self.finished = Some(finished),
        }
        Ok(more)
    }

    fn open_round(
        &mut self,
        operation: super::session::Operation,
        round_index: u32,
        requests: Vec<(String, crate::m3::managed_input::types::ElicitationRequest)>,
        request_state: Option<String>,
    ) -> Option<Input> {
        let now = time::now();
        let deadline = match self.spec.round_deadline_ms {
            Some(ms) => DeadlineChoice::At(time::add_millis(&now, ms.max(1))),
            None => DeadlineChoice::DefaultDeadline,
        };
        self.rounds_created += 1;
        let keys: Vec<String> = requests.iter().map(|(k, _)| k.clone()).collect();
        let new = NewRound {
            round_id: format!("{}-r{}", self.held.execution_id, self.rounds_created),
            execution_id: self.held.execution_id.clone(),
            logical_operation_id: format!("{}-op{}", self.held.execution_id, operation.step),
            server: self.spec.server.name.clone(),
            operation_kind: operation.kind,
            operation_name: operation.name.clone(),
            requests,
            request_state,
            deadline,
            round_index,
            round_limit: self.spec.round_limit,
            owner: Some(OwnerClaim {
                owner_id: self.held.lease.owner_id.clone(),
                lease_ttl_ms: self.spec.lease_ttl_ms,
            }),
            operation_parameters: operation.arguments.to_string(),
            harness: self.session.harness_metadata(),
        };
        let record = match store_protocol::create_round(new) {
            Ok(record) => record,
            Err(e) => {
                self.store_refusal = Some(format!(
                    "the server's request could not be stored: {}",
                    error_text(&e)
                ));
                return Some(Input::Unhandled);
            }
        };
        let round_id = record.pending.round_id.clone();
        self.slot = record.lease.map(|lease| Slot {
            round_id: round_id.clone(),
            lease,
            deadline: record.pending.deadline,
            created_at: record.pending.created_at,
            answered: false,
        });
        self.pause_timer();
        let plan = self.plan.as_mut()?;
        let Some(answer) = plan.answer(&self.spec.server.name, &operation.name, &keys) else {
            return Some(Input::Unhandled);
        };
        match store_protocol::submit_responses(&round_id, &answer, &format!("plan-{round_id}")) {
            Ok(record) => {
                self.answered();
                Some(Input::Answer(record.responses.unwrap_or_default()))
            }
            Err(e) => {
                self.store_refusal = Some(format!(
                    "the elicitation plan's answer was rejected: {}",
                    error_text(&e)
                ));
                Some(Input::Unhandled)
            }
        }
    }

    /// Delivers the open round's answer at most once; in mode `fail` writes the kit's `cancel`.
    /// Over stdio the answer is delivered once written; over HTTP once the server accepted it
    /// (`mark-delivered` then waits for [`LinkEvent::Delivered`]).
    fn deliver(&mut self, message: Value) -> Result<(), Stop> {
        let line = message.to_string();
        let Some(slot) = self.slot.clone().filter(|slot| slot.answered) else {
            // Mode `fail`: the kit's own `cancel`, not a stored answer.
            match self.link.as_mut() {
                Some(link) => link.send(message, false),
                None => {
                    self.write(&line);
                }
            }
            return Ok(());
        };
        let key = format!("delivery-{}", slot.round_id);
        let record = store_protocol::start_delivery(&slot.round_id, slot.lease.clone(), key)
            .map_err(|e| {
                Stop(failed(
                    FailureKind::RoundFailed,
                    Some(FailureCode::RecoveryUnavailable),
                    format!("the answer could not be delivered: {}", error_text(&e)),
                ))
            })?;
        if record.delivery_attempts > 1 {
            return Err(Stop(failed(
                FailureKind::RoundFailed,
                None,
                "the answer was already sent once",
            )));
        }
        if let Some(link) = self.link.as_mut() {
            // Sent once; marked delivered when the server accepts it, failed if it does not,
            // or if it does not say within the delivery timeout (or the round's deadline).
            let timeout = self
                .spec
                .server
                .delivery_timeout_ms
                .unwrap_or(DEFAULT_DELIVERY_TIMEOUT_MS);
            self.delivering = Some(time::add_millis(&time::now(), timeout));
            link.send(message, true);
            return Ok(());
        }
        if !self.write(&line) {
            // Not written: never marked delivered; the round fails when the server's end is
            // reported.
            return Ok(());
        }
        store_protocol::mark_delivered(&slot.round_id, slot.lease)
            .map_err(|e| lost_write("mark-delivered", &slot.round_id, &e))?;
        Ok(())
    }

    /// What the HTTP transport did since the last look: the server's messages, the answer
    /// accepted (marked delivered), the server lost, a destination refused.
    fn link_progress(&mut self) -> Result<Vec<Input>, Stop> {
        let Some(link) = self.link.as_mut() else {
            return Ok(Vec::new());
        };
        let events = link.progress();
        let received = link.received();
        let mut inputs = Vec::new();
        // A delivery told in the same batch as the server's loss is still recorded: the answer's
        // wait ends after the whole batch, not at the loss.
        let mut gone = false;
        for event in events {
            match event {
                LinkEvent::Message(text) => {
                    if !text.trim_start().starts_with('{') {
                        self.junk_lines += 1;
                    }
                    inputs.push(Input::Line(text));
                }
                LinkEvent::Delivered => {
                    if self.delivering.take().is_some()
                        && let Some(slot) = self.slot.clone()
                    {
                        store_protocol::mark_delivered(&slot.round_id, slot.lease)
                            .map_err(|e| lost_write("mark-delivered", &slot.round_id, &e))?;
                    }
                }
                LinkEvent::Lost(how) => {
                    gone = true;
                    inputs.extend(self.server_lost(how));
                }
                LinkEvent::Refused(what) => {
                    gone = true;
                    execution::record_events(&self.held, vec![("network".into(), what.clone())])
                        .map_err(|e| {
                            Stop(failed(
                                FailureKind::ServerError,
                                None,
                                format!(
                                    "the refused request could not be recorded: {}",
                                    error_text(&e)
                                ),
                            ))
                        })?;
                    if !self.server_gone {
                        self.server_gone = true;
                        inputs.push(Input::ServerFault(what));
                    }
                }
            }
        }
        if gone {
            self.delivering = None;
        }
        if received > MAX_OUTPUT_BYTES {
            inputs.extend(
                self.server_fault(format!("it sent more than {} MiB", MAX_OUTPUT_BYTES >> 20)),
            );
        } else if self.junk_lines > MAX_JUNK_LINES {
            inputs.extend(self.server_fault(format!(
                "it sent more than {MAX_JUNK_LINES} events that are not JSON-RPC messages"
            )));
        }
        Ok(inputs)
    }

    /// An answer on its way over HTTP whose round's deadline passed, or whose delivery timeout
    /// did, before the server accepted or refused it: the delivery is given up (the request
    /// abandoned, the answer never sent again, never marked delivered) and the round fails,
    /// with its deadline's code when the deadline came first, else `server-error`.
    fn delivery_overdue(&mut self, now: &Timestamp) -> Result<Option<Input>, Stop> {
        let Some(due) = self.delivering else {
            return Ok(None);
        };
        let deadline = self
            .slot
            .as_ref()
            .and_then(|slot| slot.deadline)
            .filter(|deadline| time::at_or_after(now, deadline));
        let timed_out = time::at_or_after(now, &due);
        if deadline.is_none() && !timed_out {
            return Ok(None);
        }
        self.delivering = None;
        if let Some(link) = self.link.as_mut() {
            link.give_up_delivery();
        }
        let timeout = self
            .spec
            .server
            .delivery_timeout_ms
            .unwrap_or(DEFAULT_DELIVERY_TIMEOUT_MS);
        match deadline {
            Some(deadline) if !timed_out || time::at_or_after(&due, &deadline) => {
                let waited = timeout.saturating_sub(millis_until(&deadline, &due));
                let what = format!(
                    "the server had not answered the delivery of the answer when the round's \
                     deadline passed ({} after it was sent)",
                    duration_words(waited)
                );
                execution::record_events(&self.held, vec![("network".into(), what)]).map_err(
                    |e| {
                        Stop(failed(
                            FailureKind::ServerError,
                            None,
                            format!(
                                "the delivery's end could not be recorded: {}",
                                error_text(&e)
                            ),
                        ))
                    },
                )?;
                Ok(Some(Input::DeadlineExpired))
            }
            _ => Ok(self.server_lost(format!(
                "did not answer the delivery of the answer within {} (the delivery timeout)",
                duration_words(timeout)
            ))),
        }
    }

    /// What changed: the probe timer, lease renewal, a cancel request, the open round's answer
    /// or its deadline.
    fn check(&mut self) -> Result<Vec<Input>, Stop> {
        let now = time::now();
        self.last_check = now;
        let mut inputs = Vec::new();
        if let Some(timer) = &self.timer
            && time::at_or_after(&now, timer)
        {
            self.timer = None;
            inputs.push(Input::ProbeTimedOut);
        }
        if let Some(overdue) = self.delivery_overdue(&now)? {
            inputs.push(overdue);
            return Ok(inputs);
        }
        let waiting = self
            .slot
            .as_ref()
            .filter(|s| !s.answered)
            .map(|s| s.round_id.clone());
        // At a renewal, one write transaction renews the leases and reads the cancel flag and
        // the open round; otherwise (a wake-up) one read transaction reads them.
        let mut renewed = None;
        if time::at_or_after(&now, &self.next_renewal) {
            self.next_renewal = time::add_millis(&now, self.spec.lease_renew_ms);
            match self.renew_leases() {
                Ok(observed) => renewed = Some(observed),
                Err(e) => {
                    // A busy or failing database (a slow neighbour holding the write lock) is
                    // tried again soon, for as long as the leases last; a lease that is lost, or
                    // that expires meanwhile, ends the worker: it never writes with it again.
                    let lease_left = millis_until(&time::now(), &self.leases_expire);
                    if !execution::is_storage_fault(&e) || lease_left == 0 {
                        return Err(Stop(failed(
                            FailureKind::RoundFailed,
                            Some(FailureCode::RecoveryUnavailable),
                            format!("the worker lost its leases: {}", error_text(&e)),
                        )));
                    }
                    self.next_renewal = time::add_millis(&time::now(), RENEW_RETRY_MS);
                }
            }
        }
        let observed = match renewed {
            Some(mut observed) => {
                if waiting.is_none() {
                    observed.round = None;
                }
                observed
            }
            // A read that fails is retried at the next event.
            None => match execution::observe(&self.held.execution_id, waiting.as_deref()) {
                Ok(observed) => observed,
                Err(_) => return Ok(inputs),
            },
        };
        if observed.cancel_requested && !self.cancel_fed {
            self.cancel_fed = true;
            inputs.push(Input::Cancel);
            return Ok(inputs);
        }
        let (Some(slot), Some(record)) = (&mut self.slot, observed.round) else {
            return Ok(inputs);
        };
        match record.status {
            Status::ResponseValidated => {
                inputs.push(Input::Answer(record.responses.unwrap_or_default()));
                self.answered();
            }
            Status::Pending => {
                if let Some(deadline) = &slot.deadline
                    && time::at_or_after(&now, deadline)
                {
                    inputs.push(Input::DeadlineExpired);
                }
            }
            Status::Failed => {
                let code = record.failure.map(|f| f.code);
                self.slot = None;
                return Err(Stop(failed(
                    FailureKind::RoundFailed,
                    code,
                    "the round was failed by another worker",
                )));
            }
            _ => {}
        }
        Ok(inputs)
    }
}

impl Worker {
    /// The leases the worker holds, for the host to renew while it is parked.
    fn held_leases(&self) -> HeldLeases {
        HeldLeases {
            execution_id: self.held.execution_id.clone(),
            lease: self.held.lease.clone(),
            // Not known here: the first renewal reads the rows and the next ones carry them.
            version: 0,
            round: self.slot.as_ref().map(|slot| HeldRound {
                round_id: slot.round_id.clone(),
                lease: slot.lease.clone(),
                awaiting_answer: !slot.answered,
                version: 0,
            }),
            ttl_ms: self.spec.lease_ttl_ms,
            renew_at: self.next_renewal,
            renew_every_ms: self.spec.lease_renew_ms,
        }
    }

    /// Takes back the leases the host renewed while the worker was parked (unchanged when
    /// nothing was renewed): their expiries, and when the next renewal is due.
    fn take_back(&mut self, renewed: HeldLeases) {
        if renewed.execution_id != self.held.execution_id
            || renewed.lease.lease_token != self.held.lease.lease_token
            || !time::at_or_after(&renewed.lease.expires_at, &self.held.lease.expires_at)
            || renewed.lease.expires_at == self.held.lease.expires_at
        {
            return;
        }
        self.held.lease.expires_at = renewed.lease.expires_at;
        self.leases_expire = renewed.lease.expires_at;
        if let (Some(slot), Some(round)) = (&mut self.slot, renewed.round)
            && slot.round_id == round.round_id
            && slot.lease.lease_token == round.lease.lease_token
        {
            slot.lease = round.lease;
            if time::at_or_after(&self.leases_expire, &slot.lease.expires_at) {
                self.leases_expire = slot.lease.expires_at;
            }
        }
        self.next_renewal = renewed.renew_at;
    }

    /// Renews the execution's lease and the open round's in one transaction, remembers when they
    /// expire, and returns what the worker watches (read in the same transaction).
    fn renew_leases(
        &mut self,
    ) -> Result<execution::Observed, crate::m3::managed_input::types::ManagedInputError> {
        let renewed_at = time::now();
        let round = self
            .slot
            .as_mut()
            .map(|slot| (slot.round_id.as_str(), &mut slot.lease));
        let observed = execution::renew_and_observe(&mut self.held, round)?;
        self.leases_expire = time::add_millis(&renewed_at, self.spec.lease_ttl_ms);
        if let Some(slot) = &self.slot
            && time::at_or_after(&self.leases_expire, &slot.lease.expires_at)
        {
            self.leases_expire = slot.lease.expires_at;
        }
        Ok(observed)
    }

    /// Arms the session's timer, or (while a round waits for its answer) sets what it will have
    /// when the wait ends.
    fn arm(&mut self, ms: u64) {
        if self.slot.as_ref().is_some_and(|s| !s.answered) {
            self.timer = None;
            self.paused_ms = Some(ms);
        } else {
            self.timer = Some(time::add_millis(&time::now(), ms));
        }
    }

    /// A round began to wait for its answer: the timer stands still.
    fn pause_timer(&mut self) {
        if let Some(timer) = self.timer.take() {
            self.paused_ms = Some(millis_until(&time::now(), &timer));
        }
    }

    /// The wait for an answer ended: the timer runs on with what it had left.
    fn resume_timer(&mut self) {
        if let Some(ms) = self.paused_ms.take() {
            self.timer = Some(time::add_millis(&time::now(), ms));
        }
    }

    /// The open round's answer is committed.
    fn answered(&mut self) {
        if let Some(slot) = &mut self.slot {
            slot.answered = true;
        }
        self.resume_timer();
    }

    /// The open round ends (resolved or failed).
    fn take_slot(&mut self) -> Option<Slot> {
        let slot = self.slot.take();
        self.resume_timer();
        slot
    }
}

/// A store write the worker could not make: the execution ends, failed, saying which.
fn lost_write(
    operation: &str,
    round_id: &str,
    e: &crate::m3::managed_input::types::ManagedInputError,
) -> Stop {
    Stop(failed(
        FailureKind::ServerError,
        None,
        format!(
            "the worker could not {operation} round {round_id}: {}",
            error_text(e)
        ),
    ))
}

/// A withdrawn round's message: what the server did, and after how long.
fn withdrawn_message(what: &str, created_at: &Timestamp) -> String {
    let waited = millis_until(created_at, &time::now()) / 1000;
    format!(
        "{what}, {waited} s after the round opened: the server stopped waiting, so the answer \
         can no longer be delivered (many MCP server SDKs give up on an elicitation after 60 s \
         by default; raise the server's timeout to give people longer)"
    )
}

fn error_text(e: &crate::m3::managed_input::types::ManagedInputError) -> String {
    use crate::m3::managed_input::types::ManagedInputError as E;
    match e {
        E::Validation(d) | E::Conflict(d) | E::State(d) | E::Recovery(d) | E::Storage(d) => {
            d.message.clone()
        }
    }
}

/// Records what was started with the execution, so that recovery can end it if this worker
/// dies; a record that cannot be written stops the child and fails the execution.
fn record_spawned(held: &ExecutionLease, spawned: &Spawned) -> Result<(), ExecutionOutcome> {
    execution::record_spawned(held, spawned.clone()).map_err(|e| {
        process::kill();
        failed(
            FailureKind::ServerError,
            None,
            format!(
                "the worker could not record the process it started: {}",
                error_text(&e)
            ),
        )
    })
}

/// `ms` milliseconds as words: whole seconds as `30 s`, else `1500 ms`.
fn duration_words(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

fn millis_until(now: &Timestamp, then: &Timestamp) -> u64 {
    let diff = time::to_nanos(then) - time::to_nanos(now);
    if diff <= 0 {
        0
    } else {
        u64::try_from((diff + 999_999) / 1_000_000).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::m3::managed_input::runtime as rt;

    fn codex_spec(turn_deadline_ms: u64, max_retries: Option<u32>) -> ExecutionSpec {
        rt::ExecutionSpec {
            harness: "codex".into(),
            codex: Some(rt::CodexSettings {
                binary: "/bin/codex".into(),
                model_provider: Some(rt::ModelProvider {
                    name: "p".into(),
                    base_url: "http://127.0.0.1:1/v1".into(),
                    wire_api: "responses".into(),
                    requires_openai_auth: false,
                    env_key: None,
                    http_headers: Vec::new(),
                    env_http_headers: Vec::new(),
                    max_retries,
                }),
                credentials_from: None,
                permission_policy: rt::PermissionPolicy::Decline,
                turn_deadline_ms,
                request_timeout_ms: 60_000,
            }),
            claude_code: None,
            model: Some("m".into()),
            prompt: "p".into(),
            script: "{}".into(),
            server: rt::ServerBinding {
                name: "s".into(),
                command: "/bin/s".into(),
                args: Vec::new(),
                cwd: None,
                era: WitEra::Auto,
                env_names: Vec::new(),
                url: None,
                header_names: Vec::new(),
                delivery_timeout_ms: None,
            },
            tools: vec!["s:t".into()],
            human_input: rt::HumanInputMode::Fail,
            plan: None,
            round_limit: 10,
            lease_ttl_ms: 15_000,
            lease_renew_ms: 5_000,
            round_deadline_ms: None,
        }
    }

    /// Codex's limits are the submission's: a turn of at most 7 days, at most 100 retries of a
    /// model request (Codex would clamp more without a word); each refusal names the range.
    #[test]
    fn codex_limits_are_checked_at_submission_and_named() {
        assert_eq!(
            check_spec(&codex_spec(MAX_TURN_DEADLINE_MS, Some(100))),
            Ok(())
        );
        assert_eq!(check_spec(&codex_spec(600_000, None)), Ok(()));
        let refused = check_spec(&codex_spec(600_000, Some(101))).unwrap_err();
        assert!(refused.contains("from 0 to 100"), "{refused}");
        let refused = check_spec(&codex_spec(MAX_TURN_DEADLINE_MS + 1, None)).unwrap_err();
        assert!(refused.contains("at most 7 days"), "{refused}");
    }
}

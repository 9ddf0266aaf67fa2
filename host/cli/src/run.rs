//! `m3 run`: submits an execution and runs its worker in this process until it ends. Pending
//! rounds are answered in a terminal form, or (with `--no-prompt` or without a terminal)
//! printed as JSON lines and answered by another process (`m3 respond`). An agent with several
//! models submits one execution per model and drives them all to their end, never asking on
//! the terminal; each result is reported, and the exit is 0 only if every one succeeded.

use crate::interrupt::Interrupt;
use crate::seconds::seconds;
use crate::{Cli, json, print_json, read_input};
use anyhow::{Result, anyhow, bail};
use clap::Args;
use indicatif::ProgressBar;
use m3::{
    AgentSpec, ExecutionError, ExecutionHandle, ExecutionResult, ExecutionStatus, HttpServer,
    ManagedInputError, ManagedInputStatus, ManagedInputStore, McpTestKit, ModelValidationError,
    OutcomeKind, Policy, RoundFilter, Script, ServerBinding, StdioServer, Submission,
};
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// How often the command looks at its execution.
const POLL: Duration = Duration::from_millis(20);

/// Arguments of `m3 run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The agent harness: `scripted` (the script decides the tool calls), `codex` (the Codex
    /// CLI with `--model`) or `claude-code` (the Claude Code CLI with `--model`).
    #[arg(long, default_value = "scripted")]
    harness: String,
    /// A model (harnesses with models only; repeatable, at most 64 times: one execution per
    /// model).
    #[arg(long, value_name = "MODEL")]
    model: Vec<String>,
    /// The agent as JSON, or `@FILE` for a file holding it: the specification's dict form,
    /// e.g. `{"harness": "codex", "models": ["m1", "m2"], "codex": {"binary": "codex",
    /// "model_provider": {"name": "n", "base_url": "http://127.0.0.1:8080/v1"},
    /// "turn_deadline_secs": 600, "request_timeout_secs": 60}}` or `{"harness": "scripted",
    /// "script": {"steps": [..]}}`, with an optional `elicitation_plan`. Instead of
    /// `--harness`, `--model`, `--script` and the `codex` flags. A scripted agent without steps
    /// calls each `--tool` once.
    #[arg(
        long,
        value_name = "JSON|@FILE",
        conflicts_with_all = ["harness", "model", "script", "codex_binary", "model_base_url", "turn_deadline", "model_env_key", "model_openai_auth", "model_retries", "codex_home", "no_codex_sign_in", "claude_binary", "claude_base_url", "claude_config_dir", "no_claude_sign_in", "claude_retries"]
    )]
    agent: Option<String>,
    /// `codex`: the Codex program (default: `codex` on this process's `PATH`).
    #[arg(long, value_name = "PATH")]
    codex_binary: Option<String>,
    /// `codex`: a Responses-compatible model endpoint (e.g. `http://127.0.0.1:8080/v1`).
    /// Default: Codex's own provider (OpenAI) with your Codex sign-in.
    #[arg(long, value_name = "URL")]
    model_base_url: Option<String>,
    /// `codex`: the environment variable of this process holding the endpoint's API key; its
    /// value is given to Codex alone (never to the server, never on a command line).
    #[arg(long, value_name = "NAME", requires = "model_base_url")]
    model_env_key: Option<String>,
    /// `codex`: the endpoint takes your Codex sign-in (`auth.json`) as its bearer token.
    #[arg(long, requires = "model_base_url")]
    model_openai_auth: bool,
    /// `codex`: how often Codex retries a failed model request (default: Codex's, 5).
    #[arg(
        long,
        value_name = "N",
        requires = "model_base_url",
        value_parser = clap::value_parser!(u32).range(0..=100)
    )]
    model_retries: Option<u32>,
    /// `codex`: the Codex home whose sign-in (`auth.json`) each run's private home receives
    /// (default: `$CODEX_HOME`, else `~/.codex`).
    #[arg(long, value_name = "DIR", conflicts_with = "no_codex_sign_in")]
    codex_home: Option<PathBuf>,
    /// `codex`: give Codex no sign-in.
    #[arg(long)]
    no_codex_sign_in: bool,
    /// `claude-code`: the Claude Code program (default: `claude` on this process's `PATH`).
    #[arg(long, value_name = "PATH")]
    claude_binary: Option<String>,
    /// `claude-code`: an Anthropic Messages API endpoint (e.g. `http://127.0.0.1:8080`), given to
    /// Claude Code as `ANTHROPIC_BASE_URL`. Its key is `ANTHROPIC_API_KEY` or
    /// `ANTHROPIC_AUTH_TOKEN` of this process, given to Claude Code alone (the server sees it
    /// empty).
    #[arg(long, value_name = "URL")]
    claude_base_url: Option<String>,
    /// `claude-code`: the Claude Code configuration directory whose sign-in
    /// (`.credentials.json`) each run's private one receives (default: `$CLAUDE_CONFIG_DIR`,
    /// else `~/.claude`).
    #[arg(long, value_name = "DIR", conflicts_with = "no_claude_sign_in")]
    claude_config_dir: Option<PathBuf>,
    /// `claude-code`: give Claude Code no sign-in (only a key from the environment).
    #[arg(long)]
    no_claude_sign_in: bool,
    /// `claude-code`: how often Claude Code retries a failed model request (default: Claude
    /// Code's, 10).
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(0..=100)
    )]
    claude_retries: Option<u32>,
    /// `codex`, `claude-code`: how long the turn may run before it is interrupted, in seconds
    /// (default 600; time spent waiting for answers does not count).
    #[arg(long, value_name = "SECS", default_value_t = 600.0)]
    turn_deadline: f64,
    /// The scripted harness's tool calls: `{"steps": [{"tool": "server:tool", "arguments": {..}}]}`.
    /// Without it, each `--tool` is called once with no arguments.
    #[arg(long, value_name = "FILE")]
    script: Option<PathBuf>,
    /// The server's name (the `server` of `server:tool`).
    #[arg(long, value_name = "NAME")]
    server_name: String,
    /// The server's program: a path (relative to this directory), or a name looked up in the
    /// child's `PATH`.
    #[arg(
        long,
        value_name = "CMD",
        required_unless_present = "server_url",
        conflicts_with = "server_url"
    )]
    server_command: Option<String>,
    /// A Streamable HTTP server instead: its MCP endpoint (`http://` or `https://`). The
    /// execution may send requests to this URL's origin and nowhere else.
    #[arg(
        long,
        value_name = "URL",
        conflicts_with_all = ["server_arg", "server_env", "server_env_file", "server_cwd"]
    )]
    server_url: Option<String>,
    /// `--server-url`: one header of every request to the server (repeatable), `NAME=VALUE` or
    /// `NAME: VALUE` (the name ends at the first `=` or `:`; the value may hold both). Its value
    /// is never stored or printed. At most 64 headers, a name at most 256 bytes, a value at
    /// most 8 KiB, all together at most 64 KiB.
    // `requires` alone lets `--server-command` through: clap takes a missing argument that
    // conflicts with one present as not missing, so the conflict is said too.
    #[arg(
        long,
        value_name = "NAME=VALUE",
        requires = "server_url",
        conflicts_with = "server_command"
    )]
    server_header: Vec<String>,
    /// `--server-url`: headers from a file (at most 256 KiB), one `NAME: VALUE` (or
    /// `NAME=VALUE`) per line (blank lines and lines starting with `#` are skipped), so that a
    /// secret need not appear on a command line. An error names the line, never its text.
    #[arg(
        long,
        value_name = "FILE",
        requires = "server_url",
        conflicts_with = "server_command"
    )]
    server_header_file: Option<PathBuf>,
    /// `--server-url`: how long an answer's delivery may wait for the server's response, in
    /// seconds (default 30); past it the round fails.
    #[arg(long, value_name = "SECS", requires = "server_url")]
    server_delivery_timeout: Option<f64>,
    /// One argument of the server (repeatable).
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    server_arg: Vec<String>,
    /// One environment variable of the server (repeatable): `NAME` passes this process's own
    /// value (a secret need not appear on any command line), `NAME=VALUE` sets it. The server
    /// gets these, those of `--server-env-file`, and this process's `PATH`, nothing else.
    #[arg(long, value_name = "NAME[=VALUE]")]
    server_env: Vec<String>,
    /// Environment variables of the server from a file (at most 1 MiB, 1,024 variables): one
    /// `NAME=VALUE` per line; blank lines and lines starting with `#` are skipped. An error
    /// names the line, never its text.
    #[arg(long, value_name = "FILE")]
    server_env_file: Option<PathBuf>,
    /// The server's working directory (absolute, or relative to this directory; default: a
    /// private scratch directory).
    #[arg(long, value_name = "DIR")]
    server_cwd: Option<String>,
    /// Force the server's MCP era (default: probe).
    #[arg(long, value_enum)]
    server_era: Option<crate::EraArg>,
    /// A `server:tool` the agent may call (repeatable; at least one).
    #[arg(long = "tool", value_name = "SERVER:TOOL", required = true)]
    tools: Vec<String>,
    /// `managed` (pause at each elicitation for an answer) or `fail` (the default).
    #[arg(long, default_value = "fail")]
    human_input: String,
    /// Each round's deadline in seconds (default: the kit's, 24 hours).
    #[arg(long, value_name = "SECS")]
    deadline: Option<f64>,
    /// Never ask on the terminal: print pending rounds as JSON lines and wait for answers.
    #[arg(long)]
    no_prompt: bool,
    /// The worker's lease on its execution and rounds, in seconds (default 15; renewed every
    /// third of it). `m3 recover` acts once it has expired.
    #[arg(long, value_name = "SECS", default_value_t = 15.0)]
    lease: f64,
    /// The prompt.
    prompt: String,
}

/// The kit's environment for children: this process's `PATH` only (so a server named by its
/// program name is found), plus what the binding adds.
fn child_env() -> BTreeMap<String, String> {
    std::env::var("PATH")
        .map(|path| BTreeMap::from([("PATH".to_string(), path)]))
        .unwrap_or_default()
}

/// The kit's environment: [`child_env`], plus the variables the model provider names (its API
/// key, secret headers) from this process's environment: Codex gets them, the server does not
/// (a harness that starts the server gives it only its binding's environment). For Claude Code,
/// the model's key (`ANTHROPIC_API_KEY`, `ANTHROPIC_AUTH_TOKEN`) when this process has one: the
/// server sees it empty.
fn harness_env(spec: &AgentSpec) -> Result<BTreeMap<String, String>> {
    let mut env = child_env();
    if spec.harness == m3::Harness::ClaudeCode {
        for name in m3::claude_code::KEY_VARIABLES {
            if let Ok(value) = std::env::var(name) {
                env.insert(name.to_string(), value);
            }
        }
        return Ok(env);
    }
    let Some(provider) = &spec.codex.model_provider else {
        return Ok(env);
    };
    for name in provider
        .env_key
        .iter()
        .chain(provider.env_http_headers.values())
    {
        let value = std::env::var(name).map_err(|_| {
            crate::invalid_submission(format!(
                "the model provider reads `{name}`, which this process's environment does not set"
            ))
        })?;
        env.insert(name.clone(), value);
    }
    Ok(env)
}

/// The era flag.
fn era(args: &RunArgs) -> m3::McpEra {
    match args.server_era {
        None => m3::McpEra::Auto,
        Some(crate::EraArg::Legacy) => m3::McpEra::Legacy,
        Some(crate::EraArg::Modern) => m3::McpEra::Modern,
    }
}

fn server(args: &RunArgs) -> Result<ServerBinding> {
    match &args.server_url {
        Some(url) => {
            let mut server = http_server(args, url)?;
            if let Some(secs) = args.server_delivery_timeout {
                let flag = "--server-delivery-timeout";
                let timeout = seconds(flag, secs, crate::seconds::DELIVERY_TIMEOUT)
                    .map_err(crate::invalid_submission)?;
                server = server.delivery_timeout(timeout);
            }
            Ok(server.into())
        }
        None => Ok(stdio_server(args)?.into()),
    }
}

/// The most `--server-header-file` is read of: four times the headers a binding may have
/// ([`HttpServer::MAX_HEADER_BYTES`]), leaving room for comments and blank lines.
const MAX_HEADER_FILE_BYTES: u64 = 4 * HttpServer::MAX_HEADER_BYTES as u64;

/// The most `--server-env-file` is read of: its variables are passed to a program on its
/// environment, which Linux bounds (`ARG_MAX`, commonly 2 MiB with the arguments).
const MAX_ENV_FILE_BYTES: u64 = 1024 * 1024;

/// One header as `--server-header` and `--server-header-file` take it: `NAME: VALUE` or
/// `NAME=VALUE`. The name ends at the first `:` or `=`, whichever comes first (neither can be
/// part of a header name, while a value may hold both, as a base64 token ends in `==`); name
/// and value are trimmed of surrounding white space. `None` without either.
fn split_header(entry: &str) -> Option<(&str, &str)> {
    let at = entry.find([':', '='])?;
    Some((entry[..at].trim(), entry[at + 1..].trim()))
}

/// The headers read so far, checked as each is added: the header itself, then how many and how
/// large they are together (so a file of 30,000 lines is refused at the one past the limit).
/// An error names where (`where_`) and what is wrong, never the entry's text.
fn add_header(server: HttpServer, entry: &str, where_: &dyn Fn() -> String) -> Result<HttpServer> {
    let (name, value) = split_header(entry).ok_or_else(|| {
        crate::invalid_submission(format!(
            "{}: expected NAME: VALUE or NAME=VALUE, found neither `:` nor `=` (the text is not \
             shown: it may be a secret) (invalid_header)",
            where_()
        ))
    })?;
    let refused = |e: m3::HeaderError| crate::invalid_submission(format!("{}: {e}", where_()));
    HttpServer::check_header(name, value).map_err(refused)?;
    let server = server.header(name, value);
    HttpServer::check_header_totals(
        server.headers.len(),
        server.headers.iter().map(|(k, v)| k.len() + v.len()).sum(),
    )
    .map_err(refused)?;
    Ok(server)
}

/// `--server-url`, with its headers, each checked as it is read (an error names the file's
/// line or the flag's occurrence, and what is wrong; never a header's value, nor a name that
/// is not a valid one).
fn http_server(args: &RunArgs, url: &str) -> Result<HttpServer> {
    let mut server = HttpServer::new(&args.server_name, url).era(era(args));
    if let Some(file) = &args.server_header_file {
        let text = crate::read_input_within(file, MAX_HEADER_FILE_BYTES)
            .map_err(crate::invalid_submission)?;
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let where_ = || {
                format!(
                    "--server-header-file {} line {}",
                    file.display(),
                    number + 1
                )
            };
            server = add_header(server, line, &where_)?;
        }
    }
    for (number, entry) in args.server_header.iter().enumerate() {
        let where_ = || format!("--server-header number {}", number + 1);
        server = add_header(server, entry, &where_)?;
    }
    Ok(server)
}

/// Adds one variable to the server's environment, checked as it is read: the operating system
/// must be able to pass it, and there may be at most [`StdioServer::MAX_ENV_VARS`]. An error
/// names where (`where_`) and what is wrong, never the value.
fn add_env(
    server: StdioServer,
    name: String,
    value: String,
    where_: &dyn Fn() -> String,
) -> Result<StdioServer> {
    let refused =
        |e: m3::ProcessInputError| crate::invalid_submission(format!("{}: {e}", where_()));
    StdioServer::check_env(&name, &value).map_err(refused)?;
    let server = server.env(name, value);
    if server.env.len() > StdioServer::MAX_ENV_VARS {
        return Err(refused(m3::ProcessInputError::TooManyVariables {
            count: server.env.len(),
        }));
    }
    Ok(server)
}

fn stdio_server(args: &RunArgs) -> Result<StdioServer> {
    let command = args.server_command.clone().unwrap_or_default();
    let mut server =
        StdioServer::new(&args.server_name, command).args(args.server_arg.iter().cloned());
    if let Some(file) = &args.server_env_file {
        let text = crate::read_input_within(file, MAX_ENV_FILE_BYTES)
            .map_err(crate::invalid_submission)?;
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let where_ = || format!("--server-env-file {} line {}", file.display(), number + 1);
            // Values may be secrets: an error names the line, never its text.
            let (k, v) = line
                .split_once('=')
                .filter(|(k, _)| valid_name(k))
                .ok_or_else(|| {
                    crate::invalid_submission(format!(
                        "{}: expected NAME=VALUE, with a non-empty NAME (the text is not shown: \
                         it may be a secret) (invalid_environment)",
                        where_()
                    ))
                })?;
            server = add_env(server, k.to_string(), v.to_string(), &where_)?;
        }
    }
    for (number, entry) in args.server_env.iter().enumerate() {
        let where_ = || format!("--server-env number {}", number + 1);
        let (k, v) = match entry.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => {
                let value = std::env::var(entry).map_err(|_| {
                    // A conventional variable name is said; anything else might be a value
                    // given by mistake without its NAME=.
                    let name = if is_identifier(entry) {
                        format!(" ({entry})")
                    } else {
                        String::new()
                    };
                    crate::invalid_submission(format!(
                        "{}{name}: this process has no such variable to pass on \
                         (give NAME=VALUE, or set it)",
                        where_()
                    ))
                })?;
                (entry.clone(), value)
            }
        };
        if !valid_name(&k) {
            return Err(crate::invalid_submission(format!(
                "{}: --server-env takes NAME or NAME=VALUE, with a non-empty NAME without `=` or \
                 NUL (invalid_environment)",
                where_()
            )));
        }
        server = add_env(server, k, v, &where_)?;
    }
    if let Some(cwd) = &args.server_cwd {
        server = server.cwd(cwd.clone());
    }
    server.era = era(args);
    Ok(server)
}

/// A conventional environment variable name: a letter or `_`, then letters, digits and `_`.
fn is_identifier(text: &str) -> bool {
    let mut bytes = text.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// An environment variable name a child can be given.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

fn script(args: &RunArgs) -> Result<Script> {
    match &args.script {
        Some(file) => {
            let text = read_input(file).map_err(crate::invalid_submission)?;
            Script::from_json(&text).map_err(|e| {
                anyhow!(ModelValidationError {
                    message: format!(
                        "the script {} is not a scripted-harness script: {e}",
                        file.display()
                    ),
                })
            })
        }
        None => Ok(args
            .tools
            .iter()
            .fold(Script::default(), |s, tool| s.then(tool.clone(), json!({})))),
    }
}

/// The agent of `--agent`: its JSON, or the file `@FILE` holding it.
fn agent_spec(args: &RunArgs, value: &str) -> Result<AgentSpec> {
    let (text, source) = match value.strip_prefix('@') {
        Some(file) => (
            read_input(Path::new(file)).map_err(crate::invalid_submission)?,
            format!("--agent @{file}"),
        ),
        None => (value.to_string(), "--agent".to_string()),
    };
    let mut spec = AgentSpec::from_json(&text).map_err(|e| {
        anyhow!(ModelValidationError {
            message: format!("{source}: {}", e.message),
        })
    })?;
    if spec.harness == m3::Harness::Scripted && spec.script.steps.is_empty() {
        spec.script = script(args)?;
    }
    Ok(spec)
}

/// Where this run's output goes.
pub struct Output {
    /// JSON lines on stdout.
    pub json: bool,
    /// Answer pending rounds on the terminal.
    pub interactive: bool,
    /// The spinner on stderr (hidden when stderr is not a terminal).
    pub progress: ProgressBar,
    /// Where a failed execution's diagnostics are read from (its harness's stderr tail).
    pub executions: Option<Arc<m3::Executions>>,
}

impl Output {
    /// Output for `cli`: interactive only on a terminal and without `--no-prompt`.
    pub fn new(cli: &Cli, no_prompt: bool) -> Self {
        let interactive =
            !no_prompt && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
        let progress = crate::engine_start::on_stderr();
        Self {
            json: cli.json,
            interactive,
            progress,
            executions: None,
        }
    }
}

/// The most `--model`s one `run` takes: each is an execution with its own harness and server
/// processes, all running at once.
const MAX_MODELS: usize = 64;

/// `m3 run`.
pub fn run(cli: &Cli, args: &RunArgs) -> Result<ExitCode> {
    if args.model.len() > MAX_MODELS {
        anyhow::bail!(
            "ModelValidationError: --model may be given from 0 to {MAX_MODELS} times (one \
             execution each), not {}",
            args.model.len()
        );
    }
    crate::engine_start::prepare(cli);
    let policy = Policy::new()?;
    let human_input = policy.parse_human_input(&args.human_input)??;
    let spec = match (&args.agent, args.harness.as_str()) {
        (Some(value), _) => agent_spec(args, value)?,
        (None, "scripted") => {
            let mut spec = AgentSpec::scripted(script(args)?);
            spec.models = args.model.clone();
            spec
        }
        (None, "codex") => {
            let turn_deadline = seconds(
                "--turn-deadline",
                args.turn_deadline,
                crate::seconds::TURN_DEADLINE,
            )
            .map_err(crate::invalid_submission)?;
            let options = m3::CodexOptions {
                binary: args.codex_binary.clone().unwrap_or_else(|| "codex".into()),
                model_provider: args.model_base_url.as_ref().map(|url| {
                    let mut provider = m3::ModelProvider::responses("m3", url.clone());
                    provider.env_key = args.model_env_key.clone();
                    provider.requires_openai_auth = args.model_openai_auth;
                    provider.max_retries = args.model_retries;
                    provider
                }),
                turn_deadline,
                credentials: match (&args.codex_home, args.no_codex_sign_in) {
                    (_, true) => m3::CodexCredentials::None,
                    (Some(dir), false) => m3::CodexCredentials::From(dir.clone()),
                    (None, false) => m3::CodexCredentials::UserHome,
                },
                ..m3::CodexOptions::default()
            };
            AgentSpec::codex(args.model.iter().cloned(), options)
        }
        (None, "claude-code") => {
            let turn_deadline = seconds(
                "--turn-deadline",
                args.turn_deadline,
                crate::seconds::TURN_DEADLINE,
            )
            .map_err(crate::invalid_submission)?;
            let options = m3::ClaudeCodeOptions {
                binary: args
                    .claude_binary
                    .clone()
                    .unwrap_or_else(|| "claude".into()),
                base_url: args.claude_base_url.clone(),
                turn_deadline,
                credentials: match (&args.claude_config_dir, args.no_claude_sign_in) {
                    (_, true) => m3::ClaudeCodeCredentials::None,
                    (Some(dir), false) => m3::ClaudeCodeCredentials::From(dir.clone()),
                    (None, false) => m3::ClaudeCodeCredentials::UserConfig,
                },
                max_retries: args.claude_retries,
                ..m3::ClaudeCodeOptions::default()
            };
            AgentSpec::claude_code(args.model.iter().cloned(), options)
        }
        (None, other) => bail!(ModelValidationError {
            message: format!("unknown harness `{other}` (known: scripted, codex, claude-code)"),
        }),
    };
    let mut submission = Submission::new(&args.prompt, server(args)?)
        .tools(args.tools.iter().cloned())
        .human_input(human_input);
    if let Some(secs) = args.deadline {
        let deadline = seconds("--deadline", secs, crate::seconds::ROUND_DEADLINE)
            .map_err(crate::invalid_submission)?;
        submission = submission.round_deadline(deadline);
    }
    let lease =
        seconds("--lease", args.lease, crate::seconds::LEASE).map_err(crate::invalid_submission)?;
    let options = m3::KitOptions {
        lease_ttl: lease,
        lease_renew: lease / 3,
    };
    let store = crate::execution_store(cli)?;
    let kit = McpTestKit::with_options(store.clone(), harness_env(&spec)?, options)?;
    // Caught before anything is submitted: Ctrl-C from here on cancels what runs.
    let interrupt = Interrupt::catch()?;
    let agents = kit.agents([spec])?;
    // Several executions are never answered on the terminal: their rounds are printed.
    let several = agents.len() > 1;
    let mut output = Output::new(cli, args.no_prompt || several);
    output.executions = store.executions().ok();
    let mut handles = Vec::new();
    for agent in &agents {
        match agent.submit(submission.clone()) {
            Ok(handle) => handles.push(handle),
            Err(e) => {
                // What was already submitted is cancelled and ends with this process's kit. A
                // cancel that cannot be stored is said with the error, never dropped (those
                // executions are failed by recovery once this process is gone).
                let unstored: Vec<String> = handles
                    .iter()
                    .filter_map(|h| {
                        h.cancel()
                            .err()
                            .map(|c| format!("{}: {c}", h.execution_id()))
                    })
                    .collect();
                return Err(with_failed_cancels(e.into(), &unstored));
            }
        }
        if several {
            submitted(&handles[handles.len() - 1], agent.model(), &output);
        }
    }
    let rounds = store.managed_input_store()?.ok_or_else(|| {
        anyhow!("StorageError: the execution store resolves no managed-input store")
    })?;
    let ended = drive(&handles, rounds.as_ref(), &output, &interrupt)?;
    drop(kit);
    store.close();
    let code = finish_all(ended, &output)?;
    if interrupt.requested() {
        eprintln!("interrupted: the execution was cancelled");
        return Ok(ExitCode::from(crate::interrupt::EXIT_CODE));
    }
    Ok(code)
}

/// Says which model an execution of several runs: a `submitted` JSON line (`--json`) or a line
/// of text.
fn submitted(handle: &ExecutionHandle, model: Option<&str>, output: &Output) {
    if output.json {
        print_json(
            &json!({"event": "submitted", "execution_id": handle.execution_id(), "model": model}),
            true,
        );
    } else {
        println!(
            "execution {}: submitted (model {})",
            handle.execution_id(),
            model.unwrap_or("none")
        );
    }
}

/// Reports how an execution ended: its result (also when a deadline timed it out), and then
/// for a timeout the `OperationTimeout` error (the first stderr line, a non-zero exit).
pub fn finish(ended: Result<ExecutionResult, ExecutionError>, output: &Output) -> Result<ExitCode> {
    finish_all(vec![ended], output)
}

/// Reports how each execution ended, in order: every result (also one a deadline timed out);
/// then the first error, if any (the first stderr line, a non-zero exit); otherwise success
/// only if every execution succeeded.
pub fn finish_all(
    ended: Vec<Result<ExecutionResult, ExecutionError>>,
    output: &Output,
) -> Result<ExitCode> {
    let mut code = ExitCode::SUCCESS;
    let mut first_error = None;
    for ended in ended {
        match ended {
            Ok(result) => {
                report(&result, output);
                if exit_code(&result) != ExitCode::SUCCESS {
                    code = ExitCode::FAILURE;
                }
            }
            Err(ExecutionError::OperationTimeout(timeout)) if timeout.result.is_some() => {
                if let Some(result) = &timeout.result {
                    report(result, output);
                }
                first_error.get_or_insert(ExecutionError::OperationTimeout(timeout));
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(code),
    }
}

/// Success when the execution succeeded, failure otherwise.
pub fn exit_code(result: &ExecutionResult) -> ExitCode {
    if result.outcome.kind == OutcomeKind::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Waits for the executions to end, reporting every round of each once, in the order they were
/// opened (also one that was answered, or ended, before the command looked): printed as a
/// `pending` JSON line (which names its execution), or answered in the terminal form while it
/// is still pending. Returns how each execution ended, in order (`Err(OperationTimeout)`
/// carries the result of a deadline that passed).
pub fn drive(
    handles: &[ExecutionHandle],
    rounds: &dyn ManagedInputStore,
    output: &Output,
    interrupt: &Interrupt,
) -> Result<Vec<Result<ExecutionResult, ExecutionError>>> {
    let mut seen = HashSet::new();
    output.progress.set_message(match handles {
        [handle] => format!("execution {} running", handle.execution_id()),
        _ => format!("{} executions running", handles.len()),
    });
    // SIGTERM and Ctrl-C (also in the terminal form) cancel every execution: its server is
    // told, its open round fails `cancelled`, and everything it started is ended and removed,
    // as on any other end; the results are still printed. A second Ctrl-C exits at once.
    let mut cancelled = false;
    let mut done = vec![false; handles.len()];
    loop {
        for (handle, done) in handles.iter().zip(done.iter_mut()) {
            if !*done {
                *done = report_rounds(handle, rounds, output, interrupt, &mut seen)?;
            }
        }
        if done.iter().all(|done| *done) {
            break;
        }
        if !cancelled && interrupt.requested() {
            cancelled = true;
            crate::form::restore_terminal();
            output.progress.set_message(
                "interrupted: cancelling (the open round fails `cancelled`; Ctrl-C again to exit at once)",
            );
            // Every execution is asked, even if asking one fails; then the first failure.
            let asked: Vec<_> = handles.iter().map(ExecutionHandle::cancel).collect();
            asked.into_iter().collect::<Result<(), _>>()?;
        }
        std::thread::sleep(POLL);
    }
    output.progress.finish_and_clear();
    Ok(handles
        .iter()
        .map(|handle| handle.result(Some(Duration::from_secs(30))))
        .collect())
}

/// Reports the rounds of one execution not reported yet; whether it had finished before
/// they were listed (so none can be missing).
fn report_rounds(
    handle: &ExecutionHandle,
    rounds: &dyn ManagedInputStore,
    output: &Output,
    interrupt: &Interrupt,
    seen: &mut HashSet<String>,
) -> Result<bool> {
    let filter = RoundFilter {
        execution_id: Some(handle.execution_id().to_string()),
        status: None,
        limit: None,
    };
    // Read before listing: every round opened before it finished is in the listing.
    let finished = handle.snapshot()?.lifecycle == ExecutionStatus::Finished;
    for record in rounds.list_rounds(&filter)? {
        let round = record.pending;
        if !seen.insert(round.round_id.clone()) {
            continue;
        }
        if output.interactive && interrupt.requested() {
            // Being cancelled: no more forms; the round fails `cancelled` with the execution.
        } else if output.interactive && record.status == ManagedInputStatus::Pending {
            answer_on_terminal(handle, &round, output)?;
        } else if output.interactive {
            output.progress.suspend(|| {
                eprintln!(
                    "round {} is already {} (answered or ended elsewhere)",
                    round.round_id, record.status
                )
            });
        } else {
            output.progress.suspend(|| {
                print_json(
                    &json!({"event": "pending", "round": json::pending_round(&round)}),
                    true,
                )
            });
            output.progress.set_message(format!(
                "waiting for an answer to round {} (m3 respond {} ...)",
                round.round_id, round.round_id
            ));
        }
    }
    Ok(finished)
}

/// Answers a pending round in the terminal form, asking again (with the values typed before)
/// while the component refuses the answer. Ctrl-C in the form answers nothing: the interrupt
/// flag is set, and the caller cancels the execution.
fn answer_on_terminal(
    handle: &ExecutionHandle,
    round: &m3::PendingElicitationRound,
    output: &Output,
) -> Result<()> {
    let key = format!("terminal-{}", round.round_id);
    let mut earlier = None;
    loop {
        let asked = output
            .progress
            .suspend(|| crate::form::ask_round(round, earlier.as_ref()));
        let answers = match asked {
            Ok(answers) => answers,
            Err(e) if crate::form::interrupted(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        match handle.respond_elicitation(&round.round_id, answers.clone(), &key) {
            Ok(()) => return Ok(()),
            Err(ExecutionError::ManagedInput(ManagedInputError::Validation(e))) => {
                output.progress.suspend(|| {
                    eprintln!(
                        "ManagedInputValidationError: {}; try again",
                        crate::escaped::line(&e.to_string())
                    )
                });
                earlier = Some(answers);
            }
            Err(ExecutionError::ManagedInput(
                e @ (ManagedInputError::State(_) | ManagedInputError::Recovery(_)),
            )) => {
                // The round ended while the form was open (the server stopped waiting, a
                // deadline, a cancel): the answer was not taken; the execution goes on.
                output
                    .progress
                    .suspend(|| eprintln!("{}", crate::escaped::line(&e.to_string())));
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Prints the result: a JSON line (`--json`) or a summary.
pub fn report(result: &ExecutionResult, output: &Output) {
    if output.json {
        print_json(
            &json!({"event": "result", "result": json::result(result)}),
            true,
        );
        return;
    }
    // The outcome's message, the tools' output and the stderr tail are the server's words:
    // their control characters are shown, never sent to the terminal (`escaped.rs`).
    println!(
        "execution {}: {}",
        result.execution_id,
        crate::escaped::line(&result.outcome.to_string())
    );
    for call in &result.outcome.tool_results {
        println!(
            "{}: {}",
            crate::escaped::line(&call.tool),
            crate::escaped::lines(&call.text())
        );
    }
    // A failure says what the server (or harness) last wrote on stderr (its environment's
    // values redacted by the host).
    if result.outcome.kind == m3::OutcomeKind::Failed
        && let Some(executions) = &output.executions
        && let Ok(diagnostics) = executions.diagnostics(&result.execution_id)
        && let Some(tail) = diagnostics.stderr_tail
    {
        println!("its stderr ended with:");
        let lines: Vec<&str> = tail.lines().collect();
        for line in &lines[lines.len().saturating_sub(10)..] {
            println!("  {}", crate::escaped::line(line));
        }
    }
}

/// `error`, adding the executions whose cancel could not be stored after it (its type and code
/// stay first and last, as every error's).
fn with_failed_cancels(error: anyhow::Error, unstored: &[String]) -> anyhow::Error {
    if unstored.is_empty() {
        return error;
    }
    let reported = crate::error_report::classify(&error);
    let code = reported
        .code
        .as_deref()
        .map(|c| format!(" ({c})"))
        .unwrap_or_default();
    let message = reported
        .message
        .strip_suffix(&code)
        .unwrap_or(&reported.message);
    anyhow::anyhow!(
        "{}: {message}; cancelling the executions submitted before it failed too, so \
         recovery fails them once this process ends: {}{code}",
        reported.type_name,
        unstored.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_that_could_not_be_stored_is_said_with_the_error_keeping_its_type_and_code() {
        let error = anyhow::anyhow!("StorageError: the disk is full (storage_failure)");
        let plain = with_failed_cancels(anyhow::anyhow!("{error}"), &[]);
        assert_eq!(plain.to_string(), error.to_string());
        let both = with_failed_cancels(error, &["exec-1: StorageError: locked".to_string()]);
        let reported = crate::error_report::classify(&both);
        assert_eq!(reported.type_name, "StorageError");
        assert_eq!(reported.code.as_deref(), Some("storage_failure"));
        assert!(
            reported.message.contains("exec-1: StorageError: locked"),
            "{both}"
        );
        assert!(reported.message.starts_with("the disk is full;"), "{both}");
    }
}

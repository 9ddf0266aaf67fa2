//! The test kit: agents, submissions and execution handles, blocking ([`McpTestKit`]) and
//! async ([`AsyncMcpTestKit`]), with the same behaviour.
//!
//! A submission is checked and stored by the component; a worker task then drives the execution
//! inside the component (`runtime.run-execution`) on the kit's tokio runtime. When the kit
//! first touches its store, it runs recovery, and then again once per lease period for as long
//! as it lives: rounds and executions whose worker (or submitter) is gone end `failed` with
//! `recovery_unavailable`, whichever process left them, with no operator.
//!
//! A submission's programs and working directories are resolved when it is submitted, as a
//! subprocess API resolves them (see [`crate::process::resolve`]); a missing one is a
//! [`ModelValidationError`]. [`AsyncMcpTestKit::execution`] gives a handle on any execution of
//! the store, submitted by any process.
//!
//! # Files
//!
//! The public execution API.
//!
//! - `mod.rs`: `AsyncMcpTestKit` (tokio) and `McpTestKit` (the same on its own two-thread runtime),
//!   `KitOptions` (lease 15 s, renewal 5 s), agents, submit (policy checks, programs and
//!   directories resolved, then `runtime.submit`, then a worker task), `execution(id)` (a handle on
//!   any execution of the store), and recovery: at the store's first use and then once per lease
//!   period while the kit lives.
//! - `handle.rs`: `AsyncExecutionHandle` / `ExecutionHandle` (`pending_elicitation`,
//!   `respond_elicitation` then wake, `snapshot`, `result(timeout)` woken by its execution's
//!   wake-ups (its end), `cancel`).
//! - `error.rs`: `ExecutionError`.
//! - `agent.rs`: `AgentSpec`, `Script` (`{"steps": [...]}` of `ScriptStep::{Tool, Prompt,
//!   Resource}`), `PlanEntry`, `CodexOptions`, `ModelProvider`, `CodexCredentials`,
//!   `ClaudeCodeOptions`, `ClaudeCodeCredentials`.
//! - `agent_json.rs`: the specification's dict form of an `AgentSpec` (`AgentSpec::from_json` and
//!   its `Deserialize`: `harness`, `models`, `script`, `elicitation_plan`, the codex settings under
//!   `codex`, the claude-code ones under `claude_code`; unknown keys refused; errors name keys,
//!   never the values given).
//! - `codex.rs`: what the host checks and finds for the `codex` harness at submission: the program
//!   answers `--version` as the Codex CLI, and where the user's sign-in is (`$CODEX_HOME` or
//!   `~/.codex`; its kind for `m3 doctor`, never its value). `handle.diagnostics()` reads an
//!   execution's harness events and stderr tail.
//! - `claude_code.rs`: the same for the `claude-code` harness: the program answers `--version` as
//!   the Claude Code CLI, and the user's sign-in (`.credentials.json` in `$CLAUDE_CONFIG_DIR` or
//!   `~/.claude`; its kind, never its value).
//! - `harness_binary.rs`: the `--version` check both use (no environment, a time limit, the
//!   answer remembered per path and modification time).

pub mod agent;
mod agent_json;
pub mod claude_code;
pub mod codex;
mod error;
pub mod handle;
mod harness_binary;

pub use agent::{
    AgentSpec, ClaudeCodeCredentials, ClaudeCodeOptions, CodexCredentials, CodexOptions, Harness,
    ModelProvider, PermissionPolicy, PlanEntry, PlanMatch, Script, ScriptStep,
};
pub use claude_code::ClaudeCodeSignIn;
pub use codex::CodexSignIn;
pub use error::ExecutionError;
pub use handle::{AsyncExecutionHandle, ExecutionHandle};

use crate::api::server::{McpEra, ServerBinding, StdioServer};

use crate::api::execution_store::ExecutionStore;
use crate::api::policy::Policy;
use crate::api::submission::{HumanInput, ModelValidationError, Submission};
use crate::component::bindings::exports::m3::managed_input::runtime as wit;
use crate::worker::{Executions, SubmitFailure};
use handle::Shared;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// Worker settings of a kit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KitOptions {
    /// How long a worker's lease on its execution and rounds lasts unless renewed (default 15 s).
    pub lease_ttl: Duration,
    /// How often the worker renews it (default 5 s).
    pub lease_renew: Duration,
}

impl Default for KitOptions {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(15),
            lease_renew: Duration::from_secs(5),
        }
    }
}

struct KitInner {
    store: Arc<dyn ExecutionStore>,
    env: BTreeMap<String, String>,
    options: KitOptions,
    owner_id: String,
    executions: OnceLock<Arc<Executions>>,
    submitted: Mutex<Vec<Arc<Shared>>>,
    /// Dropped with the kit: its periodic recovery task ends.
    alive: watch::Sender<()>,
}

/// The async test kit (tokio).
#[derive(Clone)]
pub struct AsyncMcpTestKit {
    inner: Arc<KitInner>,
}

impl std::fmt::Debug for AsyncMcpTestKit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncMcpTestKit")
            .field("owner_id", &self.inner.owner_id)
            .field("env", &self.inner.env.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn owner_id() -> String {
    let mut bytes = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if random.is_err() {
        bytes = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64)
            .to_le_bytes();
    }
    format!("kit-{}-{}", std::process::id(), hex::encode(bytes))
}

impl AsyncMcpTestKit {
    /// A kit over `store` whose child processes get exactly `env` (plus each server binding's
    /// own `env`), nothing of this process's environment.
    pub fn new<I, K, V>(store: Arc<dyn ExecutionStore>, env: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        Self::with_options(store, env, KitOptions::default())
    }

    /// Like [`AsyncMcpTestKit::new`] with worker settings.
    pub fn with_options<I, K, V>(
        store: Arc<dyn ExecutionStore>,
        env: I,
        options: KitOptions,
    ) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        Self {
            inner: Arc::new(KitInner {
                store,
                env: env.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
                options,
                owner_id: owner_id(),
                executions: OnceLock::new(),
                submitted: Mutex::new(Vec::new()),
                alive: watch::channel(()).0,
            }),
        }
    }

    /// The id this kit's workers own rounds under.
    pub fn owner_id(&self) -> &str {
        &self.inner.owner_id
    }

    /// One agent per model (exactly one for the scripted harness, which has no models).
    pub fn agents(
        &self,
        specs: impl IntoIterator<Item = AgentSpec>,
    ) -> Result<Vec<AsyncAgent>, ModelValidationError> {
        let mut agents = Vec::new();
        for spec in specs {
            match spec.harness {
                Harness::Scripted => {
                    if !spec.models.is_empty() {
                        return Err(ModelValidationError {
                            message: "the scripted harness takes no models".into(),
                        });
                    }
                    agents.push(AsyncAgent {
                        kit: self.clone(),
                        spec,
                        model: None,
                    });
                }
                Harness::Codex | Harness::ClaudeCode => {
                    if spec.models.is_empty() {
                        return Err(ModelValidationError {
                            message: format!(
                                "the {} harness needs at least one model",
                                spec.harness.as_str()
                            ),
                        });
                    }
                    for model in &spec.models {
                        agents.push(AsyncAgent {
                            kit: self.clone(),
                            spec: spec.clone(),
                            model: Some(model.clone()),
                        });
                    }
                }
            }
        }
        Ok(agents)
    }

    /// The executions of the kit's store; recovery runs the first time, and from then on once
    /// per lease period (on the current tokio runtime) while the kit lives.
    fn executions(&self) -> Result<Arc<Executions>, ExecutionError> {
        if let Some(executions) = self.inner.executions.get() {
            return Ok(executions.clone());
        }
        let executions = self.inner.store.executions()?;
        executions.recover()?;
        self.keep_recovering();
        Ok(self.inner.executions.get_or_init(|| executions).clone())
    }

    /// Starts the periodic recovery task (once per kit).
    fn keep_recovering(&self) {
        if self.inner.executions.get().is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let kit = Arc::downgrade(&self.inner);
        let mut alive = self.inner.alive.subscribe();
        let period = self.inner.options.lease_ttl.max(Duration::from_millis(10));
        runtime.spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    _ = alive.changed() => return,
                }
                let Some(executions) = kit
                    .upgrade()
                    .and_then(|inner| inner.executions.get().cloned())
                else {
                    return;
                };
                // A pass that fails (the database busy past its timeout) is tried again at the
                // next period; nothing it would have failed is acknowledged meanwhile, since an
                // answer to a round whose lease expired is refused. The failure is a `log`
                // record, never dropped unseen.
                match tokio::task::spawn_blocking(move || executions.recover()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => log::warn!(
                        target: "m3",
                        "a recovery pass failed (tried again in {period:?}): {e}"
                    ),
                    Err(_) => return, // The runtime is stopping.
                }
            }
        });
    }

    /// A handle on the execution `execution_id` of this kit's store, submitted by this kit or
    /// by any other process on the same store, running or finished. Its `result()` waits
    /// through the store when the worker runs elsewhere. An unknown id is a
    /// `ManagedInputStateError` (`execution_not_found`).
    pub async fn execution(
        &self,
        execution_id: &str,
    ) -> Result<AsyncExecutionHandle, ExecutionError> {
        if let Some(shared) = self
            .inner
            .submitted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|s| s.execution_id == execution_id)
        {
            return Ok(AsyncExecutionHandle {
                shared: shared.clone(),
            });
        }
        let kit = self.clone();
        let id = execution_id.to_string();
        let executions = tokio::task::spawn_blocking(move || {
            let executions = kit.executions()?;
            executions.snapshot(&id)?;
            Ok::<_, ExecutionError>(executions)
        })
        .await
        .map_err(|e| ExecutionError::Runtime(e.to_string()))??;
        Ok(AsyncExecutionHandle {
            shared: Arc::new(Shared::attached(execution_id, executions)),
        })
    }

    /// Runs recovery now: fails with `recovery_unavailable` the rounds and executions whose
    /// worker is gone. Returns how many rounds and executions it ended.
    pub async fn recover(&self) -> Result<(u32, u32), ExecutionError> {
        let kit = self.clone();
        let report = tokio::task::spawn_blocking(move || {
            let executions = kit.inner.store.executions()?;
            let report = executions.recover()?;
            // Start-up recovery is done: later use of the store does not run it again.
            kit.keep_recovering();
            let _ = kit.inner.executions.set(executions);
            Ok::<_, ExecutionError>(report)
        })
        .await
        .map_err(|e| ExecutionError::Runtime(e.to_string()))??;
        Ok((report.rounds_failed, report.executions_failed))
    }

    /// Cancels every execution of this kit that is still running and waits (up to `grace`) for
    /// their workers to finish, so that every child process is killed and reaped. Returns how
    /// many workers were still running when the grace period ended.
    pub async fn shutdown(&self, grace: Duration) -> usize {
        let running: Vec<Arc<Shared>> = self
            .inner
            .submitted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|s| s.worker.borrow().is_none())
            .cloned()
            .collect();
        for shared in &running {
            let handle = AsyncExecutionHandle {
                shared: shared.clone(),
            };
            let _ = handle.cancel().await;
        }
        let deadline = tokio::time::Instant::now() + grace;
        let mut left = 0;
        for shared in running {
            let mut worker = shared.worker.clone();
            let ended = tokio::time::timeout_at(deadline, worker.wait_for(Option::is_some)).await;
            if !matches!(ended, Ok(Ok(_))) {
                left += 1;
            }
        }
        left
    }

    async fn submit(
        &self,
        agent: &AgentSpec,
        model: Option<&str>,
        submission: Submission,
    ) -> Result<AsyncExecutionHandle, ExecutionError> {
        let env = self.inner.env.clone();
        let server_env = server_env(&submission);
        let network = network_grant(&submission)?;
        let kit = self.clone();
        let agent = agent.clone();
        let model = model.map(str::to_string);
        let mut child_env = env.clone();
        child_env.extend(server_env.clone());
        let (executions, execution_id) = tokio::task::spawn_blocking(move || {
            kit.store_submission(&agent, model, &submission, &child_env)
        })
        .await
        .map_err(|e| ExecutionError::Runtime(e.to_string()))??;
        let wake = Arc::new(Notify::new());
        let (report, worker) = watch::channel(None);
        let shared = Arc::new(Shared {
            execution_id: execution_id.clone(),
            executions: executions.clone(),
            wake: wake.clone(),
            worker,
            _no_worker: None,
        });
        let owner = self.inner.owner_id.clone();
        tokio::spawn(async move {
            let ended = executions
                .run(&execution_id, &owner, env, server_env, network, wake)
                .await
                .map(|_| ());
            let _ = report.send(Some(ended));
        });
        self.inner
            .submitted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(shared.clone());
        Ok(AsyncExecutionHandle { shared })
    }

    fn store_submission(
        &self,
        agent: &AgentSpec,
        model: Option<String>,
        submission: &Submission,
        env: &BTreeMap<String, String>,
    ) -> Result<(Arc<Executions>, String), ExecutionError> {
        let policy = Policy::new()?;
        let resolves = self.inner.store.managed_input_store()?.is_some();
        policy.check_human_input(
            submission.human_input,
            agent.elicitation_plan.is_some(),
            resolves,
        )??;
        policy.check_tool_allow_list(submission.server.name(), &submission.tools)??;
        if agent.harness.has_models() && submission.server.as_http().is_some() {
            return Err(ModelValidationError {
                message: format!(
                    "the {} harness reaches only stdio servers: the agent would connect to an \
                     HTTP server itself, outside the kit's network grant (use the scripted \
                     harness, whose MCP client is the kit's)",
                    agent.harness.as_str()
                ),
            }
            .into());
        }
        let resolved = resolve_programs(agent, submission, env, None)?;
        let executions = self.executions()?;
        let plan = match &agent.elicitation_plan {
            Some(plan) => Some(
                serde_json::to_string(plan).map_err(|e| ModelValidationError {
                    message: format!("the elicitation plan cannot be encoded: {e}"),
                })?,
            ),
            None => None,
        };
        let script = serde_json::to_string(&agent.script).map_err(|e| ModelValidationError {
            message: format!("the script cannot be encoded: {e}"),
        })?;
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let codex = (agent.harness == Harness::Codex).then(|| wit::CodexSettings {
            binary: resolved.harness_binary.clone().unwrap_or_default(),
            model_provider: agent
                .codex
                .model_provider
                .as_ref()
                .map(|p| wit::ModelProvider {
                    name: p.name.clone(),
                    base_url: p.base_url.clone(),
                    wire_api: p.wire_api.clone(),
                    requires_openai_auth: p.requires_openai_auth,
                    env_key: p.env_key.clone(),
                    http_headers: p.http_headers.clone().into_iter().collect(),
                    env_http_headers: p.env_http_headers.clone().into_iter().collect(),
                    max_retries: p.max_retries,
                }),
            credentials_from: resolved.credentials_from.clone(),
            permission_policy: match agent.codex.permission_policy {
                PermissionPolicy::Decline => wit::PermissionPolicy::Decline,
            },
            turn_deadline_ms: millis(agent.codex.turn_deadline),
            request_timeout_ms: millis(agent.codex.request_timeout),
        });
        let claude = &agent.claude_code;
        let claude_code = (agent.harness == Harness::ClaudeCode).then(|| wit::ClaudeCodeSettings {
            binary: resolved.harness_binary.clone().unwrap_or_default(),
            base_url: claude.base_url.clone(),
            credentials_from: resolved.credentials_from.clone(),
            permission_policy: match claude.permission_policy {
                PermissionPolicy::Decline => wit::PermissionPolicy::Decline,
            },
            turn_deadline_ms: millis(claude.turn_deadline),
            request_timeout_ms: millis(claude.request_timeout),
            max_retries: claude.max_retries,
        });
        let spec = wit::ExecutionSpec {
            harness: agent.harness.as_str().to_string(),
            codex,
            claude_code,
            model,
            prompt: submission.prompt.clone(),
            script,
            server: server_binding(&submission.server, &resolved),
            tools: submission.tools.clone(),
            human_input: match submission.human_input {
                HumanInput::Fail => wit::HumanInputMode::Fail,
                HumanInput::Managed => wit::HumanInputMode::Managed,
            },
            plan,
            round_limit: submission.round_limit,
            lease_ttl_ms: millis(self.inner.options.lease_ttl),
            lease_renew_ms: millis(self.inner.options.lease_renew),
            round_deadline_ms: submission.round_deadline.map(millis),
        };
        let state = executions
            .submit(&spec, &self.inner.owner_id)
            .map_err(|e| match e {
                SubmitFailure::Invalid(message) => {
                    ExecutionError::ModelValidation(ModelValidationError { message })
                }
                SubmitFailure::Failed(e) => ExecutionError::ManagedInput(e),
            })?;
        Ok((executions, state.execution_id))
    }
}

/// The environment a submission's server adds to the kit's (none for an HTTP server).
fn server_env(submission: &Submission) -> BTreeMap<String, String> {
    submission
        .server
        .as_stdio()
        .map(|s| s.env.clone())
        .unwrap_or_default()
}

/// Where a submission's execution may send HTTP requests: its HTTP server's origin, with the
/// binding's headers; nowhere for a stdio server. A URL or header the host cannot grant, or
/// headers beyond the bounds of [`crate::HttpServer`] (how many, how long), are a
/// [`ModelValidationError`] (never naming a header's value, nor a name that is not valid).
fn network_grant(
    submission: &Submission,
) -> Result<crate::imports::network::NetworkGrant, ModelValidationError> {
    use crate::imports::network::NetworkGrant;
    let Some(server) = submission.server.as_http() else {
        return Ok(NetworkGrant::none());
    };
    let headers: Vec<(String, String)> = server
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    NetworkGrant::to_server(&server.url, &headers).map_err(|e| ModelValidationError {
        message: format!("the server `{}`: {e}", server.name),
    })
}

/// The WIT binding of a submission's server: names of its secrets only.
fn server_binding(server: &ServerBinding, resolved: &ResolvedPrograms) -> wit::ServerBinding {
    let era = match server.era() {
        McpEra::Auto => wit::EraChoice::Auto,
        McpEra::Legacy => wit::EraChoice::Legacy,
        McpEra::Modern => wit::EraChoice::Modern,
    };
    match server {
        ServerBinding::Stdio(stdio) => wit::ServerBinding {
            name: stdio.name.clone(),
            command: resolved.server_command.clone(),
            args: stdio.args.clone(),
            cwd: resolved.server_cwd.clone(),
            era,
            env_names: stdio.env.keys().cloned().collect(),
            url: None,
            header_names: Vec::new(),
            delivery_timeout_ms: None,
        },
        ServerBinding::Http(http) => wit::ServerBinding {
            name: http.name.clone(),
            command: String::new(),
            args: Vec::new(),
            cwd: None,
            era,
            env_names: Vec::new(),
            url: resolved.server_url.clone(),
            header_names: http.headers.keys().cloned().collect(),
            delivery_timeout_ms: http
                .delivery_timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        },
    }
}

/// A submission's programs and working directory, resolved.
struct ResolvedPrograms {
    server_command: String,
    server_cwd: Option<String>,
    /// An HTTP server's URL, checked.
    server_url: Option<String>,
    /// The agent harness's program (absolute).
    harness_binary: Option<String>,
    /// The Codex home or Claude Code configuration directory whose sign-in is copied
    /// (absolute).
    credentials_from: Option<String>,
}

/// Resolves the server's program and working directory (and the `codex` program) for a child
/// whose environment is `env`, relative paths against `base` (the caller's working directory
/// when `None`), and checks an HTTP server's URL and headers; anything missing or malformed is
/// a [`ModelValidationError`].
fn resolve_programs(
    agent: &AgentSpec,
    submission: &Submission,
    env: &BTreeMap<String, String>,
    base: Option<&Path>,
) -> Result<ResolvedPrograms, ModelValidationError> {
    use crate::process::resolve;
    let refused = |e: resolve::ResolveError| ModelValidationError {
        message: e.to_string(),
    };
    let text = |p: std::path::PathBuf| p.display().to_string();
    let (server_command, server_cwd, server_url) = match &submission.server {
        ServerBinding::Stdio(stdio) => {
            // What the operating system cannot pass to a program is refused now, before
            // anything is stored, not when the server is started: the binding's arguments and
            // environment, and the kit's environment the child gets with it.
            let unpassable = |e: crate::api::server::ProcessInputError| ModelValidationError {
                message: format!("the server `{}`: {e}", stdio.name),
            };
            stdio.check_process().map_err(unpassable)?;
            for (name, value) in env {
                StdioServer::check_env(name, value).map_err(unpassable)?;
            }
            let command = resolve::program(
                &format!("the server `{}`'s program", stdio.name),
                &stdio.command,
                env,
                base,
            )
            .map_err(refused)?;
            let cwd = match &stdio.cwd {
                Some(dir) => Some(text(resolve::directory(dir, base).map_err(refused)?)),
                None => None,
            };
            (text(command), cwd, None)
        }
        ServerBinding::Http(http) => {
            network_grant(submission)?;
            (String::new(), None, Some(http.url.trim().to_string()))
        }
    };
    let (harness_binary, credentials_from) = match agent.harness {
        Harness::Codex => {
            let binary = resolve::program("the codex program", &agent.codex.binary, env, base)
                .map_err(refused)?;
            crate::kit::codex::check_binary(&binary)?;
            let credentials = crate::kit::codex::credentials_home(&agent.codex.credentials, base)?;
            (Some(text(binary)), credentials.map(text))
        }
        Harness::ClaudeCode => {
            let options = &agent.claude_code;
            let binary = resolve::program("the claude program", &options.binary, env, base)
                .map_err(refused)?;
            crate::kit::claude_code::check_binary(&binary)?;
            let credentials = crate::kit::claude_code::credentials_dir(&options.credentials, base)?;
            (Some(text(binary)), credentials.map(text))
        }
        Harness::Scripted => (None, None),
    };
    Ok(ResolvedPrograms {
        server_command,
        server_cwd,
        server_url,
        harness_binary,
        credentials_from,
    })
}

/// An agent of an [`AsyncMcpTestKit`].
#[derive(Debug, Clone)]
pub struct AsyncAgent {
    kit: AsyncMcpTestKit,
    spec: AgentSpec,
    model: Option<String>,
}

impl AsyncAgent {
    /// The agent's model, if its harness has models.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Submits work; the execution starts at once on a worker task.
    pub async fn submit(
        &self,
        submission: Submission,
    ) -> Result<AsyncExecutionHandle, ExecutionError> {
        self.kit
            .submit(&self.spec, self.model.as_deref(), submission)
            .await
    }
}

/// How long dropping a [`McpTestKit`] waits for its cancelled workers.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The blocking test kit: an [`AsyncMcpTestKit`] on its own tokio runtime. Dropping it cancels
/// its running executions and waits for their workers (see [`AsyncMcpTestKit::shutdown`]).
#[derive(Debug)]
pub struct McpTestKit {
    inner: AsyncMcpTestKit,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl McpTestKit {
    /// A kit over `store` whose child processes get exactly `env`.
    pub fn new<I, K, V>(store: Arc<dyn ExecutionStore>, env: I) -> Result<Self, ExecutionError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        Self::with_options(store, env, KitOptions::default())
    }

    /// Like [`McpTestKit::new`] with worker settings.
    pub fn with_options<I, K, V>(
        store: Arc<dyn ExecutionStore>,
        env: I,
        options: KitOptions,
    ) -> Result<Self, ExecutionError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("m3-kit")
            .enable_all()
            .build()
            .map_err(|e| ExecutionError::Runtime(e.to_string()))?;
        Ok(Self {
            inner: AsyncMcpTestKit::with_options(store, env, options),
            runtime: Arc::new(runtime),
        })
    }

    /// The id this kit's workers own rounds under.
    pub fn owner_id(&self) -> &str {
        self.inner.owner_id()
    }

    /// One agent per model (exactly one for the scripted harness).
    pub fn agents(
        &self,
        specs: impl IntoIterator<Item = AgentSpec>,
    ) -> Result<Vec<Agent>, ModelValidationError> {
        Ok(self
            .inner
            .agents(specs)?
            .into_iter()
            .map(|inner| Agent {
                inner,
                runtime: self.runtime.clone(),
            })
            .collect())
    }

    /// See [`AsyncMcpTestKit::recover`].
    pub fn recover(&self) -> Result<(u32, u32), ExecutionError> {
        self.runtime.block_on(self.inner.recover())
    }

    /// See [`AsyncMcpTestKit::execution`].
    pub fn execution(&self, execution_id: &str) -> Result<ExecutionHandle, ExecutionError> {
        let inner = self.runtime.block_on(self.inner.execution(execution_id))?;
        Ok(ExecutionHandle {
            inner,
            runtime: self.runtime.clone(),
        })
    }

    /// See [`AsyncMcpTestKit::shutdown`].
    pub fn shutdown(&self, grace: Duration) -> usize {
        self.runtime.block_on(self.inner.shutdown(grace))
    }
}

impl Drop for McpTestKit {
    fn drop(&mut self) {
        self.shutdown(SHUTDOWN_GRACE);
    }
}

/// An agent of a [`McpTestKit`].
#[derive(Debug, Clone)]
pub struct Agent {
    inner: AsyncAgent,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl Agent {
    /// The agent's model, if its harness has models.
    pub fn model(&self) -> Option<&str> {
        self.inner.model()
    }

    /// Stores a submission as a queued execution held by the kit, and runs nothing
    /// (for the hook of m3's own tests).
    pub(crate) fn store_only(&self, submission: Submission) -> Result<String, ExecutionError> {
        let kit = &self.inner.kit;
        let mut env = kit.inner.env.clone();
        env.extend(server_env(&submission));
        let (_, execution_id) = kit.store_submission(
            &self.inner.spec,
            self.inner.model.clone(),
            &submission,
            &env,
        )?;
        Ok(execution_id)
    }

    /// Submits work; the execution starts at once on the kit's worker runtime.
    pub fn submit(&self, submission: Submission) -> Result<ExecutionHandle, ExecutionError> {
        let inner = self.runtime.block_on(self.inner.submit(submission))?;
        Ok(ExecutionHandle {
            inner,
            runtime: self.runtime.clone(),
        })
    }
}

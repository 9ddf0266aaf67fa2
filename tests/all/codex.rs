//! The `codex` harness against the real, pinned Codex CLI (`codex app-server`, installed on first
//! use from `tests/peers/`), with a loopback Responses API standing in for the model
//! (`support/fake_model_main.rs`) and the bundled shipping server as the MCP server Codex starts.

use anyhow::{Context, Result, ensure};
use m3::*;
use m3_tests::fake_model;
use m3_tests::fault_worker::Pending;
use m3_tests::harnesses::environments_of;
pub(crate) use m3_tests::harnesses::wait_pending;
use m3_tests::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");
const FAKE_MODEL: &str = env!("CARGO_BIN_EXE_m3-test-fake-model");

/// The loopback model, killed when dropped.
pub(crate) struct FakeModel {
    child: Child,
    pub(crate) port: u16,
}

impl FakeModel {
    pub(crate) fn start(dir: &Path, mode: &str) -> Result<Self> {
        let port_file = dir.join(format!("model-{mode}.port"));
        let child = Command::new(FAKE_MODEL)
            .arg(&port_file)
            .arg(mode)
            .arg(json!({"item": "book", "quantity": 1}).to_string())
            .arg(dir.join("m3-should-not-exist"))
            .stderr(std::fs::File::create(
                dir.join(format!("model-{mode}.log")),
            )?)
            .spawn()
            .context("starting the fake model")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                break text.trim().parse()?;
            }
            ensure!(Instant::now() < deadline, "the fake model did not start");
            std::thread::sleep(Duration::from_millis(10));
        };
        Ok(Self { child, port })
    }

    fn provider(&self) -> ModelProvider {
        ModelProvider::responses("fake", format!("http://127.0.0.1:{}/v1", self.port))
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn codex_binary() -> Result<PathBuf> {
    peers::codex().context(
        "the pinned Codex CLI is needed: it is installed on first use from tests/peers/ \
         (npm ci; see tests/support/peers.rs)",
    )
}

/// A kit whose Codex agents use `model`; children get only `PATH`.
fn codex_kit(
    db: &TempDb,
    model: &FakeModel,
    turn_deadline: Duration,
) -> Result<(McpTestKit, Agent)> {
    codex_kit_with(db, model.provider(), [], |options| CodexOptions {
        turn_deadline,
        ..options
    })
}

/// A kit whose children get `PATH` and `env`, with one Codex agent on `provider` (no sign-in
/// unless `options` adds one).
fn codex_kit_with<const N: usize>(
    db: &TempDb,
    provider: ModelProvider,
    env: [(&str, &str); N],
    options: impl FnOnce(CodexOptions) -> CodexOptions,
) -> Result<(McpTestKit, Agent)> {
    let store = Arc::new(SqliteExecutionStore::open(&db.path)?);
    let mut child_env = BTreeMap::from([(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_default(),
    )]);
    child_env.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let kit = McpTestKit::new(store, child_env)?;
    let options = options(CodexOptions {
        binary: codex_binary()?.display().to_string(),
        model_provider: Some(provider),
        turn_deadline: Duration::from_secs(120),
        request_timeout: Duration::from_secs(60),
        credentials: CodexCredentials::None,
        ..CodexOptions::default()
    });
    let agent = kit
        .agents([AgentSpec::codex(["fake-model"], options)])?
        .remove(0);
    Ok((kit, agent))
}

pub(crate) fn submission(mode: HumanInput) -> Submission {
    Submission::new(
        "Ask for the delivery address, then book the shipment.",
        StdioServer::new("shipping", SHIPPING_SERVER).args(["--era", "legacy"]),
    )
    .tools(["shipping:book_shipment"])
    .human_input(mode)
}

pub(crate) fn address() -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )])
}

/// The specification's Codex example as written: `env={}` and the program `codex`, found on
/// the host's `PATH` because the given environment has none (run in a second process whose
/// `PATH` holds the pinned Codex).
#[test]
fn the_spec_example_with_an_empty_env_finds_codex() -> Result<()> {
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), "tool")?;
    let codex = codex_binary()?;
    let path = format!(
        "{}:/usr/local/bin:/usr/bin:/bin",
        codex.parent().context("codex's directory")?.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_m3-test-second-process"))
        .args([
            "codex-spec",
            db.path.to_str().context("UTF-8 path")?,
            &format!("http://127.0.0.1:{}/v1", model.port),
            SHIPPING_SERVER,
        ])
        .env_clear()
        .env("PATH", path)
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    ensure!(
        lines.next().is_some_and(|l| l.starts_with("answered ")),
        "{stdout}"
    );
    assert_eq!(
        lines.next(),
        Some("result succeeded Booked shipment to 1 Main Street, Pune")
    );
    Ok(())
}

/// Codex's own approval requests: the allow-listed tool's approval prompt is approved without a
/// round; a shell command the model asks for does not exist (Codex's shell is switched off) and
/// never becomes a round; the turn still ends.
#[test]
fn approvals_never_become_rounds() -> Result<()> {
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), "shell")?;
    let (_kit, agent) = codex_kit(&db, &model, Duration::from_secs(120))?;
    let handle = agent.submit(submission(HumanInput::Managed))?;
    let pending = wait_pending(&handle)?;
    handle.respond_elicitation(&pending.round_id, address(), "k")?;
    let result = handle.result(Some(Duration::from_secs(120)))?;
    assert!(result.succeeded(), "{}", result.outcome);
    let rounds = db.store().list_rounds(&RoundFilter {
        execution_id: Some(handle.execution_id().to_string()),
        ..RoundFilter::default()
    })?;
    assert_eq!(
        rounds.len(),
        1,
        "only the server's own elicitation is a round"
    );
    let log = std::fs::read_to_string(db.dir.path().join("model-shell.log"))?;
    let shell_output = log
        .lines()
        .find(|l| l.contains("output of \"call-shell\""))
        .context("the model got the command's outcome")?;
    assert!(
        shell_output.contains("unsupported call"),
        "Codex's shell is switched off: {shell_output}"
    );
    assert!(
        !db.dir.path().join("m3-should-not-exist").exists(),
        "the declined command did not run"
    );
    Ok(())
}

/// The protocol types the adapter relies on, as the pinned Codex generates them, equal the
/// checked-in copies in `tests/peers/codex-schema/` (a new Codex pin must update them, and the
/// adapter with them).
#[test]
fn the_codex_protocol_schema_has_not_drifted() -> Result<()> {
    let out = tempfile::tempdir()?;
    let status = Command::new(codex_binary()?)
        .args(["app-server", "generate-json-schema", "--out"])
        .arg(out.path())
        .env_clear()
        .env("CODEX_HOME", out.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    ensure!(status.success(), "generate-json-schema failed: {status}");
    let pinned = peers::pin_dir().join("codex-schema");
    let mut compared = 0;
    for dir in ["", "v1", "v2"] {
        for entry in std::fs::read_dir(pinned.join(dir))? {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let name = path.file_name().context("a file name")?;
            let expected: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path)?)?;
            let generated_path = out.path().join(dir).join(name);
            let generated: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(&generated_path)
                    .with_context(|| format!("{} was not generated", generated_path.display()))?,
            )?;
            ensure!(
                generated == expected,
                "{} drifted from the checked-in copy",
                path.display()
            );
            compared += 1;
        }
    }
    ensure!(compared >= 20, "only {compared} schema files compared");
    Ok(())
}

/// A worker killed (SIGKILL) while its Codex round is pending: the pending request died with the
/// app-server, so once the worker's lease expires recovery fails the round with
/// `recovery_unavailable` and finishes the execution failed; a late answer is refused.
#[test]
fn a_killed_codex_worker_s_round_is_recovered() -> Result<()> {
    let db = TempDb::new();
    let port = fake_model::serve_in_background(fake_model::Script {
        mode: "tool".into(),
        arguments: r#"{"item": "book"}"#.into(),
        marker: db.dir.path().join("marker").display().to_string(),
    })?;
    // The server, started by Codex, first starts a helper of its own that holds none of its
    // pipes (as a daemonising server would): it must not outlive the execution either.
    let helper = db.dir.path().join("helper.pid");
    let server = db.dir.path().join("server.sh");
    std::fs::write(
        &server,
        format!(
            "#!/bin/sh\nsleep 300 </dev/null >/dev/null 2>&1 &\necho $! > {}\nexec {SHIPPING_SERVER} \"$@\"\n",
            helper.display()
        ),
    )?;
    std::fs::set_permissions(&server, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_m3-test-fault-worker"))
        .arg("kit")
        .arg(&db.path)
        .arg("1000")
        .arg(&server)
        .arg(codex_binary()?)
        .arg(format!("http://127.0.0.1:{port}/v1"))
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let round_id = Pending::read(&mut child)?.round_id;
    let record = db.store().get_round(&round_id)?.context("the round")?;
    assert!(
        record.harness.resume_token.is_some(),
        "the thread id is kept"
    );
    child.kill()?; // SIGKILL
    child.wait()?;
    std::thread::sleep(Duration::from_millis(1500));
    let store = Arc::new(SqliteExecutionStore::open(&db.path)?);
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    let (rounds, executions) = kit.recover()?;
    assert_eq!((rounds, executions), (1, 1));
    let record = db.store().get_round(&round_id)?.context("the round")?;
    assert_eq!(record.status, ManagedInputStatus::Failed);
    assert_eq!(
        record.failure.context("failure")?.code,
        FailureCode::RecoveryUnavailable
    );
    let late = store
        .managed_input_store()?
        .context("managed input")?
        .submit_responses(&round_id, &address(), "late");
    assert_refused(
        late.as_ref(),
        "ManagedInputRecoveryError",
        ErrorCode::RecoveryUnavailable,
    );
    let helper: u32 = std::fs::read_to_string(&helper)?.trim().parse()?;
    let until = Instant::now() + Duration::from_secs(20);
    while m3_tests::process_is_running(helper) {
        ensure!(
            Instant::now() < until,
            "the server's helper (pid {helper}) outlived its dead worker's recovery"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Confinement: the model is offered exactly the submission's MCP tools (Codex's own shell,
/// patching, sub-agents, image viewing, web search and every other built-in tool are switched
/// off in its configuration); when it calls them anyway nothing runs; the MCP server's
/// environment reaches the server alone (never Codex's own environment, nor the model), through
/// an owner-only file in the private home; the execution's events say what Codex was given.
#[test]
fn the_agent_is_offered_exactly_the_allowed_tools() -> Result<()> {
    const SECRET: &str = "ship-secret-5d1e";
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), "builtin")?;
    let (_kit, agent) = codex_kit_with(&db, model.provider(), [], |o| o)?;
    let server = StdioServer::new("shipping", SHIPPING_SERVER)
        .args(["--era", "legacy"])
        .env("SHIP_PASSWORD", SECRET);
    let handle = agent.submit(
        Submission::new("Book the shipment.", server)
            .tools(["shipping:book_shipment"])
            .human_input(HumanInput::Managed),
    )?;
    let pending = wait_pending(&handle)?;
    // While the round waits: Codex's environment has no server secret; the server's has it.
    let codex = codex_binary()?.canonicalize()?;
    let codex_envs = environments_of(&codex);
    ensure!(!codex_envs.is_empty(), "no running codex process found");
    let ours: Vec<&Vec<String>> = codex_envs
        .iter()
        .filter(|env| {
            env.iter()
                .any(|e| e.starts_with("CODEX_HOME=") && e.contains("m3-execution"))
        })
        .collect();
    ensure!(
        !ours.is_empty(),
        "no codex process of an m3 execution found"
    );
    for env in &ours {
        assert!(
            !env.iter()
                .any(|e| e.contains(SECRET) || e.starts_with("SHIP_PASSWORD=")),
            "Codex's own environment holds the server's secret: {env:?}"
        );
        let home = env
            .iter()
            .find_map(|e| e.strip_prefix("CODEX_HOME="))
            .context("CODEX_HOME")?;
        let config = Path::new(home).join("config.toml");
        if config.exists() {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&config)?.permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "the private config is the owner's alone");
        }
    }
    let server_path = Path::new(SHIPPING_SERVER).canonicalize()?;
    assert!(
        environments_of(&server_path)
            .iter()
            .any(|env| env.iter().any(|e| e == &format!("SHIP_PASSWORD={SECRET}"))),
        "the MCP server got its environment"
    );
    handle.respond_elicitation(&pending.round_id, address(), "k")?;
    let result = handle.result(Some(Duration::from_secs(120)))?;
    assert!(result.succeeded(), "{}", result.outcome);
    let log = std::fs::read_to_string(db.dir.path().join("model-builtin.log"))?;
    let offered: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("fake-model: tools offered: "))
        .collect();
    ensure!(
        offered.len() >= 6,
        "the model was asked {} times",
        offered.len()
    );
    // Codex 0.171.0 always adds its three MCP resource tools once an MCP server is configured
    // (no configuration key removes them); they reach the submission's server alone.
    for tools in &offered {
        assert_eq!(
            *tools,
            r#"["list_mcp_resources", "list_mcp_resource_templates", "read_mcp_resource", "mcp__shipping"]"#,
            "the model was offered more"
        );
    }
    for name in [
        "exec_command",
        "apply_patch",
        "spawn_agent",
        "view_image",
        "web_search",
    ] {
        let output = log
            .lines()
            .find(|l| l.contains(&format!("output of \"call-{name}\"")))
            .with_context(|| format!("no output for {name}"))?;
        assert!(
            output.contains("unsupported call"),
            "{name} ran or was offered: {output}"
        );
    }
    assert!(!log.contains(SECRET), "the model saw the server's secret");
    assert!(
        !db.dir.path().join("m3-should-not-exist").exists(),
        "a built-in tool wrote the marker"
    );
    let diagnostics = handle.diagnostics()?;
    let said = |kind: &str, text: &str| {
        diagnostics
            .events
            .iter()
            .any(|e| e.kind == kind && e.message.contains(text))
    };
    assert!(said("harness", "own tools switched off"), "{diagnostics:?}");
    assert!(said("mcp-server", "`shipping` is ready"), "{diagnostics:?}");
    assert!(
        said("approval", "approved the call of `book_shipment`"),
        "{diagnostics:?}"
    );
    for name in [
        "exec_command",
        "apply_patch",
        "spawn_agent",
        "view_image",
        "web_search",
    ] {
        assert!(
            said("refused", &format!("`{name}`")),
            "the refusal of {name} is kept: {diagnostics:?}"
        );
    }
    Ok(())
}

/// A live process as `/proc` shows it: its id, executable, environment and command line.
struct ProcessView {
    pid: u32,
    exe: Option<PathBuf>,
    environ: Vec<u8>,
    cmdline: Vec<u8>,
}

/// Every live process whose environment and command line this user can read.
fn processes() -> Vec<ProcessView> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse().ok()?;
            let dir = entry.path();
            Some(ProcessView {
                pid,
                exe: std::fs::read_link(dir.join("exe")).ok(),
                environ: std::fs::read(dir.join("environ")).ok()?,
                cmdline: std::fs::read(dir.join("cmdline")).ok()?,
            })
        })
        .collect()
}

/// The parent of process `pid` (the field after the name in `/proc/PID/stat`).
fn parent_of(pid: u32) -> Result<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after_name = stat.rsplit_once(')').context("a stat line")?.1;
    Ok(after_name
        .split_whitespace()
        .nth(1)
        .context("a parent id")?
        .parse()?)
}

/// Whether `needle` occurs in `haystack`.
fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Every file under `dir` (recursively) whose bytes hold `needle`, as paths relative to `dir`.
fn files_holding(dir: &Path, needle: &str) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut left = vec![dir.to_path_buf()];
    while let Some(next) = left.pop() {
        for entry in std::fs::read_dir(&next)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                left.push(entry.path());
            } else if kind.is_file() && holds(&std::fs::read(entry.path())?, needle) {
                found.push(entry.path().strip_prefix(dir)?.to_path_buf());
            }
        }
    }
    Ok(found)
}

/// Credentials reach Codex and nothing else. An endpoint that requires `Authorization: Bearer
/// <key>` (every other request to it is refused 401) works with the key in an environment
/// variable named by `env_key`, and with a copied `auth.json` (an API-key sign-in): every
/// request Codex sent the model carried the key. While each round waits, the key is in the
/// environment of Codex alone (with `env_key`) or of no process (with the sign-in), on the
/// command line of no process but the test's fake model, not in the environment of the MCP
/// server Codex started (found by a marker of its binding), and in no file of the execution's
/// scratch directory (Codex's private home, its configuration, sessions and logs) but the
/// copied `auth.json`; that directory is gone once the execution ends, and neither the events,
/// the stderr tail nor the database file (rows and WAL; the variable's name is there, its value
/// is not) holds the key. Without either credential the run is refused at once as
/// `model_error` carrying the status.
#[test]
fn credentials_from_env_key_or_a_copied_sign_in_and_a_clean_refusal_without() -> Result<()> {
    const KEY: &str = "sk-test-7f3a";
    const VARIABLE: &str = "M3_TEST_MODEL_KEY";
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), &format!("auth:{KEY}"))?;
    let codex = codex_binary()?.canonicalize()?;
    let server_path = Path::new(SHIPPING_SERVER).canonicalize()?;
    // Runs one execution; while its round waits, checks where the key is; `sign_in` names the
    // one file of the scratch directory allowed to hold it.
    let run = |agent: &Agent, mark: &str, sign_in: Option<&str>| -> Result<()> {
        let server = StdioServer::new("shipping", SHIPPING_SERVER)
            .args(["--era", "legacy"])
            .env("M3_TEST_SERVER_MARK", mark);
        let handle = agent.submit(
            Submission::new(
                "Ask for the delivery address, then book the shipment.",
                server,
            )
            .tools(["shipping:book_shipment"])
            .human_input(HumanInput::Managed),
        )?;
        let pending = wait_pending(&handle)?;
        let all = processes();
        let server_env = format!("M3_TEST_SERVER_MARK={mark}");
        let servers: Vec<&ProcessView> = all
            .iter()
            .filter(|p| p.exe.as_deref() == Some(server_path.as_path()))
            .filter(|p| holds(&p.environ, &server_env))
            .collect();
        ensure!(
            servers.len() == 1,
            "{mark}: {} MCP servers found",
            servers.len()
        );
        // This execution's Codex: the process that started the MCP server.
        let codex_pid = parent_of(servers[0].pid)?;
        let ours = all
            .iter()
            .find(|p| p.pid == codex_pid)
            .context("the MCP server's parent")?;
        ensure!(
            ours.exe.as_deref() == Some(codex.as_path()),
            "{mark}: the MCP server's parent is {:?}, not Codex",
            ours.exe
        );
        for server in &servers {
            ensure!(
                !holds(&server.environ, KEY) && !holds(&server.environ, VARIABLE),
                "{mark}: the MCP server (pid {}) was given the model's key",
                server.pid
            );
        }
        let with_key: Vec<&ProcessView> = all.iter().filter(|p| holds(&p.environ, KEY)).collect();
        for process in &with_key {
            ensure!(
                process.exe.as_deref() == Some(codex.as_path()),
                "{mark}: pid {} ({:?}), not Codex, holds the key in its environment",
                process.pid,
                process.exe
            );
        }
        match sign_in {
            None => ensure!(
                with_key.iter().any(|p| p.pid == codex_pid),
                "{mark}: the key is not in this execution's Codex's environment"
            ),
            Some(_) => ensure!(
                with_key.is_empty(),
                "{mark}: with a sign-in, a process holds the key in its environment"
            ),
        }
        for process in all.iter().filter(|p| holds(&p.cmdline, KEY)) {
            ensure!(
                process.pid == model.child.id(),
                "{mark}: the key is on the command line of pid {} ({:?})",
                process.pid,
                process.exe
            );
        }
        // The scratch directory: the parent of Codex's private home.
        let home = ours
            .environ
            .split(|b| *b == 0)
            .find_map(|e| e.strip_prefix(b"CODEX_HOME="))
            .context("CODEX_HOME")?;
        let home = PathBuf::from(String::from_utf8(home.to_vec())?);
        let scratch = home
            .parent()
            .context("the scratch directory")?
            .to_path_buf();
        ensure!(home.is_dir(), "{mark}: no private home at {home:?}");
        let holding = files_holding(&scratch, KEY)?;
        let allowed: Vec<PathBuf> = sign_in
            .iter()
            .map(|name| Path::new("home").join(name))
            .collect();
        ensure!(
            holding == allowed,
            "{mark}: files of the scratch directory holding the key: {holding:?}"
        );
        handle.respond_elicitation(&pending.round_id, address(), "k")?;
        let result = handle.result(Some(Duration::from_secs(120)))?;
        ensure!(result.succeeded(), "{mark}: {}", result.outcome);
        let until = Instant::now() + Duration::from_secs(20);
        while scratch.exists() {
            ensure!(
                Instant::now() < until,
                "{mark}: the scratch directory {scratch:?} outlived its execution"
            );
            std::thread::sleep(Duration::from_millis(25));
        }
        let diagnostics = handle.diagnostics()?;
        ensure!(
            !format!("{diagnostics:?}").contains(KEY),
            "{mark}: the execution's events or stderr tail hold the key"
        );
        Ok(())
    };
    // The key in the kit's environment, named by the provider.
    let (_kit, agent) = codex_kit_with(
        &db,
        model.provider().env_key(VARIABLE),
        [(VARIABLE, KEY)],
        |o| o,
    )?;
    run(&agent, "env-key", None)?;
    // An API-key sign-in, copied from another Codex home.
    let home = tempfile::tempdir()?;
    std::fs::write(
        home.path().join("auth.json"),
        serde_json::to_string(&json!({"OPENAI_API_KEY": KEY}))?,
    )?;
    let (_kit, agent) = codex_kit_with(&db, model.provider().with_openai_auth(), [], |o| {
        CodexOptions {
            credentials: CodexCredentials::From(home.path().to_path_buf()),
            ..o
        }
    })?;
    run(&agent, "sign-in", Some("auth.json"))?;
    // Every request Codex sent the model carried the key: none was refused.
    let log = std::fs::read_to_string(db.dir.path().join(format!("model-auth:{KEY}.log")))?;
    let asked = log
        .lines()
        .filter(|l| l.starts_with("fake-model: POST ") && l.contains("/responses"))
        .count();
    ensure!(asked >= 4, "the model was asked {asked} times in two runs");
    ensure!(
        !log.contains("fake-model: refused"),
        "a request reached the model without the key:\n{log}"
    );
    // Neither: refused, named, fast.
    let (_kit, agent) = codex_kit_with(&db, model.provider().with_openai_auth(), [], |o| o)?;
    let handle = agent.submit(submission(HumanInput::Managed))?;
    let result = handle.result(Some(Duration::from_secs(120)))?;
    let failure = result.outcome.failure.clone().context("a failure")?;
    assert_eq!(failure.kind, FailureKind::ModelError, "{}", result.outcome);
    assert!(failure.message.contains("401"), "{}", failure.message);
    assert!(!failure.message.contains(KEY));
    let diagnostics = handle.diagnostics()?;
    assert!(
        diagnostics
            .events
            .iter()
            .any(|e| e.kind == "model" && e.message.contains("401")),
        "{diagnostics:?}"
    );
    assert!(!format!("{diagnostics:?}").contains(KEY));
    // The stored rows: the variable's name is kept with the submission, never the key.
    let mut stored = Vec::new();
    for suffix in ["", "-wal"] {
        let mut path = db.path.clone().into_os_string();
        path.push(suffix);
        if let Ok(bytes) = std::fs::read(&path) {
            stored.extend(bytes);
        }
    }
    ensure!(
        holds(&stored, VARIABLE),
        "the database does not hold the provider's variable name: the scan reads nothing"
    );
    ensure!(!holds(&stored, KEY), "the database holds the model's key");
    Ok(())
}

/// Each failure ends the execution at once with its own kind and a message naming the cause: a
/// server that does not start, a tool the server does not have, a model URL that refuses
/// connections, a model answering HTTP 500; a program that is not Codex is refused at submission.
#[test]
fn failures_are_fast_and_named() -> Result<()> {
    let db = TempDb::new();
    let model = FakeModel::start(db.dir.path(), "tool")?;
    let failure_of = |agent: &Agent,
                      submission: Submission|
     -> Result<(ExecutionFailure, ExecutionDiagnostics)> {
        let handle = agent.submit(submission)?;
        let result = handle.result(Some(Duration::from_secs(120)))?;
        let failure = result.outcome.failure.clone().context("a failure")?;
        Ok((failure, handle.diagnostics()?))
    };
    let quick = |provider: ModelProvider| ModelProvider {
        max_retries: Some(1),
        ..provider
    };
    let (_kit, agent) = codex_kit_with(&db, quick(model.provider()), [], |o| o)?;
    // A server that exits at once.
    let (failure, diagnostics) = failure_of(
        &agent,
        Submission::new("Book it.", StdioServer::new("shipping", "/bin/false"))
            .tools(["shipping:book_shipment"]),
    )?;
    assert_eq!(failure.kind, FailureKind::ServerError);
    assert!(
        failure.message.contains("`shipping` did not start"),
        "{}",
        failure.message
    );
    assert!(
        diagnostics
            .events
            .iter()
            .any(|e| e.kind == "mcp-server" && e.message.contains("failed")),
        "{diagnostics:?}"
    );
    assert!(diagnostics.stderr_tail.is_some(), "Codex's stderr is kept");
    // A misspelled tool.
    let (failure, _) = failure_of(
        &agent,
        Submission::new(
            "Book it.",
            StdioServer::new("shipping", SHIPPING_SERVER).args(["--era", "legacy"]),
        )
        .tools(["shipping:book_shipmnet"]),
    )?;
    assert_eq!(failure.kind, FailureKind::ToolNotFound);
    assert!(
        failure.message.contains("`book_shipmnet`"),
        "{}",
        failure.message
    );
    // A model URL nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let (_kit, agent) = codex_kit_with(
        &db,
        quick(ModelProvider::responses(
            "nobody",
            format!("http://127.0.0.1:{closed}/v1"),
        )),
        [],
        |o| o,
    )?;
    let (failure, _) = failure_of(&agent, submission(HumanInput::Managed))?;
    assert_eq!(failure.kind, FailureKind::ModelError);
    assert!(
        failure.message.contains("connection error"),
        "{}",
        failure.message
    );
    // A model answering 500.
    let broken = FakeModel::start(db.dir.path(), "status:500")?;
    let (_kit, agent) = codex_kit_with(&db, quick(broken.provider()), [], |o| o)?;
    let (failure, _) = failure_of(&agent, submission(HumanInput::Managed))?;
    assert_eq!(failure.kind, FailureKind::ModelError);
    assert!(failure.message.contains("HTTP 500"), "{}", failure.message);
    // A program that is not Codex.
    let store = Arc::new(SqliteExecutionStore::open(&db.path)?);
    let kit = McpTestKit::new(store, [("PATH", "/usr/bin:/bin")])?;
    let agent = kit
        .agents([AgentSpec::codex(
            ["m"],
            CodexOptions {
                binary: "/bin/true".into(),
                credentials: CodexCredentials::None,
                ..CodexOptions::default()
            },
        )])?
        .remove(0);
    match agent.submit(submission(HumanInput::Managed)) {
        Err(ExecutionError::ModelValidation(e)) => {
            assert!(
                e.message.contains("/bin/true") && e.message.contains("not the Codex CLI"),
                "{}",
                e.message
            )
        }
        other => panic!("expected a ModelValidationError, got {other:?}"),
    }
    Ok(())
}

/// Every Codex feature the kit switches off exists in the pinned release (`codex features
/// list`), and with the kit's overrides each is off: a renamed or removed feature key (which
/// Codex would silently ignore) fails here.
#[test]
fn the_features_the_kit_switches_off_exist_in_the_pinned_codex() -> Result<()> {
    let home = tempfile::tempdir()?;
    let mut command = Command::new(codex_binary()?);
    let features = || {
        m3_guest::runtime::worker::CODEX_TOOL_FEATURES
            .iter()
            .chain(m3_guest::runtime::worker::CODEX_QUIET_FEATURES)
    };
    for feature in features() {
        command.arg("-c").arg(format!("features.{feature}=false"));
    }
    let out = command
        .args(["features", "list"])
        .env_clear()
        .env("CODEX_HOME", home.path())
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: BTreeMap<String, String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?.to_string();
            let enabled = words.last()?.to_string();
            Some((name, enabled))
        })
        .collect();
    ensure!(
        listed.len() > 50,
        "unexpected `features list` output: {listed:?}"
    );
    for feature in features() {
        let state = listed.get(*feature).with_context(|| {
            format!("Codex {} has no feature `{feature}`", peers::CODEX_VERSION)
        })?;
        assert_eq!(state, "false", "`{feature}` is still on");
    }
    Ok(())
}

//! The agent harnesses with a model, for tests that hold for every one of them: each real CLI
//! (the pinned Codex and Claude Code, installed on first use) with its loopback model on a thread
//! of the test (`fake_model` for Codex's Responses API, `fake_anthropic` for Claude Code's
//! Messages API), and [`on_both_harnesses!`], which runs one body on each.

use crate::TempDb;
use crate::{fake_anthropic, fake_model, peers};
use anyhow::{Context, Result, ensure};
use m3::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs each body on both harnesses: `codex::NAME` and `claude_code::NAME`.
#[macro_export]
macro_rules! on_both_harnesses {
    ($( $(#[$meta:meta])* fn $name:ident($harness:ident) $body:block )*) => {
        $( $(#[$meta])* fn $name($harness: $crate::harnesses::AgentHarness) -> anyhow::Result<()> $body )*

        /// The bodies above on the real Codex CLI.
        mod codex {
            $( #[test] fn $name() -> anyhow::Result<()> {
                super::$name($crate::harnesses::AgentHarness::Codex)
            } )*
        }

        /// The bodies above on the real Claude Code CLI.
        mod claude_code {
            $( #[test] fn $name() -> anyhow::Result<()> {
                super::$name($crate::harnesses::AgentHarness::ClaudeCode)
            } )*
        }
    };
}

/// An agent harness with a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentHarness {
    /// `codex app-server`.
    Codex,
    /// `claude -p` over stream-json.
    ClaudeCode,
}

/// The arguments the scripted models give the shipping server's `book_shipment`.
pub fn book_arguments() -> serde_json::Value {
    json!({"item": "book", "quantity": 1})
}

/// A kit with one agent of a harness, on a SQLite file, with its loopback model.
pub struct Harnessed {
    /// The kit (its children get `PATH` and what the test added).
    pub kit: McpTestKit,
    /// The agent (model `fake-model`).
    pub agent: Agent,
    /// The loopback model's port.
    pub model_port: u16,
}

impl AgentHarness {
    /// A kit on `db` whose agent runs this harness against a loopback model in `mode` (`tool`:
    /// call the first MCP tool with [`book_arguments`], then answer with a final message), its
    /// children getting `PATH` and `env` (Claude Code also a loopback key, `ANTHROPIC_API_KEY`,
    /// unless `env` gives one), its turn deadline `turn_deadline`.
    pub fn start(
        self,
        db: &TempDb,
        mode: &str,
        env: &[(&str, &str)],
        turn_deadline: Duration,
    ) -> Result<Harnessed> {
        self.start_calling(db, mode, env, turn_deadline, book_arguments())
    }

    /// [`AgentHarness::start`] with a model whose tool call has `arguments`.
    pub fn start_calling(
        self,
        db: &TempDb,
        mode: &str,
        env: &[(&str, &str)],
        turn_deadline: Duration,
        arguments: serde_json::Value,
    ) -> Result<Harnessed> {
        let store = Arc::new(SqliteExecutionStore::open(&db.path)?);
        let mut child_env = BTreeMap::from([(
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        )]);
        if self == Self::ClaudeCode {
            // Claude Code asks for a sign-in unless it has a key: the loopback model takes any.
            child_env.insert("ANTHROPIC_API_KEY".into(), "sk-ant-loopback".into());
        }
        child_env.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let kit = McpTestKit::new(store, child_env)?;
        let marker = db.dir.path().join("m3-should-not-exist");
        let (spec, model_port) = match self {
            Self::Codex => {
                let port = fake_model::serve_in_background(fake_model::Script {
                    mode: mode.into(),
                    arguments: arguments.to_string(),
                    marker: marker.display().to_string(),
                })?;
                let binary = peers::codex().context("the pinned Codex CLI (tests/peers/)")?;
                let options = CodexOptions {
                    binary: binary.display().to_string(),
                    model_provider: Some(ModelProvider::responses(
                        "fake",
                        format!("http://127.0.0.1:{port}/v1"),
                    )),
                    turn_deadline,
                    request_timeout: Duration::from_secs(60),
                    credentials: CodexCredentials::None,
                    ..CodexOptions::default()
                };
                (AgentSpec::codex(["fake-model"], options), port)
            }
            Self::ClaudeCode => {
                let port = fake_anthropic::serve_in_background(fake_anthropic::Script {
                    mode: mode.into(),
                    arguments,
                    marker: marker.display().to_string(),
                })?;
                let binary = peers::claude_code()
                    .context("the pinned Claude Code CLI (tests/peers/claude-code/)")?;
                let options = ClaudeCodeOptions {
                    binary: binary.display().to_string(),
                    base_url: Some(format!("http://127.0.0.1:{port}")),
                    turn_deadline,
                    request_timeout: Duration::from_secs(60),
                    credentials: ClaudeCodeCredentials::None,
                    ..ClaudeCodeOptions::default()
                };
                (AgentSpec::claude_code(["fake-model"], options), port)
            }
        };
        let agent = kit.agents([spec])?.remove(0);
        Ok(Harnessed {
            kit,
            agent,
            model_port,
        })
    }

    /// The final message the harness's loopback model ends with.
    pub fn final_message(self) -> &'static str {
        match self {
            Self::Codex => fake_model::FINAL_MESSAGE,
            Self::ClaudeCode => fake_anthropic::FINAL_MESSAGE,
        }
    }

    /// The request key a round of the shipping server's address question has: Codex passes the
    /// server's `_meta` (and its key hint) through; Claude Code drops it, so the single
    /// request's key is the default one.
    pub fn address_key(self) -> &'static str {
        match self {
            Self::Codex => "shipping_address",
            Self::ClaudeCode => "elicitation",
        }
    }
}

/// The execution's pending round, waited for up to two minutes; an error if the execution
/// finishes first (with its outcome) or none comes.
pub fn wait_pending(handle: &ExecutionHandle) -> Result<PendingElicitationRound> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(pending) = handle.pending_elicitation()? {
            return Ok(pending);
        }
        let snapshot = handle.snapshot()?;
        ensure!(
            snapshot.lifecycle != ExecutionStatus::Finished,
            "finished before asking: {:?}",
            snapshot.outcome
        );
        ensure!(Instant::now() < deadline, "no pending round in time");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A peer's command as a stdio binding named `name`.
pub fn peer_binding(name: &str, command: &peers::PeerCommand) -> StdioServer {
    StdioServer::new(name, command.program.display().to_string()).args(
        command
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned()),
    )
}

/// The environment (`NAME=VALUE` entries) of every live process whose executable is `program`.
pub fn environments_of(program: &std::path::Path) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let dir = entry.path();
        if std::fs::read_link(dir.join("exe")).ok().as_deref() != Some(program) {
            continue;
        }
        if let Ok(bytes) = std::fs::read(dir.join("environ")) {
            found.push(
                bytes
                    .split(|b| *b == 0)
                    .filter(|e| !e.is_empty())
                    .map(|e| String::from_utf8_lossy(e).into_owned())
                    .collect(),
            );
        }
    }
    found
}

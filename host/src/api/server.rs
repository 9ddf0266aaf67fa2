//! Stdio MCP server bindings.

use std::collections::BTreeMap;

/// Which MCP era the scripted harness speaks to a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpEra {
    /// Probe with `server/discover`; fall back to the legacy handshake (the default).
    #[default]
    Auto,
    /// The legacy handshake and `elicitation/create` only.
    Legacy,
    /// 2026-07-28 requests (`input_required` results) only.
    Modern,
}

/// A stdio MCP server the kit starts for an execution. The child gets the kit's `env` plus this
/// binding's `env`, nothing of the host's own environment, and runs in a private scratch
/// directory (`cwd` is relative to it).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct StdioServer {
    /// The server's name: the `server` of `server:tool` entries.
    pub name: String,
    /// The program: a path, or a name looked up in the `PATH` of the given environment.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment added to the kit's for this server.
    pub env: BTreeMap<String, String>,
    /// Working directory, relative to the execution's scratch directory.
    pub cwd: Option<String>,
    /// The era to speak.
    pub era: McpEra,
}

impl std::fmt::Debug for StdioServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Environment values may be secrets: only their names are shown.
        f.debug_struct("StdioServer")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("era", &self.era)
            .finish()
    }
}

impl StdioServer {
    /// A binding named `name` that runs `command`.
    pub fn new(name: impl Into<String>, command: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            command: command.into(),
            ..Self::default()
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Adds one environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the working directory (relative to the scratch directory).
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Forces an era.
    pub fn era(mut self, era: McpEra) -> Self {
        self.era = era;
        self
    }
}

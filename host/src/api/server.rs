//! MCP server bindings: a stdio server the kit starts ([`StdioServer`]), or a Streamable HTTP
//! server it connects to ([`HttpServer`]).

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

/// A Streamable HTTP MCP server the kit connects to (MCP's HTTP transport, in both eras:
/// JSON or Server-Sent Events responses, `Mcp-Session-Id`, the standalone GET stream, and
/// resumption of a broken stream where the server allows it).
///
/// The component may send requests to this URL's origin (`scheme://host:port`) alone: the host
/// refuses every other destination, redirects included. `headers` are added by the host to
/// every request to that origin; like a stdio server's environment, their values never enter
/// the component, the database, an error or a log (only their names do).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct HttpServer {
    /// The server's name: the `server` of `server:tool` entries.
    pub name: String,
    /// The MCP endpoint: an absolute `http://` or `https://` URL (e.g.
    /// `http://127.0.0.1:8000/mcp`).
    pub url: String,
    /// Headers added to every request (e.g. `Authorization`).
    pub headers: BTreeMap<String, String>,
    /// The era to speak.
    pub era: McpEra,
    /// How long the delivery of an answer may wait for the server's response (its first
    /// byte: the server accepting or refusing the answer) before the round fails visibly;
    /// `None`: 30 s. From 1 ms to 1 hour.
    pub delivery_timeout: Option<std::time::Duration>,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values may be secrets: only their names are shown.
        f.debug_struct("HttpServer")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("era", &self.era)
            .field("delivery_timeout", &self.delivery_timeout)
            .finish()
    }
}

impl HttpServer {
    /// A binding named `name` for the MCP endpoint `url`.
    pub fn new(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            url: url.into(),
            ..Self::default()
        }
    }

    /// Adds one header to every request.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Forces an era.
    pub fn era(mut self, era: McpEra) -> Self {
        self.era = era;
        self
    }

    /// Sets how long an answer's delivery may wait for the server's response.
    pub fn delivery_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.delivery_timeout = Some(timeout);
        self
    }
}

/// The server of a submission: started over stdio, or reached over Streamable HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerBinding {
    /// A stdio server the kit starts.
    Stdio(StdioServer),
    /// A Streamable HTTP server the kit connects to.
    Http(HttpServer),
}

impl ServerBinding {
    /// The server's name: the `server` of `server:tool` entries.
    pub fn name(&self) -> &str {
        match self {
            Self::Stdio(s) => &s.name,
            Self::Http(s) => &s.name,
        }
    }

    /// The era to speak.
    pub fn era(&self) -> McpEra {
        match self {
            Self::Stdio(s) => s.era,
            Self::Http(s) => s.era,
        }
    }

    /// The stdio server, if it is one.
    pub fn as_stdio(&self) -> Option<&StdioServer> {
        match self {
            Self::Stdio(s) => Some(s),
            Self::Http(_) => None,
        }
    }

    /// The HTTP server, if it is one.
    pub fn as_http(&self) -> Option<&HttpServer> {
        match self {
            Self::Stdio(_) => None,
            Self::Http(s) => Some(s),
        }
    }
}

impl From<StdioServer> for ServerBinding {
    fn from(server: StdioServer) -> Self {
        Self::Stdio(server)
    }
}

impl From<HttpServer> for ServerBinding {
    fn from(server: HttpServer) -> Self {
        Self::Http(server)
    }
}

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

    /// The most environment variables a binding may give its server.
    pub const MAX_ENV_VARS: usize = 1024;
    /// The longest `NAME=VALUE` of one variable, in bytes: Linux refuses to start a program with
    /// a longer one (`MAX_ARG_STRLEN`, 128 KiB with its terminating NUL).
    pub const MAX_ENV_ENTRY_BYTES: usize = 128 * 1024 - 1;

    /// Whether the operating system can pass this binding to a program: its arguments and
    /// environment hold no NUL byte, every variable's name is non-empty without `=`, and the
    /// environment is within [`Self::MAX_ENV_VARS`] and [`Self::MAX_ENV_ENTRY_BYTES`]. Checked at
    /// submission (a [`crate::ModelValidationError`]), so that such a binding is refused before
    /// anything is stored rather than failing when the server is started. Errors name an
    /// argument by its position and a variable by its name (when it is a plain one), never a
    /// value.
    pub fn check_process(&self) -> Result<(), ProcessInputError> {
        if let Some(at) = self.args.iter().position(|a| a.contains('\0')) {
            return Err(ProcessInputError::NulInArgument { number: at + 1 });
        }
        if self.env.len() > Self::MAX_ENV_VARS {
            return Err(ProcessInputError::TooManyVariables {
                count: self.env.len(),
            });
        }
        for (name, value) in &self.env {
            Self::check_env(name, value)?;
        }
        Ok(())
    }

    /// Whether one environment variable can be passed to a program (see
    /// [`Self::check_process`]).
    pub fn check_env(name: &str, value: &str) -> Result<(), ProcessInputError> {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(ProcessInputError::BadVariableName);
        }
        let len = name.len() + 1 + value.len();
        let name = shown_name(name);
        if value.contains('\0') {
            return Err(ProcessInputError::NulInValue { name });
        }
        if len > Self::MAX_ENV_ENTRY_BYTES {
            return Err(ProcessInputError::VariableTooLong { name, len });
        }
        Ok(())
    }
}

/// A variable's name as an error may show it: as given when it is printable ASCII, else
/// escaped (a name is not a secret, but a terminal must not receive it raw).
fn shown_name(name: &str) -> String {
    if name.bytes().all(|b| b.is_ascii_graphic()) {
        name.to_string()
    } else {
        name.escape_debug().to_string()
    }
}

/// Why a stdio binding cannot be passed to a program. Never names a value or an argument's
/// text (either may be a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessInputError {
    /// An argument holds a NUL byte.
    #[error(
        "the server's argument {number} holds a NUL byte, which no program can be given \
         (invalid_argument)"
    )]
    NulInArgument {
        /// Its position among the arguments, from 1.
        number: usize,
    },
    /// A variable's name is empty or holds `=` or NUL.
    #[error(
        "an environment variable's name is empty or holds `=` or a NUL byte \
         (invalid_environment)"
    )]
    BadVariableName,
    /// A variable's value holds a NUL byte.
    #[error(
        "the value of the environment variable `{name}` holds a NUL byte, which no program can \
         be given (invalid_environment)"
    )]
    NulInValue {
        /// The variable's name (escaped where it is not printable ASCII).
        name: String,
    },
    /// A variable is longer than the operating system passes.
    #[error(
        "the environment variable `{name}` is {len} bytes long as NAME=VALUE, more than the \
         {max} a program can be given (environment_too_large)",
        max = StdioServer::MAX_ENV_ENTRY_BYTES
    )]
    VariableTooLong {
        /// The variable's name.
        name: String,
        /// Its length as `NAME=VALUE`.
        len: usize,
    },
    /// More variables than a binding may give.
    #[error(
        "{count} environment variables, more than the {max} a server may be given \
         (environment_too_large)",
        max = StdioServer::MAX_ENV_VARS
    )]
    TooManyVariables {
        /// How many were given.
        count: usize,
    },
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

    /// The most headers a binding may add to each request.
    pub const MAX_HEADERS: usize = 64;
    /// The longest header name, in bytes.
    pub const MAX_HEADER_NAME_BYTES: usize = 256;
    /// The longest header value, in bytes.
    pub const MAX_HEADER_VALUE_BYTES: usize = 8 * 1024;
    /// The most bytes of all the binding's headers together (every name and value).
    pub const MAX_HEADER_BYTES: usize = 64 * 1024;

    /// Whether `name: value` can be one of a binding's headers: the name an HTTP token of at
    /// most [`Self::MAX_HEADER_NAME_BYTES`] that the transport does not set itself, the value
    /// visible ASCII, spaces and tabs, at most [`Self::MAX_HEADER_VALUE_BYTES`]. The error names
    /// the header only when its name is a valid one, and never the value.
    pub fn check_header(name: &str, value: &str) -> Result<(), HeaderError> {
        if name.is_empty() {
            return Err(HeaderError::EmptyName);
        }
        if name.len() > Self::MAX_HEADER_NAME_BYTES {
            return Err(HeaderError::NameTooLong { len: name.len() });
        }
        if let Some(at) = name.bytes().position(|b| !is_token_byte(b)) {
            return Err(HeaderError::BadName {
                what: describe_byte(name.as_bytes()[at]),
                at: at + 1,
            });
        }
        // A valid name from here on: it may be said (lowercased, as HTTP compares names).
        let lower = name.to_ascii_lowercase();
        if RESERVED_HEADERS.contains(&lower.as_str()) {
            return Err(HeaderError::Reserved { name: lower });
        }
        // The value is never named: it may be a secret.
        if value.len() > Self::MAX_HEADER_VALUE_BYTES {
            return Err(HeaderError::ValueTooLong {
                name: lower,
                len: value.len(),
            });
        }
        if let Some(at) = value
            .bytes()
            .position(|b| !(b == b'\t' || (b' '..=b'~').contains(&b)))
        {
            return Err(HeaderError::BadValue {
                name: lower,
                what: describe_byte(value.as_bytes()[at]),
                at: at + 1,
            });
        }
        Ok(())
    }

    /// Whether the binding's headers can all be added to a request: each one by
    /// [`Self::check_header`], at most [`Self::MAX_HEADERS`] of them, together at most
    /// [`Self::MAX_HEADER_BYTES`]. Checked at submission (a [`crate::ModelValidationError`]).
    pub fn check_headers(&self) -> Result<(), HeaderError> {
        Self::check_header_totals(self.headers.len(), 0)?;
        for (name, value) in &self.headers {
            Self::check_header(name, value)?;
        }
        Self::check_header_totals(
            self.headers.len(),
            self.headers.iter().map(|(k, v)| k.len() + v.len()).sum(),
        )
    }

    /// Whether `count` headers of `bytes` bytes together (names and values) are within
    /// [`Self::MAX_HEADERS`] and [`Self::MAX_HEADER_BYTES`].
    pub fn check_header_totals(count: usize, bytes: usize) -> Result<(), HeaderError> {
        if count > Self::MAX_HEADERS {
            return Err(HeaderError::TooMany { count });
        }
        if bytes > Self::MAX_HEADER_BYTES {
            return Err(HeaderError::TooLarge { bytes });
        }
        Ok(())
    }
}

/// Headers a binding cannot give: those the Streamable HTTP transport sets on its own requests,
/// and those `wasi:http` forbids (`wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS`, which the
/// host checks again when it grants them; a test keeps the two lists together).
pub(crate) const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "content-length",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "host",
    "http2-settings",
];

/// A byte of an HTTP token (RFC 9110's `tchar`).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A byte a header cannot carry where it was found, in words (never more than this one byte,
/// and a printable one only when it is ASCII punctuation).
fn describe_byte(b: u8) -> String {
    match b {
        b'\r' | b'\n' => "a line break".into(),
        0 => "a NUL byte".into(),
        b' ' => "a space".into(),
        b'\t' => "a tab".into(),
        0x80..=0xff => "a non-ASCII character".into(),
        b if b.is_ascii_control() => "a control character".into(),
        b if b.is_ascii_punctuation() => format!("`{}`", b as char),
        _ => "a character".into(),
    }
}

/// Why a header cannot be added to a server's requests. A header's value is never named (it
/// may be a secret), and its name only when it is a valid header name (one that is not, a
/// line's text split in the wrong place, may hold a secret or a line break).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The name is empty.
    #[error("a header name is empty (invalid_header)")]
    EmptyName,
    /// The name is longer than [`HttpServer::MAX_HEADER_NAME_BYTES`].
    #[error(
        "a header name is {len} bytes long, more than the {max} a name may have \
         (header_too_large)",
        max = HttpServer::MAX_HEADER_NAME_BYTES
    )]
    NameTooLong {
        /// Its length.
        len: usize,
    },
    /// The name holds a character a header name cannot carry.
    #[error(
        "a header name is not an HTTP header name: it holds {what} at byte {at} (a name is \
         letters, digits and !#$%&'*+-.^_`|~) (invalid_header)"
    )]
    BadName {
        /// The character, described (`a space`, `a line break`, `` `"` ``, ...).
        what: String,
        /// Where, in bytes from 1.
        at: usize,
    },
    /// The name is one the MCP transport or HTTP itself sets.
    #[error(
        "the header `{name}` is set by the MCP transport itself and cannot be given \
         (invalid_header)"
    )]
    Reserved {
        /// The (valid) name.
        name: String,
    },
    /// The value is longer than [`HttpServer::MAX_HEADER_VALUE_BYTES`].
    #[error(
        "the value of the header `{name}` is {len} bytes long, more than the {max} a value may \
         have (header_too_large)",
        max = HttpServer::MAX_HEADER_VALUE_BYTES
    )]
    ValueTooLong {
        /// The (valid) name.
        name: String,
        /// The value's length.
        len: usize,
    },
    /// The value holds a character an HTTP header cannot carry.
    #[error(
        "the value of the header `{name}` holds {what} at byte {at}, which an HTTP header \
         cannot carry (invalid_header)"
    )]
    BadValue {
        /// The (valid) name.
        name: String,
        /// The character, described (`a line break`, `a NUL byte`, ...).
        what: String,
        /// Where, in bytes from 1.
        at: usize,
    },
    /// More headers than [`HttpServer::MAX_HEADERS`].
    #[error(
        "{count} headers, more than the {max} a server binding may add (header_too_large)",
        max = HttpServer::MAX_HEADERS
    )]
    TooMany {
        /// How many.
        count: usize,
    },
    /// The headers together are larger than [`HttpServer::MAX_HEADER_BYTES`].
    #[error(
        "the headers are {bytes} bytes together, more than the {max} a server binding may add \
         (header_too_large)",
        max = HttpServer::MAX_HEADER_BYTES
    )]
    TooLarge {
        /// Their names' and values' bytes together.
        bytes: usize,
    },
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

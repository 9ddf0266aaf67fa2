//! Submission checks (the specification's `ModelValidationError`), decided by the component.

use crate::component::bindings::exports::m3::managed_input::policy as wit;

/// How a submission handles an MCP elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HumanInput {
    /// The default: an elicitation fails the operation (or the agent's plan answers it).
    #[default]
    Fail,
    /// Persist the round and wait for an answer.
    Managed,
}

/// A submission that cannot run: an unknown human-input value, managed input with an
/// elicitation plan or without a managed-input store, or a malformed tool allow-list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ModelValidationError: {message}")]
pub struct ModelValidationError {
    /// What is wrong.
    pub message: String,
}

impl From<wit::SubmissionError> for ModelValidationError {
    fn from(e: wit::SubmissionError) -> Self {
        Self { message: e.message }
    }
}

/// Public -> WIT human input.
pub(crate) fn to_wit(mode: HumanInput) -> wit::HumanInput {
    match mode {
        HumanInput::Fail => wit::HumanInput::Fail,
        HumanInput::Managed => wit::HumanInput::Managed,
    }
}

/// WIT -> public human input.
pub(crate) fn from_wit(mode: wit::HumanInput) -> HumanInput {
    match mode {
        wit::HumanInput::Fail => HumanInput::Fail,
        wit::HumanInput::Managed => HumanInput::Managed,
    }
}

/// What an agent is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Submission {
    /// The prompt (the scripted harness keeps it with the execution; its script decides the
    /// calls).
    pub prompt: String,
    /// The MCP server binding (stdio or Streamable HTTP).
    pub server: crate::api::server::ServerBinding,
    /// The `server:tool` allow-list: the only tools the agent may call.
    pub tools: Vec<String>,
    /// How elicitations are handled (default [`HumanInput::Fail`]).
    pub human_input: HumanInput,
    /// Most rounds per operation (default 10).
    pub round_limit: u32,
    /// Each round's deadline after it opens; `None` is the documented default of 24 hours.
    pub round_deadline: Option<std::time::Duration>,
}

/// The default most rounds per operation.
pub const DEFAULT_ROUND_LIMIT: u32 = 10;

impl Submission {
    /// `prompt` against `server` (a [`crate::StdioServer`] or a [`crate::HttpServer`]), no
    /// tools allowed yet, human input `fail`.
    pub fn new(
        prompt: impl Into<String>,
        server: impl Into<crate::api::server::ServerBinding>,
    ) -> Self {
        Self {
            prompt: prompt.into(),
            server: server.into(),
            tools: Vec::new(),
            human_input: HumanInput::Fail,
            round_limit: DEFAULT_ROUND_LIMIT,
            round_deadline: None,
        }
    }

    /// Sets the allow-list.
    pub fn tools<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tools = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the human-input mode.
    pub fn human_input(mut self, mode: HumanInput) -> Self {
        self.human_input = mode;
        self
    }

    /// Sets the round limit.
    pub fn round_limit(mut self, limit: u32) -> Self {
        self.round_limit = limit;
        self
    }

    /// Sets each round's deadline.
    pub fn round_deadline(mut self, deadline: std::time::Duration) -> Self {
        self.round_deadline = Some(deadline);
        self
    }
}

//! What every harness with a model does with the MCP elicitations its agent forwards, written
//! once for all of them (the `codex` and `claude-code` sessions): the tool call in progress, the
//! round it opens, the answer delivered at most once, and every way a round's wait ends.
//!
//! A harness's own module speaks its wire protocol and calls this: a forwarded elicitation opens
//! a round (paired with the tool call in progress); the committed answer is delivered once as
//! the harness's reply to that request; the next round of the same call, or the call's result,
//! resolves the delivered round; the call completing, the harness clearing the request or the
//! turn ending while the round still waits withdraws it (`request-withdrawn`); the round limit
//! fails the delivered round `round-limit-exceeded`; mode `fail` answers `cancel` and fails the
//! round `elicitation-unhandled`. How the reply to a forwarded request is written is the one
//! thing each harness gives ([`Reply`]).

use super::session::{Action, Finished, Mode, Operation};
use crate::m3::managed_input::types::{ElicitationResponse, FailureCode, OperationKind};
use crate::mcp::request;
use serde_json::{Value, json};

/// How a harness writes its reply to a forwarded request: the request's id and the MCP
/// elicitation result (`{"action": .., "content": ..}`) in, the message to send out.
pub type Reply = fn(&Value, Value) -> Value;

/// The tool call in progress (the operation a round belongs to).
#[derive(Debug, Clone, PartialEq)]
struct ToolCall {
    id: String,
    tool: String,
    arguments: Value,
    rounds: u32,
}

/// The round in flight.
#[derive(Debug, Clone, PartialEq)]
struct OpenRound {
    request_id: Value,
    key: String,
    delivered: bool,
    unhandled: bool,
}

impl OpenRound {
    /// Waiting for its answer.
    fn waiting(&self) -> bool {
        !self.delivered && !self.unhandled
    }
}

/// What became of a forwarded elicitation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forwarded {
    /// A round was opened (and, in mode `fail`, answered `cancel` and failed at once).
    Round,
    /// A round already waits for its answer: this one was answered `cancel`.
    Busy,
    /// The call asked for more rounds than the limit: the delivered round failed, this request
    /// was answered `cancel`; the harness ends the turn with [`AgentRounds::limit_exceeded`].
    LimitExceeded,
    /// The request cannot be a round (its parameters are unusable): the harness refuses it in
    /// its own words.
    Unusable(String),
}

/// How an input that ends the turn from outside ends it: the session's end, the open round's
/// code and message. `None` for every other input.
pub fn interruption(
    input: &super::session::Input,
) -> Option<(Finished, FailureCode, &'static str)> {
    use super::session::Input;
    match input {
        Input::Cancel => Some((
            Finished::Cancelled,
            FailureCode::Cancelled,
            "the execution was cancelled",
        )),
        Input::DeadlineExpired => Some((
            Finished::Failed {
                code: Some(FailureCode::DeadlineExceeded),
                message: "the round's deadline passed".into(),
            },
            FailureCode::DeadlineExceeded,
            "the round's deadline passed",
        )),
        _ => None,
    }
}

/// How the harness's process ending (`ServerExited`, `ServerFault`) is said: `name` (e.g.
/// `claude code`) and what happened. `None` for every other input.
pub fn process_end(name: &str, input: &super::session::Input) -> Option<String> {
    use super::session::Input;
    match input {
        Input::ServerExited(how) => Some(format!("{name} {how}")),
        Input::ServerFault(what) => Some(format!("{name} was stopped: {what}")),
        _ => None,
    }
}

/// The rounds of one agent session.
#[derive(Debug)]
pub struct AgentRounds {
    mode: Mode,
    round_limit: u32,
    reply: Reply,
    call: Option<ToolCall>,
    calls: usize,
    open: Option<OpenRound>,
    unhandled: bool,
}

impl AgentRounds {
    /// No call and no round yet.
    pub fn new(mode: Mode, round_limit: u32, reply: Reply) -> Self {
        Self {
            mode,
            round_limit,
            reply,
            call: None,
            calls: 0,
            open: None,
            unhandled: false,
        }
    }

    /// An allow-listed tool call began.
    pub fn call_started(&mut self, id: String, tool: String, arguments: Value) {
        self.call = Some(ToolCall {
            id,
            tool,
            arguments,
            rounds: 0,
        });
    }

    /// The id of the call in progress.
    pub fn call_id(&self) -> Option<&str> {
        self.call.as_ref().map(|c| c.id.as_str())
    }

    /// The tool of the call in progress.
    pub fn call_tool(&self) -> Option<&str> {
        self.call.as_ref().map(|c| c.tool.as_str())
    }

    /// The call in progress completed with `result` (an MCP tool result): a round still waiting
    /// was withdrawn, a delivered one is resolved, the result is recorded.
    pub fn call_completed(&mut self, name: String, result: Value, out: &mut Vec<Action>) {
        self.withdraw_waiting(
            "the tool call completed without waiting for the answer",
            out,
        );
        self.resolve_delivered(out);
        out.push(Action::ToolResult {
            step: self.calls,
            kind: OperationKind::Tool,
            name,
            result,
        });
        self.calls += 1;
        self.call = None;
    }

    /// Whether some round was answered by mode `fail` (the session then fails
    /// `elicitation-unhandled` at its end).
    pub fn any_unhandled(&self) -> bool {
        self.unhandled
    }

    /// Whether the open round is the one of this forwarded request.
    pub fn is_open(&self, request_id: &Value) -> bool {
        self.open
            .as_ref()
            .is_some_and(|r| &r.request_id == request_id)
    }

    /// Fails the open round with `request-withdrawn` if it still waits for its answer.
    pub fn withdraw_waiting(&mut self, message: &str, out: &mut Vec<Action>) {
        if self.open.as_ref().is_some_and(OpenRound::waiting)
            && !crate::mutation::broken(crate::mutation::Rule::WithdrawnClosure)
        {
            self.open = None;
            out.push(Action::FailRound {
                code: FailureCode::RequestWithdrawn,
                message: message.into(),
            });
        }
    }

    /// Resolves the open round if its answer was delivered (the server went on).
    pub fn resolve_delivered(&mut self, out: &mut Vec<Action>) {
        if let Some(round) = &self.open
            && round.delivered
        {
            if !round.unhandled {
                out.push(Action::ResolveRound);
            }
            self.open = None;
        }
    }

    /// Fails the open round (waiting or delivered) with `code`: the turn is being ended.
    pub fn fail_open(&mut self, code: FailureCode, message: &str, out: &mut Vec<Action>) {
        if let Some(round) = self.open.take()
            && !round.unhandled
        {
            out.push(Action::FailRound {
                code,
                message: message.into(),
            });
        }
    }

    /// Fails the open round as the session ends with `finished`.
    pub fn end(&mut self, finished: &Finished, out: &mut Vec<Action>) {
        let (code, message) = match finished {
            Finished::Failed { code, message } => {
                (code.unwrap_or(FailureCode::ServerError), message.clone())
            }
            Finished::Cancelled => (FailureCode::Cancelled, "the execution was cancelled".into()),
            Finished::TimedOut { message }
            | Finished::ModelError { message }
            | Finished::ToolNotFound { message } => (FailureCode::ServerError, message.clone()),
            Finished::Succeeded => (FailureCode::ServerError, "the session ended".into()),
        };
        self.fail_open(code, &message, out);
    }

    /// The failure the session ends with after [`Forwarded::LimitExceeded`].
    pub fn limit_exceeded() -> Finished {
        Finished::Failed {
            code: Some(FailureCode::RoundLimitExceeded),
            message: "round limit exceeded".into(),
        }
    }

    /// An elicitation the agent forwarded (`params` in MCP's `elicitation/create` form) while
    /// the call `fallback_tool` may be in progress: opens its round, or says why not.
    pub fn forwarded(
        &mut self,
        request_id: Value,
        params: &Value,
        fallback_tool: &str,
        out: &mut Vec<Action>,
    ) -> Forwarded {
        let cancel = json!({"action": "cancel"});
        if self.open.as_ref().is_some_and(|r| !r.delivered) {
            out.push(Action::Send((self.reply)(&request_id, cancel)));
            return Forwarded::Busy;
        }
        let call = self.call.get_or_insert_with(|| ToolCall {
            id: String::new(),
            tool: fallback_tool.to_string(),
            arguments: json!({}),
            rounds: 0,
        });
        let index = call.rounds;
        if index >= self.round_limit {
            // As in every harness: the delivered round that the server answered with one more
            // request fails with the limit's code.
            let message = format!("the server asked for more than {} rounds", self.round_limit);
            self.fail_open(FailureCode::RoundLimitExceeded, &message, out);
            out.push(Action::Send((self.reply)(&request_id, cancel)));
            return Forwarded::LimitExceeded;
        }
        call.rounds += 1;
        let operation = Operation {
            step: self.calls,
            kind: OperationKind::Tool,
            name: call.tool.clone(),
            arguments: call.arguments.clone(),
        };
        // The next request of the same call resolves the delivered round.
        self.resolve_delivered(out);
        let (key, request) = match crate::mcp::legacy::elicitation(params) {
            Ok(parsed) => parsed,
            Err(e) => return Forwarded::Unusable(e.0),
        };
        out.push(Action::OpenRound {
            operation,
            round_index: index,
            requests: vec![(key.clone(), request)],
            request_state: None,
        });
        self.open = Some(OpenRound {
            request_id,
            key,
            delivered: false,
            unhandled: false,
        });
        if self.mode == Mode::Fail {
            self.unhandled_round(out);
        }
        Forwarded::Round
    }

    /// Mode `fail` (or a plan without a match): answer `cancel`, fail the round.
    pub fn unhandled_round(&mut self, out: &mut Vec<Action>) {
        let Some(round) = self.open.as_mut() else {
            return;
        };
        if round.delivered {
            return;
        }
        round.delivered = true;
        round.unhandled = true;
        self.unhandled = true;
        out.push(Action::Deliver((self.reply)(
            &round.request_id,
            json!({"action": "cancel"}),
        )));
        out.push(Action::FailRound {
            code: FailureCode::ElicitationUnhandled,
            message: "human input mode is `fail`: the kit answered cancel".into(),
        });
    }

    /// The open round's committed answer: delivered once, as the harness's reply.
    pub fn answer(&mut self, responses: &[(String, ElicitationResponse)], out: &mut Vec<Action>) {
        let Some(round) = self.open.as_mut() else {
            return;
        };
        if round.delivered {
            return; // at most once
        }
        let Some((_, response)) = responses.iter().find(|(k, _)| k == &round.key) else {
            return;
        };
        round.delivered = true;
        out.push(Action::Deliver((self.reply)(
            &round.request_id,
            request::answer(response),
        )));
    }
}

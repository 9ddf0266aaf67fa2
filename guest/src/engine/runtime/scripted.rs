//! One MCP server connection driven by the scripted harness, as a state machine.
//!
//! The session probes the era (or uses the forced one), completes the handshake, then calls the
//! script's tools in order. A server must answer its first request (`initialize`, or the first
//! operation when the era is forced modern) within [`STARTUP_TIMEOUT_MS`]. An elicitation (legacy `elicitation/create`, or a 2026-07-28
//! `input_required` result) opens a round; the round's committed answer is delivered once (the
//! driver commits `delivery-started` before writing the line and `delivered` after); the server's
//! reply to it resolves the round: the operation's result, or the next round of the same
//! operation. Any other end fails the round with a code, in the same step that ends the wait: a
//! server that cancels its request or answers the call while the round is open withdraws it
//! (`request-withdrawn`), a server that exits fails it (`server-error`). Steps call tools, get
//! prompts or read resources; each is one logical operation with its own rounds.

use super::session::{Action, Finished, Input, Mode, Operation, kind_name};
use crate::m3::managed_input::types::{
    ElicitationRequest, ElicitationResponse, FailureCode, OperationKind,
};
use crate::mcp::era::{self, Era, EraChoice, ProbeOutcome};
use crate::mcp::message::{self, Incoming, RpcError};
use crate::mcp::{legacy, mrtr, request};
use crate::mutation;
use serde_json::{Value, json};

/// How long a server may take to answer its first request before the session gives up on it:
/// `initialize` in the legacy era, the first operation (`tools/call`, ...) when the era is forced
/// modern (no handshake, no probe). Once the server has answered anything the timer no longer
/// counts: a modern round's request is answered at once (`input_required`), so the time a
/// round waits for a human is never start-up time.
pub const STARTUP_TIMEOUT_MS: u64 = 30_000;

/// One operation of the script, on this server: a tool call, a prompt or a resource read.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// What the step does.
    pub kind: OperationKind,
    /// The tool name, prompt name or resource URI on the server.
    pub name: String,
    /// Its arguments (a JSON object; unused for a resource).
    pub arguments: Value,
}

impl Step {
    /// A tool call.
    pub fn tool(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            kind: OperationKind::Tool,
            name: name.into(),
            arguments,
        }
    }

    /// The MCP method of the step.
    pub fn method(&self) -> &'static str {
        match self.kind {
            OperationKind::Tool => "tools/call",
            OperationKind::Prompt => "prompts/get",
            OperationKind::Resource => "resources/read",
        }
    }

    /// The method's params (before the era's `_meta`).
    fn params(&self) -> Value {
        match self.kind {
            OperationKind::Resource => json!({"uri": self.name}),
            _ => json!({"name": self.name, "arguments": self.arguments}),
        }
    }
}

/// How a session is set up.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionConfig {
    /// Which era to speak.
    pub era: EraChoice,
    /// The tool calls, in order.
    pub steps: Vec<Step>,
    /// Most rounds per operation.
    pub round_limit: u32,
    /// What to do with elicitations.
    pub mode: Mode,
}

/// Where the open round came from.
#[derive(Debug, Clone, PartialEq)]
enum RoundOrigin {
    /// A legacy `elicitation/create` with the server's request id.
    Elicitation {
        server_request_id: Value,
        key: String,
    },
    /// A legacy -32042 error: the answer is consent, and delivering it retries the call.
    UrlRequired,
    /// A 2026-07-28 `input_required` result.
    InputRequired { request_state: Option<String> },
}

#[derive(Debug, Clone, PartialEq)]
struct OpenRound {
    origin: RoundOrigin,
    delivered: bool,
    /// Mode `fail`: already answered `cancel` and failed; the call's reply only ends the step.
    unhandled: bool,
    /// The server withdrew the request before the answer was delivered: the round is already
    /// failed (`request-withdrawn`) and its answer is never delivered.
    withdrawn: bool,
}

impl OpenRound {
    /// Waiting for its answer: not delivered and not already ended by the session.
    fn waiting(&self) -> bool {
        !self.delivered && !self.withdrawn && !self.unhandled
    }

    /// Already failed by the session (mode `fail`, or withdrawn).
    fn ended(&self) -> bool {
        self.unhandled || self.withdrawn
    }
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Idle,
    Probing {
        id: u64,
    },
    Initializing {
        id: u64,
        /// The probe that timed out, if any: a late successful answer to it still wins (a
        /// dual-era server may have committed the connection to the modern era by then).
        late_probe: Option<u64>,
    },
    Calling {
        id: u64,
        step: usize,
        params: Value,
        round_index: u32,
        open: Option<OpenRound>,
        failed: bool,
    },
    Done,
}

/// The state machine of one scripted MCP session.
#[derive(Debug)]
pub struct ScriptedSession {
    config: SessionConfig,
    era: Era,
    state: State,
    next_id: u64,
    next_step: usize,
    /// The server has answered one of our requests or sent one of its own: it has started, and
    /// the start-up timeout no longer applies.
    heard: bool,
}

impl ScriptedSession {
    /// A session that has not started.
    pub fn new(config: SessionConfig) -> Self {
        let era = if config.era == EraChoice::Modern {
            Era::Modern
        } else {
            Era::Legacy
        };
        Self {
            config,
            era,
            state: State::Idle,
            next_id: 1,
            next_step: 0,
            heard: false,
        }
    }

    /// The era the session speaks (final once the probe is decided).
    pub fn era(&self) -> Era {
        self.era
    }

    /// Whether the session has finished.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Feeds one input; returns the actions to perform, in order.
    pub fn handle(&mut self, input: Input) -> Vec<Action> {
        let mut out = Vec::new();
        match input {
            Input::Start => self.start(&mut out),
            Input::Line(line) => self.line(&line, &mut out),
            Input::ProbeTimedOut => match self.state {
                State::Probing { id } => {
                    self.decided(era::decide(&ProbeOutcome::TimedOut), &mut out);
                    if let State::Initializing { late_probe, .. } = &mut self.state {
                        *late_probe = Some(id);
                    }
                }
                State::Initializing { .. } => self.finish(
                    Finished::Failed {
                        code: Some(FailureCode::ServerError),
                        message: format!(
                            "the server did not answer `initialize` within {} s",
                            STARTUP_TIMEOUT_MS / 1000
                        ),
                    },
                    &mut out,
                ),
                State::Calling { step, .. } if !self.heard => {
                    // Forced modern: the first operation is the server's first request.
                    let method = self.config.steps[step].method();
                    self.cancel_call(&mut out);
                    self.finish(
                        Finished::Failed {
                            code: Some(FailureCode::ServerError),
                            message: format!(
                                "the server did not answer its first request (`{method}`) \
                                 within {} s of starting",
                                STARTUP_TIMEOUT_MS / 1000
                            ),
                        },
                        &mut out,
                    )
                }
                _ => {}
            },
            Input::Answer(responses) => self.answer(responses, &mut out),
            Input::Unhandled => {
                if self.open_round().is_some_and(OpenRound::waiting) {
                    self.fail_unhandled(&mut out);
                }
            }
            Input::Cancel => self.abort(
                FailureCode::Cancelled,
                "the execution was cancelled",
                &mut out,
            ),
            Input::DeadlineExpired => self.abort(
                FailureCode::DeadlineExceeded,
                "the round's deadline passed",
                &mut out,
            ),
            Input::ServerExited(how) => self.server_gone(
                &format!("the server {how} while the round was open"),
                format!("the server {how}"),
                &mut out,
            ),
            Input::ServerFault(what) => {
                let message = format!("the server was stopped: {what}");
                self.server_gone(&message, message.clone(), &mut out)
            }
        }
        out
    }

    /// The server is gone (or was stopped): the open round and the session fail `server-error`.
    fn server_gone(&mut self, round_message: &str, message: String, out: &mut Vec<Action>) {
        if self.state == State::Done {
            return;
        }
        if self.open_round().is_some_and(|r| !r.ended()) {
            out.push(Action::FailRound {
                code: FailureCode::ServerError,
                message: round_message.into(),
            });
        }
        self.finish(
            Finished::Failed {
                code: Some(FailureCode::ServerError),
                message,
            },
            out,
        );
    }

    fn open_round(&self) -> Option<&OpenRound> {
        match &self.state {
            State::Calling { open, .. } => open.as_ref(),
            _ => None,
        }
    }

    fn finish(&mut self, finished: Finished, out: &mut Vec<Action>) {
        self.state = State::Done;
        out.push(Action::Finish(finished));
    }

    fn start(&mut self, out: &mut Vec<Action>) {
        if self.state != State::Idle {
            return;
        }
        match self.config.era {
            EraChoice::Auto => {
                let id = self.id();
                out.push(Action::Send(message::request(
                    id,
                    "server/discover",
                    era::discover_params(),
                )));
                out.push(Action::StartProbeTimer);
                self.state = State::Probing { id };
            }
            EraChoice::Legacy => self.decided(Era::Legacy, out),
            EraChoice::Modern => self.decided(Era::Modern, out),
        }
    }

    fn decided(&mut self, era: Era, out: &mut Vec<Action>) {
        self.era = era;
        match era {
            Era::Modern => {
                self.next_step(out);
                // Forced modern, nothing heard yet: the first operation is bounded as
                // `initialize` is (after a probe's answer the server has started).
                if !self.heard && matches!(self.state, State::Calling { .. }) {
                    out.push(Action::ArmTimer(STARTUP_TIMEOUT_MS));
                }
            }
            Era::Legacy => {
                let id = self.id();
                out.push(Action::Send(message::request(
                    id,
                    "initialize",
                    era::initialize_params(),
                )));
                out.push(Action::ArmTimer(STARTUP_TIMEOUT_MS));
                self.state = State::Initializing {
                    id,
                    late_probe: None,
                };
            }
        }
    }

    fn next_step(&mut self, out: &mut Vec<Action>) {
        let Some(step) = self.config.steps.get(self.next_step).cloned() else {
            self.finish(Finished::Succeeded, out);
            return;
        };
        let index = self.next_step;
        self.next_step += 1;
        let params = era::decorate(self.era, step.params());
        let id = self.id();
        out.push(Action::Send(message::request(
            id,
            step.method(),
            params.clone(),
        )));
        self.state = State::Calling {
            id,
            step: index,
            params,
            round_index: 0,
            open: None,
            failed: false,
        };
    }

    fn operation(&self, step: usize) -> Operation {
        let s = &self.config.steps[step];
        Operation {
            step,
            kind: s.kind,
            name: s.name.clone(),
            arguments: s.arguments.clone(),
        }
    }

    fn line(&mut self, line: &str, out: &mut Vec<Action>) {
        let Ok(incoming) = message::parse(line) else {
            return; // not a message: servers may print junk; the kit ignores it
        };
        if !matches!(incoming, Incoming::Notification { .. }) {
            self.heard = true;
        }
        match incoming {
            Incoming::Notification { method, params } => self.notification(&method, &params, out),
            Incoming::Request { id, method, params } => {
                self.server_request(id, &method, &params, out)
            }
            Incoming::Response { id, outcome } => self.response(&id, outcome, out),
        }
    }

    /// `notifications/cancelled` for the open round's `elicitation/create`: the server stopped
    /// waiting (e.g. its SDK's elicitation timeout), so the round is withdrawn now; the call
    /// itself goes on and its reply ends the step.
    fn notification(&mut self, method: &str, params: &Value, out: &mut Vec<Action>) {
        if method != "notifications/cancelled" {
            return;
        }
        let State::Calling {
            open: Some(round), ..
        } = &mut self.state
        else {
            return;
        };
        let RoundOrigin::Elicitation {
            server_request_id, ..
        } = &round.origin
        else {
            return;
        };
        if !round.waiting()
            || params.get("requestId") != Some(server_request_id)
            || mutation::broken(mutation::Rule::WithdrawnClosure)
        {
            return;
        }
        round.withdrawn = true;
        let reason = params
            .get("reason")
            .and_then(Value::as_str)
            .map(|r| format!(" (its reason: {})", crate::errors::bounded(r)))
            .unwrap_or_default();
        out.push(Action::FailRound {
            code: FailureCode::RequestWithdrawn,
            message: format!("the server cancelled its elicitation request{reason}"),
        });
    }

    fn server_request(&mut self, id: Value, method: &str, params: &Value, out: &mut Vec<Action>) {
        match method {
            "ping" => out.push(Action::Send(message::result(&id, json!({})))),
            legacy::ELICITATION_METHOD if matches!(self.state, State::Calling { .. }) => {
                self.elicitation(id, params, out)
            }
            _ => out.push(Action::Send(message::error(
                &id,
                -32601,
                "method not supported by this client",
            ))),
        }
    }

    fn elicitation(&mut self, server_request_id: Value, params: &Value, out: &mut Vec<Action>) {
        let State::Calling {
            step,
            open,
            round_index,
            ..
        } = &self.state
        else {
            return;
        };
        let (step, round_index) = (*step, *round_index);
        let next_index = match open {
            Some(round) if round.delivered || round.withdrawn => {
                // The server asked again after the answer (the delivered round is resolved), or
                // after withdrawing its request: the next round of the same operation.
                round_index + 1
            }
            Some(_) => {
                out.push(Action::Send(message::error(
                    &server_request_id,
                    -32603,
                    "an elicitation is already pending",
                )));
                return;
            }
            None => round_index,
        };
        if let Some(round) = open
            && (round.delivered || round.withdrawn)
        {
            if !mrtr::within_limit(next_index, self.config.round_limit) {
                if !round.ended() {
                    out.push(Action::FailRound {
                        code: FailureCode::RoundLimitExceeded,
                        message: format!(
                            "the server asked for more than {} rounds",
                            self.config.round_limit
                        ),
                    });
                }
                out.push(Action::Send(message::result(
                    &server_request_id,
                    request::cancel_answer(),
                )));
                self.cancel_call(out);
                self.finish(
                    Finished::Failed {
                        code: Some(FailureCode::RoundLimitExceeded),
                        message: "round limit exceeded".into(),
                    },
                    out,
                );
                return;
            }
            if !round.ended() {
                out.push(Action::ResolveRound);
            }
        }
        let (key, request) = match legacy::elicitation(params) {
            Ok(parsed) => parsed,
            Err(e) => {
                out.push(Action::Send(message::error(
                    &server_request_id,
                    -32602,
                    &e.0,
                )));
                return;
            }
        };
        out.push(Action::OpenRound {
            operation: self.operation(step),
            round_index: next_index,
            requests: vec![(key.clone(), request)],
            request_state: None,
        });
        let origin = RoundOrigin::Elicitation {
            server_request_id: server_request_id.clone(),
            key,
        };
        self.await_answer(next_index, origin, out);
    }

    /// Makes `origin` the open round of the current call (round `index`); in mode `fail` it is
    /// answered and failed at once.
    fn await_answer(&mut self, index: u32, origin: RoundOrigin, out: &mut Vec<Action>) {
        self.set_open(
            index,
            Some(OpenRound {
                origin,
                delivered: false,
                unhandled: false,
                withdrawn: false,
            }),
        );
        if self.config.mode == Mode::Fail {
            self.fail_unhandled(out);
        }
    }

    /// Mode `fail`: answer `cancel` now and fail the round; the step then fails.
    fn fail_unhandled(&mut self, out: &mut Vec<Action>) {
        let State::Calling {
            open: Some(round),
            failed,
            ..
        } = &mut self.state
        else {
            return;
        };
        let answer = match &round.origin {
            RoundOrigin::Elicitation {
                server_request_id, ..
            } => Some(message::result(server_request_id, request::cancel_answer())),
            RoundOrigin::UrlRequired | RoundOrigin::InputRequired { .. } => None,
        };
        round.delivered = true;
        round.unhandled = true;
        *failed = true;
        if let Some(line) = answer {
            out.push(Action::Deliver(line));
        }
        out.push(Action::FailRound {
            code: FailureCode::ElicitationUnhandled,
            message: "human input mode is `fail`: the kit answered cancel".into(),
        });
        if matches!(
            round.origin,
            RoundOrigin::UrlRequired | RoundOrigin::InputRequired { .. }
        ) {
            // Nothing more will come from the server for this call.
            self.finish_unhandled(out);
        }
    }

    fn finish_unhandled(&mut self, out: &mut Vec<Action>) {
        self.finish(
            Finished::Failed {
                code: Some(FailureCode::ElicitationUnhandled),
                message: "the server asked for input and human input mode is `fail`".into(),
            },
            out,
        );
    }

    fn set_open(&mut self, index: u32, round: Option<OpenRound>) {
        if let State::Calling {
            open, round_index, ..
        } = &mut self.state
        {
            *open = round;
            *round_index = index;
        }
    }

    fn response(&mut self, id: &Value, outcome: Result<Value, RpcError>, out: &mut Vec<Action>) {
        match self.state.clone() {
            State::Probing { id: probe } if id == &json!(probe) => {
                let probe = match outcome {
                    Ok(result) => ProbeOutcome::Discovered(result),
                    Err(e) => ProbeOutcome::Failed(e),
                };
                self.decided(era::decide(&probe), out);
            }
            State::Initializing {
                late_probe: Some(probe),
                ..
            } if id == &json!(probe) => {
                // The probe's answer came after the fallback `initialize` was sent: a server
                // that speaks the modern era now expects it (its `initialize` answer is ignored).
                if let Ok(result) = outcome
                    && era::decide(&ProbeOutcome::Discovered(result)) == Era::Modern
                {
                    self.era = Era::Modern;
                    self.next_step(out);
                }
            }
            State::Initializing { id: init, .. } if id == &json!(init) => match outcome {
                Ok(_) => {
                    out.push(Action::Send(message::notification(
                        "notifications/initialized",
                        json!({}),
                    )));
                    self.next_step(out);
                }
                Err(e) => self.finish(
                    Finished::Failed {
                        code: None,
                        message: format!("initialize failed with error {}", e.code),
                    },
                    out,
                ),
            },
            State::Calling {
                id: call,
                step,
                params,
                round_index,
                open,
                failed,
            } if id == &json!(call) => {
                self.call_response(step, &params, round_index, open, failed, outcome, out)
            }
            _ => {} // an answer to nothing we are waiting for
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn call_response(
        &mut self,
        step: usize,
        params: &Value,
        round_index: u32,
        open: Option<OpenRound>,
        failed: bool,
        outcome: Result<Value, RpcError>,
        out: &mut Vec<Action>,
    ) {
        let delivered = open.as_ref().is_some_and(|r| r.delivered && !r.unhandled);
        let (kind, name) = {
            let s = &self.config.steps[step];
            (s.kind, s.name.clone())
        };
        let what = format!("{} `{name}`", kind_name(kind));
        if let Some(round) = open
            .as_ref()
            .filter(|r| r.waiting() && !mutation::broken(mutation::Rule::WithdrawnClosure))
        {
            // The server answered the call while its request was still open: it stopped
            // waiting for the answer, which is now never delivered. Its request still waits
            // on the server's side: the kit answers it `cancel`, so nothing there hangs.
            if let RoundOrigin::Elicitation {
                server_request_id, ..
            } = &round.origin
            {
                out.push(Action::Send(message::result(
                    server_request_id,
                    request::cancel_answer(),
                )));
            }
            let message = match &outcome {
                Ok(_) => format!("the server completed {what} without waiting for the answer"),
                Err(e) => format!(
                    "the server failed {what} with error {} while the round was open",
                    e.code
                ),
            };
            out.push(Action::FailRound {
                code: FailureCode::RequestWithdrawn,
                message,
            });
            self.set_open(
                round_index,
                open.clone().map(|mut r| {
                    r.withdrawn = true;
                    r
                }),
            );
        }
        let result = match outcome {
            Err(e) => {
                if open.is_none()
                    && let Some(parsed) = legacy::url_required(&e)
                {
                    return self.url_required(step, round_index, parsed, out);
                }
                if delivered {
                    let code = mrtr::failure_for_retry_error(e.code);
                    out.push(Action::FailRound {
                        code,
                        message: format!("the server answered the delivery with error {}", e.code),
                    });
                    return self.finish(
                        Finished::Failed {
                            code: Some(code),
                            message: format!("{what} failed with error {}", e.code),
                        },
                        out,
                    );
                }
                let code = failed.then_some(FailureCode::ElicitationUnhandled);
                return self.finish(
                    Finished::Failed {
                        code,
                        message: format!("{what} failed with error {}", e.code),
                    },
                    out,
                );
            }
            Ok(result) => result,
        };
        let classified = if self.era == Era::Modern {
            mrtr::classify(&result)
        } else {
            Ok(mrtr::CallResult::Complete(result))
        };
        match classified {
            Err(e) => {
                if delivered {
                    out.push(Action::FailRound {
                        code: FailureCode::ServerError,
                        message: e.0.clone(),
                    });
                }
                self.finish(
                    Finished::Failed {
                        code: Some(FailureCode::ServerError),
                        message: e.0,
                    },
                    out,
                );
            }
            Ok(mrtr::CallResult::Complete(result)) => {
                if delivered {
                    out.push(Action::ResolveRound);
                }
                out.push(Action::ToolResult {
                    step,
                    kind,
                    name,
                    result,
                });
                if failed {
                    self.finish_unhandled(out);
                } else {
                    self.next_step(out);
                }
            }
            Ok(mrtr::CallResult::InputRequired {
                requests,
                request_state,
            }) => {
                let next_index = if open.is_some() {
                    round_index + 1
                } else {
                    round_index
                };
                if !mrtr::within_limit(next_index, self.config.round_limit) {
                    if delivered {
                        out.push(Action::FailRound {
                            code: FailureCode::RoundLimitExceeded,
                            message: format!(
                                "the server asked for more than {} rounds",
                                self.config.round_limit
                            ),
                        });
                    }
                    return self.finish(
                        Finished::Failed {
                            code: Some(FailureCode::RoundLimitExceeded),
                            message: "round limit exceeded".into(),
                        },
                        out,
                    );
                }
                if delivered {
                    out.push(Action::ResolveRound);
                }
                out.push(Action::OpenRound {
                    operation: self.operation(step),
                    round_index: next_index,
                    requests,
                    request_state: request_state.clone(),
                });
                if let State::Calling { params: p, .. } = &mut self.state {
                    *p = params.clone();
                }
                let origin = RoundOrigin::InputRequired { request_state };
                self.await_answer(next_index, origin, out);
            }
        }
    }

    fn url_required(
        &mut self,
        step: usize,
        round_index: u32,
        parsed: Result<Vec<(String, ElicitationRequest)>, request::UnusableRequest>,
        out: &mut Vec<Action>,
    ) {
        match parsed {
            Err(e) => self.finish(
                Finished::Failed {
                    code: Some(FailureCode::ServerError),
                    message: e.0,
                },
                out,
            ),
            Ok(requests) => {
                out.push(Action::OpenRound {
                    operation: self.operation(step),
                    round_index,
                    requests,
                    request_state: None,
                });
                self.await_answer(round_index, RoundOrigin::UrlRequired, out);
            }
        }
    }

    fn answer(&mut self, responses: Vec<(String, ElicitationResponse)>, out: &mut Vec<Action>) {
        let new_id = self.next_id;
        let State::Calling {
            id,
            step,
            params,
            open: Some(round),
            ..
        } = &mut self.state
        else {
            return;
        };
        if !round.waiting() {
            return; // at most once, and never after the server withdrew the request
        }
        let method = self.config.steps[*step].method();
        let line = match &round.origin {
            RoundOrigin::Elicitation {
                server_request_id,
                key,
            } => {
                let Some((_, response)) = responses.iter().find(|(k, _)| k == key) else {
                    return;
                };
                message::result(server_request_id, request::answer(response))
            }
            RoundOrigin::UrlRequired => {
                // Consent recorded: retry the same call with a new id.
                *id = new_id;
                message::request(new_id, method, params.clone())
            }
            RoundOrigin::InputRequired { request_state } => {
                let answers = responses
                    .iter()
                    .map(|(k, r)| (k.clone(), request::answer(r)))
                    .collect();
                let retry = mrtr::retry_params(params, answers, request_state.as_deref());
                *id = new_id;
                message::request(new_id, method, retry)
            }
        };
        round.delivered = true;
        if matches!(
            round.origin,
            RoundOrigin::UrlRequired | RoundOrigin::InputRequired { .. }
        ) {
            self.next_id += 1;
        }
        out.push(Action::Deliver(line));
    }

    /// Tells the server to abandon the in-flight call.
    fn cancel_call(&mut self, out: &mut Vec<Action>) {
        if let State::Calling { id, .. } = &self.state {
            out.push(Action::Send(message::notification(
                "notifications/cancelled",
                json!({"requestId": id, "reason": "cancelled by the kit"}),
            )));
        }
    }

    fn abort(&mut self, code: FailureCode, message: &str, out: &mut Vec<Action>) {
        if self.state == State::Done {
            return;
        }
        if let State::Calling {
            open: Some(round), ..
        } = &self.state
            && !round.ended()
        {
            if let RoundOrigin::Elicitation {
                server_request_id, ..
            } = &round.origin
                && !round.delivered
            {
                out.push(Action::Send(message::result(
                    server_request_id,
                    request::cancel_answer(),
                )));
            }
            out.push(Action::FailRound {
                code,
                message: message.into(),
            });
        }
        self.cancel_call(out);
        let finished = match code {
            FailureCode::Cancelled => Finished::Cancelled,
            code => Finished::Failed {
                code: Some(code),
                message: message.into(),
            },
        };
        self.finish(finished, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_discover_answer_after_the_fallback_still_selects_the_modern_era() {
        let mut s = session(EraChoice::Auto, Mode::Managed);
        s.handle(Input::Start);
        let fallback = s.handle(Input::ProbeTimedOut);
        assert_eq!(sent(&fallback)[0]["method"], "initialize");
        let discovered = json!({"jsonrpc": "2.0", "id": 1, "result": {
            "supportedVersions": [crate::mcp::MODERN_VERSION],
            "capabilities": {}, "serverInfo": {"name": "x", "version": "1"}}});
        let actions = s.handle(line(discovered));
        assert_eq!(s.era(), Era::Modern);
        assert_eq!(sent(&actions)[0]["method"], "tools/call");
        // The server then refuses the late `initialize`: ignored, the call goes on.
        let refused = json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32022, "message": "x"}});
        assert!(s.handle(line(refused)).is_empty());
        assert!(!s.is_done());
    }
    use crate::m3::managed_input::types::ElicitationAction;

    fn session(era: EraChoice, mode: Mode) -> ScriptedSession {
        ScriptedSession::new(SessionConfig {
            era,
            steps: vec![Step::tool("book_shipment", json!({"item": "book"}))],
            round_limit: 3,
            mode,
        })
    }

    fn sent(actions: &[Action]) -> Vec<Value> {
        actions
            .iter()
            .filter_map(|a| {
                if let Action::Send(v) = a {
                    Some(v.clone())
                } else {
                    None
                }
            })
            .collect()
    }

    fn accept() -> Vec<(String, ElicitationResponse)> {
        vec![(
            "shipping_address".into(),
            ElicitationResponse {
                action: ElicitationAction::Accept,
                content: Some(r#"{"city":"Pune","street":"1 Main"}"#.into()),
            },
        )]
    }

    fn line(v: Value) -> Input {
        Input::Line(v.to_string())
    }

    fn elicitation_create(id: u64) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": {
            "message": "Where?", "requestedSchema": {"type": "object", "properties": {"city": {"type": "string"}}},
            "_meta": {"m3/request_key": "shipping_address"}}})
    }

    fn start_legacy(s: &mut ScriptedSession) -> u64 {
        let actions = s.handle(Input::Start);
        assert_eq!(sent(&actions)[0]["method"], "server/discover");
        assert!(actions.contains(&Action::StartProbeTimer));
        let actions = s.handle(line(
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "nope"}}),
        ));
        assert_eq!(sent(&actions)[0]["method"], "initialize");
        assert_eq!(s.era(), Era::Legacy);
        let actions = s.handle(line(
            json!({"jsonrpc": "2.0", "id": 2, "result": {"protocolVersion": "2025-11-25"}}),
        ));
        let lines = sent(&actions);
        assert_eq!(lines[0]["method"], "notifications/initialized");
        assert_eq!(lines[1]["method"], "tools/call");
        lines[1]["id"].as_u64().unwrap()
    }

    #[test]
    fn legacy_round_is_opened_delivered_once_and_resolved_by_the_tool_result() {
        let mut s = session(EraChoice::Auto, Mode::Managed);
        let call = start_legacy(&mut s);
        // The server's request id collides with ours (1): it is still a request.
        let actions = s.handle(line(elicitation_create(1)));
        let Action::OpenRound {
            requests,
            round_index,
            operation,
            ..
        } = &actions[0]
        else {
            panic!("{actions:?}")
        };
        assert_eq!(
            (
                requests[0].0.as_str(),
                *round_index,
                operation.name.as_str()
            ),
            ("shipping_address", 0, "book_shipment")
        );
        let actions = s.handle(Input::Answer(accept()));
        assert_eq!(
            actions,
            vec![Action::Deliver(
                json!({"jsonrpc": "2.0", "id": 1, "result": {
            "action": "accept", "content": {"city": "Pune", "street": "1 Main"}}})
            )]
        );
        assert!(
            s.handle(Input::Answer(accept())).is_empty(),
            "delivered at most once"
        );
        let result = json!({"content": [{"type": "text", "text": "Booked"}]});
        let actions = s.handle(line(
            json!({"jsonrpc": "2.0", "id": call, "result": result}),
        ));
        assert_eq!(actions[0], Action::ResolveRound);
        assert!(matches!(&actions[1], Action::ToolResult { step: 0, .. }));
        assert_eq!(actions[2], Action::Finish(Finished::Succeeded));
        assert!(s.is_done());
    }

    #[test]
    fn probe_timeout_means_legacy() {
        let mut s = session(EraChoice::Auto, Mode::Managed);
        s.handle(Input::Start);
        let actions = s.handle(Input::ProbeTimedOut);
        assert_eq!(sent(&actions)[0]["method"], "initialize");
        assert_eq!(
            sent(&actions)[0]["params"]["capabilities"]["elicitation"],
            json!({"form": {}, "url": {}})
        );
        assert!(actions.contains(&Action::ArmTimer(STARTUP_TIMEOUT_MS)));
        // A server that never answers `initialize` is given up on, not waited for for ever.
        let actions = s.handle(Input::ProbeTimedOut);
        assert!(matches!(
            actions.last(),
            Some(Action::Finish(Finished::Failed {
                code: Some(FailureCode::ServerError),
                message,
            })) if message.contains("initialize")
        ));
    }

    /// Forced modern: no handshake, so the first operation is the start-up, bounded as
    /// `initialize` is.
    #[test]
    fn a_silent_server_in_the_forced_modern_era_fails_at_the_start_up_timeout() {
        let mut s = session(EraChoice::Modern, Mode::Managed);
        let actions = s.handle(Input::Start);
        let call = &sent(&actions)[0];
        assert_eq!(call["method"], "tools/call");
        assert!(
            actions.contains(&Action::ArmTimer(STARTUP_TIMEOUT_MS)),
            "{actions:?}"
        );
        // A notification is not an answer: the server has still not started.
        assert!(
            s.handle(line(
                json!({"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": "info", "data": "starting"}})
            ))
            .is_empty()
        );
        let actions = s.handle(Input::ProbeTimedOut);
        assert!(
            matches!(
                actions.last(),
                Some(Action::Finish(Finished::Failed {
                    code: Some(FailureCode::ServerError),
                    message,
                })) if message.contains("first request (`tools/call`)")
                    && message.contains("30 s of starting")
            ),
            "{actions:?}"
        );
        // The call is abandoned on the server's side too.
        assert_eq!(sent(&actions)[0]["method"], "notifications/cancelled");
        assert_eq!(sent(&actions)[0]["params"]["requestId"], call["id"]);
        assert!(s.is_done());
    }

    #[test]
    fn a_forced_modern_server_that_answers_in_time_is_not_failed_by_the_start_up_timer() {
        let mut s = session(EraChoice::Modern, Mode::Managed);
        let call_id = sent(&s.handle(Input::Start))[0]["id"].clone();
        let actions = s.handle(line(json!({"jsonrpc": "2.0", "id": call_id,
            "result": {"resultType": "complete", "content": []}})));
        assert!(matches!(&actions[0], Action::ToolResult { step: 0, .. }));
        assert_eq!(actions.last(), Some(&Action::Finish(Finished::Succeeded)));
        // A second step after the first answer: no start-up timer, and a late one changes nothing.
        let mut s = ScriptedSession::new(SessionConfig {
            steps: vec![
                Step::tool("book_shipment", json!({})),
                Step::tool("book_shipment", json!({})),
            ],
            ..session(EraChoice::Modern, Mode::Managed).config
        });
        let call_id = sent(&s.handle(Input::Start))[0]["id"].clone();
        let actions = s.handle(line(json!({"jsonrpc": "2.0", "id": call_id,
            "result": {"content": []}})));
        assert_eq!(sent(&actions)[0]["method"], "tools/call");
        assert!(!actions.iter().any(|a| matches!(a, Action::ArmTimer(_))));
        assert!(s.handle(Input::ProbeTimedOut).is_empty());
        assert!(!s.is_done());
        // A server that speaks first (a request of its own) has started too.
        let mut s = session(EraChoice::Modern, Mode::Managed);
        s.handle(Input::Start);
        let actions = s.handle(line(json!({"jsonrpc": "2.0", "id": 99, "method": "ping"})));
        assert_eq!(sent(&actions)[0]["result"], json!({}));
        assert!(s.handle(Input::ProbeTimedOut).is_empty());
        assert!(!s.is_done());
        // A probe's answer is an answer: after it, the modern era arms no start-up timer.
        let mut s = session(EraChoice::Auto, Mode::Managed);
        s.handle(Input::Start);
        let actions = s.handle(line(
            json!({"jsonrpc": "2.0", "id": 1, "result": {"supportedVersions": ["2026-07-28"]}}),
        ));
        assert_eq!(sent(&actions)[0]["method"], "tools/call");
        assert!(!actions.iter().any(|a| matches!(a, Action::ArmTimer(_))));
    }

    /// The start-up timer stops at the server's first reply, so a round waiting for a human
    /// (however long, wherever the worker's timer stands) is never failed by it.
    #[test]
    fn a_forced_modern_round_waiting_for_its_answer_is_not_failed_by_the_start_up_timer() {
        let mut s = session(EraChoice::Modern, Mode::Managed);
        let call_id = sent(&s.handle(Input::Start))[0]["id"].clone();
        let input_required = json!({"jsonrpc": "2.0", "id": call_id, "result": {
            "resultType": "input_required", "requestState": "sealed-1",
            "inputRequests": {"shipping_address": {"method": "elicitation/create", "params": {
                "mode": "form", "message": "Where?",
                "requestedSchema": {"type": "object", "properties": {}}}}}}});
        let actions = s.handle(line(input_required));
        assert!(
            matches!(&actions[0], Action::OpenRound { .. }),
            "{actions:?}"
        );
        assert!(
            s.handle(Input::ProbeTimedOut).is_empty(),
            "the round waits on"
        );
        let actions = s.handle(Input::Answer(accept()));
        let Action::Deliver(retry) = &actions[0] else {
            panic!("{actions:?}")
        };
        assert!(
            s.handle(Input::ProbeTimedOut).is_empty(),
            "nor after delivery"
        );
        let done = json!({"jsonrpc": "2.0", "id": retry["id"], "result": {"content": []}});
        let actions = s.handle(line(done));
        assert_eq!(actions[0], Action::ResolveRound);
        assert_eq!(actions.last(), Some(&Action::Finish(Finished::Succeeded)));
    }

    #[test]
    fn a_server_stopped_for_a_fault_fails_the_open_round_saying_why() {
        let mut s = session(EraChoice::Auto, Mode::Managed);
        start_legacy(&mut s);
        s.handle(line(elicitation_create(0)));
        let actions = s.handle(Input::ServerFault("it wrote more than 256 MiB".into()));
        assert!(matches!(
            &actions[0],
            Action::FailRound { code: FailureCode::ServerError, message } if message.contains("256 MiB")
        ));
        assert!(matches!(
            actions.last(),
            Some(Action::Finish(Finished::Failed { message, .. })) if message.contains("256 MiB")
        ));
    }

    #[test]
    fn modern_round_retries_the_same_call_with_a_new_id_and_the_state_verbatim() {
        let mut s = session(EraChoice::Auto, Mode::Managed);
        s.handle(Input::Start);
        let actions = s.handle(line(
            json!({"jsonrpc": "2.0", "id": 1, "result": {"supportedVersions": ["2026-07-28"]}}),
        ));
        let call = &sent(&actions)[0];
        assert_eq!(
            call["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        let call_id = call["id"].clone();
        let input_required = json!({"jsonrpc": "2.0", "id": call_id, "result": {"resultType": "input_required",
            "inputRequests": {"shipping_address": {"method": "elicitation/create", "params": {"mode": "form", "message": "Where?",
                "requestedSchema": {"type": "object", "properties": {}}}}}, "requestState": "sealed-1"}});
        let actions = s.handle(line(input_required));
        assert!(
            matches!(&actions[0], Action::OpenRound { request_state: Some(state), round_index: 0, .. } if state == "sealed-1")
        );
        let actions = s.handle(Input::Answer(accept()));
        let Action::Deliver(retry) = &actions[0] else {
            panic!()
        };
        assert_ne!(retry["id"], call_id, "a new JSON-RPC id");
        assert_eq!(
            retry["params"]["arguments"],
            json!({"item": "book"}),
            "the same arguments"
        );
        assert_eq!(retry["params"]["requestState"], "sealed-1");
        assert_eq!(
            retry["params"]["inputResponses"]["shipping_address"]["action"],
            "accept"
        );
        let done = json!({"jsonrpc": "2.0", "id": retry["id"], "result": {"resultType": "complete", "content": []}});
        let actions = s.handle(line(done));
        assert_eq!(actions[0], Action::ResolveRound);
        assert_eq!(actions.last(), Some(&Action::Finish(Finished::Succeeded)));
    }

    #[test]
    fn modern_rounds_are_capped_and_bad_state_fails_the_round() {
        let mut s = session(EraChoice::Modern, Mode::Managed);
        let call_id = sent(&s.handle(Input::Start))[0]["id"].clone();
        let ask = |id: &Value, state: &str| {
            line(
                json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "input_required", "requestState": state,
                "inputRequests": {"k": {"method": "elicitation/create", "params": {"message": "?", "requestedSchema": {"type": "object"}}}}}}),
            )
        };
        let mut id = call_id;
        for round in 0..3u32 {
            let actions = s.handle(ask(&id, &format!("s{round}")));
            let opened = actions.iter().find_map(|a| {
                if let Action::OpenRound { round_index, .. } = a {
                    Some(*round_index)
                } else {
                    None
                }
            });
            assert_eq!(opened, Some(round));
            let Action::Deliver(retry) = &s.handle(Input::Answer(vec![(
                "k".into(),
                ElicitationResponse {
                    action: ElicitationAction::Decline,
                    content: None,
                },
            )]))[0] else {
                panic!()
            };
            id = retry["id"].clone();
        }
        let actions = s.handle(ask(&id, "s3"));
        assert!(
            matches!(
                actions[0],
                Action::FailRound {
                    code: FailureCode::RoundLimitExceeded,
                    ..
                }
            ),
            "{actions:?}"
        );
        assert!(matches!(
            actions[1],
            Action::Finish(Finished::Failed {
                code: Some(FailureCode::RoundLimitExceeded),
                ..
            })
        ));

        let mut s = session(EraChoice::Modern, Mode::Managed);
        let call_id = sent(&s.handle(Input::Start))[0]["id"].clone();
        s.handle(ask(&call_id, "s0"));
        let Action::Deliver(retry) = &s.handle(Input::Answer(vec![(
            "k".into(),
            ElicitationResponse {
                action: ElicitationAction::Cancel,
                content: None,
            },
        )]))[0] else {
            panic!()
        };
        let rejected = json!({"jsonrpc": "2.0", "id": retry["id"], "error": {"code": -32602, "message": "Invalid or expired requestState"}});
        let actions = s.handle(line(rejected));
        assert!(matches!(
            actions[0],
            Action::FailRound {
                code: FailureCode::InvalidRequestState,
                ..
            }
        ));
    }

    #[test]
    fn fail_mode_answers_cancel_fails_the_round_and_the_execution() {
        let mut s = session(EraChoice::Legacy, Mode::Fail);
        let call = sent(&s.handle(Input::Start))[0].clone();
        assert_eq!(call["method"], "initialize");
        let actions = s.handle(line(json!({"jsonrpc": "2.0", "id": 1, "result": {}})));
        let call_id = sent(&actions)[1]["id"].clone();
        let actions = s.handle(line(elicitation_create(0)));
        assert!(matches!(actions[0], Action::OpenRound { .. }));
        assert_eq!(
            actions[1],
            Action::Deliver(json!({"jsonrpc": "2.0", "id": 0, "result": {"action": "cancel"}}))
        );
        assert!(matches!(
            actions[2],
            Action::FailRound {
                code: FailureCode::ElicitationUnhandled,
                ..
            }
        ));
        // Whatever the server then returns, the execution fails.
        let actions = s.handle(line(
            json!({"jsonrpc": "2.0", "id": call_id, "result": {"content": []}}),
        ));
        assert!(!actions.contains(&Action::ResolveRound));
        assert!(matches!(
            actions.last(),
            Some(Action::Finish(Finished::Failed {
                code: Some(FailureCode::ElicitationUnhandled),
                ..
            }))
        ));
    }

    #[test]
    fn cancel_and_deadline_answer_the_pending_request_with_cancel_and_cancel_the_call() {
        for (input, code) in [
            (Input::Cancel, FailureCode::Cancelled),
            (Input::DeadlineExpired, FailureCode::DeadlineExceeded),
        ] {
            let mut s = session(EraChoice::Auto, Mode::Managed);
            let call = start_legacy(&mut s);
            s.handle(line(elicitation_create(7)));
            let actions = s.handle(input);
            assert_eq!(
                sent(&actions)[0],
                json!({"jsonrpc": "2.0", "id": 7, "result": {"action": "cancel"}})
            );
            assert!(
                actions.contains(&Action::FailRound {
                    code,
                    message: actions
                        .iter()
                        .find_map(|a| if let Action::FailRound { message, .. } = a {
                            Some(message.clone())
                        } else {
                            None
                        })
                        .unwrap()
                })
            );
            let cancelled = sent(&actions)
                .into_iter()
                .find(|m| m["method"] == "notifications/cancelled")
                .unwrap();
            assert_eq!(cancelled["params"]["requestId"], json!(call));
            assert!(s.is_done());
        }
    }

    #[test]
    fn a_legacy_server_that_asks_again_resolves_the_previous_round_until_the_limit() {
        let mut s = session(EraChoice::Legacy, Mode::Managed);
        s.handle(Input::Start);
        s.handle(line(json!({"jsonrpc": "2.0", "id": 1, "result": {}})));
        for round in 0..3u32 {
            let actions = s.handle(line(elicitation_create(u64::from(round))));
            if round > 0 {
                assert_eq!(actions[0], Action::ResolveRound);
            }
            assert!(actions.iter().any(
                |a| matches!(a, Action::OpenRound { round_index, .. } if *round_index == round)
            ));
            s.handle(Input::Answer(accept()));
        }
        let actions = s.handle(line(elicitation_create(3)));
        assert!(matches!(
            actions[0],
            Action::FailRound {
                code: FailureCode::RoundLimitExceeded,
                ..
            }
        ));
        assert_eq!(
            sent(&actions)[0],
            json!({"jsonrpc": "2.0", "id": 3, "result": {"action": "cancel"}})
        );
        assert!(s.is_done());
    }

    #[test]
    fn a_url_required_error_opens_a_consent_round_whose_delivery_retries_the_call() {
        let mut s = session(EraChoice::Legacy, Mode::Managed);
        s.handle(Input::Start);
        let call_id =
            sent(&s.handle(line(json!({"jsonrpc": "2.0", "id": 1, "result": {}}))))[1]["id"]
                .clone();
        let error = json!({"jsonrpc": "2.0", "id": call_id, "error": {"code": -32042, "message": "auth",
            "data": {"elicitations": [{"mode": "url", "message": "Sign in", "url": "https://a.example", "elicitationId": "e"}]}}});
        let actions = s.handle(line(error));
        assert!(
            matches!(&actions[0], Action::OpenRound { requests, .. } if requests[0].0 == "url-0")
        );
        let consent = vec![(
            "url-0".to_string(),
            ElicitationResponse {
                action: ElicitationAction::Accept,
                content: None,
            },
        )];
        let Action::Deliver(retry) = &s.handle(Input::Answer(consent))[0] else {
            panic!()
        };
        assert_eq!(retry["method"], "tools/call");
        assert_ne!(retry["id"], call_id);
    }

    #[test]
    fn the_server_exiting_fails_the_open_round() {
        let mut s = session(EraChoice::Auto, Mode::Managed);
        start_legacy(&mut s);
        s.handle(line(elicitation_create(0)));
        let actions = s.handle(Input::ServerExited("exited with code 3".into()));
        assert!(matches!(
            actions[0],
            Action::FailRound {
                code: FailureCode::ServerError,
                ..
            }
        ));
        assert!(matches!(
            &actions[1],
            Action::Finish(Finished::Failed { message, .. }) if message == "the server exited with code 3"
        ));
        assert!(s.handle(Input::ServerExited("exited".into())).is_empty());
    }

    fn fail_codes(actions: &[Action]) -> Vec<FailureCode> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::FailRound { code, .. } => Some(*code),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_cancelled_request_withdraws_its_round_and_its_answer_is_never_delivered() {
        let mut s = session(EraChoice::Auto, Mode::Managed);
        let call = start_legacy(&mut s);
        s.handle(line(elicitation_create(0)));
        // A notification for another request changes nothing.
        let other = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 99}});
        assert!(s.handle(line(other)).is_empty());
        let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 0, "reason": "McpError: MCP error -32001: Request timed out"}});
        let actions = s.handle(line(cancelled));
        assert_eq!(fail_codes(&actions), vec![FailureCode::RequestWithdrawn]);
        let Action::FailRound { message, .. } = &actions[0] else {
            panic!("{actions:?}")
        };
        assert!(message.contains("Request timed out"), "{message}");
        assert!(
            s.handle(Input::Answer(accept())).is_empty(),
            "a withdrawn round's answer is never delivered"
        );
        // The call goes on and completes with the server's own result.
        let result = json!({"content": [{"type": "text", "text": "no answer"}]});
        let actions = s.handle(line(
            json!({"jsonrpc": "2.0", "id": call, "result": result}),
        ));
        assert!(!actions.contains(&Action::ResolveRound));
        assert!(fail_codes(&actions).is_empty(), "failed once only");
        assert!(matches!(&actions[0], Action::ToolResult { .. }));
        assert_eq!(actions.last(), Some(&Action::Finish(Finished::Succeeded)));
    }

    #[test]
    fn a_call_answered_while_its_round_is_open_withdraws_the_round() {
        // Completed without waiting.
        let mut s = session(EraChoice::Auto, Mode::Managed);
        let call = start_legacy(&mut s);
        s.handle(line(elicitation_create(4)));
        let actions = s.handle(line(
            json!({"jsonrpc": "2.0", "id": call, "result": {"content": []}}),
        ));
        assert_eq!(
            sent(&actions)[0],
            json!({"jsonrpc": "2.0", "id": 4, "result": {"action": "cancel"}}),
            "the server's request still waiting is answered cancel"
        );
        assert_eq!(fail_codes(&actions), vec![FailureCode::RequestWithdrawn]);
        assert_eq!(actions.last(), Some(&Action::Finish(Finished::Succeeded)));
        // Failed by the server while open.
        let mut s = session(EraChoice::Auto, Mode::Managed);
        let call = start_legacy(&mut s);
        s.handle(line(elicitation_create(4)));
        let error = json!({"jsonrpc": "2.0", "id": call, "error": {"code": -32001, "message": "timed out"}});
        let actions = s.handle(line(error));
        assert_eq!(fail_codes(&actions), vec![FailureCode::RequestWithdrawn]);
        assert!(matches!(
            actions.last(),
            Some(Action::Finish(Finished::Failed { code: None, .. }))
        ));
    }

    #[test]
    fn a_server_that_asks_again_after_withdrawing_opens_the_next_round_up_to_the_limit() {
        let mut s = session(EraChoice::Legacy, Mode::Managed);
        s.handle(Input::Start);
        s.handle(line(json!({"jsonrpc": "2.0", "id": 1, "result": {}})));
        for round in 0..3u64 {
            let actions = s.handle(line(elicitation_create(round)));
            assert!(
                actions.iter().any(|a| matches!(a,
                    Action::OpenRound { round_index, .. } if u64::from(*round_index) == round)),
                "{actions:?}"
            );
            assert!(!actions.contains(&Action::ResolveRound));
            let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": round}});
            assert_eq!(
                fail_codes(&s.handle(line(cancelled))),
                vec![FailureCode::RequestWithdrawn]
            );
        }
        let actions = s.handle(line(elicitation_create(3)));
        assert!(
            fail_codes(&actions).is_empty(),
            "the withdrawn round ended already"
        );
        assert!(matches!(
            actions.last(),
            Some(Action::Finish(Finished::Failed {
                code: Some(FailureCode::RoundLimitExceeded),
                ..
            }))
        ));
    }

    #[test]
    fn prompts_and_resources_are_operations_with_their_own_rounds_in_both_eras() {
        for era in [EraChoice::Legacy, EraChoice::Modern] {
            let mut s = ScriptedSession::new(SessionConfig {
                era,
                steps: vec![
                    Step {
                        kind: OperationKind::Prompt,
                        name: "shipping_label".into(),
                        arguments: json!({"item": "book"}),
                    },
                    Step {
                        kind: OperationKind::Resource,
                        name: "shipping://quote".into(),
                        arguments: json!({}),
                    },
                ],
                round_limit: 3,
                mode: Mode::Managed,
            });
            let mut actions = s.handle(Input::Start);
            if era == EraChoice::Legacy {
                actions = s.handle(line(json!({"jsonrpc": "2.0", "id": 1, "result": {}})));
            }
            for (method, kind, params) in [
                (
                    "prompts/get",
                    OperationKind::Prompt,
                    json!({"name": "shipping_label", "arguments": {"item": "book"}}),
                ),
                (
                    "resources/read",
                    OperationKind::Resource,
                    json!({"uri": "shipping://quote"}),
                ),
            ] {
                let request = sent(&actions)
                    .into_iter()
                    .find(|m| {
                        m.get("method").is_some() && m["method"] != "notifications/initialized"
                    })
                    .unwrap();
                assert_eq!(request["method"], method);
                for (k, v) in params.as_object().unwrap() {
                    assert_eq!(&request["params"][k], v);
                }
                let id = request["id"].clone();
                let opened = if era == EraChoice::Legacy {
                    s.handle(line(elicitation_create(7)))
                } else {
                    s.handle(line(json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "input_required",
                        "inputRequests": {"shipping_address": {"method": "elicitation/create", "params": {
                            "message": "Where?", "requestedSchema": {"type": "object"}}}}, "requestState": "s"}})))
                };
                let Action::OpenRound { operation, .. } = &opened[0] else {
                    panic!("{opened:?}")
                };
                assert_eq!(operation.kind, kind);
                let delivered = s.handle(Input::Answer(accept()));
                let reply_to = if era == EraChoice::Legacy {
                    id
                } else {
                    let Action::Deliver(retry) = &delivered[0] else {
                        panic!()
                    };
                    assert_eq!(retry["method"], method, "the retry repeats the method");
                    retry["id"].clone()
                };
                actions = s.handle(line(
                    json!({"jsonrpc": "2.0", "id": reply_to, "result": {"messages": []}}),
                ));
                assert_eq!(actions[0], Action::ResolveRound);
                assert!(matches!(&actions[1], Action::ToolResult { kind: k, .. } if *k == kind));
            }
            assert_eq!(actions.last(), Some(&Action::Finish(Finished::Succeeded)));
        }
    }
}

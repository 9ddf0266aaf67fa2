//! The legacy era (2025-06-18 / 2025-11-25): `initialize`, then server-initiated
//! `elicitation/create` requests while a `tools/call` is in flight.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::label_and_quote::{self, Operation};
use crate::rpc::{self, INTERNAL_ERROR, INVALID_PARAMS, RpcError, field};
use crate::shipping::{self, Answer, BOOK_SHIPMENT, Knobs, Next, REPORT_ENV};

/// The protocol versions this era speaks, oldest first.
pub const VERSIONS: [&str; 2] = ["2025-06-18", "2025-11-25"];
/// The version offered when the client asks for one we do not speak.
const PREFERRED_VERSION: &str = "2025-11-25";

/// One connection in the legacy era.
pub struct Legacy {
    /// The test knobs.
    knobs: Knobs,
    /// Whether the client declared form elicitation in `initialize`.
    client_elicits: bool,
    /// The next id of our own requests (a separate id space, from 0).
    next_id: u64,
    /// In-flight `book_shipment` calls, by the id of the `elicitation/create` they wait on.
    pending: HashMap<u64, PendingCall>,
}

/// A `book_shipment` call (or the prompt or resource) waiting for an elicitation answer.
struct PendingCall {
    /// The client's id of the `tools/call`, `prompts/get` or `resources/read`.
    call_id: Value,
    /// The prompt or resource asked for (`None`: `book_shipment`).
    operation: Option<Operation>,
    /// The current round (1-based).
    round: u32,
    /// The answers of this round so far, in asking order.
    answers: Vec<(&'static str, Answer)>,
}

impl Legacy {
    /// A fresh connection.
    pub fn new(knobs: Knobs) -> Self {
        Self {
            knobs,
            client_elicits: false,
            next_id: 0,
            pending: HashMap::new(),
        }
    }

    /// Handles a request; returns the messages to send (possibly none while a call waits).
    pub fn on_request(&mut self, id: Value, method: &str, params: &Value) -> Vec<Value> {
        match method {
            "initialize" => vec![rpc::result(id, self.initialize(params))],
            "ping" => vec![rpc::result(id, json!({}))],
            "tools/list" => vec![rpc::result(id, self.knobs.tools_list())],
            "tools/call" => self.tools_call(id, params),
            "prompts/list" => vec![rpc::result(id, label_and_quote::prompts_list())],
            "resources/list" => vec![rpc::result(id, label_and_quote::resources_list())],
            "prompts/get" => self.operation(id, Operation::prompt(params)),
            "resources/read" => self.operation(id, Operation::resource(params)),
            _ => vec![rpc::error(id, &RpcError::method_not_found(method))],
        }
    }

    /// Handles a notification (never answered).
    pub fn on_notification(&mut self, method: &str, params: &Value) {
        if method == "notifications/cancelled" {
            let request_id = field(params, "requestId");
            let before = self.pending.len();
            self.pending.retain(|_, call| &call.call_id != request_id);
            if self.pending.len() != before {
                eprintln!(
                    "shipping-server: call {request_id} cancelled; its elicitation is abandoned"
                );
            }
        }
    }

    /// Handles the client's answer to one of our requests; returns the messages to send.
    pub fn on_response(&mut self, id: &Value, outcome: Result<Value, Value>) -> Vec<Value> {
        let Some(mut call) = id.as_u64().and_then(|id| self.pending.remove(&id)) else {
            eprintln!("shipping-server: ignoring an answer to unknown request {id}");
            return Vec::new();
        };
        let answer = match outcome {
            Ok(result) => Answer::parse(&result),
            Err(error) => Err(format!(
                "elicitation failed: {}",
                error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("error")
            )),
        };
        if let Some(operation) = &call.operation {
            return vec![match answer {
                Ok(answer) => rpc::result(call.call_id, operation.result(&answer)),
                Err(why) => rpc::error(call.call_id, &RpcError::new(INTERNAL_ERROR, why)),
            }];
        }
        let answer = match answer {
            Ok(answer) => answer,
            Err(why) => {
                let result = shipping::tool_error(&format!("Shipment not booked: {why}"));
                return vec![rpc::result(call.call_id, result)];
            }
        };
        let keys = self.knobs.keys_for_round(call.round);
        let stop_early = !matches!(answer, Answer::Accept(_));
        call.answers.push((keys[call.answers.len()], answer));
        if !stop_early && call.answers.len() < keys.len() {
            return vec![self.ask(call)];
        }
        match self.knobs.after_round(call.round, &call.answers) {
            Next::AskAgain(round) => {
                call.round = round;
                call.answers.clear();
                vec![self.ask(call)]
            }
            Next::Finish(result) => vec![rpc::result(call.call_id, result)],
            Next::Fail(error) => vec![rpc::error(call.call_id, &error)],
        }
    }

    /// The `initialize` result; remembers whether the client can answer form elicitations.
    fn initialize(&mut self, params: &Value) -> Value {
        self.client_elicits = shipping::supports_form(field(params, "capabilities"));
        let asked = field(params, "protocolVersion").as_str().unwrap_or("");
        let version = VERSIONS
            .iter()
            .find(|v| **v == asked)
            .copied()
            .unwrap_or(PREFERRED_VERSION);
        json!({
            "protocolVersion": version,
            "capabilities": {"tools": {}, "prompts": {}, "resources": {}},
            "serverInfo": crate::server_info()
        })
    }

    /// `tools/call`: starts a booking (first elicitation) or answers at once.
    fn tools_call(&mut self, id: Value, params: &Value) -> Vec<Value> {
        let name = field(params, "name").as_str().unwrap_or("");
        if !self.knobs.has_tool(name) {
            let error = RpcError::new(INVALID_PARAMS, format!("Unknown tool: {name}"));
            return vec![rpc::error(id, &error)];
        }
        if name == REPORT_ENV {
            return vec![rpc::result(id, shipping::report_env())];
        }
        debug_assert_eq!(name, BOOK_SHIPMENT);
        if !self.client_elicits {
            let result = shipping::tool_error("elicitation not supported by the client");
            return vec![rpc::result(id, result)];
        }
        let call = PendingCall {
            call_id: id.clone(),
            operation: None,
            round: 1,
            answers: Vec::new(),
        };
        let ask = self.ask(call);
        if !self.knobs.withdraw {
            return vec![ask];
        }
        // `--withdraw`: give up on the question at once, as a client-side timeout would.
        let request_id = ask["id"].clone();
        if let Some(asked) = request_id.as_u64() {
            self.pending.remove(&asked);
        }
        let withdrawn = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "the server stopped waiting (--withdraw)"}
        });
        let result = shipping::tool_error("Shipment not booked: no answer");
        vec![ask, withdrawn, rpc::result(id, result)]
    }

    /// `prompts/get` or `resources/read`: asks for the address, answers when it comes.
    fn operation(&mut self, id: Value, operation: Result<Operation, RpcError>) -> Vec<Value> {
        let operation = match operation {
            Ok(operation) => operation,
            Err(error) => return vec![rpc::error(id, &error)],
        };
        if !self.client_elicits {
            let error = RpcError::new(INVALID_PARAMS, "elicitation not supported by the client");
            return vec![rpc::error(id, &error)];
        }
        let call = PendingCall {
            call_id: id,
            operation: Some(operation),
            round: 1,
            answers: Vec::new(),
        };
        vec![self.ask(call)]
    }

    /// Sends the next question of `call`'s round and parks the call under its request id.
    fn ask(&mut self, call: PendingCall) -> Value {
        let key = match call.operation {
            Some(_) => shipping::SHIPPING_ADDRESS,
            None => self.knobs.keys_for_round(call.round)[call.answers.len()],
        };
        let mut params = self.knobs.elicitation_params(key);
        params["_meta"] = json!({ "m3/request_key": key });
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, call);
        rpc::request(id, "elicitation/create", params)
    }
}

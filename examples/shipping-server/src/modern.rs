//! The modern era (2026-07-28): `server/discover`, per-request `_meta`, and multi round-trip
//! requests (SEP-2322): `input_required` results with a sealed `requestState`, answered by a
//! retry that carries `inputResponses`.

use std::time::SystemTime;

use serde_json::{Map, Value, json};

use crate::label_and_quote::{self, Operation};
use crate::rpc::{INVALID_PARAMS, MISSING_CAPABILITY, RpcError, UNSUPPORTED_VERSION, field};
use crate::seal::{OpenError, Sealer};
use crate::shipping::{self, Answer, BOOK_SHIPMENT, Knobs, Next, REPORT_ENV};

/// The one protocol version of this era.
pub const VERSION: &str = "2026-07-28";
/// The `_meta` key of the request's protocol version.
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of the client's capabilities.
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The message of every rejected `requestState`.
const BAD_STATE: &str = "Invalid or expired requestState";

/// The modern-era request handler (stateless between requests: all state travels sealed).
pub struct Modern {
    /// The test knobs.
    knobs: Knobs,
    /// Seals and opens `requestState`.
    sealer: Sealer,
}

impl Modern {
    /// A handler with its own random sealing key.
    pub fn new(knobs: Knobs, sealer: Sealer) -> Self {
        Self { knobs, sealer }
    }

    /// Answers one request (every modern request gets exactly one answer).
    pub fn on_request(&self, method: &str, params: &Value) -> Result<Value, RpcError> {
        if !matches!(
            method,
            "server/discover"
                | "ping"
                | "tools/list"
                | "tools/call"
                | "prompts/list"
                | "prompts/get"
                | "resources/list"
                | "resources/read"
        ) {
            // Unknown whatever the version (this includes the legacy `initialize`).
            return Err(RpcError::method_not_found(method));
        }
        let meta = field(params, "_meta");
        let version = field(meta, META_VERSION);
        if method == "server/discover" {
            // Discovery is how a client learns our versions: the version is optional here, but
            // a wrong one is still refused.
            if !version.is_null() {
                check_version(version)?;
            }
            return Ok(json!({
                "supportedVersions": [VERSION],
                "capabilities": {"tools": {}, "prompts": {}, "resources": {}},
                "serverInfo": crate::server_info()
            }));
        }
        check_version(version)?;
        match method {
            "ping" => Ok(json!({})),
            "tools/list" => Ok(self.knobs.tools_list()),
            "tools/call" => self.tools_call(params, field(meta, META_CAPABILITIES)),
            "prompts/list" => Ok(label_and_quote::prompts_list()),
            "resources/list" => Ok(label_and_quote::resources_list()),
            "prompts/get" => self.operation(
                Operation::prompt(params)?,
                params,
                field(meta, META_CAPABILITIES),
            ),
            "resources/read" => self.operation(
                Operation::resource(params)?,
                params,
                field(meta, META_CAPABILITIES),
            ),
            _ => Err(RpcError::method_not_found(method)),
        }
    }

    /// `tools/call`: the first attempt, or a retry with answers.
    fn tools_call(&self, params: &Value, capabilities: &Value) -> Result<Value, RpcError> {
        let name = field(params, "name").as_str().unwrap_or("");
        if !self.knobs.has_tool(name) {
            return Err(RpcError::new(
                INVALID_PARAMS,
                format!("Unknown tool: {name}"),
            ));
        }
        if name == REPORT_ENV {
            return Ok(complete(shipping::report_env()));
        }
        debug_assert_eq!(name, BOOK_SHIPMENT);
        let arguments = match field(params, "arguments") {
            Value::Null => Value::Object(Map::new()),
            args @ Value::Object(_) => args.clone(),
            _ => return Err(RpcError::new(INVALID_PARAMS, "arguments must be an object")),
        };
        if !shipping::supports_form(capabilities) {
            return Err(RpcError::new(
                MISSING_CAPABILITY,
                "book_shipment needs the elicitation (form) client capability",
            )
            .with_data(json!({"requiredCapabilities": {"elicitation": {"form": {}}}})));
        }
        let now = SystemTime::now();
        let state = field(params, "requestState");
        let responses = field(params, "inputResponses");
        if state.is_null() && responses.is_null() {
            return Ok(self.input_required(name, &arguments, 1, now));
        }
        let round = self.open_state(state, name, &arguments, now)?;
        let Value::Object(responses) = responses else {
            return Err(RpcError::new(
                INVALID_PARAMS,
                "inputResponses must be an object",
            ));
        };
        let mut answers = Vec::new();
        for key in self.knobs.keys_for_round(round) {
            let response = responses.get(*key).ok_or_else(|| {
                RpcError::new(INVALID_PARAMS, format!("Missing input response for {key}"))
            })?;
            let answer = Answer::parse(response).map_err(|why| {
                RpcError::new(
                    INVALID_PARAMS,
                    format!("Invalid input response for {key}: {why}"),
                )
            })?;
            answers.push((*key, answer));
        }
        match self.knobs.after_round(round, &answers) {
            Next::AskAgain(next) => Ok(self.input_required(name, &arguments, next, now)),
            Next::Finish(result) => Ok(complete(result)),
            Next::Fail(error) => Err(error),
        }
    }

    /// Opens a retry's `requestState` for `name` with `arguments`: the round it was sealed for,
    /// or -32602 "Invalid or expired requestState".
    fn open_state(
        &self,
        state: &Value,
        name: &str,
        arguments: &Value,
        now: SystemTime,
    ) -> Result<u32, RpcError> {
        state
            .as_str()
            .ok_or(OpenError::Invalid)
            .and_then(|state| self.sealer.open(state, name, arguments, now))
            .map_err(|why| {
                eprintln!("shipping-server: requestState rejected ({why:?})");
                RpcError::new(INVALID_PARAMS, BAD_STATE)
            })
    }

    /// `prompts/get` or `resources/read`: one `input_required` round for the address, then the
    /// result.
    fn operation(
        &self,
        operation: Operation,
        params: &Value,
        capabilities: &Value,
    ) -> Result<Value, RpcError> {
        if !shipping::supports_form(capabilities) {
            return Err(RpcError::new(
                MISSING_CAPABILITY,
                "this operation needs the elicitation (form) client capability",
            )
            .with_data(json!({"requiredCapabilities": {"elicitation": {"form": {}}}})));
        }
        let arguments = match &operation {
            Operation::Label { item } => json!({"item": item}),
            Operation::Quote => json!({"uri": label_and_quote::QUOTE_URI}),
        };
        let name = operation.seal_name();
        let now = SystemTime::now();
        let state = field(params, "requestState");
        let responses = field(params, "inputResponses");
        if state.is_null() && responses.is_null() {
            let key = shipping::SHIPPING_ADDRESS;
            return Ok(json!({
                "resultType": "input_required",
                "inputRequests": {key: {
                    "method": "elicitation/create",
                    "params": self.knobs.elicitation_params(key)
                }},
                "requestState": self.sealer.seal(name, &arguments, 1, now)
            }));
        }
        self.open_state(state, name, &arguments, now)?;
        let response = field(responses, shipping::SHIPPING_ADDRESS);
        let answer = Answer::parse(response).map_err(|why| {
            RpcError::new(
                INVALID_PARAMS,
                format!("Invalid input response for shipping_address: {why}"),
            )
        })?;
        Ok(complete(operation.result(&answer)))
    }

    /// The `input_required` result asking `round`'s questions.
    fn input_required(&self, tool: &str, arguments: &Value, round: u32, now: SystemTime) -> Value {
        let requests: Map<String, Value> = self
            .knobs
            .keys_for_round(round)
            .iter()
            .map(|key| {
                let request = json!({
                    "method": "elicitation/create",
                    "params": self.knobs.elicitation_params(key)
                });
                ((*key).to_string(), request)
            })
            .collect();
        json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": self.sealer.seal(tool, arguments, round, now)
        })
    }
}

/// Refuses a missing or unsupported protocol version with -32022.
fn check_version(version: &Value) -> Result<(), RpcError> {
    if version.as_str() == Some(VERSION) {
        return Ok(());
    }
    let message = if version.is_null() {
        "Missing protocol version (params._meta[\"io.modelcontextprotocol/protocolVersion\"])"
    } else {
        "Unsupported protocol version"
    };
    Err(RpcError::new(UNSUPPORTED_VERSION, message)
        .with_data(json!({"supported": [VERSION], "requested": version})))
}

/// Marks a tool result as complete.
fn complete(mut result: Value) -> Value {
    result["resultType"] = json!("complete");
    result
}

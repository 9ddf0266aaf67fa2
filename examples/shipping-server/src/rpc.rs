//! JSON-RPC 2.0 framing helpers: classifying incoming messages and building outgoing ones.

use serde_json::{Map, Value, json};

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The message is not a valid JSON-RPC request, notification or response.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist (or is not available in this era).
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters (also: an invalid or expired `requestState`).
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error (used by `--fail-after-answer`).
pub const INTERNAL_ERROR: i64 = -32603;
/// 2026-07-28: the client lacks a capability the request needs.
pub const MISSING_CAPABILITY: i64 = -32021;
/// 2026-07-28: the request's protocol version is missing or unsupported.
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// One message read from the client, routed by kind (not by id: the id spaces collide).
#[derive(Debug)]
pub enum Incoming {
    /// A request to us: it has `method` and `id`.
    Request {
        /// The client's id, echoed verbatim in the answer.
        id: Value,
        /// The method name.
        method: String,
        /// The params (`Value::Null` when absent).
        params: Value,
    },
    /// A notification: `method` without `id`; never answered.
    Notification {
        /// The method name.
        method: String,
        /// The params (`Value::Null` when absent).
        params: Value,
    },
    /// An answer to one of our own requests: `result` or `error` with `id`.
    Response {
        /// The id of our request.
        id: Value,
        /// `Ok(result)` or `Err(error object)`.
        outcome: Result<Value, Value>,
    },
    /// Anything else; answered with -32600 (`id` is `Value::Null` when unknown).
    Invalid {
        /// The id, if the message had one.
        id: Value,
    },
}

/// Classifies one parsed message.
pub fn classify(message: Value) -> Incoming {
    let Value::Object(mut object) = message else {
        return Incoming::Invalid { id: Value::Null };
    };
    let id = object.remove("id");
    let params = object.remove("params").unwrap_or(Value::Null);
    match (object.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Incoming::Request { id, method, params },
        (Some(Value::String(method)), None) => Incoming::Notification { method, params },
        (Some(_), id) => Incoming::Invalid {
            id: id.unwrap_or(Value::Null),
        },
        (None, Some(id)) => {
            if let Some(error) = object.remove("error") {
                Incoming::Response {
                    id,
                    outcome: Err(error),
                }
            } else if let Some(result) = object.remove("result") {
                Incoming::Response {
                    id,
                    outcome: Ok(result),
                }
            } else {
                Incoming::Invalid { id }
            }
        }
        (None, None) => Incoming::Invalid { id: Value::Null },
    }
}

/// A JSON-RPC error to send back.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The error code.
    pub code: i64,
    /// The human-readable message.
    pub message: String,
    /// Optional structured data.
    pub data: Option<Value>,
}

impl RpcError {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// The same error with `data` attached.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// -32601 for `method`.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    /// The error object as JSON.
    fn to_json(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), json!(self.code));
        error.insert("message".into(), json!(self.message));
        if let Some(data) = &self.data {
            error.insert("data".into(), data.clone());
        }
        Value::Object(error)
    }
}

/// A successful response to request `id`.
pub fn result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response to request `id`.
pub fn error(id: Value, error: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()})
}

/// A response that is a result or an error.
pub fn respond(id: Value, outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(value) => result(id, value),
        Err(err) => error(id, &err),
    }
}

/// A request from us to the client.
pub fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// `params[key]` (`Value::Null` when `params` is not an object or has no such key).
pub fn field<'a>(params: &'a Value, key: &str) -> &'a Value {
    params.get(key).unwrap_or(&Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_routes_by_kind_not_by_id() {
        assert!(matches!(
            classify(json!({"jsonrpc":"2.0","id":0,"method":"ping"})),
            Incoming::Request { .. }
        ));
        assert!(matches!(
            classify(json!({"jsonrpc":"2.0","method":"notifications/initialized"})),
            Incoming::Notification { .. }
        ));
        assert!(matches!(
            classify(json!({"jsonrpc":"2.0","id":0,"result":{}})),
            Incoming::Response { outcome: Ok(_), .. }
        ));
        assert!(matches!(
            classify(json!({"jsonrpc":"2.0","id":0,"error":{"code":1,"message":"x"}})),
            Incoming::Response {
                outcome: Err(_),
                ..
            }
        ));
        assert!(matches!(classify(json!([1])), Incoming::Invalid { .. }));
        assert!(matches!(
            classify(json!({"id":3,"method":7})),
            Incoming::Invalid { id } if id == json!(3)
        ));
    }
}

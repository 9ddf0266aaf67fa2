//! Routing incoming JSON-RPC messages by kind. Servers' request ids share a space with ours
//! (a server may send id 1 while our `initialize` is id 1), so a message with `method` and `id`
//! is a request to us, one with `result` or `error` answers ours, whatever the id.

use serde_json::{Map, Value};

/// An incoming message.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request from the server (it expects an answer with this id).
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification from the server.
    Notification { method: String, params: Value },
    /// The answer to one of our requests.
    Response {
        id: Value,
        outcome: Result<Value, RpcError>,
    },
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The error code.
    pub code: i64,
    /// The message.
    pub message: String,
    /// Optional data.
    pub data: Option<Value>,
}

/// Why a line is not a JSON-RPC message we can route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAMessage(pub &'static str);

/// Classifies one line. Unknown fields are tolerated (parse tolerantly, validate strictly).
pub fn parse(line: &str) -> Result<Incoming, NotAMessage> {
    let value: Value = serde_json::from_str(line).map_err(|_| NotAMessage("not JSON"))?;
    super::schema_order::remember(line);
    let Value::Object(object) = value else {
        return Err(NotAMessage("not a JSON object"));
    };
    classify(object)
}

fn classify(mut object: Map<String, Value>) -> Result<Incoming, NotAMessage> {
    let id = object.remove("id").filter(|id| !id.is_null());
    let params = object.remove("params").unwrap_or(Value::Null);
    if let Some(method) = object.remove("method") {
        let Value::String(method) = method else {
            return Err(NotAMessage("method is not a string"));
        };
        return Ok(match id {
            Some(id) => Incoming::Request { id, method, params },
            None => Incoming::Notification { method, params },
        });
    }
    let id = id.ok_or(NotAMessage("a response without an id"))?;
    if let Some(error) = object.remove("error") {
        let code = error
            .get("code")
            .and_then(Value::as_i64)
            .ok_or(NotAMessage("error without a code"))?;
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let data = error.get("data").cloned();
        return Ok(Incoming::Response {
            id,
            outcome: Err(RpcError {
                code,
                message,
                data,
            }),
        });
    }
    match object.remove("result") {
        Some(result) => Ok(Incoming::Response {
            id,
            outcome: Ok(result),
        }),
        None => Err(NotAMessage(
            "neither a request, a notification nor a response",
        )),
    }
}

/// A request line.
pub fn request(id: u64, method: &str, params: Value) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A notification line.
pub fn notification(method: &str, params: Value) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// The answer to a server's request.
pub fn result(id: &Value, result: Value) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error answer to a server's request.
pub fn error(id: &Value, code: i64, message: &str) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_server_request_with_a_colliding_id_is_still_a_request() {
        let incoming = parse(
            r#"{"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{"message":"m"}}"#,
        )
        .unwrap();
        assert!(
            matches!(incoming, Incoming::Request { ref method, .. } if method == "elicitation/create")
        );
        let answer =
            parse(r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25"}}"#).unwrap();
        assert!(matches!(answer, Incoming::Response { outcome: Ok(_), .. }));
    }

    #[test]
    fn codex_style_messages_without_jsonrpc_are_accepted() {
        let incoming = parse(r#"{"method":"turn/started","params":{}}"#).unwrap();
        assert_eq!(
            incoming,
            Incoming::Notification {
                method: "turn/started".into(),
                params: json!({})
            }
        );
    }

    #[test]
    fn errors_keep_code_and_data() {
        let incoming = parse(
            r#"{"id":"a","error":{"code":-32022,"message":"bad","data":{"supported":["x"]}}}"#,
        )
        .unwrap();
        let Incoming::Response {
            outcome: Err(e), ..
        } = incoming
        else {
            panic!()
        };
        assert_eq!(
            (e.code, e.data),
            (-32022, Some(json!({"supported": ["x"]})))
        );
    }

    #[test]
    fn junk_is_refused() {
        for line in [
            "",
            "[]",
            "{}",
            r#"{"id":1}"#,
            r#"{"method":5}"#,
            r#"{"id":1,"error":{}}"#,
        ] {
            assert!(parse(line).is_err(), "{line}");
        }
    }
}

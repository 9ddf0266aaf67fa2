//! Multi round-trip requests (MCP 2026-07-28, SEP-2322). A `tools/call`, `prompts/get` or
//! `resources/read` may answer `input_required` with keyed `inputRequests` and an opaque
//! `requestState`; the client retries the same method with the same arguments, a new id,
//! `inputResponses` for exactly those keys and the `requestState` byte for byte (omitted when the
//! server sent none). A result without `resultType` is complete and is never retried.

use super::legacy::ELICITATION_METHOD;
use super::request::{UnusableRequest, from_params};
use crate::m3::managed_input::types::{ElicitationRequest, FailureCode};
use serde_json::{Map, Value};

/// What a call's result means.
#[derive(Debug, Clone, PartialEq)]
pub enum CallResult {
    /// The operation's result.
    Complete(Value),
    /// The server needs input: one round.
    InputRequired {
        /// Requests keyed verbatim by the server's `inputRequests` keys, sorted.
        requests: Vec<(String, ElicitationRequest)>,
        /// The opaque state to echo, exactly as received.
        request_state: Option<String>,
    },
}

/// Classifies a call result.
pub fn classify(result: &Value) -> Result<CallResult, UnusableRequest> {
    match result.get("resultType").and_then(Value::as_str) {
        None | Some("complete") => Ok(CallResult::Complete(result.clone())),
        Some("input_required") => {
            let request_state = match result.get("requestState") {
                None | Some(Value::Null) => None,
                Some(Value::String(state)) => Some(state.clone()),
                Some(_) => return Err(UnusableRequest("requestState is not a string".into())),
            };
            let empty = Map::new();
            let listed = match result.get("inputRequests") {
                None | Some(Value::Null) => &empty,
                Some(Value::Object(map)) => map,
                Some(_) => return Err(UnusableRequest("inputRequests is not an object".into())),
            };
            if listed.is_empty() && request_state.is_none() {
                return Err(UnusableRequest(
                    "input_required with neither inputRequests nor requestState".into(),
                ));
            }
            let mut requests = Vec::with_capacity(listed.len());
            for (key, input_request) in listed {
                let method = input_request
                    .get("method")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if method != ELICITATION_METHOD {
                    return Err(UnusableRequest(format!(
                        "input request `{}` asks for `{}`, which the kit does not answer",
                        crate::errors::bounded(key),
                        crate::errors::bounded(method)
                    )));
                }
                let params = input_request.get("params").cloned().unwrap_or(Value::Null);
                requests.push((key.clone(), from_params(&params)?));
            }
            requests.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(CallResult::InputRequired {
                requests,
                request_state,
            })
        }
        Some(other) => Err(UnusableRequest(format!(
            "unknown resultType `{}`",
            crate::errors::bounded(other)
        ))),
    }
}

/// The params of the retry: the original params (same arguments) plus `inputResponses` and the
/// echoed `requestState`. Any `inputResponses`/`requestState` of an earlier round are replaced.
pub fn retry_params(
    original: &Value,
    answers: Vec<(String, Value)>,
    request_state: Option<&str>,
) -> Value {
    let mut params = original.clone();
    if let Value::Object(map) = &mut params {
        map.insert(
            "inputResponses".into(),
            Value::Object(answers.into_iter().collect()),
        );
        match request_state {
            Some(state) => map.insert("requestState".into(), Value::String(state.to_string())),
            None => map.remove("requestState"),
        };
    }
    params
}

/// The failure code of a round whose retry the server answered with an error.
pub fn failure_for_retry_error(code: i64) -> FailureCode {
    if code == -32602 {
        FailureCode::InvalidRequestState
    } else {
        FailureCode::ServerError
    }
}

/// Whether another round is allowed: `round_index` is zero-based and must stay below the limit.
pub fn within_limit(round_index: u32, round_limit: u32) -> bool {
    round_index < round_limit
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn form(key: &str) -> Value {
        json!({"method": "elicitation/create", "params": {"mode": "form", "message": key,
               "requestedSchema": {"type": "object", "properties": {}}}})
    }

    #[test]
    fn a_result_without_result_type_is_complete() {
        let result = json!({"content": [{"type": "text", "text": "done"}]});
        assert_eq!(classify(&result).unwrap(), CallResult::Complete(result));
    }

    #[test]
    fn input_required_keeps_keys_and_state_verbatim() {
        let state = "opaque+/=\u{e9}state";
        let result = json!({"resultType": "input_required", "requestState": state,
                            "inputRequests": {"__main__:ask_booking": form("a"), "booking": form("b")}});
        let CallResult::InputRequired {
            requests,
            request_state,
        } = classify(&result).unwrap()
        else {
            panic!()
        };
        let keys: Vec<&str> = requests.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["__main__:ask_booking", "booking"]);
        assert_eq!(request_state.as_deref(), Some(state));
    }

    #[test]
    fn only_elicitation_input_requests_are_answerable() {
        let result = json!({"resultType": "input_required", "inputRequests": {"s": {"method": "sampling/createMessage", "params": {}}}});
        assert!(classify(&result).is_err());
        assert!(classify(&json!({"resultType": "input_required"})).is_err());
        assert!(classify(&json!({"resultType": "input_required", "requestState": 5})).is_err());
    }

    #[test]
    fn the_retry_repeats_the_arguments_and_echoes_the_state() {
        let original =
            json!({"name": "book_shipment", "arguments": {"item": "book"}, "_meta": {"k": 1}});
        let retry = retry_params(
            &original,
            vec![("booking".into(), json!({"action": "decline"}))],
            Some("s1"),
        );
        assert_eq!(retry["arguments"], original["arguments"]);
        assert_eq!(retry["_meta"], original["_meta"]);
        assert_eq!(retry["requestState"], "s1");
        assert_eq!(retry["inputResponses"]["booking"]["action"], "decline");
        let no_state = retry_params(&retry, vec![], None);
        assert!(
            no_state.get("requestState").is_none(),
            "omitted when the server sent none"
        );
    }

    #[test]
    fn retry_errors_map_to_failure_codes_and_rounds_are_capped() {
        assert_eq!(
            failure_for_retry_error(-32602),
            FailureCode::InvalidRequestState
        );
        assert_eq!(failure_for_retry_error(-32603), FailureCode::ServerError);
        assert!(within_limit(9, 10));
        assert!(!within_limit(10, 10));
    }
}

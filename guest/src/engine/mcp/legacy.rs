//! The legacy era (MCP 2025-06-18 and 2025-11-25): the server sends `elicitation/create` while a
//! call is in flight; the client answers that request id with the stored response. 2025-11-25
//! adds error -32042 (URL elicitation required), which lists URL requests that together make one
//! round; the client retries the call after consent.

use super::message::RpcError;
use super::request::{UnusableRequest, from_params, hinted_key, single_key};
use crate::m3::managed_input::types::ElicitationRequest;
use serde_json::Value;

/// The server method that asks for input.
pub const ELICITATION_METHOD: &str = "elicitation/create";
/// The 2025-11-25 error code for "URL elicitation required".
pub const URL_ELICITATION_REQUIRED: i64 = -32042;

/// The one request of an `elicitation/create`, with its key.
pub fn elicitation(params: &Value) -> Result<(String, ElicitationRequest), UnusableRequest> {
    Ok((single_key(params), from_params(params)?))
}

/// The URL requests of a -32042 error, keyed `url-0`, `url-1`, ... unless a request hints its
/// key. `None` when the error is not -32042 or lists nothing usable.
pub fn url_required(
    error: &RpcError,
) -> Option<Result<Vec<(String, ElicitationRequest)>, UnusableRequest>> {
    if error.code != URL_ELICITATION_REQUIRED {
        return None;
    }
    let listed = error.data.as_ref()?.get("elicitations")?.as_array()?;
    if listed.is_empty() {
        return None;
    }
    Some(
        listed
            .iter()
            .enumerate()
            .map(|(i, params)| {
                let mut params = params.clone();
                if let Value::Object(map) = &mut params {
                    map.entry("mode")
                        .or_insert_with(|| Value::String("url".into()));
                }
                let key = hinted_key(&params).unwrap_or_else(|| format!("url-{i}"));
                Ok((key, from_params(&params)?))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_everything_style_form_without_mode_becomes_the_elicitation_key() {
        let params = json!({"message": "Please provide", "requestedSchema": {"type": "object", "properties": {
            "color": {"type": "string", "enum": ["red"], "enumNames": ["Red"]}}}});
        let (key, request) = elicitation(&params).unwrap();
        assert_eq!(key, "elicitation");
        assert!(matches!(request, ElicitationRequest::Form(_)));
    }

    #[test]
    fn a_url_required_error_is_one_round_with_a_key_per_url() {
        let error = RpcError {
            code: URL_ELICITATION_REQUIRED,
            message: "URL elicitation required".into(),
            data: Some(json!({"elicitations": [
                {"message": "Sign in", "url": "https://a.example", "elicitationId": "1"},
                {"mode": "url", "message": "Pay", "url": "https://b.example", "elicitationId": "2",
                 "_meta": {"m3/request_key": "payment"}}
            ]})),
        };
        let requests = url_required(&error).unwrap().unwrap();
        let keys: Vec<&str> = requests.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["url-0", "payment"]);
        assert!(
            requests
                .iter()
                .all(|(_, r)| matches!(r, ElicitationRequest::Url(_)))
        );
        assert!(
            url_required(&RpcError {
                code: -32603,
                message: String::new(),
                data: None
            })
            .is_none()
        );
    }
}

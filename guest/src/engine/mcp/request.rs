//! A server's elicitation parameters (`elicitation/create` params, in either era) as a request of
//! a round, and a stored response as the answer the server expects.

use super::{DEFAULT_REQUEST_KEY, REQUEST_KEY_HINT};
use crate::m3::managed_input::types::{
    ElicitationAction, ElicitationRequest, ElicitationResponse, FormRequest, RequestContext,
    UrlRequest,
};
use serde_json::{Value, json};

/// Why a server's elicitation cannot become a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnusableRequest(pub String);

/// The request key a single elicitation is stored under: the server's
/// `_meta["m3/request_key"]` hint, else `elicitation`.
pub fn hinted_key(params: &Value) -> Option<String> {
    params
        .get("_meta")
        .and_then(|m| m.get(REQUEST_KEY_HINT))
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
        .map(str::to_string)
}

/// The request key of a single elicitation.
pub fn single_key(params: &Value) -> String {
    hinted_key(params).unwrap_or_else(|| DEFAULT_REQUEST_KEY.to_string())
}

fn context(params: &Value) -> RequestContext {
    RequestContext {
        meta: params
            .get("_meta")
            .filter(|m| m.is_object())
            .map(Value::to_string),
        task: params
            .get("task")
            .filter(|t| t.is_object())
            .map(Value::to_string),
        server: None,
        operation_kind: None,
        operation_name: None,
    }
}

/// Turns `elicitation/create` params into a request. `mode` absent means form.
pub fn from_params(params: &Value) -> Result<ElicitationRequest, UnusableRequest> {
    let message = params
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    match params.get("mode").and_then(Value::as_str).unwrap_or("form") {
        "form" => {
            let schema = params
                .get("requestedSchema")
                .filter(|s| s.is_object())
                .ok_or_else(|| {
                    UnusableRequest("a form elicitation without a requestedSchema object".into())
                })?;
            Ok(ElicitationRequest::Form(FormRequest {
                message,
                requested_schema: super::schema_order::schema_text(schema),
                context: context(params),
            }))
        }
        "url" => {
            let url = params
                .get("url")
                .and_then(Value::as_str)
                .ok_or_else(|| UnusableRequest("a URL elicitation without a url".into()))?;
            Ok(ElicitationRequest::Url(UrlRequest {
                message,
                url: url.to_string(),
                elicitation_id: params
                    .get("elicitationId")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                context: context(params),
            }))
        }
        other => Err(UnusableRequest(format!(
            "unknown elicitation mode `{}`",
            crate::errors::bounded(other)
        ))),
    }
}

/// The `ElicitResult` for a stored response: `{"action", "content"?}`.
pub fn answer(response: &ElicitationResponse) -> Value {
    let action = match response.action {
        ElicitationAction::Accept => "accept",
        ElicitationAction::Decline => "decline",
        ElicitationAction::Cancel => "cancel",
    };
    match response
        .content
        .as_deref()
        .and_then(|c| serde_json::from_str::<Value>(c).ok())
    {
        Some(content) => json!({"action": action, "content": content}),
        None => json!({"action": action}),
    }
}

/// The answer the kit gives when it will not ask the human (mode `fail`, cancel): `cancel`.
pub fn cancel_answer() -> Value {
    json!({"action": "cancel"})
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_answer_is_delivered_with_every_digit_it_was_given() {
        use crate::m3::managed_input::types::{ElicitationAction, ElicitationResponse};
        let content = r#"{"b":1e+400,"k":123456789012345678901234567890,"n":0.1000000000000000000001,"s":1e-400,"t":1e-300,"z":-0}"#;
        let line = answer(&ElicitationResponse {
            action: ElicitationAction::Accept,
            content: Some(content.into()),
        })
        .to_string();
        assert_eq!(
            line,
            format!(r#"{{"action":"accept","content":{content}}}"#)
        );
    }

    use super::*;

    #[test]
    fn mode_defaults_to_form_and_the_hint_names_the_key() {
        let params = json!({"message": "Where?", "requestedSchema": {"type": "object", "properties": {}},
                            "_meta": {"m3/request_key": "shipping_address"}});
        assert_eq!(single_key(&params), "shipping_address");
        let ElicitationRequest::Form(form) = from_params(&params).unwrap() else {
            panic!()
        };
        assert_eq!(form.message, "Where?");
        assert!(form.context.meta.unwrap().contains("shipping_address"));
        assert_eq!(single_key(&json!({"message": "x"})), "elicitation");
    }

    #[test]
    fn url_mode_keeps_the_url_and_elicitation_id() {
        let params = json!({"mode": "url", "message": "Pay", "url": "https://x.example/pay", "elicitationId": "e1"});
        let ElicitationRequest::Url(url) = from_params(&params).unwrap() else {
            panic!()
        };
        assert_eq!(
            (url.url.as_str(), url.elicitation_id.as_deref()),
            ("https://x.example/pay", Some("e1"))
        );
    }

    #[test]
    fn unusable_requests_are_refused() {
        assert!(from_params(&json!({"message": "no schema"})).is_err());
        assert!(from_params(&json!({"mode": "url", "message": "no url"})).is_err());
        assert!(from_params(&json!({"mode": "telepathy"})).is_err());
    }

    #[test]
    fn answers_carry_content_only_when_stored() {
        let accept = ElicitationResponse {
            action: ElicitationAction::Accept,
            content: Some("{\"city\":\"Pune\"}".into()),
        };
        assert_eq!(
            answer(&accept),
            json!({"action": "accept", "content": {"city": "Pune"}})
        );
        let decline = ElicitationResponse {
            action: ElicitationAction::Decline,
            content: None,
        };
        assert_eq!(answer(&decline), json!({"action": "decline"}));
    }
}

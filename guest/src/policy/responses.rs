//! Validation of a response map against a round's requests.
//!
//! The map must hold exactly the round's request keys; each value must be an
//! `ElicitationResponse` (`{"action": ..., "content"?: ...}`); a form `accept` needs object content
//! valid against the request's schema; URL responses, `decline` and `cancel` carry no content.

use crate::errors::{Result, bounded, validation, validation_at};
use crate::m3::managed_input::types::{
    ElicitationAction, ElicitationRequest, ElicitationResponse, ErrorCode,
};
use crate::schema::{self, FormCheck};
use crate::strict_json;
use serde_json::{Map, Value};
use std::collections::BTreeSet;
use std::rc::Rc;

/// Largest response map accepted, in bytes of JSON text.
pub const MAX_RESPONSES_BYTES: usize = 1024 * 1024;

/// Validates `text` against `requests`, returning canonical responses sorted by key.
pub fn validate_responses(
    requests: &[(String, ElicitationRequest)],
    text: &str,
) -> Result<Vec<(String, ElicitationResponse)>> {
    validate_responses_with(requests, text, &mut |_, schema_text| {
        schema::validator_for(schema_text)
    })
}

/// [`validate_responses`] with the compiled validator of the form request at index `i` (of
/// `requests`, whose schema is `schema_text`) from `validator(i, schema_text)`.
pub fn validate_responses_with(
    requests: &[(String, ElicitationRequest)],
    text: &str,
    validator: &mut dyn FnMut(usize, &str) -> Result<Rc<FormCheck>>,
) -> Result<Vec<(String, ElicitationResponse)>> {
    if text.len() > MAX_RESPONSES_BYTES {
        return Err(validation(
            ErrorCode::PayloadTooLarge,
            format!(
                "responses are {} bytes; the limit is {MAX_RESPONSES_BYTES}",
                text.len()
            ),
        ));
    }
    let parsed = strict_json::parse(text)
        .map_err(|e| validation(ErrorCode::MalformedJson, format!("responses: {}", e.0)))?;
    let Value::Object(map) = parsed else {
        return Err(validation(
            ErrorCode::InvalidResponse,
            "responses must be a JSON object keyed by request key",
        ));
    };
    check_key_set(requests, &map)?;
    let mut out = Vec::with_capacity(map.len());
    let mut sorted: Vec<(usize, &(String, ElicitationRequest))> =
        requests.iter().enumerate().collect();
    sorted.sort_by(|a, b| a.1.0.cmp(&b.1.0));
    for (index, (key, request)) in sorted {
        let response = check_response(key, request, &map[key], &mut |schema_text| {
            validator(index, schema_text)
        })?;
        out.push((key.clone(), response));
    }
    Ok(out)
}

fn check_key_set(
    requests: &[(String, ElicitationRequest)],
    map: &Map<String, Value>,
) -> Result<()> {
    let expected: BTreeSet<&str> = requests.iter().map(|(k, _)| k.as_str()).collect();
    let given: BTreeSet<&str> = map.keys().map(String::as_str).collect();
    if expected == given {
        return Ok(());
    }
    let list = |keys: Vec<&&str>| {
        keys.iter()
            .take(8)
            .map(|k| format!("`{}`", bounded(k)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let missing: Vec<&&str> = expected.difference(&given).collect();
    let extra: Vec<&&str> = given.difference(&expected).collect();
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("missing {}", list(missing)));
    }
    if !extra.is_empty() {
        // Keys that came with the answer are counted, not repeated.
        parts.push(format!("{} key(s) the round does not have", extra.len()));
    }
    Err(validation(
        ErrorCode::ResponseKeysMismatch,
        format!(
            "responses must have exactly the pending request keys: {}",
            parts.join("; ")
        ),
    ))
}

fn check_response(
    key: &str,
    request: &ElicitationRequest,
    value: &Value,
    validator: &mut dyn FnMut(&str) -> Result<Rc<FormCheck>>,
) -> Result<ElicitationResponse> {
    let Value::Object(fields) = value else {
        return Err(validation_at(
            ErrorCode::InvalidResponse,
            key,
            None,
            format!(
                "response `{}` must be an object with an `action`",
                bounded(key)
            ),
        ));
    };
    if fields
        .keys()
        .any(|k| k.as_str() != "action" && k.as_str() != "content")
    {
        // The extra field's name came with the answer: it is not repeated.
        return Err(validation_at(
            ErrorCode::InvalidResponse,
            key,
            None,
            format!(
                "response `{}` has a field other than `action` and `content`; an \
                 ElicitationResponse has only those",
                bounded(key)
            ),
        ));
    }
    let action = match fields.get("action").and_then(Value::as_str) {
        Some("accept") => ElicitationAction::Accept,
        Some("decline") => ElicitationAction::Decline,
        Some("cancel") => ElicitationAction::Cancel,
        _ => {
            return Err(validation_at(
                ErrorCode::InvalidAction,
                key,
                None,
                format!(
                    "response `{}`: `action` must be \"accept\", \"decline\" or \"cancel\"",
                    bounded(key)
                ),
            ));
        }
    };
    let content = fields.get("content").filter(|c| !c.is_null());
    match (request, action, content) {
        (
            ElicitationRequest::Form(form),
            ElicitationAction::Accept,
            Some(content @ Value::Object(_)),
        ) => {
            check_form_content(key, &*validator(&form.requested_schema)?, content)?;
            Ok(ElicitationResponse {
                action,
                // Kept as given (numbers with every digit), compact, keys sorted.
                content: Some(serde_json::to_string(content).unwrap_or_default()),
            })
        }
        (ElicitationRequest::Form(_), ElicitationAction::Accept, _) => Err(validation_at(
            ErrorCode::ContentRequired,
            key,
            None,
            format!(
                "response `{}`: a form accept needs `content` as an object",
                bounded(key)
            ),
        )),
        (ElicitationRequest::Url(_), ElicitationAction::Accept, Some(_)) => Err(validation_at(
            ErrorCode::ContentNotAllowed,
            key,
            None,
            format!(
                "response `{}`: a URL accept only records consent and carries no content",
                bounded(key)
            ),
        )),
        (_, ElicitationAction::Decline | ElicitationAction::Cancel, Some(_)) => Err(validation_at(
            ErrorCode::ContentNotAllowed,
            key,
            None,
            format!(
                "response `{}`: decline and cancel carry no content",
                bounded(key)
            ),
        )),
        (_, action, _) => Ok(ElicitationResponse {
            action,
            content: None,
        }),
    }
}

fn check_form_content(key: &str, check: &FormCheck, content: &Value) -> Result<()> {
    // The first error only: collecting every error of a huge invalid array (one per item)
    // outgrew the component's memory (regression: a 136k-item multi-select answer).
    let Err(error) = check.validator.validate(content) else {
        // Exactly: an integer field's number must have no fraction at all.
        if let Some(field) = check.integer_fields.iter().find(|f| {
            content
                .get(f.as_str())
                .and_then(Value::as_number)
                .is_some_and(|n| crate::canonical::decimal(n).2 < 0)
        }) {
            return Err(validation_at(
                ErrorCode::SchemaViolation,
                key,
                Some(field),
                format!(
                    "response `{}`: field `{}` does not satisfy `type` of the requested schema \
                     (not an integer)",
                    bounded(key),
                    bounded(field)
                ),
            ));
        }
        return Ok(());
    };
    let keyword = error.kind().keyword().to_string();
    let field = match error.kind() {
        jsonschema::error::ValidationErrorKind::Required { property } => {
            property.as_str().map(str::to_string)
        }
        // The unexpected field's name came with the answer: it is not repeated.
        jsonschema::error::ValidationErrorKind::AdditionalProperties { .. } => None,
        _ => error
            .instance_path()
            .as_str()
            .trim_start_matches('/')
            .split('/')
            .next()
            .filter(|s| !s.is_empty())
            .map(|s| s.replace("~1", "/").replace("~0", "~")),
    };
    let about = match (&field, error.kind()) {
        (Some(f), _) => format!("field `{}`", bounded(f)),
        (None, jsonschema::error::ValidationErrorKind::AdditionalProperties { .. }) => {
            "content (a field the requested schema does not define)".into()
        }
        (None, _) => "content".into(),
    };
    Err(validation_at(
        ErrorCode::SchemaViolation,
        key,
        field.as_deref(),
        format!(
            "response `{}`: {about} does not satisfy `{keyword}` of the requested schema",
            bounded(key)
        ),
    ))
}

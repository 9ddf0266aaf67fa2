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
        // Keys that came with the answer are named (each cut to 64 bytes, at most eight of
        // them, never their values), so that whoever answered can see which key was wrong.
        let more = extra.len().saturating_sub(8);
        let mut named = format!("keys the round does not have: {}", list(extra));
        if more > 0 {
            named.push_str(&format!(" and {more} more"));
        }
        parts.push(named);
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

/// The numeric fields, exactly (the validator saw them only as numbers, see
/// [`FormCheck::number_violation`]), so a number is judged and delivered as written.
fn check_numbers(key: &str, check: &FormCheck, content: &Value) -> Result<()> {
    let Some((field, keyword)) = check.number_violation(content) else {
        return Ok(());
    };
    let why = if keyword == "type" {
        " (not an integer)"
    } else {
        ""
    };
    Err(validation_at(
        ErrorCode::SchemaViolation,
        key,
        Some(field),
        format!(
            "response `{}`: field `{}` does not satisfy `{keyword}` of the requested schema{why}",
            bounded(key),
            bounded(field)
        ),
    ))
}

fn check_form_content(key: &str, check: &FormCheck, content: &Value) -> Result<()> {
    // The first error only: collecting every error of a huge invalid array (one per item)
    // outgrew the component's memory (regression: a 136k-item multi-select answer).
    let Err(error) = check.validator.validate(content) else {
        return check_numbers(key, check, content);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::m3::managed_input::types::{FormRequest, RequestContext};

    fn form(schema: &str) -> Vec<(String, ElicitationRequest)> {
        vec![(
            "k".into(),
            ElicitationRequest::Form(FormRequest {
                message: "?".into(),
                requested_schema: schema.into(),
                context: RequestContext {
                    meta: None,
                    task: None,
                    server: None,
                    operation_kind: None,
                    operation_name: None,
                },
            }),
        )]
    }

    fn outcome(schema: &str, n: &str) -> std::result::Result<String, (ErrorCode, String)> {
        let text = format!(r#"{{"k":{{"action":"accept","content":{{"n":{n}}}}}}}"#);
        validate_responses(&form(schema), &text)
            .map(|r| r[0].1.content.clone().unwrap())
            .map_err(|e| match e {
                crate::m3::managed_input::types::ManagedInputError::Validation(d) => {
                    (d.code, d.message)
                }
                other => panic!("not a validation error: {other:?}"),
            })
    }

    /// A key set that differs names the missing keys and the extra ones (at most eight each,
    /// cut to 64 bytes), never a value.
    #[test]
    fn a_mismatched_key_set_names_the_missing_and_the_extra_keys() {
        let message = |text: &str| match validate_responses(&form("{}"), text) {
            Err(crate::m3::managed_input::types::ManagedInputError::Validation(d)) => {
                assert_eq!(d.code, ErrorCode::ResponseKeysMismatch);
                d.message
            }
            other => panic!("not a key mismatch: {other:?}"),
        };
        let one = message(r#"{"kk": {"action": "accept", "content": {"secret": "VALUE"}}}"#);
        assert!(one.contains("missing `k`"), "{one}");
        assert!(one.contains("keys the round does not have: `kk`"), "{one}");
        assert!(!one.contains("VALUE") && !one.contains("secret"), "{one}");
        let many: Vec<String> = (0..10)
            .map(|i| format!(r#""x{i}{}": {{"action": "decline"}}"#, "y".repeat(100)))
            .collect();
        let ten = message(&format!(
            r#"{{"k": {{"action": "decline"}}, {}}}"#,
            many.join(", ")
        ));
        assert!(ten.ends_with(" and 2 more"), "{ten}");
        assert!(!ten.contains(&"y".repeat(70)), "each key cut: {ten}");
        assert!(!ten.contains("missing"), "{ten}");
    }

    /// Numbers are judged by their exact values, never as doubles: accepted ones are kept as
    /// written, refused ones name the field and the keyword.
    #[test]
    fn numeric_fields_are_judged_exactly_and_kept_as_written() {
        let number = r#"{"type":"object","properties":{"n":{"type":"number"}}}"#;
        for n in [
            "1e+400",
            "-1e+400",
            "1e-400",
            "-0",
            "1.0",
            "123456789012345678901234567890",
            "0.1000000000000000055511151231257827",
        ] {
            assert_eq!(outcome(number, n).unwrap(), format!(r#"{{"n":{n}}}"#));
        }
        let refused = |schema: &str, n: &str, keyword: &str| {
            let (code, message) = outcome(schema, n).unwrap_err();
            assert_eq!(code, ErrorCode::SchemaViolation, "{n}: {message}");
            assert!(
                message.contains("field `n`") && message.contains(keyword),
                "{n}: {message}"
            );
        };
        // Where a double would say "equal", the exact value decides.
        let at_most_zero = r#"{"type":"object","properties":{"n":{"type":"number","maximum":0}}}"#;
        refused(at_most_zero, "1e-400", "`maximum`");
        assert!(outcome(at_most_zero, "-1e-400").is_ok());
        assert!(outcome(at_most_zero, "-0").is_ok());
        let at_least_zero = r#"{"type":"object","properties":{"n":{"type":"number","minimum":0}}}"#;
        refused(at_least_zero, "-1e-400", "`minimum`");
        assert!(outcome(at_least_zero, "1e-400").is_ok());
        let tenth = r#"{"type":"object","properties":{"n":{"type":"number","maximum":0.1}}}"#;
        refused(tenth, "0.1000000000000000055511151231257827", "`maximum`");
        assert!(outcome(tenth, "0.1").is_ok());
        let bounded = r#"{"type":"object","properties":{"n":{"type":"number","minimum":-1e308,"maximum":1e308}}}"#;
        refused(bounded, "1e400", "`maximum`");
        refused(bounded, "-1e400", "`minimum`");
        let big = r#"{"type":"object","properties":{"n":{"type":"integer","maximum":123456789012345678901234567890}}}"#;
        assert!(outcome(big, "123456789012345678901234567890").is_ok());
        refused(big, "123456789012345678901234567891", "`maximum`");
        // Integers: no fraction at all, whatever the size.
        let integer = r#"{"type":"object","properties":{"n":{"type":"integer"}}}"#;
        for n in [
            "1e+400",
            "1.0",
            "-0",
            "123456789012345678901234567890",
            "1.20e1",
        ] {
            assert!(outcome(integer, n).is_ok(), "{n}");
        }
        for n in ["1e-400", "5.0000000000000000001", "0.5"] {
            refused(integer, n, "not an integer");
        }
        // A number where the schema wants another type is still a type error.
        let string = r#"{"type":"object","properties":{"n":{"type":"string"}}}"#;
        refused(string, "1e400", "`type`");
    }
}

//! The checks of one form field as it is typed: its type, `minLength` / `maxLength`,
//! `minimum` / `maximum`, and the MCP form subset's formats (`email`, `uri`, `date`,
//! `date-time`; the subset has no `pattern`). A format is judged by the component itself (the
//! policy rules that validate answers, asked about a one-field form), so the form refuses what
//! the component would refuse and nothing more, and the command compiles no JSON Schema
//! validator of its own. The component still validates the whole answer once it is submitted.

use serde_json::{Value, json};
use std::sync::OnceLock;

/// The value typed for a field of `kind` (`prop` being its schema), or why it does not fit (the
/// prompt asks for this field again).
pub fn check_text(kind: &str, prop: &Value, text: &str, required: bool) -> Result<(), String> {
    if text.is_empty() {
        return if required {
            Err("this field is required".into())
        } else {
            Ok(())
        };
    }
    let bound = |name: &str| prop.get(name).and_then(Value::as_f64);
    match kind {
        "integer" | "number" => {
            let number: f64 = text.trim().parse().map_err(|_| {
                format!(
                    "enter {}",
                    if kind == "integer" {
                        "an integer"
                    } else {
                        "a number"
                    }
                )
            })?;
            if kind == "integer" && number.fract() != 0.0 {
                return Err("enter a whole number".into());
            }
            if let Some(min) = bound("minimum")
                && number < min
            {
                return Err(format!("at least {min}"));
            }
            if let Some(max) = bound("maximum")
                && number > max
            {
                return Err(format!("at most {max}"));
            }
            Ok(())
        }
        _ => {
            // JSON Schema counts characters (code points), as `chars` does.
            let length = text.chars().count() as f64;
            if let Some(min) = bound("minLength")
                && length < min
            {
                return Err(format!("at least {min} characters"));
            }
            if let Some(max) = bound("maxLength")
                && length > max
            {
                return Err(format!("at most {max} characters"));
            }
            match prop.get("format").and_then(Value::as_str) {
                Some(format) => check_format(format, text),
                None => Ok(()),
            }
        }
    }
}

/// Whether `text` has `format`, as the component's validator judges it; the reason if not.
pub fn check_format(format: &str, text: &str) -> Result<(), String> {
    let expected = match format {
        "email" => "an email address, like name@example.com",
        "uri" => "an absolute URI, like https://example.com/page",
        "date" => "a date as YYYY-MM-DD, like 2026-12-24",
        "date-time" => "a date and time as RFC 3339, like 2026-12-24T18:30:00Z",
        // Not in the subset: the component refuses such a schema before anyone is asked.
        _ => return Ok(()),
    };
    if judged_valid(format, text) {
        Ok(())
    } else {
        Err(format!("enter {expected}"))
    }
}

/// The component's rules, loaded on the first format check (`None`: they could not be loaded).
fn policy() -> Option<&'static m3::Policy> {
    static POLICY: OnceLock<Option<m3::Policy>> = OnceLock::new();
    POLICY.get_or_init(|| m3::Policy::new().ok()).as_ref()
}

/// Whether the component accepts `text` as a string of `format`: the answer to a one-field form
/// asking for it. Rules that cannot be loaded refuse nothing here; the component decides when
/// the answer is submitted.
fn judged_valid(format: &str, text: &str) -> bool {
    let Some(policy) = policy() else {
        return true;
    };
    let schema = json!({
        "type": "object",
        "properties": {"value": {"type": "string", "format": format}},
        "required": ["value"],
    });
    let round = m3::PendingElicitationRound {
        round_id: "field-check".into(),
        execution_id: "field-check".into(),
        logical_operation_id: "field-check".into(),
        server: "m3".into(),
        operation_kind: m3::OperationKind::Tool,
        operation_name: "field-check".into(),
        requests: std::collections::BTreeMap::from([(
            "field".to_string(),
            m3::ElicitationRequest::form("field", schema),
        )]),
        created_at: chrono::Utc::now(),
        request_state: None,
        deadline: None,
    };
    let answer = json!({"field": {"action": "accept", "content": {"value": text}}});
    match policy.validate_responses_json(&round, &answer.to_string()) {
        Ok(_) => true,
        Err(m3::ManagedInputError::Validation(_)) => false,
        // Not a judgement of the value (the engine failed): the component decides on submit.
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_judged_as_the_component_judges_them() {
        for (format, good, bad) in [
            ("email", "ada@example.com", "ada.example.com"),
            ("uri", "https://example.com/a", "not a uri"),
            ("date", "2026-12-24", "2026-13-45"),
            ("date-time", "2026-12-24T18:30:00Z", "2026-12-24 18:30"),
        ] {
            assert_eq!(check_format(format, good), Ok(()), "{format} {good}");
            let refused = check_format(format, bad).unwrap_err();
            assert!(refused.starts_with("enter "), "{refused}");
        }
    }

    #[test]
    fn lengths_bounds_and_required_fields_say_why() {
        let prop = json!({"type": "string", "minLength": 2, "maxLength": 3, "format": "email"});
        assert_eq!(
            check_text("string", &prop, "a", true),
            Err("at least 2 characters".into())
        );
        assert_eq!(
            check_text("string", &prop, "", true),
            Err("this field is required".into())
        );
        assert_eq!(check_text("string", &prop, "", false), Ok(()));
        let number = json!({"type": "integer", "minimum": 1, "maximum": 9});
        assert_eq!(
            check_text("integer", &number, "1.5", true),
            Err("enter a whole number".into())
        );
        assert_eq!(
            check_text("integer", &number, "10", true),
            Err("at most 9".into())
        );
        assert_eq!(check_text("integer", &number, "9", true), Ok(()));
    }
}

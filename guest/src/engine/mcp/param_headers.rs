//! HTTP headers that carry a request's values (2026-07-28, SEP-2243): `Mcp-Name` and the
//! `Mcp-Param-<Name>` headers a tool asks for by annotating a parameter with `x-mcp-header`.
//!
//! A value goes into a header as it is when it is printable ASCII without surrounding
//! whitespace; otherwise (non-ASCII, control characters, leading or trailing whitespace) as
//! `=?base64?<base64 of its UTF-8>?=`. An integer is written in decimal, a boolean as `true` or
//! `false`, a null or absent value gives no header. A tool whose annotations break the rules
//! (an empty name, a name that is not an HTTP token, two parameters with one name in any case,
//! an annotation on a parameter that is not a string, integer or boolean) is not called.

use base64::Engine as _;
use serde_json::Value;

/// The header prefix of a mirrored parameter.
pub const PARAM_PREFIX: &str = "mcp-param-";

/// A text as a header value.
pub fn encode_text(text: &str) -> String {
    let plain = text.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && !text.starts_with([' ', '\t'])
        && !text.ends_with([' ', '\t']);
    if plain {
        text.to_string()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(text.as_bytes())
        )
    }
}

/// A parameter's value as a header value; `None` gives no header (null, or a kind a header does
/// not carry).
pub fn encode_value(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(encode_text(text)),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// A tool's annotated parameters: `(parameter, header name)` by parameter name, or why the tool
/// may not be called.
pub fn annotations(input_schema: &Value) -> Result<Vec<(String, String)>, String> {
    let Some(properties) = input_schema.get("properties").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for (parameter, schema) in properties {
        let Some(annotation) = schema.get("x-mcp-header") else {
            continue;
        };
        let Some(name) = annotation.as_str() else {
            return Err(format!(
                "parameter `{parameter}`: x-mcp-header is not a string"
            ));
        };
        if name.is_empty() {
            return Err(format!("parameter `{parameter}`: x-mcp-header is empty"));
        }
        if !name.bytes().all(is_token_byte) {
            return Err(format!(
                "parameter `{parameter}`: x-mcp-header `{}` is not an HTTP header name",
                crate::errors::bounded(name)
            ));
        }
        let primitive = match schema.get("type") {
            Some(Value::String(t)) => matches!(t.as_str(), "string" | "integer" | "boolean"),
            _ => false,
        };
        if !primitive {
            return Err(format!(
                "parameter `{parameter}`: x-mcp-header is allowed on string, integer and boolean \
                 parameters only"
            ));
        }
        if out
            .iter()
            .any(|(_, other)| other.eq_ignore_ascii_case(name))
        {
            return Err(format!(
                "x-mcp-header `{name}` names two parameters (names are compared without case)"
            ));
        }
        out.push((parameter.clone(), name.to_string()));
    }
    out.sort();
    Ok(out)
}

/// The `Mcp-Param-*` headers of a call with `arguments`, for the tool's annotations.
pub fn headers(annotations: &[(String, String)], arguments: &Value) -> Vec<(String, String)> {
    annotations
        .iter()
        .filter_map(|(parameter, name)| {
            let value = encode_value(arguments.get(parameter)?)?;
            Some((
                format!("{PARAM_PREFIX}{}", name.to_ascii_lowercase()),
                value,
            ))
        })
        .collect()
}

/// RFC 9110 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_plain_or_base64() {
        assert_eq!(encode_text("us-west1"), "us-west1");
        assert_eq!(encode_text("us west 1"), "us west 1");
        assert_eq!(encode_text(""), "");
        assert_eq!(encode_text(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(
            encode_text("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(encode_text("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(encode_text("\tindented"), "=?base64?CWluZGVudGVk?=");
        assert_eq!(encode_value(&json!(42)).as_deref(), Some("42"));
        assert_eq!(encode_value(&json!(false)).as_deref(), Some("false"));
        assert_eq!(encode_value(&json!(null)), None);
    }

    #[test]
    fn annotated_arguments_become_headers() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "priority": {"type": "integer", "x-mcp-header": "Priority"},
            "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
            "query": {"type": "string"}
        }});
        let annotations = annotations(&schema).unwrap();
        let headers = headers(
            &annotations,
            &json!({"region": "eu", "priority": 3, "verbose": null, "query": "x"}),
        );
        assert_eq!(
            headers,
            [
                ("mcp-param-priority".to_string(), "3".to_string()),
                ("mcp-param-region".to_string(), "eu".to_string())
            ]
        );
    }

    #[test]
    fn invalid_annotations_make_the_tool_uncallable() {
        for properties in [
            json!({"a": {"type": "string", "x-mcp-header": ""}}),
            json!({"a": {"type": "object", "x-mcp-header": "A"}}),
            json!({"a": {"type": "array", "x-mcp-header": "A"}}),
            json!({"a": {"type": "number", "x-mcp-header": "A"}}),
            json!({"a": {"type": "null", "x-mcp-header": "A"}}),
            json!({"a": {"type": "string", "x-mcp-header": "My Region"}}),
            json!({"a": {"type": "string", "x-mcp-header": "Region:1"}}),
            json!({"a": {"type": "string", "x-mcp-header": "Région"}}),
            json!({"a": {"type": "string", "x-mcp-header": "Region\t1"}}),
            json!({"a": {"type": "string", "x-mcp-header": "MyField"},
                   "b": {"type": "string", "x-mcp-header": "myfield"}}),
            json!({"a": {"type": "string", "x-mcp-header": 7}}),
        ] {
            let schema = json!({"type": "object", "properties": properties});
            assert!(annotations(&schema).is_err(), "{schema}");
        }
        assert_eq!(annotations(&json!({"type": "object"})), Ok(Vec::new()));
    }
}

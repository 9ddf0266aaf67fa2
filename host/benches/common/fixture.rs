//! The form fixture the engine and validation benchmarks share: every kind of field of the MCP
//! form subset (the same form as `tests/support`'s `every_kind_schema`).

use serde_json::{Value, json};

/// The every-kind form.
pub fn every_kind_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 2, "maxLength": 10},
            "email": {"type": "string", "format": "email"},
            "site": {"type": "string", "format": "uri"},
            "day": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "date-time"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "score": {"type": "number", "minimum": 0.5, "maximum": 9.5},
            "agree": {"type": "boolean"},
            "color": {"type": "string", "enum": ["red", "green"], "enumNames": ["Red", "Green"]},
            "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 2}
        },
        "required": ["name", "age"]
    })
}

/// A valid answer to it with every field.
pub fn every_kind_answer() -> Value {
    json!({
        "name": "Asha", "email": "asha@example.com", "site": "https://example.com/x",
        "day": "2026-11-30", "at": "2026-11-30T12:00:00Z", "age": 30, "score": 2.5,
        "agree": true, "color": "red", "size": "s", "tags": ["a", "b"]
    })
}

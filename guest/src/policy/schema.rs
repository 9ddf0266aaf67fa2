//! The MCP form subset of JSON Schema, and compiled validators for it.
//!
//! A server's `requestedSchema` is accepted only if it is a flat object whose properties are
//! primitives (string, number, integer, boolean, single-select enum, multi-select string array).
//! Everything else is refused with `unsupported-schema`, and every size is bounded, so a hostile
//! schema costs milliseconds, never a hang.

use crate::errors::{Result, validation};
use crate::m3::managed_input::types::ErrorCode;
use crate::strict_json;
use jsonschema::Validator;
use serde_json::{Map, Value, json};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Largest schema text accepted, in bytes.
pub const MAX_SCHEMA_BYTES: usize = 256 * 1024;
/// Most properties in one form.
pub const MAX_PROPERTIES: usize = 256;
/// Most choices in one enum.
pub const MAX_ENUM_VALUES: usize = 1024;
/// Longest title, description, choice or default text, in bytes.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;
/// How many compiled validators one instance keeps.
const CACHE_CAPACITY: usize = 64;

/// Keywords that only annotate and may appear anywhere.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "$comment",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// The formats of the MCP form subset.
const FORMATS: &[&str] = &["email", "uri", "date", "date-time"];

fn unsupported(message: impl Into<String>) -> crate::m3::managed_input::types::ManagedInputError {
    validation(ErrorCode::UnsupportedSchema, message)
}

/// Parses and checks a `requestedSchema`, returning the parsed schema.
pub fn check_requested_schema(text: &str) -> Result<Value> {
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(validation(
            ErrorCode::PayloadTooLarge,
            format!(
                "requestedSchema is {} bytes; the limit is {MAX_SCHEMA_BYTES}",
                text.len()
            ),
        ));
    }
    let schema = strict_json::parse(text).map_err(|e| {
        validation(
            ErrorCode::MalformedJson,
            format!("requestedSchema: {}", e.0),
        )
    })?;
    check_schema_value(&schema)?;
    Ok(schema)
}

fn check_schema_value(schema: &Value) -> Result<()> {
    let top = schema
        .as_object()
        .ok_or_else(|| unsupported("requestedSchema must be a JSON object"))?;
    for (keyword, value) in top {
        match keyword.as_str() {
            "type" => {
                if value != "object" {
                    return Err(unsupported("requestedSchema `type` must be \"object\""));
                }
            }
            "properties" | "required" => {}
            "$schema" | "$id" => {
                if !value.is_string() {
                    return Err(unsupported(format!("`{keyword}` must be a string")));
                }
            }
            "additionalProperties" => {
                if !value.is_boolean() {
                    return Err(unsupported(
                        "`additionalProperties` must be a boolean (nested schemas are not in the form subset)",
                    ));
                }
            }
            k if ANNOTATIONS.contains(&k) => check_annotation(k, value)?,
            other => {
                return Err(unsupported(format!(
                    "keyword `{}` is not in the MCP form subset",
                    crate::errors::bounded(other)
                )));
            }
        }
    }
    if top.get("type").is_none() {
        return Err(unsupported(
            "requestedSchema must declare \"type\": \"object\"",
        ));
    }
    let empty = Map::new();
    let properties = match top.get("properties") {
        None => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => return Err(unsupported("`properties` must be an object")),
    };
    if properties.len() > MAX_PROPERTIES {
        return Err(unsupported(format!(
            "{} properties; the limit is {MAX_PROPERTIES}",
            properties.len()
        )));
    }
    for (name, property) in properties {
        if name.is_empty() || name.len() > 256 {
            return Err(unsupported("property names must be 1 to 256 bytes"));
        }
        check_property(name, property)?;
    }
    if let Some(required) = top.get("required") {
        let list = required
            .as_array()
            .ok_or_else(|| unsupported("`required` must be an array of property names"))?;
        let mut seen = std::collections::BTreeSet::new();
        for entry in list {
            let name = entry
                .as_str()
                .ok_or_else(|| unsupported("`required` must list property names"))?;
            if !properties.contains_key(name) {
                return Err(unsupported(format!(
                    "`required` names `{}`, which is not a property",
                    crate::errors::bounded(name)
                )));
            }
            if !seen.insert(name) {
                return Err(unsupported("`required` lists a property twice"));
            }
        }
    }
    Ok(())
}

fn check_annotation(keyword: &str, value: &Value) -> Result<()> {
    let size = match value {
        Value::String(s) => s.len(),
        Value::Bool(_) => 0,
        Value::Array(items) if keyword == "examples" => serde_json::to_string(items)
            .map(|s| s.len())
            .unwrap_or(usize::MAX),
        _ => {
            return Err(unsupported(format!(
                "annotation `{keyword}` has an unexpected type"
            )));
        }
    };
    if size > MAX_TEXT_BYTES {
        return Err(unsupported(format!(
            "annotation `{keyword}` is {size} bytes; the limit is {MAX_TEXT_BYTES}"
        )));
    }
    Ok(())
}

fn check_property(name: &str, property: &Value) -> Result<()> {
    let shown = crate::errors::bounded(name);
    let object = property
        .as_object()
        .ok_or_else(|| unsupported(format!("property `{shown}` must be a schema object")))?;
    let kind = object.get("type").and_then(Value::as_str).ok_or_else(|| {
        unsupported(format!(
            "property `{shown}` must declare a primitive `type`"
        ))
    })?;
    let allowed: &[&str] = match kind {
        "string" => &[
            "type",
            "minLength",
            "maxLength",
            "format",
            "default",
            "enum",
            "enumNames",
            "oneOf",
        ],
        "number" | "integer" => &["type", "minimum", "maximum", "default"],
        "boolean" => &["type", "default"],
        "array" => &[
            "type",
            "items",
            "minItems",
            "maxItems",
            "uniqueItems",
            "default",
        ],
        _ => {
            return Err(unsupported(format!(
                "property `{shown}` has type `{}`; the form subset allows string, number, integer, boolean and array",
                crate::errors::bounded(kind)
            )));
        }
    };
    for (keyword, value) in object {
        if ANNOTATIONS.contains(&keyword.as_str()) {
            check_annotation(keyword, value)?;
            continue;
        }
        if !allowed.contains(&keyword.as_str()) {
            return Err(unsupported(format!(
                "property `{shown}`: keyword `{}` is not in the MCP form subset for {kind}",
                crate::errors::bounded(keyword)
            )));
        }
        let ok = match keyword.as_str() {
            "minLength" | "maxLength" | "minItems" | "maxItems" => value.is_u64(),
            "minimum" | "maximum" => value.is_number(),
            "uniqueItems" => value.is_boolean(),
            "format" => value.as_str().is_some_and(|f| FORMATS.contains(&f)),
            "default" => match kind {
                "string" => value.as_str().is_some_and(|s| s.len() <= MAX_TEXT_BYTES),
                "number" => value.is_number(),
                "integer" => value.is_i64() || value.is_u64(),
                "boolean" => value.is_boolean(),
                _ => value
                    .as_array()
                    .is_some_and(|a| a.iter().all(Value::is_string)),
            },
            "enum" | "enumNames" => string_list(value),
            "oneOf" => titled_consts(value),
            "items" => check_items(value),
            _ => true,
        };
        if !ok {
            return Err(unsupported(format!(
                "property `{shown}`: `{keyword}` is not valid for the MCP form subset"
            )));
        }
    }
    if kind == "array" && object.get("items").is_none() {
        return Err(unsupported(format!(
            "property `{shown}`: a multi-select needs `items` with its choices"
        )));
    }
    if let (Some(Value::Array(values)), Some(Value::Array(names))) =
        (object.get("enum"), object.get("enumNames"))
        && values.len() != names.len()
    {
        return Err(unsupported(format!(
            "property `{shown}`: `enumNames` must match `enum` in length"
        )));
    }
    Ok(())
}

fn string_list(value: &Value) -> bool {
    value.as_array().is_some_and(|items| {
        !items.is_empty()
            && items.len() <= MAX_ENUM_VALUES
            && items
                .iter()
                .all(|v| v.as_str().is_some_and(|s| s.len() <= MAX_TEXT_BYTES))
    })
}

fn titled_consts(value: &Value) -> bool {
    value.as_array().is_some_and(|items| {
        !items.is_empty()
            && items.len() <= MAX_ENUM_VALUES
            && items.iter().all(|item| {
                item.as_object().is_some_and(|o| {
                    o.get("const")
                        .and_then(Value::as_str)
                        .is_some_and(|s| s.len() <= MAX_TEXT_BYTES)
                        && o.iter().all(|(k, v)| match k.as_str() {
                            "const" => true,
                            "title" | "description" => {
                                v.as_str().is_some_and(|s| s.len() <= MAX_TEXT_BYTES)
                            }
                            _ => false,
                        })
                })
            })
    })
}

fn check_items(value: &Value) -> bool {
    let Some(items) = value.as_object() else {
        return false;
    };
    items.iter().all(|(k, v)| match k.as_str() {
        "type" => v == "string",
        "enum" => string_list(v),
        "anyOf" | "oneOf" => titled_consts(v),
        k => ANNOTATIONS.contains(&k) && check_annotation(k, v).is_ok(),
    }) && (items.contains_key("enum") || items.contains_key("anyOf") || items.contains_key("oneOf"))
}

/// The schema actually enforced on answers: the server's, with unknown fields refused unless the
/// server explicitly allowed them, and annotation-only keywords dropped. (Public so that the
/// benchmark's native baseline enforces exactly the same schema.)
pub fn enforced_schema(schema: &Value) -> Value {
    let mut enforced = schema.clone();
    if let Some(top) = enforced.as_object_mut() {
        top.remove("$schema");
        top.remove("$id");
        top.entry("additionalProperties").or_insert(json!(false));
        if let Some(Value::Object(properties)) = top.get_mut("properties") {
            for property in properties.values_mut() {
                if let Some(p) = property.as_object_mut() {
                    p.remove("enumNames");
                    p.remove("default");
                }
            }
        }
    }
    enforced
}

/// Compiled validators by schema text. Hashed with foldhash (fast) under a per-instance seed from
/// `wasi:random` (foldhash's own default seed reads the wall clock, which the sandbox forbids); a
/// hit still compares the whole text, so a colliding schema can never borrow another schema's
/// validator.
type ValidatorCache = HashMap<String, Rc<FormCheck>, foldhash::fast::FixedState>;

/// A checked form schema, ready to validate answers.
pub struct FormCheck {
    /// The compiled validator: JSON Schema for everything but numbers, whose fields it sees as
    /// plain `{"type": "number"}` (it would compare them as doubles, which change `1e-400`,
    /// `1e400` and every digit past the 17th).
    pub validator: Validator,
    /// The properties of type `number` or `integer`, checked exactly after the validator
    /// (sorted by name): integer-ness and bounds by decimal value (`canonical::compare`).
    pub number_fields: Vec<NumberField>,
}

impl FormCheck {
    /// Whether `content` satisfies the whole schema: the validator, then the numbers, exactly.
    pub fn is_valid(&self, content: &Value) -> bool {
        self.validator.is_valid(content) && self.number_violation(content).is_none()
    }

    /// The first numeric field of `content` (in name order) its schema cannot accept, and the
    /// keyword it breaks (`type`: not an integer, `minimum`, `maximum`), judged by exact decimal
    /// values: an integer field's number must have no fraction at all, and bounds compare
    /// without a double, so a number of any size or precision is judged as written.
    pub fn number_violation(&self, content: &Value) -> Option<(&str, &'static str)> {
        use crate::canonical::{compare, decimal};
        use std::cmp::Ordering::{Greater, Less};
        self.number_fields.iter().find_map(|field| {
            let n = content.get(&field.name)?.as_number()?;
            let keyword = if field.integer && decimal(n).2 < 0 {
                "type"
            } else if field
                .minimum
                .as_ref()
                .is_some_and(|m| compare(n, m) == Less)
            {
                "minimum"
            } else if field
                .maximum
                .as_ref()
                .is_some_and(|m| compare(n, m) == Greater)
            {
                "maximum"
            } else {
                return None;
            };
            Some((field.name.as_str(), keyword))
        })
    }
}

/// A `number` or `integer` property and its bounds, checked exactly.
pub struct NumberField {
    /// The property's name.
    pub name: String,
    /// `integer`: no fraction at all (`1.0` and `1e2` are integers, `5.0000000000000000001`
    /// is not).
    pub integer: bool,
    /// `minimum` (inclusive).
    pub minimum: Option<serde_json::Number>,
    /// `maximum` (inclusive).
    pub maximum: Option<serde_json::Number>,
}

/// The numeric properties of a checked schema.
fn number_fields(schema: &Value) -> Vec<NumberField> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .filter_map(|(name, p)| {
            let integer = match p.get("type").and_then(Value::as_str) {
                Some("integer") => true,
                Some("number") => false,
                _ => return None,
            };
            let bound = |k: &str| p.get(k).and_then(Value::as_number).cloned();
            Some(NumberField {
                name: name.clone(),
                integer,
                minimum: bound("minimum"),
                maximum: bound("maximum"),
            })
        })
        .collect()
}

/// What the compiled validator checks: the enforced schema with every numeric property reduced
/// to `{"type": "number"}` (its type and bounds are checked exactly, [`NumberField`]).
fn validator_schema(schema: &Value) -> Value {
    let mut enforced = enforced_schema(schema);
    if let Some(Value::Object(properties)) = enforced.get_mut("properties") {
        for property in properties.values_mut() {
            if matches!(
                property.get("type").and_then(Value::as_str),
                Some("number" | "integer")
            ) {
                *property = json!({"type": "number"});
            }
        }
    }
    enforced
}

fn new_cache() -> ValidatorCache {
    let mut seed = [0u8; 8];
    // Without randomness the seed is fixed; correctness never depends on it.
    let _ = getrandom::fill(&mut seed);
    ValidatorCache::with_hasher(foldhash::fast::FixedState::with_seed(u64::from_le_bytes(
        seed,
    )))
}

thread_local! {
    static CACHE: RefCell<ValidatorCache> = RefCell::new(new_cache());
}

/// A compiled validator for a checked schema, cached by the schema's text for the life of this
/// instance (compiling costs far more inside the component than validating).
pub fn validator_for(schema_text: &str) -> Result<Rc<FormCheck>> {
    if let Some(found) = CACHE.with(|c| c.borrow().get(schema_text).cloned()) {
        return Ok(found);
    }
    let schema = check_requested_schema(schema_text)?;
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&validator_schema(&schema))
        .map_err(|_| unsupported("requestedSchema could not be compiled"))?;
    let validator = Rc::new(FormCheck {
        validator,
        number_fields: number_fields(&schema),
    });
    CACHE.with(|c| {
        let mut cache = c.borrow_mut();
        if cache.len() >= CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(schema_text.to_string(), validator.clone());
    });
    Ok(validator)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(schema: Value) {
        check_schema_value(&schema).unwrap_or_else(|e| panic!("{schema}: {e:?}"));
    }

    fn refused(schema: Value) {
        assert!(check_schema_value(&schema).is_err(), "accepted {schema}");
    }

    #[test]
    fn every_primitive_of_the_form_subset_is_accepted() {
        ok(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object", "title": "T", "description": "D",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 50, "title": "Name", "default": "x"},
                "email": {"type": "string", "format": "email"},
                "site": {"type": "string", "format": "uri"},
                "day": {"type": "string", "format": "date"},
                "at": {"type": "string", "format": "date-time"},
                "age": {"type": "integer", "minimum": 0, "maximum": 150, "default": 3},
                "score": {"type": "number", "minimum": 0.5, "maximum": 9.5},
                "ok": {"type": "boolean", "default": false},
                "color": {"type": "string", "enum": ["red", "green"], "enumNames": ["Red", "Green"]},
                "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 1, "maxItems": 2},
                "more": {"type": "array", "items": {"anyOf": [{"const": "x", "title": "X"}]}}
            },
            "required": ["name", "age"]
        }));
        ok(json!({"type": "object", "properties": {}}));
    }

    #[test]
    fn nesting_refs_patterns_and_unknown_keywords_are_refused() {
        refused(
            json!({"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}),
        );
        refused(
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {}}}),
        );
        refused(
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}),
        );
        refused(
            json!({"type": "object", "properties": {"a": {"type": "string", "format": "ipv4"}}}),
        );
        refused(json!({"type": "object", "allOf": []}));
        refused(json!({"type": "array"}));
        refused(json!({"properties": {}}));
        refused(
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}),
        );
        refused(
            json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}),
        );
        refused(json!({"type": "object", "additionalProperties": {"type": "string"}}));
    }

    #[test]
    fn oversized_enums_and_texts_are_refused() {
        let many: Vec<String> = (0..=MAX_ENUM_VALUES).map(|i| i.to_string()).collect();
        refused(json!({"type": "object", "properties": {"a": {"type": "string", "enum": many}}}));
        let long = "x".repeat(MAX_TEXT_BYTES + 1);
        refused(json!({"type": "object", "description": long}));
        let props: Map<String, Value> = (0..=MAX_PROPERTIES)
            .map(|i| (format!("p{i}"), json!({"type": "boolean"})))
            .collect();
        refused(json!({"type": "object", "properties": props}));
    }
}

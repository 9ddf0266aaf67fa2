//! The terminal form for a pending round, built from each request's schema: typed fields, enum
//! choices, defaults filled in, required fields marked `*`, a re-prompt on a value that does not
//! fit its type or bounds. URL requests show the full URL and ask for consent; nothing is opened.

use anyhow::Result;
use dialoguer::{Input, MultiSelect, Select};
use m3::{ElicitationRequest, ElicitationResponse, PendingElicitationRound};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Asks for every request of `round` on the terminal.
pub fn ask_round(round: &PendingElicitationRound) -> Result<BTreeMap<String, ElicitationResponse>> {
    eprintln!();
    eprintln!(
        "{}:{} asks for input (round {})",
        round.server, round.operation_name, round.round_id
    );
    let mut answers = BTreeMap::new();
    for (key, request) in &round.requests {
        let answer = match request {
            ElicitationRequest::Form(form) => {
                eprintln!("[{key}] {}", form.message);
                match action(&["accept (fill in the form)", "decline", "cancel"])? {
                    0 => ElicitationResponse::accept(Value::Object(ask_form(
                        &form.requested_schema,
                    )?)),
                    1 => ElicitationResponse::decline(),
                    _ => ElicitationResponse::cancel(),
                }
            }
            ElicitationRequest::Url(url) => {
                eprintln!("[{key}] {}", url.message);
                eprintln!("  URL: {}", url.url);
                eprintln!("  (m3 never opens it: accepting records your consent only)");
                match action(&["accept (consent)", "decline", "cancel"])? {
                    0 => ElicitationResponse::accept_url(),
                    1 => ElicitationResponse::decline(),
                    _ => ElicitationResponse::cancel(),
                }
            }
        };
        answers.insert(key.clone(), answer);
    }
    Ok(answers)
}

fn action(items: &[&str]) -> Result<usize> {
    Ok(Select::new()
        .with_prompt("answer")
        .items(items)
        .default(0)
        .interact()?)
}

/// The choices of an enum property: `(value, label)`.
fn choices(prop: &Value) -> Option<Vec<(Value, String)>> {
    if let Some(values) = prop.get("enum").and_then(Value::as_array) {
        let names = prop.get("enumNames").and_then(Value::as_array);
        return Some(
            values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let label = names
                        .and_then(|n| n.get(i))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| plain(v));
                    (v.clone(), label)
                })
                .collect(),
        );
    }
    let options = prop
        .get("oneOf")
        .or_else(|| prop.get("anyOf"))
        .and_then(Value::as_array)?;
    Some(
        options
            .iter()
            .filter_map(|o| {
                let value = o.get("const")?.clone();
                let label = o
                    .get("title")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| plain(&value));
                Some((value, label))
            })
            .collect(),
    )
}

fn plain(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

fn ask_form(schema: &Value) -> Result<Map<String, Value>> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut content = Map::new();
    for (name, prop) in properties {
        let is_required = required.contains(&name.as_str());
        let title = prop.get("title").and_then(Value::as_str).unwrap_or(name);
        let mut label = format!("{title}{}", if is_required { " *" } else { "" });
        if let Some(description) = prop.get("description").and_then(Value::as_str) {
            label.push_str(&format!(" ({description})"));
        }
        if let Some(value) = ask_field(&label, prop, is_required)? {
            content.insert(name.clone(), value);
        }
    }
    Ok(content)
}

fn ask_field(label: &str, prop: &Value, required: bool) -> Result<Option<Value>> {
    let kind = prop.get("type").and_then(Value::as_str).unwrap_or("string");
    let default = prop.get("default");
    if kind == "array" {
        let items = prop.get("items").cloned().unwrap_or(Value::Null);
        let options = choices(&items).unwrap_or_default();
        let chosen: Vec<bool> = options
            .iter()
            .map(|(v, _)| {
                default
                    .and_then(Value::as_array)
                    .is_some_and(|d| d.contains(v))
            })
            .collect();
        let labels: Vec<&str> = options.iter().map(|(_, l)| l.as_str()).collect();
        let picked = MultiSelect::new()
            .with_prompt(format!("{label} (space to pick, enter to finish)"))
            .items(&labels)
            .defaults(&chosen)
            .interact()?;
        return Ok(Some(Value::Array(
            picked.into_iter().map(|i| options[i].0.clone()).collect(),
        )));
    }
    let options = if kind == "boolean" {
        Some(vec![
            (Value::Bool(true), "yes".into()),
            (Value::Bool(false), "no".into()),
        ])
    } else {
        choices(prop)
    };
    if let Some(mut options) = options {
        if !required {
            options.push((Value::Null, "(leave empty)".into()));
        }
        let start = default
            .and_then(|d| options.iter().position(|(v, _)| v == d))
            .unwrap_or(0);
        let labels: Vec<&str> = options.iter().map(|(_, l)| l.as_str()).collect();
        let index = Select::new()
            .with_prompt(label)
            .items(&labels)
            .default(start)
            .interact()?;
        let value = options.swap_remove(index).0;
        return Ok((!value.is_null()).then_some(value));
    }
    let (checked_prop, checked_kind) = (prop.clone(), kind.to_string());
    // Empty text always reaches the validator: dialoguer re-asks silently on an empty value it
    // does not allow, so a required field says why through `check_text` instead.
    let mut input = Input::<String>::new()
        .with_prompt(label)
        .allow_empty(true)
        .validate_with(move |text: &String| {
            check_text(&checked_kind, &checked_prop, text, required)
        });
    if let Some(d) = default {
        input = input.default(plain(d));
    }
    let text = input.interact_text()?;
    if text.is_empty() {
        return Ok(None);
    }
    Ok(Some(match kind {
        "integer" | "number" => serde_json::from_str(text.trim()).unwrap_or(Value::String(text)),
        _ => Value::String(text),
    }))
}

/// The value typed for a field of `kind`, or why it does not fit (the prompt asks again).
fn check_text(kind: &str, prop: &Value, text: &str, required: bool) -> Result<(), String> {
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
            Ok(())
        }
    }
}

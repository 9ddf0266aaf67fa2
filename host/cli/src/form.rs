//! The terminal form for a pending round, built from each request's schema: the fields in the
//! schema's order, typed fields, enum choices with their labels, defaults filled in, required
//! fields marked `*`, and a re-prompt of that field alone, with the reason, on a value that does
//! not fit its type, length, range or format (`field_check.rs`). URL requests show the full URL
//! and ask for consent; nothing is opened. A second try shows the values of the first.
//!
//! Ctrl-C in a prompt ends the form with [`Interrupted`] (the cursor shown again); the caller
//! decides what it means.

use crate::escaped::{line, lines};
use crate::field_check::check_text;
use anyhow::Result;
use dialoguer::{Input, MultiSelect, Select};
use m3::{ElicitationAction, ElicitationRequest, ElicitationResponse, PendingElicitationRound};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The person pressed Ctrl-C in the form: nothing of it is answered.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted (Ctrl-C)")
    }
}

impl std::error::Error for Interrupted {}

/// Whether `error` is a form that Ctrl-C ended.
pub fn interrupted(error: &anyhow::Error) -> bool {
    error.is::<Interrupted>()
}

/// Shows the terminal's cursor again (a choice list hides it while it is shown); nothing when
/// stderr is not a terminal (a script's stderr gets no escape sequence).
pub fn restore_terminal() {
    let term = console::Term::stderr();
    if term.is_term() {
        let _ = term.show_cursor();
    }
}

/// A prompt's outcome; Ctrl-C becomes [`Interrupted`], and any end but an answer shows the
/// cursor again.
fn answered<T>(outcome: dialoguer::Result<T>) -> Result<T> {
    outcome.map_err(|error| {
        restore_terminal();
        let dialoguer::Error::IO(io) = &error;
        if io.kind() == std::io::ErrorKind::Interrupted {
            anyhow::Error::new(Interrupted)
        } else {
            error.into()
        }
    })
}

/// Asks for every request of `round` on the terminal, in the order of its request keys.
/// `earlier`: the answers of a try the component refused, offered again as the starting values.
pub fn ask_round(
    round: &PendingElicitationRound,
    earlier: Option<&BTreeMap<String, ElicitationResponse>>,
) -> Result<BTreeMap<String, ElicitationResponse>> {
    eprintln!();
    // Everything shown here but m3's own words is the server's: its controls are shown as
    // escapes, never sent to the terminal (`escaped.rs`).
    eprintln!(
        "{} asks for input (round {})",
        line(&format!("{}:{}", round.server, round.operation_name)),
        round.round_id
    );
    let mut answers = BTreeMap::new();
    for (key, request) in &round.requests {
        let before = earlier.and_then(|e| e.get(key));
        let chosen = before.map_or(0, |b| match b.action {
            ElicitationAction::Accept => 0,
            ElicitationAction::Decline => 1,
            ElicitationAction::Cancel => 2,
        });
        let answer = match request {
            ElicitationRequest::Form(form) => {
                eprintln!("[{}] {}", line(key), lines(&form.message));
                match action(&["accept (fill in the form)", "decline", "cancel"], chosen)? {
                    0 => {
                        let content = before
                            .and_then(|b| b.content.as_ref())
                            .and_then(Value::as_object);
                        ElicitationResponse::accept(Value::Object(ask_form(
                            &form.requested_schema,
                            content,
                        )?))
                    }
                    1 => ElicitationResponse::decline(),
                    _ => ElicitationResponse::cancel(),
                }
            }
            ElicitationRequest::Url(url) => {
                eprintln!("[{}] {}", line(key), lines(&url.message));
                eprintln!("  URL: {}", line(&url.url));
                eprintln!("  (m3 never opens it: accepting records your consent only)");
                match action(&["accept (consent)", "decline", "cancel"], chosen)? {
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

fn action(items: &[&str], chosen: usize) -> Result<usize> {
    answered(
        Select::new()
            .with_prompt("answer")
            .items(items)
            .default(chosen)
            .interact(),
    )
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
                    (v.clone(), line(&label).into_owned())
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
                Some((value, line(&label).into_owned()))
            })
            .collect(),
    )
}

fn plain(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// What a format asks for, said after the field's label.
fn format_hint(format: &str) -> Option<&'static str> {
    match format {
        "date" => Some("YYYY-MM-DD"),
        "date-time" => Some("YYYY-MM-DDTHH:MM:SSZ"),
        "uri" => Some("a URI"),
        "email" => Some("an email address"),
        _ => None,
    }
}

/// Asks for the properties of `schema` in the order the server wrote them (the host keeps JSON
/// objects in their written order:
/// docs/decisions/0034-a-schemas-properties-keep-the-servers-order.md).
fn ask_form(schema: &Value, earlier: Option<&Map<String, Value>>) -> Result<Map<String, Value>> {
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
        let description = prop.get("description").and_then(Value::as_str);
        let hint = prop
            .get("format")
            .and_then(Value::as_str)
            .and_then(format_hint);
        match (description, hint) {
            (Some(d), Some(h)) => label.push_str(&format!(" ({d}; {h})")),
            (Some(d), None) => label.push_str(&format!(" ({d})")),
            (None, Some(h)) => label.push_str(&format!(" ({h})")),
            (None, None) => {}
        }
        let label = line(&label).into_owned();
        // `Some(None)`: the earlier try left this field empty.
        let before = earlier.map(|e| e.get(name));
        if let Some(value) = ask_field(&label, prop, is_required, before)? {
            content.insert(name.clone(), value);
        }
    }
    Ok(content)
}

fn ask_field(
    label: &str,
    prop: &Value,
    required: bool,
    before: Option<Option<&Value>>,
) -> Result<Option<Value>> {
    let kind = prop.get("type").and_then(Value::as_str).unwrap_or("string");
    let default = prop.get("default");
    if kind == "array" {
        let items = prop.get("items").cloned().unwrap_or(Value::Null);
        let options = choices(&items).unwrap_or_default();
        let start = before.unwrap_or(default).and_then(Value::as_array);
        let chosen: Vec<bool> = options
            .iter()
            .map(|(v, _)| start.is_some_and(|d| d.contains(v)))
            .collect();
        let labels: Vec<&str> = options.iter().map(|(_, l)| l.as_str()).collect();
        let picked = answered(
            MultiSelect::new()
                .with_prompt(format!("{label} (space to pick, enter to finish)"))
                .items(&labels)
                .defaults(&chosen)
                .interact(),
        )?;
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
        let position = |wanted: &Value| options.iter().position(|(v, _)| v == wanted);
        let start = match before {
            // An absent value is "(leave empty)" when the field offers it.
            Some(b) => position(b.unwrap_or(&Value::Null)),
            None => default.and_then(position),
        }
        .unwrap_or(0);
        let labels: Vec<&str> = options.iter().map(|(_, l)| l.as_str()).collect();
        let index = answered(
            Select::new()
                .with_prompt(label)
                .items(&labels)
                .default(start)
                .interact(),
        )?;
        let value = options.swap_remove(index).0;
        return Ok((!value.is_null()).then_some(value));
    }
    let (checked_prop, checked_kind) = (prop.clone(), kind.to_string());
    // Empty text always reaches the validator: dialoguer re-asks silently on an empty value it
    // does not allow, so a required field says why through `check_text` instead. A value that
    // does not fit is refused here, and only this field is asked again.
    let mut input = Input::<String>::new()
        .with_prompt(label)
        .allow_empty(true)
        .validate_with(move |text: &String| {
            check_text(&checked_kind, &checked_prop, text, required)
        });
    match (before, default) {
        // The value typed on the try before, ready to edit.
        (Some(Some(b)), _) => input = input.with_initial_text(plain(b)),
        (Some(None), _) | (None, None) => {}
        (None, Some(d)) => input = input.default(plain(d)),
    }
    let text = answered(input.interact_text())?;
    if text.is_empty() {
        return Ok(None);
    }
    Ok(Some(match kind {
        "integer" | "number" => serde_json::from_str(text.trim()).unwrap_or(Value::String(text)),
        _ => Value::String(text),
    }))
}

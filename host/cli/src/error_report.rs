//! How a failed command reports itself: the typed error's name first, whatever the cause, as a
//! line of text or (with `--json`) one JSON object on stderr,
//! `{"error": {"type", "code", "message"}}`.
//!
//! The type and code come from the library's typed errors where the error is one of them
//! (`ManagedInputError`, `ExecutionError`, `OpenError`, ...), else from the `Type: ` prefix the
//! command's own errors carry; an error with neither (a bug) is reported as an `EngineError`.

use m3::{ExecutionError, ExecutionStoreError, ManagedInputError, OpenError};
use serde_json::json;

/// The typed errors a command's first stderr line may name.
pub const TYPE_NAMES: &[&str] = &[
    "ManagedInputValidationError",
    "ManagedInputConflict",
    "ManagedInputStateError",
    "ManagedInputRecoveryError",
    "ModelValidationError",
    "OperationTimeout",
    "StorageError",
    "EngineError",
];

/// A failure as the command reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    /// One of [`TYPE_NAMES`].
    pub type_name: &'static str,
    /// The machine-readable reason (`round_not_found`, `database_missing`, ...), where known.
    pub code: Option<String>,
    /// The message without the type's name.
    pub message: String,
}

impl Reported {
    /// The first stderr line: `Type: message`.
    pub fn line(&self) -> String {
        format!("{}: {}", self.type_name, self.message)
    }

    /// The `--json` form.
    pub fn json(&self) -> serde_json::Value {
        json!({"error": {"type": self.type_name, "code": self.code, "message": self.message}})
    }
}

/// The type, code and message of `error`.
pub fn classify(error: &anyhow::Error) -> Reported {
    let text = error.to_string();
    let (type_name, message) = split_type(&text);
    let code = typed_code(error).or_else(|| trailing_code(message));
    match type_name {
        Some(type_name) => Reported {
            type_name,
            code,
            message: message.to_string(),
        },
        None => Reported {
            type_name: "EngineError",
            code,
            message: format!("m3 failed unexpectedly: {text}"),
        },
    }
}

/// `("Type", "message")` when `text` starts with a typed error's name.
fn split_type(text: &str) -> (Option<&'static str>, &str) {
    for name in TYPE_NAMES {
        if let Some(rest) = text
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(": "))
        {
            return (Some(name), rest);
        }
    }
    (None, text)
}

/// The code of a library error anywhere in the chain.
fn typed_code(error: &anyhow::Error) -> Option<String> {
    for cause in error.chain() {
        if let Some(e) = cause.downcast_ref::<ManagedInputError>() {
            return e.code().map(|c| c.as_str().to_string());
        }
        match cause.downcast_ref::<ExecutionError>() {
            Some(ExecutionError::ManagedInput(e)) => {
                return e.code().map(|c| c.as_str().to_string());
            }
            Some(ExecutionError::Store(ExecutionStoreError::Open(e))) => return open_code(e),
            _ => {}
        }
        if let Some(ExecutionStoreError::Open(e)) = cause.downcast_ref::<ExecutionStoreError>() {
            return open_code(e);
        }
        if let Some(e) = cause.downcast_ref::<OpenError>() {
            return open_code(e);
        }
    }
    None
}

/// The request key and content field a library error names, where it names them.
pub fn location(error: &anyhow::Error) -> (Option<String>, Option<String>) {
    for cause in error.chain() {
        let found = cause.downcast_ref::<ManagedInputError>().or(
            match cause.downcast_ref::<ExecutionError>() {
                Some(ExecutionError::ManagedInput(e)) => Some(e),
                _ => None,
            },
        );
        let detail = match found {
            Some(ManagedInputError::Validation(e)) => &e.detail,
            Some(ManagedInputError::Conflict(e)) => &e.detail,
            Some(ManagedInputError::State(e)) => &e.detail,
            _ => continue,
        };
        return (detail.request_key.clone(), detail.field.clone());
    }
    (None, None)
}

/// The code of a database that could not be opened.
fn open_code(error: &OpenError) -> Option<String> {
    error.code().map(str::to_string)
}

/// A `(snake_case_code)` at the end of a message (`... (malformed_json)`), as the command's own
/// errors and the library's details write it.
fn trailing_code(message: &str) -> Option<String> {
    let inner = message.trim_end().strip_suffix(')')?;
    let start = inner.rfind('(')?;
    let code = &inner[start + 1..];
    let well_formed = !code.is_empty()
        && code.contains('_')
        && code
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    well_formed.then(|| code.to_string())
}

/// Whether `--json` is on the command line, for errors found before it could be parsed.
pub fn json_requested() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// Writes `reported` (and, in text, the causes below it) to stderr.
pub fn print(reported: &Reported, causes: &[String], json: bool) {
    if json {
        eprintln!("{}", crate::json_text(&reported.json(), true));
        return;
    }
    // An error's text may quote a server or a file: its controls are shown, never obeyed.
    let first = reported.line();
    eprintln!("{}", crate::escaped::lines(&first));
    for cause in causes {
        if !first.contains(cause.as_str()) {
            eprintln!("  caused by: {}", crate::escaped::lines(cause));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_prefix_gives_the_type_and_a_trailing_code() {
        let e =
            anyhow::anyhow!("ManagedInputValidationError: --answer is not JSON (malformed_json)");
        let r = classify(&e);
        assert_eq!(r.type_name, "ManagedInputValidationError");
        assert_eq!(r.code.as_deref(), Some("malformed_json"));
        assert_eq!(r.message, "--answer is not JSON (malformed_json)");
        assert_eq!(r.line(), e.to_string());
    }

    #[test]
    fn an_untyped_error_is_an_engine_error() {
        let e = anyhow::anyhow!("something odd (not a code)");
        let r = classify(&e);
        assert_eq!(r.type_name, "EngineError");
        assert_eq!(r.code, None);
        assert!(
            r.line()
                .starts_with("EngineError: m3 failed unexpectedly: something odd")
        );
    }

    #[test]
    fn library_errors_give_their_own_code() {
        let e: anyhow::Error = OpenError::Incompatible("not an m3 database".into()).into();
        let r = classify(&e);
        assert_eq!(r.type_name, "StorageError");
        assert_eq!(r.code.as_deref(), Some("incompatible_database"));
        let v = r.json();
        assert_eq!(v["error"]["type"], "StorageError");
        assert_eq!(v["error"]["code"], "incompatible_database");
    }
}

//! What the host checks and finds for the `claude-code` harness at submission: that the program
//! is the Claude Code CLI, and where the user's Claude Code sign-in is. Never reads a secret's
//! value into an error or a log: only whether a sign-in exists and its kind.

use super::agent::ClaudeCodeCredentials;
use super::harness_binary::{self, VersionCheck};
use crate::api::submission::ModelValidationError;
use std::path::{Path, PathBuf};

/// The variables Claude Code reads the model's key from (`x-api-key`, or a bearer token): the
/// kit's `env` gives them to Claude Code, and the component has the MCP server see them empty.
pub const KEY_VARIABLES: &[&str] = &["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"];

/// The sign-in file of a Claude Code configuration directory.
pub const CREDENTIALS_FILE: &str = ".credentials.json";

/// Checks that `binary` is the Claude Code CLI: `--version` prints `<version> (Claude Code)`. A
/// program that is something else (or does not answer) is a [`ModelValidationError`] naming it.
pub fn check_binary(binary: &Path) -> Result<String, ModelValidationError> {
    harness_binary::check(
        binary,
        &VersionCheck {
            what: "the Claude Code CLI",
            form: "<version> (Claude Code)",
            parse: |line| line.strip_suffix(" (Claude Code)").map(str::to_string),
        },
    )
}

/// The configuration directory whose sign-in an execution receives: the user's
/// (`$CLAUDE_CONFIG_DIR` of this process, else `~/.claude`) when it exists, a given one
/// (relative to `base`, else the working directory; it must be a directory), or none.
pub fn credentials_dir(
    credentials: &ClaudeCodeCredentials,
    base: Option<&Path>,
) -> Result<Option<PathBuf>, ModelValidationError> {
    match credentials {
        ClaudeCodeCredentials::None => Ok(None),
        ClaudeCodeCredentials::UserConfig => Ok(user_config_dir().filter(|dir| dir.is_dir())),
        ClaudeCodeCredentials::From(dir) => {
            harness_binary::sign_in_dir(dir, base, "the Claude Code configuration directory")
                .map(Some)
        }
    }
}

/// `$CLAUDE_CONFIG_DIR` of this process, else `~/.claude`.
pub fn user_config_dir() -> Option<PathBuf> {
    match std::env::var_os("CLAUDE_CONFIG_DIR") {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => dirs::home_dir().map(|home| home.join(".claude")),
    }
}

/// What kind of Claude Code sign-in a configuration directory holds (never its value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaudeCodeSignIn {
    /// No `.credentials.json`.
    Missing,
    /// A Claude account (`claudeAiOauth` in `.credentials.json`).
    Account,
    /// A `.credentials.json` this release cannot read.
    Unreadable(String),
}

impl std::fmt::Display for ClaudeCodeSignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing => f.write_str("no sign-in (.credentials.json)"),
            Self::Account => f.write_str("a Claude account sign-in"),
            Self::Unreadable(why) => write!(f, "an unreadable .credentials.json ({why})"),
        }
    }
}

/// The sign-in in `dir/.credentials.json`.
pub fn sign_in(dir: &Path) -> ClaudeCodeSignIn {
    let path = dir.join(CREDENTIALS_FILE);
    let text = match crate::process::home::read_source(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return ClaudeCodeSignIn::Missing,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return ClaudeCodeSignIn::Unreadable(e.to_string());
        }
        Err(e) => return ClaudeCodeSignIn::Unreadable(e.kind().to_string()),
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&text) else {
        return ClaudeCodeSignIn::Unreadable("not JSON".into());
    };
    if value.get("claudeAiOauth").is_some_and(|v| v.is_object()) {
        ClaudeCodeSignIn::Account
    } else {
        ClaudeCodeSignIn::Unreadable("no claudeAiOauth sign-in".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host gives the model's key to Claude Code under these names and the component has the
    /// MCP server see the same names empty: the two lists are one.
    #[test]
    fn the_key_variables_are_the_ones_the_component_empties_for_the_server() {
        assert_eq!(
            KEY_VARIABLES,
            m3_guest::runtime::claude_code::CREDENTIAL_VARIABLES
        );
    }

    #[test]
    fn sign_ins_are_told_apart_without_their_values() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(sign_in(dir.path()), ClaudeCodeSignIn::Missing);
        let path = dir.path().join(CREDENTIALS_FILE);
        std::fs::write(&path, r#"{"claudeAiOauth":{"accessToken":"sk-ant-oat-1"}}"#).unwrap();
        assert_eq!(sign_in(dir.path()), ClaudeCodeSignIn::Account);
        std::fs::write(&path, "sk-ant-secret").unwrap();
        let told = sign_in(dir.path()).to_string();
        assert!(!told.contains("sk-ant-secret"), "{told}");
    }

    #[test]
    fn a_program_that_is_not_claude_code_is_refused() {
        let e = check_binary(Path::new("/bin/true")).unwrap_err();
        assert!(
            e.message.contains("is not the Claude Code CLI"),
            "{}",
            e.message
        );
        let e = check_binary(Path::new("/nonexistent/claude")).unwrap_err();
        assert!(e.message.contains("/nonexistent/claude"), "{}", e.message);
    }

    #[test]
    fn a_given_configuration_directory_must_be_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            credentials_dir(&ClaudeCodeCredentials::From(dir.path().into()), None).unwrap(),
            Some(dir.path().to_path_buf())
        );
        let missing = ClaudeCodeCredentials::From(dir.path().join("no"));
        assert!(credentials_dir(&missing, None).is_err());
        assert_eq!(
            credentials_dir(&ClaudeCodeCredentials::None, None).unwrap(),
            None
        );
    }
}

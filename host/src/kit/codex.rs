//! What the host checks and finds for the `codex` harness at submission: that the program is
//! the Codex CLI, and where the user's Codex sign-in is. Never reads a secret's value into an
//! error or a log: only whether a sign-in exists and its kind.

use super::agent::CodexCredentials;
use super::harness_binary::{self, VersionCheck};
use crate::api::submission::ModelValidationError;
use std::path::{Path, PathBuf};

/// Checks that `binary` is the Codex CLI: `--version` prints `codex-cli <version>`. A program
/// that is something else (or does not answer) is a [`ModelValidationError`] naming it.
pub fn check_binary(binary: &Path) -> Result<String, ModelValidationError> {
    harness_binary::check(
        binary,
        &VersionCheck {
            what: "the Codex CLI",
            form: "codex-cli <version>",
            parse: |line| line.strip_prefix("codex-cli ").map(str::to_string),
        },
    )
}

/// The Codex home whose sign-in an execution receives: the user's (`$CODEX_HOME` of this
/// process, else `~/.codex`) when it exists, a given one (relative to `base`, else the working
/// directory; it must be a directory), or none.
pub fn credentials_home(
    credentials: &CodexCredentials,
    base: Option<&Path>,
) -> Result<Option<PathBuf>, ModelValidationError> {
    match credentials {
        CodexCredentials::None => Ok(None),
        CodexCredentials::UserHome => Ok(user_codex_home().filter(|dir| dir.is_dir())),
        CodexCredentials::From(dir) => {
            harness_binary::sign_in_dir(dir, base, "the Codex home").map(Some)
        }
    }
}

/// `$CODEX_HOME` of this process, else `~/.codex`.
pub fn user_codex_home() -> Option<PathBuf> {
    match std::env::var_os("CODEX_HOME") {
        Some(home) if !home.is_empty() => Some(PathBuf::from(home)),
        _ => dirs::home_dir().map(|home| home.join(".codex")),
    }
}

/// What kind of Codex sign-in a home holds (never its value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodexSignIn {
    /// No `auth.json`.
    Missing,
    /// An API key (`OPENAI_API_KEY` in `auth.json`).
    ApiKey,
    /// A ChatGPT account (tokens in `auth.json`).
    Account,
    /// An `auth.json` this release cannot read.
    Unreadable(String),
}

impl std::fmt::Display for CodexSignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing => f.write_str("no sign-in (auth.json)"),
            Self::ApiKey => f.write_str("an API-key sign-in"),
            Self::Account => f.write_str("a ChatGPT account sign-in"),
            Self::Unreadable(why) => write!(f, "an unreadable auth.json ({why})"),
        }
    }
}

/// The sign-in in `home/auth.json`.
pub fn sign_in(home: &Path) -> CodexSignIn {
    let path = home.join("auth.json");
    // Read with a limit: a sign-in is a few KiB, and `auth.json` may be anything (a link to
    // `/dev/zero` included).
    let text = match crate::process::home::read_source(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return CodexSignIn::Missing,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return CodexSignIn::Unreadable(e.to_string());
        }
        Err(e) => return CodexSignIn::Unreadable(e.kind().to_string()),
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&text) else {
        return CodexSignIn::Unreadable("not JSON".into());
    };
    let present = |key: &str| value.get(key).is_some_and(|v| !v.is_null());
    if present("tokens") {
        CodexSignIn::Account
    } else if value
        .get("OPENAI_API_KEY")
        .and_then(serde_json::Value::as_str)
        .is_some_and(|k| !k.is_empty())
    {
        CodexSignIn::ApiKey
    } else {
        CodexSignIn::Unreadable("neither an API key nor account tokens".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_ins_are_told_apart_without_their_values() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(sign_in(dir.path()), CodexSignIn::Missing);
        std::fs::write(dir.path().join("auth.json"), r#"{"OPENAI_API_KEY":"sk-1"}"#).unwrap();
        assert_eq!(sign_in(dir.path()), CodexSignIn::ApiKey);
        std::fs::write(
            dir.path().join("auth.json"),
            r#"{"OPENAI_API_KEY":null,"tokens":{"id_token":"x"}}"#,
        )
        .unwrap();
        assert_eq!(sign_in(dir.path()), CodexSignIn::Account);
        std::fs::write(dir.path().join("auth.json"), "sk-secret").unwrap();
        let told = sign_in(dir.path()).to_string();
        assert!(!told.contains("sk-secret"), "{told}");
    }

    /// An endless `auth.json` (a link to `/dev/zero`) is read up to the limit, not whole.
    #[test]
    fn an_endless_sign_in_is_unreadable_not_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("auth.json")).unwrap();
        match sign_in(dir.path()) {
            CodexSignIn::Unreadable(why) => assert!(why.contains("larger than"), "{why}"),
            other => panic!("expected an unreadable sign-in, got {other:?}"),
        }
    }

    #[test]
    fn a_program_that_is_not_codex_is_refused() {
        let e = check_binary(Path::new("/bin/true")).unwrap_err();
        assert!(e.message.contains("is not the Codex CLI"), "{}", e.message);
        let e = check_binary(Path::new("/nonexistent/codex")).unwrap_err();
        assert!(e.message.contains("/nonexistent/codex"), "{}", e.message);
    }

    #[test]
    fn a_given_credentials_home_must_be_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            credentials_home(&CodexCredentials::From(dir.path().into()), None).unwrap(),
            Some(dir.path().to_path_buf())
        );
        assert!(credentials_home(&CodexCredentials::From(dir.path().join("no")), None).is_err());
        assert_eq!(
            credentials_home(&CodexCredentials::None, None).unwrap(),
            None
        );
    }
}

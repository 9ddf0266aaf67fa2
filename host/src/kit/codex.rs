//! What the host checks and finds for the `codex` harness at submission: that the program is
//! the Codex CLI, and where the user's Codex sign-in is. Never reads a secret's value into an
//! error or a log: only whether a sign-in exists and its kind.

use super::agent::CodexCredentials;
use crate::api::submission::ModelValidationError;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long `codex --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(20);

/// Checks that `binary` is the Codex CLI: `--version` prints `codex-cli <version>`. A program
/// that is something else (or does not answer) is a [`ModelValidationError`] naming it. The
/// answer is remembered per path and modification time.
pub fn check_binary(binary: &Path) -> Result<String, ModelValidationError> {
    static SEEN: Mutex<Option<HashMap<(PathBuf, std::time::SystemTime), String>>> =
        Mutex::new(None);
    let refused = |why: String| ModelValidationError {
        message: format!("`{}` is not the Codex CLI: {why}", binary.display()),
    };
    let modified = std::fs::metadata(binary)
        .and_then(|m| m.modified())
        .map_err(|e| refused(e.to_string()))?;
    let key = (binary.to_path_buf(), modified);
    if let Some(version) = SEEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|seen| seen.get(&key))
    {
        return Ok(version.clone());
    }
    let mut child = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .env_clear()
        .spawn()
        .map_err(|e| refused(format!("it cannot be started ({e})")))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < VERSION_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(refused(format!(
                    "`--version` did not answer within {} s",
                    VERSION_TIMEOUT.as_secs()
                )));
            }
        }
    };
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.by_ref().take(4096).read_to_string(&mut out);
    }
    let version = out
        .lines()
        .next()
        .and_then(|line| line.trim().strip_prefix("codex-cli "))
        .map(str::to_string);
    match version {
        Some(version) if status.success() => {
            SEEN.lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(HashMap::new)
                .insert(key, version.clone());
            Ok(version)
        }
        _ => Err(refused(format!(
            "`--version` did not print `codex-cli <version>` (exit status {status})"
        ))),
    }
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
            let dir = match (dir.is_absolute(), base) {
                (true, _) => dir.clone(),
                (false, Some(base)) => base.join(dir),
                (false, None) => std::env::current_dir()
                    .map_err(|e| ModelValidationError {
                        message: format!("the working directory cannot be read: {e}"),
                    })?
                    .join(dir),
            };
            if !dir.is_dir() {
                return Err(ModelValidationError {
                    message: format!(
                        "the Codex home to take the sign-in from, `{}`, is not a directory",
                        dir.display()
                    ),
                });
            }
            Ok(Some(dir))
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

//! What every agent harness's program and sign-in get at submission: `--version`, run with no
//! environment and a time limit, must print the harness's own version line (the answer is
//! remembered per path and modification time); a directory to take a sign-in from must be one.

use crate::api::submission::ModelValidationError;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long `--version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(20);

/// `dir` (relative to `base`, else the working directory) as an absolute path; it must be a
/// directory, else a [`ModelValidationError`] naming `what` it should be.
pub(crate) fn sign_in_dir(
    dir: &Path,
    base: Option<&Path>,
    what: &str,
) -> Result<PathBuf, ModelValidationError> {
    let dir = match (dir.is_absolute(), base) {
        (true, _) => dir.to_path_buf(),
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
                "{what} to take the sign-in from, `{}`, is not a directory",
                dir.display()
            ),
        });
    }
    Ok(dir)
}

/// A harness's program and how its version line reads.
pub(crate) struct VersionCheck {
    /// What the program must be (`the Codex CLI`).
    pub what: &'static str,
    /// The version line's form, for the refusal (`codex-cli <version>`).
    pub form: &'static str,
    /// The version from the first line of `--version`'s output, if it is the harness's.
    pub parse: fn(&str) -> Option<String>,
}

/// Runs `binary --version` and returns the version `check` finds in it; a program that is
/// something else (or does not answer) is a [`ModelValidationError`] naming it.
pub(crate) fn check(binary: &Path, check: &VersionCheck) -> Result<String, ModelValidationError> {
    type Seen = HashMap<(PathBuf, std::time::SystemTime), String>;
    static SEEN: Mutex<Option<Seen>> = Mutex::new(None);
    let refused = |why: String| ModelValidationError {
        message: format!("`{}` is not {}: {why}", binary.display(), check.what),
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
    // No environment: `--version` needs none, and the user's configuration is not read.
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
        .and_then(|line| (check.parse)(line.trim()));
    match version {
        Some(version) if status.success() => {
            SEEN.lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(HashMap::new)
                .insert(key, version.clone());
            Ok(version)
        }
        _ => Err(refused(format!(
            "`--version` did not print `{}` (exit status {status})",
            check.form
        ))),
    }
}

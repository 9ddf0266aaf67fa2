//! Where a submission's programs and working directories are, decided once, when it is
//! submitted, the way a subprocess API decides it: an absolute path as given, a relative path
//! against the caller's working directory at that moment, and a bare program name in the `PATH`
//! of the environment the child will get or, when that has none, in this process's `PATH`. The
//! child's environment itself stays exactly what it was given. The stored execution holds the
//! absolute results, so a worker started later (or a restart of this process in another
//! directory) runs the same program in the same place.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// Why a program or a directory cannot be used. Messages name the path the caller gave, never
/// an environment value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The program or directory name is empty or holds a NUL byte.
    #[error("the {what} is empty or holds a NUL byte")]
    Invalid {
        /// `program` or `working directory`.
        what: &'static str,
    },
    /// No such program.
    #[error("{what} `{given}` was not found{looked_in}")]
    NotFound {
        /// Which program (e.g. "the server's program").
        what: String,
        /// The name or path as given.
        given: String,
        /// Where a bare name was looked for.
        looked_in: &'static str,
    },
    /// The path exists but cannot be run.
    #[error("{what} `{given}` is not an executable file")]
    NotExecutable {
        /// Which program.
        what: String,
        /// The path as given.
        given: String,
    },
    /// The working directory does not exist or is not a directory.
    #[error("the working directory `{given}` is not a directory")]
    NotADirectory {
        /// The path as given.
        given: String,
    },
    /// The caller's own working directory cannot be read (a relative path needs it).
    #[error("the current working directory cannot be read to resolve `{given}`")]
    NoCurrentDirectory {
        /// The relative path as given.
        given: String,
    },
}

fn check(text: &str, what: &'static str) -> Result<(), ResolveError> {
    if text.is_empty() || text.contains('\0') {
        return Err(ResolveError::Invalid { what });
    }
    Ok(())
}

/// `path` made absolute against `base` (the caller's working directory when `None`), with `.`
/// components dropped (`..` is kept: the file system decides what it means).
fn absolute(path: &Path, base: Option<&Path>) -> Result<PathBuf, ResolveError> {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        let base = match base {
            Some(base) => base.to_path_buf(),
            None => std::env::current_dir().map_err(|_| ResolveError::NoCurrentDirectory {
                given: path.display().to_string(),
            })?,
        };
        base.join(path)
    };
    Ok(joined
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect())
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Resolves `program` (named `what` in errors) for a child whose environment is `env`;
/// relative paths are taken against `base`, or the caller's working directory when `None`.
pub fn program(
    what: &str,
    program: &str,
    env: &BTreeMap<String, String>,
    base: Option<&Path>,
) -> Result<PathBuf, ResolveError> {
    check(program, "program")?;
    if program.contains('/') {
        let path = absolute(Path::new(program), base)?;
        if !path.exists() {
            return Err(ResolveError::NotFound {
                what: what.into(),
                given: program.into(),
                looked_in: "",
            });
        }
        if !is_executable_file(&path) {
            return Err(ResolveError::NotExecutable {
                what: what.into(),
                given: program.into(),
            });
        }
        return Ok(path);
    }
    let (search, looked_in) = match env.get("PATH") {
        Some(path) => (path.clone(), " in the PATH of the environment it is given"),
        None => (
            std::env::var("PATH").unwrap_or_default(),
            " in this process's PATH (its environment has no PATH)",
        ),
    };
    std::env::split_paths(&search)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(|| ResolveError::NotFound {
            what: what.into(),
            given: program.into(),
            looked_in,
        })
}

/// Resolves a working directory: absolute as given, relative against `base` (or the caller's
/// working directory); it must be an existing directory.
pub fn directory(dir: &str, base: Option<&Path>) -> Result<PathBuf, ResolveError> {
    check(dir, "working directory")?;
    let path = absolute(Path::new(dir), base)?;
    if !path.is_dir() {
        return Err(ResolveError::NotADirectory { given: dir.into() });
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(path: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("PATH".to_string(), path.to_string())])
    }

    #[test]
    fn absolute_relative_and_bare_names_resolve_like_a_subprocess_api() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let tool = bin.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let plain = bin.join("plain");
        std::fs::write(&plain, "data").unwrap();

        let given = tool.display().to_string();
        assert_eq!(program("p", &given, &env(""), None).unwrap(), tool);
        assert_eq!(
            program("p", "./bin/tool", &env(""), Some(dir.path())).unwrap(),
            tool
        );
        assert_eq!(
            program("p", "tool", &env(&bin.display().to_string()), None).unwrap(),
            tool
        );
        // A relative PATH entry is never searched (it would depend on the child's directory).
        assert!(program("p", "tool", &env("bin"), Some(dir.path())).is_err());
        // No PATH in the environment: this process's PATH (which has `sh`).
        assert!(program("p", "sh", &BTreeMap::new(), None).is_ok());
        assert!(matches!(
            program("p", "./bin/plain", &env(""), Some(dir.path())),
            Err(ResolveError::NotExecutable { .. })
        ));
        assert!(matches!(
            program("p", "./bin/missing", &env(""), Some(dir.path())),
            Err(ResolveError::NotFound { .. })
        ));
        assert!(matches!(
            program("p", "", &env(""), None),
            Err(ResolveError::Invalid { .. })
        ));
        assert_eq!(directory("bin", Some(dir.path())).unwrap(), bin);
        assert!(matches!(
            directory("bin/tool", Some(dir.path())),
            Err(ResolveError::NotADirectory { .. })
        ));
    }
}

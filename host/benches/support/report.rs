//! Where things are: the workspace, the target directory, and the JSON report each full run
//! writes under `target/bench/`.

use crate::BenchResult;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The workspace's root directory (this crate is `host/benches/support/` in it).
pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(3)
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// `$CARGO_TARGET_DIR`, else the workspace's `target/` (where the reports go).
pub fn target_dir() -> PathBuf {
    let workspace = workspace_dir();
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                workspace.join(dir)
            }
        }
        _ => workspace.join("target"),
    }
}

/// Writes `report` (pretty JSON) to `target/bench/<name>.json`, says so on stdout, and returns
/// the file's path.
pub fn write_report(name: &str, report: &Value) -> BenchResult<PathBuf> {
    let dir = target_dir().join("bench");
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(report)?)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(path)
}

/// `/proc/loadavg` (1, 5 and 15 minutes): other work on the machine shows in the figures.
pub fn loadavg() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

#[cfg(test)]
mod tests {
    use super::workspace_dir;

    #[test]
    fn the_workspace_is_the_directory_of_the_root_manifest() {
        let manifest = std::fs::read_to_string(workspace_dir().join("Cargo.toml"))
            .expect("the workspace's Cargo.toml");
        assert!(manifest.contains("[workspace]"), "{manifest}");
        assert!(
            workspace_dir()
                .join("host/benches/support/lib.rs")
                .is_file()
        );
    }
}

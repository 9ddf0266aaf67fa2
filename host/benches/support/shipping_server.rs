//! The bundled shipping server's binary (`examples/shipping-server`), which the benchmarks that
//! run executions start: found in the target directory, built when missing or stale.

use crate::{BenchResult, workspace_dir};
use std::ffi::OsString;
use std::path::Path;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::SystemTime;

/// The newest modification time of the shipping server's sources (and manifest).
fn newest_server_source() -> Option<SystemTime> {
    fn walk(dir: &Path, newest: &mut Option<SystemTime>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, newest);
            } else if let Ok(modified) = entry.metadata().and_then(|m| m.modified()) {
                *newest = Some(newest.map_or(modified, |n| n.max(modified)));
            }
        }
    }
    let root = workspace_dir().join("examples").join("shipping-server");
    let mut newest = std::fs::metadata(root.join("Cargo.toml"))
        .and_then(|m| m.modified())
        .ok();
    walk(&root.join("src"), &mut newest);
    newest
}

/// The `shipping-server` binary: this binary's profile directory first (`target/<profile>/`,
/// the parent of `deps/`), then `target/release/` and `target/debug/`; one older than its
/// sources does not count. None usable: `cargo build -p m3-shipping-server` for this binary's
/// profile and target directory, then the profile directory's.
pub fn shipping_server_binary() -> BenchResult<PathBuf> {
    let exe = std::env::current_exe()?;
    let mut profile_dir = exe.parent().ok_or("this binary has no directory")?;
    if profile_dir.file_name().is_some_and(|n| n == "deps") {
        profile_dir = profile_dir.parent().ok_or("deps/ has no parent")?;
    }
    let target = profile_dir
        .parent()
        .ok_or("the profile has no target dir")?;
    let name = format!("shipping-server{}", std::env::consts::EXE_SUFFIX);
    let newest_source = newest_server_source();
    let fresh = |candidate: &Path| {
        let Ok(modified) = std::fs::metadata(candidate).and_then(|m| m.modified()) else {
            return false;
        };
        newest_source.is_none_or(|source| modified >= source)
    };
    let candidates = [
        profile_dir.join(&name),
        target.join("release").join(&name),
        target.join("debug").join(&name),
    ];
    if let Some(found) = candidates.iter().find(|c| fresh(c)) {
        return Ok(found.clone());
    }

    let cargo = std::env::var_os("CARGO")
        .filter(|c| !c.is_empty())
        .or_else(|| option_env!("CARGO").map(OsString::from))
        .unwrap_or_else(|| OsString::from("cargo"));
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(other) => other.to_string(),
    };
    eprintln!(
        "shipping-server not found (or older than its sources): building it (profile {profile}) ..."
    );
    let status = Command::new(&cargo)
        .arg("build")
        .arg("--manifest-path")
        .arg(workspace_dir().join("Cargo.toml"))
        .args(["-p", "m3-shipping-server", "--bin", "shipping-server"])
        .args(["--profile", &profile])
        .arg("--target-dir")
        .arg(target)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("running {}: {e}", Path::new(&cargo).display()))?;
    if !status.success() {
        return Err(format!("cargo build -p m3-shipping-server failed: {status}").into());
    }
    let built = profile_dir.join(&name);
    if built.is_file() {
        Ok(built)
    } else {
        Err(format!("cargo built no {}", built.display()).into())
    }
}

//! What the benchmarks share: the result type, how a run was started, the printed table, where
//! the JSON goes, the bundled shipping server's binary (found in the target directory, built if
//! missing), order statistics and formatting (`stats`) and the every-kind form (`fixture`). Each
//! benchmark uses part of it.

#![allow(dead_code)]

pub mod fixture;
pub mod stats;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

/// What a benchmark step returns.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How a benchmark binary was started: a full run (`--bench`, and neither `--quick` nor a
/// non-empty `M3_BENCH_QUICK` other than `0`) or a smoke pass (as `cargo test --benches` runs it).
pub struct RunArgs {
    /// The arguments after the program name.
    pub args: Vec<String>,
    /// A full run.
    pub full: bool,
}

impl RunArgs {
    /// This process's arguments.
    pub fn from_env() -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let quick = args.iter().any(|a| a == "--quick")
            || std::env::var_os("M3_BENCH_QUICK").is_some_and(|v| !v.is_empty() && v != "0");
        let full = args.iter().any(|a| a == "--bench") && !quick;
        Self { args, full }
    }

    /// The `--only=NAME` argument, which must be one of `names` (`what` names them in the
    /// message; an unknown one exits with status 2).
    pub fn only(&self, names: &[&'static str], what: &str) -> Option<&'static str> {
        self.args.iter().find_map(|a| {
            let name = a.strip_prefix("--only=")?;
            let known = names.iter().find(|n| **n == name);
            if known.is_none() {
                eprintln!("unknown {what} `{name}`; expected one of {names:?}");
                std::process::exit(2);
            }
            known.copied()
        })
    }
}

/// A printed table: header and rows of cells, columns padded to fit.
pub struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: &str, header: &[&str]) -> Self {
        Self {
            title: title.to_string(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn print(&self) {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c}{}", " ".repeat(widths[i] - c.chars().count())))
                .collect();
            println!("  {}", padded.join("  ").trim_end());
        };
        println!("\n{}", self.title);
        line(&self.header);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        line(&rule);
        for row in &self.rows {
            line(row);
        }
    }
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

/// `$CARGO_TARGET_DIR`, else the workspace's `target/` (where the JSON goes).
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

pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The newest modification time of the shipping server's sources (and manifest).
pub fn newest_server_source() -> Option<SystemTime> {
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

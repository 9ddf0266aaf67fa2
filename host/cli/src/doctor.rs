//! `m3 doctor`: what this machine and database look like to m3.

use crate::{Cli, print_json};
use anyhow::Result;
use m3::component_cache;
use m3::engine::ComponentRuntime;
use serde_json::{Value, json};
use std::process::ExitCode;

/// Harness binaries the kit can drive (looked up in this process's `PATH`).
const HARNESSES: &[(&str, &str)] = &[("scripted", ""), ("codex", "codex")];

fn find_in_path(program: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// `PROGRAM --version`'s first line, if it answers within a few seconds.
fn version_of(program: &std::path::Path) -> Option<String> {
    let mut child = std::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take()?, &mut text).ok()?;
    text.lines().next().map(|l| l.trim().to_string())
}

/// `m3 doctor`.
pub fn doctor(cli: &Cli) -> Result<ExitCode> {
    let mut healthy = true;
    let path = cli.db.display().to_string();
    let database = match cli
        .db
        .exists()
        .then(|| m3::sqlite::database::health(&cli.db))
    {
        Some(Ok(h)) => {
            healthy &=
                h.integrity == "ok" && h.is_m3_database && h.schema_version <= h.supported_version;
            json!({
                "path": path,
                "exists": true,
                "integrity": h.integrity,
                "m3_database": h.is_m3_database,
                "schema_version": h.schema_version,
                "supported_schema_version": h.supported_version,
                "error": null,
            })
        }
        Some(Err(e)) => {
            healthy = false;
            json!({
                "path": path,
                "exists": true,
                "integrity": null,
                "m3_database": null,
                "schema_version": null,
                "supported_schema_version": m3::sqlite::migrations::SCHEMA_VERSION,
                "error": e.to_string(),
            })
        }
        None => json!({
            "path": path,
            "exists": false,
            "integrity": null,
            "m3_database": null,
            "schema_version": null,
            "supported_schema_version": m3::sqlite::migrations::SCHEMA_VERSION,
            "error": null,
        }),
    };
    let cache_dir = component_cache::default_cache_dir().map(|d| d.display().to_string());
    let component = match ComponentRuntime::shared() {
        Ok(runtime) => json!({
            "loaded": true,
            "cache": format!("{:?}", runtime.cache),
            "cache_dir": cache_dir,
            "wasm_sha256": m3::engine::GUEST_WASM_SHA256,
            "error": null,
        }),
        Err(e) => {
            healthy = false;
            json!({
                "loaded": false,
                "cache": null,
                "cache_dir": cache_dir,
                "wasm_sha256": m3::engine::GUEST_WASM_SHA256,
                "error": e.to_string(),
            })
        }
    };
    let harnesses: Value = HARNESSES
        .iter()
        .map(|(name, program)| {
            let entry = if program.is_empty() {
                json!({"found": "built in", "version": env!("CARGO_PKG_VERSION")})
            } else {
                let found = find_in_path(program);
                let version = found.as_deref().and_then(version_of);
                json!({"found": found.map(|p| p.display().to_string()), "version": version})
            };
            (name.to_string(), entry)
        })
        .collect::<serde_json::Map<_, _>>()
        .into();
    let report = json!({
        "healthy": healthy,
        "database": database,
        "component": component,
        "harnesses": harnesses,
    });
    if cli.json {
        print_json(&report, false);
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

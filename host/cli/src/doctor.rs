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
            let found = if program.is_empty() {
                Some("built in".to_string())
            } else {
                find_in_path(program).map(|p| p.display().to_string())
            };
            (name.to_string(), json!(found))
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

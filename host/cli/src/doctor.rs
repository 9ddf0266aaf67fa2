//! `m3 doctor`: what this machine and database look like to m3.

use crate::{Cli, print_json};
use anyhow::Result;
use serde_json::{Value, json};
use std::process::ExitCode;

/// Harness binaries the kit can drive (looked up in this process's `PATH`).
const HARNESSES: &[(&str, &str)] = &[
    ("scripted", ""),
    ("codex", "codex"),
    ("claude-code", "claude"),
];

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
    // A version line: the first 4 KiB are plenty (a program that prints without end is not
    // read to its end).
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(child.stdout.take()?, 4096),
        &mut text,
    )
    .ok()?;
    text.lines().next().map(|l| l.trim().to_string())
}

/// Where Codex's sign-in would come from and what kind it is, and whether an API key is in this
/// process's environment: names and kinds only, never a value.
fn codex_credentials() -> Value {
    let home = m3::codex::user_codex_home();
    let sign_in = home.as_deref().map(m3::codex::sign_in);
    let key_variables: Vec<&str> = ["OPENAI_API_KEY", "CODEX_API_KEY"]
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
        .collect();
    json!({
        "codex_home": home.map(|h| h.display().to_string()),
        "sign_in": sign_in.as_ref().map(ToString::to_string),
        "signed_in": matches!(sign_in, Some(m3::CodexSignIn::ApiKey | m3::CodexSignIn::Account)),
        "api_key_variables": key_variables,
    })
}

/// Where Claude Code's sign-in would come from and what kind it is, and which of its key
/// variables this process's environment sets: names and kinds only, never a value.
fn claude_code_credentials() -> Value {
    let dir = m3::claude_code::user_config_dir();
    let sign_in = dir.as_deref().map(m3::claude_code::sign_in);
    let key_variables: Vec<&str> = m3::claude_code::KEY_VARIABLES
        .iter()
        .copied()
        .filter(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
        .collect();
    json!({
        "config_dir": dir.map(|d| d.display().to_string()),
        "sign_in": sign_in.as_ref().map(ToString::to_string),
        "signed_in": matches!(sign_in, Some(m3::ClaudeCodeSignIn::Account)),
        "api_key_variables": key_variables,
    })
}

/// Every record of the database that cannot be read: `{"round_id", "error"}` for a round,
/// `{"execution_id", "error"}` for an execution.
fn unreadable_records(cli: &Cli) -> Result<Vec<Value>> {
    let executions = crate::executions(cli)?;
    let filter = m3::RoundFilter {
        execution_id: None,
        status: None,
        limit: None,
    };
    let (_, unreadable) = executions.store().list_rounds_reporting(&filter)?;
    let (_, unreadable_executions) = executions.states_reporting()?;
    Ok(unreadable
        .into_iter()
        .map(|(round_id, e)| json!({"round_id": round_id, "error": e.to_string()}))
        .chain(
            unreadable_executions.into_iter().map(
                |(execution_id, e)| json!({"execution_id": execution_id, "error": e.to_string()}),
            ),
        )
        .collect())
}

/// The notification targets of `m3 serve --notify` on this database and their ledger (what
/// waits, what was given up, the last failure): `failing` when a waiting event was tried three
/// times or more, or an event was abandoned.
fn notification_targets(cli: &Cli) -> Result<Vec<Value>> {
    let executions = crate::executions(cli)?;
    Ok(executions
        .store()
        .notification_report()?
        .into_iter()
        .map(|t| {
            json!({
                "target_id": t.target_id,
                "target": t.label,
                "since": crate::json::time(t.since),
                "queued": t.queued,
                "delivered": t.delivered,
                "abandoned": t.abandoned,
                "oldest_queued": t.oldest_queued.map(crate::json::time),
                "most_attempts": t.most_attempts,
                "last_error": t.last_error,
                "failing": t.most_attempts >= 3 || t.abandoned > 0,
            })
        })
        .collect())
}

/// The notification targets' part of a database's report, and whether none is failing.
fn notifications_of(cli: &Cli, readable: bool) -> (Value, bool) {
    if !readable {
        return (json!([]), true);
    }
    match notification_targets(cli) {
        Ok(targets) => {
            let fine = targets.iter().all(|t| t["failing"] == false);
            (Value::Array(targets), fine)
        }
        Err(e) => (json!({"error": e.to_string()}), false),
    }
}

/// The notification targets' lines of the report.
fn print_notifications(db: &Value, text: &dyn Fn(&Value) -> String) {
    if let Some(error) = db["notifications"]["error"].as_str() {
        println!("{}  notifications: {error}", mark(false));
    }
    for t in db["notifications"].as_array().into_iter().flatten() {
        let mut line = format!(
            "{}  notifications to {}: {} waiting, {} delivered, {} abandoned",
            mark(t["failing"] == false),
            text(&t["target"]),
            text(&t["queued"]),
            text(&t["delivered"]),
            text(&t["abandoned"]),
        );
        if t["failing"] == true {
            line.push_str(&format!(
                "; failing ({} tries; last: {})",
                text(&t["most_attempts"]),
                text(&t["last_error"])
            ));
        }
        println!("{line}");
    }
}

/// The database's files (and its `-wal` and `-shm`) that others than their owner may read or
/// write: answers, idempotency keys and lease tokens live in them.
fn loose_files(db: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    ["", "-wal", "-shm"]
        .iter()
        .map(|suffix| {
            let mut name = db.as_os_str().to_owned();
            name.push(suffix);
            std::path::PathBuf::from(name)
        })
        .filter(|file| std::fs::metadata(file).is_ok_and(|m| m.permissions().mode() & 0o077 != 0))
        .map(|file| file.display().to_string())
        .collect()
}

/// How the compiled component was obtained, as one word.
fn cache_name(outcome: &m3::health::CacheOutcome) -> &'static str {
    match outcome {
        m3::health::CacheOutcome::Hit(_) => "hit",
        m3::health::CacheOutcome::Stored(_) => "stored",
        m3::health::CacheOutcome::Bypassed(_) => "bypassed",
        m3::health::CacheOutcome::Recompiled(_) => "recompiled",
    }
}

/// The cached artifact's path, or why the cache was not used.
fn cache_detail(outcome: &m3::health::CacheOutcome) -> String {
    match outcome {
        m3::health::CacheOutcome::Hit(path) | m3::health::CacheOutcome::Stored(path) => {
            path.display().to_string()
        }
        m3::health::CacheOutcome::Bypassed(why) | m3::health::CacheOutcome::Recompiled(why) => {
            why.clone()
        }
    }
}

/// `ok` or `PROBLEM` before a line of the report.
fn mark(ok: bool) -> &'static str {
    if ok { "ok     " } else { "PROBLEM" }
}

/// The records of the report's database that could not be read, one line each.
fn print_unreadable(db: &Value, text: &dyn Fn(&Value) -> String) {
    for record in db["unreadable_records"].as_array().into_iter().flatten() {
        let (kind, id) = match record.get("execution_id") {
            Some(id) => ("execution", id),
            None => ("round", &record["round_id"]),
        };
        println!(
            "{}  {kind} {}: {}",
            mark(false),
            text(id),
            text(&record["error"])
        );
    }
}

/// The report for a person: one line per check, problems marked.
fn print_human(report: &Value) {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "none".to_string(),
        other => other.to_string(),
    };
    let db = &report["database"];
    let path = text(&db["path"]);
    if db["exists"] == false {
        println!(
            "{}  database {path}: none yet (`m3 run` or `m3 demo --db` creates it)",
            mark(true)
        );
    } else if let Some(error) = db["error"].as_str() {
        println!("{}  database {path}: {error}", mark(false));
    } else if db["backend"] == "postgresql" {
        println!(
            "{}  database {path}: PostgreSQL {}, database {}, schema version {} (this build reads \
             up to {})",
            mark(true),
            text(&db["server_version"]),
            text(&db["database_name"]),
            text(&db["schema_version"]),
            text(&db["supported_schema_version"]),
        );
        print_unreadable(db, &text);
        print_notifications(db, &text);
    } else {
        let m3_database = db["m3_database"] == true;
        println!(
            "{}  database {path}: integrity {}, {}, schema version {} (this build reads up to {})",
            mark(db["integrity"] == "ok" && m3_database),
            text(&db["integrity"]),
            if m3_database {
                "an m3 database"
            } else {
                "not an m3 database"
            },
            text(&db["schema_version"]),
            text(&db["supported_schema_version"]),
        );
        print_unreadable(db, &text);
        print_notifications(db, &text);
        for file in db["files_readable_by_others"]
            .as_array()
            .into_iter()
            .flatten()
        {
            println!(
                "{}  {} can be read by other users (chmod 600 it)",
                mark(false),
                text(file)
            );
        }
    }
    let component = &report["component"];
    if component["loaded"] == true {
        println!(
            "{}  component: loaded (cache {}: {})",
            mark(true),
            text(&component["cache"]),
            text(&component["cache_detail"])
        );
    } else {
        println!(
            "{}  component: not loaded: {}",
            mark(false),
            text(&component["error"])
        );
    }
    for (name, harness) in report["harnesses"].as_object().into_iter().flatten() {
        let found = text(&harness["found"]);
        let version = text(&harness["version"]);
        let found_any = !harness["found"].is_null();
        println!(
            "{}  harness {name}: {}",
            if found_any { "ok     " } else { "-      " },
            if found_any {
                format!("{found} ({version})")
            } else {
                "not found in PATH".to_string()
            }
        );
        let credentials = &harness["credentials"];
        if credentials.is_object() {
            let (what, dir) = match credentials.get("codex_home") {
                Some(home) => ("home", home),
                None => ("configuration", &credentials["config_dir"]),
            };
            println!(
                "         {name} {what} {}: {}; key variables set: {}",
                text(dir),
                text(&credentials["sign_in"]),
                credentials["api_key_variables"]
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .map(|a| a.iter().map(text).collect::<Vec<_>>().join(", "))
                    .unwrap_or_else(|| "none".to_string())
            );
        }
    }
    println!(
        "{}",
        if report["healthy"] == true {
            "healthy"
        } else {
            "NOT healthy (`m3 doctor --json` for the details)"
        }
    );
}

/// The SQLite file's part of the report.
fn sqlite_database(cli: &Cli, path: &str, healthy: &mut bool) -> Value {
    match cli
        .db
        .exists()
        .then(|| m3::health::database_health(&cli.db))
    {
        Some(Ok(h)) => {
            let readable =
                h.is_m3_database && (0..=h.supported_version).contains(&h.schema_version);
            let unreadable = if readable {
                unreadable_records(cli)
            } else {
                Ok(Vec::new())
            };
            let (unreadable, check_error) = match unreadable {
                Ok(list) => (list, None),
                Err(e) => (Vec::new(), Some(e.to_string())),
            };
            let loose = loose_files(&cli.db);
            let (notifications, notifying) = notifications_of(cli, readable);
            *healthy &= h.integrity == "ok"
                && readable
                && unreadable.is_empty()
                && check_error.is_none()
                && loose.is_empty()
                && notifying;
            json!({
                "path": path,
                "exists": true,
                "integrity": h.integrity,
                "m3_database": h.is_m3_database,
                "schema_version": h.schema_version,
                "supported_schema_version": h.supported_version,
                "unreadable_records": unreadable,
                "files_readable_by_others": loose,
                "notifications": notifications,
                "error": check_error,
            })
        }
        Some(Err(e)) => {
            *healthy = false;
            json!({
                "path": path,
                "exists": true,
                "integrity": null,
                "m3_database": null,
                "schema_version": null,
                "supported_schema_version": m3::health::SCHEMA_VERSION,
                "unreadable_records": [],
                "files_readable_by_others": loose_files(&cli.db),
                "notifications": [],
                "error": e.to_string(),
            })
        }
        None => json!({
            "path": path,
            "exists": false,
            "integrity": null,
            "m3_database": null,
            "schema_version": null,
            "supported_schema_version": m3::health::SCHEMA_VERSION,
            "unreadable_records": [],
            "files_readable_by_others": [],
            "notifications": [],
            "error": null,
        }),
    }
}

/// The PostgreSQL database's part of the report: the server, its version and the schema
/// version (read without changing anything).
fn postgres_database(cli: &Cli, url: &str, healthy: &mut bool) -> Value {
    let shown = m3::health::postgres_url_shown(url);
    match m3::health::postgres_health(url, std::time::Duration::from_secs(5)) {
        Ok(h) => {
            let exists = h.schema_version > 0;
            let readable = (0..=h.supported_version).contains(&h.schema_version);
            let (unreadable, check_error) = match exists.then(|| unreadable_records(cli)) {
                Some(Ok(list)) => (list, None),
                Some(Err(e)) => (Vec::new(), Some(e.to_string())),
                None => (Vec::new(), None),
            };
            let (notifications, notifying) = notifications_of(cli, exists && readable);
            *healthy &= readable && unreadable.is_empty() && check_error.is_none() && notifying;
            json!({
                "backend": "postgresql",
                "path": shown,
                "exists": exists,
                "server_version": h.server_version,
                "database_name": h.database,
                "m3_database": exists,
                "schema_version": h.schema_version,
                "supported_schema_version": h.supported_version,
                "unreadable_records": unreadable,
                "notifications": notifications,
                "error": check_error,
            })
        }
        Err(e) => {
            *healthy = false;
            json!({
                "backend": "postgresql",
                "path": shown,
                "exists": null,
                "server_version": null,
                "database_name": null,
                "m3_database": null,
                "schema_version": null,
                "supported_schema_version": m3::health::SCHEMA_VERSION_POSTGRES,
                "unreadable_records": [],
                "notifications": [],
                "error": e.to_string(),
            })
        }
    }
}

/// `m3 doctor`.
pub fn doctor(cli: &Cli) -> Result<ExitCode> {
    let mut healthy = true;
    let path = cli.db.display().to_string();
    let database = match crate::postgres_url(cli) {
        Some(url) => postgres_database(cli, url, &mut healthy),
        None => sqlite_database(cli, &path, &mut healthy),
    };
    let cache_dir = m3::health::component_cache_dir().map(|d| d.display().to_string());
    crate::engine_start::prepare(cli);
    let component = match m3::health::load_engine() {
        Ok(runtime) => json!({
            "loaded": true,
            "cache": cache_name(&runtime),
            "cache_detail": cache_detail(&runtime),
            "cache_dir": cache_dir,
            "wasm_sha256": m3::health::ENGINE_COMPONENT_SHA256,
            "error": null,
        }),
        Err(e) => {
            healthy = false;
            json!({
                "loaded": false,
                "cache": null,
                "cache_detail": null,
                "cache_dir": cache_dir,
                "wasm_sha256": m3::health::ENGINE_COMPONENT_SHA256,
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
                let mut entry =
                    json!({"found": found.map(|p| p.display().to_string()), "version": version});
                match *name {
                    "codex" => entry["credentials"] = codex_credentials(),
                    "claude-code" => entry["credentials"] = claude_code_credentials(),
                    _ => {}
                }
                entry
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
        print_human(&report);
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

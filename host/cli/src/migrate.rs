//! `m3 migrate --from sqlite:PATH --to postgres://...`: every round and execution of a SQLite
//! database copied into an empty PostgreSQL one, verified by counts and a digest before it
//! commits (`m3::migrate_sqlite_to_postgres` does it all; this prints what it did).

use crate::{Cli, print_json};
use anyhow::Result;
use std::path::PathBuf;
use std::process::ExitCode;

/// `m3 migrate`'s arguments.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The SQLite database to copy: `sqlite:PATH` or a plain path (read only; `--db` is not
    /// used). It must be at this build's schema version and hold no live lease (stop its workers
    /// first).
    #[arg(long, value_name = "sqlite:PATH")]
    pub from: PathBuf,
    /// The PostgreSQL database to copy into: a `postgres://` URL. Its tables are created if
    /// need be; it must hold no round or execution yet.
    #[arg(long, value_name = "postgres://...")]
    pub to: String,
}

/// The source file `--from` names: `sqlite:PATH` or `PATH`; a PostgreSQL URL is refused.
fn source_path(from: &std::path::Path) -> Result<PathBuf> {
    let text = std::os::unix::ffi::OsStrExt::as_bytes(from.as_os_str());
    if text.starts_with(b"postgres://") || text.starts_with(b"postgresql://") {
        anyhow::bail!(
            "ManagedInputValidationError: --from names the SQLite database to copy \
             (sqlite:PATH or a path); m3 migrate copies from SQLite into PostgreSQL; nothing \
             was read or written (invalid_command_line)"
        );
    }
    Ok(match text.strip_prefix(b"sqlite:") {
        Some(rest) => {
            PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(rest))
        }
        None => from.to_path_buf(),
    })
}

/// Runs `m3 migrate`: the report as a table and the digest, or with `--json` as one document;
/// a refusal is a typed error (exit 1) and nothing was written.
pub fn migrate(cli: &Cli, args: &MigrateArgs) -> Result<ExitCode> {
    let source = source_path(&args.from)?;
    let report = m3::migrate_sqlite_to_postgres(&source, &args.to).map_err(|e| {
        let message = e.to_string();
        let code = e.code();
        if message.trim_end().ends_with(&format!("({code})")) {
            anyhow::anyhow!("{message}")
        } else {
            anyhow::anyhow!("{message} ({code})")
        }
    })?;
    if cli.json {
        print_json(&serde_json::to_value(&report)?, false);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "Copied {} round(s) and {} execution(s) from {} to {}, verified before commit:",
        report.rounds, report.executions, report.source, report.target
    );
    let width = report
        .tables
        .iter()
        .map(|t| t.table.len())
        .max()
        .unwrap_or(0);
    for table in &report.tables {
        println!("  {:<width$}  {:>8} row(s)", table.table, table.rows);
    }
    println!(
        "digest (SHA-256 of every row, the same on both sides): {}",
        report.digest
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_takes_a_sqlite_prefix_or_a_path_and_refuses_a_url() {
        let path = |s: &str| source_path(std::path::Path::new(s)).unwrap();
        assert_eq!(path("sqlite:/tmp/x.sqlite"), PathBuf::from("/tmp/x.sqlite"));
        assert_eq!(path("sqlite:x.sqlite"), PathBuf::from("x.sqlite"));
        assert_eq!(path("dir/x.sqlite"), PathBuf::from("dir/x.sqlite"));
        let refused = source_path(std::path::Path::new("postgres://u@h/db")).unwrap_err();
        assert!(
            refused
                .to_string()
                .starts_with("ManagedInputValidationError: ")
        );
    }
}

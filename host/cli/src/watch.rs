//! `--watch`: show a listing again whenever the database changes, until Ctrl-C. On a terminal
//! the screen is redrawn (also every second, so relative times stay true); elsewhere each new
//! snapshot is printed once, after the change that made it. Changes are noticed through the
//! database's `PRAGMA data_version` ([`m3::Executions::data_version`]), a cheap look every
//! [`POLL`], and the listing is read again only then.

use crate::Cli;
use anyhow::Result;
use m3::Executions;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the database is asked whether anything changed.
const POLL: Duration = Duration::from_millis(100);
/// How often a terminal is redrawn with nothing changed (relative times move on).
const REDRAW: Duration = Duration::from_secs(1);

/// One look at what is watched.
#[derive(Debug)]
pub struct Snapshot {
    /// What it shows, as data (no relative times): a new key is a change.
    pub key: String,
    /// What to print.
    pub text: String,
    /// Nothing more will change (a finished execution): stop after printing it.
    pub done: bool,
}

/// Prints `look()`'s snapshots as they change until Ctrl-C (SIGINT or SIGTERM), or until one is
/// `done`; exit 0 either way.
pub fn watch(
    cli: &Cli,
    executions: &Executions,
    mut look: impl FnMut() -> Result<Snapshot>,
) -> Result<ExitCode> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone())
            .map_err(|e| anyhow::anyhow!("EngineError: cannot watch for Ctrl-C: {e}"))?;
    }
    let redraw = std::io::stdout().is_terminal() && !cli.json;
    let mut seen_version = None;
    let mut last_key = None;
    let mut drawn = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let version = executions.data_version()?;
        let changed = seen_version != Some(version);
        if changed || (redraw && drawn.elapsed() >= REDRAW) {
            seen_version = Some(version);
            let snapshot = look()?;
            let new = last_key.as_ref() != Some(&snapshot.key);
            let text = if redraw {
                // Home, clear the screen, then the snapshot.
                drawn = Instant::now();
                format!(
                    "\x1b[H\x1b[2J{}\n(watching; Ctrl-C to stop)\n",
                    snapshot.text
                )
            } else if new && cli.json {
                format!("{}\n", snapshot.text)
            } else if new {
                format!("{}\n\n", snapshot.text)
            } else {
                String::new()
            };
            let mut out = std::io::stdout().lock();
            if out
                .write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
            {
                break; // Whoever read it has gone (a closed pipe): nothing left to do.
            }
            last_key = Some(snapshot.key);
            if snapshot.done {
                break;
            }
        }
        std::thread::sleep(POLL);
    }
    Ok(ExitCode::SUCCESS)
}

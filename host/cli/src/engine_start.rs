//! Spinners where people wait. The policy engine (the embedded component) is loaded before a
//! command uses it, with a spinner on a terminal when that takes a while: the first start after a build compiles the component
//! (seconds, then cached under `~/.cache/m3`), which would otherwise look like a hang.

use crate::Cli;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// How long loading may take before the spinner shows (a cached start takes milliseconds).
const QUIET_FOR: Duration = Duration::from_millis(300);

/// What the spinner says.
pub const MESSAGE: &str =
    "preparing the policy engine, once (compiling the component for this machine)";

/// Loads the engine now. A failure is left for the command's own first use to report as its
/// typed error.
pub fn prepare(cli: &Cli) {
    if m3::health::engine_if_loaded().is_some() {
        return;
    }
    if cli.json || !std::io::stderr().is_terminal() {
        let _ = m3::health::load_engine();
        return;
    }
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let spinner = std::thread::spawn(move || {
        if finished.recv_timeout(QUIET_FOR).is_ok() {
            return;
        }
        let bar = on_stderr();
        if bar.is_hidden() {
            eprintln!("{MESSAGE}");
        }
        bar.set_message(MESSAGE);
        let _ = finished.recv();
        bar.finish_and_clear();
    });
    let _ = m3::health::load_engine();
    let _ = done.send(());
    let _ = spinner.join();
}

/// A spinner on stderr saying `message`, when stderr is a terminal and the output is not JSON.
pub fn spinner(cli: &Cli, message: &'static str) -> Option<ProgressBar> {
    if cli.json || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = on_stderr();
    if bar.is_hidden() {
        eprintln!("{message}");
    }
    bar.set_message(message);
    Some(bar)
}

/// The one spinner style of the command, ticking on stderr when it is a terminal (hidden
/// otherwise, so a script's stderr gets no escape sequences, and hidden with `NO_COLOR` set to
/// anything, which asks for a terminal without escape sequences: the spinner's message is then
/// one plain line where a fixed message is shown).
pub fn on_stderr() -> ProgressBar {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    if no_color || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

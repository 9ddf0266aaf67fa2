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
        let bar = ProgressBar::new_spinner().with_message(MESSAGE);
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(100));
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
    let bar = ProgressBar::new_spinner().with_message(message);
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(100));
    Some(bar)
}

//! Ctrl-C (SIGINT) and SIGTERM while a command waits or shows a form: the first asks the command
//! to stop cleanly (it notices through [`Interrupt::requested`]); a second Ctrl-C ends the process
//! at once with exit code 130, as a shell expects of an interrupted program.
//!
//! A form's prompt reads keys in raw mode, where Ctrl-C is a key, not a signal: the terminal
//! library raises SIGINT itself and the prompt returns an error, so the same flag is set.

use anyhow::{Result, anyhow};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The exit code of a process ended by Ctrl-C (128 + SIGINT).
pub const EXIT_CODE: u8 = 130;

/// Whether the command was asked to stop.
pub struct Interrupt {
    stop: Arc<AtomicBool>,
}

impl Interrupt {
    /// Catches SIGINT and SIGTERM from now on, for the rest of the process.
    pub fn catch() -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let cannot = |e: std::io::Error| anyhow!("EngineError: cannot handle signals: {e}");
        // The shutdown is registered first: it fires only once the flag is already set, that
        // is, on the second signal.
        signal_hook::flag::register_conditional_shutdown(
            signal_hook::consts::SIGINT,
            i32::from(EXIT_CODE),
            stop.clone(),
        )
        .map_err(cannot)?;
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(signal, stop.clone()).map_err(cannot)?;
        }
        Ok(Self { stop })
    }

    /// Whether a signal asked the command to stop.
    pub fn requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

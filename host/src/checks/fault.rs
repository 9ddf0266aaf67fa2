//! Named fault points for crash tests. With the cargo feature `fault-points`, a process whose
//! environment names a point (`M3_FAULT_POINT=submit_responses.returned`) kills itself with
//! SIGKILL the `M3_FAULT_HIT`-th time (default 1st) it reaches that point: no destructors, no
//! rollback, exactly like `kill -9`. Without the feature every point compiles to nothing.
//!
//! With `M3_FAULT_PAUSE=<dir>` as well, the point pauses instead of killing: the thread that
//! reaches it creates `<dir>/paused` and blocks until `<dir>/resume` exists, so a test can act
//! while the process holds still at that point (and then release it). A pause never released
//! within 60 s ends the process with SIGKILL, so a broken test cannot hang.
//!
//! Points: `commit.before` and `commit.after` (around every SQLite `COMMIT` of the component's
//! transactions), `<operation>.returned` for each store operation (committed, but the caller
//! has not been told), and `server_output.matched` (a worker is about to hand the component
//! server output holding the text `M3_FAULT_MATCH` names, the matching line starting the bytes;
//! only as a pause).

/// Reaches the fault point `name`.
#[inline]
pub fn hit(name: &str) {
    #[cfg(feature = "fault-points")]
    armed::hit(name);
    #[cfg(not(feature = "fault-points"))]
    let _ = name;
}

/// The text (`M3_FAULT_MATCH`) whose arrival pauses the process at the point `name`, when it is
/// armed to pause (not kill) there: the caller then arranges for the point to be reached exactly
/// where that text arrives.
#[cfg(feature = "fault-points")]
#[inline]
pub fn pause_match(name: &str) -> Option<&'static [u8]> {
    armed::pause_match(name)
}

/// The text (`M3_FAULT_MATCH`) whose arrival pauses the process at the point `name`, when it is
/// armed to pause there: never, without the feature.
#[cfg(not(feature = "fault-points"))]
#[inline]
pub fn pause_match(_name: &str) -> Option<&'static [u8]> {
    None
}

#[cfg(feature = "fault-points")]
mod armed {
    use std::path::PathBuf;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    /// How long a pause waits for `<dir>/resume` before the process kills itself.
    const PAUSE_LIMIT: Duration = Duration::from_secs(60);

    struct Armed {
        point: String,
        on_hit: u64,
        hits: AtomicU64,
        /// `M3_FAULT_PAUSE`: pause in this directory instead of killing.
        pause: Option<PathBuf>,
        /// `M3_FAULT_MATCH`: the text of server output that reaches a matching point.
        matching: Option<Vec<u8>>,
    }

    fn armed() -> Option<&'static Armed> {
        static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
        ARMED
            .get_or_init(|| {
                let point = std::env::var("M3_FAULT_POINT")
                    .ok()
                    .filter(|p| !p.is_empty())?;
                let on_hit = std::env::var("M3_FAULT_HIT")
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(1);
                let pause = std::env::var_os("M3_FAULT_PAUSE")
                    .filter(|d| !d.is_empty())
                    .map(PathBuf::from);
                let matching = std::env::var("M3_FAULT_MATCH")
                    .ok()
                    .filter(|m| !m.is_empty())
                    .map(String::into_bytes);
                Some(Armed {
                    point,
                    on_hit,
                    hits: AtomicU64::new(0),
                    pause,
                    matching,
                })
            })
            .as_ref()
    }

    /// Ends the process with SIGKILL, as `kill -9` would.
    fn kill() {
        // SAFETY: raise(2) has no memory-safety preconditions; SIGKILL ends the process.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }

    /// `M3_FAULT_MATCH`, when `M3_FAULT_POINT` names `name` and `M3_FAULT_PAUSE` makes it a
    /// pause.
    pub fn pause_match(name: &str) -> Option<&'static [u8]> {
        armed()
            .filter(|a| a.point == name && a.pause.is_some())
            .and_then(|a| a.matching.as_deref())
    }

    pub fn hit(name: &str) {
        let Some(armed) = armed() else { return };
        if armed.point == name && armed.hits.fetch_add(1, Ordering::SeqCst) + 1 == armed.on_hit {
            match &armed.pause {
                Some(dir) => pause(dir),
                None => kill(),
            }
        }
    }

    /// Creates `dir/paused`, then blocks the calling thread until `dir/resume` exists; kills the
    /// process if that takes longer than [`PAUSE_LIMIT`] or `paused` cannot be created.
    fn pause(dir: &std::path::Path) {
        if std::fs::write(dir.join("paused"), b"").is_err() {
            kill();
        }
        let until = Instant::now() + PAUSE_LIMIT;
        while !dir.join("resume").exists() {
            if Instant::now() >= until {
                kill();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

//! Named fault points for crash tests. With the cargo feature `fault-points`, a process whose
//! environment names a point (`M3_FAULT_POINT=submit_responses.returned`) kills itself with
//! SIGKILL the `M3_FAULT_HIT`-th time (default 1st) it reaches that point: no destructors, no
//! rollback, exactly like `kill -9`. Without the feature every point compiles to nothing.
//!
//! Points: `commit.before` and `commit.after` (around every SQLite `COMMIT` of the component's
//! transactions), and `<operation>.returned` for each store operation (committed, but the caller
//! has not been told).

/// Reaches the fault point `name`.
#[inline]
pub fn hit(name: &str) {
    #[cfg(feature = "fault-points")]
    armed::hit(name);
    #[cfg(not(feature = "fault-points"))]
    let _ = name;
}

#[cfg(feature = "fault-points")]
mod armed {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Armed {
        point: String,
        on_hit: u64,
        hits: AtomicU64,
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
                Some(Armed {
                    point,
                    on_hit,
                    hits: AtomicU64::new(0),
                })
            })
            .as_ref()
    }

    pub fn hit(name: &str) {
        let Some(armed) = armed() else { return };
        if armed.point == name && armed.hits.fetch_add(1, Ordering::SeqCst) + 1 == armed.on_hit {
            // SAFETY: raise(2) has no memory-safety preconditions; SIGKILL ends the process.
            unsafe {
                libc::raise(libc::SIGKILL);
            }
        }
    }
}

//! Noticing commits made by other connections and processes (`PRAGMA data_version` on the
//! database's long-lived keeper connection), so a waiting worker sees an answer that another
//! process committed within milliseconds.

use super::database::Database;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often [`ChangeWatch::wait`] looks at the database.
pub const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// A cursor over the database's commits.
#[derive(Debug)]
pub struct ChangeWatch {
    db: Arc<Database>,
    seen: i64,
}

impl ChangeWatch {
    /// A watch that reports commits made after this call.
    pub fn new(db: Arc<Database>) -> rusqlite::Result<Self> {
        let seen = db.data_version()?;
        Ok(Self { db, seen })
    }

    /// Whether anything was committed by another connection since the last call (or since the
    /// watch was made).
    pub fn changed(&mut self) -> rusqlite::Result<bool> {
        let now = self.db.data_version()?;
        let changed = now != self.seen;
        self.seen = now;
        Ok(changed)
    }

    /// Waits until something is committed or `timeout` passes; `true` if something was.
    pub async fn wait(&mut self, timeout: Duration) -> rusqlite::Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.changed()? {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(POLL_INTERVAL.min(deadline - now)).await;
        }
    }
}

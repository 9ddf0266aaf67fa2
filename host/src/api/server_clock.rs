//! The database server's time, as a worker's clock on PostgreSQL
//! (docs/decisions/0012-postgresql-time-is-the-servers.md).
//!
//! Workers on several machines decide on the same leases and deadlines, so they must agree on
//! the time. Each store reads its own clock corrected by the offset between that clock and the
//! server's `clock_timestamp()`, measured with one query (the offset taken at the query's
//! midpoint, so its error is at most half the round trip) when the store opens and again once
//! the last measurement is [`MEASURE_EVERY`] old. A measurement that fails keeps the last
//! offset: the operation that needed the time then fails on the same unreachable server.

use super::clock::Clock;
use crate::store::postgres::database::Database;
use chrono::{DateTime, TimeDelta, Utc};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How old a measured offset may grow before it is measured again.
pub const MEASURE_EVERY: Duration = Duration::from_secs(10);

/// A clock that reads `local` shifted to the database server's time.
pub struct ServerClock {
    local: Arc<dyn Clock>,
    db: Arc<crate::store::Backend>,
    measured: Mutex<Measured>,
}

/// The last offset, and when it was measured.
#[derive(Debug, Clone, Copy)]
struct Measured {
    offset: TimeDelta,
    at: Instant,
}

impl std::fmt::Debug for ServerClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerClock")
            .field("offset", &self.offset())
            .finish_non_exhaustive()
    }
}

impl ServerClock {
    /// `local` corrected to the server of `db` (a PostgreSQL backend), measured now.
    pub fn new(
        local: Arc<dyn Clock>,
        db: Arc<crate::store::Backend>,
    ) -> Result<Self, tokio_postgres::Error> {
        let offset = match db.as_ref() {
            crate::store::Backend::Postgres(pg) => measure(local.as_ref(), pg)?,
            crate::store::Backend::Sqlite(_) => TimeDelta::zero(),
        };
        Ok(Self {
            local,
            db,
            measured: Mutex::new(Measured {
                offset,
                at: Instant::now(),
            }),
        })
    }

    /// The offset in use: the server's time minus the local clock's.
    pub fn offset(&self) -> TimeDelta {
        self.measured
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .offset
    }
}

/// The server's time minus `local`'s, taken at the midpoint of one query.
fn measure(local: &dyn Clock, db: &Database) -> Result<TimeDelta, tokio_postgres::Error> {
    let conn = db.connect()?;
    let before = local.now();
    let rows = conn.query(
        "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::BIGINT",
        vec![],
    )?;
    let after = local.now();
    let server_us: i64 = rows.first().map_or(0, |r| r.get(0));
    let server = DateTime::<Utc>::from_timestamp_micros(server_us).unwrap_or(before);
    let midpoint = before + (after - before) / 2;
    Ok(server - midpoint)
}

impl Clock for ServerClock {
    fn now(&self) -> DateTime<Utc> {
        let last = *self.measured.lock().unwrap_or_else(|e| e.into_inner());
        let offset = if last.at.elapsed() < MEASURE_EVERY {
            last.offset
        } else {
            let measured = match self.db.as_ref() {
                crate::store::Backend::Postgres(pg) => measure(self.local.as_ref(), pg).ok(),
                crate::store::Backend::Sqlite(_) => None,
            };
            let mut slot = self.measured.lock().unwrap_or_else(|e| e.into_inner());
            // A failed measurement keeps the last offset and is tried again next time.
            if let Some(offset) = measured {
                *slot = Measured {
                    offset,
                    at: Instant::now(),
                };
            }
            slot.offset
        };
        self.local.now() + offset
    }
}

//! The store's clock. Its type can only yield UTC instants, so a naive time cannot reach the
//! store.

use chrono::{DateTime, TimeDelta, Utc};
use std::sync::Mutex;

/// A source of the current UTC time.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// Where a store's time comes from. SQLite stores always read their `clock` as it is; on
/// PostgreSQL, whose workers may run on machines whose clocks disagree, the default is the
/// database server's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeSource {
    /// The backend's default: [`TimeSource::Clock`] on SQLite, [`TimeSource::DatabaseServer`] on
    /// PostgreSQL.
    #[default]
    Default,
    /// The store's `clock` as it is.
    Clock,
    /// The store's `clock` corrected by its offset from the database server's clock, measured
    /// when the store opens and again every few seconds: every machine sharing the database
    /// then reads the server's time, within half a query's round trip, whatever its own clock
    /// says (PostgreSQL only).
    DatabaseServer,
}

/// The system's clock (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to: for tests of leases and deadlines without sleeping.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// Moves the clock forward (or back, with a negative delta).
    pub fn advance(&self, by: TimeDelta) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }

    /// Sets the clock.
    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<C: Clock> Clock for std::sync::Arc<C> {
    fn now(&self) -> DateTime<Utc> {
        self.as_ref().now()
    }
}

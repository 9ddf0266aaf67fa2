//! Parked workers and their held leases: the registry between a worker waiting in
//! `events.next-holding` (`imports/process.rs`) and the renewer (`worker/renewals.rs`). It
//! knows no store: it keeps each parked worker's leases, says which are due, takes back the
//! results of a renewal, and wakes a worker only when it must look: `wake` (a renewal found its
//! cancel flag set or its round answered or failed) or `timeout` (a renewal refused, failed, or
//! late by a whole period: the worker renews by itself, and ends if it cannot).

use crate::api::clock::Clock;
use crate::component::bindings::exports::m3::managed_input::runtime::HeldRenewal;
use crate::component::bindings::m3::managed_input::events::Event;
use crate::component::bindings::m3::managed_input::types::{HeldLeases, Timestamp};
use crate::component::convert;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// The most a renewal is made early to share a transaction with others.
pub const COALESCE: Duration = Duration::from_millis(250);
/// How long the renewer sleeps at most before looking again.
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// The parked workers of one [`Executions`](super::Executions).
pub struct Parking {
    clock: Arc<dyn Clock>,
    parked: Mutex<Parked>,
    /// A worker parked (the renewer may need to wake earlier).
    arrived: Notify,
}

impl std::fmt::Debug for Parking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parking").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Parked {
    entries: HashMap<u64, Entry>,
    next_id: u64,
}

struct Entry {
    held: HeldLeases,
    /// `held.renew_at` in microseconds since the epoch (`i64::MIN`: no representable time,
    /// due at once), converted once when the leases are set, so that a scan of thousands of
    /// parked workers compares integers.
    renew_at: i64,
    /// A renewal of it is under way.
    in_flight: bool,
    /// What the worker is woken with, once set.
    signal: Option<Event>,
    notify: Arc<Notify>,
}

impl Parking {
    /// No worker parked yet; renewals are due by `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            parked: Mutex::new(Parked::default()),
            arrived: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Parked> {
        self.parked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Parks `held` until the returned guard is finished or dropped.
    pub fn park(self: &Arc<Self>, held: HeldLeases) -> Holding {
        let notify = Arc::new(Notify::new());
        let id = {
            let mut parked = self.lock();
            let id = parked.next_id;
            parked.next_id += 1;
            parked.entries.insert(
                id,
                Entry {
                    renew_at: micros(&held.renew_at),
                    held,
                    in_flight: false,
                    signal: None,
                    notify: notify.clone(),
                },
            );
            id
        };
        self.wake_renewer();
        Holding {
            parking: self.clone(),
            id,
            notify,
        }
    }

    /// Resolves when a worker parks or [`Parking::wake_renewer`] is called (or at once, if
    /// either happened since the last call).
    pub async fn arrival(&self) {
        self.arrived.notified().await;
    }

    /// Makes the renewer look again now.
    pub fn wake_renewer(&self) {
        self.arrived.notify_one();
    }

    /// Marks and returns the entries to renew now, and how long until the next one is due. An
    /// entry is due within a quarter of its period (at most [`COALESCE`]) of its renewal time;
    /// once one is, every entry due within three quarters of its period is renewed with it, so
    /// the renewals of many workers fall together within a period and stay so (two groups any
    /// distance apart meet at the first renewal of one of them).
    pub fn take_due(&self) -> (Vec<(u64, HeldLeases)>, Duration) {
        let mut parked = self.lock();
        let now = self.clock.now().timestamp_micros();
        let mut wait = IDLE_LOOK;
        let mut triggered = false;
        let mut candidates = Vec::new();
        for (id, entry) in &parked.entries {
            if entry.in_flight || entry.signal.is_some() {
                continue;
            }
            let period = Duration::from_millis(entry.held.renew_every_ms);
            let left = left_until(entry.renew_at, 0, now);
            let window = (period / 4).min(COALESCE);
            if left <= window {
                triggered = true;
            } else {
                wait = wait.min(left - window);
            }
            if left <= period * 3 / 4 {
                candidates.push(*id);
            }
        }
        if !triggered {
            return (Vec::new(), wait);
        }
        let due = candidates
            .into_iter()
            .filter_map(|id| {
                let entry = parked.entries.get_mut(&id)?;
                entry.in_flight = true;
                Some((id, entry.held.clone()))
            })
            .collect();
        (due, wait)
    }

    /// Hands the results of one renewal to the parked workers `ids` (`None`: the renewal
    /// failed, and every one of them renews by itself).
    pub fn settle(&self, ids: &[u64], results: Option<Vec<HeldRenewal>>) {
        let mut parked = self.lock();
        for (index, id) in ids.iter().enumerate() {
            let Some(entry) = parked.entries.get_mut(id) else {
                continue;
            };
            entry.in_flight = false;
            match results.as_ref().and_then(|r| r.get(index)) {
                Some(HeldRenewal::Renewed(held)) => entry.set(held.clone()),
                Some(HeldRenewal::Attention(held)) => {
                    entry.set(held.clone());
                    entry.signal = Some(Event::Wake);
                    entry.notify.notify_one();
                }
                Some(HeldRenewal::Refused(_)) | None => {
                    entry.signal = Some(Event::Timeout);
                    entry.notify.notify_one();
                }
            }
        }
    }
}

impl Entry {
    /// The leases as a renewal left them.
    fn set(&mut self, held: HeldLeases) {
        self.renew_at = micros(&held.renew_at);
        self.held = held;
    }
}

/// A parked worker's leases, renewed while it waits.
pub struct Holding {
    parking: Arc<Parking>,
    id: u64,
    notify: Arc<Notify>,
}

impl Holding {
    /// Resolves when the worker must look: `wake` (its cancel flag, its round) or `timeout` (a
    /// renewal refused or failed, or late by a whole period).
    pub async fn signalled(&self) -> Event {
        loop {
            let late_in = {
                let parked = self.parking.lock();
                let Some(entry) = parked.entries.get(&self.id) else {
                    return Event::Timeout;
                };
                if let Some(signal) = &entry.signal {
                    return signal.clone();
                }
                let now = self.parking.clock.now().timestamp_micros();
                left_until(entry.renew_at, entry.held.renew_every_ms, now)
            };
            if late_in.is_zero() {
                return Event::Timeout;
            }
            tokio::select! {
                () = self.notify.notified() => {}
                () = tokio::time::sleep(late_in.max(Duration::from_millis(5))) => {}
            }
        }
    }

    /// Unparks: returns the leases as renewed meanwhile.
    pub fn finish(self) -> Option<HeldLeases> {
        let entry = self.parking.lock().entries.remove(&self.id);
        entry.map(|e| e.held)
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        // A worker whose wait was dropped (its instance stopped) leaves nothing behind.
        self.parking.lock().entries.remove(&self.id);
    }
}

/// `at` in microseconds since the epoch; `i64::MIN` when it is no representable time.
fn micros(at: &Timestamp) -> i64 {
    convert::datetime(at).map_or(i64::MIN, |at| at.timestamp_micros())
}

/// How long from `now` until `after_ms` milliseconds past `at` (both in microseconds since the
/// epoch): zero when that has passed, or when `at` is no representable time.
fn left_until(at: i64, after_ms: u64, now: i64) -> Duration {
    if at == i64::MIN {
        return Duration::ZERO;
    }
    let after = i64::try_from(after_ms)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000);
    let left = at.saturating_add(after).saturating_sub(now);
    Duration::from_micros(u64::try_from(left).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64, nanoseconds: u32) -> Timestamp {
        Timestamp {
            seconds,
            nanoseconds,
        }
    }

    /// The time left is counted in microseconds from one reading of the clock: a renewal time
    /// ahead, one passed, one a period ahead, and one that is no time at all (due at once).
    #[test]
    fn the_time_left_is_counted_from_one_reading_of_the_clock() {
        let renew_at = micros(&at(100, 500_000_000));
        assert_eq!(renew_at, 100_500_000);
        let now = micros(&at(100, 0));
        assert_eq!(left_until(renew_at, 0, now), Duration::from_millis(500));
        assert_eq!(left_until(renew_at, 0, now + 600_000), Duration::ZERO);
        assert_eq!(
            left_until(renew_at, 5_000, now + 600_000),
            Duration::from_millis(4_900)
        );
        let unrepresentable = micros(&at(i64::MAX, 0));
        assert_eq!(unrepresentable, i64::MIN);
        assert_eq!(left_until(unrepresentable, 5_000, now), Duration::ZERO);
        assert_eq!(
            left_until(renew_at, u64::MAX, now),
            Duration::from_micros(i64::MAX as u64 - now as u64)
        );
    }
}

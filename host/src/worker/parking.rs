//! Parked workers and their held leases: the registry between a worker waiting in
//! `events.next-holding` (`imports/process.rs`) and the renewer (`worker/renewals.rs`). It
//! knows no store: it keeps each parked worker's leases, says which are due, takes back the
//! results of a renewal, and wakes a worker only when it must look: `wake` (a renewal found its
//! cancel flag set or its round answered or failed) or `timeout` (a renewal refused, failed, or
//! late by a whole period: the worker renews by itself, and ends if it cannot).
//!
//! Lateness is watched by one task for all parked workers (the watcher), not by a timer per
//! worker: a parked worker's task is resumed only when it must look, never once a period to find
//! that its leases were renewed meanwhile (at 10,000 parked that was 2,000 resumptions of a
//! component instance a second). The watcher sleeps until the earliest lateness (at most
//! [`IDLE_LOOK`]), and is independent of the renewer, so a renewer stuck in the store still
//! leaves its workers woken in time.
//!
//! Parking wakes neither the renewer nor the watcher unless the new entry needs them sooner than
//! they already planned to look: a parked worker is resumed by its own longest wait and parks again
//! with the same leases, and each look is a scan of every entry, so a wake-up per park made the
//! idle cost grow with the square of the parked workers.

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
/// How long the renewer, and the watcher of lateness, sleep at most before looking again.
const IDLE_LOOK: Duration = Duration::from_secs(1);
/// The shortest sleep of the watcher of lateness.
const LATENESS_FLOOR: Duration = Duration::from_millis(5);

/// The parked workers of one [`Executions`](super::Executions).
pub struct Parking {
    clock: Arc<dyn Clock>,
    parked: Mutex<Parked>,
    /// A worker parked (the renewer may need to wake earlier).
    arrived: Notify,
    /// A worker parked (the watcher of lateness may need to wake earlier).
    parked_one: Notify,
}

impl std::fmt::Debug for Parking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parking").finish_non_exhaustive()
    }
}

struct Parked {
    entries: HashMap<u64, Entry>,
    next_id: u64,
    /// The watcher of lateness runs.
    watching: bool,
    /// When the renewer looks next (microseconds since the epoch; `i64::MAX`: not known, so a
    /// park wakes it).
    renewer_looks_at: i64,
    /// When the watcher of lateness looks next (the same way).
    watcher_looks_at: i64,
}

impl Default for Parked {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            next_id: 0,
            watching: false,
            renewer_looks_at: i64::MAX,
            watcher_looks_at: i64::MAX,
        }
    }
}

/// Whether a worker parking with `held` needs the renewer and the watcher of lateness to look
/// sooner than they plan to: its renewal is due (less its coalescing window), or it would be
/// late, before their next look.
fn wakes(parked: &Parked, held: &HeldLeases) -> (bool, bool) {
    let renew_at = micros(&held.renew_at);
    let period = Duration::from_millis(held.renew_every_ms);
    let window = micros_of((period / 4).min(COALESCE));
    (
        renew_at.saturating_sub(window) < parked.renewer_looks_at,
        renew_at.saturating_add(micros_of(period)) < parked.watcher_looks_at,
    )
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
            parked_one: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Parked> {
        self.parked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Parks `held` until the returned guard is finished or dropped.
    pub fn park(self: &Arc<Self>, held: HeldLeases) -> Holding {
        let notify = Arc::new(Notify::new());
        let (id, (renewer, watcher)) = {
            let mut parked = self.lock();
            if !parked.watching
                && let Ok(runtime) = tokio::runtime::Handle::try_current()
            {
                parked.watching = true;
                // It looks at every entry when it starts.
                parked.watcher_looks_at = i64::MIN;
                runtime.spawn(watch_lateness(self.clone()));
            }
            let wakes = wakes(&parked, &held);
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
            (id, wakes)
        };
        if renewer {
            self.wake_renewer();
        }
        if watcher {
            self.parked_one.notify_one();
        }
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
            parked.renewer_looks_at = now.saturating_add(micros_of(wait));
            return (Vec::new(), wait);
        }
        // The renewer looks again as soon as this renewal is done.
        parked.renewer_looks_at = now;
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
        let mut results = results.map(Vec::into_iter);
        for id in ids {
            let result = results.as_mut().and_then(Iterator::next);
            let Some(entry) = parked.entries.get_mut(id) else {
                continue;
            };
            entry.in_flight = false;
            match result {
                Some(HeldRenewal::Renewed(held)) => entry.set(held),
                Some(HeldRenewal::Attention(held)) => {
                    entry.set(held);
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

/// The watcher of lateness: wakes, with [`Event::Timeout`], every parked worker whose leases are
/// late by a whole period (not renewed: the renewer failed, is stuck, or is gone), then sleeps
/// until the next lateness. Ends when no worker is parked (the next to park starts another).
async fn watch_lateness(parking: Arc<Parking>) {
    /// Marks the watcher gone however its task ends (its runtime shut down included).
    struct Watching(Arc<Parking>);
    impl Drop for Watching {
        fn drop(&mut self) {
            self.0.lock().watching = false;
        }
    }
    let watching = Watching(parking);
    let parking = &watching.0;
    loop {
        let sleep = {
            let mut parked = parking.lock();
            if parked.entries.is_empty() {
                return;
            }
            parking.signal_late(&mut parked)
        };
        tokio::select! {
            () = tokio::time::sleep(sleep) => {}
            () = parking.parked_one.notified() => {}
        }
    }
}

impl Parking {
    /// Signals every parked worker late by a whole period; returns how long until the next
    /// one would be (at most [`IDLE_LOOK`], at least [`LATENESS_FLOOR`]).
    fn signal_late(&self, parked: &mut Parked) -> Duration {
        let now = self.clock.now().timestamp_micros();
        let mut next = IDLE_LOOK;
        for entry in parked.entries.values_mut() {
            if entry.signal.is_some() {
                continue;
            }
            let late_in = left_until(entry.renew_at, entry.held.renew_every_ms, now);
            if late_in.is_zero() {
                entry.signal = Some(Event::Timeout);
                entry.notify.notify_one();
            } else {
                next = next.min(late_in);
            }
        }
        let next = next.max(LATENESS_FLOOR);
        parked.watcher_looks_at = now.saturating_add(micros_of(next));
        next
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
    /// renewal refused or failed, or late by a whole period: the watcher of lateness says so).
    pub async fn signalled(&self) -> Event {
        loop {
            {
                let parked = self.parking.lock();
                let Some(entry) = parked.entries.get(&self.id) else {
                    return Event::Timeout;
                };
                if let Some(signal) = &entry.signal {
                    return signal.clone();
                }
            }
            self.notify.notified().await;
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

/// `duration` in microseconds (saturating).
fn micros_of(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
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
    use crate::api::clock::ManualClock;
    use crate::component::bindings::m3::managed_input::types::Lease;

    fn held(renew_at: Timestamp, renew_every_ms: u64) -> HeldLeases {
        HeldLeases {
            execution_id: "exec-1".into(),
            lease: Lease {
                owner_id: "worker".into(),
                lease_token: "0123456789abcdef0123456789abcdef".into(),
                expires_at: renew_at,
            },
            version: 1,
            round: None,
            ttl_ms: 3 * renew_every_ms,
            renew_at,
            renew_every_ms,
        }
    }

    fn timestamp(at: chrono::DateTime<chrono::Utc>) -> Timestamp {
        Timestamp {
            seconds: at.timestamp(),
            nanoseconds: at.timestamp_subsec_nanos(),
        }
    }

    /// One watcher for every parked worker: a worker whose leases nobody renews is woken with
    /// `timeout` once they are late by a whole period, and one whose leases a renewal moved on
    /// is left parked; the watcher ends when nobody is parked, and the next to park starts
    /// another.
    #[tokio::test]
    async fn a_worker_is_woken_when_its_leases_are_late_by_a_period_and_not_before() {
        let start = chrono::Utc::now();
        let clock = Arc::new(ManualClock::new(start));
        let parking = Arc::new(Parking::new(clock.clone()));
        let renewed = parking.park(held(timestamp(start), 50));
        let forgotten = parking.park(held(timestamp(start), 50));
        let (due, _) = parking.take_due();
        assert_eq!(due.len(), 2, "both are due at once");
        // The first is renewed for a day; the second's renewal is lost.
        let mut later = held(timestamp(start + chrono::TimeDelta::days(1)), 50);
        later.version = 2;
        parking.settle(&[due[0].0], Some(vec![HeldRenewal::Renewed(later)]));
        let (renewed, forgotten) = if due[0].0 == renewed.id {
            (renewed, forgotten)
        } else {
            (forgotten, renewed)
        };
        clock.advance(chrono::TimeDelta::milliseconds(100));
        let woken = tokio::time::timeout(Duration::from_secs(10), forgotten.signalled()).await;
        assert!(
            matches!(woken, Ok(Event::Timeout)),
            "the worker whose renewal was lost was not woken"
        );
        // The renewed one is not late: its watcher looks at least once a second, and it stays
        // parked through two of those looks.
        let still = tokio::time::timeout(
            2 * IDLE_LOOK + Duration::from_millis(200),
            renewed.signalled(),
        )
        .await;
        assert!(still.is_err(), "a renewed worker was woken: {still:?}");
        clock.advance(chrono::TimeDelta::days(2));
        let woken = tokio::time::timeout(Duration::from_secs(10), renewed.signalled()).await;
        assert!(matches!(woken, Ok(Event::Timeout)), "late after two days");
        drop((renewed, forgotten));
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while parking.lock().watching {
            assert!(
                std::time::Instant::now() < until,
                "the watcher outlived its workers"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let again = parking.park(held(timestamp(clock.now()), 50));
        assert!(parking.lock().watching, "parking again starts a watcher");
        clock.advance(chrono::TimeDelta::milliseconds(100));
        let woken = tokio::time::timeout(Duration::from_secs(10), again.signalled()).await;
        assert!(matches!(woken, Ok(Event::Timeout)));
    }

    /// A worker that parks again with the leases it had wakes neither the renewer nor the
    /// watcher of lateness (each look is a scan of every parked worker); one whose renewal is due
    /// before the renewer's next look wakes the renewer, and one that would be late before the
    /// watcher's next look wakes the watcher.
    #[test]
    fn a_park_wakes_the_renewer_and_the_watcher_only_when_they_must_look_sooner() {
        let start = chrono::Utc::now();
        let clock = Arc::new(ManualClock::new(start));
        let parking = Arc::new(Parking::new(clock.clone()));
        let in_a_minute = held(timestamp(start + chrono::TimeDelta::minutes(1)), 5_000);
        assert_eq!(
            wakes(&parking.lock(), &in_a_minute),
            (true, true),
            "before either has looked, a park wakes both"
        );
        let _parked = parking.park(in_a_minute.clone());
        let (due, wait) = parking.take_due();
        assert!(due.is_empty());
        assert_eq!(wait, IDLE_LOOK, "the renewer looks again within a second");
        let next = {
            let mut parked = parking.lock();
            parking.signal_late(&mut parked)
        };
        assert_eq!(next, IDLE_LOOK, "so does the watcher");
        let parked = parking.lock();
        assert_eq!(
            wakes(&parked, &in_a_minute),
            (false, false),
            "the same leases parked again"
        );
        // Due at half a second (less a quarter of a second's coalescing), late only after five.
        let due_soon = held(
            timestamp(start + chrono::TimeDelta::milliseconds(500)),
            5_000,
        );
        assert_eq!(wakes(&parked, &due_soon), (true, false));
        // Late by a whole period half a second from now.
        let late_soon = held(
            timestamp(start - chrono::TimeDelta::milliseconds(4_500)),
            5_000,
        );
        assert_eq!(wakes(&parked, &late_soon), (true, true));
        // No representable renewal time: due at once.
        assert_eq!(wakes(&parked, &held(at(i64::MAX, 0), 5_000)), (true, true));
    }

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

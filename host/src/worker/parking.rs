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
use chrono::TimeDelta;
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
        let mut wait = IDLE_LOOK;
        let mut triggered = false;
        let mut candidates = Vec::new();
        for (id, entry) in &parked.entries {
            if entry.in_flight || entry.signal.is_some() {
                continue;
            }
            let period = Duration::from_millis(entry.held.renew_every_ms);
            let left = until(&entry.held.renew_at, 0, &self.clock);
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
                Some(HeldRenewal::Renewed(held)) => entry.held = held.clone(),
                Some(HeldRenewal::Attention(held)) => {
                    entry.held = held.clone();
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
                until(
                    &entry.held.renew_at,
                    entry.held.renew_every_ms,
                    &self.parking.clock,
                )
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

/// How long from the clock's now until `after_ms` milliseconds past `at` (zero when that has
/// passed, or when `at` is no representable time).
fn until(at: &Timestamp, after_ms: u64, clock: &Arc<dyn Clock>) -> Duration {
    let after = TimeDelta::try_milliseconds(i64::try_from(after_ms).unwrap_or(i64::MAX));
    convert::datetime(at)
        .ok()
        .zip(after)
        .and_then(|(at, after)| at.checked_add_signed(after))
        .and_then(|due| (due - clock.now()).to_std().ok())
        .unwrap_or(Duration::ZERO)
}

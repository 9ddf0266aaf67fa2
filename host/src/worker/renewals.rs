//! The renewer: one task per [`Executions`](super::Executions) while any of its workers runs.
//! It sleeps until a parked worker's renewal is (nearly) due, then renews the due leases
//! (`parking.rs` says which) with the component's `renew-held`, up to `MAX_HELD` workers per
//! write transaction, and hands the results back to the parked workers. The component decides
//! each renewal exactly as the worker's own; the host only schedules. Only a parked worker is
//! renewed for: one that is running (or frozen in a loop) is not, and its leases still expire.

use super::parking::Parking;
use crate::api::managed_input::DatabaseStore;
use crate::component::bindings::m3::managed_input::types::HeldLeases;
use std::sync::{Arc, Mutex};

/// Most workers' leases per `renew-held` call (the component's limit).
const MAX_HELD: usize = 256;

/// The renewer of one [`Executions`](super::Executions) and the workers it serves.
#[derive(Debug)]
pub struct Renewals {
    store: Arc<DatabaseStore>,
    parking: Arc<Parking>,
    crew: Arc<Mutex<Crew>>,
}

/// Who runs: the renewer runs while there is a worker.
#[derive(Debug, Default)]
struct Crew {
    workers: usize,
    renewer: bool,
}

impl Renewals {
    /// Renewals on `store`'s database.
    pub fn new(store: Arc<DatabaseStore>) -> Self {
        let parking = Arc::new(Parking::new(store.options().clock.clone()));
        Self {
            store,
            parking,
            crew: Arc::default(),
        }
    }

    /// Where the workers park.
    pub fn parking(&self) -> &Arc<Parking> {
        &self.parking
    }

    /// Counts a worker in until the guard is dropped, and starts the renewer on the current
    /// tokio runtime if it does not run.
    pub fn enlist(&self) -> Enlisted {
        let mut crew = self.crew.lock().unwrap_or_else(|e| e.into_inner());
        crew.workers += 1;
        if !crew.renewer {
            crew.renewer = true;
            tokio::spawn(renewer(
                self.store.clone(),
                self.parking.clone(),
                self.crew.clone(),
            ));
        }
        Enlisted {
            crew: self.crew.clone(),
            parking: self.parking.clone(),
        }
    }
}

/// A worker counted in (see [`Renewals::enlist`]).
pub struct Enlisted {
    crew: Arc<Mutex<Crew>>,
    parking: Arc<Parking>,
}

impl Drop for Enlisted {
    fn drop(&mut self) {
        let mut crew = self.crew.lock().unwrap_or_else(|e| e.into_inner());
        crew.workers -= 1;
        drop(crew);
        // The renewer looks again at once (and ends if it was the last worker).
        self.parking.wake_renewer();
    }
}

/// Renews what is due, group by group, until no worker runs.
async fn renewer(store: Arc<DatabaseStore>, parking: Arc<Parking>, crew: Arc<Mutex<Crew>>) {
    // However the task ends (its runtime shut down included), the next worker starts another.
    let mut running = Running {
        crew: crew.clone(),
        armed: true,
    };
    loop {
        {
            // Under the lock `enlist` counts in with: a worker enlisted after this renewer
            // ended starts a new one, and never two run.
            let mut crew = crew.lock().unwrap_or_else(|e| e.into_inner());
            if crew.workers == 0 {
                crew.renewer = false;
                running.armed = false;
                return;
            }
        }
        let (mut due, wait) = parking.take_due();
        // In execution order: on PostgreSQL a renewal locks each execution it renews, and every
        // transaction that locks several (renewals, recovery) takes them in this one order, so
        // none waits for another in a circle.
        due.sort_by(|(_, a), (_, b)| a.execution_id.cmp(&b.execution_id));
        if due.is_empty() {
            tokio::select! {
                () = parking.arrival() => {}
                () = tokio::time::sleep(wait) => {}
            }
            continue;
        }
        let mut due = due.into_iter().peekable();
        while due.peek().is_some() {
            let (ids, held): (Vec<u64>, Vec<HeldLeases>) = due.by_ref().take(MAX_HELD).unzip();
            let store = store.clone();
            let outcome = tokio::task::spawn_blocking(move || {
                store
                    .pool()
                    .call(|b, s| b.m3_managed_input_runtime().call_renew_held(s, &held))
            })
            .await;
            let results = match outcome {
                Ok(Ok(Ok(results))) if results.len() == ids.len() => Some(results),
                _ => None,
            };
            parking.settle(&ids, results);
        }
    }
}

/// Marks the renewer gone when its task is dropped before it ends by itself (its runtime shut
/// down).
struct Running {
    crew: Arc<Mutex<Crew>>,
    armed: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.armed {
            self.crew.lock().unwrap_or_else(|e| e.into_inner()).renewer = false;
        }
    }
}

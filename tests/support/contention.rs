//! One contending worker process of `postgres_faults` (`m3-test-helper contend <db> <worker>`):
//! it tries to claim every one of the [`ROUNDS`] rounds; for each it wins, it waits for the
//! answer, delivers it once (`start_delivery` committed before the delivery is reported) and
//! resolves the round. It prints a [`CLAIMED`] line per claim won and a [`DELIVERED`] line per
//! delivery.

use crate::backends::open_named;
use crate::claim;
use anyhow::{Context, Result, bail, ensure};
use m3::{ErrorCode, ManagedInputStatus, ManagedInputStore, StoreOptions};
use std::thread;
use std::time::{Duration, Instant};

/// Rounds contended for.
pub const ROUNDS: usize = 12;
/// Starts the line a worker prints for a claim it won: `<round> <worker>` follow.
pub const CLAIMED: &str = "M3-CONTEND-CLAIMED ";
/// Starts the line a worker prints for a delivery it started: `<round> <worker>` follow.
pub const DELIVERED: &str = "M3-CONTEND-DELIVERED ";

/// The id of contended round `i`.
pub fn round_id(i: usize) -> String {
    format!("contended-{i}")
}

/// The stores of the contention: a busy timeout of 30 s. The contention is about agreement
/// (one claim, one acknowledged answer, one delivery per round) among 40 writers on 2 cores,
/// with the rest of the suite running beside it; a write that waits longer than the default
/// 5 s there is load, not a finding (the busy timeout's own promise is `concurrency::*`'s).
pub fn contended_options() -> StoreOptions {
    StoreOptions {
        busy_timeout_ms: 30_000,
        ..StoreOptions::default()
    }
}

/// The worker process `worker` on the database `db` names.
pub fn run(db: &str, worker: &str) -> Result<()> {
    let store = open_named(db, contended_options());
    let mut won = Vec::new();
    for i in 0..ROUNDS {
        let id = round_id(i);
        // A lease far longer than the run: a worker process slow to start on a loaded machine
        // must find the others' rounds held, never expired.
        match store.claim_round(&id, &claim(worker, Duration::from_secs(900))) {
            Ok(lease) => {
                println!("{CLAIMED}{id} {worker}");
                won.push((id, lease));
            }
            // Another worker holds it, or already saw it through.
            Err(e)
                if matches!(
                    e.code(),
                    Some(ErrorCode::LeaseHeld | ErrorCode::RoundTerminal)
                ) => {}
            Err(e) => bail!("{id}: claim: {e}"),
        }
    }
    for (id, lease) in won {
        let until = Instant::now() + Duration::from_secs(600);
        loop {
            let record = store.get_round(&id)?.context("the round disappeared")?;
            if record.status == ManagedInputStatus::ResponseValidated {
                break;
            }
            ensure!(
                record.status == ManagedInputStatus::Pending,
                "{id}: {}",
                record.status
            );
            ensure!(Instant::now() < until, "{id} was never answered");
            thread::sleep(Duration::from_millis(10));
        }
        store.start_delivery(&id, &lease, &format!("deliver-{id}"))?;
        println!("{DELIVERED}{id} {worker}");
        store.mark_delivered(&id, &lease)?;
        store.resolve(&id, &lease)?;
    }
    Ok(())
}

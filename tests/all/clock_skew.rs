//! Time across machines on PostgreSQL (docs/decisions/0012-postgresql-time-is-the-servers.md):
//! workers whose own clocks disagree by seconds decide on the same leases, because each reads the
//! database server's time (`TimeSource::DatabaseServer`, PostgreSQL's default). The same skew with
//! each machine's clock read as it is (`TimeSource::Clock`) shows what that prevents.

use chrono::{DateTime, TimeDelta, Utc};
use m3::*;
use m3_tests::backends::Db;
use m3_tests::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A machine's clock that is `skew` off the true time.
struct Skewed(TimeDelta);

impl Clock for Skewed {
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.0
    }
}

/// Seconds each worker's clock is off, ahead and behind.
const SKEW_SECS: i64 = 5;
/// The leases the tests take.
const LEASE: Duration = Duration::from_secs(3);
/// How far the server's time read by a worker may be off: half a query's round trip, well
/// under this on loopback; the skew allowance of the lease rules is this, not the skew.
const ALLOWANCE: Duration = Duration::from_millis(750);

fn worker(db: &Db, skew_secs: i64, time: TimeSource) -> DatabaseStore {
    db.open(StoreOptions {
        clock: Arc::new(Skewed(TimeDelta::seconds(skew_secs))),
        time,
        ..StoreOptions::default()
    })
}

fn owned_round(store: &DatabaseStore, owner: &str, round_id: &str) -> Instant {
    let created = Instant::now();
    create(
        store,
        &NewRound {
            owner: Some(claim(owner, LEASE)),
            ..address_round(round_id)
        },
    );
    created
}

/// Recovers `round_id` through `store` as soon as it may: how long after `since` that was.
fn recovered_after(store: &DatabaseStore, round_id: &str, since: Instant) -> Duration {
    let give_up = since + LEASE * 4 + Duration::from_secs(SKEW_SECS as u64 * 2);
    loop {
        match store.fail_recovery(round_id, None, "its worker is gone") {
            Ok(record) => {
                assert_eq!(record.status, ManagedInputStatus::Failed);
                return since.elapsed();
            }
            Err(e) => {
                assert_eq!(e.code(), Some(ErrorCode::LeaseHeld), "{e}");
                assert!(Instant::now() < give_up, "{round_id} was never recoverable");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

#[test]
fn workers_whose_clocks_are_five_seconds_apart_agree_on_leases() {
    let db = Db::postgres();
    let ahead = worker(&db, SKEW_SECS, TimeSource::DatabaseServer);
    let behind = worker(&db, -SKEW_SECS, TimeSource::DatabaseServer);

    // A live lease of the worker whose clock is behind is not recovered by the one ahead (which,
    // reading its own clock, would see it expired at once), and is recoverable once it expired.
    let since = owned_round(&behind, "worker-behind", "r-behind");
    let after = recovered_after(&ahead, "r-behind", since);
    assert!(
        after + ALLOWANCE >= LEASE,
        "a live lease was recovered after {after:?} (lease {LEASE:?})"
    );
    assert!(
        after <= LEASE + ALLOWANCE,
        "an expired lease was missed for {:?} past its expiry",
        after - LEASE
    );

    // And the other way: the worker behind does not miss the expiry of the one ahead's lease
    // (reading its own clock, it would wait 10 s more).
    let since = owned_round(&ahead, "worker-ahead", "r-ahead");
    let after = recovered_after(&behind, "r-ahead", since);
    assert!(after + ALLOWANCE >= LEASE, "recovered live after {after:?}");
    assert!(
        after <= LEASE + ALLOWANCE,
        "an expired lease was missed for {:?} past its expiry",
        after - LEASE
    );

    // Both read the server's time: on this machine, the true time, whatever their clocks say.
    for (store, round_id) in [(&ahead, "r-time-ahead"), (&behind, "r-time-behind")] {
        let record = store.create_round(&address_round(round_id)).unwrap();
        let off = (record.pending.created_at - Utc::now()).abs();
        assert!(
            off < TimeDelta::from_std(ALLOWANCE).unwrap(),
            "{round_id}: the store's time is {off} off the server's"
        );
    }
}

/// The control: the same skew, each worker reading its own clock, recovers a live lease at
/// once (and would miss an expired one for twice the skew). This is what the server's time
/// prevents, and it shows the test above can fail.
#[test]
fn the_same_skew_read_from_each_machine_s_clock_recovers_a_live_lease() {
    let db = Db::postgres();
    let ahead = worker(&db, SKEW_SECS, TimeSource::Clock);
    let behind = worker(&db, -SKEW_SECS, TimeSource::Clock);
    let since = owned_round(&behind, "worker-behind", "r-behind");
    let after = recovered_after(&ahead, "r-behind", since);
    assert!(
        after < LEASE / 2,
        "the worker ahead waited {after:?}: the skew did not show"
    );
}

/// SQLite has one machine's clock: asking it for a database server's time is refused.
#[test]
fn a_sqlite_store_refuses_the_database_server_s_time() {
    let db = TempDb::new();
    let err = SqliteManagedInputStore::open(
        &db.path,
        StoreOptions {
            time: TimeSource::DatabaseServer,
            ..StoreOptions::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.code(), Some("incompatible_database"), "{err}");
}

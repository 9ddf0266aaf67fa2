//! Crash tests: a worker process is killed with SIGKILL at named fault points (the host's
//! `fault-points` feature), and a fresh store on the same file must find exactly what was
//! committed: an intact database, every committed step kept, nothing half-written, and an
//! unresolved round of the dead worker failed closed by recovery exactly once.

use m3::*;
use m3_tests::backends::{Db, integrity};
use m3_tests::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Duration;

const WORKER: &str = env!("CARGO_BIN_EXE_m3-test-fault-worker");
const LEASE_TTL_MS: u64 = 400;

/// Runs the worker until the fault point kills it; returns the operations it acknowledged.
fn crash_at(db: &Db, point: &str, hit: u32) -> Vec<String> {
    crash_with_lease(db, point, hit, LEASE_TTL_MS)
}

fn crash_with_lease(db: &Db, point: &str, hit: u32, lease_ttl_ms: u64) -> Vec<String> {
    let output = Command::new(WORKER)
        .arg(db.name())
        .arg(lease_ttl_ms.to_string())
        .env("M3_FAULT_POINT", point)
        .env("M3_FAULT_HIT", hit.to_string())
        .output()
        .expect("run the fault worker");
    assert_eq!(
        output.status.signal(),
        Some(9),
        "{point}#{hit}: not killed: {output:?}"
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("acknowledged ").map(str::to_string))
        .collect()
}

fn answer() -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )])
}

fn status(store: &DatabaseStore) -> Option<ManagedInputStatus> {
    store.get_round("r1").unwrap().map(|r| r.status)
}

fn wait_for_lease_expiry() {
    std::thread::sleep(Duration::from_millis(LEASE_TTL_MS + 200));
}

// Each on SQLite and on PostgreSQL alike.
m3_tests::on_both_backends! {
    fn the_worker_runs_to_the_end_without_a_fault_point(db) {
        let output = Command::new(WORKER)
            .arg(db.name())
            .arg("60000")
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        assert_eq!(status(&db.store()), Some(ManagedInputStatus::Resolved));
    }

    fn killed_before_the_first_commit_nothing_is_stored(db) {
        assert!(crash_at(db, "commit.before", 1).is_empty());
        assert_eq!(integrity(db), "ok");
        assert_eq!(status(&db.store()), None);
    }

    fn killed_after_the_round_insert_the_round_survives_and_recovery_fails_it_once(db) {
        let ttl = 3000;
        let acknowledged = crash_with_lease(db, "create_round.returned", 1, ttl);
        assert!(acknowledged.is_empty(), "committed, never acknowledged");
        let store = db.store();
        let record = store.get_round("r1").unwrap().unwrap();
        assert_eq!(record.status, ManagedInputStatus::Pending);
        // While the dead worker's lease still runs, recovery does not touch the round. The lease is
        // long enough for this to run well before it expires; the first assertion says if it did not.
        let expires = record.lease.unwrap().expires_at;
        let margin = chrono::TimeDelta::milliseconds(1000);
        assert!(
            chrono::Utc::now() + margin < expires,
            "the test ran too slowly for its lease"
        );
        let refused = store.fail_recovery("r1", None, "");
        assert_refused(
            refused.as_ref(),
            "ManagedInputConflict",
            ErrorCode::LeaseHeld,
        );
        std::thread::sleep(Duration::from_millis(ttl + 200));
        let late = store.submit_responses("r1", &answer(), "late");
        assert_refused(
            late.as_ref(),
            "ManagedInputRecoveryError",
            ErrorCode::RecoveryUnavailable,
        );
        let failed = store.fail_recovery("r1", None, "").unwrap();
        assert_eq!(
            failed.failure.unwrap().code,
            FailureCode::RecoveryUnavailable
        );
        assert_refused(
            store.fail_recovery("r1", None, "").as_ref(),
            "ManagedInputStateError",
            ErrorCode::RoundTerminal,
        );
        assert_refused(
            store
                .claim_round("r1", &OwnerClaim::new("replacement"))
                .as_ref(),
            "ManagedInputRecoveryError",
            ErrorCode::RecoveryUnavailable,
        );
        assert_eq!(integrity(db), "ok");
    }

    fn killed_while_committing_an_answer_nothing_of_it_is_stored(db) {
        // The second commit is the submit's.
        assert_eq!(crash_at(db, "commit.before", 2), ["create_round"]);
        let record = db.store().get_round("r1").unwrap().unwrap();
        assert_eq!(record.status, ManagedInputStatus::Pending);
        assert!(record.responses.is_none() && record.idempotency_key.is_none());
        assert_eq!(integrity(db), "ok");
    }

    fn an_answer_committed_but_never_acknowledged_survives_and_its_retry_gets_the_record(db) {
        assert_eq!(
            crash_at(db, "submit_responses.returned", 1),
            ["create_round"]
        );
        let store = db.store();
        let stored = store.get_round("r1").unwrap().unwrap();
        assert_eq!(stored.status, ManagedInputStatus::ResponseValidated);
        assert_eq!(stored.responses, Some(answer()));
        // The caller never saw the acknowledgement and retries with the persisted key and answer.
        let retried = store
            .submit_responses("r1", &answer(), "address-r1")
            .unwrap();
        assert_eq!(retried, stored);
        assert_eq!(integrity(db), "ok");
    }

    fn killed_after_delivery_started_the_answer_is_never_sent_again_and_the_round_says_why(db) {
        for (point, hit) in [("start_delivery.returned", 1), ("commit.after", 3)] {
            let db_case = db.another();
            assert_eq!(
                crash_at(&db_case, point, hit),
                ["create_round", "submit_responses"],
                "{point}"
            );
            let store = db_case.store();
            let record = store.get_round("r1").unwrap().unwrap();
            assert_eq!(
                record.status,
                ManagedInputStatus::DeliveryStarted,
                "{point}"
            );
            assert_eq!(record.delivery_attempts, 1);
            wait_for_lease_expiry();
            let failed = store.fail_recovery("r1", None, "").unwrap();
            assert_eq!(failed.status, ManagedInputStatus::Failed);
            assert_eq!(failed.delivery_attempts, 1, "never started twice");
            assert_eq!(
                failed.failure.unwrap().code,
                FailureCode::RecoveryUnavailable
            );
            assert_eq!(integrity(&db_case), "ok");
        }
    }

    fn killed_after_delivered_recovery_still_fails_the_unresolved_round(db) {
        assert_eq!(
            crash_at(db, "mark_delivered.returned", 1),
            ["create_round", "submit_responses", "start_delivery"]
        );
        let store = db.store();
        assert_eq!(status(&store), Some(ManagedInputStatus::Delivered));
        wait_for_lease_expiry();
        let failed = store.fail_recovery("r1", None, "").unwrap();
        assert_eq!(
            failed.failure.unwrap().code,
            FailureCode::RecoveryUnavailable
        );
    }

    /// Killed while renewing its lease (the renewal committed, never acknowledged): the round keeps
    /// the renewed lease until it expires; then recovery fails it once and nothing else moved.
    fn killed_during_renew_the_round_is_recovered_once_its_renewed_lease_expires(db) {
        let output = Command::new(WORKER)
            .arg(db.name())
            .arg(LEASE_TTL_MS.to_string())
            .env("M3_FAULT_RENEW", "1")
            .env("M3_FAULT_POINT", "renew.returned")
            .env("M3_FAULT_HIT", "1")
            .output()
            .expect("run the fault worker");
        assert_eq!(output.status.signal(), Some(9), "not killed: {output:?}");
        let acknowledged: Vec<String> = String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("acknowledged ").map(str::to_string))
            .collect();
        assert_eq!(acknowledged, ["create_round"]);
        let store = db.store();
        let record = store.get_round("r1").unwrap().unwrap();
        assert_eq!(record.status, ManagedInputStatus::Pending);
        let lease = record.lease.expect("still owned");
        assert!(
            lease.expires_at
                > record.pending.created_at + chrono::TimeDelta::milliseconds(LEASE_TTL_MS as i64),
            "the renewal was committed"
        );
        // Not while the renewed lease is live.
        assert_refused(
            store.fail_recovery("r1", None, "").as_ref(),
            "ManagedInputConflict",
            ErrorCode::LeaseHeld,
        );
        wait_for_lease_expiry();
        let failed = store.fail_recovery("r1", None, "").unwrap();
        assert_eq!(
            failed.failure.unwrap().code,
            FailureCode::RecoveryUnavailable
        );
        assert_refused(
            store.fail_recovery("r1", None, "").as_ref(),
            "ManagedInputStateError",
            ErrorCode::RoundTerminal,
        );
        assert_eq!(integrity(db), "ok");
    }
}

//! Cross-connection and cross-process change notification through the one path the worker uses
//! (`worker/changes.rs`, one watcher per database: `data_version`, then the wake-up rows): a
//! worker waiting for an answer learns of a commit made by another store object or another
//! process, and a waiter on one execution wakes only for commits that concern that execution.

use m3::*;
use m3_tests::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_m3-test-fault-worker");
const QUIET: Duration = Duration::from_millis(150);

fn signal(db: &TempDb) -> (SqliteExecutionStore, m3::testing::ChangeSignal) {
    let store = SqliteExecutionStore::open(&db.path).unwrap();
    let signal = m3::testing::ChangeSignal::on(&store.executions().unwrap());
    (store, signal)
}

#[tokio::test]
async fn a_commit_by_another_store_object_is_noticed_and_reads_are_not() {
    let db = TempDb::new();
    create(&db.store(), &address_round("r1"));
    let (_store, mut watch) = signal(&db);
    assert!(!watch.wait(QUIET).await, "nothing happened yet");
    // Reads, by anyone, are not changes.
    db.store().get_round("r1").unwrap();
    db.store().list_rounds(&RoundFilter::default()).unwrap();
    assert!(!watch.wait(QUIET).await, "reads are not changes");
    // A rejected submission writes nothing.
    let other = db.store();
    let refused = other.submit_responses_json("r1", "{}", "k").unwrap_err();
    assert!(
        matches!(refused, ManagedInputError::Validation(_))
            && refused.code() == Some(ErrorCode::ResponseKeysMismatch),
        "{refused}"
    );
    assert!(
        !watch.wait(QUIET).await,
        "an invalid answer committed nothing"
    );
    let answer = BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )]);
    other.submit_responses("r1", &answer, "k").unwrap();
    assert!(
        watch.wait(Duration::from_secs(20)).await,
        "the commit was not noticed"
    );
    assert!(!watch.wait(QUIET).await, "reported once");
}

#[tokio::test]
async fn a_commit_by_another_process_wakes_a_waiting_worker() {
    let db = TempDb::new();
    let (_store, mut watch) = signal(&db);
    assert!(!watch.wait(QUIET).await, "nothing happened yet");
    let started = Instant::now();
    let child = std::process::Command::new(WORKER)
        .arg(&db.path)
        .arg("60000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let woke = watch.wait(Duration::from_secs(20)).await;
    let latency = started.elapsed();
    let status = tokio::task::spawn_blocking(move || {
        let mut child = child;
        child.wait()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(status.success());
    assert!(woke, "the other process's commit was not noticed");
    println!("woke {latency:?} after starting the other process (includes its start-up)");
    assert!(db.store().get_round("r1").unwrap().is_some());
}

fn round_of(round_id: &str, execution_id: &str) -> NewRound {
    NewRound::new(
        round_id,
        execution_id,
        "shipping",
        "book_shipment",
        address_requests(),
    )
    .owned_by(OwnerClaim::new("worker-1"))
}

fn address_answer() -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )])
}

#[tokio::test]
async fn a_commit_wakes_the_waiters_of_the_execution_it_concerns_and_no_other() {
    let db = TempDb::new();
    let store = SqliteExecutionStore::open(&db.path).unwrap();
    let executions = store.executions().unwrap();
    let a = m3::testing::ExecutionWaiter::on(&executions, "exec-a");
    let b = m3::testing::ExecutionWaiter::on(&executions, "exec-b");
    // Another store object on the file: its commits reach these waiters only through the
    // database (the wake-up rows and the watcher), as another process's would.
    let other = db.store();
    let lease_a = create(&other, &round_of("ra", "exec-a"));
    let lease_b = create(&other, &round_of("rb", "exec-b"));
    for _ in 0..20 {
        other
            .renew("ra", &lease_a, Duration::from_secs(30))
            .unwrap();
        other
            .renew("rb", &lease_b, Duration::from_secs(30))
            .unwrap();
    }
    create(&other, &round_of("rc", "exec-c"));
    assert!(
        !a.wait(QUIET).await && !b.wait(QUIET).await,
        "creations and lease renewals concern no waiter"
    );

    other
        .submit_responses("ra", &address_answer(), "k")
        .unwrap();
    assert!(a.wait(Duration::from_secs(20)).await, "a's answer woke a");
    assert!(!b.wait(QUIET).await, "a's answer left b asleep");
    other
        .submit_responses("ra", &address_answer(), "k")
        .unwrap();
    assert!(
        !a.wait(QUIET).await,
        "a repeated answer writes nothing and wakes nobody"
    );

    other
        .fail(
            "rb",
            &lease_b,
            FailureCode::ServerError,
            "the server went away",
        )
        .unwrap();
    assert!(
        b.wait(Duration::from_secs(20)).await,
        "b's failed round woke b"
    );
    assert!(!a.wait(QUIET).await, "b's failure left a asleep");
    // An answer to another execution's round wakes neither.
    other
        .submit_responses("rc", &address_answer(), "k2")
        .unwrap();
    assert!(!a.wait(QUIET).await && !b.wait(QUIET).await);
}

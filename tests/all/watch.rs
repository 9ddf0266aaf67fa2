//! Cross-connection and cross-process change notification through the one path the worker uses
//! (`worker/changes.rs`, one `data_version` poller per database): a worker waiting for an answer
//! learns of a commit made by another store object or another process, and of nothing else.

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
    assert!(other.submit_responses_json("r1", "{}", "k").is_err());
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

//! Cross-connection and cross-process change notification: a worker waiting for an answer learns
//! of a commit made by another store object or another process (`PRAGMA data_version` on the
//! store's keeper connection).

use m3::*;
use m3_tests::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const WORKER: &str = env!("CARGO_BIN_EXE_m3-test-fault-worker");

#[test]
fn a_commit_by_another_store_object_is_noticed_and_reads_are_not() {
    let db = TempDb::new();
    let waiting = db.store();
    create(&waiting, &address_round("r1"));
    let mut watch = waiting.watch().unwrap();
    assert!(!watch.changed().unwrap());
    // Reads, by anyone, are not changes.
    waiting.get_round("r1").unwrap();
    db.store().list_rounds(&RoundFilter::default()).unwrap();
    assert!(!watch.changed().unwrap());
    // A rejected submission writes nothing.
    let other = db.store();
    assert!(other.submit_responses_json("r1", "{}", "k").is_err());
    assert!(
        !watch.changed().unwrap(),
        "an invalid answer committed nothing"
    );
    let answer = BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )]);
    other.submit_responses("r1", &answer, "k").unwrap();
    assert!(watch.changed().unwrap());
    assert!(!watch.changed().unwrap(), "reported once");
}

#[tokio::test]
async fn a_commit_by_another_process_wakes_a_waiting_worker() {
    let db = TempDb::new();
    let store = db.store();
    let mut watch = store.watch().unwrap();
    assert!(
        !watch.wait(Duration::from_millis(50)).await.unwrap(),
        "nothing happened yet"
    );
    let started = Instant::now();
    let child = std::process::Command::new(WORKER)
        .arg(&db.path)
        .arg("60000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let woke = watch.wait(Duration::from_secs(20)).await.unwrap();
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
    assert!(store.get_round("r1").unwrap().is_some());
}

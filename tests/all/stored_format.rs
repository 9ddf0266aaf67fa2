//! The stored format outlives the release that wrote it: the committed fixture database
//! (`tests/fixtures/format-1.sqlite`, written by `m3-test-write-fixture` through the public API)
//! reads back exactly as it did when it was written: rounds in every status, executions in
//! every lifecycle and outcome.

use m3::ExecutionStore;
use m3_tests::fixture::read_back;
use serde_json::Value;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// A private copy of the fixture (opening a database may migrate it and writes its WAL).
fn copy_of_fixture(dir: &tempfile::TempDir) -> PathBuf {
    let db = dir.path().join("format-1.sqlite");
    std::fs::copy(fixture("format-1.sqlite"), &db).expect("copy the fixture");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    db
}

#[test]
fn the_format_1_fixture_database_reads_back_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let db = copy_of_fixture(&dir);
    let read = read_back(&db).expect("every stored record reads");
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("format-1.json")).unwrap()).unwrap();
    assert_eq!(read, expected);
    // It covers what it claims to: every status of a round, every lifecycle of an execution
    // and every outcome of a finished one.
    let rounds = read["rounds"].as_object().unwrap();
    for status in [
        "pending",
        "response_validated",
        "delivery_started",
        "delivered",
        "resolved",
        "failed",
    ] {
        assert!(
            rounds.values().any(|r| r["status"] == status),
            "no {status} round in the fixture"
        );
    }
    let executions = read["executions"].as_object().unwrap();
    for lifecycle in ["queued", "waiting_for_input", "finished"] {
        assert!(
            executions.values().any(|e| e["lifecycle"] == lifecycle),
            "no {lifecycle} execution in the fixture"
        );
    }
    for outcome in ["succeeded", "failed", "cancelled"] {
        assert!(
            executions.values().any(|e| e["outcome"]["kind"] == outcome),
            "no {outcome} execution in the fixture"
        );
    }
}

/// The fixture is a real check: a stored field renamed without a format step makes its rows
/// unreadable, and a document of a newer format is refused by name, never guessed at.
#[test]
fn a_renamed_stored_field_or_a_newer_format_is_refused() {
    for (sql, words) in [
        (
            "UPDATE managed_input_rounds SET document = \
             replace(document, '\"round_index\"', '\"index_of_round\"')",
            "does not decode",
        ),
        (
            "UPDATE managed_input_rounds SET document = \
             replace(document, '\"format\":1', '\"format\":2')",
            "format 2, newer than this release reads",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = copy_of_fixture(&dir);
        rusqlite::Connection::open(&db)
            .unwrap()
            .execute_batch(sql)
            .unwrap();
        let store = m3::SqliteExecutionStore::open(&db).unwrap();
        let managed = store.managed_input_store().unwrap().unwrap();
        let error = managed
            .get_round("fixture-resolved")
            .expect_err("an unreadable round");
        assert_eq!(error.code(), Some(m3::ErrorCode::CorruptRecord), "{error}");
        assert!(error.to_string().contains(words), "{error}");
        assert_ne!(
            read_back(&db).ok(),
            Some(
                serde_json::from_str::<Value>(
                    &std::fs::read_to_string(fixture("format-1.json")).unwrap()
                )
                .unwrap()
            ),
            "the fixture test would fail"
        );
    }
}

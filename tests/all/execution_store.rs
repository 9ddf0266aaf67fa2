//! "Reopening a store and recovery boundary": `SqliteExecutionStore` resolves its managed-input
//! store lazily, on the same file, and a `SqliteManagedInputStore` on that file reads what it
//! wrote; an in-memory execution store resolves none.

use m3::*;
use m3_tests::*;

#[test]
fn sqlite_execution_store_resolves_its_managed_input_store_lazily_on_the_same_file() {
    let db = TempDb::new();
    let executions = SqliteExecutionStore::open(&db.path).unwrap();
    assert!(
        !db.path.exists(),
        "nothing is opened until the managed-input store is needed"
    );
    let managed = executions
        .managed_input_store()
        .unwrap()
        .expect("a persistent store resolves one");
    assert!(db.path.exists());
    create(managed.as_ref(), &address_round("r1"));
    // The same object is resolved again (no second set of connections).
    let again = executions.managed_input_store().unwrap().unwrap();
    assert!(std::sync::Arc::ptr_eq(&managed, &again));
    // Reopening: a separate managed-input store on the same path reads the round and its status.
    executions.close();
    drop((managed, again));
    let reader = db.store();
    assert_eq!(
        reader.get_round("r1").unwrap().unwrap().status,
        ManagedInputStatus::Pending
    );
}

#[test]
fn a_closed_execution_store_refuses_use_and_keeps_its_data() {
    let db = TempDb::new();
    let executions = SqliteExecutionStore::open(&db.path).unwrap();
    create(
        executions.managed_input_store().unwrap().unwrap().as_ref(),
        &address_round("r1"),
    );
    executions.close();
    assert!(matches!(
        executions.managed_input_store(),
        Err(ExecutionStoreError::Closed)
    ));
    let reopened = SqliteExecutionStore::open(&db.path).unwrap();
    let store = reopened.managed_input_store().unwrap().unwrap();
    assert!(store.get_round("r1").unwrap().is_some());
}

#[test]
fn an_in_memory_execution_store_cannot_resolve_managed_input() {
    assert!(
        InMemoryExecutionStore::default()
            .managed_input_store()
            .unwrap()
            .is_none()
    );
}

#[test]
fn an_execution_store_refuses_bad_paths_at_open() {
    let db = TempDb::new();
    for bad in [
        db.dir.path().to_path_buf(),
        "file:x.sqlite".into(),
        ":memory:".into(),
    ] {
        let err = SqliteExecutionStore::open(&bad).unwrap_err();
        assert!(
            matches!(err, ExecutionStoreError::Open(OpenError::InvalidPath(_))),
            "{}: {err}",
            bad.display()
        );
    }
}

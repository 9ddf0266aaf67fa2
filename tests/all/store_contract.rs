//! The specification's rules for the managed-input store, one test per rule, against the real
//! component and a real SQLite file. Names follow the rules ("Response validation and
//! idempotency", "Persistent store contract", "Reopening a store and recovery boundary", "Typed
//! errors") and the store semantics of architecture.md.

use chrono::TimeDelta;
use m3::*;
use m3_tests::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

fn responses(key: &str, response: ElicitationResponse) -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(key.to_string(), response)])
}

fn address(street: &str, city: &str) -> BTreeMap<String, ElicitationResponse> {
    responses(
        "shipping_address",
        ElicitationResponse::accept(json!({"street": street, "city": city})),
    )
}

fn code_of(e: &ManagedInputError) -> ErrorCode {
    e.code().unwrap_or_else(|| panic!("engine error: {e}"))
}

/// Asserts that a submission is refused with `ManagedInputValidationError(code)`, that the round is
/// byte-for-byte unchanged, and that its idempotency key was not stored.
fn assert_refused_unchanged(store: &DatabaseStore, round_id: &str, raw: &str, code: ErrorCode) {
    let before = store.get_round(round_id).unwrap().unwrap();
    let err = store
        .submit_responses_json(round_id, raw, "key-1")
        .expect_err(raw);
    assert!(
        matches!(err, ManagedInputError::Validation(_)),
        "{raw}: {err}"
    );
    assert_eq!(code_of(&err), code, "{raw}: {err}");
    let after = store.get_round(round_id).unwrap().unwrap();
    assert_eq!(before, after, "{raw}: the round changed");
    assert_eq!(after.status, ManagedInputStatus::Pending);
    assert!(after.idempotency_key.is_none());
}

fn fresh_address_round(store: &DatabaseStore, round_id: &str) -> ManagedInputLease {
    create(store, &address_round(round_id))
}

// ---------------------------------------------------------------------------------------------
// Response validation and idempotency
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Persistent store contract
// ---------------------------------------------------------------------------------------------

/// A one-request round whose request carries `meta` and `task` as its context.
fn with_context(meta: Value, task: Option<Value>) -> NewRound {
    let mut request = FormElicitationRequest {
        message: "?".into(),
        requested_schema: address_schema(),
        context: RequestContext::default(),
    };
    request.context.meta = Some(meta);
    request.context.task = task;
    NewRound::new(
        "rc",
        "e",
        "s",
        "t",
        BTreeMap::from([("q".to_string(), ElicitationRequest::Form(request))]),
    )
}

/// How deep `value` nests: each array or object counts one, the outermost included.
fn nesting_depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(nesting_depth).max().unwrap_or(0),
        Value::Object(members) => 1 + members.values().map(nesting_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// `levels` arrays, one inside the other, around a string.
fn nested_arrays(levels: usize) -> Value {
    let mut value = json!("x");
    for _ in 0..levels {
        value = json!([value]);
    }
    value
}

// ---------------------------------------------------------------------------------------------
// Reopening a store and recovery boundary
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Typed errors
// ---------------------------------------------------------------------------------------------

#[test]
fn opening_refuses_paths_that_are_not_plain_database_files() {
    let db = TempDb::new();
    let cases = [
        db.dir.path().to_path_buf(),                        // a directory
        db.dir.path().join("missing-dir").join("x.sqlite"), // no parent directory
        "file:x.sqlite?mode=memory".into(),
        ":memory:".into(),
        "".into(),
    ];
    let refused = |path: &std::path::Path| {
        let err = SqliteManagedInputStore::open(path, StoreOptions::default()).unwrap_err();
        assert!(
            matches!(err, OpenError::InvalidPath(_)),
            "{}: {err}",
            path.display()
        );
    };
    cases.iter().for_each(|p| refused(p));
    assert!(
        !db.dir.path().join("missing-dir").exists(),
        "nothing created"
    );
    // Symbolic links, to a real database or dangling, and NUL bytes are refused; nothing is
    // created and the link's target is left as it was.
    let real = db.dir.path().join("real.sqlite");
    fresh_address_round(&open(&real, StoreOptions::default()), "r1");
    let before = std::fs::read(&real).unwrap();
    let to_real = db.dir.path().join("to-real.sqlite");
    std::os::unix::fs::symlink(&real, &to_real).unwrap();
    let dangling = db.dir.path().join("dangling.sqlite");
    std::os::unix::fs::symlink(db.dir.path().join("nowhere.sqlite"), &dangling).unwrap();
    let nul = db.dir.path().join("a\0b.sqlite");
    [&to_real, &dangling, &nul].iter().for_each(|p| refused(p));
    assert!(
        !db.dir.path().join("nowhere.sqlite").exists(),
        "the dangling link created its target"
    );
    assert_eq!(
        std::fs::read(&real).unwrap(),
        before,
        "the link's target changed"
    );
    // `..` is plain path syntax: it is resolved like any other component.
    let sub = db.dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let up = sub.join("..").join("up.sqlite");
    fresh_address_round(&open(&up, StoreOptions::default()), "r1");
    assert!(db.dir.path().join("up.sqlite").is_file());
    // A SQLite file of another application is not touched.
    let foreign = db.dir.path().join("foreign.sqlite");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();
    let err = SqliteManagedInputStore::open(&foreign, StoreOptions::default()).unwrap_err();
    assert!(matches!(err, OpenError::Incompatible(_)), "{err}");
}

#[test]
fn schema_migrations_are_versioned_and_a_newer_schema_is_refused() {
    let db = TempDb::new();
    fresh_address_round(&db.store(), "r1");
    let version = |path: &std::path::Path| -> i64 {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(version(&db.path), m3::health::SCHEMA_VERSION);
    // Reopening an up-to-date file migrates nothing and keeps the data.
    assert!(db.store().get_round("r1").unwrap().is_some());
    // A file written by a newer build is refused, untouched.
    rusqlite::Connection::open(&db.path)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let err = SqliteManagedInputStore::open(&db.path, StoreOptions::default()).unwrap_err();
    assert!(matches!(err, OpenError::Incompatible(_)), "{err}");
    assert_eq!(version(&db.path), 99);
    // An empty SQLite file is initialised.
    let empty = db.dir.path().join("empty.sqlite");
    rusqlite::Connection::open(&empty)
        .unwrap()
        .execute_batch("VACUUM")
        .unwrap();
    SqliteManagedInputStore::open(&empty, StoreOptions::default()).unwrap();
    assert_eq!(version(&empty), m3::health::SCHEMA_VERSION);
}

/// Regression (found by the scale benchmark at 10^6 rounds): an execution's rounds in one status
/// were found through the status index, walking every round in that status. The query the
/// store runs for it now uses the (execution, status) index.
#[test]
fn regression_an_execution_s_pending_rounds_are_found_through_its_own_index() {
    let db = TempDb::new();
    drop(db.store()); // creates the schema
    let conn = rusqlite::Connection::open(&db.path).unwrap();
    let plan: Vec<String> = conn
        .prepare(
            "EXPLAIN QUERY PLAN SELECT r.document, v.version FROM managed_input_rounds r \
             LEFT JOIN managed_input_round_versions v ON v.round_id = r.round_id WHERE 1 = 1 \
             AND r.execution_id = ?1 AND r.status = ?2 ORDER BY r.created_at_ns, r.round_id \
             LIMIT ?3",
        )
        .unwrap()
        .query_map(rusqlite::params!["exec-1", "pending", 2], |r| {
            r.get::<_, String>(3)
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter()
            .any(|step| step.contains("managed_input_rounds_by_execution_status")),
        "{plan:?}"
    );
}

#[test]
fn an_unreadable_record_is_a_storage_error_and_is_left_as_it_is() {
    let db = TempDb::new();
    let store = db.store();
    let lease = fresh_address_round(&store, "r1");
    fresh_address_round(&store, "r2");
    let damage = |sql: &str| {
        let conn = rusqlite::Connection::open(&db.path).unwrap();
        conn.execute(sql, []).unwrap();
    };
    // A document that does not decode, and one that disagrees with its row.
    damage(
        "UPDATE managed_input_rounds SET document = '{\"not\":\"a record\"}' WHERE round_id = 'r1'",
    );
    damage("UPDATE managed_input_rounds SET status = 'resolved' WHERE round_id = 'r2'");
    let errors = [
        store.get_round("r1").err(),
        store.submit_responses("r1", &address("a", "b"), "k").err(),
        store.renew("r1", &lease, Duration::from_secs(1)).err(),
        store.fail_recovery("r1", None, "").err(),
        store.get_round("r2").err(),
        store.claim_round("r2", &OwnerClaim::new("w")).err(),
    ];
    for err in errors {
        let err = err.expect("an error");
        assert!(matches!(err, ManagedInputError::Storage(_)), "{err}");
        assert_eq!(code_of(&err), ErrorCode::CorruptRecord);
    }
    let conn = rusqlite::Connection::open(&db.path).unwrap();
    let (document, version): (String, i64) = conn
        .query_row(
            "SELECT document, version FROM managed_input_rounds \
             JOIN managed_input_round_versions USING (round_id) WHERE round_id = 'r1'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(document, "{\"not\":\"a record\"}");
    assert_eq!(version, 1, "a corrupt record is never rewritten");
}

// ---------------------------------------------------------------------------------------------
// The rules above that hold whatever the backend, on SQLite and on PostgreSQL alike
// ---------------------------------------------------------------------------------------------

m3_tests::on_both_backends! {
    /// A read transaction writes nothing: a round's insert and an execution's wake-up are both
    /// refused, typed, and the database stays as it was (until 2026-12-07 SQLite's read
    /// transaction stamped a wake-up row; PostgreSQL refused both).
    fn a_read_transaction_refuses_every_write(db) {
        use m3::testing::internals::backend::rows::{Mode, RoundRow};
        use m3::testing::internals::backend::{StoreError, Transaction};
        let store = db.store();
        fn refused<T>(result: Result<T, StoreError>) -> bool {
            matches!(result, Err(StoreError::Failure(m)) if m == "a read transaction cannot write")
        }
        let mut tx =
            Transaction::begin(m3::testing::internals::backend_of(&store), Mode::Read).unwrap();
        let row = RoundRow {
            round_id: "r1".into(),
            execution_id: "exec-1".into(),
            status: "pending".into(),
            version: 1,
            owner_id: None,
            lease_expires_at_ns: None,
            deadline_ns: None,
            created_at_ns: 1,
            updated_at_ns: 1,
            document: "{}".into(),
        };
        assert!(refused(tx.insert(row)), "a read inserted a round");
        assert!(refused(tx.wake_execution("exec-1")), "a read woke an execution");
        drop(tx);
        assert!(store.get_round("r1").unwrap().is_none());
        assert_eq!(m3_tests::backends::integrity(db), "ok");
    }

    fn a_new_store_object_on_the_same_path_reads_rounds_written_by_another(db) {
        let written = {
            let writer = db.store();
            fresh_address_round(&writer, "r1");
            fresh_address_round(&writer, "r2");
            writer
                .submit_responses("r1", &address("1 Main Street", "Pune"), "address-r1")
                .unwrap()
        };
        let reader = db.store();
        let read = reader.get_round("r1").unwrap().unwrap();
        assert_eq!(read, written);
        assert_eq!(read.status, ManagedInputStatus::ResponseValidated);
        assert_eq!(
            reader.get_round("r2").unwrap().unwrap().status,
            ManagedInputStatus::Pending
        );
        assert_eq!(m3_tests::backends::integrity(db), "ok");
    }

    fn response_map_must_contain_exactly_the_pending_request_keys(db) {
        let store = db.store();
        fresh_address_round(&store, "r1");
        let valid = r#"{"shipping_address":{"action":"accept","content":{"street":"1 Main Street","city":"Pune"}}}"#;
        let content = r#"{"action":"accept","content":{"street":"1 Main Street","city":"Pune"}}"#;
        for raw in [
            format!(r#"{{"billing_address":{content}}}"#), // wrong key
            "{}".to_string(),                              // missing key
            format!(r#"{{"shipping_address":{content},"extra":{content}}}"#), // extra key
            format!(r#"{{"Shipping_Address":{content}}}"#), // case differs
        ] {
            assert_refused_unchanged(&store, "r1", &raw, ErrorCode::ResponseKeysMismatch);
        }
        // The key was never consumed: a valid answer with it succeeds.
        let record = store.submit_responses_json("r1", valid, "key-1").unwrap();
        assert_eq!(record.status, ManagedInputStatus::ResponseValidated);
    }

    fn response_map_must_be_a_json_object(db) {
        let store = db.store();
        fresh_address_round(&store, "r1");
        for raw in ["[]", "\"accept\"", "null", "42", "1e400"] {
            assert_refused_unchanged(&store, "r1", raw, ErrorCode::InvalidResponse);
        }
        for raw in [
            "",
            "{",
            "{\"a\":1,\"a\":1}",
            "NaN",
            "{\"shipping_address\": Infinity}",
            "1e99999999999999999999",
        ] {
            assert_refused_unchanged(&store, "r1", raw, ErrorCode::MalformedJson);
        }
    }

    fn each_value_must_be_an_elicitation_response(db) {
        let store = db.store();
        fresh_address_round(&store, "r1");
        for value in [
            "\"accept\"",
            "42",
            "null",
            "[]",
            "true",
            r#"{"action":"accept","content":{"street":"a","city":"b"},"note":"x"}"#,
        ] {
            let raw = format!(r#"{{"shipping_address":{value}}}"#);
            assert_refused_unchanged(&store, "r1", &raw, ErrorCode::InvalidResponse);
        }
    }

    fn action_must_be_accept_decline_or_cancel(db) {
        let store = db.store();
        fresh_address_round(&store, "r1");
        for action in ["\"approve\"", "\"ACCEPT\"", "null", "1", "\"\""] {
            let raw = format!(r#"{{"shipping_address":{{"action":{action}}}}}"#);
            assert_refused_unchanged(&store, "r1", &raw, ErrorCode::InvalidAction);
        }
        let raw = r#"{"shipping_address":{"content":{"street":"a","city":"b"}}}"#;
        assert_refused_unchanged(&store, "r1", raw, ErrorCode::InvalidAction);
    }

    fn form_accept_requires_mapping_content(db) {
        let store = db.store();
        fresh_address_round(&store, "r1");
        for content in [
            "",
            r#","content":null"#,
            r#","content":[]"#,
            r#","content":"1 Main Street""#,
            r#","content":7"#,
        ] {
            let raw = format!(r#"{{"shipping_address":{{"action":"accept"{content}}}}}"#);
            assert_refused_unchanged(&store, "r1", &raw, ErrorCode::ContentRequired);
        }
    }

    /// One form per primitive kind: the answer that violates it, and the field the error names.
    fn form_accept_content_must_validate_against_the_request_schema(db) {
        let store = db.store();
        let requests = BTreeMap::from([(
            "profile".to_string(),
            ElicitationRequest::form("Who are you?", every_kind_schema()),
        )]);
        let round =
            NewRound::new("r1", "exec-1", "srv", "tool", requests).owned_by(OwnerClaim::new("w"));
        store.create_round(&round).unwrap();
        let violations: Vec<(&str, Value)> = vec![
            ("name", json!("A")),                // minLength
            ("name", json!("A very long name")), // maxLength
            ("name", json!(5)),                  // type
            ("email", json!("not-an-email")),    // format email
            ("site", json!("no scheme here")),   // format uri
            ("day", json!("2026-13-45")),        // format date
            ("at", json!("yesterday")),          // format date-time
            ("age", json!(-1)),                  // minimum
            ("age", json!(151)),                 // maximum
            ("age", json!(2.5)),                 // integer
            ("age", json!("30")),                // type
            ("score", json!(0.1)),               // number minimum
            ("score", json!(10)),                // number maximum
            ("agree", json!("yes")),             // boolean
            ("color", json!("blue")),            // single-select enum
            ("size", json!("m")),                // single-select oneOf/const
            ("tags", json!(["z"])),              // multi-select item
            ("tags", json!([])),                 // minItems
            ("tags", json!(["a", "b", "c"])),    // maxItems
            ("tags", json!("a")),                // array type
            ("unknown_field", json!("x")),       // not in the form
        ];
        for (field, value) in violations {
            let mut content = every_kind_answer();
            content[field] = value.clone();
            let raw = json!({"profile": {"action": "accept", "content": content}}).to_string();
            let before = store.get_round("r1").unwrap();
            let err = store
                .submit_responses_json("r1", &raw, "k")
                .expect_err(&raw);
            assert_eq!(
                code_of(&err),
                ErrorCode::SchemaViolation,
                "{field}={value}: {err}"
            );
            let ManagedInputError::Validation(v) = &err else {
                panic!("{err}")
            };
            // A field the form does not define came with the answer: its name is not repeated.
            let named = (field != "unknown_field").then_some(field);
            assert_eq!(v.detail.field.as_deref(), named, "{field}={value}: {err}");
            assert!(!err.to_string().contains("unknown_field"), "{err}");
            assert_eq!(v.detail.request_key.as_deref(), Some("profile"));
            assert_eq!(before, store.get_round("r1").unwrap());
        }
        for required in ["name", "age"] {
            let mut content = every_kind_answer();
            content.as_object_mut().unwrap().remove(required);
            let raw = json!({"profile": {"action": "accept", "content": content}}).to_string();
            let err = store.submit_responses_json("r1", &raw, "k").unwrap_err();
            assert_eq!(code_of(&err), ErrorCode::SchemaViolation, "{required}");
            let ManagedInputError::Validation(v) = &err else {
                panic!("{err}")
            };
            assert_eq!(v.detail.field.as_deref(), Some(required));
        }
        // Optional fields may be left out, numbers may be floats, and the valid answer passes.
        let minimal =
            json!({"profile": {"action": "accept", "content": {"name": "Asha", "age": 30.0}}})
                .to_string();
        assert_eq!(
            store.get_round("r1").unwrap().unwrap().status,
            ManagedInputStatus::Pending
        );
        let record = store.submit_responses_json("r1", &minimal, "k").unwrap();
        assert_eq!(record.status, ManagedInputStatus::ResponseValidated);
    }

    fn validation_errors_never_carry_the_answer(db) {
        let store = db.store();
        fresh_address_round(&store, "r1");
        let secret = "s3cr3t-Zq8x";
        let raw =
            json!({"shipping_address": {"action": "accept", "content": {"street": secret, "city": 5}}})
                .to_string();
        let err = store
            .submit_responses_json("r1", &raw, "idem-s3cr3t")
            .unwrap_err();
        for text in [err.to_string(), format!("{err:?}")] {
            assert!(
                !text.contains(secret) && !text.contains("idem-s3cr3t"),
                "{text}"
            );
        }
    }

    fn url_accept_records_consent_only_and_rejects_content(db) {
        let store = db.store();
        let requests = BTreeMap::from([(
            "login".to_string(),
            ElicitationRequest::url("Sign in", "https://example.com/authorize"),
        )]);
        store
            .create_round(
                &NewRound::new("r1", "e", "srv", "tool", requests).owned_by(OwnerClaim::new("w")),
            )
            .unwrap();
        for content in [r#"{"a":1}"#, "[]", "\"x\"", "{}"] {
            let raw = format!(r#"{{"login":{{"action":"accept","content":{content}}}}}"#);
            assert_refused_unchanged(&store, "r1", &raw, ErrorCode::ContentNotAllowed);
        }
        let record = store
            .submit_responses(
                "r1",
                &responses("login", ElicitationResponse::accept_url()),
                "k",
            )
            .unwrap();
        assert_eq!(record.status, ManagedInputStatus::ResponseValidated);
        let stored = &record.responses.unwrap()["login"];
        assert_eq!(stored.action, ElicitationAction::Accept);
        assert!(stored.content.is_none());
    }

    fn decline_and_cancel_carry_no_content(db) {
        let store = db.store();
        fresh_address_round(&store, "r1");
        for action in ["decline", "cancel"] {
            let raw = format!(
                r#"{{"shipping_address":{{"action":"{action}","content":{{"street":"a","city":"b"}}}}}}"#
            );
            assert_refused_unchanged(&store, "r1", &raw, ErrorCode::ContentNotAllowed);
        }
        // `content: null` is the absence of content (Codex sends it).
        let raw = r#"{"shipping_address":{"action":"decline","content":null}}"#;
        let record = store.submit_responses_json("r1", raw, "k").unwrap();
        assert_eq!(
            record.responses.unwrap()["shipping_address"],
            ElicitationResponse::decline()
        );
    }

    fn round_id_and_idempotency_key_must_not_be_empty(db) {
        let store = db.store();
        fresh_address_round(&store, "r1");
        let answer = address("1 Main Street", "Pune");
        let err = store.submit_responses("", &answer, "k").unwrap_err();
        assert_eq!(code_of(&err), ErrorCode::EmptyRoundId);
        assert!(matches!(err, ManagedInputError::Validation(_)));
        let err = store.submit_responses("r1", &answer, "").unwrap_err();
        assert_eq!(code_of(&err), ErrorCode::EmptyIdempotencyKey);
        assert!(matches!(err, ManagedInputError::Validation(_)));
        assert_eq!(
            store.get_round("r1").unwrap().unwrap().status,
            ManagedInputStatus::Pending
        );
        // Every operation that names a round (all but `list_rounds`) refuses an empty round id the
        // same way, and changes nothing.
        let lease = store.get_round("r1").unwrap().unwrap().lease.unwrap();
        let before = store.list_rounds(&RoundFilter::default()).unwrap();
        let operations: [(&str, Option<ManagedInputError>); 11] = [
            ("create_round", store.create_round(&address_round("")).err()),
            ("get_round", store.get_round("").err()),
            (
                "claim_round",
                store.claim_round("", &OwnerClaim::new("w")).err(),
            ),
            (
                "renew",
                store.renew("", &lease, Duration::from_secs(5)).err(),
            ),
            (
                "submit_responses",
                store.submit_responses("", &answer, "k").err(),
            ),
            (
                "start_delivery",
                store.start_delivery("", &lease, "d").err(),
            ),
            ("mark_delivered", store.mark_delivered("", &lease).err()),
            ("resolve", store.resolve("", &lease).err()),
            (
                "fail",
                store.fail("", &lease, FailureCode::ServerError, "x").err(),
            ),
            ("fail_recovery", store.fail_recovery("", None, "").err()),
            ("redacted_responses", store.redacted_responses("").err()),
        ];
        for (name, err) in operations {
            let err = err.unwrap_or_else(|| panic!("{name} accepted an empty round id"));
            assert!(
                matches!(err, ManagedInputError::Validation(_)),
                "{name}: {err}"
            );
            assert_eq!(code_of(&err), ErrorCode::EmptyRoundId, "{name}: {err}");
        }
        // An empty delivery key is refused like an empty idempotency key.
        let err = store.start_delivery("r1", &lease, "").unwrap_err();
        assert_eq!(code_of(&err), ErrorCode::EmptyIdempotencyKey, "{err}");
        assert_eq!(store.list_rounds(&RoundFilter::default()).unwrap(), before);
    }

    fn submit_validates_and_moves_pending_to_response_validated(db) {
        let clock = manual_clock();
        let store = db.store_with_clock(clock.clone());
        fresh_address_round(&store, "r1");
        clock.advance(TimeDelta::seconds(3));
        let record = store
            .submit_responses("r1", &address("1 Main Street", "Pune"), "address-r1")
            .unwrap();
        assert_eq!(record.status, ManagedInputStatus::ResponseValidated);
        assert_eq!(record.idempotency_key.as_deref(), Some("address-r1"));
        assert_eq!(
            record.timestamps.response_validated_at,
            Some(t0() + TimeDelta::seconds(3))
        );
        assert_eq!(record.responses, Some(address("1 Main Street", "Pune")));
        // Durable: a fresh read sees exactly what the call returned.
        assert_eq!(store.get_round("r1").unwrap().unwrap(), record);
    }

    fn same_key_and_same_response_returns_the_existing_record_even_after_the_round_moved_on(db) {
        let store = db.store();
        let lease = fresh_address_round(&store, "r1");
        let first = store
            .submit_responses("r1", &address("1 Main Street", "Pune"), "k")
            .unwrap();
        let again = store
            .submit_responses("r1", &address("1 Main Street", "Pune"), "k")
            .unwrap();
        assert_eq!(first, again);
        store.start_delivery("r1", &lease, "d").unwrap();
        store.mark_delivered("r1", &lease).unwrap();
        let resolved = store.resolve("r1", &lease).unwrap();
        let retried = store
            .submit_responses("r1", &address("1 Main Street", "Pune"), "k")
            .unwrap();
        assert_eq!(
            retried, resolved,
            "the retry after a lost acknowledgement gets the current record"
        );
        assert_eq!(retried.responses, first.responses);
        assert_eq!(retried.idempotency_key, first.idempotency_key);
    }

    fn same_response_means_equal_after_canonicalisation(db) {
        let store = db.store();
        let schema =
            json!({"type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "number"}}});
        let requests = BTreeMap::from([("q".to_string(), ElicitationRequest::form("?", schema))]);
        store
            .create_round(&NewRound::new("r1", "e", "s", "t", requests))
            .unwrap();
        let stored = store
            .submit_responses_json(
                "r1",
                r#"{"q":{"action":"accept","content":{"a":"caf\u00e9","n":1}}}"#,
                "k",
            )
            .unwrap();
        // Key order and 1 vs 1.0 do not matter: the repeat gets the stored record, unchanged (the
        // answer as first given, not the repeat's spelling).
        let repeat = store
            .submit_responses_json(
                "r1",
                r#"{"q":{"content":{"n":1.0,"a":"café"},"action":"accept"}}"#,
                "k",
            )
            .unwrap();
        assert_eq!(repeat, stored);
        assert_eq!(store.get_round("r1").unwrap().unwrap(), stored);
        assert_eq!(
            serde_json::to_string(&repeat.responses.as_ref().unwrap()["q"].content).unwrap(),
            r#"{"a":"café","n":1}"#
        );
        // Strings are byte-exact: the decomposed é is a different answer.
        let err = store
            .submit_responses_json(
                "r1",
                "{\"q\":{\"action\":\"accept\",\"content\":{\"a\":\"cafe\u{301}\",\"n\":1}}}",
                "k",
            )
            .unwrap_err();
        assert!(matches!(err, ManagedInputError::Conflict(_)));
        assert_eq!(code_of(&err), ErrorCode::IdempotencyConflict);
        let err = store
            .submit_responses_json(
                "r1",
                r#"{"q":{"action":"accept","content":{"a":"café","n":1.5}}}"#,
                "k",
            )
            .unwrap_err();
        assert_eq!(code_of(&err), ErrorCode::IdempotencyConflict);
    }

    fn same_key_with_a_different_response_is_a_conflict_and_changes_nothing(db) {
        let store = db.store();
        fresh_address_round(&store, "r1");
        store
            .submit_responses("r1", &address("1 Main Street", "Pune"), "k")
            .unwrap();
        let before = store.get_round("r1").unwrap();
        for other in [
            address("2 Main Street", "Pune"),
            responses("shipping_address", ElicitationResponse::decline()),
        ] {
            let err = store.submit_responses("r1", &other, "k").unwrap_err();
            assert!(matches!(err, ManagedInputError::Conflict(_)), "{err}");
            assert_eq!(code_of(&err), ErrorCode::IdempotencyConflict);
        }
        assert_eq!(before, store.get_round("r1").unwrap());
    }

    fn another_key_on_an_answered_round_is_a_state_error(db) {
        let store = db.store();
        fresh_address_round(&store, "r1");
        store
            .submit_responses("r1", &address("1 Main Street", "Pune"), "k")
            .unwrap();
        let err = store
            .submit_responses("r1", &address("1 Main Street", "Pune"), "k2")
            .unwrap_err();
        assert!(matches!(err, ManagedInputError::State(_)), "{err}");
        assert_eq!(code_of(&err), ErrorCode::InvalidTransition);
    }

    fn expired_leases_reject_stale_writes(db) {
        let clock = manual_clock();
        let store = db.store_with_clock(clock.clone());
        let lease = fresh_address_round(&store, "r1");
        store
            .submit_responses("r1", &address("1 Main Street", "Pune"), "k")
            .unwrap();
        clock.advance(TimeDelta::seconds(16)); // default lease: 15 s
        let before = store.get_round("r1").unwrap();
        let attempts = [
            store
                .renew("r1", &lease, Duration::from_secs(15))
                .map(|_| ()),
            store.start_delivery("r1", &lease, "d").map(|_| ()),
            store
                .fail("r1", &lease, FailureCode::ServerError, "x")
                .map(|_| ()),
        ];
        for attempt in attempts {
            let err = attempt.unwrap_err();
            assert!(matches!(err, ManagedInputError::Conflict(_)), "{err}");
            assert_eq!(code_of(&err), ErrorCode::LeaseExpired);
        }
        assert_eq!(before, store.get_round("r1").unwrap());
    }

    fn submit_on_a_round_whose_lease_expired_is_a_recovery_error(db) {
        let clock = manual_clock();
        let store = db.store_with_clock(clock.clone());
        fresh_address_round(&store, "r1");
        clock.advance(TimeDelta::seconds(15));
        let err = store
            .submit_responses("r1", &address("1 Main Street", "Pune"), "k")
            .unwrap_err();
        assert!(matches!(err, ManagedInputError::Recovery(_)), "{err}");
        assert_eq!(code_of(&err), ErrorCode::RecoveryUnavailable);
        assert_eq!(
            store.get_round("r1").unwrap().unwrap().status,
            ManagedInputStatus::Pending
        );
    }

    fn a_replaced_worker_owner_cannot_write(db) {
        let store = db.store();
        let lease = fresh_address_round(&store, "r1");
        store
            .submit_responses("r1", &address("1 Main Street", "Pune"), "k")
            .unwrap();
        // The owner rotates its token by claiming again: the old token is stale.
        let rotated = store
            .claim_round("r1", &OwnerClaim::new("worker-1"))
            .unwrap();
        assert_ne!(rotated.lease_token, lease.lease_token);
        let impostor = ManagedInputLease {
            owner_id: "worker-2".into(),
            ..rotated.clone()
        };
        let before = store.get_round("r1").unwrap();
        for stale in [&lease, &impostor] {
            let err = store.start_delivery("r1", stale, "d").unwrap_err();
            assert!(matches!(err, ManagedInputError::Conflict(_)), "{err}");
            assert_eq!(code_of(&err), ErrorCode::LeaseMismatch);
        }
        assert_eq!(before, store.get_round("r1").unwrap());
        store.start_delivery("r1", &rotated, "d").unwrap();
    }

    fn a_nonexistent_round_is_a_typed_error_for_every_operation(db) {
        let store = db.store();
        let lease = fresh_address_round(&store, "r1");
        assert!(store.get_round("nope").unwrap().is_none());
        let errors = [
            store
                .submit_responses("nope", &address("a", "b"), "k")
                .err(),
            store.claim_round("nope", &OwnerClaim::new("w")).err(),
            store.renew("nope", &lease, Duration::from_secs(1)).err(),
            store.start_delivery("nope", &lease, "d").err(),
            store.mark_delivered("nope", &lease).err(),
            store.resolve("nope", &lease).err(),
            store.fail("nope", &lease, FailureCode::Cancelled, "").err(),
            store.fail_recovery("nope", None, "").err(),
            store.redacted_responses("nope").err(),
        ];
        for err in errors {
            let err = err.expect("an error");
            assert!(matches!(err, ManagedInputError::State(_)), "{err}");
            assert_eq!(code_of(&err), ErrorCode::RoundNotFound);
        }
        assert_eq!(store.list_rounds(&RoundFilter::default()).unwrap().len(), 1);
    }

    fn terminal_rounds_reject_every_write(db) {
        let store = db.store();
        let lease = fresh_address_round(&store, "resolved");
        store
            .submit_responses("resolved", &address("a", "b"), "k")
            .unwrap();
        store.start_delivery("resolved", &lease, "d").unwrap();
        store.mark_delivered("resolved", &lease).unwrap();
        store.resolve("resolved", &lease).unwrap();
        let failed_lease = fresh_address_round(&store, "failed");
        store
            .fail(
                "failed",
                &failed_lease,
                FailureCode::Cancelled,
                "cancelled by test",
            )
            .unwrap();
        for (round, lease) in [("resolved", &lease), ("failed", &failed_lease)] {
            let before = store.get_round(round).unwrap();
            let errors = [
                store
                    .submit_responses(round, &address("x", "y"), "k2")
                    .err(),
                store.claim_round(round, &OwnerClaim::new("worker-1")).err(),
                store.renew(round, lease, Duration::from_secs(1)).err(),
                store.start_delivery(round, lease, "d2").err(),
                store.mark_delivered(round, lease).err(),
                store.resolve(round, lease).err(),
                store.fail(round, lease, FailureCode::ServerError, "").err(),
                store.fail_recovery(round, None, "").err(),
            ];
            for err in errors {
                let err = err.expect("an error");
                assert!(matches!(err, ManagedInputError::State(_)), "{round}: {err}");
                assert_eq!(code_of(&err), ErrorCode::RoundTerminal, "{round}: {err}");
            }
            assert_eq!(before, store.get_round(round).unwrap());
        }
    }

    fn round_index_must_be_below_round_limit(db) {
        let store = db.store();
        for (index, limit) in [(10, 10), (11, 10), (0, 0)] {
            let round = NewRound {
                round_index: index,
                round_limit: limit,
                ..address_round(&format!("r{index}-{limit}"))
            };
            let err = store.create_round(&round).unwrap_err();
            assert!(matches!(err, ManagedInputError::Validation(_)), "{err}");
            assert_eq!(code_of(&err), ErrorCode::RoundIndexOutOfRange);
        }
        assert!(
            store
                .list_rounds(&RoundFilter::default())
                .unwrap()
                .is_empty()
        );
        let last = NewRound {
            round_index: 9,
            round_limit: 10,
            ..address_round("last")
        };
        assert_eq!(store.create_round(&last).unwrap().round_index, 9);
    }

    fn a_new_record_has_the_documented_defaults(db) {
        let clock = manual_clock();
        let store = db.store_with_clock(clock);
        let record = store.create_round(&address_round("r1")).unwrap();
        assert_eq!(record.status, ManagedInputStatus::Pending);
        assert_eq!((record.round_index, record.round_limit), (0, 10));
        assert!(record.operation_parameters.is_empty());
        assert_eq!(record.delivery_attempts, 0);
        assert!(
            record.responses.is_none() && record.idempotency_key.is_none() && record.failure.is_none()
        );
        assert_eq!(record.pending.created_at, t0());
        assert_eq!(record.timestamps.created_at, t0());
        let lease = record.lease.expect("the creating worker owns the round");
        assert_eq!(lease.owner_id, "worker-1");
        assert_eq!(lease.expires_at, t0() + TimeDelta::seconds(15));
        assert_eq!(lease.lease_token.len(), 32);
    }

    fn requests_and_context_round_trip_verbatim(db) {
        let store = db.store();
        let form = ElicitationRequest::Form(FormElicitationRequest {
            message: "Where?".into(),
            requested_schema: address_schema(),
            context: RequestContext {
                meta: Some(json!({"m3/request_key": "shipping_address"})),
                task: Some(json!({"ttl": 60000})),
                server: Some("shipping".into()),
                operation_kind: Some(OperationKind::Tool),
                operation_name: Some("book_shipment".into()),
            },
        });
        let url = ElicitationRequest::Url(UrlElicitationRequest {
            message: "Pay".into(),
            url: "https://pay.example.com/x?y=1".into(),
            elicitation_id: Some("el-1".into()),
            context: RequestContext::default(),
        });
        let requests = BTreeMap::from([("address".to_string(), form), ("payment".to_string(), url)]);
        let mut round = NewRound::new(
            "r1",
            "exec-1",
            "shipping",
            "book_shipment",
            requests.clone(),
        );
        round.request_state = Some("opaque-state-\u{1F600}".into());
        round.operation_parameters = json!({"weight": 2.5}).as_object().unwrap().clone();
        round.harness = HarnessMetadata {
            session_id: Some("thread-1".into()),
            resume_token: Some("resume".into()),
            turn_id: Some("turn".into()),
        };
        let record = store.create_round(&round).unwrap();
        let read = store.get_round("r1").unwrap().unwrap();
        assert_eq!(read, record);
        assert_eq!(read.pending.requests, requests);
        assert_eq!(read.pending.request_state, round.request_state);
        assert_eq!(read.operation_parameters, round.operation_parameters);
        assert_eq!(read.harness, round.harness);
        assert!(read.lease.is_none(), "created without an owner");
    }

    fn create_round_validates_its_requests_and_stores_nothing_when_invalid(db) {
        let store = db.store();
        let bad_schema = BTreeMap::from([(
            "q".to_string(),
            ElicitationRequest::form(
                "?",
                json!({"type": "object", "properties": {"a": {"type": "object"}}}),
            ),
        )]);
        let cases: Vec<(NewRound, ErrorCode)> = vec![
            (
                NewRound::new("r", "e", "s", "t", BTreeMap::new()),
                ErrorCode::InvalidRound,
            ),
            (
                NewRound::new("r", "e", "s", "t", bad_schema),
                ErrorCode::UnsupportedSchema,
            ),
            (
                NewRound::new("", "e", "s", "t", address_requests()),
                ErrorCode::EmptyRoundId,
            ),
            (
                NewRound::new("r", "", "s", "t", address_requests()),
                ErrorCode::InvalidId,
            ),
            (
                NewRound::new("r\n", "e", "s", "t", address_requests()),
                ErrorCode::InvalidId,
            ),
            (
                NewRound::new(
                    "r",
                    "e",
                    "s",
                    "t",
                    BTreeMap::from([("u".to_string(), ElicitationRequest::url("?", ""))]),
                ),
                ErrorCode::InvalidRound,
            ),
            (
                NewRound {
                    owner: Some(claim("w", Duration::ZERO)),
                    ..address_round("r")
                },
                ErrorCode::InvalidLease,
            ),
            // Lease durations: over a day is refused as zero is.
            (
                NewRound {
                    owner: Some(claim("w", Duration::from_secs(24 * 3600 + 1))),
                    ..address_round("r")
                },
                ErrorCode::InvalidLease,
            ),
            // Ids: 512 bytes at most, for the round, its execution, its server and a request key.
            (address_round(&"r".repeat(513)), ErrorCode::InvalidId),
            (
                NewRound::new("r", "e".repeat(513), "s", "t", address_requests()),
                ErrorCode::InvalidId,
            ),
            (
                NewRound::new("r", "e", "s".repeat(513), "t", address_requests()),
                ErrorCode::InvalidId,
            ),
            (
                NewRound::new(
                    "r",
                    "e",
                    "s",
                    "t",
                    BTreeMap::from([("k".repeat(513), ElicitationRequest::url("?", "https://x"))]),
                ),
                ErrorCode::InvalidId,
            ),
            // Context JSON: `_meta` and `task` must be objects.
            (with_context(json!([1, 2]), None), ErrorCode::InvalidRound),
            (
                with_context(json!({}), Some(json!("task"))),
                ErrorCode::InvalidRound,
            ),
        ];
        for (round, code) in cases {
            let err = store.create_round(&round).unwrap_err();
            assert!(matches!(err, ManagedInputError::Validation(_)), "{err}");
            assert_eq!(code_of(&err), code, "{err}");
        }
        assert!(
            store
                .list_rounds(&RoundFilter::default())
                .unwrap()
                .is_empty(),
            "a refused round was stored"
        );
        // At the limits themselves, ids and leases are accepted.
        let longest = "r".repeat(512);
        store
            .create_round(&NewRound {
                owner: Some(claim("w", Duration::from_secs(24 * 3600))),
                logical_operation_id: "op-1".into(),
                ..address_round(&longest)
            })
            .unwrap();
        store
            .create_round(&with_context(json!({"k": 1}), Some(json!({"t": 1}))))
            .unwrap();
        assert_eq!(
            store
                .list_rounds(&RoundFilter::default())
                .unwrap()
                .iter()
                .map(|r| r.pending.round_id.len())
                .collect::<Vec<_>>(),
            [512, 2]
        );
    }

    /// JSON nested 128 or more deep (counting the outermost object or array) is `malformed_json`,
    /// refused by the component's parser before any rule looks at it: a schema at `create_round`,
    /// an answer at `submit_responses`, a request's `_meta`. 127 deep is parsed: the schema and
    /// the answer are then refused by the next rule (a nested default is outside the form subset,
    /// an array is not the string the schema asks for), and the `_meta` is stored.
    fn json_nested_128_deep_is_malformed_and_127_deep_is_parsed(db) {
        let store = db.store();
        for (depth, code) in [
            (127, ErrorCode::UnsupportedSchema),
            (128, ErrorCode::MalformedJson),
        ] {
            // Three objects around the arrays.
            let schema = json!({"type": "object", "properties": {
                "street": {"type": "string", "default": nested_arrays(depth - 3)}}});
            assert_eq!(nesting_depth(&schema), depth);
            let requests = BTreeMap::from([("q".to_string(), ElicitationRequest::form("?", schema))]);
            let err = store
                .create_round(&NewRound::new("r", "e", "s", "t", requests))
                .unwrap_err();
            assert!(matches!(err, ManagedInputError::Validation(_)), "{err}");
            assert_eq!(code_of(&err), code, "a schema {depth} deep: {err}");
        }
        assert!(
            store
                .list_rounds(&RoundFilter::default())
                .unwrap()
                .is_empty(),
            "a refused round was stored"
        );
        let meta = |depth: usize| json!({"deep": nested_arrays(depth - 1)});
        assert_eq!(nesting_depth(&meta(128)), 128);
        let err = store
            .create_round(&with_context(meta(128), None))
            .unwrap_err();
        assert!(matches!(err, ManagedInputError::Validation(_)), "{err}");
        assert_eq!(code_of(&err), ErrorCode::MalformedJson, "{err}");
        let stored = store.create_round(&with_context(meta(127), None)).unwrap();
        let ElicitationRequest::Form(request) = &stored.pending.requests["q"] else {
            panic!("a form request");
        };
        assert_eq!(request.context.meta, Some(meta(127)), "stored as given");

        fresh_address_round(&store, "answer");
        for (depth, code) in [
            (127, ErrorCode::SchemaViolation),
            (128, ErrorCode::MalformedJson),
        ] {
            // Three objects around the arrays, in the place of the street.
            let answer = json!({"shipping_address": {"action": "accept",
                "content": {"street": nested_arrays(depth - 3), "city": "Pune"}}});
            assert_eq!(nesting_depth(&answer), depth);
            assert_refused_unchanged(&store, "answer", &answer.to_string(), code);
        }
    }

    fn creating_an_existing_round_id_is_a_conflict(db) {
        let store = db.store();
        let first = store.create_round(&address_round("r1")).unwrap();
        let err = store.create_round(&address_round("r1")).unwrap_err();
        assert!(matches!(err, ManagedInputError::Conflict(_)));
        assert_eq!(code_of(&err), ErrorCode::RoundExists);
        assert_eq!(store.get_round("r1").unwrap().unwrap(), first);
    }

    fn the_supplied_clock_is_honoured_and_deadlines_are_stored(db) {
        let clock = manual_clock();
        let store = db.store_with_clock(clock.clone());
        let default = store.create_round(&address_round("default")).unwrap();
        assert_eq!(
            default.pending.deadline,
            Some(t0() + TimeDelta::hours(24)),
            "documented default: 24 h"
        );
        let at = t0() + TimeDelta::minutes(5);
        let explicit = store
            .create_round(&NewRound {
                deadline: Deadline::At(at),
                ..address_round("at")
            })
            .unwrap();
        assert_eq!(explicit.pending.deadline, Some(at));
        let none = store
            .create_round(&NewRound {
                deadline: Deadline::None,
                ..address_round("none")
            })
            .unwrap();
        assert_eq!(
            none.pending.deadline, None,
            "no deadline only when asked for explicitly"
        );
        let err = store
            .create_round(&NewRound {
                deadline: Deadline::At(t0()),
                ..address_round("past")
            })
            .unwrap_err();
        assert_eq!(code_of(&err), ErrorCode::InvalidDeadline);
        // Reopened, the deadline is still there.
        drop(store);
        let reopened = db.store_with_clock(clock.clone());
        assert_eq!(
            reopened.get_round("at").unwrap().unwrap().pending.deadline,
            Some(at)
        );
        clock.advance(TimeDelta::minutes(10));
        let later = reopened
            .create_round(&NewRound {
                owner: None,
                ..address_round("later")
            })
            .unwrap();
        assert_eq!(later.pending.created_at, t0() + TimeDelta::minutes(10));
    }

    fn deadlines_are_enforced_by_the_store_decisions(db) {
        let clock = manual_clock();
        let store = db.store_with_clock(clock.clone());
        let at = t0() + TimeDelta::seconds(10);
        let lease = create(
            &store,
            &NewRound {
                deadline: Deadline::At(at),
                owner: Some(claim("w", Duration::from_secs(60))),
                ..address_round("r1")
            },
        );
        let err = store
            .fail("r1", &lease, FailureCode::DeadlineExceeded, "")
            .unwrap_err();
        // deadline_exceeded before the deadline is no transition the lifecycle knows.
        assert_refused::<()>(
            Err(&err),
            "ManagedInputStateError",
            ErrorCode::InvalidTransition,
        );
        clock.advance(TimeDelta::seconds(10));
        let err = store
            .submit_responses("r1", &address("a", "b"), "k")
            .unwrap_err();
        assert!(matches!(err, ManagedInputError::State(_)));
        assert_eq!(code_of(&err), ErrorCode::DeadlineExceeded);
        let failed = store
            .fail(
                "r1",
                &lease,
                FailureCode::DeadlineExceeded,
                "no answer in time",
            )
            .unwrap();
        assert_eq!(failed.failure.unwrap().code, FailureCode::DeadlineExceeded);
    }

    fn the_lifecycle_runs_through_all_six_statuses(db) {
        let store = db.store();
        let lease = fresh_address_round(&store, "r1");
        let mut seen = vec![store.get_round("r1").unwrap().unwrap().status];
        seen.push(
            store
                .submit_responses("r1", &address("a", "b"), "k")
                .unwrap()
                .status,
        );
        let started = store.start_delivery("r1", &lease, "delivery-1").unwrap();
        assert_eq!(started.delivery_attempts, 1);
        assert_eq!(
            started.delivery_idempotency_key.as_deref(),
            Some("delivery-1")
        );
        seen.push(started.status);
        seen.push(store.mark_delivered("r1", &lease).unwrap().status);
        let resolved = store.resolve("r1", &lease).unwrap();
        seen.push(resolved.status);
        let other = fresh_address_round(&store, "r2");
        seen.push(
            store
                .fail("r2", &other, FailureCode::ServerError, "server died")
                .unwrap()
                .status,
        );
        assert_eq!(seen, ManagedInputStatus::ALL.to_vec());
        let t = &resolved.timestamps;
        assert!(
            t.response_validated_at.is_some()
                && t.delivery_started_at.is_some()
                && t.delivered_at.is_some()
                && t.resolved_at.is_some()
        );
    }

    fn delivery_is_started_at_most_once(db) {
        let store = db.store();
        let lease = fresh_address_round(&store, "r1");
        let err = store.start_delivery("r1", &lease, "d").unwrap_err();
        assert_eq!(
            code_of(&err),
            ErrorCode::InvalidTransition,
            "nothing to deliver yet"
        );
        store
            .submit_responses("r1", &address("a", "b"), "k")
            .unwrap();
        store.start_delivery("r1", &lease, "d").unwrap();
        for attempt in [
            store.start_delivery("r1", &lease, "d"),
            store.start_delivery("r1", &lease, "d2"),
        ] {
            let err = attempt.unwrap_err();
            assert!(matches!(err, ManagedInputError::State(_)));
            assert_eq!(code_of(&err), ErrorCode::InvalidTransition);
        }
        assert_eq!(store.get_round("r1").unwrap().unwrap().delivery_attempts, 1);
        let err = store.resolve("r1", &lease).unwrap_err();
        assert_eq!(
            code_of(&err),
            ErrorCode::InvalidTransition,
            "resolve needs delivered first"
        );
    }

    fn every_failure_code_is_recorded_and_recovery_unavailable_only_by_fail_recovery(db) {
        let store = db.store();
        for (i, code) in [
            FailureCode::Cancelled,
            FailureCode::RoundLimitExceeded,
            FailureCode::ServerError,
            FailureCode::InvalidRequestState,
            FailureCode::ElicitationUnhandled,
        ]
        .into_iter()
        .enumerate()
        {
            let round = format!("r{i}");
            let lease = fresh_address_round(&store, &round);
            let failed = store.fail(&round, &lease, code, "why").unwrap();
            assert_eq!(
                failed.failure,
                Some(RoundFailure {
                    code,
                    message: "why".into()
                })
            );
        }
        let lease = fresh_address_round(&store, "x");
        let err = store
            .fail("x", &lease, FailureCode::RecoveryUnavailable, "")
            .unwrap_err();
        assert_eq!(code_of(&err), ErrorCode::InvalidFailure);
    }

    fn claim_round_takes_unowned_rounds_and_refuses_live_or_expired_leases(db) {
        let clock = manual_clock();
        let store = db.store_with_clock(clock.clone());
        store
            .create_round(&NewRound {
                owner: None,
                ..address_round("r1")
            })
            .unwrap();
        let lease = store
            .claim_round("r1", &claim("worker-a", Duration::from_secs(15)))
            .unwrap();
        assert_eq!(lease.owner_id, "worker-a");
        let err = store
            .claim_round("r1", &claim("worker-b", Duration::from_secs(15)))
            .unwrap_err();
        assert!(matches!(err, ManagedInputError::Conflict(_)));
        assert_eq!(code_of(&err), ErrorCode::LeaseHeld);
        clock.advance(TimeDelta::seconds(20));
        let err = store
            .claim_round("r1", &claim("worker-b", Duration::from_secs(15)))
            .unwrap_err();
        assert!(matches!(err, ManagedInputError::Recovery(_)), "{err}");
        assert_eq!(code_of(&err), ErrorCode::ReclaimUnsafe);
    }

    fn renew_extends_a_live_lease(db) {
        let clock = manual_clock();
        let store = db.store_with_clock(clock.clone());
        let lease = fresh_address_round(&store, "r1");
        clock.advance(TimeDelta::seconds(10));
        let renewed = store.renew("r1", &lease, Duration::from_secs(15)).unwrap();
        assert_eq!(renewed.lease_token, lease.lease_token);
        assert_eq!(renewed.expires_at, t0() + TimeDelta::seconds(25));
        clock.advance(TimeDelta::seconds(14));
        store
            .submit_responses("r1", &address("a", "b"), "k")
            .expect("the renewed lease is still live");
    }

    fn list_rounds_filters_by_execution_and_status_oldest_first(db) {
        let clock = manual_clock();
        let store = db.store_with_clock(clock.clone());
        for (i, execution) in ["e1", "e2", "e1"].iter().enumerate() {
            clock.advance(TimeDelta::seconds(1));
            let round = NewRound {
                execution_id: execution.to_string(),
                ..address_round(&format!("r{i}"))
            };
            store.create_round(&round).unwrap();
        }
        store
            .submit_responses("r2", &address("a", "b"), "k")
            .unwrap();
        let ids = |filter: RoundFilter| {
            store
                .list_rounds(&filter)
                .unwrap()
                .into_iter()
                .map(|r| r.pending.round_id)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(RoundFilter::default()), ["r0", "r1", "r2"]);
        assert_eq!(
            ids(RoundFilter {
                execution_id: Some("e1".into()),
                ..Default::default()
            }),
            ["r0", "r2"]
        );
        assert_eq!(
            ids(RoundFilter {
                status: Some(ManagedInputStatus::Pending),
                ..Default::default()
            }),
            ["r0", "r1"]
        );
        assert_eq!(
            ids(RoundFilter {
                execution_id: Some("e1".into()),
                status: Some(ManagedInputStatus::Pending),
                limit: None
            }),
            ["r0"]
        );
        assert_eq!(
            ids(RoundFilter {
                limit: Some(2),
                ..Default::default()
            }),
            ["r0", "r1"]
        );
    }

    fn pending_rounds_exclude_lease_tokens(db) {
        let store = db.store();
        let lease = fresh_address_round(&store, "r1");
        let record = store.get_round("r1").unwrap().unwrap();
        let pending = serde_json::to_string(&record.pending).unwrap();
        assert!(!pending.contains(&lease.lease_token));
        assert!(
            !format!("{record:?}").contains(&lease.lease_token),
            "Debug of a record hides the token"
        );
        assert!(!format!("{lease:?}").contains(&lease.lease_token));
    }

    fn redacted_responses_carry_no_answer_value(db) {
        let store = db.store();
        fresh_address_round(&store, "r1");
        assert_eq!(store.redacted_responses("r1").unwrap(), None);
        let secret = "Flat 9, Secret Lane 42";
        let record = store
            .submit_responses("r1", &address(secret, "Pune"), "idem-secret-key")
            .unwrap();
        let redacted = store.redacted_responses("r1").unwrap().unwrap();
        assert_eq!(redacted.len(), 1);
        let r = &redacted[0];
        assert_eq!(r.request_key, "shipping_address");
        assert_eq!(r.action, ElicitationAction::Accept);
        assert_eq!(r.content_fields, ["city", "street"]);
        assert!(r.content_bytes > 0);
        let text = format!("{redacted:?} {}", serde_json::to_string(&redacted).unwrap());
        assert!(
            !text.contains(secret) && !text.contains("Pune") && !text.contains("idem-secret-key"),
            "{text}"
        );
        let debug = format!("{record:?}");
        assert!(
            !debug.contains(secret) && !debug.contains("idem-secret-key"),
            "{debug}"
        );
    }

    fn fail_recovery_fails_the_round_for_good(db) {
        let clock = manual_clock();
        let store = db.store_with_clock(clock.clone());
        let lease = fresh_address_round(&store, "r1");
        // The worker still renews: recovery must not touch the round.
        let err = store.fail_recovery("r1", None, "").unwrap_err();
        assert!(matches!(err, ManagedInputError::Conflict(_)));
        assert_eq!(code_of(&err), ErrorCode::LeaseHeld);
        assert_eq!(
            store.get_round("r1").unwrap().unwrap().status,
            ManagedInputStatus::Pending
        );
        // The worker disappears; its lease runs out.
        clock.advance(TimeDelta::seconds(15));
        let failed = store.fail_recovery("r1", None, "").unwrap();
        assert_eq!(failed.status, ManagedInputStatus::Failed);
        assert_eq!(
            failed.failure.as_ref().unwrap().code,
            FailureCode::RecoveryUnavailable
        );
        // Exactly once.
        assert_eq!(
            code_of(&store.fail_recovery("r1", None, "").unwrap_err()),
            ErrorCode::RoundTerminal
        );
        // A late response is rejected, nobody can claim it, and it never becomes pending again.
        let late = store
            .submit_responses("r1", &address("a", "b"), "late")
            .unwrap_err();
        assert!(matches!(late, ManagedInputError::Recovery(_)), "{late}");
        assert_eq!(code_of(&late), ErrorCode::RecoveryUnavailable);
        let reclaim = store
            .claim_round("r1", &OwnerClaim::new("replacement"))
            .unwrap_err();
        assert_refused::<()>(
            Err(&reclaim),
            "ManagedInputRecoveryError",
            ErrorCode::RecoveryUnavailable,
        );
        let stale = store.start_delivery("r1", &lease, "d").unwrap_err();
        assert_refused::<()>(
            Err(&stale),
            "ManagedInputRecoveryError",
            ErrorCode::RecoveryUnavailable,
        );
        let reopened = db.store_with_clock(clock);
        let record = reopened.get_round("r1").unwrap().unwrap();
        assert_eq!(record, failed);
        assert!(
            reopened
                .list_rounds(&RoundFilter {
                    status: Some(ManagedInputStatus::Pending),
                    ..Default::default()
                })
                .unwrap()
                .is_empty()
        );
    }

    fn fail_recovery_covers_every_unresolved_status_and_the_owner_may_give_up_early(db) {
        let clock = manual_clock();
        let store = db.store_with_clock(clock.clone());
        let lease = fresh_address_round(&store, "validated");
        store
            .submit_responses("validated", &address("a", "b"), "k")
            .unwrap();
        let lease2 = fresh_address_round(&store, "started");
        store
            .submit_responses("started", &address("a", "b"), "k")
            .unwrap();
        store.start_delivery("started", &lease2, "d").unwrap();
        let lease3 = fresh_address_round(&store, "delivered");
        store
            .submit_responses("delivered", &address("a", "b"), "k")
            .unwrap();
        store.start_delivery("delivered", &lease3, "d").unwrap();
        store.mark_delivered("delivered", &lease3).unwrap();
        // The owner itself may declare its native request lost while its lease is live.
        let mine = store
            .fail_recovery("validated", Some(&lease), "harness exited")
            .unwrap();
        assert_eq!(mine.failure.unwrap().code, FailureCode::RecoveryUnavailable);
        // Someone else's token does not count.
        let wrong = ManagedInputLease {
            lease_token: "0".repeat(32),
            ..lease2.clone()
        };
        assert_eq!(
            code_of(
                &store
                    .fail_recovery("started", Some(&wrong), "")
                    .unwrap_err()
            ),
            ErrorCode::LeaseMismatch
        );
        clock.advance(TimeDelta::seconds(16));
        for round in ["started", "delivered"] {
            let failed = store.fail_recovery(round, None, "").unwrap();
            assert_eq!(
                failed.failure.unwrap().code,
                FailureCode::RecoveryUnavailable,
                "{round}"
            );
        }
    }

    fn errors_are_typed_with_the_spec_names_and_codes(db) {
        let clock = manual_clock();
        let store = db.store_with_clock(clock.clone());
        let lease = fresh_address_round(&store, "r1");
        let validation = store
            .submit_responses("r1", &BTreeMap::new(), "k")
            .unwrap_err();
        store
            .submit_responses("r1", &address("a", "b"), "k")
            .unwrap();
        let conflict = store
            .submit_responses("r1", &address("c", "d"), "k")
            .unwrap_err();
        let state = store.resolve("r1", &lease).unwrap_err();
        clock.advance(TimeDelta::seconds(16));
        store.fail_recovery("r1", None, "").unwrap();
        let recovery = store.claim_round("r1", &OwnerClaim::new("w")).unwrap_err();
        for (err, name) in [
            (&validation, "ManagedInputValidationError"),
            (&conflict, "ManagedInputConflict"),
            (&state, "ManagedInputStateError"),
            (&recovery, "ManagedInputRecoveryError"),
        ] {
            assert_eq!(err.kind_name(), name);
            assert!(err.to_string().starts_with(&format!("{name}: ")), "{err}");
            assert!(
                err.to_string().contains(err.code().unwrap().as_str()),
                "{err}"
            );
        }
        assert!(matches!(
            validation,
            ManagedInputError::Validation(ManagedInputValidationError { .. })
        ));
        assert!(matches!(
            conflict,
            ManagedInputError::Conflict(ManagedInputConflict { .. })
        ));
        assert!(matches!(
            state,
            ManagedInputError::State(ManagedInputStateError { .. })
        ));
        assert!(matches!(
            recovery,
            ManagedInputError::Recovery(ManagedInputRecoveryError { .. })
        ));
    }

    /// Numbers reach the store (and so the server) with every digit they were written with: a
    /// 30-digit integer, a decimal finer than a double; a number no double can hold, or that a double
    /// would turn into zero, is a typed `malformed_json`, never a silent change; an integer field
    /// refuses a number with any fraction, however small; the same value written differently is the
    /// same answer for idempotency.
    fn numbers_are_kept_exactly_as_given(db) {
        let store = db.store();
        let open = r#"{"type": "object",
            "properties": {"count": {"type": "integer"}, "weight": {"type": "number"}},
            "required": ["count", "weight"]}"#;
        let bounded = r#"{"type": "object",
            "properties": {
                "count": {"type": "integer", "minimum": 0, "maximum": 123456789012345678901234567890},
                "weight": {"type": "number", "minimum": 0, "maximum": 0.1}},
            "required": ["count", "weight"]}"#;
        let mut rounds = 0;
        let mut round = |schema: &str| {
            rounds += 1;
            let id = format!("r{rounds}");
            let schema: serde_json::Value = serde_json::from_str(schema).unwrap();
            let requests = BTreeMap::from([(
                "parcel".to_string(),
                ElicitationRequest::form("How many, how heavy?", schema),
            )]);
            let new =
                NewRound::new(&id, "exec-1", "srv", "tool", requests).owned_by(OwnerClaim::new("w"));
            store.create_round(&new).unwrap();
            id
        };
        let text = |count: &str, weight: &str| {
            format!(
                r#"{{"parcel":{{"action":"accept","content":{{"count":{count},"weight":{weight}}}}}}}"#
            )
        };
        // What a schema cannot accept is refused by its exact value, never as a double would see
        // it, naming the field; only an exponent past the parser's limit is not read at all.
        let (open_id, bounded_id) = (round(open), round(bounded));
        for (id, count, weight, code, field) in [
            (
                &open_id,
                "1",
                "1e99999999999999999999",
                ErrorCode::MalformedJson,
                None,
            ),
            (
                &open_id,
                "1e-400",
                "1",
                ErrorCode::SchemaViolation,
                Some("count"),
            ),
            (
                &open_id,
                "5.0000000000000000001",
                "1",
                ErrorCode::SchemaViolation,
                Some("count"),
            ),
            (
                &open_id,
                "1e-1",
                "1",
                ErrorCode::SchemaViolation,
                Some("count"),
            ),
            (
                &bounded_id,
                "1e400",
                "0",
                ErrorCode::SchemaViolation,
                Some("count"),
            ),
            (
                &bounded_id,
                "-1e-400",
                "0",
                ErrorCode::SchemaViolation,
                Some("count"),
            ),
            (
                &bounded_id,
                "-1",
                "0",
                ErrorCode::SchemaViolation,
                Some("count"),
            ),
            (
                &bounded_id,
                "123456789012345678901234567891",
                "0",
                ErrorCode::SchemaViolation,
                Some("count"),
            ),
            (
                &bounded_id,
                "0",
                "-1e-400",
                ErrorCode::SchemaViolation,
                Some("weight"),
            ),
            (
                &bounded_id,
                "0",
                "1e400",
                ErrorCode::SchemaViolation,
                Some("weight"),
            ),
            (
                &bounded_id,
                "0",
                "0.1000000000000000055511151231257827",
                ErrorCode::SchemaViolation,
                Some("weight"),
            ),
        ] {
            let raw = text(count, weight);
            let before = store.get_round(id).unwrap();
            let err = store.submit_responses_json(id, &raw, "k").unwrap_err();
            assert_eq!(code_of(&err), code, "{raw}: {err}");
            if let Some(field) = field {
                let ManagedInputError::Validation(v) = &err else {
                    panic!("{err}")
                };
                assert_eq!(v.detail.field.as_deref(), Some(field), "{raw}: {err}");
            }
            assert_eq!(before, store.get_round(id).unwrap(), "{raw}: unchanged");
        }
        // What it can accept is stored (and so delivered) as written: every digit, any magnitude,
        // `-0` and `1.0` as they are (an exponent without a sign is written `e+`).
        let mut accept = |schema: &str, count: &str, weight: &str| {
            let id = round(schema);
            let record = store
                .submit_responses_json(&id, &text(count, weight), "k")
                .unwrap_or_else(|e| panic!("{count} {weight}: {e}"));
            let content = record.responses.unwrap()["parcel"].content.clone().unwrap();
            (id, content.to_string())
        };
        let (exact, content) = accept(
            open,
            "123456789012345678901234567890",
            "0.1000000000000000000001",
        );
        assert_eq!(
            content,
            r#"{"count":123456789012345678901234567890,"weight":0.1000000000000000000001}"#
        );
        let (huge, content) = accept(open, "1e400", "1e-400");
        assert_eq!(content, r#"{"count":1e+400,"weight":1e-400}"#);
        let (zero, content) = accept(open, "-0", "-0");
        assert_eq!(content, r#"{"count":-0,"weight":-0}"#);
        let (one, content) = accept(open, "1.0", "1.0");
        assert_eq!(content, r#"{"count":1.0,"weight":1.0}"#);
        let (_, content) = accept(bounded, "123456789012345678901234567890", "1e-400");
        assert_eq!(
            content,
            r#"{"count":123456789012345678901234567890,"weight":1e-400}"#
        );
        let (_, content) = accept(bounded, "-0", "0.1");
        assert_eq!(content, r#"{"count":-0,"weight":0.1}"#);
        // Idempotency compares exact values: the same value written otherwise is the same answer
        // (the stored text stays the first one), any other value is another answer.
        for (id, count, weight, same) in [
            (
                &exact,
                "1234567890123456789012345678.9e2",
                "1000000000000000000001e-22",
                true,
            ),
            (
                &exact,
                "123456789012345678901234567891",
                "0.1000000000000000000001",
                false,
            ),
            (&huge, "10e399", "0.1e-399", true),
            (&huge, "1e400", "0", false),
            (&zero, "0", "0.0", true),
            (&one, "1", "1", true),
            (&one, "1", "1.0000000000000000000001", false),
        ] {
            let raw = text(count, weight);
            let before = store.get_round(id).unwrap();
            match store.submit_responses_json(id, &raw, "k") {
                Ok(record) => {
                    assert!(same, "{raw} taken as the same answer");
                    assert_eq!(Some(record), before, "{raw}: the stored answer, unchanged");
                }
                Err(err) => {
                    assert!(!same, "{raw}: {err}");
                    assert_eq!(
                        code_of(&err),
                        ErrorCode::IdempotencyConflict,
                        "{raw}: {err}"
                    );
                }
            }
        }
        // An integer field takes an integer written with an exponent or a zero fraction.
        let id = round(r#"{"type": "object", "properties": {"count": {"type": "integer"}}}"#);
        store
            .submit_responses_json(
                &id,
                r#"{"parcel":{"action":"accept","content":{"count":1.20e1}}}"#,
                "k",
            )
            .unwrap();
    }

    /// A deadline more than 366 days ahead is refused: it would outgrow the store's timestamps.
    fn a_deadline_too_far_ahead_is_refused(db) {
        let store = db.store();
        let mut round = address_round("far");
        round.deadline = Deadline::At(chrono::Utc::now() + chrono::Duration::days(367));
        let err = store.create_round(&round).unwrap_err();
        assert_eq!(code_of(&err), ErrorCode::InvalidDeadline, "{err}");
        assert!(store.get_round("far").unwrap().is_none());
        round.deadline = Deadline::At(chrono::Utc::now() + chrono::Duration::days(365));
        store.create_round(&round).unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Opening a PostgreSQL database: the counterparts of the SQLite file checks above
// ---------------------------------------------------------------------------------------------

/// A PostgreSQL database made by this build holds exactly the schema's one description
/// (`store/schema.rs`, which `m3 migrate` copies by and SQLite's migrations are held to): the
/// same tables, each column's name, order, type, `NOT NULL` and byte-by-byte collation, the
/// primary keys and the secondary indexes; nothing more.
#[test]
fn the_postgres_schema_is_the_description() {
    use m3::testing::internals::backend::schema::{INDEXES, Kind, TABLES};
    use m3_tests::postgres_server::PostgresServer;
    let server = PostgresServer::shared();
    let database = server.fresh_database();
    drop(PostgresManagedInputStore::open(&database.url, StoreOptions::default()).unwrap());
    let rows = |sql: &str| -> Vec<Vec<String>> {
        server
            .psql(&database.name, sql)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.split('|').map(str::to_string).collect())
            .collect()
    };
    let tables: Vec<String> = rows(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() \
         AND table_name <> 'm3_schema' ORDER BY table_name",
    )
    .into_iter()
    .map(|r| r[0].clone())
    .collect();
    let mut described: Vec<String> = TABLES.iter().map(|t| t.name.to_string()).collect();
    described.sort();
    assert_eq!(tables, described);
    for table in TABLES {
        let columns = rows(&format!(
            "SELECT column_name, data_type, is_nullable, coalesce(collation_name, '') \
             FROM information_schema.columns WHERE table_schema = current_schema() \
             AND table_name = '{}' ORDER BY ordinal_position",
            table.name
        ));
        let expected: Vec<Vec<String>> = table
            .columns
            .iter()
            .map(|c| {
                vec![
                    c.name.to_string(),
                    match c.kind {
                        Kind::Text => "text",
                        Kind::Integer => "bigint",
                    }
                    .to_string(),
                    if c.nullable { "YES" } else { "NO" }.to_string(),
                    if c.bytewise { "C" } else { "" }.to_string(),
                ]
            })
            .collect();
        assert_eq!(columns, expected, "{}", table.name);
        let key: Vec<String> = rows(&format!(
            "SELECT a.attname FROM pg_index i \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
             WHERE i.indrelid = '{}'::regclass AND i.indisprimary \
             ORDER BY array_position(i.indkey::int2[], a.attnum)",
            table.name
        ))
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
        assert_eq!(key, table.key, "{}", table.name);
    }
    let mut indexes: Vec<(String, String, String)> = rows(
        "SELECT indexname, tablename, indexdef FROM pg_indexes \
         WHERE schemaname = current_schema() AND tablename <> 'm3_schema' \
         AND indexname NOT LIKE '%_pkey' ORDER BY indexname",
    )
    .into_iter()
    .map(|r| {
        let columns = r[2]
            .rsplit_once('(')
            .map(|(_, c)| c.trim_end_matches(')').to_string())
            .unwrap_or_default();
        (r[0].clone(), r[1].clone(), columns)
    })
    .collect();
    indexes.sort();
    let mut described: Vec<(String, String, String)> = INDEXES
        .iter()
        .map(|i| {
            (
                i.name.to_string(),
                i.table.to_string(),
                i.columns.join(", "),
            )
        })
        .collect();
    described.sort();
    assert_eq!(indexes, described);
}

/// A PostgreSQL database's schema is versioned like a SQLite file's: a newer version is refused
/// and left as it is, a database holding another application's tables is refused and nothing is
/// created in it, and an m3 database at this build's version opens without change.
#[test]
fn a_postgres_database_of_a_newer_schema_or_of_another_application_is_refused() {
    use m3_tests::postgres_server::PostgresServer;
    let server = PostgresServer::shared();
    let database = server.fresh_database();
    let open = |url: &str| PostgresManagedInputStore::open(url, StoreOptions::default());
    let store = open(&database.url).unwrap();
    fresh_address_round(&store, "r1");
    drop(store);
    let version = |name: &str| {
        server
            .psql(name, "SELECT version FROM m3_schema")
            .trim()
            .to_string()
    };
    assert_eq!(
        version(&database.name),
        m3::health::SCHEMA_VERSION_POSTGRES.to_string()
    );
    server.psql(&database.name, "UPDATE m3_schema SET version = 99");
    let err = open(&database.url).unwrap_err();
    assert_eq!(err.code(), Some("incompatible_database"), "{err}");
    assert_eq!(version(&database.name), "99", "left as it is");
    server.psql(&database.name, "UPDATE m3_schema SET version = 1");
    assert_eq!(
        open(&database.url)
            .unwrap()
            .get_round("r1")
            .unwrap()
            .unwrap()
            .status,
        ManagedInputStatus::Pending
    );

    let foreign = server.fresh_database();
    server.psql(&foreign.name, "CREATE TABLE invoices (id INT PRIMARY KEY)");
    let err = open(&foreign.url).unwrap_err();
    assert_eq!(err.code(), Some("incompatible_database"), "{err}");
    let tables = server.psql(
        &foreign.name,
        "SELECT string_agg(table_name, ',') FROM information_schema.tables \
         WHERE table_schema = 'public'",
    );
    assert_eq!(tables.trim(), "invoices", "nothing was created beside them");

    // A table named m3_schema of another application: refused by name, not with PostgreSQL's
    // own words about its columns, and left as it is.
    for table in [
        "CREATE TABLE m3_schema (id INT PRIMARY KEY)",
        "CREATE TABLE m3_schema (application INT, version TEXT); \
         INSERT INTO m3_schema VALUES (1, 'one')",
    ] {
        let foreign = server.fresh_database();
        server.psql(&foreign.name, table);
        let err = open(&foreign.url).unwrap_err();
        assert_eq!(err.code(), Some("incompatible_database"), "{err}");
        let text = err.to_string();
        assert!(text.contains("m3_schema table that is not m3's"), "{text}");
        assert!(!text.contains("does not exist"), "{text}");
        let tables = server.psql(
            &foreign.name,
            "SELECT string_agg(table_name, ',') FROM information_schema.tables \
             WHERE table_schema = 'public'",
        );
        assert_eq!(tables.trim(), "m3_schema", "nothing was created beside it");
    }

    for url in [
        "postgres://",
        "mysql://x/y",
        "postgres://u@%2Fno-such-dir/db",
    ] {
        let err = open(url).unwrap_err();
        assert!(
            matches!(err.code(), Some("invalid_database_url" | "storage_failure")),
            "{url}: {err}"
        );
    }
}

//! `m3 migrate --from sqlite:PATH --to postgres://...` against the real binary and a throwaway
//! PostgreSQL server: the committed stored-format fixture (rounds in every status, executions in
//! every lifecycle, every lease long expired) copied verbatim and read back the same through the
//! public API; its digest computed again here, independently, from both sides; and every refusal
//! (a live lease, a target that holds rows, a copy that reads back differently, sources and
//! targets that are not m3 databases) a typed error that writes nothing.

mod common;

use common::*;
use m3::{ExecutionStore, RoundFilter};
use m3_tests::postgres_server::{PostgresDatabase, PostgresServer};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The committed fixture (schema version 3; every lease in it expired in 2026).
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/format-1.sqlite"
);

/// Whether a column holds text (else an integer).
const T: bool = true;
const I: bool = false;

/// A table: its name, its columns (name, whether text) and its primary key.
type Table = (&'static str, &'static [(&'static str, bool)], &'static str);

/// The eight tables as the digest covers them, written out here again: name, columns (name, text?)
/// and the primary key, in the order the module documentation of `m3 migrate` gives.
const TABLES: &[Table] = &[
    (
        "managed_input_rounds",
        &[
            ("round_id", T),
            ("execution_id", T),
            ("status", T),
            ("owner_id", T),
            ("deadline_ns", I),
            ("created_at_ns", I),
            ("document", T),
        ],
        "round_id",
    ),
    (
        "managed_input_round_versions",
        &[
            ("round_id", T),
            ("execution_id", T),
            ("version", I),
            ("lease_expires_at_ns", I),
            ("updated_at_ns", I),
        ],
        "round_id",
    ),
    (
        "executions",
        &[
            ("execution_id", T),
            ("status", T),
            ("owner_id", T),
            ("created_at_ns", I),
            ("document", T),
        ],
        "execution_id",
    ),
    (
        "execution_versions",
        &[
            ("execution_id", T),
            ("version", I),
            ("lease_expires_at_ns", I),
            ("updated_at_ns", I),
        ],
        "execution_id",
    ),
    (
        "execution_items",
        &[
            ("execution_id", T),
            ("seq", I),
            ("kind", T),
            ("document", T),
        ],
        "execution_id, seq",
    ),
    (
        "execution_wakeups",
        &[("execution_id", T), ("seq", I)],
        "execution_id",
    ),
    (
        "notification_targets",
        &[("target_id", T), ("label", T), ("since_ns", I)],
        "target_id",
    ),
    (
        "notifications",
        &[
            ("target_id", T),
            ("event_id", T),
            ("seq", I),
            ("round_id", T),
            ("status", T),
            ("attempts", I),
            ("due_at_ns", I),
            ("claimed_by", T),
            ("claimed_until_ns", I),
            ("created_at_ns", I),
            ("updated_at_ns", I),
            ("last_error", T),
            ("document", T),
        ],
        "target_id, event_id",
    ),
];

fn server() -> &'static PostgresServer {
    PostgresServer::shared()
}

/// `m3 migrate --from FROM --to TO` (and `--json`), in the sandbox, with no `--db`.
fn migrate(sb: &Sandbox, from: &str, to: &str, json: bool) -> Output {
    let mut cmd = sb.bare();
    cmd.args(["migrate", "--from", from, "--to", to]);
    if json {
        cmd.arg("--json");
    }
    finish(cmd, None, COMMAND_TIMEOUT)
}

/// A copy of the fixture in the sandbox, brought to this build's schema version by opening it
/// through the public API, and what that API reads back from it.
fn fixture_source(sb: &Sandbox) -> Value {
    std::fs::copy(FIXTURE, &sb.db).expect("copying the fixture");
    m3_tests::fixture::read_back(&sb.db).expect("reading the fixture back")
}

/// What the public API reads back from a PostgreSQL database, as `m3_tests::fixture::read_back`
/// reads a SQLite file: every round and every execution's state, keyed by id.
fn read_back_postgres(url: &str) -> Value {
    let store = m3::PostgresExecutionStore::open(url, m3::StoreOptions::default())
        .expect("opening the target");
    let managed = store
        .managed_input_store()
        .expect("the target's store")
        .expect("a persistent store");
    let mut rounds = serde_json::Map::new();
    for record in managed
        .list_rounds(&RoundFilter::default())
        .expect("listing the target's rounds")
    {
        rounds.insert(
            record.pending.round_id.clone(),
            serde_json::to_value(&record).unwrap(),
        );
    }
    let mut executions = serde_json::Map::new();
    for state in m3::testing::execution_states(&store).expect("the target's executions") {
        executions.insert(
            state.execution_id.clone(),
            serde_json::to_value(&state).unwrap(),
        );
    }
    store.close();
    json!({"rounds": rounds, "executions": executions})
}

/// Each table's row count in a SQLite file.
fn sqlite_counts(path: &Path) -> Vec<u64> {
    let conn = rusqlite::Connection::open(path).expect("opening the source");
    TABLES
        .iter()
        .map(|(name, _, _)| {
            conn.query_row(&format!("SELECT count(*) FROM {name}"), [], |r| {
                r.get::<_, i64>(0)
            })
            .expect("counting") as u64
        })
        .collect()
}

/// The canonical bytes of one cell: `0x00` NULL; `0x01` + 8 bytes big-endian; `0x02` + length
/// (8 bytes big-endian) + UTF-8.
fn cell(out: &mut Vec<u8>, value: rusqlite::types::ValueRef<'_>) {
    use rusqlite::types::ValueRef;
    match value {
        ValueRef::Null => out.push(0),
        ValueRef::Integer(v) => {
            out.push(1);
            out.extend_from_slice(&v.to_be_bytes());
        }
        ValueRef::Text(bytes) => {
            out.push(2);
            out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
            out.extend_from_slice(bytes);
        }
        other => panic!("a value of an unexpected type: {other:?}"),
    }
}

/// The digest of a SQLite file, computed here from the documented encoding: the whole
/// database's, and each table's (hex).
fn sqlite_digest(path: &Path) -> (String, Vec<String>) {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("opening the source");
    let mut all = Sha256::new();
    let mut tables = Vec::new();
    for (name, columns, key) in TABLES {
        let mut stream = Vec::new();
        let count: i64 = conn
            .query_row(&format!("SELECT count(*) FROM {name}"), [], |r| r.get(0))
            .unwrap();
        cell(
            &mut stream,
            rusqlite::types::ValueRef::Text(name.as_bytes()),
        );
        cell(&mut stream, rusqlite::types::ValueRef::Integer(count));
        let list: Vec<&str> = columns.iter().map(|(c, _)| *c).collect();
        let mut statement = conn
            .prepare(&format!(
                "SELECT {} FROM {name} ORDER BY {key}",
                list.join(", ")
            ))
            .unwrap();
        let mut rows = statement.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            for i in 0..columns.len() {
                cell(&mut stream, row.get_ref(i).unwrap());
            }
        }
        all.update(&stream);
        tables.push(hex::encode(Sha256::digest(&stream)));
    }
    (hex::encode(all.finalize()), tables)
}

/// The same digest computed by PostgreSQL itself, in SQL, from the target's rows.
fn postgres_digest(database: &PostgresDatabase) -> String {
    let streams: Vec<String> = TABLES
        .iter()
        .map(|(name, columns, key)| {
            let cells: Vec<String> = columns
                .iter()
                .map(|(c, text)| {
                    if *text {
                        format!(
                            "CASE WHEN {c} IS NULL THEN '\\x00'::bytea ELSE '\\x02'::bytea || \
                             int8send(octet_length(convert_to({c}, 'UTF8'))::int8) || \
                             convert_to({c}, 'UTF8') END"
                        )
                    } else {
                        format!(
                            "CASE WHEN {c} IS NULL THEN '\\x00'::bytea ELSE '\\x01'::bytea || \
                             int8send({c}) END"
                        )
                    }
                })
                .collect();
            format!(
                "('\\x02'::bytea || int8send({len}::int8) || convert_to('{name}', 'UTF8') || \
                 '\\x01'::bytea || int8send((SELECT count(*) FROM {name})) || \
                 coalesce((SELECT string_agg({row}, ''::bytea ORDER BY {key}) FROM {name}), \
                 ''::bytea))",
                len = name.len(),
                row = cells.join(" || "),
            )
        })
        .collect();
    let sql = format!("SELECT encode(sha256({}), 'hex');", streams.join(" || "));
    server().psql(&database.name, &sql).trim().to_string()
}

/// How many rows of the eight tables the target holds, and whether it has them at all.
fn target_rows(database: &PostgresDatabase) -> Option<u64> {
    let tables = server().psql(
        &database.name,
        "SELECT count(*) FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_name = 'executions';",
    );
    if tables.trim() == "0" {
        return None;
    }
    let counts: Vec<String> = TABLES
        .iter()
        .map(|(name, _, _)| format!("(SELECT count(*) FROM {name})"))
        .collect();
    let total = server().psql(&database.name, &format!("SELECT {};", counts.join(" + ")));
    Some(total.trim().parse().expect("a count"))
}

/// The tables of any kind the target's schema holds.
fn target_table_count(database: &PostgresDatabase) -> u64 {
    server()
        .psql(
            &database.name,
            "SELECT count(*) FROM information_schema.tables \
             WHERE table_schema = current_schema();",
        )
        .trim()
        .parse()
        .expect("a count")
}

/// The names of the files in `dir`.
fn listing(dir: &Path) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("listing a directory")
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// `url` with a password added after its user name (the test server trusts local
/// connections, so any password is accepted and none is checked).
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (user, host) = rest.split_once('@').expect("a user in the URL");
    format!("{scheme}://{user}:{password}@{host}")
}

/// The fixture copied into a fresh database: the report's counts are the source's, the target
/// reads back through the public API exactly as the source does, and the digest the command
/// prints is the one computed here from the source's rows and by PostgreSQL from the target's.
/// A second copy into another database prints the same digest in the human form, without the
/// URL's password.
#[test]
fn the_fixture_is_copied_verbatim_and_its_digest_computed_again_matches() {
    let sb = Sandbox::new();
    let expected = fixture_source(&sb);
    assert_eq!(expected["rounds"].as_object().unwrap().len(), 14);
    assert_eq!(expected["executions"].as_object().unwrap().len(), 5);
    let before = std::fs::read(&sb.db).unwrap();
    let target = server().fresh_database();

    let from = format!("sqlite:{}", sb.db.display());
    let report = migrate(&sb, &from, &target.url, true).json();
    assert_eq!(report["source"], sb.db.display().to_string(), "{report}");
    assert_eq!(report["rounds"], 14, "{report}");
    assert_eq!(report["executions"], 5, "{report}");
    let counts = sqlite_counts(&sb.db);
    let tables = report["tables"].as_array().expect("tables");
    assert_eq!(tables.len(), TABLES.len(), "{report}");
    for ((table, (name, _, _)), count) in tables.iter().zip(TABLES).zip(&counts) {
        assert_eq!(table["table"], *name, "{report}");
        assert_eq!(table["rows"], *count, "{name}: {report}");
    }
    assert!(
        counts[0] > 0 && counts[2] > 0 && counts[3] > 0,
        "{counts:?}"
    );

    // The digest, twice more: from the source's rows here, and by the target's server.
    let (digest, table_digests) = sqlite_digest(&sb.db);
    assert_eq!(report["digest"], digest, "{report}");
    for (table, own) in tables.iter().zip(&table_digests) {
        assert_eq!(table["digest"], *own, "{table}");
    }
    assert_eq!(postgres_digest(&target), digest);

    // The same records and executions through the public API on both sides.
    assert_eq!(read_back_postgres(&target.url), expected);
    assert_eq!(
        std::fs::read(&sb.db).unwrap(),
        before,
        "the source was written"
    );

    // The human form, into another database, with a password in the URL.
    let other = server().fresh_database();
    let url = with_password(&other.url, "s3cret-pw");
    let out = migrate(&sb, sb.db.to_str().unwrap(), &url, false);
    out.ok();
    assert!(
        out.stdout
            .starts_with("Copied 14 round(s) and 5 execution(s) from "),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains(&digest), "{}", out.stdout);
    assert!(
        out.stdout.contains("managed_input_round_versions"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("s3cret") && !out.stderr.contains("s3cret"));
    assert_eq!(postgres_digest(&other), digest);
}

/// A waiting `m3 run` holds its execution's and its round's leases: `m3 migrate` refuses with a
/// typed conflict naming how many are live (and no id), and writes nothing: the target has no
/// table at all afterwards. Once the round is answered, the run has finished and its leases
/// have expired, the same copy succeeds, its tool result (an execution item) and wake-up rows
/// included, and both sides read back the same.
#[test]
fn a_live_lease_refuses_the_copy_until_its_worker_is_done() {
    let sb = Sandbox::new();
    let run = sb.spawn_run("legacy", &[], &["--lease", "2"]);
    let round = sb.wait_pending();
    let (round_id, execution_id) = ids(&round);
    let target = server().fresh_database();

    let out = migrate(&sb, sb.db.to_str().unwrap(), &target.url, false);
    let line = out.fails_with("ManagedInputConflict");
    assert!(
        line.starts_with(
            "ManagedInputConflict: 2 lease(s) in the source are live, the last until "
        ),
        "{line}"
    );
    assert!(line.ends_with("(leases_live)"), "{line}");
    assert!(
        !out.stderr.contains(&round_id) && !out.stderr.contains(&execution_id),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "{}", out.stdout);

    let out = migrate(&sb, sb.db.to_str().unwrap(), &target.url, true);
    out.fails_with("ManagedInputConflict");
    let error: Value = serde_json::from_str(out.first_stderr_line()).expect("a JSON error");
    assert_eq!(error["error"]["code"], "leases_live", "{error}");

    assert_eq!(target_table_count(&target), 0, "the target was touched");
    assert_eq!(target_rows(&target), None);

    // Answered, finished, and every lease expired: now it copies.
    sb.m3(&[
        "respond",
        &round_id,
        "--idempotency-key",
        "answer-1",
        "--accept",
        &accept_address(),
    ])
    .ok();
    let (out, _) = run.finish();
    out.ok();
    let last: Option<i64> = rusqlite::Connection::open(&sb.db)
        .unwrap()
        .query_row(
            "SELECT max(e) FROM (SELECT lease_expires_at_ns AS e FROM \
             managed_input_round_versions UNION ALL SELECT lease_expires_at_ns FROM \
             execution_versions)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    if let Some(last) = last {
        let now = chrono::Utc::now().timestamp_nanos_opt().unwrap();
        let left = u64::try_from(last - now).unwrap_or(0);
        std::thread::sleep(
            std::time::Duration::from_nanos(left) + std::time::Duration::from_millis(50),
        );
    }
    let expected = m3_tests::fixture::read_back(&sb.db).expect("reading the source back");
    let report = migrate(&sb, sb.db.to_str().unwrap(), &target.url, true).json();
    assert_eq!(report["rounds"], 1, "{report}");
    assert_eq!(report["executions"], 1, "{report}");
    let rows = |table: &str| {
        report["tables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["table"] == table)
            .map(|t| t["rows"].as_u64().unwrap())
    };
    assert_eq!(rows("execution_items"), Some(1), "{report}");
    assert!(rows("execution_wakeups") >= Some(1), "{report}");
    assert_eq!(report["digest"], sqlite_digest(&sb.db).0, "{report}");
    assert_eq!(postgres_digest(&target), sqlite_digest(&sb.db).0);
    assert_eq!(read_back_postgres(&target.url), expected);
}

/// A target that already holds rounds and executions refuses another copy, naming its counts,
/// and keeps exactly what it held.
#[test]
fn a_target_that_holds_rows_refuses_and_keeps_them() {
    let sb = Sandbox::new();
    fixture_source(&sb);
    let target = server().fresh_database();
    let from = sb.db.to_str().unwrap().to_string();
    migrate(&sb, &from, &target.url, true).json();
    let held = read_back_postgres(&target.url);
    let digest = postgres_digest(&target);
    let rows = target_rows(&target);

    // Another source (an empty m3 database) into it: refused, nothing merged.
    let empty = Sandbox::new();
    empty.create_database();
    for source in [from.as_str(), empty.db.to_str().unwrap()] {
        let out = migrate(&sb, source, &target.url, false);
        let line = out.fails_with("ManagedInputConflict");
        assert!(
            line.contains("already holds 14 round(s), 5 execution(s)"),
            "{line}"
        );
        assert!(line.ends_with("(target_not_empty)"), "{line}");
    }
    assert_eq!(postgres_digest(&target), digest);
    assert_eq!(target_rows(&target), rows);
    assert_eq!(read_back_postgres(&target.url), held);
}

/// A copy whose rows read back differently from the target (a trigger there changes or drops
/// them as they are written) is rolled back with a typed error naming the table: the target
/// holds no row afterwards, and once the trigger is gone the same copy succeeds.
#[test]
fn a_copy_that_reads_back_differently_is_rolled_back() {
    let sb = Sandbox::new();
    fixture_source(&sb);
    let target = server().fresh_database();
    // An empty m3 database first: the target's tables exist, with no row.
    let empty = Sandbox::new();
    empty.create_database();
    let report = migrate(&sb, empty.db.to_str().unwrap(), &target.url, true).json();
    assert_eq!(report["rounds"], 0, "{report}");
    assert_eq!(target_rows(&target), Some(0));
    let from = sb.db.to_str().unwrap().to_string();

    server().psql(
        &target.name,
        "CREATE FUNCTION tamper() RETURNS trigger AS $$ BEGIN \
         NEW.document := NEW.document || ' '; RETURN NEW; END $$ LANGUAGE plpgsql; \
         CREATE TRIGGER tamper BEFORE INSERT ON executions \
         FOR EACH ROW EXECUTE FUNCTION tamper();",
    );
    let out = migrate(&sb, &from, &target.url, false);
    let line = out.fails_with("StorageError");
    assert!(
        line.starts_with("StorageError: the copy does not match the source in executions: "),
        "{line}"
    );
    assert!(line.ends_with("(copy_mismatch)"), "{line}");
    assert_eq!(target_rows(&target), Some(0), "a mismatched copy was kept");

    server().psql(
        &target.name,
        "DROP TRIGGER tamper ON executions; \
         CREATE FUNCTION skip() RETURNS trigger AS $$ BEGIN \
         IF NEW.round_id LIKE 'fixture-failed-%' THEN RETURN NULL; END IF; RETURN NEW; END $$ \
         LANGUAGE plpgsql; \
         CREATE TRIGGER skip BEFORE INSERT ON managed_input_round_versions \
         FOR EACH ROW EXECUTE FUNCTION skip();",
    );
    let out = migrate(&sb, &from, &target.url, true);
    out.fails_with("StorageError");
    let error: Value = serde_json::from_str(out.first_stderr_line()).expect("a JSON error");
    assert_eq!(error["error"]["code"], "copy_mismatch", "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("managed_input_round_versions"),
        "{message}"
    );
    assert_eq!(target_rows(&target), Some(0), "a short copy was kept");

    server().psql(
        &target.name,
        "DROP TRIGGER skip ON managed_input_round_versions;",
    );
    let report = migrate(&sb, &from, &target.url, true).json();
    assert_eq!(report["rounds"], 14, "{report}");
    assert_eq!(postgres_digest(&target), report["digest"].as_str().unwrap());
}

/// Sources that are missing or not m3 databases of this schema version, a `--from` that is a
/// URL, and targets that are not PostgreSQL URLs or hold another application's tables: each a
/// typed error with its code; no source file is created or changed and the target is untouched.
#[test]
fn sources_and_targets_that_are_not_m3_databases_change_nothing() {
    let sb = Sandbox::new();
    let target = server().fresh_database();
    let dir = sb.dir.path();

    let missing = dir.join("missing.sqlite");
    let out = migrate(
        &sb,
        &format!("sqlite:{}", missing.display()),
        &target.url,
        false,
    );
    let line = out.fails_with("StorageError");
    assert!(line.contains("there is no database at"), "{line}");
    assert!(line.ends_with("(database_missing)"), "{line}");
    assert!(!missing.exists(), "the missing source was created");

    let text = sb.write(
        "notes.txt",
        "not a database, just some words that are long enough\n",
    );
    let foreign = dir.join("foreign.sqlite");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);")
        .unwrap();
    let old = dir.join("old.sqlite");
    std::fs::copy(FIXTURE, &old).unwrap();
    let cases: [(&PathBuf, &str, &str, &str); 4] = [
        (
            &text,
            "StorageError",
            "incompatible_database",
            "is not a SQLite database",
        ),
        (
            &foreign,
            "StorageError",
            "incompatible_database",
            "is not an m3 database",
        ),
        (
            &old,
            "StorageError",
            "incompatible_database",
            "is at schema version 3",
        ),
        (
            &dir.to_path_buf(),
            "ManagedInputValidationError",
            "invalid_database_path",
            "is a directory",
        ),
    ];
    for (source, type_name, code, words) in cases {
        let bytes = std::fs::read(source).ok();
        let files = listing(dir);
        let out = migrate(&sb, source.to_str().unwrap(), &target.url, false);
        let line = out.fails_with(type_name);
        assert!(line.contains(words), "{}: {line}", source.display());
        assert!(line.ends_with(&format!("({code})")), "{line}");
        assert_eq!(
            std::fs::read(source).ok(),
            bytes,
            "{} changed",
            source.display()
        );
        assert_eq!(
            listing(dir),
            files,
            "files appeared beside {}",
            source.display()
        );
    }
    let out = migrate(&sb, &target.url, &target.url, false);
    let line = out.fails_with("ManagedInputValidationError");
    assert!(line.ends_with("(invalid_command_line)"), "{line}");

    // A target that is not a PostgreSQL URL: nothing is read, nothing is created.
    let created = Sandbox::new();
    created.create_database();
    let source_bytes = std::fs::read(&created.db).unwrap();
    let elsewhere = dir.join("elsewhere.sqlite");
    for to in [elsewhere.to_str().unwrap(), "mysql://u@h/db"] {
        let out = migrate(&sb, created.db.to_str().unwrap(), to, true);
        out.fails_with("ManagedInputValidationError");
        let error: Value = serde_json::from_str(out.first_stderr_line()).expect("a JSON error");
        assert_eq!(error["error"]["code"], "invalid_database_url", "{error}");
        assert!(out.stdout.is_empty());
    }
    assert!(!elsewhere.exists(), "the target path was created");
    assert_eq!(std::fs::read(&created.db).unwrap(), source_bytes);
    assert_eq!(target_table_count(&target), 0, "the target was touched");

    // A target that holds another application's tables is left as it is.
    server().psql(&target.name, "CREATE TABLE theirs (x INTEGER);");
    let out = migrate(&sb, created.db.to_str().unwrap(), &target.url, false);
    let line = out.fails_with("StorageError");
    assert!(line.ends_with("(incompatible_database)"), "{line}");
    assert_eq!(
        target_table_count(&target),
        1,
        "tables were created next to theirs"
    );
}

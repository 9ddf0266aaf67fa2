//! The integrity check itself (`backends::integrity`, `tests/support/integrity.rs`): on a store
//! with real executions and rounds (one answered and delivered, one cancelled while its round
//! waited) it says `ok`; each corruption planted by raw SQL, one at a time and undone after, is
//! reported naming the row it concerns, on SQLite and on PostgreSQL alike.

use anyhow::{Context, Result, ensure};
use m3::*;
use m3_tests::backends::{Db, integrity};
use m3_tests::postgres_server::PostgresServer;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");

/// Runs `sql` (any number of statements) on `db` as its owner: on the SQLite file, or as the
/// test server's superuser.
fn run_sql(db: &Db, sql: &str) -> Result<()> {
    match db {
        Db::Sqlite(file) => rusqlite::Connection::open(&file.path)?
            .execute_batch(sql)
            .with_context(|| format!("running {sql}")),
        Db::Postgres(database) => {
            PostgresServer::shared().psql(&database.name, sql);
            Ok(())
        }
    }
}

/// How many rows `table` of `db` holds.
fn count(db: &Db, table: &str) -> Result<i64> {
    let sql = format!("SELECT count(*) FROM {table}");
    match db {
        Db::Sqlite(file) => {
            Ok(rusqlite::Connection::open(&file.path)?.query_row(&sql, [], |r| r.get(0))?)
        }
        Db::Postgres(database) => Ok(PostgresServer::shared()
            .psql(&database.name, &sql)
            .trim()
            .parse()?),
    }
}

/// An execution store on `db`.
fn execution_store(db: &Db) -> Arc<dyn ExecutionStore> {
    match db {
        Db::Sqlite(file) => Arc::new(SqliteExecutionStore::open(&file.path).unwrap()),
        Db::Postgres(database) => {
            Arc::new(PostgresExecutionStore::open(&database.url, StoreOptions::default()).unwrap())
        }
    }
}

/// The ids of two finished executions and their rounds: the first answered, delivered and
/// resolved, the second cancelled while its round waited (the round failed `cancelled`).
struct Populated {
    answered: String,
    answered_round: String,
    cancelled: String,
    cancelled_round: String,
}

/// Runs the two executions of [`Populated`] through a kit on `db`, with the bundled shipping
/// server.
fn populate(db: &Db) -> Result<Populated> {
    let store = execution_store(db);
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    let agent = kit
        .agents([AgentSpec::scripted(Script::call(
            "shipping:book_shipment",
            json!({"item": "book", "quantity": 1}),
        ))])?
        .remove(0);
    let submit = || {
        agent.submit(
            Submission::new(
                "Book a shipment.",
                StdioServer::new("shipping", SHIPPING_SERVER),
            )
            .tools(["shipping:book_shipment"])
            .human_input(HumanInput::Managed),
        )
    };
    let wait_pending = |handle: &ExecutionHandle| -> Result<PendingElicitationRound> {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(pending) = handle.pending_elicitation()? {
                return Ok(pending);
            }
            ensure!(Instant::now() < until, "no pending round in time");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let first = submit()?;
    let pending = wait_pending(&first)?;
    first.respond_elicitation(
        &pending.round_id,
        BTreeMap::from([(
            "shipping_address".to_string(),
            ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
        )]),
        "answer-1",
    )?;
    let result = first.result(Some(Duration::from_secs(60)))?;
    ensure!(
        result.outcome.kind == OutcomeKind::Succeeded,
        "{}",
        result.outcome
    );
    let second = submit()?;
    let waiting = wait_pending(&second)?;
    second.cancel()?;
    let result = second.result(Some(Duration::from_secs(60)))?;
    ensure!(
        result.outcome.kind == OutcomeKind::Cancelled,
        "{}",
        result.outcome
    );
    drop(kit);
    store.close();
    Ok(Populated {
        answered: first.execution_id().to_string(),
        answered_round: pending.round_id,
        cancelled: second.execution_id().to_string(),
        cancelled_round: waiting.round_id,
    })
}

/// One corruption: what it plants, how it is undone, and what the report must say (each of its
/// lines naming `subject`).
struct Plant {
    what: &'static str,
    plant: String,
    undo: String,
    expected: &'static str,
    subject: String,
}

/// The corruptions planted on a store populated as [`Populated`] says.
fn plants(db: &Db, ids: &Populated) -> Vec<Plant> {
    let Populated {
        answered,
        answered_round: round,
        cancelled,
        cancelled_round,
    } = ids;
    let mut plants = vec![
        Plant {
            what: "an execution item of no execution",
            plant: "INSERT INTO execution_items VALUES ('exec-gone', 1, 'tool-result', '{}')"
                .into(),
            undo: "DELETE FROM execution_items WHERE execution_id = 'exec-gone'".into(),
            expected: "no such execution (an orphan)",
            subject: "exec-gone".into(),
        },
        Plant {
            what: "a round's version row without its round",
            plant: "INSERT INTO managed_input_round_versions VALUES \
                    ('round-gone', 'exec-gone', 1, NULL, 0)"
                .into(),
            undo: "DELETE FROM managed_input_round_versions WHERE round_id = 'round-gone'".into(),
            expected: "a version row without its round (an orphan)",
            subject: "round-gone".into(),
        },
        Plant {
            what: "a round without its version row",
            plant: format!(
                "CREATE TABLE kept AS SELECT * FROM managed_input_round_versions \
                 WHERE round_id = '{round}'; \
                 DELETE FROM managed_input_round_versions WHERE round_id = '{round}'"
            ),
            undo: "INSERT INTO managed_input_round_versions SELECT * FROM kept; DROP TABLE kept"
                .into(),
            expected: "no version row",
            subject: round.clone(),
        },
        Plant {
            what: "a round's version row naming another execution",
            plant: format!(
                "UPDATE managed_input_round_versions SET execution_id = '{cancelled}' \
                 WHERE round_id = '{round}'"
            ),
            undo: format!(
                "UPDATE managed_input_round_versions SET execution_id = '{answered}' \
                 WHERE round_id = '{round}'"
            ),
            expected: "its version row names another execution",
            subject: round.clone(),
        },
        Plant {
            what: "a round's version row out of step with its lease owner",
            plant: format!(
                "CREATE TABLE kept AS SELECT * FROM managed_input_round_versions \
                 WHERE round_id = '{round}'; \
                 UPDATE managed_input_round_versions SET lease_expires_at_ns = NULL \
                 WHERE round_id = '{round}'"
            ),
            undo: format!(
                "UPDATE managed_input_round_versions SET lease_expires_at_ns = \
                 (SELECT lease_expires_at_ns FROM kept) WHERE round_id = '{round}'; \
                 DROP TABLE kept"
            ),
            expected: "a lease owner without an expiry",
            subject: round.clone(),
        },
        Plant {
            what: "an execution without its version row",
            plant: format!(
                "CREATE TABLE kept AS SELECT * FROM execution_versions \
                 WHERE execution_id = '{cancelled}'; \
                 DELETE FROM execution_versions WHERE execution_id = '{cancelled}'"
            ),
            undo: "INSERT INTO execution_versions SELECT * FROM kept; DROP TABLE kept".into(),
            expected: "no version row",
            subject: cancelled.clone(),
        },
        Plant {
            what: "a round delivered but still open under the execution its worker finished",
            plant: format!(
                "UPDATE managed_input_rounds SET status = 'delivered', \
                 document = replace(document, '\"status\":\"Resolved\"', '\"status\":\"Delivered\"') \
                 WHERE round_id = '{round}'"
            ),
            undo: format!(
                "UPDATE managed_input_rounds SET status = 'resolved', \
                 document = replace(document, '\"status\":\"Delivered\"', '\"status\":\"Resolved\"') \
                 WHERE round_id = '{round}'"
            ),
            expected: "which its worker finished",
            subject: round.clone(),
        },
        Plant {
            what: "a round pending under the execution cancelled while it waited",
            plant: format!(
                "UPDATE managed_input_rounds SET status = 'pending', \
                 document = replace(replace(document, '\"status\":\"Failed\"', \
                 '\"status\":\"Pending\"'), '\"failure\":{{', '\"failure_was\":{{') \
                 WHERE round_id = '{cancelled_round}'"
            ),
            undo: format!(
                "UPDATE managed_input_rounds SET status = 'failed', \
                 document = replace(replace(document, '\"status\":\"Pending\"', \
                 '\"status\":\"Failed\"'), '\"failure_was\":{{', '\"failure\":{{') \
                 WHERE round_id = '{cancelled_round}'"
            ),
            expected: "which its worker finished",
            subject: cancelled_round.clone(),
        },
        Plant {
            what: "a round's status outside the vocabulary",
            plant: format!(
                "UPDATE managed_input_rounds SET status = 'lost' WHERE round_id = '{round}'"
            ),
            undo: format!(
                "UPDATE managed_input_rounds SET status = 'resolved' WHERE round_id = '{round}'"
            ),
            expected: "status \"lost\" is not a round's",
            subject: round.clone(),
        },
        Plant {
            what: "an execution's status outside the vocabulary",
            plant: format!(
                "UPDATE executions SET status = 'paused' WHERE execution_id = '{answered}'"
            ),
            undo: format!(
                "UPDATE executions SET status = 'finished' WHERE execution_id = '{answered}'"
            ),
            expected: "status \"paused\" is not an execution's",
            subject: answered.clone(),
        },
        Plant {
            what: "a finished execution marked running",
            plant: format!(
                "UPDATE executions SET status = 'running' WHERE execution_id = '{answered}'"
            ),
            undo: format!(
                "UPDATE executions SET status = 'finished' WHERE execution_id = '{answered}'"
            ),
            expected: "an outcome before it finished",
            subject: answered.clone(),
        },
        Plant {
            what: "a round's document disagreeing with its row's status",
            plant: format!(
                "UPDATE managed_input_rounds SET document = replace(document, \
                 '\"status\":\"Resolved\"', '\"status\":\"Pending\"') WHERE round_id = '{round}'"
            ),
            undo: format!(
                "UPDATE managed_input_rounds SET document = replace(document, \
                 '\"status\":\"Pending\"', '\"status\":\"Resolved\"') WHERE round_id = '{round}'"
            ),
            expected: "its document's status disagrees with its row's",
            subject: round.clone(),
        },
        Plant {
            what: "an execution's items numbered with a gap",
            plant: format!(
                "UPDATE execution_items SET seq = seq + 100 WHERE execution_id = '{answered}'"
            ),
            undo: format!(
                "UPDATE execution_items SET seq = seq - 100 WHERE execution_id = '{answered}'"
            ),
            expected: "its items are not numbered 1 to",
            subject: answered.clone(),
        },
        Plant {
            what: "two wake-ups with one number",
            plant: format!(
                "INSERT INTO execution_wakeups SELECT 'exec-twin', seq FROM execution_wakeups \
                 WHERE execution_id = '{answered}'"
            ),
            undo: "DELETE FROM execution_wakeups WHERE execution_id = 'exec-twin'".into(),
            expected: "share the number",
            subject: "exec-twin".into(),
        },
    ];
    if db.is_postgres() {
        plants.push(Plant {
            what: "an index of the store's schema gone (amcheck walks them all)",
            plant: "DROP INDEX managed_input_rounds_by_status".into(),
            undo: "CREATE INDEX managed_input_rounds_by_status \
                   ON managed_input_rounds (status, created_at_ns)"
                .into(),
            expected: "amcheck found 13 btree indexes",
            subject: "amcheck".into(),
        });
    }
    plants
}

m3_tests::on_both_backends! {
    fn every_planted_corruption_is_reported_and_an_untouched_store_is_ok(db) {
        let ids = populate(db).expect("two executions run");
        assert_eq!(integrity(db), "ok", "the untouched store");
        // The populated store holds every kind of row the check reads.
        for table in [
            "managed_input_rounds",
            "managed_input_round_versions",
            "executions",
            "execution_versions",
            "execution_items",
            "execution_wakeups",
        ] {
            assert!(count(db, table).unwrap() > 0, "{table} holds no row to check");
        }
        for plant in plants(db, &ids) {
            run_sql(db, &plant.plant).unwrap_or_else(|e| panic!("{}: {e:#}", plant.what));
            let report = integrity(db);
            run_sql(db, &plant.undo).unwrap_or_else(|e| panic!("{}: undo: {e:#}", plant.what));
            println!("{}: {report}", plant.what);
            assert!(
                report.contains(plant.expected),
                "{}: expected {:?} in the report:\n{report}",
                plant.what,
                plant.expected
            );
            for line in report.lines() {
                assert!(
                    line.contains(&plant.subject),
                    "{}: a problem that does not name {}:\n{report}",
                    plant.what,
                    plant.subject
                );
            }
            assert_eq!(integrity(db), "ok", "{}: undone", plant.what);
        }
    }
}

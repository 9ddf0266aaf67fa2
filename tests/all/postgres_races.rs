//! PostgreSQL's concurrency from the data (decision 0077): a write locks the executions it
//! touches, not the database. Writes of one execution never wait for another's, and the planted
//! control (the write lock held exclusively, as `m3 migrate` holds it) stops every one of them;
//! writers of many executions at once on many connections all succeed; the writers of one
//! execution stay one sequence (one answer wins a race, no write fails for a lost race); recovery
//! racing a live worker fails only the dead worker's execution, once; a listening connection the
//! server drops still hears the answer that wakes its worker.

use anyhow::{Context, Result, ensure};
use m3::testing::internals::postgres::database::Database;
use m3::*;
use m3_tests::backends::Db;
use m3_tests::fault_worker::Pending;
use m3_tests::postgres_server::PostgresServer;
use serde_json::json;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");

/// The first key of every execution's lock and the whole key of the database's write lock.
const LOCK_KEY: i64 = 1_295_207_753;

fn answer(street: &str) -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": street, "city": "Pune"})),
    )])
}

/// A store on `db` whose writes give up after 300 ms of waiting for a lock.
fn impatient(db: &Db) -> DatabaseStore {
    db.open(StoreOptions {
        busy_timeout_ms: 300,
        ..StoreOptions::default()
    })
}

/// A session of its own holding advisory locks until dropped.
struct Held {
    connection: m3::testing::internals::backend::idle::Lent<
        m3::testing::internals::postgres::connection::Connection,
    >,
    _database: Database,
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.connection.batch("SELECT pg_advisory_unlock_all()");
    }
}

/// A session of its own on `db` holding `lock` (SQL that takes a session-level advisory lock).
fn hold(db: &Db, lock: &str) -> Result<Held> {
    let database = Database::named(&db.name(), Duration::from_secs(5))?;
    let connection = database.connect()?;
    connection.batch(lock)?;
    Ok(Held {
        connection,
        _database: database,
    })
}

/// One round's whole lifecycle (create owned, submit, start delivery, delivered, resolve).
fn lifecycle(store: &DatabaseStore, round_id: &str, execution_id: &str) -> Result<()> {
    let record = store.create_round(&m3_tests::address_round_in(round_id, execution_id))?;
    let lease = record.lease.context("an owned round has a lease")?;
    store.submit_responses(round_id, &answer(round_id), round_id)?;
    store.start_delivery(round_id, &lease, round_id)?;
    store.mark_delivered(round_id, &lease)?;
    store.resolve(round_id, &lease)?;
    Ok(())
}

/// One execution's lock held by another session: a write in another execution goes through at
/// once, a write in that execution waits for it (and, past the busy timeout, is `storage_busy`
/// and writes nothing), and goes through once it is released. The control: the write lock held
/// exclusively (what `m3 migrate` holds) stops writes of every execution.
#[test]
fn a_write_to_one_execution_does_not_wait_for_another() -> Result<()> {
    let db = Db::postgres();
    let store = impatient(&db);
    let held = hold(
        &db,
        &format!("SELECT pg_advisory_lock({LOCK_KEY}, hashtext('exec-a'))"),
    )?;
    store
        .create_round(&m3_tests::address_round_in("b-1", "exec-b"))
        .context("a write in another execution than the locked one")?;
    let waited = store
        .create_round(&m3_tests::address_round_in("a-1", "exec-a"))
        .expect_err("a write in the locked execution waits past the busy timeout");
    ensure!(
        waited.code() == Some(ErrorCode::StorageBusy),
        "the write in the locked execution: {waited}"
    );
    ensure!(
        store.get_round("a-1")?.is_none(),
        "a busy write wrote nothing"
    );
    // Reads take no lock.
    ensure!(store.get_round("b-1")?.is_some());
    drop(held);
    store.create_round(&m3_tests::address_round_in("a-1", "exec-a"))?;

    // The control: the database's write lock held exclusively stops every execution's writes.
    let held = hold(&db, &format!("SELECT pg_advisory_lock({LOCK_KEY})"))?;
    let stopped = store
        .create_round(&m3_tests::address_round_in("c-1", "exec-c"))
        .expect_err("the write lock held exclusively stops every write");
    ensure!(
        stopped.code() == Some(ErrorCode::StorageBusy),
        "a write under the exclusive write lock: {stopped}"
    );
    drop(held);
    store.create_round(&m3_tests::address_round_in("c-1", "exec-c"))?;
    Ok(())
}

/// 8 threads, each with a store object (connections) of its own, run whole lifecycles of rounds
/// in an execution of their own, at once: every write succeeds (none busy, none a lost race),
/// every round ends resolved, and the database is intact.
#[test]
fn writers_of_many_executions_at_once_on_many_connections() -> Result<()> {
    const THREADS: usize = 8;
    const ROUNDS: usize = 12;
    let db = Arc::new(Db::postgres());
    let barrier = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (db, barrier) = (db.clone(), barrier.clone());
            thread::spawn(move || -> Result<()> {
                let store = db.store();
                store.get_round("warm-up")?;
                barrier.wait();
                for i in 0..ROUNDS {
                    lifecycle(&store, &format!("t{t}-{i}"), &format!("exec-{t}"))
                        .with_context(|| format!("thread {t}, round {i}"))?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a writer panicked")?;
    }
    let store = db.store();
    for t in 0..THREADS {
        let rounds = store.list_rounds(&RoundFilter {
            execution_id: Some(format!("exec-{t}")),
            ..RoundFilter::default()
        })?;
        ensure!(rounds.len() == ROUNDS, "exec-{t} holds {}", rounds.len());
        ensure!(
            rounds
                .iter()
                .all(|r| r.status == ManagedInputStatus::Resolved),
            "every round of exec-{t} is resolved"
        );
    }
    let integrity = m3_tests::backends::integrity(&db);
    ensure!(integrity == "ok", "{integrity}");
    Ok(())
}

/// The writers of one execution on many connections are one sequence: 8 threads answer one
/// round at once, each with an answer and key of its own; exactly one answer is stored and
/// acknowledged, every other is refused by the round's state (never `storage_busy`, never a lost
/// compare-and-set); meanwhile 8 more threads run lifecycles of other rounds of the same
/// execution, all of which succeed.
#[test]
fn one_execution_s_writers_on_many_connections_are_one_sequence() -> Result<()> {
    const THREADS: usize = 8;
    let db = Arc::new(Db::postgres());
    db.store()
        .create_round(&m3_tests::address_round_in("contested", "exec-one"))?;
    let barrier = Arc::new(Barrier::new(THREADS * 2));
    let answerers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (db, barrier) = (db.clone(), barrier.clone());
            thread::spawn(move || {
                let store = db.store();
                let _ = store.get_round("warm-up");
                barrier.wait();
                store
                    .submit_responses(
                        "contested",
                        &answer(&format!("{t} Main Street")),
                        &format!("key-{t}"),
                    )
                    .map(|_| t)
            })
        })
        .collect();
    let cyclers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (db, barrier) = (db.clone(), barrier.clone());
            thread::spawn(move || -> Result<()> {
                let store = db.store();
                store.get_round("warm-up")?;
                barrier.wait();
                for i in 0..4 {
                    lifecycle(&store, &format!("c{t}-{i}"), "exec-one")?;
                }
                Ok(())
            })
        })
        .collect();
    let mut winners = Vec::new();
    for answerer in answerers {
        match answerer.join().expect("an answerer panicked") {
            Ok(t) => winners.push(t),
            Err(e) => ensure!(
                !matches!(
                    e.code(),
                    Some(
                        ErrorCode::StorageBusy
                            | ErrorCode::StorageFailure
                            | ErrorCode::ConcurrentUpdate
                    )
                ),
                "a losing answer is refused by the round's state, not the store: {e}"
            ),
        }
    }
    for cycler in cyclers {
        cycler.join().expect("a cycler panicked")?;
    }
    let [winner] = winners[..] else {
        anyhow::bail!("exactly one answer wins, not {winners:?}");
    };
    let record = db.store().get_round("contested")?.context("the round")?;
    ensure!(record.status == ManagedInputStatus::ResponseValidated);
    ensure!(record.idempotency_key.as_deref() == Some(format!("key-{winner}").as_str()));
    ensure!(record.responses == Some(answer(&format!("{winner} Main Street"))));
    Ok(())
}

/// A worker process (`m3-test-fault-worker kit`) on `db` whose execution waits on a pending
/// round, with leases of `lease`: the process, the round's id and the execution's id.
fn waiting_worker(db: &Db, lease: Duration) -> Result<(std::process::Child, String, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_m3-test-fault-worker"))
        .args([
            "kit",
            &db.name(),
            &lease.as_millis().to_string(),
            SHIPPING_SERVER,
        ])
        .stdout(Stdio::piped())
        .spawn()?;
    let pending = Pending::read(&mut child)?;
    Ok((child, pending.round_id, pending.execution_id))
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Recovery racing a live worker: two worker processes wait on rounds with leases of 1 s; one is
/// killed; 4 kits on store objects of their own run recovery over and over for three lease
/// periods while the live worker keeps renewing. The dead worker's round and execution are failed
/// exactly once between them (`recovery_unavailable`); the live one's are never touched, and its
/// round, answered afterwards from another store, is delivered and its execution succeeds.
#[test]
fn recovery_racing_a_live_worker_fails_only_the_dead_one_once() -> Result<()> {
    let db = Db::postgres();
    let lease = Duration::from_secs(1);
    let (live, live_round, live_execution) = waiting_worker(&db, lease)?;
    let _live = Killed(live);
    let (mut dead, dead_round, dead_execution) = waiting_worker(&db, lease)?;
    dead.kill()?; // SIGKILL
    dead.wait()?;
    const RECOVERERS: usize = 4;
    let barrier = Arc::new(Barrier::new(RECOVERERS));
    let name = db.name();
    let recoverers: Vec<_> = (0..RECOVERERS)
        .map(|_| {
            let (name, barrier) = (name.clone(), barrier.clone());
            thread::spawn(move || -> Result<(u32, u32)> {
                let store: Arc<dyn ExecutionStore> = Arc::new(PostgresExecutionStore::open(
                    &name,
                    StoreOptions::default(),
                )?);
                let kit = McpTestKit::new(store, BTreeMap::<String, String>::new())?;
                barrier.wait();
                let until = Instant::now() + lease * 3;
                let mut total = (0, 0);
                while Instant::now() < until {
                    let (rounds, executions) = kit.recover()?;
                    total = (total.0 + rounds, total.1 + executions);
                }
                Ok(total)
            })
        })
        .collect();
    let mut recovered = (0, 0);
    for recoverer in recoverers {
        let (rounds, executions) = recoverer.join().expect("a recoverer panicked")?;
        recovered = (recovered.0 + rounds, recovered.1 + executions);
    }
    ensure!(
        recovered == (1, 1),
        "the dead worker's round and execution, once between the recoverers: {recovered:?}"
    );
    let store = db.store();
    let dead = store.get_round(&dead_round)?.context("the dead round")?;
    ensure!(dead.status == ManagedInputStatus::Failed);
    ensure!(dead.failure.map(|f| f.code) == Some(FailureCode::RecoveryUnavailable));
    let live = store.get_round(&live_round)?.context("the live round")?;
    ensure!(
        live.status == ManagedInputStatus::Pending,
        "the live worker's round is untouched: {:?}",
        live.status
    );

    let answering: Arc<dyn ExecutionStore> = Arc::new(PostgresExecutionStore::open(
        &name,
        StoreOptions::default(),
    )?);
    let kit = McpTestKit::new(answering, BTreeMap::<String, String>::new())?;
    ensure!(
        kit.execution(&dead_execution)?
            .snapshot()?
            .outcome
            .context("the dead execution ended")?
            .kind
            == OutcomeKind::Failed
    );
    let execution = kit.execution(&live_execution)?;
    execution.respond_elicitation(&live_round, answer("1 Main Street"), "live-answer")?;
    let until = Instant::now() + Duration::from_secs(60);
    let outcome = loop {
        if let Some(outcome) = execution.snapshot()?.outcome {
            break outcome;
        }
        ensure!(Instant::now() < until, "the live execution never ended");
        thread::sleep(Duration::from_millis(20));
    };
    ensure!(outcome.kind == OutcomeKind::Succeeded, "{outcome}");
    let live = store.get_round(&live_round)?.context("the live round")?;
    ensure!(live.status == ManagedInputStatus::Resolved);
    ensure!(live.delivery_attempts == 1);
    Ok(())
}

/// The connection a store object listens on is terminated by the server while its worker waits;
/// an answer committed from another store object afterwards still reaches the worker (the
/// listener, opened again, wakes every waiter of its process), and the execution succeeds.
#[test]
fn a_listener_the_server_dropped_still_hears_the_answer() -> Result<()> {
    let db = Db::postgres();
    let server = PostgresServer::shared();
    let store = Arc::new(PostgresExecutionStore::open(
        &db.name(),
        StoreOptions::default(),
    )?);
    let kit = McpTestKit::new(store, BTreeMap::<String, String>::new())?;
    let agent = kit
        .agents([AgentSpec::scripted(Script::call(
            "shipping:book_shipment",
            json!({"item": "book"}),
        ))])?
        .remove(0);
    let handle = agent.submit(
        Submission::new(
            "Book a shipment.",
            StdioServer::new("shipping", SHIPPING_SERVER),
        )
        .tools(["shipping:book_shipment"])
        .human_input(HumanInput::Managed),
    )?;
    let pending = m3_tests::harnesses::wait_pending(&handle)?;
    let m3_tests::backends::Db::Postgres(database) = &db else {
        unreachable!("a PostgreSQL database");
    };
    let listeners = || {
        server
            .psql(
                &database.name,
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
                 AND application_name = 'm3' AND query LIKE 'LISTEN%'",
            )
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let until = Instant::now() + Duration::from_secs(20);
    let listening = loop {
        let found = listeners();
        if !found.is_empty() {
            break found;
        }
        ensure!(Instant::now() < until, "the waiting worker listens");
        thread::sleep(Duration::from_millis(20));
    };
    for pid in &listening {
        server.psql(
            &database.name,
            &format!("SELECT pg_terminate_backend({pid})"),
        );
    }
    let answering: Arc<dyn ExecutionStore> = Arc::new(PostgresExecutionStore::open(
        &db.name(),
        StoreOptions::default(),
    )?);
    McpTestKit::new(answering, BTreeMap::<String, String>::new())?
        .execution(handle.execution_id())?
        .respond_elicitation(&pending.round_id, answer("1 Main Street"), "after-the-drop")?;
    let result = handle.result(Some(Duration::from_secs(60)))?;
    ensure!(result.succeeded(), "{}", result.outcome);
    Ok(())
}

//! Races and faults where many machines share one database (issue 21): worker processes and
//! answering threads contending for the same rounds (on both backends), and, on PostgreSQL, a
//! connection the server terminates in the middle of a transaction and the server restarted
//! while a round waits. Nothing is lost, nothing is delivered twice, and every round ends
//! resolved or visibly failed.

use anyhow::{Context, Result, bail, ensure};
use m3::*;
use m3_tests::backends::{Db, open_named};
use m3_tests::contention::{CLAIMED, DELIVERED, ROUNDS, contended_options, round_id};
use m3_tests::postgres_server::PostgresServer;
use m3_tests::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");

/// Worker processes contending for the rounds.
const WORKERS: usize = 8;
/// Answering threads, each answering every round with an answer of its own.
const ANSWERERS: usize = 32;
/// The helper binary whose `contend` mode is one contending worker process.
const HELPER: &str = env!("CARGO_BIN_EXE_m3-test-helper");

/// The answer of answerer `t`: a street of its own, so the stored answer names its author.
fn answer(t: usize) -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": format!("{t} Main Street"), "city": "Pune"})),
    )])
}

fn code(e: &ManagedInputError) -> Option<ErrorCode> {
    e.code()
}

/// 8 worker processes and 32 answering threads on one database.
fn contend(db: &Db) -> Result<()> {
    let setup = db.store();
    for i in 0..ROUNDS {
        // Unowned: the workers race to claim each.
        setup.create_round(&NewRound {
            owner: None,
            ..address_round(&round_id(i))
        })?;
    }
    let children: Vec<_> = (0..WORKERS)
        .map(|w| {
            Command::new(HELPER)
                .args(["contend", &db.name(), &format!("worker-{w}")])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .context("spawning a worker")
        })
        .collect::<Result<_>>()?;

    let barrier = Arc::new(Barrier::new(ANSWERERS));
    let answerers: Vec<_> = (0..ANSWERERS)
        .map(|t| {
            let (name, barrier) = (db.name(), barrier.clone());
            thread::spawn(move || -> Result<Vec<(String, usize)>> {
                let store = open_named(&name, contended_options());
                barrier.wait();
                let mut acknowledged = Vec::new();
                for i in (0..ROUNDS).map(|i| (i + t) % ROUNDS) {
                    let id = round_id(i);
                    match store.submit_responses(&id, &answer(t), &format!("answer-{t}")) {
                        Ok(_) => acknowledged.push((id, t)),
                        Err(e) if matches!(e, ManagedInputError::Storage(_)) => {
                            bail!("{id}: a storage error: {e}")
                        }
                        // Another answer won: a state error or a conflict, never a second
                        // acknowledgement.
                        Err(_) => {}
                    }
                }
                Ok(acknowledged)
            })
        })
        .collect();
    let mut winners: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for answerer in answerers {
        for (id, t) in answerer.join().expect("an answerer panicked")? {
            winners.entry(id).or_default().push(t);
        }
    }

    let mut claimed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut delivered: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for child in children {
        let output = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        ensure!(
            output.status.success(),
            "a worker failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        for line in stdout.lines() {
            for (mark, into) in [(CLAIMED, &mut claimed), (DELIVERED, &mut delivered)] {
                if let Some(at) = line.find(mark) {
                    let mut words = line[at + mark.len()..].split_whitespace();
                    let (id, worker) = (words.next(), words.next());
                    into.entry(id.unwrap_or_default().to_string())
                        .or_default()
                        .push(worker.unwrap_or_default().to_string());
                }
            }
        }
    }
    for i in 0..ROUNDS {
        let id = round_id(i);
        let record = setup.get_round(&id)?.context("a round disappeared")?;
        ensure!(
            claimed.get(&id).map(Vec::len) == Some(1),
            "{id}: claimed by {:?}",
            claimed.get(&id)
        );
        ensure!(
            delivered.get(&id) == claimed.get(&id),
            "{id}: delivered by {:?}",
            delivered.get(&id)
        );
        let winner = match winners.get(&id).map(Vec::as_slice) {
            Some([t]) => *t,
            other => bail!("{id}: acknowledged answers {other:?}"),
        };
        ensure!(record.status == ManagedInputStatus::Resolved, "{id}");
        ensure!(record.delivery_attempts == 1, "{id}: delivered twice");
        ensure!(
            record.responses == Some(answer(winner)),
            "{id}: not the winner's answer"
        );
        ensure!(
            record.idempotency_key.as_deref() == Some(format!("answer-{winner}").as_str()),
            "{id}"
        );
    }
    Ok(())
}

m3_tests::on_both_backends! {
    fn eight_worker_processes_and_thirty_two_answerers_agree_on_every_round(db) {
        contend(db).unwrap();
    }
}

/// The server's backends of this test's database that m3 opened, in `state` (`idle`,
/// `active`), or waiting on a lock when `state` is `lock`.
fn m3_backends(server: &PostgresServer, database: &str, state: &str) -> Vec<String> {
    let condition = match state {
        "lock" => "wait_event_type = 'Lock'".to_string(),
        other => format!("state = '{other}'"),
    };
    server
        .psql(
            database,
            &format!(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'm3' \
                 AND datname = current_database() AND {condition}"
            ),
        )
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// A write whose connection the server terminates while it waits inside its transaction (for
/// the write lock another session holds) fails `storage_failure` and writes nothing; the retry
/// succeeds. Idle connections the server terminated are never lent to the next operation.
#[test]
fn a_connection_terminated_mid_transaction_writes_nothing_and_the_retry_succeeds() {
    let server = PostgresServer::shared();
    let database = server.fresh_database();
    let db = Db::Postgres(database.clone());
    let store = db.store();
    create(&store, &address_round("r1"));

    // Another session holds the database's write lock.
    let holder = Command::new("psql")
        .args([
            "-h",
            &server.socket_dir().display().to_string(),
            "-U",
            server.user(),
            "-d",
            &database.name,
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            "SELECT pg_advisory_lock(1295207753)",
            "-c",
            "SELECT pg_sleep(60)",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql holds the write lock");
    let mut holder = Guard(holder);
    let until = Instant::now() + Duration::from_secs(30);
    while server
        .psql(
            &database.name,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .trim()
        != "1"
    {
        if let Some(status) = holder.0.try_wait().unwrap() {
            panic!("the lock holder ended: {status}");
        }
        assert!(Instant::now() < until, "the holder never took the lock");
        thread::sleep(Duration::from_millis(20));
    }

    let name = db.name();
    let writer = thread::spawn(move || {
        open_named(&name, StoreOptions::default()).submit_responses("r1", &answer(1), "answer-1")
    });
    // Within the busy timeout (5 s) from when it began waiting; opening the store comes first.
    let until = Instant::now() + Duration::from_secs(20);
    let waiting = loop {
        let waiting = m3_backends(server, &database.name, "lock");
        if !waiting.is_empty() {
            break waiting;
        }
        assert!(
            Instant::now() < until,
            "the write never waited for the lock: {}",
            server.psql(
                &database.name,
                "SELECT pid, application_name, state, wait_event_type, wait_event, query \
                 FROM pg_stat_activity"
            )
        );
        thread::sleep(Duration::from_millis(10));
    };
    for pid in &waiting {
        server.psql(
            &database.name,
            &format!("SELECT pg_terminate_backend({pid})"),
        );
    }
    let refused = writer.join().unwrap().unwrap_err();
    assert_eq!(code(&refused), Some(ErrorCode::StorageFailure), "{refused}");
    let record = store.get_round("r1").unwrap().unwrap();
    assert_eq!(record.status, ManagedInputStatus::Pending);
    assert!(record.idempotency_key.is_none() && record.responses.is_none());

    // The holder's session ends (its backend does not notice its client leave while it sleeps).
    server.psql(
        &database.name,
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    );
    holder.0.kill().unwrap();
    holder.0.wait().unwrap();

    // The store's idle connections, terminated by the server while they wait: none is lent.
    store.get_round("r1").unwrap();
    let idle = m3_backends(server, &database.name, "idle");
    assert!(!idle.is_empty(), "the store keeps an idle connection");
    for pid in &idle {
        server.psql(
            &database.name,
            &format!("SELECT pg_terminate_backend({pid})"),
        );
    }
    thread::sleep(Duration::from_millis(100));
    let stored = store
        .submit_responses("r1", &answer(1), "answer-1")
        .unwrap();
    assert_eq!(stored.status, ManagedInputStatus::ResponseValidated);
    assert_eq!(stored.responses, Some(answer(1)));
}

/// Kills the child when dropped (a test that fails early leaves no lock holder behind).
struct Guard(std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// PostgreSQL restarted (a fast shutdown, every connection cut) while an execution's round
/// waits: the worker survives it (its connections are opened again, its leases outlive the
/// restart), the answer given once the server is back is acknowledged, delivered exactly once
/// and the execution succeeds with it; the database is intact afterwards.
#[test]
fn postgresql_restarted_while_a_round_waits_loses_nothing_and_doubles_nothing() {
    // A server of this test's own: a restart would disturb the other tests' shared one.
    let server = PostgresServer::start();
    let database = server.fresh_database();
    // Every line the server read, so that what reached it is counted, not inferred.
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("transcript.jsonl");
    let store =
        Arc::new(PostgresExecutionStore::open(&database.url, StoreOptions::default()).unwrap());
    let kit = McpTestKit::with_options(
        store.clone(),
        BTreeMap::<String, String>::new(),
        KitOptions {
            lease_ttl: Duration::from_secs(15),
            lease_renew: Duration::from_secs(5),
        },
    )
    .unwrap();
    let agent = kit
        .agents([AgentSpec::scripted(Script::call(
            "shipping:book_shipment",
            json!({"item": "book", "quantity": 1}),
        ))])
        .unwrap()
        .remove(0);
    let handle = agent
        .submit(
            Submission::new(
                "Book a shipment.",
                StdioServer::new("shipping", SHIPPING_SERVER)
                    .args(["--transcript", transcript.to_str().unwrap()]),
            )
            .tools(["shipping:book_shipment"])
            .human_input(HumanInput::Managed),
        )
        .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    let pending = loop {
        if let Some(pending) = handle.pending_elicitation().unwrap() {
            break pending;
        }
        assert!(Instant::now() < until, "no pending round in time");
        thread::sleep(Duration::from_millis(20));
    };

    server.restart();

    // Answered from another store object, as another machine would, once the server is back.
    let answerer = PostgresManagedInputStore::open(&database.url, StoreOptions::default())
        .expect("the server is back");
    let mut address = BTreeMap::new();
    address.insert(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    );
    let until = Instant::now() + Duration::from_secs(30);
    let answered = loop {
        match answerer.submit_responses(&pending.round_id, &address, "after-restart") {
            Ok(record) => break Ok(record),
            Err(ManagedInputError::Storage(_)) if Instant::now() < until => {
                thread::sleep(Duration::from_millis(100));
            }
            Err(e) => break Err(e),
        }
    };
    let answered = answered.expect("the answer is acknowledged once the server is back");
    assert_eq!(answered.status, ManagedInputStatus::ResponseValidated);
    let result = handle.result(Some(Duration::from_secs(90))).unwrap();
    let round = answerer.get_round(&pending.round_id).unwrap().unwrap();
    assert_eq!(
        result.outcome.kind,
        OutcomeKind::Succeeded,
        "the worker survives the restart: {}",
        result.outcome
    );
    assert_eq!(round.status, ManagedInputStatus::Resolved, "{round:?}");
    assert_eq!(round.delivery_attempts, 1, "delivered exactly once");
    let received = std::fs::read_to_string(&transcript).unwrap();
    assert_eq!(
        received
            .lines()
            .filter(|line| line.contains("1 Main Street"))
            .count(),
        1,
        "the server received the answer exactly once"
    );
    assert_eq!(round.responses, Some(address));
    let output = result.outcome.tool_results[0].text();
    assert!(
        output.contains("1 Main Street"),
        "the answer reached the server: {output}"
    );
    assert_eq!(
        m3_tests::backends::integrity(&Db::Postgres(database.clone())),
        "ok",
        "after the restart"
    );
    println!(
        "after the restart: answer acknowledged, execution {}",
        result.outcome
    );
}

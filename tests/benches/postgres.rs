//! The store on PostgreSQL: lifecycles per second with 1, 4 and 16 worker processes against the
//! raw commit limit of the same server in the same run, and the answer-to-server latency of
//! executions answered from another store object (another machine's, as far as the store can
//! tell: the worker hears the commit through `LISTEN`).
//!
//! A throwaway server is started for the run (`m3_tests::postgres_server`: `initdb` into a
//! temporary directory, a Unix socket, `fsync` on). Raw commits use the store's own connection
//! code (`postgres/connection.rs`): a connection of the store object's, `BEGIN`, the database's
//! write lock (`pg_advisory_xact_lock`, as every store write takes it), a one-row `UPDATE`,
//! `COMMIT`, from 1 and from 16 threads. A lifecycle is the round's five writes through
//! `PostgresManagedInputStore` (create owned, submit, start delivery, delivered, resolve); each
//! worker process (this binary again, `M3_BENCH_ROLE=pg-worker`) runs them for the window and
//! reports how many it finished. The latency: executions of the scripted harness on the bundled
//! shipping server, one at a time, each answered through a second store's
//! `Executions::respond`; `delivered_at - response_validated_at` of each round.
//!
//! `cargo bench -p m3-tests --bench postgres` (part of `just bench`) writes
//! `target/bench/postgres.json`; without `--bench` (as `cargo test` runs it) or with
//! `--smoke` it runs a short smoke pass and writes no JSON. Nothing here fails on a time.

use m3::testing::internals::postgres::connection::Param;
use m3::testing::internals::postgres::database::Database;
use m3::{
    AgentSpec, ElicitationResponse, ExecutionStore, HumanInput, KitOptions, ManagedInputStore,
    McpTestKit, NewRound, OwnerClaim, PostgresExecutionStore, PostgresManagedInputStore, Script,
    StdioServer, StoreOptions, Submission,
};
use m3_bench::stats::{Stats, fmt_rate, stats_json};
use m3_bench::{BenchResult, RunArgs, Table, write_report};
use m3_tests::postgres_server::PostgresServer;
use serde_json::json;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const ROLE_VAR: &str = "M3_BENCH_ROLE";
const URL_VAR: &str = "M3_BENCH_URL";
const WORKER_VAR: &str = "M3_BENCH_WORKER";
const WINDOW_VAR: &str = "M3_BENCH_WINDOW_MS";
const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");
/// The database's write lock (`postgres/transaction.rs`, `WRITE_LOCK`).
const WRITE_LOCK: i64 = 0x4d33_4d49;

fn main() -> BenchResult<()> {
    if std::env::var(ROLE_VAR).as_deref() == Ok("pg-worker") {
        return worker();
    }
    let run = RunArgs::from_env();
    let window = if run.full {
        Duration::from_secs(8)
    } else {
        Duration::from_millis(800)
    };
    let executions = if run.full { 40 } else { 3 };
    let server = PostgresServer::start();
    let version = server
        .psql("postgres", "SHOW server_version")
        .trim()
        .to_string();
    println!("PostgreSQL {version}, a Unix socket on this machine, fsync on; window {window:?}");

    let raw_1 = raw_commits(&server, 1, window)?;
    let raw_16 = raw_commits(&server, 16, window)?;
    let mut table = Table::new(
        "raw commits (the store's connection code, the write lock, a one-row UPDATE)",
        &["clients", "commits/s", "limit (commits/s / 5)"],
    );
    for (clients, rate) in [(1, raw_1), (16, raw_16)] {
        table.row(vec![
            clients.to_string(),
            fmt_rate(rate),
            fmt_rate(rate / 5.0),
        ]);
    }
    table.print();

    let limit = raw_1.max(raw_16) / 5.0;
    let mut lifecycles = Vec::new();
    let mut table = Table::new(
        "lifecycles (5 writes each) from worker processes",
        &["processes", "lifecycles/s", "fraction of the limit"],
    );
    for processes in [1usize, 4, 16] {
        let rate = lifecycles_per_second(&server, processes, window)?;
        table.row(vec![
            processes.to_string(),
            fmt_rate(rate),
            format!("{:.2}", rate / limit),
        ]);
        lifecycles.push(json!({
            "processes": processes,
            "lifecycles_per_s": rate,
            "fraction_of_limit": rate / limit,
        }));
    }
    table.print();

    let latencies = answer_to_server(&server, executions)?;
    let stats = Stats::of(&latencies);
    let mut table = Table::new(
        "answer committed by another store -> delivered to the server",
        &["rounds", "p50", "p99", "max"],
    );
    if let Some(s) = &stats {
        table.row(vec![
            s.n.to_string(),
            format!("{:.2} ms", s.p50),
            format!("{:.2} ms", s.p99),
            format!("{:.2} ms", s.max),
        ]);
    }
    table.print();

    if run.full {
        let report = json!({
            "benchmark": "postgres",
            "server_version": version,
            "window_s": window.as_secs_f64(),
            "raw_commits_per_s": {"clients_1": raw_1, "clients_16": raw_16},
            "limit_lifecycles_per_s": limit,
            "lifecycles": lifecycles,
            "answer_to_server_ms": stats_json(stats, "ms"),
            "answer_to_server_definition": "delivered_at - response_validated_at of each round",
        });
        write_report("postgres", &report)?;
    }
    server.stop();
    Ok(())
}

/// Commits per second of `clients` threads, each committing one-row updates of a row of its own
/// under the write lock, for `window`.
fn raw_commits(server: &PostgresServer, clients: usize, window: Duration) -> BenchResult<f64> {
    let url = server.fresh_database().url;
    let db = Arc::new(Database::open(&url, Duration::from_secs(5))?);
    {
        let conn = db.connect()?;
        conn.batch("CREATE TABLE bench_raw (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)")?;
        for id in 0..clients as i64 {
            conn.execute(
                "INSERT INTO bench_raw VALUES ($1, 0)",
                vec![Box::new(id) as Param],
            )?;
        }
    }
    let barrier = Arc::new(Barrier::new(clients));
    let threads: Vec<_> = (0..clients as i64)
        .map(|id| {
            let (db, barrier) = (db.clone(), barrier.clone());
            std::thread::spawn(move || -> Result<u64, String> {
                barrier.wait();
                let until = Instant::now() + window;
                let mut commits = 0;
                while Instant::now() < until {
                    let conn = db.connect().map_err(|e| e.to_string())?;
                    conn.batch(&format!(
                        "BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"
                    ))
                    .map_err(|e| e.to_string())?;
                    conn.execute(
                        "UPDATE bench_raw SET n = n + 1 WHERE id = $1",
                        vec![Box::new(id) as Param],
                    )
                    .map_err(|e| e.to_string())?;
                    conn.batch("COMMIT").map_err(|e| e.to_string())?;
                    commits += 1;
                }
                Ok(commits)
            })
        })
        .collect();
    let mut total = 0;
    for thread in threads {
        total += thread.join().map_err(|_| "a client panicked")??;
    }
    Ok(total as f64 / window.as_secs_f64())
}

/// Lifecycles per second of `processes` worker processes on one database.
fn lifecycles_per_second(
    server: &PostgresServer,
    processes: usize,
    window: Duration,
) -> BenchResult<f64> {
    let url = server.fresh_database().url;
    // The tables exist before the workers arrive.
    drop(PostgresManagedInputStore::open(
        &url,
        StoreOptions::default(),
    )?);
    let exe = std::env::current_exe()?;
    let children: Vec<_> = (0..processes)
        .map(|w| {
            Command::new(&exe)
                .env(ROLE_VAR, "pg-worker")
                .env(URL_VAR, &url)
                .env(WORKER_VAR, format!("worker-{w}"))
                .env(WINDOW_VAR, window.as_millis().to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut total = 0u64;
    for child in children {
        let output = child.wait_with_output()?;
        if !output.status.success() {
            return Err(format!("a worker failed: {}", output.status).into());
        }
        let text = String::from_utf8_lossy(&output.stdout);
        total += text
            .lines()
            .find_map(|l| l.strip_prefix("lifecycles "))
            .ok_or("a worker reported nothing")?
            .trim()
            .parse::<u64>()?;
    }
    Ok(total as f64 / window.as_secs_f64())
}

/// One worker process: waits until every worker has opened its store (a start one second
/// after it was spawned), then runs lifecycles for the window; prints how many it finished.
fn worker() -> BenchResult<()> {
    let url = std::env::var(URL_VAR)?;
    let worker = std::env::var(WORKER_VAR)?;
    let window = Duration::from_millis(std::env::var(WINDOW_VAR)?.parse()?);
    let spawned = Instant::now();
    let store = PostgresManagedInputStore::open(&url, StoreOptions::default())?;
    // Warm the instance and the connection.
    store.get_round("warm-up")?;
    let start = spawned + Duration::from_secs(1);
    std::thread::sleep(start.saturating_duration_since(Instant::now()));
    let until = Instant::now() + window;
    let mut done = 0u64;
    let answer = BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
    )]);
    while Instant::now() < until {
        let id = format!("{worker}-{done}");
        let record = store.create_round(&NewRound {
            owner: Some(OwnerClaim {
                owner_id: worker.clone(),
                lease_ttl: Duration::from_secs(60),
            }),
            ..m3_tests::address_round(&id)
        })?;
        let lease = record.lease.ok_or("an owned round has a lease")?;
        store.submit_responses(&id, &answer, &id)?;
        store.start_delivery(&id, &lease, &id)?;
        store.mark_delivered(&id, &lease)?;
        store.resolve(&id, &lease)?;
        done += 1;
    }
    println!("lifecycles {done}");
    Ok(())
}

/// `executions` executions run one after the other, each answered through a second store
/// object: the answer-to-server latency of each, in ms.
fn answer_to_server(server: &PostgresServer, executions: usize) -> BenchResult<Vec<f64>> {
    let url = server.fresh_database().url;
    let store = Arc::new(PostgresExecutionStore::open(&url, StoreOptions::default())?);
    let kit = McpTestKit::with_options(
        store.clone(),
        BTreeMap::<String, String>::new(),
        KitOptions::default(),
    )?;
    let answering = PostgresExecutionStore::open(&url, StoreOptions::default())?;
    let answerer = answering.executions()?;
    let managed = answering
        .managed_input_store()?
        .ok_or("a persistent store has managed input")?;
    let agent = kit
        .agents([AgentSpec::scripted(Script::call(
            "shipping:book_shipment",
            json!({"item": "book", "quantity": 1}),
        ))])?
        .remove(0);
    let answer = r#"{"shipping_address":{"action":"accept","content":{"street":"1 Main Street","city":"Pune"}}}"#;
    let mut latencies = Vec::new();
    for _ in 0..executions {
        let handle = agent.submit(
            Submission::new(
                "Book a shipment.",
                StdioServer::new("shipping", SHIPPING_SERVER),
            )
            .tools(["shipping:book_shipment"])
            .human_input(HumanInput::Managed),
        )?;
        let until = Instant::now() + Duration::from_secs(60);
        let pending = loop {
            if let Some(pending) = handle.pending_elicitation()? {
                break pending;
            }
            if Instant::now() > until {
                return Err("no pending round in time".into());
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        answerer.respond(
            handle.execution_id(),
            &pending.round_id,
            answer,
            &pending.round_id,
        )?;
        let result = handle.result(Some(Duration::from_secs(60)))?;
        if !result.succeeded() {
            return Err(format!("an execution ended {}", result.outcome).into());
        }
        let record = managed
            .get_round(&pending.round_id)?
            .ok_or("the round is gone")?;
        let t = &record.timestamps;
        if let (Some(validated), Some(delivered)) = (t.response_validated_at, t.delivered_at) {
            latencies.push((delivered - validated).num_microseconds().unwrap_or(0) as f64 / 1e3);
        }
    }
    Ok(latencies)
}

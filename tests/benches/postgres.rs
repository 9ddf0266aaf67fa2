//! The store on PostgreSQL: lifecycles per second with 1, 4 and 16 worker processes against the
//! raw commit limit of the same server in the same run, and the answer-to-server latency of
//! executions answered from another store object (another machine's, as far as the store can
//! tell: the worker hears the commit through `LISTEN`).
//!
//! A throwaway server is started for the run (`m3_tests::postgres_server`: `initdb` into a
//! temporary directory, a Unix socket, `fsync` on). Raw commits use the store's own connection
//! code (`store/postgres/connection.rs`): a connection of the store object's, `BEGIN`, a one-row
//! `UPDATE` of the client's own row, `COMMIT`, from 1 and from 16 threads, holding the one write
//! lock every store write took before decision 0077 (`pg_advisory_xact_lock`), nothing (the
//! server's own limit, which the lifecycles are held to), or nothing but a `NOTIFY` in the
//! commit. A lifecycle is the round's five writes through `PostgresManagedInputStore` (create
//! owned, submit, start delivery, delivered, resolve); each worker process (this binary again,
//! `M3_BENCH_ROLE=pg-worker`) runs them for the window, in an execution of its own (one worker
//! drives one execution) or, in the last row, all in one shared execution, and reports how many
//! it finished and the CPU time it used; the server's CPU time is read from `/proc`. The latency: executions of the scripted harness on the bundled
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
const EXECUTION_VAR: &str = "M3_BENCH_EXECUTION";
const SHIPPING_SERVER: &str = env!("CARGO_BIN_EXE_m3-test-shipping-server");
/// The database's write lock (`store/postgres/transaction.rs`, `WRITE_LOCK`).
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

    let mut raw = Vec::new();
    let mut table = Table::new(
        "raw commits (the store's connection code, a one-row UPDATE of the client's own row)",
        &["lock", "clients", "commits/s", "limit (commits/s / 5)"],
    );
    for (lock, clients) in [
        (RawLock::Global, 1),
        (RawLock::Global, 16),
        (RawLock::None, 1),
        (RawLock::None, 16),
        (RawLock::NoneNotify, 16),
    ] {
        let rate = raw_commits(&server, clients, lock, window)?;
        table.row(vec![
            lock.name().to_string(),
            clients.to_string(),
            fmt_rate(rate),
            fmt_rate(rate / 5.0),
        ]);
        raw.push(json!({"lock": lock.name(), "clients": clients, "commits_per_s": rate}));
    }
    table.print();
    let unlocked = |clients| {
        raw.iter()
            .find(|r| r["lock"] == RawLock::None.name() && r["clients"] == clients)
            .and_then(|r| r["commits_per_s"].as_f64())
            .unwrap_or(f64::NAN)
    };
    let limit = unlocked(1).max(unlocked(16)) / 5.0;

    let mut lifecycles = Vec::new();
    let mut table = Table::new(
        "lifecycles (5 writes each) from worker processes",
        &[
            "processes",
            "executions",
            "lifecycles/s",
            "x one worker",
            "fraction of the unlocked limit",
            "client CPU / lifecycle",
            "server CPU / lifecycle",
        ],
    );
    let mut one_worker = f64::NAN;
    for (processes, shared) in [(1usize, false), (4, false), (16, false), (16, true)] {
        let run = lifecycles_per_second(&server, processes, shared, window)?;
        if processes == 1 {
            one_worker = run.rate;
        }
        table.row(vec![
            processes.to_string(),
            if shared { "one shared" } else { "one each" }.to_string(),
            fmt_rate(run.rate),
            format!("{:.2}", run.rate / one_worker),
            format!("{:.2}", run.rate / limit),
            format!("{:.0} µs", run.client_cpu_us),
            format!("{:.0} µs", run.server_cpu_us),
        ]);
        lifecycles.push(json!({
            "processes": processes,
            "executions": if shared { "one shared" } else { "one each" },
            "lifecycles_per_s": run.rate,
            "times_one_worker": run.rate / one_worker,
            "fraction_of_unlocked_limit": run.rate / limit,
            "client_cpu_us_per_lifecycle": run.client_cpu_us,
            "server_cpu_us_per_lifecycle": run.server_cpu_us,
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
            "raw_commits": raw,
            "unlocked_limit_lifecycles_per_s": limit,
            "lifecycles": lifecycles,
            "answer_to_server_ms": stats_json(stats, "ms"),
            "answer_to_server_definition": "delivered_at - response_validated_at of each round",
        });
        write_report("postgres", &report)?;
    }
    server.stop();
    Ok(())
}

/// What a raw commit holds besides its row.
#[derive(Clone, Copy)]
enum RawLock {
    /// The write lock taken exclusively, as every store write took it before executions locked
    /// their own (decision 0009).
    Global,
    /// No lock: the server's own limit for one-row commits.
    None,
    /// No lock, but `NOTIFY` inside the transaction (PostgreSQL serialises notifying commits).
    NoneNotify,
}

impl RawLock {
    fn name(self) -> &'static str {
        match self {
            Self::Global => "write lock",
            Self::None => "none",
            Self::NoneNotify => "none, NOTIFY in the commit",
        }
    }
}

/// Commits per second of `clients` threads, each committing one-row updates of a row of its own
/// (holding `lock`), for `window`.
fn raw_commits(
    server: &PostgresServer,
    clients: usize,
    lock: RawLock,
    window: Duration,
) -> BenchResult<f64> {
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
                    let (begin, commit) = match lock {
                        RawLock::Global => (
                            format!("BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"),
                            "COMMIT",
                        ),
                        RawLock::None => ("BEGIN".to_string(), "COMMIT"),
                        RawLock::NoneNotify => ("BEGIN".to_string(), "NOTIFY bench; COMMIT"),
                    };
                    conn.batch(&begin).map_err(|e| e.to_string())?;
                    conn.execute(
                        "UPDATE bench_raw SET n = n + 1 WHERE id = $1",
                        vec![Box::new(id) as Param],
                    )
                    .map_err(|e| e.to_string())?;
                    conn.batch(commit).map_err(|e| e.to_string())?;
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

/// What a lifecycle run measured.
struct LifecycleRun {
    rate: f64,
    /// The workers' CPU time (user and system) per lifecycle.
    client_cpu_us: f64,
    /// The server processes' CPU time per lifecycle.
    server_cpu_us: f64,
}

/// Lifecycles per second of `processes` worker processes on one database, each writing rounds
/// of an execution of its own or all of them of one `shared` execution.
fn lifecycles_per_second(
    server: &PostgresServer,
    processes: usize,
    shared: bool,
    window: Duration,
) -> BenchResult<LifecycleRun> {
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
                .env(
                    EXECUTION_VAR,
                    if shared {
                        "exec-shared".to_string()
                    } else {
                        format!("exec-{w}")
                    },
                )
                .env(WINDOW_VAR, window.as_millis().to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    // The server's CPU is counted over the workers' start-up too; it is small next to a window
    // of lifecycles, and over-counts rather than under-counts.
    let server_before = server_cpu_us(server.postmaster_pid());
    let mut total = 0u64;
    let mut client_cpu_us = 0.0;
    for child in children {
        let output = child.wait_with_output()?;
        if !output.status.success() {
            return Err(format!("a worker failed: {}", output.status).into());
        }
        let text = String::from_utf8_lossy(&output.stdout);
        let field = |name: &str| -> BenchResult<f64> {
            Ok(text
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .ok_or("a worker reported nothing")?
                .trim()
                .parse::<f64>()?)
        };
        total += field("lifecycles ")? as u64;
        client_cpu_us += field("cpu_us ")?;
    }
    let server_used = server_cpu_us(server.postmaster_pid()) - server_before;
    let lifecycles = total.max(1) as f64;
    Ok(LifecycleRun {
        rate: total as f64 / window.as_secs_f64(),
        client_cpu_us: client_cpu_us / lifecycles,
        server_cpu_us: server_used / lifecycles,
    })
}

/// The CPU time (user and system) used so far by the PostgreSQL server: the postmaster and its
/// children, from `/proc`, in µs. Children that exited are counted in the postmaster's
/// `cutime`/`cstime` once it reaped them.
fn server_cpu_us(postmaster: u32) -> f64 {
    let ticks = |stat: &str, from: usize, to: usize| -> f64 {
        // Fields after the command's closing parenthesis; utime is field 14 (index 11 here).
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        (from..=to)
            .filter_map(|i| fields.get(i).and_then(|f| f.parse::<f64>().ok()))
            .sum()
    };
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut total = 0.0;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    for entry in entries.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let parent = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        let pid = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok());
        if pid == Some(postmaster) {
            // utime, stime, cutime, cstime.
            total += ticks(&stat, 11, 14);
        } else if parent == Some(postmaster) {
            total += ticks(&stat, 11, 12);
        }
    }
    total / hz * 1e6
}

/// One worker process: waits until every worker has opened its store (a start one second
/// after it was spawned), then runs lifecycles for the window; prints how many it finished.
fn worker() -> BenchResult<()> {
    let url = std::env::var(URL_VAR)?;
    let worker = std::env::var(WORKER_VAR)?;
    let execution = std::env::var(EXECUTION_VAR)?;
    let window = Duration::from_millis(std::env::var(WINDOW_VAR)?.parse()?);
    let spawned = Instant::now();
    let store = PostgresManagedInputStore::open(&url, StoreOptions::default())?;
    // Warm the instance and the connection.
    store.get_round("warm-up")?;
    let start = spawned + Duration::from_secs(1);
    std::thread::sleep(start.saturating_duration_since(Instant::now()));
    let cpu_before = cpu_us();
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
            ..m3_tests::address_round_in(&id, &execution)
        })?;
        let lease = record.lease.ok_or("an owned round has a lease")?;
        store.submit_responses(&id, &answer, &id)?;
        store.start_delivery(&id, &lease, &id)?;
        store.mark_delivered(&id, &lease)?;
        store.resolve(&id, &lease)?;
        done += 1;
    }
    println!("lifecycles {done}");
    println!("cpu_us {}", cpu_us() - cpu_before);
    Ok(())
}

/// This process's CPU time so far (user and system), in µs.
fn cpu_us() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(usage.ru_utime) + us(usage.ru_stime)
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

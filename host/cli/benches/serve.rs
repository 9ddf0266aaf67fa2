//! `m3 serve` under load (`cargo bench -p m3-cli --bench serve`; `just bench-serve`), against
//! the real binary on a SQLite file, the figures reported, never asserted:
//!
//! 1. **Answers.** This process parks executions at a round (the kit's workers, the bundled
//!    example server over stdio, modern era), then 50 client threads, each with its own HTTP
//!    connection, answer them all through `POST /api/rounds/{id}/responses` of one `m3 serve`
//!    process: rounds answered per second (first call sent to last answer received), the
//!    call's latency (p50/p95/max), and the time from sending the call to the round's
//!    `delivered_at` in the store (the worker here noticed the other process's commit and wrote
//!    the answer to the server).
//! 2. **Fan-out.** 200 subscribers hold `/api/events/stream` open; changes are made one at a
//!    time, a quarter second apart, of two kinds: a round created by this process (another
//!    process to the server: its watcher notices the commit at its next look, every 100 ms),
//!    and an answer through the API (the server looks at once). For each (change, subscriber):
//!    the time from the change to the subscriber reading its event (p50/p95/max), the spread
//!    between the first and the last subscriber of a change, and the server's resident memory
//!    before and with the streams open.
//!
//! Prints a table and writes `target/bench/serve.json` (under `$CARGO_TARGET_DIR` when set).
//! Without `--bench` (as `cargo test` runs it) or with `--smoke` it makes a short smoke pass
//! and writes nothing.

use m3::{
    ExecutionHandle, HumanInput, ManagedInputStore, McpEra, McpTestKit, OutcomeKind,
    SqliteExecutionStore, SqliteManagedInputStore, StdioServer, StoreOptions, Submission,
};
use m3_bench::fixture::{ADDRESS_KEY, address_content, address_round, booking_agent};
use m3_bench::stats::{latency_text, stats_json};
use m3_bench::{RunArgs, Stats, write_report};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant, SystemTime};

const M3: &str = env!("CARGO_BIN_EXE_m3");
/// The longest any one wait may take.
const WAIT: Duration = Duration::from_secs(300);

/// What one run measures.
struct Plan {
    /// Executions answered in part 1.
    executions: usize,
    /// Concurrent HTTP clients answering them.
    clients: usize,
    /// Open event streams in part 2.
    subscribers: usize,
    /// Changes of each kind in part 2.
    changes: usize,
}

impl Plan {
    fn new(full: bool) -> Self {
        if full {
            Self {
                executions: 200,
                clients: 50,
                subscribers: 200,
                changes: 20,
            }
        } else {
            Self {
                executions: 4,
                clients: 2,
                subscribers: 4,
                changes: 2,
            }
        }
    }
}

/// A running `m3 serve`, killed when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(db: &Path) -> Self {
        let mut child = Command::new(M3)
            .arg("--db")
            .arg(db)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning m3 serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("the bound address");
        Self {
            child,
            base: format!("http://{}", line.trim()),
        }
    }

    /// The server's resident memory and CPU seconds so far (`/proc`).
    fn usage(&self) -> (f64, f64) {
        let pid = self.child.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the `)`.
        let ticks: f64 = [11, 12]
            .iter()
            .filter_map(|i| fields.get(*i).and_then(|v| v.parse::<f64>().ok()))
            .sum();
        // SAFETY: sysconf has no preconditions.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        (rss_kib / 1024.0, ticks / per_second)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP client that reports every status.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// The answer's body for `round_id`.
fn answer_body(round_id: &str) -> String {
    json!({"responses": {ADDRESS_KEY: {"action": "accept", "content": address_content()}},
           "idempotency_key": format!("bench-{round_id}")})
    .to_string()
}

/// Parks `count` executions at their address round; their handles and round ids.
fn park(kit: &McpTestKit, count: usize) -> Vec<(ExecutionHandle, String)> {
    let agent = kit.agents([booking_agent()]).expect("the agent").remove(0);
    let binding = StdioServer::new("shipping", M3)
        .args(["shipping-server", "--era", "modern"])
        .era(McpEra::Modern);
    let handles: Vec<ExecutionHandle> = (0..count)
        .map(|_| {
            let submission = Submission::new(
                "Ask for the delivery address, then book the shipment.",
                binding.clone(),
            )
            .tools(["shipping:book_shipment"])
            .human_input(HumanInput::Managed);
            agent.submit(submission).expect("submitting")
        })
        .collect();
    let started = Instant::now();
    handles
        .into_iter()
        .map(|handle| {
            loop {
                if let Some(round) = handle.pending_elicitation().expect("its pending round") {
                    break (handle, round.round_id);
                }
                assert!(started.elapsed() < WAIT, "an execution never parked");
                std::thread::sleep(Duration::from_millis(20));
            }
        })
        .collect()
}

/// Part 1's figures.
struct Answers {
    answered_per_second: f64,
    call: Option<Stats>,
    to_delivered: Option<Stats>,
    validated_to_delivered: Option<Stats>,
    server_cpu_seconds: f64,
    elapsed_seconds: f64,
    busy_retries: usize,
}

/// Part 1: `clients` threads answer the parked rounds through the API.
fn answers(
    server: &Server,
    parked: &[(ExecutionHandle, String)],
    clients: usize,
    rounds: &SqliteManagedInputStore,
) -> Answers {
    let queue: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(
        parked.iter().rev().map(|(_, id)| id.clone()).collect(),
    ));
    let start = Arc::new(Barrier::new(clients + 1));
    let (done, results) = mpsc::channel();
    let mut threads = Vec::new();
    for _ in 0..clients {
        let (queue, start, done, base) = (
            queue.clone(),
            start.clone(),
            done.clone(),
            server.base.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let agent = agent();
            // One call first, so every client has its connection before the clock starts.
            let _ = agent.get(format!("{base}/api/executions/none")).call();
            start.wait();
            loop {
                let Some(round_id) = queue.lock().expect("the queue").pop() else {
                    return;
                };
                let (sent_at, sent) = (SystemTime::now(), Instant::now());
                let mut busy = 0;
                loop {
                    let mut response = agent
                        .post(format!("{base}/api/rounds/{round_id}/responses"))
                        .header("Content-Type", "application/json")
                        .send(answer_body(&round_id))
                        .expect("an HTTP answer");
                    let status = response.status().as_u16();
                    let body = response.body_mut().read_to_string().unwrap_or_default();
                    match status {
                        200 => break,
                        // The database stayed locked past the busy timeout: a client retries
                        // (the same key and answers: safe).
                        503 => busy += 1,
                        _ => panic!("answering {round_id}: {status} {body}"),
                    }
                }
                let returned = Instant::now();
                done.send((round_id, sent_at, sent, returned, busy))
                    .expect("the collector");
            }
        }));
    }
    drop(done);
    let (_, cpu_before) = server.usage();
    start.wait();
    let started = Instant::now();
    let results: Vec<_> = results.iter().collect();
    let last = results
        .iter()
        .map(|(_, _, _, returned, _)| *returned)
        .max()
        .expect("answers");
    for thread in threads {
        thread.join().expect("a client");
    }
    let elapsed = (last - started).as_secs_f64();
    let (_, cpu_after) = server.usage();
    for (handle, _) in parked {
        let result = handle.result(Some(WAIT)).expect("the execution's result");
        assert_eq!(result.outcome.kind, OutcomeKind::Succeeded, "{result:?}");
    }
    let calls: Vec<f64> = results
        .iter()
        .map(|(_, _, sent, returned, _)| (*returned - *sent).as_secs_f64() * 1e3)
        .collect();
    let mut to_delivered = Vec::new();
    let mut validated_to_delivered = Vec::new();
    for (round_id, sent_at, _, _, _) in &results {
        let record = rounds
            .get_round(round_id)
            .expect("reading a round")
            .expect("the round");
        let delivered = record.timestamps.delivered_at.expect("delivered");
        let validated = record.timestamps.response_validated_at.expect("validated");
        let sent: chrono::DateTime<chrono::Utc> = (*sent_at).into();
        to_delivered.push((delivered - sent).num_microseconds().unwrap_or(0) as f64 / 1e3);
        validated_to_delivered
            .push((delivered - validated).num_microseconds().unwrap_or(0) as f64 / 1e3);
    }
    Answers {
        answered_per_second: results.len() as f64 / elapsed,
        call: Stats::of(&calls),
        to_delivered: Stats::of(&to_delivered),
        validated_to_delivered: Stats::of(&validated_to_delivered),
        server_cpu_seconds: cpu_after - cpu_before,
        elapsed_seconds: elapsed,
        busy_retries: results.iter().map(|r| r.4).sum(),
    }
}

/// Part 2's figures for one kind of change.
struct FanOut {
    latency: Option<Stats>,
    spread: Option<Stats>,
    missed: usize,
}

/// A subscriber's sighting: (change marker, when read).
type Sighting = (String, Instant);

/// Opens `count` event streams; each reports the round id of every event it reads. Returns
/// once all are subscribed.
fn subscribe(server: &Server, count: usize) -> Vec<mpsc::Receiver<Sighting>> {
    let (ready, subscribed) = mpsc::channel();
    let mut streams = Vec::new();
    for _ in 0..count {
        let (send, receive) = mpsc::channel();
        let (base, ready) = (server.base.clone(), ready.clone());
        std::thread::spawn(move || {
            let response = agent()
                .get(format!("{base}/api/events/stream"))
                .call()
                .expect("the event stream");
            assert_eq!(response.status().as_u16(), 200);
            ready.send(()).expect("the opener");
            let reader = BufReader::new(response.into_body().into_reader());
            let mut kind = String::new();
            for line in reader.lines() {
                let Ok(line) = line else { return };
                if let Some(name) = line.strip_prefix("event: ") {
                    kind = name.to_string();
                } else if let Some(data) = line.strip_prefix("data: ") {
                    let at = Instant::now();
                    let data: Value = serde_json::from_str(data).unwrap_or_default();
                    let marker = match kind.as_str() {
                        "lagged" => "lagged".to_string(),
                        _ => format!("{kind} {}", data["round_id"].as_str().unwrap_or("")),
                    };
                    if send.send((marker, at)).is_err() {
                        return;
                    }
                }
            }
        });
        streams.push(receive);
    }
    for _ in 0..count {
        subscribed
            .recv_timeout(WAIT)
            .expect("a subscriber subscribed");
    }
    streams
}

/// Makes `changes` changes with `change` (it returns the marker its event carries and the
/// instant the change was made), a quarter second apart, and times each subscriber's
/// sighting.
fn fan_out(
    streams: &[mpsc::Receiver<Sighting>],
    changes: usize,
    mut change: impl FnMut(usize) -> (String, Instant),
) -> FanOut {
    let (mut latencies, mut spreads, mut missed) = (Vec::new(), Vec::new(), 0);
    for i in 0..changes {
        let (marker, made) = change(i);
        let mut seen = Vec::new();
        for stream in streams {
            let until = Instant::now() + Duration::from_secs(30);
            loop {
                match stream.recv_timeout(until.saturating_duration_since(Instant::now())) {
                    Ok((m, at)) if m == marker => {
                        seen.push((at.max(made) - made).as_secs_f64() * 1e3);
                        break;
                    }
                    Ok((m, _)) if m == "lagged" => missed += 1,
                    Ok(_) => {}
                    Err(_) => {
                        missed += 1;
                        break;
                    }
                }
            }
        }
        if !seen.is_empty() {
            let first = seen.iter().copied().fold(f64::INFINITY, f64::min);
            let last = seen.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            spreads.push(last - first);
        }
        latencies.extend(seen);
        std::thread::sleep(Duration::from_millis(250));
    }
    FanOut {
        latency: Stats::of(&latencies),
        spread: Stats::of(&spreads),
        missed,
    }
}

/// A round made as a worker makes one (this process commits it; the server only sees it).
fn create_round(rounds: &SqliteManagedInputStore, i: usize) -> String {
    let round_id = format!("fanout-{i}");
    rounds
        .create_round(&address_round(&round_id, &format!("exec-fanout-{i}")))
        .expect("creating a round");
    round_id
}

fn main() {
    let run = RunArgs::from_env();
    let plan = Plan::new(run.full);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("serve.sqlite");
    let store = Arc::new(SqliteExecutionStore::open(&db).expect("the database"));
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new()).expect("the kit");
    let rounds = SqliteManagedInputStore::open(&db, StoreOptions::default()).expect("the store");

    // Part 1: answers. Parked beyond them: one per fan-out answer of part 2.
    let parked_started = Instant::now();
    let mut parked = park(&kit, plan.executions + plan.changes);
    let park_seconds = parked_started.elapsed().as_secs_f64();
    let spare = parked.split_off(plan.executions);
    let server = Server::start(&db);
    let answered = answers(&server, &parked, plan.clients, &rounds);

    // Part 2: fan-out.
    let (rss_before, _) = server.usage();
    let streams = subscribe(&server, plan.subscribers);
    std::thread::sleep(Duration::from_millis(500));
    let (rss_open, _) = server.usage();
    let from_another_process = fan_out(&streams, plan.changes, |i| {
        let round_id = create_round(&rounds, i);
        (format!("round_created {round_id}"), Instant::now())
    });
    let client = agent();
    let through_the_api = fan_out(&streams, plan.changes, |i| {
        let round_id = &spare[i].1;
        let made = Instant::now();
        let mut response = client
            .post(format!("{}/api/rounds/{round_id}/responses", server.base))
            .header("Content-Type", "application/json")
            .send(answer_body(round_id))
            .expect("an HTTP answer");
        assert_eq!(response.status().as_u16(), 200);
        let _ = response.body_mut().read_to_string();
        (format!("round_answered {round_id}"), made)
    });
    let (rss_after, _) = server.usage();

    println!(
        "m3 serve: {} executions parked in {park_seconds:.1} s, answered through the API by {} \
         clients",
        plan.executions, plan.clients
    );
    println!(
        "  answered {:.0} rounds/s ({} in {:.2} s; server CPU {:.2} s; {} retries after 503)",
        answered.answered_per_second,
        plan.executions,
        answered.elapsed_seconds,
        answered.server_cpu_seconds,
        answered.busy_retries
    );
    println!(
        "  call latency:                {}",
        latency_text(answered.call.as_ref(), "ms")
    );
    println!(
        "  call sent -> delivered:      {}",
        latency_text(answered.to_delivered.as_ref(), "ms")
    );
    println!(
        "  validated -> delivered:      {}",
        latency_text(answered.validated_to_delivered.as_ref(), "ms")
    );
    println!(
        "m3 serve: {} subscribers, {} changes of each kind",
        plan.subscribers, plan.changes
    );
    for (what, figures) in [
        ("round created by another process", &from_another_process),
        ("answer through the API", &through_the_api),
    ] {
        println!(
            "  {what}: {}; first to last subscriber: p50 {:.1} ms, max {:.1} ms; missed {}",
            latency_text(figures.latency.as_ref(), "ms"),
            figures.spread.map_or(f64::NAN, |s| s.p50),
            figures.spread.map_or(f64::NAN, |s| s.max),
            figures.missed
        );
    }
    println!(
        "  server RSS: {rss_before:.1} MiB before the streams, {rss_open:.1} MiB with them \
         open, {rss_after:.1} MiB after the changes"
    );
    drop(streams);
    drop(server);
    drop(kit);
    if !run.full {
        println!("smoke pass: no JSON written (run `cargo bench -p m3-cli --bench serve`)");
        return;
    }
    let fan = |f: &FanOut| {
        json!({"latency": stats_json(f.latency, "ms"),
               "first_to_last_subscriber": stats_json(f.spread, "ms"),
               "missed": f.missed})
    };
    let report = json!({
        "benchmark": "serve",
        "command": "cargo bench -p m3-cli --bench serve",
        "answers": {
            "executions": plan.executions,
            "clients": plan.clients,
            "park_seconds": park_seconds,
            "elapsed_seconds": answered.elapsed_seconds,
            "answered_per_second": answered.answered_per_second,
            "call": stats_json(answered.call, "ms"),
            "call_sent_to_delivered": stats_json(answered.to_delivered, "ms"),
            "validated_to_delivered": stats_json(answered.validated_to_delivered, "ms"),
            "server_cpu_seconds": answered.server_cpu_seconds,
            "retries_after_storage_busy": answered.busy_retries,
        },
        "fan_out": {
            "subscribers": plan.subscribers,
            "changes_per_kind": plan.changes,
            "round_created_by_another_process": fan(&from_another_process),
            "answer_through_the_api": fan(&through_the_api),
            "server_rss_mib": {"before_streams": rss_before, "streams_open": rss_open,
                               "after_changes": rss_after},
        },
    });
    write_report("serve", &report).expect("writing the report");
}

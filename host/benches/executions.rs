//! The executions benchmark (`cargo bench -p m3 --bench executions`; `just bench` runs it after
//! the engine benchmark).
//!
//! It drives real executions through the kit (default [`m3::KitOptions`], a SQLite file in a
//! temporary directory, human input `managed`) against the bundled shipping server
//! (`shipping-server`, found next to this binary in the target directory and built with cargo if
//! it is missing or older than its sources), and measures:
//!
//! 1. **In-process latency** of a managed round, over at least 200 rounds per era (each
//!    execution's server asks again and again: `--ask-rounds N`), the caller polling
//!    [`m3::ExecutionHandle::pending_elicitation`] in a tight loop and answering at once with
//!    [`m3::ExecutionHandle::respond_elicitation`]:
//!    - (a) *ask -> seen*: from the server writing its elicitation to `pending_elicitation()`
//!      returning it;
//!    - (b) *answer -> delivered*: from `respond_elicitation()` returning to the server receiving
//!      the answer.
//!
//!    The shipping server logs no timestamps, so both are measured two ways, side by side:
//!    - `wire`: the server runs behind a relay (this binary again, `M3_BENCH_ROLE=relay`) that
//!      forwards every line between the kit and the server and notes when it read each
//!      elicitation from the server (modern: an `input_required` result; legacy: an
//!      `elicitation/create` request) and each answer from the kit (modern: the `tools/call`
//!      retry with `inputResponses`; legacy: the response to `elicitation/create`). (a) runs
//!      from the relay reading the elicitation (so it includes the relay's one extra pipe hop);
//!      (b) runs to the relay reading the answer, i.e. when the server could have read it;
//!    - `store`: (a) from the round's `created_at` (the store clock, UTC, when the worker
//!      persisted the round) to `pending_elicitation()` returning it; (b) from
//!      `respond_elicitation()` returning to the round's `delivered_at` (the worker stamps it
//!      after it has written the answer to the server's stdin, in `mark_delivered`).
//!
//!    All timestamps are the same system UTC clock (`CLOCK_REALTIME`) read by different threads
//!    and processes. A (b) figure can be negative: the worker may deliver before the call has
//!    returned to the caller. Goal: p50 < 5 ms.
//! 2. **Cross-process latency**: (b) when the answer is committed by another process, a
//!    long-lived helper (this binary again, `M3_BENCH_ROLE=answerer`) that opens a second
//!    [`m3::SqliteManagedInputStore`] on the same file and calls `submit_responses`; measured
//!    from that call returning in the helper (it prints the UTC time) to the relay reading the
//!    answer (`wire`) or to `delivered_at` (`store`). The worker learns of such a commit only
//!    through the database's change poller. Goal: p50 < 25 ms.
//! 3. **Executions waiting at once**: 200 executions submitted at once on one tokio runtime
//!    ([`m3::AsyncMcpTestKit`]), each parked on its pending round, in a child process of the
//!    benchmark (this binary again, `M3_BENCH_ROLE=parked`, started once the component is in
//!    the cache, so that neither a first compilation nor the other sections' freed memory shows).
//!    That process's resident memory (`VmRSS`, `/proc/self/status`; the server children are
//!    other processes and not counted) is read before submitting (after one warm-up execution)
//!    and while all are parked: `(rss_parked - rss_before) / 200` per parked execution. `VmRSS`
//!    counts the compiled component's file-backed pages once per instance that maps them, so the
//!    proportional set size (`Pss`, `/proc/self/smaps_rollup`) is reported beside it. Then all
//!    are cancelled and their results awaited. Goal: < 4 MiB per parked execution (`VmRSS`).
//!
//! It prints a table and writes `target/bench/executions.json` (under `$CARGO_TARGET_DIR` when
//! set). It measures and reports; it never asserts on a time. Run without `--bench` (as `cargo
//! test --workspace` does) or with `--smoke`, it runs a short smoke pass and writes no JSON;
//! `--only=in-process`, `--only=cross-process` or `--only=parked` runs one section (no JSON);
//! `--poll-interval-us=N` sleeps between polls instead of spinning.

use chrono::{DateTime, Utc};
use m3::{
    AsyncExecutionHandle, AsyncMcpTestKit, ExecutionHandle, ExecutionStatus, ExecutionStore,
    HumanInput, ManagedInputRecord, ManagedInputStore, McpEra, McpTestKit, OutcomeKind,
    PendingElicitationRound, SqliteExecutionStore, SqliteManagedInputStore, StdioServer,
    StoreOptions, Submission,
};
use m3_bench::fixture::{address, booking_agent, era_name, path_text};
use m3_bench::stats::{Stats, stats_json};
use m3_bench::{BenchResult, RunArgs, Table, shipping_server_binary, target_dir, write_report};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The sections of the benchmark, for `--only=`.
const SECTIONS: [&str; 3] = ["in-process", "cross-process", "parked"];

/// What a re-executed copy of this binary does (its environment names the role, since the kit
/// gives server children exactly the environment of their binding).
const ROLE_VAR: &str = "M3_BENCH_ROLE";

/// Goals printed next to the figures (never asserted).
const GOAL_IN_PROCESS_P50_MS: f64 = 5.0;
const GOAL_CROSS_PROCESS_P50_MS: f64 = 25.0;
const GOAL_PARKED_MIB: f64 = 4.0;

/// How long any single wait of the benchmark may take before it gives up (a hang guard, not a
/// measurement).
const WAIT_LIMIT: Duration = Duration::from_secs(180);

// ---------------------------------------------------------------------------------------------
// Run configuration

#[derive(Debug, Clone, Copy)]
struct Plan {
    /// Full run (`--bench`) or smoke pass.
    full: bool,
    /// `--only=...`: run one section; no JSON.
    only: Option<&'static str>,
    /// In-process: executions per era (after one warm-up execution) and rounds in each.
    in_process_executions: usize,
    /// Cross-process: executions (after one warm-up execution).
    cross_process_executions: usize,
    /// Rounds each execution's server asks for (`--ask-rounds`).
    rounds_per_execution: u32,
    /// Rounds of the warm-up execution of the latency sections (not counted).
    warmup_rounds: u32,
    /// Executions parked at once.
    parked: usize,
    /// Sleep between two `pending_elicitation()` calls (zero: spin).
    poll_interval: Duration,
    /// Put the relay between the kit and the server (the `wire` figures).
    relay: bool,
}

impl Plan {
    fn from_args() -> Self {
        let run = RunArgs::from_env();
        let (args, full) = (&run.args, run.full);
        let only = run.only(&SECTIONS, "section");
        let poll_interval = run
            .number("poll-interval-us")
            .map_or(Duration::ZERO, Duration::from_micros);
        let relay = !args.iter().any(|a| a == "--no-relay");
        if full {
            Self {
                full,
                only,
                in_process_executions: 8,
                cross_process_executions: 8,
                rounds_per_execution: 50,
                warmup_rounds: 10,
                parked: 200,
                poll_interval,
                relay,
            }
        } else {
            Self {
                full,
                only,
                in_process_executions: 1,
                cross_process_executions: 1,
                rounds_per_execution: 5,
                warmup_rounds: 2,
                parked: 5,
                poll_interval,
                relay,
            }
        }
    }

    fn runs(&self, section: &str) -> bool {
        self.only.is_none_or(|only| only == section)
    }

    fn to_json(self) -> Value {
        json!({
            "full": self.full,
            "only": self.only,
            "in_process_executions_per_era": self.in_process_executions,
            "cross_process_executions": self.cross_process_executions,
            "rounds_per_execution": self.rounds_per_execution,
            "warmup_rounds": self.warmup_rounds,
            "parked_executions": self.parked,
            "poll_interval_us": self.poll_interval.as_micros() as u64,
            "relay": self.relay,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics and formatting

fn ms(s: &Option<Stats>, pick: fn(&Stats) -> f64) -> String {
    s.as_ref()
        .map_or_else(|| "-".into(), |s| format!("{:.2} ms", pick(s)))
}

fn goal(s: &Option<Stats>, limit_ms: f64) -> String {
    match s {
        Some(s) if s.p50 < limit_ms => format!("met (p50 < {limit_ms} ms)"),
        Some(_) => format!("MISSED (p50 < {limit_ms} ms)"),
        None => "-".into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Clocks and fixtures

/// Nanoseconds since the Unix epoch on the system clock (the clock of `Utc::now()`).
fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn nanos(t: DateTime<Utc>) -> i64 {
    t.timestamp_nanos_opt().unwrap_or(i64::MAX)
}

/// `later - earlier` in milliseconds.
fn ms_between(earlier: i64, later: i64) -> f64 {
    (later - earlier) as f64 / 1e6
}

/// The server binding: the shipping server in `era` asking `rounds` times, behind the relay
/// writing to `relay_log` when given.
fn server_binding(
    server: &Path,
    era: McpEra,
    rounds: u32,
    relay_log: Option<&Path>,
) -> BenchResult<StdioServer> {
    let server_args = [
        "--era".to_string(),
        era_name(era).to_string(),
        "--ask-rounds".to_string(),
        rounds.to_string(),
    ];
    let binding = match relay_log {
        Some(log) => {
            let this = std::env::current_exe()?;
            StdioServer::new("shipping", path_text(&this)?)
                .args([path_text(log)?, path_text(server)?])
                .args(server_args)
                .env(ROLE_VAR, "relay")
        }
        None => StdioServer::new("shipping", path_text(server)?).args(server_args),
    };
    Ok(binding.era(era))
}

fn submission(binding: StdioServer, rounds: u32) -> Submission {
    Submission::new(
        "Ask for the delivery address, then book the shipment.",
        binding,
    )
    .tools(["shipping:book_shipment"])
    .human_input(HumanInput::Managed)
    .round_limit(rounds.max(1))
}

// ---------------------------------------------------------------------------------------------
// Locating (and if need be building) the shipping server

// ---------------------------------------------------------------------------------------------
// The relay (a server child) and the answerer (a helper process)

/// Is this line (from the kit to the server) an answer to an elicitation?
fn is_answer(line: &[u8]) -> bool {
    let Ok(message) = serde_json::from_slice::<Value>(line) else {
        return false;
    };
    match message.get("method").and_then(Value::as_str) {
        // Modern: the retry of the call with the answers.
        Some(method) => method == "tools/call" && !message["params"]["inputResponses"].is_null(),
        // Legacy: the response to the server's `elicitation/create`.
        None => message.get("result").is_some() || message.get("error").is_some(),
    }
}

/// Is this line (from the server to the kit) an elicitation?
fn is_ask(line: &[u8]) -> bool {
    let Ok(message) = serde_json::from_slice::<Value>(line) else {
        return false;
    };
    message["result"]["resultType"] == "input_required" || message["method"] == "elicitation/create"
}

fn note(log: &Mutex<std::fs::File>, kind: &str, at: i64) {
    let text = format!("{kind} {at}\n");
    let mut file = log.lock().unwrap_or_else(|e| e.into_inner());
    let _ = file.write_all(text.as_bytes());
}

/// `M3_BENCH_ROLE=relay`, arguments `<log> <server> <server args...>`: runs the server and
/// forwards lines both ways, noting in the log when it read an elicitation (`ask <nanos>`) and
/// an answer (`answer <nanos>`). Exits with the server.
fn relay_main() -> BenchResult<()> {
    let mut args = std::env::args_os().skip(1);
    let log_path = PathBuf::from(args.next().ok_or("relay: no log path")?);
    let server = args.next().ok_or("relay: no server")?;
    let mut child = Command::new(server)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let log = Arc::new(Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?,
    ));
    let mut to_server = child.stdin.take().ok_or("relay: no server stdin")?;
    let from_server = child.stdout.take().ok_or("relay: no server stdout")?;
    let inbound_log = log.clone();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut line = Vec::new();
        loop {
            line.clear();
            match stdin.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let at = now_nanos();
            if to_server
                .write_all(&line)
                .and_then(|()| to_server.flush())
                .is_err()
            {
                break;
            }
            if is_answer(&line) {
                note(&inbound_log, "answer", at);
            }
        }
        // Closing the server's stdin ends it, as the kit closing ours would.
        drop(to_server);
    });
    let mut from_server = BufReader::new(from_server);
    let mut stdout = std::io::stdout().lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match from_server.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let at = now_nanos();
        if stdout
            .write_all(&line)
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
        if is_ask(&line) {
            note(&log, "ask", at);
        }
    }
    drop(stdout);
    let status = child.wait()?;
    std::process::exit(status.code().unwrap_or(1));
}

/// The relay's notes: (elicitations read, answers read), each in order, in nanoseconds.
fn read_relay_log(path: &Path) -> (Vec<i64>, Vec<i64>) {
    let (mut asks, mut answers) = (Vec::new(), Vec::new());
    let Ok(text) = std::fs::read_to_string(path) else {
        return (asks, answers);
    };
    for line in text.lines() {
        let mut parts = line.split(' ');
        let (Some(kind), Some(Ok(at))) = (parts.next(), parts.next().map(str::parse::<i64>)) else {
            continue;
        };
        match kind {
            "ask" => asks.push(at),
            "answer" => answers.push(at),
            _ => {}
        }
    }
    (asks, answers)
}

/// `M3_BENCH_ROLE=answerer`, argument `<database>`: opens its own store on the file, prints
/// `ready`, then for each line `<round id>\t<idempotency key>` submits the address and prints
/// `ok <nanos when submit_responses returned>` (or `err <message>`).
fn answerer_main() -> BenchResult<()> {
    let path = std::env::args_os()
        .nth(1)
        .ok_or("answerer: no database path")?;
    let store = SqliteManagedInputStore::open(PathBuf::from(path), StoreOptions::default())?;
    let answer = address();
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let Some((round_id, key)) = line.split_once('\t') else {
            writeln!(stdout, "err malformed request line")?;
            stdout.flush()?;
            continue;
        };
        match store.submit_responses(round_id, &answer, key) {
            Ok(_) => writeln!(stdout, "ok {}", now_nanos())?,
            Err(e) => writeln!(stdout, "err {e}")?,
        }
        stdout.flush()?;
    }
    Ok(())
}

/// The answerer process, driven over its stdin and stdout.
struct Answerer {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Answerer {
    fn start(database: &Path) -> BenchResult<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg(database)
            .env(ROLE_VAR, "answerer")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("answerer: no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("answerer: no stdout")?);
        let mut answerer = Self {
            child,
            stdin,
            stdout,
        };
        let ready = answerer.read_line()?;
        if ready != "ready" {
            return Err(format!("answerer did not start: {ready}").into());
        }
        Ok(answerer)
    }

    fn read_line(&mut self) -> BenchResult<String> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            return Err("the answerer process ended".into());
        }
        Ok(line.trim_end().to_string())
    }

    /// Submits the address to `round_id`; the UTC nanos at which `submit_responses` returned.
    fn answer(&mut self, round_id: &str, key: &str) -> BenchResult<i64> {
        writeln!(self.stdin, "{round_id}\t{key}")?;
        self.stdin.flush()?;
        let reply = self.read_line()?;
        match reply.strip_prefix("ok ") {
            Some(at) => Ok(at.parse()?),
            None => Err(format!("the answerer failed: {reply}").into()),
        }
    }

    fn finish(self) -> BenchResult<()> {
        let Self {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let status = child.wait()?;
        if !status.success() {
            return Err(format!("the answerer exited with {status}").into());
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// 1 and 2. Round latency

/// One answered round, as the caller saw it and as the store and the relay recorded it.
#[derive(Debug, Clone)]
struct RoundSample {
    round_id: String,
    /// The round's `created_at` (store clock).
    created: i64,
    /// `pending_elicitation()` returned it.
    seen: i64,
    /// `respond_elicitation()` (or the other process's `submit_responses`) returned.
    answered: i64,
    /// The round's `response_validated_at` (store clock, inside the answer's transaction).
    validated: Option<i64>,
    /// The round's `delivered_at` (store clock).
    delivered: Option<i64>,
    /// The relay read the elicitation from the server.
    wire_ask: Option<i64>,
    /// The relay read the answer on its way to the server.
    wire_answer: Option<i64>,
}

/// How a section answers its rounds.
enum AnswerBy<'a> {
    /// `respond_elicitation()` on the handle.
    Handle,
    /// The answerer process.
    OtherProcess(&'a mut Answerer),
}

/// The measured figures of one latency section.
#[derive(Debug)]
struct LatencyResult {
    name: String,
    era: McpEra,
    executions: usize,
    rounds: usize,
    ask_wire: Option<Stats>,
    ask_store: Option<Stats>,
    deliver_wire: Option<Stats>,
    deliver_store: Option<Stats>,
    /// From the answer's transaction (`response_validated_at`) to `delivered_at`.
    validated_to_delivered: Option<Stats>,
    /// The server writing the elicitation (relay) to the round's `created_at`.
    wire_ask_to_created: Option<Stats>,
    /// One `pending_elicitation()` call that found nothing new (the polling resolution).
    poll_call: Option<Stats>,
    /// One answer call (`respond_elicitation()`, or the round trip to the answerer process).
    answer_call: Option<Stats>,
    seconds: f64,
}

impl LatencyResult {
    fn of(
        name: &str,
        era: McpEra,
        executions: usize,
        samples: &[RoundSample],
        polls: &[f64],
        answer_calls: &[f64],
        seconds: f64,
    ) -> Self {
        let figure = |f: &dyn Fn(&RoundSample) -> Option<f64>| {
            Stats::of(&samples.iter().filter_map(f).collect::<Vec<_>>())
        };
        Self {
            name: name.to_string(),
            era,
            executions,
            rounds: samples.len(),
            ask_wire: figure(&|s| s.wire_ask.map(|w| ms_between(w, s.seen))),
            ask_store: figure(&|s| Some(ms_between(s.created, s.seen))),
            deliver_wire: figure(&|s| s.wire_answer.map(|w| ms_between(s.answered, w))),
            deliver_store: figure(&|s| s.delivered.map(|d| ms_between(s.answered, d))),
            validated_to_delivered: figure(&|s| Some(ms_between(s.validated?, s.delivered?))),
            wire_ask_to_created: figure(&|s| s.wire_ask.map(|w| ms_between(w, s.created))),
            poll_call: Stats::of(&polls.iter().map(|s| s * 1e3).collect::<Vec<_>>()),
            answer_call: Stats::of(&answer_calls.iter().map(|s| s * 1e3).collect::<Vec<_>>()),
            seconds,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "era": era_name(self.era),
            "executions": self.executions,
            "rounds": self.rounds,
            "ask_to_seen_wire_ms": stats_json(self.ask_wire, "ms"),
            "ask_to_seen_store_ms": stats_json(self.ask_store, "ms"),
            "answer_to_delivered_wire_ms": stats_json(self.deliver_wire, "ms"),
            "answer_to_delivered_store_ms": stats_json(self.deliver_store, "ms"),
            "response_validated_to_delivered_store_ms":
                stats_json(self.validated_to_delivered, "ms"),
            "server_ask_to_round_created_ms": stats_json(self.wire_ask_to_created, "ms"),
            "pending_elicitation_call_ms": stats_json(self.poll_call, "ms"),
            "answer_call_ms": stats_json(self.answer_call, "ms"),
            "seconds": self.seconds,
        })
    }
}

/// Polls `pending_elicitation()` until it returns a round other than `last`; the round and the
/// UTC nanos right after the call returned it. Each fruitless call's time goes into `polls`.
fn wait_new_round(
    handle: &ExecutionHandle,
    last: Option<&str>,
    poll_interval: Duration,
    polls: &mut Vec<f64>,
) -> BenchResult<(PendingElicitationRound, i64)> {
    let started = Instant::now();
    let mut next_check = started + Duration::from_secs(1);
    loop {
        let call = Instant::now();
        let pending = handle.pending_elicitation()?;
        let seen = now_nanos();
        match pending {
            Some(round) if last != Some(round.round_id.as_str()) => return Ok((round, seen)),
            _ => polls.push(call.elapsed().as_secs_f64()),
        }
        let now = Instant::now();
        if now >= next_check {
            next_check = now + Duration::from_secs(1);
            let state = handle.snapshot()?;
            if state.lifecycle == ExecutionStatus::Finished {
                return Err(format!(
                    "execution {} finished before asking again: {:?}",
                    handle.execution_id(),
                    state.outcome
                )
                .into());
            }
            if now - started > WAIT_LIMIT {
                return Err(format!(
                    "execution {}: no new pending round within {WAIT_LIMIT:?}",
                    handle.execution_id()
                )
                .into());
            }
        }
        if poll_interval.is_zero() {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(poll_interval);
        }
    }
}

/// Runs one execution whose server asks `rounds` times, answering each round as soon as it is
/// seen; returns its rounds, completed from the store's records and the relay's log.
#[allow(clippy::too_many_arguments)]
fn run_rounds(
    kit: &McpTestKit,
    reader: &dyn ManagedInputStore,
    server: &Path,
    era: McpEra,
    rounds: u32,
    relay_log: Option<&Path>,
    answer_by: &mut AnswerBy<'_>,
    poll_interval: Duration,
    polls: &mut Vec<f64>,
    answer_calls: &mut Vec<f64>,
) -> BenchResult<Vec<RoundSample>> {
    let agent = kit.agents([booking_agent()])?.remove(0);
    let binding = server_binding(server, era, rounds, relay_log)?;
    let handle = agent.submit(submission(binding, rounds))?;
    let mut samples: Vec<RoundSample> = Vec::new();
    for _ in 0..rounds {
        let last = samples.last().map(|s| s.round_id.as_str());
        let (round, seen) = wait_new_round(&handle, last, poll_interval, polls)?;
        let key = format!("address-{}", round.round_id);
        let call = Instant::now();
        let answered = match answer_by {
            AnswerBy::Handle => {
                handle.respond_elicitation(&round.round_id, address(), &key)?;
                now_nanos()
            }
            AnswerBy::OtherProcess(answerer) => answerer.answer(&round.round_id, &key)?,
        };
        answer_calls.push(call.elapsed().as_secs_f64());
        samples.push(RoundSample {
            round_id: round.round_id,
            created: nanos(round.created_at),
            seen,
            answered,
            validated: None,
            delivered: None,
            wire_ask: None,
            wire_answer: None,
        });
    }
    let result = handle.result(Some(WAIT_LIMIT))?;
    if !result.succeeded() {
        return Err(format!(
            "execution {} did not succeed: {}",
            handle.execution_id(),
            result.outcome
        )
        .into());
    }
    let (asks, answers) = relay_log.map(read_relay_log).unwrap_or_default();
    if relay_log.is_some() && (asks.len() != samples.len() || answers.len() != samples.len()) {
        eprintln!(
            "warning: the relay saw {} elicitations and {} answers for {} rounds",
            asks.len(),
            answers.len(),
            samples.len()
        );
    }
    for (i, sample) in samples.iter_mut().enumerate() {
        let record: ManagedInputRecord = reader
            .get_round(&sample.round_id)?
            .ok_or_else(|| format!("round {} is gone", sample.round_id))?;
        sample.validated = record.timestamps.response_validated_at.map(nanos);
        sample.delivered = record.timestamps.delivered_at.map(nanos);
        sample.wire_ask = asks.get(i).copied();
        sample.wire_answer = answers.get(i).copied();
    }
    Ok(samples)
}

/// One latency section: a warm-up execution, then `executions` executions one after another,
/// each of `plan.rounds_per_execution` rounds, on a fresh database and kit.
fn latency_section(
    plan: &Plan,
    scratch: &Path,
    server: &Path,
    name: &str,
    era: McpEra,
    executions: usize,
    cross_process: bool,
) -> BenchResult<LatencyResult> {
    let database = scratch.join(format!("{name}.sqlite"));
    let store = Arc::new(SqliteExecutionStore::open(&database)?);
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    let reader = store
        .managed_input_store()?
        .ok_or("the execution store resolves no managed-input store")?;
    let mut answerer = if cross_process {
        Some(Answerer::start(&database)?)
    } else {
        None
    };
    let started = Instant::now();
    let mut samples = Vec::new();
    let (mut polls, mut answer_calls) = (Vec::new(), Vec::new());
    for i in 0..=executions {
        let warmup = i == 0;
        let rounds = if warmup {
            plan.warmup_rounds
        } else {
            plan.rounds_per_execution
        };
        let log = scratch.join(format!("{name}-{i}.relay.log"));
        let relay_log = plan.relay.then_some(log.as_path());
        let mut answer_by = match answerer.as_mut() {
            Some(answerer) => AnswerBy::OtherProcess(answerer),
            None => AnswerBy::Handle,
        };
        let (mut exec_polls, mut exec_calls) = (Vec::new(), Vec::new());
        let rounds = run_rounds(
            &kit,
            reader.as_ref(),
            server,
            era,
            rounds,
            relay_log,
            &mut answer_by,
            plan.poll_interval,
            &mut exec_polls,
            &mut exec_calls,
        )?;
        if !warmup {
            samples.extend(rounds);
            polls.extend(exec_polls);
            answer_calls.extend(exec_calls);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some(answerer) = answerer {
        answerer.finish()?;
    }
    drop(kit);
    store.close();
    Ok(LatencyResult::of(
        name,
        era,
        executions,
        &samples,
        &polls,
        &answer_calls,
        seconds,
    ))
}

// ---------------------------------------------------------------------------------------------
// 3. Executions parked at once

/// Fields of `/proc/self/status` and `/proc/self/smaps_rollup`, in KiB.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct ProcStatus {
    vm_rss_kib: u64,
    rss_anon_kib: u64,
    rss_file_kib: u64,
    vm_hwm_kib: u64,
    /// Proportional set size: a page mapped N times counts 1/N each time (the compiled
    /// component's file-backed pages are mapped once per instance, and `VmRSS` counts them
    /// every time).
    pss_kib: u64,
    pss_anon_kib: u64,
    pss_file_kib: u64,
    threads: u64,
}

impl ProcStatus {
    fn read() -> Self {
        fn fields(path: &str, mut each: impl FnMut(&str, u64)) {
            let Ok(text) = std::fs::read_to_string(path) else {
                return;
            };
            for line in text.lines() {
                let Some((key, value)) = line.split_once(':') else {
                    continue;
                };
                let number = value
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
                each(key, number);
            }
        }
        let mut status = Self::default();
        fields("/proc/self/status", |key, number| match key {
            "VmRSS" => status.vm_rss_kib = number,
            "RssAnon" => status.rss_anon_kib = number,
            "RssFile" => status.rss_file_kib = number,
            "VmHWM" => status.vm_hwm_kib = number,
            "Threads" => status.threads = number,
            _ => {}
        });
        fields("/proc/self/smaps_rollup", |key, number| match key {
            "Pss" => status.pss_kib = number,
            "Pss_Anon" => status.pss_anon_kib = number,
            "Pss_File" => status.pss_file_kib = number,
            _ => {}
        });
        status
    }

    fn rss_mib(&self) -> f64 {
        self.vm_rss_kib as f64 / 1024.0
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct ParkedResult {
    executions: usize,
    before: ProcStatus,
    parked: ProcStatus,
    after: ProcStatus,
    /// From the first submission to every execution having a pending round.
    park_seconds: f64,
    /// From the first cancel to every result.
    cancel_seconds: f64,
    outcomes: BTreeMap<String, usize>,
}

impl ParkedResult {
    /// `(parked - before) / executions` of one field, in MiB.
    fn per_execution_mib(&self, field: fn(&ProcStatus) -> u64) -> f64 {
        (field(&self.parked) as f64 - field(&self.before) as f64)
            / 1024.0
            / self.executions.max(1) as f64
    }

    fn rss_per_execution_mib(&self) -> f64 {
        self.per_execution_mib(|s| s.vm_rss_kib)
    }

    fn to_json(&self) -> Value {
        let per = self.rss_per_execution_mib();
        json!({
            "executions": self.executions,
            "definition": "(VmRSS while all executions are parked on a pending round - VmRSS \
                           before submitting, after one warm-up execution) / executions, in \
                           the process that hosts them (a child of the benchmark with a warm \
                           component cache); the server children are not counted",
            "rss_per_parked_execution_mib": per,
            "rss_anon_per_parked_execution_mib": self.per_execution_mib(|s| s.rss_anon_kib),
            "rss_file_per_parked_execution_mib": self.per_execution_mib(|s| s.rss_file_kib),
            "pss_per_parked_execution_mib": self.per_execution_mib(|s| s.pss_kib),
            "goal": {"max_mib": GOAL_PARKED_MIB, "figure": "rss_per_parked_execution_mib",
                     "met": per < GOAL_PARKED_MIB},
            "before": self.before,
            "parked": self.parked,
            "after_cancel": self.after,
            "seconds_to_park_all": self.park_seconds,
            "seconds_to_cancel_all": self.cancel_seconds,
            "outcomes": self.outcomes,
        })
    }
}

async fn wait_parked(handles: &[AsyncExecutionHandle]) -> BenchResult<()> {
    let started = Instant::now();
    let mut waiting: Vec<&AsyncExecutionHandle> = handles.iter().collect();
    while !waiting.is_empty() {
        let mut still = Vec::new();
        for handle in waiting {
            if handle.pending_elicitation().await?.is_none() {
                still.push(handle);
            }
        }
        waiting = still;
        if waiting.is_empty() {
            break;
        }
        if started.elapsed() > WAIT_LIMIT {
            return Err(format!(
                "{} of {} executions have no pending round after {WAIT_LIMIT:?}",
                waiting.len(),
                handles.len()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

async fn cancel_all(handles: &[AsyncExecutionHandle]) -> BenchResult<BTreeMap<String, usize>> {
    let mut cancels = tokio::task::JoinSet::new();
    for handle in handles {
        let handle = handle.clone();
        cancels.spawn(async move { handle.cancel().await });
    }
    while let Some(done) = cancels.join_next().await {
        done??;
    }
    let mut results = tokio::task::JoinSet::new();
    for handle in handles {
        let handle = handle.clone();
        results.spawn(async move { handle.result(Some(WAIT_LIMIT)).await });
    }
    let mut outcomes = BTreeMap::new();
    while let Some(done) = results.join_next().await {
        let name = match done??.outcome.kind {
            OutcomeKind::Succeeded => "succeeded",
            OutcomeKind::Failed => "failed",
            OutcomeKind::Cancelled => "cancelled",
        };
        *outcomes.entry(name.to_string()).or_insert(0) += 1;
    }
    Ok(outcomes)
}

/// `M3_BENCH_ROLE=parked`, arguments `<server> <executions> <database>`: parks the executions
/// (after one warm-up execution), measures, cancels them, and prints the result as JSON.
fn parked_main() -> BenchResult<()> {
    let mut args = std::env::args_os().skip(1);
    let server = PathBuf::from(args.next().ok_or("parked: no server")?);
    let executions: usize = args
        .next()
        .and_then(|n| n.into_string().ok())
        .ok_or("parked: no count")?
        .parse()?;
    let database = PathBuf::from(args.next().ok_or("parked: no database")?);
    let result = park(&server, executions, &database)?;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

fn park(server: &Path, executions: usize, database: &Path) -> BenchResult<ParkedResult> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let store = Arc::new(SqliteExecutionStore::open(database)?);
    let result = runtime.block_on(async {
        let kit = AsyncMcpTestKit::new(store.clone(), BTreeMap::<String, String>::new());
        let agent = kit.agents([booking_agent()])?.remove(0);
        let binding = server_binding(server, McpEra::Modern, 1, None)?;
        let sub = || submission(binding.clone(), 1);

        // Warm-up: the component, the pools, the runtime's threads.
        let warmup = agent.submit(sub()).await?;
        wait_parked(std::slice::from_ref(&warmup)).await?;
        cancel_all(std::slice::from_ref(&warmup)).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = ProcStatus::read();

        let started = Instant::now();
        let mut submits = tokio::task::JoinSet::new();
        for i in 0..executions {
            let (agent, submission) = (agent.clone(), sub());
            submits.spawn(async move { (i, agent.submit(submission).await) });
        }
        let mut handles = Vec::new();
        while let Some(done) = submits.join_next().await {
            let (i, handle) = done?;
            handles.push((i, handle?));
        }
        handles.sort_by_key(|(i, _)| *i);
        let handles: Vec<AsyncExecutionHandle> = handles.into_iter().map(|(_, h)| h).collect();
        wait_parked(&handles).await?;
        let park_seconds = started.elapsed().as_secs_f64();
        // Nothing answers them: all are still parked when measured.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let parked = ProcStatus::read();

        let started = Instant::now();
        let outcomes = cancel_all(&handles).await?;
        let cancel_seconds = started.elapsed().as_secs_f64();
        let after = ProcStatus::read();
        BenchResult::Ok(ParkedResult {
            executions,
            before,
            parked,
            after,
            park_seconds,
            cancel_seconds,
            outcomes,
        })
    });
    store.close();
    result
}

/// Runs the parked section in a child process, so that neither the other sections' freed
/// memory nor a first compilation of the component (done here first, into the cache) shows in
/// its figures.
fn parked_section(plan: &Plan, scratch: &Path, server: &Path) -> BenchResult<ParkedResult> {
    m3::Policy::new()?;
    let output = Command::new(std::env::current_exe()?)
        .arg(server)
        .arg(plan.parked.to_string())
        .arg(scratch.join("parked.sqlite"))
        .env(ROLE_VAR, "parked")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        return Err(format!("the parked section's process failed: {}", output.status).into());
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

// ---------------------------------------------------------------------------------------------
// Output

const DEFINITIONS: &str = "wire: the server runs behind a relay (this benchmark binary) that \
    timestamps each line it forwards; ask_to_seen_wire = pending_elicitation() returned the round \
    - the relay read the server's elicitation (input_required result / elicitation/create); \
    answer_to_delivered_wire = the relay read the answer on its way to the server (tools/call \
    retry with inputResponses / response to elicitation/create) - the answer call returned. \
    store (the fallback the shipping server's lack of timestamps calls for): \
    ask_to_seen_store = pending_elicitation() returned - the round's created_at (store clock); \
    answer_to_delivered_store = the round's delivered_at (store clock, stamped after the answer \
    was written to the server) - the answer call returned. The answer call is \
    respond_elicitation() in process, and submit_responses() on a second SqliteManagedInputStore \
    in another process across processes (that process reports when it returned). All clocks are \
    the system UTC clock; negative values mean delivery finished before the call had returned to \
    its caller.";

fn print_latencies(results: &[LatencyResult]) {
    let mut table = Table::new(
        "1-2. Round latency (ms; p50 / p99)   goals: p50 < 5 ms in process, < 25 ms across processes",
        &[
            "section",
            "rounds",
            "(a) ask->seen wire",
            "(a) store",
            "(b) answer->delivered wire",
            "(b) store",
            "goal (b wire, else store)",
        ],
    );
    for r in results {
        let limit = if r.name.starts_with("cross") {
            GOAL_CROSS_PROCESS_P50_MS
        } else {
            GOAL_IN_PROCESS_P50_MS
        };
        let pair = |s: &Option<Stats>| format!("{} / {}", ms(s, |s| s.p50), ms(s, |s| s.p99));
        let headline = r.deliver_wire.or(r.deliver_store);
        let ask_goal = if r.name.starts_with("cross") {
            String::new()
        } else {
            format!(
                "; (a) {}",
                goal(&r.ask_wire.or(r.ask_store), GOAL_IN_PROCESS_P50_MS)
            )
        };
        table.row(vec![
            r.name.clone(),
            r.rounds.to_string(),
            pair(&r.ask_wire),
            pair(&r.ask_store),
            pair(&r.deliver_wire),
            pair(&r.deliver_store),
            format!("(b) {}{ask_goal}", goal(&headline, limit)),
        ]);
    }
    table.print();

    let mut context = Table::new(
        "   Context (ms; p50 / p99)",
        &[
            "section",
            "server ask -> round created",
            "answer committed -> delivered (store)",
            "empty pending_elicitation() call",
            "answer call",
            "wall time",
        ],
    );
    for r in results {
        let pair = |s: &Option<Stats>| format!("{} / {}", ms(s, |s| s.p50), ms(s, |s| s.p99));
        context.row(vec![
            r.name.clone(),
            pair(&r.wire_ask_to_created),
            pair(&r.validated_to_delivered),
            pair(&r.poll_call),
            pair(&r.answer_call),
            format!("{:.1} s", r.seconds),
        ]);
    }
    context.print();
}

fn print_parked(p: &ParkedResult) {
    let per = p.rss_per_execution_mib();
    let mut table = Table::new(
        &format!(
            "3. {} executions parked at once (VmRSS of the process hosting them)   goal: < {GOAL_PARKED_MIB} MiB each",
            p.executions
        ),
        &["measure", "value"],
    );
    let mib = |kib: u64| kib as f64 / 1024.0;
    table.row(vec![
        "RSS before submitting".into(),
        format!(
            "{:.1} MiB (PSS {:.1} MiB; {} threads)",
            p.before.rss_mib(),
            mib(p.before.pss_kib),
            p.before.threads
        ),
    ]);
    table.row(vec![
        "RSS with all parked".into(),
        format!(
            "{:.1} MiB (PSS {:.1} MiB; {} threads)",
            p.parked.rss_mib(),
            mib(p.parked.pss_kib),
            p.parked.threads
        ),
    ]);
    table.row(vec![
        "RSS per parked execution".into(),
        format!(
            "{per:.3} MiB   {}",
            if per < GOAL_PARKED_MIB {
                "met"
            } else {
                "MISSED"
            }
        ),
    ]);
    table.row(vec![
        "  of which anonymous / file-backed".into(),
        format!(
            "{:.3} MiB / {:.3} MiB",
            p.per_execution_mib(|s| s.rss_anon_kib),
            p.per_execution_mib(|s| s.rss_file_kib)
        ),
    ]);
    table.row(vec![
        "PSS per parked execution (shared pages split)".into(),
        format!("{:.3} MiB", p.per_execution_mib(|s| s.pss_kib)),
    ]);
    table.row(vec![
        "RSS after cancelling all".into(),
        format!(
            "{:.1} MiB (peak {:.1} MiB; {} threads)",
            p.after.rss_mib(),
            mib(p.after.vm_hwm_kib),
            p.after.threads
        ),
    ]);
    table.row(vec![
        "time to park all / to cancel all".into(),
        format!("{:.2} s / {:.2} s", p.park_seconds, p.cancel_seconds),
    ]);
    table.row(vec!["outcomes".into(), format!("{:?}", p.outcomes)]);
    table.print();
}

fn to_json(
    plan: &Plan,
    server: &Path,
    latencies: &[LatencyResult],
    parked: &ParkedResult,
    total: Duration,
) -> Value {
    let latency = |name: &str| {
        latencies
            .iter()
            .find(|r| r.name == name)
            .map_or(Value::Null, LatencyResult::to_json)
    };
    // Each goal is on a p50; the `wire` figure when the relay ran, else the `store` one.
    let check = |s: Option<Stats>, limit: f64, figure: &str| {
        s.map_or(Value::Null, |s| {
            json!({"figure": figure, "max_p50_ms": limit, "p50_ms": s.p50, "met": s.p50 < limit})
        })
    };
    let goals = |r: Option<&LatencyResult>, limit: f64, with_ask: bool| {
        let Some(r) = r else {
            return Value::Null;
        };
        let (ask, deliver) = match r.deliver_wire {
            Some(_) => (r.ask_wire, r.deliver_wire),
            None => (r.ask_store, r.deliver_store),
        };
        let which = if r.deliver_wire.is_some() {
            "wire"
        } else {
            "store"
        };
        let mut goals = json!({
            "answer_to_delivered": check(deliver, limit, &format!("answer_to_delivered_{which}_ms")),
        });
        if with_ask {
            goals["ask_to_seen"] = check(ask, limit, &format!("ask_to_seen_{which}_ms"));
        }
        goals
    };
    let find = |name: &str| latencies.iter().find(|r| r.name == name);
    json!({
        "benchmark": "m3 executions",
        "created_at": Utc::now().to_rfc3339(),
        "machine": {
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "os": std::env::consts::OS,
            "arch": std::env::consts::ARCH,
        },
        "plan": plan.to_json(),
        "shipping_server": server.display().to_string(),
        "kit_options": "KitOptions::default() (lease 15 s, renewed every 5 s)",
        "total_seconds": total.as_secs_f64(),
        "latency_definitions": DEFINITIONS,
        "in_process": {
            "modern": latency("in-process modern"),
            "legacy": latency("in-process legacy"),
            "goals": goals(find("in-process modern"), GOAL_IN_PROCESS_P50_MS, true),
        },
        "cross_process": {
            "modern": latency("cross-process modern"),
            "goals": goals(find("cross-process modern"), GOAL_CROSS_PROCESS_P50_MS, false),
        },
        "parked": parked.to_json(),
    })
}

fn bench_main() -> BenchResult<()> {
    let started = Instant::now();
    let plan = Plan::from_args();
    let target = target_dir();
    let scratch = tempfile::Builder::new()
        .prefix("m3-bench-executions-")
        .tempdir()?;

    // The component's compiled artifact is cached under the target directory, never in the
    // user's cache (the answerer process inherits this).
    if std::env::var_os("M3_CACHE_DIR").is_none() {
        // SAFETY: set before this process starts any thread.
        unsafe { std::env::set_var("M3_CACHE_DIR", target.join("bench").join("component-cache")) };
    }

    println!(
        "m3 executions benchmark ({}; {} CPUs; polling {})",
        if plan.full { "full run" } else { "smoke pass" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if plan.poll_interval.is_zero() {
            "in a tight loop".to_string()
        } else {
            format!("every {:?}", plan.poll_interval)
        }
    );
    let server = shipping_server_binary()?;
    eprintln!("shipping server: {}", server.display());

    // The parked section runs in its own process (see `parked_section`).
    let parked = if plan.runs("parked") {
        eprintln!("parking {} executions at once ...", plan.parked);
        Some(parked_section(&plan, scratch.path(), &server)?)
    } else {
        None
    };
    let mut latencies = Vec::new();
    if plan.runs("in-process") {
        for era in [McpEra::Modern, McpEra::Legacy] {
            let name = format!("in-process {}", era_name(era));
            eprintln!(
                "{name}: {} executions x {} rounds ...",
                plan.in_process_executions, plan.rounds_per_execution
            );
            latencies.push(latency_section(
                &plan,
                scratch.path(),
                &server,
                &name,
                era,
                plan.in_process_executions,
                false,
            )?);
        }
    }
    if plan.runs("cross-process") {
        let name = "cross-process modern";
        eprintln!(
            "{name}: {} executions x {} rounds, answered by another process ...",
            plan.cross_process_executions, plan.rounds_per_execution
        );
        latencies.push(latency_section(
            &plan,
            scratch.path(),
            &server,
            name,
            McpEra::Modern,
            plan.cross_process_executions,
            true,
        )?);
    }

    if !latencies.is_empty() {
        print_latencies(&latencies);
    }
    if let Some(parked) = &parked {
        print_parked(parked);
    }

    let total = started.elapsed();
    println!("\ntotal: {:.1} s", total.as_secs_f64());
    match (plan.full, plan.only, &parked) {
        (true, None, Some(parked)) => {
            let document = to_json(&plan, &server, &latencies, parked, total);
            write_report("executions", &document)?;
        }
        _ => println!(
            "partial or smoke run: no JSON written (run `cargo bench -p m3 --bench executions`)"
        ),
    }
    Ok(())
}

fn main() -> BenchResult<()> {
    match std::env::var(ROLE_VAR).as_deref() {
        Ok("relay") => relay_main(),
        Ok("answerer") => answerer_main(),
        Ok("parked") => parked_main(),
        _ => bench_main(),
    }
}

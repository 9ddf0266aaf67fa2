//! The rounds benchmark against the peers a user would pick instead (`just bench-peers`, or
//! `cargo bench -p m3 --bench peers_rounds`); issue 7, items 1 and 2.
//!
//! The peers are the pinned ones of `host/benches/peers/` (`requirements.txt`), installed by
//! `host/benches/peers/install.sh` into `<target>/bench-peers/` (the benchmark runs it first; it
//! returns at once when the pins are installed). In one run on one machine, with warm-up and
//! several repetitions, the contenders alternating, it measures:
//!
//! 1. **End-to-end round cost with a real server.** The server is `tests/peers/booking_server.py`
//!    on the Python SDK (`mcp==2.3.0`): its tool `book_table` elicits a booking form once per
//!    call and then returns. Both eras: `modern` (2026-07-28, an `input_required` result and a
//!    retried call) and `legacy` (`elicitation/create` while the call is in flight). Contenders:
//!    - `python sdk`: the SDK's own client (`host/benches/peers/sdk_client.py`) over stdio,
//!      answering each elicitation from its in-memory callback at once (no persistence: the
//!      floor a user gets today);
//!    - `kit NORMAL` / `kit FULL`: this kit in managed mode, the scripted harness calling the
//!      tool once per step in one execution, its rounds in a SQLite file opened with
//!      [`m3::SqliteExecutionStore::open_with`] at `synchronous=NORMAL` or `FULL`, and this
//!      thread polling [`m3::ExecutionHandle::pending_elicitation`] in a tight loop and
//!      answering each round at once with [`m3::ExecutionHandle::respond_elicitation`].
//!
//!    A round's **period** is the time from the answerer seeing one elicitation to it seeing the
//!    next (the SDK: entry of the callback; the kit: `pending_elicitation()` returning a new
//!    round): the answer travelling to the server, the tool's result, the next call and the
//!    next elicitation. Each run starts its own server process, makes `warm-up + rounds + 1`
//!    calls and reports `rounds` periods after the warm-up ones (so neither process start-up nor
//!    the first calls count). Runs are kept short (60 rounds) and repeated instead: the kit's
//!    execution keeps every tool result of its script, so a round gets slower as one script
//!    grows (the JSON has each run's p50 by quarter to show that drift).
//!    Reported: rounds/s (per run; median and min..max over the repetitions), p50/p99 of the
//!    period (all runs' periods pooled) and the kit's added latency per round (kit p50 - SDK
//!    p50, same era; the spread is over per-repetition pairs). Goal: < 1 ms added at p50 at
//!    NORMAL.
//! 2. **Durable pause/resume throughput.** LangGraph (`host/benches/peers/langgraph_bench.py`,
//!    one long-lived Python process): a `StateGraph` whose node calls `interrupt()` with the
//!    booking form, resumed with `Command(resume=answer)`, checkpointed by `SqliteSaver` on a
//!    SQLite file (WAL) whose connection has `PRAGMA synchronous` set; one cycle = pause +
//!    resume on a fresh thread. Against the kit's full round lifecycle on a SQLite file through
//!    [`m3::SqliteManagedInputStore`] at the same setting: `create_round` (owned),
//!    `submit_responses`, `start_delivery`, `mark_delivered`, `resolve` (five commits). Batches
//!    are sized to take about the same time; the two contenders alternate (their order flips
//!    every repetition). Reported: cycles/s (median, min..max) and kit / LangGraph (ratio of
//!    the medians; min..max over per-repetition pairs). Goals: >= 5x at NORMAL, >= 2x at FULL.
//!
//! It prints tables and writes `target/bench/peers_rounds.json` (under `$CARGO_TARGET_DIR` when
//! set). It measures and reports; it never asserts on a time. Run without `--bench` (as `cargo
//! test --workspace` does) or with `--smoke`, it runs a short smoke pass (one repetition, a few
//! rounds) that writes nothing; `--only=rounds` or `--only=lifecycle` runs one section (no JSON);
//! `--reps=N` and `--rounds=N` change the repetitions and the rounds per run;
//! `--poll-interval-us=N` makes the kit's answerer sleep between polls instead of spinning.

use chrono::Utc;
use m3::{
    AgentSpec, ElicitationRequest, ElicitationResponse, ExecutionHandle, ExecutionStatus,
    HumanInput, ManagedInputStatus, ManagedInputStore, McpEra, McpTestKit, NewRound, OwnerClaim,
    PendingElicitationRound, Script, SqliteExecutionStore, SqliteManagedInputStore, StdioServer,
    StoreOptions, Submission, Synchronous,
};
use m3_bench::fixture::{era_name, path_text};
use m3_bench::stats::{Stats, secs, spread_text, stats_json, sync_name};
use m3_bench::{BenchResult, RunArgs, Table, loadavg, target_dir, workspace_dir, write_report};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The sections of the benchmark, for `--only=`.
const SECTIONS: [&str; 2] = ["rounds", "lifecycle"];

/// Goals printed next to the figures (never asserted).
const GOAL_ADDED_P50_MS: f64 = 1.0;
const GOAL_RATIO_NORMAL: f64 = 5.0;
const GOAL_RATIO_FULL: f64 = 2.0;

/// How long any single wait may take before the benchmark gives up (a hang guard).
const WAIT_LIMIT: Duration = Duration::from_secs(120);

/// The server's tool, as the kit names it (`server:tool`).
const TOOL: &str = "booking:book_table";
/// What the tool answers once booked (the SDK client checks the same).
const BOOKED: &str = "booked Chez M3 for Asha";
/// Commits of one kit lifecycle.
const COMMITS_PER_LIFECYCLE: usize = 5;

fn tool_arguments() -> Value {
    json!({"restaurant": "Chez M3"})
}

/// The answer to the booking form (the SDK client and LangGraph answer the same).
fn booking_answer() -> Value {
    json!({"name": "Asha", "guests": 3, "seating": "terrace", "deposit": 12.5, "high_chair": true})
}

/// The booking form as the server asks for it (what the lifecycle section stores).
fn booking_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 40,
                     "description": "Who the table is for"},
            "guests": {"type": "integer", "minimum": 1, "maximum": 12,
                       "description": "How many people"},
            "seating": {"type": "string", "enum": ["indoor", "terrace"],
                        "description": "Where to sit"},
            "deposit": {"type": "number", "minimum": 0, "maximum": 500, "default": 0.0,
                        "description": "Deposit in euros"},
            "high_chair": {"type": "boolean", "default": false,
                           "description": "A high chair is needed"}
        },
        "required": ["name", "guests", "seating"]
    })
}

// ---------------------------------------------------------------------------------------------
// Run configuration

#[derive(Debug, Clone, Copy)]
struct Plan {
    /// Full run (`--bench`) or smoke pass.
    full: bool,
    /// `--only=rounds|lifecycle`: one section; no JSON.
    only: Option<&'static str>,
    /// Repetitions of every contender (each section).
    reps: usize,
    /// Rounds 1: measured periods per run, and warm-up calls before them.
    rounds: usize,
    warmup_rounds: usize,
    /// Rounds 2: warm-up time of each contender, and the time one batch should take.
    lifecycle_warmup: Duration,
    batch_target: Duration,
    /// Smallest batch (smoke pass: the batch).
    min_batch: usize,
    /// Sleep between two `pending_elicitation()` calls (zero, the default: spin).
    poll_interval: Duration,
}

impl Plan {
    fn from_args() -> Self {
        let run = RunArgs::from_env();
        let (args, full) = (&run.args, run.full);
        let only = run.only(&SECTIONS, "section");
        let number = |flag: &str| -> Option<usize> {
            let value = args.iter().find_map(|a| a.strip_prefix(flag))?;
            match value.parse::<usize>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    eprintln!("{flag} takes a positive number, not `{value}`");
                    std::process::exit(2);
                }
            }
        };
        let mut plan = if full {
            Self {
                full,
                only,
                reps: 7,
                rounds: 60,
                warmup_rounds: 5,
                lifecycle_warmup: Duration::from_millis(600),
                batch_target: Duration::from_millis(900),
                min_batch: 20,
                poll_interval: Duration::ZERO,
            }
        } else {
            Self {
                full,
                only,
                reps: 1,
                rounds: 4,
                warmup_rounds: 1,
                lifecycle_warmup: Duration::ZERO,
                batch_target: Duration::ZERO,
                min_batch: 3,
                poll_interval: Duration::ZERO,
            }
        };
        // Overrides (for investigation; a run with them still writes the JSON when full).
        if let Some(reps) = number("--reps=") {
            plan.reps = reps;
        }
        if let Some(rounds) = number("--rounds=") {
            plan.rounds = rounds;
        }
        if let Some(us) = number("--poll-interval-us=") {
            plan.poll_interval = Duration::from_micros(us as u64);
        }
        plan
    }

    fn runs(&self, section: &str) -> bool {
        self.only.is_none_or(|only| only == section)
    }

    fn to_json(self) -> Value {
        json!({
            "full": self.full,
            "only": self.only,
            "repetitions": self.reps,
            "rounds_per_run": self.rounds,
            "warmup_rounds_per_run": self.warmup_rounds,
            "lifecycle_warmup_ms": self.lifecycle_warmup.as_millis() as u64,
            "lifecycle_batch_target_ms": self.batch_target.as_millis() as u64,
            "poll_interval_us": self.poll_interval.as_micros() as u64,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Locations and the peers

/// The installed peers and the scripts that drive them.
struct Peers {
    /// The venv's Python (`<target>/bench-peers/venv/bin/python`).
    python: PathBuf,
    /// `tests/peers/booking_server.py`.
    server: PathBuf,
    /// `host/benches/peers/sdk_client.py`.
    sdk_client: PathBuf,
    /// `host/benches/peers/langgraph_bench.py`.
    langgraph: PathBuf,
    /// Versions of the Python packages that matter, as installed.
    versions: Value,
}

impl Peers {
    /// Runs `install.sh` (it returns at once when the pins are installed) and finds the venv.
    fn install(target: &Path) -> BenchResult<Self> {
        let workspace = workspace_dir();
        let pins = workspace.join("host").join("benches").join("peers");
        let output = Command::new("bash")
            .arg(pins.join("install.sh"))
            .env("CARGO_TARGET_DIR", target)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("running install.sh: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "{} failed ({}): the peers are not installed",
                pins.join("install.sh").display(),
                output.status
            )
            .into());
        }
        let printed = String::from_utf8_lossy(&output.stdout);
        let dir = printed
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| PathBuf::from(l.trim()))
            .ok_or("install.sh printed no directory")?;
        let python = dir.join("venv").join("bin").join("python");
        if !python.is_file() {
            return Err(format!("install.sh left no {}", python.display()).into());
        }
        let versions = Command::new(&python)
            .args([
                "-c",
                "import json, platform, importlib.metadata as m\n\
                 names = ['mcp', 'langgraph', 'langgraph-checkpoint-sqlite', 'langgraph-checkpoint']\n\
                 v = {n: m.version(n) for n in names}\n\
                 v['python'] = platform.python_version()\n\
                 import sqlite3; v['python_sqlite'] = sqlite3.sqlite_version\n\
                 print(json.dumps(v))",
            ])
            .stderr(Stdio::inherit())
            .output()?;
        let versions: Value = serde_json::from_slice(&output_ok(versions, "version check")?)?;
        let peers = Self {
            python,
            server: workspace
                .join("tests")
                .join("peers")
                .join("booking_server.py"),
            sdk_client: pins.join("sdk_client.py"),
            langgraph: pins.join("langgraph_bench.py"),
            versions,
        };
        for script in [&peers.server, &peers.sdk_client, &peers.langgraph] {
            if !script.is_file() {
                return Err(format!("{} is missing", script.display()).into());
            }
        }
        Ok(peers)
    }
}

fn output_ok(output: std::process::Output, what: &str) -> BenchResult<Vec<u8>> {
    if output.status.success() {
        Ok(output.stdout)
    } else {
        Err(format!(
            "{what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into())
    }
}

// ---------------------------------------------------------------------------------------------
// 1. End-to-end round cost with a real server

/// A contender of section 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RoundContender {
    Sdk,
    Kit(Synchronous),
}

impl RoundContender {
    const ALL: [Self; 3] = [
        Self::Sdk,
        Self::Kit(Synchronous::Normal),
        Self::Kit(Synchronous::Full),
    ];

    fn name(self) -> String {
        match self {
            Self::Sdk => "python sdk (in memory)".into(),
            Self::Kit(sync) => format!("kit {}", sync_name(sync)),
        }
    }

    fn key(self) -> &'static str {
        match self {
            Self::Sdk => "python_sdk",
            Self::Kit(Synchronous::Normal) => "kit_normal",
            Self::Kit(Synchronous::Full) => "kit_full",
        }
    }
}

/// One run of one contender: its measured periods (ms) and rounds per second.
#[derive(Debug, Clone)]
struct RoundRun {
    periods_ms: Vec<f64>,
    rounds_per_s: f64,
    /// The SDK only: each measured `call_tool`, start to result (ms).
    call_ms: Vec<f64>,
}

impl RoundRun {
    fn p50(&self) -> f64 {
        Stats::of(&self.periods_ms).map_or(f64::NAN, |s| s.p50)
    }

    /// The p50 of each quarter of the run, in order (drift as the run goes on: the kit's
    /// execution keeps every tool result of its script).
    fn quarter_p50s(&self) -> Vec<f64> {
        let n = self.periods_ms.len();
        (0..4)
            .filter_map(|q| Stats::of(&self.periods_ms[q * n / 4..(q + 1) * n / 4]))
            .map(|s| s.p50)
            .collect()
    }
}

/// The SDK's client over stdio against the server; `rounds` periods after `warmup` calls.
fn sdk_run(peers: &Peers, era: McpEra, warmup: usize, rounds: usize) -> BenchResult<RoundRun> {
    let output = Command::new(&peers.python)
        .arg(&peers.sdk_client)
        .args(["--era", era_name(era)])
        .args(["--rounds", &rounds.to_string()])
        .args(["--warmup", &warmup.to_string()])
        .arg("--")
        .arg(&peers.python)
        .arg(&peers.server)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    let stdout = output_ok(output, "sdk_client.py")?;
    let report: Value = serde_json::from_slice(&stdout)?;
    let numbers = |key: &str| -> Vec<f64> {
        report[key]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    let periods_ms = numbers("period_ms");
    let seconds = report["seconds"].as_f64().unwrap_or(0.0);
    if periods_ms.len() != rounds || seconds <= 0.0 {
        return Err(format!("sdk_client.py reported {report}").into());
    }
    let expected = match era {
        McpEra::Legacy => "2025",
        _ => "2026-07-28",
    };
    let version = report["protocol_version"].as_str().unwrap_or_default();
    if !version.starts_with(expected) {
        return Err(format!("sdk_client.py spoke {version} in the {era:?} era").into());
    }
    Ok(RoundRun {
        rounds_per_s: periods_ms.len() as f64 / seconds,
        periods_ms,
        call_ms: numbers("call_ms"),
    })
}

/// Polls `pending_elicitation()` in a tight loop (or every `poll_interval`) until it returns a round other than `last`.
fn wait_new_round(
    handle: &ExecutionHandle,
    last: Option<&str>,
    poll_interval: Duration,
) -> BenchResult<PendingElicitationRound> {
    let started = Instant::now();
    let mut next_check = started + Duration::from_secs(1);
    loop {
        match handle.pending_elicitation()? {
            Some(round) if last != Some(round.round_id.as_str()) => return Ok(round),
            _ => {}
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
                return Err(format!("no new pending round within {WAIT_LIMIT:?}").into());
            }
        }
        if poll_interval.is_zero() {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(poll_interval);
        }
    }
}

/// The kit in managed mode: one execution of `warmup + rounds + 1` calls on a fresh SQLite
/// file at `sync`, every round answered by this thread as soon as it sees it.
fn kit_run(
    peers: &Peers,
    scratch: &Path,
    run: usize,
    era: McpEra,
    sync: Synchronous,
    plan: &Plan,
) -> BenchResult<RoundRun> {
    let (warmup, rounds, poll_interval) = (plan.warmup_rounds, plan.rounds, plan.poll_interval);
    let database = scratch.join(format!(
        "kit-{}-{}-{run}.sqlite",
        era_name(era),
        sync_name(sync).to_lowercase()
    ));
    let store = Arc::new(SqliteExecutionStore::open_with(
        &database,
        StoreOptions {
            synchronous: sync,
            ..StoreOptions::default()
        },
    )?);
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    let calls = warmup + rounds + 1;
    let script = (0..calls).fold(Script::default(), |s, _| s.then(TOOL, tool_arguments()));
    let agent = kit.agents([AgentSpec::scripted(script)])?.remove(0);
    let server = StdioServer::new("booking", path_text(&peers.python)?)
        .args([path_text(&peers.server)?])
        .era(era);
    let handle = agent.submit(
        Submission::new("Book a table each time.", server)
            .tools([TOOL])
            .human_input(HumanInput::Managed),
    )?;
    let answer = booking_answer();
    let mut seen = Vec::with_capacity(calls);
    let mut last: Option<String> = None;
    for _ in 0..calls {
        let round = wait_new_round(&handle, last.as_deref(), poll_interval)?;
        seen.push(Instant::now());
        let key = match round.requests.keys().collect::<Vec<_>>().as_slice() {
            [key] => (*key).clone(),
            keys => return Err(format!("a round of {} requests: {keys:?}", keys.len()).into()),
        };
        handle.respond_elicitation(
            &round.round_id,
            BTreeMap::from([(key, ElicitationResponse::accept(answer.clone()))]),
            &format!("answer-{}", round.round_id),
        )?;
        last = Some(round.round_id);
    }
    let result = handle.result(Some(WAIT_LIMIT))?;
    let tools = &result.outcome.tool_results;
    if !result.succeeded()
        || tools.len() != calls
        || tools.iter().any(|t| !t.text().starts_with(BOOKED))
    {
        return Err(format!(
            "the kit's execution did not book {calls} tables: {} {:?}",
            result.outcome,
            tools.last()
        )
        .into());
    }
    drop(handle);
    drop(kit);
    store.close();
    let measured = &seen[warmup..];
    let periods_ms: Vec<f64> = measured
        .windows(2)
        .map(|w| secs(w[1] - w[0]) * 1e3)
        .collect();
    let seconds = secs(measured[measured.len() - 1] - measured[0]);
    Ok(RoundRun {
        rounds_per_s: periods_ms.len() as f64 / seconds,
        periods_ms,
        call_ms: Vec::new(),
    })
}

/// Results of one era and contender.
struct RoundResult {
    era: McpEra,
    contender: RoundContender,
    runs: Vec<RoundRun>,
}

impl RoundResult {
    fn pooled(&self) -> Option<Stats> {
        let all: Vec<f64> = self
            .runs
            .iter()
            .flat_map(|r| r.periods_ms.iter().copied())
            .collect();
        Stats::of(&all)
    }

    fn rates(&self) -> Option<Stats> {
        Stats::of(&self.runs.iter().map(|r| r.rounds_per_s).collect::<Vec<_>>())
    }

    fn run_p50s(&self) -> Option<Stats> {
        Stats::of(&self.runs.iter().map(RoundRun::p50).collect::<Vec<_>>())
    }
}

fn rounds_section(
    plan: &Plan,
    peers: &Peers,
    scratch: &Path,
) -> BenchResult<(Vec<RoundResult>, f64)> {
    let started = Instant::now();
    let eras = [McpEra::Modern, McpEra::Legacy];
    let mut results: Vec<RoundResult> = eras
        .iter()
        .flat_map(|era| {
            RoundContender::ALL.iter().map(|c| RoundResult {
                era: *era,
                contender: *c,
                runs: Vec::new(),
            })
        })
        .collect();
    for rep in 0..plan.reps {
        // The eras and the contenders rotate between repetitions.
        for e in 0..eras.len() {
            let era = eras[(rep + e) % eras.len()];
            for turn in 0..RoundContender::ALL.len() {
                let contender = RoundContender::ALL[(rep + turn) % RoundContender::ALL.len()];
                eprintln!(
                    "  rounds rep {}/{}: {} {} ...",
                    rep + 1,
                    plan.reps,
                    era_name(era),
                    contender.name()
                );
                let run = match contender {
                    RoundContender::Sdk => sdk_run(peers, era, plan.warmup_rounds, plan.rounds)?,
                    RoundContender::Kit(sync) => kit_run(peers, scratch, rep, era, sync, plan)?,
                };
                eprintln!(
                    "    {:.0} rounds/s, period p50 {:.2} ms (by quarter: {})",
                    run.rounds_per_s,
                    run.p50(),
                    run.quarter_p50s()
                        .iter()
                        .map(|p| format!("{p:.2}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                );
                if let Some(r) = results
                    .iter_mut()
                    .find(|r| r.era == era && r.contender == contender)
                {
                    r.runs.push(run);
                }
            }
        }
    }
    Ok((results, secs(started.elapsed())))
}

/// The kit's added latency per round in `era` at `sync`: pooled kit p50 - pooled SDK p50, and
/// per repetition (kit run p50 - SDK run p50).
fn added(results: &[RoundResult], era: McpEra, sync: Synchronous) -> Option<(f64, Stats)> {
    let find = |c: RoundContender| results.iter().find(|r| r.era == era && r.contender == c);
    let sdk = find(RoundContender::Sdk)?;
    let kit = find(RoundContender::Kit(sync))?;
    let headline = kit.pooled()?.p50 - sdk.pooled()?.p50;
    let pairs: Vec<f64> = kit
        .runs
        .iter()
        .zip(&sdk.runs)
        .map(|(k, s)| k.p50() - s.p50())
        .collect();
    Some((headline, Stats::of(&pairs)?))
}

fn print_rounds(results: &[RoundResult], plan: &Plan) {
    let mut table = Table::new(
        &format!(
            "1. End-to-end round cost, booking_server.py (mcp 2.3.0) over stdio; {} runs x {} rounds \
             each   goal: kit adds < {GOAL_ADDED_P50_MS} ms per round at p50 at NORMAL",
            plan.reps, plan.rounds
        ),
        &[
            "era",
            "contender",
            "rounds/s median (min..max)",
            "period p50",
            "p99",
            "run p50s min..max",
            "kit added p50 (pairs min..max)",
            "goal",
        ],
    );
    for r in results {
        let pooled = r.pooled();
        let ms = |f: fn(&Stats) -> f64| {
            pooled.map_or_else(|| "-".into(), |s| format!("{:.2} ms", f(&s)))
        };
        let (added_cell, goal_cell) = match r.contender {
            RoundContender::Sdk => ("(baseline)".to_string(), String::new()),
            RoundContender::Kit(sync) => match added(results, r.era, sync) {
                Some((headline, pairs)) => (
                    format!("{headline:+.2} ms ({:+.2}..{:+.2})", pairs.min, pairs.max),
                    if sync == Synchronous::Normal {
                        if headline < GOAL_ADDED_P50_MS {
                            format!("met (< {GOAL_ADDED_P50_MS} ms)")
                        } else {
                            format!("MISSED (< {GOAL_ADDED_P50_MS} ms)")
                        }
                    } else {
                        "(no goal at FULL)".into()
                    },
                ),
                None => ("-".into(), String::new()),
            },
        };
        table.row(vec![
            era_name(r.era).into(),
            r.contender.name(),
            spread_text(r.rates().as_ref(), 0),
            ms(|s| s.p50),
            ms(|s| s.p99),
            r.run_p50s()
                .map_or_else(|| "-".into(), |s| format!("{:.2}..{:.2} ms", s.min, s.max)),
            added_cell,
            goal_cell,
        ]);
    }
    table.print();
    println!(
        "   period = from the answerer seeing one elicitation to it seeing the next (answer, \
         delivery, the tool's result, the next call, the next elicitation); the kit's answerer \
         polls pending_elicitation() {}",
        if plan.poll_interval.is_zero() {
            "in a tight loop".to_string()
        } else {
            format!("every {:?}", plan.poll_interval)
        }
    );
}

fn rounds_json(results: &[RoundResult]) -> Value {
    let mut eras = serde_json::Map::new();
    for era in [McpEra::Modern, McpEra::Legacy] {
        let mut entry = serde_json::Map::new();
        for r in results.iter().filter(|r| r.era == era) {
            let sdk_calls: Vec<f64> = r
                .runs
                .iter()
                .flat_map(|run| run.call_ms.iter().copied())
                .collect();
            let mut value = json!({
                "contender": r.contender.name(),
                "rounds_per_second": stats_json(r.rates(), "1/s"),
                "period_ms": stats_json(r.pooled(), "ms"),
                "run_p50_ms": stats_json(r.run_p50s(), "ms"),
                "runs": r.runs.iter().map(|run| json!({
                    "rounds": run.periods_ms.len(),
                    "rounds_per_second": run.rounds_per_s,
                    "period_p50_ms": run.p50(),
                    "period_p50_ms_by_quarter": run.quarter_p50s(),
                })).collect::<Vec<_>>(),
            });
            if !sdk_calls.is_empty() {
                value["call_tool_ms"] = stats_json(Stats::of(&sdk_calls), "ms");
            }
            if let RoundContender::Kit(sync) = r.contender
                && let Some((headline, pairs)) = added(results, era, sync)
            {
                value["added_p50_ms"] = json!(headline);
                value["added_p50_ms_per_repetition"] = pairs.to_json("ms");
                if sync == Synchronous::Normal {
                    value["goal"] = json!({
                        "max_added_p50_ms": GOAL_ADDED_P50_MS,
                        "met": headline < GOAL_ADDED_P50_MS,
                    });
                }
            }
            entry.insert(r.contender.key().into(), value);
        }
        eras.insert(era_name(era).into(), Value::Object(entry));
    }
    Value::Object(eras)
}

// ---------------------------------------------------------------------------------------------
// 2. Durable pause/resume throughput

/// The LangGraph contender: `langgraph_bench.py --serve`, driven over its stdin and stdout.
struct LangGraph {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// SQL transactions one cycle commits, per synchronous mode (counted by the script).
    commits_per_cycle: BTreeMap<&'static str, u64>,
}

impl LangGraph {
    fn start(peers: &Peers, dir: &Path) -> BenchResult<Self> {
        let mut child = Command::new(&peers.python)
            .arg(&peers.langgraph)
            .arg("--serve")
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("langgraph: no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("langgraph: no stdout")?);
        Ok(Self {
            child,
            stdin,
            stdout,
            commits_per_cycle: BTreeMap::new(),
        })
    }

    /// Runs `cycles` pause/resume cycles at `sync`; LangGraph's own cycles per second.
    fn run(&mut self, sync: Synchronous, cycles: usize) -> BenchResult<f64> {
        writeln!(self.stdin, "run {} {cycles}", sync_name(sync))?;
        self.stdin.flush()?;
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            return Err("langgraph_bench.py ended".into());
        }
        let report: Value = serde_json::from_str(&line)?;
        if let Some(commits) = report["commits_per_cycle"].as_u64() {
            self.commits_per_cycle.insert(sync_name(sync), commits);
        }
        match report["cycles_per_s"].as_f64() {
            Some(rate) if report["cycles"] == json!(cycles) => Ok(rate),
            _ => Err(format!("langgraph_bench.py reported {line}").into()),
        }
    }

    fn finish(mut self) -> BenchResult<()> {
        writeln!(self.stdin, "quit")?;
        drop(self.stdin);
        let status = self.child.wait()?;
        if !status.success() {
            return Err(format!("langgraph_bench.py exited with {status}").into());
        }
        Ok(())
    }
}

/// The kit's round lifecycle on one store.
struct Lifecycles {
    store: SqliteManagedInputStore,
    requests: BTreeMap<String, ElicitationRequest>,
    answer: BTreeMap<String, ElicitationResponse>,
    prefix: String,
    next: u64,
}

impl Lifecycles {
    fn open(path: &Path, sync: Synchronous) -> BenchResult<Self> {
        let store = SqliteManagedInputStore::open(
            path,
            StoreOptions {
                synchronous: sync,
                ..StoreOptions::default()
            },
        )?;
        Ok(Self {
            store,
            requests: BTreeMap::from([(
                "booking".to_string(),
                ElicitationRequest::form(
                    "Book a table at Chez M3: who, how many, where?",
                    booking_schema(),
                ),
            )]),
            answer: BTreeMap::from([(
                "booking".to_string(),
                ElicitationResponse::accept(booking_answer()),
            )]),
            prefix: format!("round-{}", sync_name(sync).to_lowercase()),
            next: 0,
        })
    }

    /// Runs `count` full lifecycles; lifecycles per second.
    fn run(&mut self, count: usize) -> BenchResult<f64> {
        let rounds: Vec<NewRound> = (0..count)
            .map(|_| {
                self.next += 1;
                NewRound::new(
                    format!("{}-{}", self.prefix, self.next),
                    "exec-bench",
                    "booking",
                    "book_table",
                    self.requests.clone(),
                )
                .owned_by(OwnerClaim::new("worker-bench"))
            })
            .collect();
        let started = Instant::now();
        for round in &rounds {
            let id = round.round_id.as_str();
            let lease = self
                .store
                .create_round(round)?
                .lease
                .ok_or("an owned round has no lease")?;
            self.store
                .submit_responses(id, &self.answer, &format!("answer-{id}"))?;
            self.store
                .start_delivery(id, &lease, &format!("deliver-{id}"))?;
            self.store.mark_delivered(id, &lease)?;
            let resolved = self.store.resolve(id, &lease)?;
            if resolved.status != ManagedInputStatus::Resolved {
                return Err(format!("round {id} ended {}", resolved.status).into());
            }
        }
        Ok(count as f64 / secs(started.elapsed()))
    }
}

struct LifecycleResult {
    sync: Synchronous,
    kit_batch: usize,
    langgraph_batch: usize,
    kit: Option<Stats>,
    langgraph: Option<Stats>,
    /// Per repetition: kit / LangGraph.
    pair_ratios: Option<Stats>,
    /// SQL transactions one LangGraph cycle commits (the kit's lifecycle commits five).
    langgraph_commits: Option<u64>,
}

impl LifecycleResult {
    fn ratio(&self) -> Option<f64> {
        Some(self.kit?.p50 / self.langgraph?.p50)
    }

    fn goal(&self) -> f64 {
        match self.sync {
            Synchronous::Normal => GOAL_RATIO_NORMAL,
            Synchronous::Full => GOAL_RATIO_FULL,
        }
    }
}

fn lifecycle_section(
    plan: &Plan,
    peers: &Peers,
    scratch: &Path,
) -> BenchResult<(Vec<LifecycleResult>, f64)> {
    let started = Instant::now();
    let dir = scratch.join("lifecycle");
    std::fs::create_dir_all(&dir)?;
    let mut langgraph = LangGraph::start(peers, &dir)?;

    struct Contenders {
        sync: Synchronous,
        kit: Lifecycles,
        kit_batch: usize,
        langgraph_batch: usize,
        kit_rates: Vec<f64>,
        langgraph_rates: Vec<f64>,
    }

    // Warm up each contender and size its batches from its warm-up rate.
    let batch = |rate: f64| -> usize {
        ((rate * secs(plan.batch_target)).round() as usize).clamp(plan.min_batch, 20_000)
    };
    let warm = |run: &mut dyn FnMut(usize) -> BenchResult<f64>| -> BenchResult<f64> {
        let started = Instant::now();
        let mut rate = run(plan.min_batch)?;
        let mut rates = Vec::new();
        while started.elapsed() < plan.lifecycle_warmup || (plan.full && rates.len() < 3) {
            // Batches of about a tenth of a second; the first batch (cold) does not count.
            rate = run(((rate * 0.1).round() as usize).max(plan.min_batch))?;
            rates.push(rate);
        }
        Ok(Stats::of(&rates).map_or(rate, |s| s.p50))
    };
    let mut all = Vec::new();
    for sync in [Synchronous::Normal, Synchronous::Full] {
        eprintln!("  lifecycle warm-up {} ...", sync_name(sync));
        let mut kit = Lifecycles::open(
            &dir.join(format!("kit-{}.sqlite", sync_name(sync).to_lowercase())),
            sync,
        )?;
        let kit_rate = warm(&mut |n| kit.run(n))?;
        let langgraph_rate = warm(&mut |n| langgraph.run(sync, n))?;
        all.push(Contenders {
            sync,
            kit,
            kit_batch: batch(kit_rate),
            langgraph_batch: batch(langgraph_rate),
            kit_rates: Vec::new(),
            langgraph_rates: Vec::new(),
        });
    }

    for rep in 0..plan.reps {
        for c in &mut all {
            eprintln!(
                "  lifecycle rep {}/{}: {} ({} kit lifecycles, {} LangGraph cycles) ...",
                rep + 1,
                plan.reps,
                sync_name(c.sync),
                c.kit_batch,
                c.langgraph_batch
            );
            // The contenders alternate: which goes first flips every repetition.
            for turn in 0..2 {
                if (rep + turn) % 2 == 0 {
                    c.kit_rates.push(c.kit.run(c.kit_batch)?);
                } else {
                    c.langgraph_rates
                        .push(langgraph.run(c.sync, c.langgraph_batch)?);
                }
            }
        }
    }
    let commits = langgraph.commits_per_cycle.clone();
    langgraph.finish()?;

    let results = all
        .into_iter()
        .map(|c| {
            let pairs: Vec<f64> = c
                .kit_rates
                .iter()
                .zip(&c.langgraph_rates)
                .map(|(k, l)| k / l)
                .collect();
            LifecycleResult {
                sync: c.sync,
                kit_batch: c.kit_batch,
                langgraph_batch: c.langgraph_batch,
                kit: Stats::of(&c.kit_rates),
                langgraph: Stats::of(&c.langgraph_rates),
                pair_ratios: Stats::of(&pairs),
                langgraph_commits: commits.get(sync_name(c.sync)).copied(),
            }
        })
        .collect();
    Ok((results, secs(started.elapsed())))
}

fn print_lifecycles(results: &[LifecycleResult], plan: &Plan) {
    let mut table = Table::new(
        &format!(
            "2. Durable pause/resume on a SQLite file; {} repetitions   goals: kit >= \
             {GOAL_RATIO_NORMAL}x LangGraph at NORMAL, >= {GOAL_RATIO_FULL}x at FULL",
            plan.reps
        ),
        &[
            "synchronous",
            "kit lifecycles/s median (min..max)",
            "LangGraph cycles/s median (min..max)",
            "kit / LangGraph",
            "pairs min..max",
            "commits per cycle kit / LG",
            "goal",
        ],
    );
    for r in results {
        let goal = r.goal();
        table.row(vec![
            sync_name(r.sync).into(),
            spread_text(r.kit.as_ref(), 0),
            spread_text(r.langgraph.as_ref(), 0),
            r.ratio().map_or_else(|| "-".into(), |x| format!("{x:.1}x")),
            r.pair_ratios
                .map_or_else(|| "-".into(), |s| format!("{:.1}x..{:.1}x", s.min, s.max)),
            format!(
                "{COMMITS_PER_LIFECYCLE} / {}",
                r.langgraph_commits
                    .map_or_else(|| "-".into(), |c| c.to_string())
            ),
            match r.ratio() {
                Some(x) if x >= goal => format!("met (>= {goal}x)"),
                Some(_) => format!("MISSED (>= {goal}x)"),
                None => "-".into(),
            },
        ]);
    }
    table.print();
    println!(
        "   kit lifecycle = create_round (owned), submit_responses, start_delivery, \
         mark_delivered, resolve ({COMMITS_PER_LIFECYCLE} commits, each on a connection of its \
         own, reused while idle: the store's strategy); LangGraph cycle = invoke to interrupt() + \
         invoke(Command(resume=...)), SqliteSaver on one connection, default durability"
    );
}

fn lifecycles_json(results: &[LifecycleResult]) -> Value {
    let mut out = serde_json::Map::new();
    for r in results {
        out.insert(
            sync_name(r.sync).to_lowercase(),
            json!({
                "kit_lifecycles_per_second": stats_json(r.kit, "1/s"),
                "langgraph_cycles_per_second": stats_json(r.langgraph, "1/s"),
                "kit_lifecycles_per_batch": r.kit_batch,
                "langgraph_cycles_per_batch": r.langgraph_batch,
                "ratio": r.ratio(),
                "pair_ratios": stats_json(r.pair_ratios, "ratio"),
                "kit_commits_per_lifecycle": COMMITS_PER_LIFECYCLE,
                "langgraph_commits_per_cycle": r.langgraph_commits,
                "goal": {"min_ratio": r.goal(), "met": r.ratio().map(|x| x >= r.goal())},
            }),
        );
    }
    Value::Object(out)
}

// ---------------------------------------------------------------------------------------------
// Main

fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
}

fn main() -> BenchResult<()> {
    let started = Instant::now();
    let load_at_start = loadavg();
    let plan = Plan::from_args();
    let target = target_dir();
    // The component's compiled artifact is cached under the target directory, never in the
    // user's cache.
    if std::env::var_os("M3_CACHE_DIR").is_none() {
        // SAFETY: set before this process starts any thread.
        unsafe { std::env::set_var("M3_CACHE_DIR", target.join("bench").join("component-cache")) };
    }
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "m3 peers rounds benchmark ({}; {cpus} CPUs)",
        if plan.full { "full run" } else { "smoke pass" }
    );
    let peers = Peers::install(&target)?;
    eprintln!("peers: {} {}", peers.python.display(), peers.versions);
    let scratch = tempfile::Builder::new()
        .prefix("m3-bench-peers-rounds-")
        .tempdir()?;

    let rounds = if plan.runs("rounds") {
        eprintln!("1. rounds: {} repetitions ...", plan.reps);
        Some(rounds_section(&plan, &peers, scratch.path())?)
    } else {
        None
    };
    let lifecycles = if plan.runs("lifecycle") {
        eprintln!("2. pause/resume: {} repetitions ...", plan.reps);
        Some(lifecycle_section(&plan, &peers, scratch.path())?)
    } else {
        None
    };
    if let Some((results, _)) = &rounds {
        print_rounds(results, &plan);
    }
    if let Some((results, _)) = &lifecycles {
        print_lifecycles(results, &plan);
    }
    let total = started.elapsed();
    println!(
        "\ntotal: {:.1} s (load average at start {}, now {})",
        secs(total),
        load_at_start.as_deref().unwrap_or("-"),
        loadavg().as_deref().unwrap_or("-")
    );

    match (plan.full, &rounds, &lifecycles) {
        (true, Some((rounds, rounds_s)), Some((lifecycles, lifecycles_s))) => {
            let document = json!({
                "benchmark": "m3 peers_rounds",
                "created_at": Utc::now().to_rfc3339(),
                "machine": {
                    "cpus": cpus,
                    "cpu_model": cpu_model(),
                    "os": std::env::consts::OS,
                    "arch": std::env::consts::ARCH,
                    "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease")
                        .ok().map(|s| s.trim().to_string()),
                    "loadavg_at_start": load_at_start,
                    "loadavg_at_end": loadavg(),
                },
                "peers": peers.versions,
                "server": "tests/peers/booking_server.py (tool book_table, one form elicitation per call)",
                "plan": plan.to_json(),
                "total_seconds": secs(total),
                "rounds": {
                    "definition": "period = from the answerer seeing one elicitation to it seeing \
                                   the next (SDK: elicitation callback entered; kit: \
                                   pending_elicitation() returned a new round, polled in a tight \
                                   loop); each run: warm-up calls, then `rounds_per_run` periods; \
                                   rounds_per_second = periods / their wall time, per run; \
                                   period_ms pools every run's periods; added_p50_ms = kit \
                                   period p50 - SDK period p50 (same era)",
                    "seconds": rounds_s,
                    "eras": rounds_json(rounds),
                },
                "pause_resume": {
                    "definition": "kit: create_round (owned) + submit_responses + start_delivery \
                                   + mark_delivered + resolve through SqliteManagedInputStore; \
                                   LangGraph: invoke to interrupt() + invoke(Command(resume)) \
                                   on a fresh thread, SqliteSaver (WAL) with PRAGMA synchronous \
                                   set on its connection, default durability; the same form and \
                                   answer; ratio = median kit rate / median LangGraph rate",
                    "seconds": lifecycles_s,
                    "synchronous": lifecycles_json(lifecycles),
                },
            });
            write_report("peers_rounds", &document)?;
        }
        _ => println!(
            "partial or smoke run: no JSON written (run `cargo bench -p m3 --bench peers_rounds`)"
        ),
    }
    Ok(())
}

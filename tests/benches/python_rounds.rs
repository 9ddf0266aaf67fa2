//! Rounds per second of the Python package's kit against the Rust kit and against the Python MCP
//! SDK's in-memory client, with the same server in the same run (issue 38; `just bench-python`,
//! or `cargo bench -p m3-tests --bench python_rounds`).
//!
//! The server is the pinned Python SDK's `tests/peers/booking_server.py` (`mcp==2.3.0`): its tool
//! `book_table` asks for a booking form once per call, then returns. Contenders:
//! - `rust kit`: [`m3::McpTestKit`] in this process on a SQLite file
//!   ([`m3::SqliteExecutionStore::open`], the defaults), the scripted harness, managed human
//!   input, the server a stdio child on the SDK's venv (`m3_tests::peers::booking_server()`);
//!   this thread polls [`m3::ExecutionHandle::pending_elicitation`] and answers each round at
//!   once with [`m3::ExecutionHandle::respond_elicitation`];
//! - `python kit`: the same with the package's `m3.MCPTestKit` (`m3.storage.SQLiteExecutionStore`)
//!   in a Python child process (`tests/benches/python_rounds.py kit`), on the venv
//!   `tests/.peers/python-package-release/` that holds the package built in release as `pip
//!   install ./host/python` builds it (`m3_tests::python_package::python_package_release()`; a
//!   debug build of this benchmark uses the tests' debug build of the package instead);
//! - `python sdk (in memory)`: the SDK's `Client` on the server object itself, imported from the
//!   same script (`python_rounds.py sdk`, on the SDK's venv): no child process, no transport, the
//!   elicitation callback answers at once. The floor of an MCP round in Python.
//!
//! Two measures, both eras (`modern` = 2026-07-28, `input_required` and a retried call;
//! `legacy` = `elicitation/create` while the call is in flight):
//! - **execution** (the round): one round = submit, wait for the pending round, respond,
//!   result; a new execution per round, so a kit's round includes starting the Python server
//!   and initialising its session (the SDK's: opening a client session on the in-process
//!   server). Period = start to result.
//! - **steady**: one execution (one session) of many calls; period = from the answerer seeing
//!   one elicitation to it seeing the next, as in section 1 of BENCHMARKS.md (no server start:
//!   what each kit adds per round).
//!
//! Every run starts a fresh kit on a fresh SQLite file (the Python runs: a fresh process) and
//! reports its rounds after warm-up ones; the contenders, eras and measures are interleaved and
//! rotate between repetitions, so all three see the same machine. Reported per era, measure and
//! contender: rounds/s (per run: rounds / their wall time; median and min..max over the runs),
//! the period's p50 and p95 (all runs pooled), and the ratio of the Python kit's p50 period to
//! the Rust kit's (goal: <= 1.2x; per repetition min..max). It prints tables and writes
//! `target/bench/python_rounds.json` (under `$CARGO_TARGET_DIR` when set); it never fails on a
//! time. Without `--bench` (as `cargo test` runs it) or with `--smoke`, a smoke pass (one
//! repetition, a few rounds) that writes no JSON; `--reps=N`, `--rounds=N` (execution),
//! `--steady-rounds=N` and `--poll-interval-us=N` (the kits' answerer sleeps between polls
//! instead of spinning) change the plan.

use chrono::Utc;
use m3::{
    AgentSpec, ElicitationResponse, ExecutionHandle, ExecutionResult, ExecutionStatus, HumanInput,
    McpEra, McpTestKit, PendingElicitationRound, Script, SqliteExecutionStore, StdioServer,
    Submission,
};
use m3_bench::fixture::{era_name, path_text};
use m3_bench::stats::{Stats, quantile, secs, stats_json};
use m3_bench::{BenchResult, RunArgs, Table, loadavg, target_dir, workspace_dir, write_report};
use m3_tests::{peers, python_package};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The goal: the Python kit's period at most this many times the Rust kit's (p50).
const GOAL_RATIO: f64 = 1.2;
/// How long any single wait may take before the benchmark gives up (a hang guard).
const WAIT_LIMIT: Duration = Duration::from_secs(120);
/// The server's tool, as the kits name it (`server:tool`).
const TOOL: &str = "booking:book_table";
/// What the tool answers once booked (the Python contenders check the same).
const BOOKED: &str = "booked Chez M3 for Asha";
const ERAS: [McpEra; 2] = [McpEra::Modern, McpEra::Legacy];

fn tool_arguments() -> Value {
    json!({"restaurant": "Chez M3"})
}

/// The answer to the booking form (`python_rounds.py` answers the same).
fn booking_answer() -> Value {
    json!({"name": "Asha", "guests": 3, "seating": "terrace", "deposit": 12.5, "high_chair": true})
}

// ---------------------------------------------------------------------------------------------
// The plan

#[derive(Debug, Clone, Copy)]
struct Plan {
    full: bool,
    reps: usize,
    /// Execution measure: reported rounds (executions) per run, and warm-up ones before them.
    rounds: usize,
    warmup: usize,
    /// Steady measure: reported periods per run, and warm-up calls before them.
    steady_rounds: usize,
    steady_warmup: usize,
    /// Sleep between two `pending_elicitation()` calls of the kits (zero, the default: spin).
    poll_interval: Duration,
}

impl Plan {
    fn from_args() -> Self {
        let run = RunArgs::from_env();
        let number = |flag: &str| -> Option<usize> {
            let value = run.args.iter().find_map(|a| a.strip_prefix(flag))?;
            let least = match flag {
                "--reps=" => 1,
                "--poll-interval-us=" => 0,
                _ => 2,
            };
            match value.parse::<usize>() {
                Ok(n) if n >= least => Some(n),
                _ => {
                    eprintln!("{flag} takes a number of at least {least}, not `{value}`");
                    std::process::exit(2);
                }
            }
        };
        let mut plan = if run.full {
            Self {
                full: true,
                reps: 5,
                rounds: 8,
                warmup: 1,
                steady_rounds: 40,
                steady_warmup: 5,
                poll_interval: Duration::ZERO,
            }
        } else {
            Self {
                full: false,
                reps: 1,
                rounds: 2,
                warmup: 0,
                steady_rounds: 3,
                steady_warmup: 1,
                poll_interval: Duration::ZERO,
            }
        };
        if let Some(n) = number("--reps=") {
            plan.reps = n;
        }
        if let Some(n) = number("--rounds=") {
            plan.rounds = n;
        }
        if let Some(n) = number("--steady-rounds=") {
            plan.steady_rounds = n;
        }
        if let Some(us) = number("--poll-interval-us=") {
            plan.poll_interval = Duration::from_micros(us as u64);
        }
        plan
    }

    /// (reported rounds, warm-up rounds) of one run of `mode`.
    fn rounds(&self, mode: Mode) -> (usize, usize) {
        match mode {
            Mode::Execution => (self.rounds, self.warmup),
            Mode::Steady => (self.steady_rounds, self.steady_warmup),
        }
    }

    fn to_json(self) -> Value {
        json!({
            "full": self.full,
            "repetitions": self.reps,
            "execution_rounds_per_run": self.rounds,
            "execution_warmup_rounds_per_run": self.warmup,
            "steady_rounds_per_run": self.steady_rounds,
            "steady_warmup_rounds_per_run": self.steady_warmup,
            "poll_interval_us": self.poll_interval.as_micros() as u64,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Execution,
    Steady,
}

impl Mode {
    const ALL: [Self; 2] = [Self::Execution, Self::Steady];

    fn name(self) -> &'static str {
        match self {
            Self::Execution => "execution",
            Self::Steady => "steady",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    RustKit,
    PythonKit,
    Sdk,
}

impl Contender {
    const ALL: [Self; 3] = [Self::RustKit, Self::PythonKit, Self::Sdk];

    fn name(self) -> &'static str {
        match self {
            Self::RustKit => "rust kit",
            Self::PythonKit => "python kit",
            Self::Sdk => "python sdk (in memory)",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Self::RustKit => "rust_kit",
            Self::PythonKit => "python_kit",
            Self::Sdk => "python_sdk_in_memory",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The contenders

/// What the contenders run on.
struct Setup {
    /// The venv's Python with the m3 package (release, or debug in a debug build).
    package_python: PathBuf,
    /// The SDK's venv Python (`tests/.peers/venv`), which runs the server.
    sdk_python: PathBuf,
    /// `tests/peers/booking_server.py`.
    server_script: PathBuf,
    /// `tests/benches/python_rounds.py`.
    driver: PathBuf,
    /// Where the runs' SQLite files go.
    scratch: PathBuf,
    /// The package's build profile.
    package_profile: &'static str,
}

impl Setup {
    fn install(scratch: &Path) -> BenchResult<Self> {
        let (package_python, package_profile) = if cfg!(debug_assertions) {
            (python_package::python_package()?, "debug")
        } else {
            (python_package::python_package_release()?, "release")
        };
        let server = peers::booking_server()?;
        let server_script = PathBuf::from(server.args.first().ok_or("no server script")?);
        let driver = workspace_dir()
            .join("tests")
            .join("benches")
            .join("python_rounds.py");
        if !driver.is_file() {
            return Err(format!("{} is missing", driver.display()).into());
        }
        Ok(Self {
            package_python,
            sdk_python: server.program,
            server_script,
            driver,
            scratch: scratch.to_path_buf(),
            package_profile,
        })
    }
}

/// One run of one contender: its reported periods (ms) and rounds per second.
#[derive(Debug, Clone, Default)]
struct Run {
    periods_ms: Vec<f64>,
    rounds_per_s: f64,
    /// The kits' execution measure: start to the round seen, and the answer to the result (ms).
    to_pending_ms: Vec<f64>,
    to_result_ms: Vec<f64>,
}

impl Run {
    fn p50(&self) -> f64 {
        Stats::of(&self.periods_ms).map_or(f64::NAN, |s| s.p50)
    }
}

/// Polls `pending_elicitation()` until it returns a round other than `last`.
fn wait_round(
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
                return Err(
                    format!("the execution finished before asking: {:?}", state.outcome).into(),
                );
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

fn answer(handle: &ExecutionHandle, round: &PendingElicitationRound) -> BenchResult<()> {
    let key = match round.requests.keys().collect::<Vec<_>>().as_slice() {
        [key] => (*key).clone(),
        keys => return Err(format!("a round of {} requests: {keys:?}", keys.len()).into()),
    };
    handle.respond_elicitation(
        &round.round_id,
        BTreeMap::from([(key, ElicitationResponse::accept(booking_answer()))]),
        &format!("answer-{}", round.round_id),
    )?;
    Ok(())
}

fn check(result: &ExecutionResult, calls: usize) -> BenchResult<()> {
    let tools = &result.outcome.tool_results;
    if !result.succeeded()
        || tools.len() != calls
        || tools.iter().any(|t| !t.text().starts_with(BOOKED))
    {
        return Err(format!(
            "the Rust kit's execution did not book {calls} tables: {}",
            result.outcome
        )
        .into());
    }
    Ok(())
}

/// The Rust kit: a fresh kit on a fresh SQLite file; `mode`'s rounds.
fn rust_kit(
    setup: &Setup,
    plan: &Plan,
    era: McpEra,
    mode: Mode,
    database: &Path,
) -> BenchResult<Run> {
    let (rounds, warmup) = plan.rounds(mode);
    let store = Arc::new(SqliteExecutionStore::open(database)?);
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    let server = StdioServer::new("booking", path_text(&setup.sdk_python)?)
        .args([path_text(&setup.server_script)?])
        .era(era);
    let mut run = Run::default();
    match mode {
        Mode::Execution => {
            let agent = kit
                .agents([AgentSpec::scripted(Script::call(TOOL, tool_arguments()))])?
                .remove(0);
            let mut span: Option<(Instant, Instant)> = None;
            for i in 0..warmup + rounds {
                let started = Instant::now();
                let handle = agent.submit(
                    Submission::new("Book a table.", server.clone())
                        .tools([TOOL])
                        .human_input(HumanInput::Managed),
                )?;
                let round = wait_round(&handle, None, plan.poll_interval)?;
                let seen = Instant::now();
                answer(&handle, &round)?;
                let answered = Instant::now();
                check(&handle.result(Some(WAIT_LIMIT))?, 1)?;
                let ended = Instant::now();
                if i < warmup {
                    continue;
                }
                span = Some((span.map_or(started, |(first, _)| first), ended));
                run.periods_ms.push(secs(ended - started) * 1e3);
                run.to_pending_ms.push(secs(seen - started) * 1e3);
                run.to_result_ms.push(secs(ended - answered) * 1e3);
            }
            let (first, last) = span.ok_or("no rounds")?;
            run.rounds_per_s = rounds as f64 / secs(last - first);
        }
        Mode::Steady => {
            let calls = warmup + rounds + 1;
            let script = (0..calls).fold(Script::default(), |s, _| s.then(TOOL, tool_arguments()));
            let agent = kit.agents([AgentSpec::scripted(script)])?.remove(0);
            let handle = agent.submit(
                Submission::new("Book a table each time.", server)
                    .tools([TOOL])
                    .human_input(HumanInput::Managed),
            )?;
            let mut seen = Vec::with_capacity(calls);
            let mut last: Option<String> = None;
            for _ in 0..calls {
                let round = wait_round(&handle, last.as_deref(), plan.poll_interval)?;
                seen.push(Instant::now());
                answer(&handle, &round)?;
                last = Some(round.round_id);
            }
            check(&handle.result(Some(WAIT_LIMIT))?, calls)?;
            let measured = &seen[warmup..];
            run.periods_ms = measured
                .windows(2)
                .map(|w| secs(w[1] - w[0]) * 1e3)
                .collect();
            run.rounds_per_s = rounds as f64 / secs(measured[rounds] - measured[0]);
        }
    }
    drop(kit);
    store.close();
    Ok(run)
}

/// A Python contender: `python_rounds.py kit|sdk` in a child process.
fn python_run(
    setup: &Setup,
    plan: &Plan,
    contender: Contender,
    era: McpEra,
    mode: Mode,
    database: &Path,
) -> BenchResult<Run> {
    let (rounds, warmup) = plan.rounds(mode);
    let (python, which) = match contender {
        Contender::PythonKit => (&setup.package_python, "kit"),
        _ => (&setup.sdk_python, "sdk"),
    };
    let mut command = Command::new(python);
    command
        .arg(&setup.driver)
        .arg(which)
        .args(["--mode", mode.name(), "--era", era_name(era)])
        .args([
            "--rounds",
            &rounds.to_string(),
            "--warmup",
            &warmup.to_string(),
        ])
        .arg("--server-script")
        .arg(&setup.server_script);
    if contender == Contender::PythonKit {
        command
            .arg("--server-python")
            .arg(&setup.sdk_python)
            .arg("--database")
            .arg(database)
            .arg(format!(
                "--poll-interval-us={}",
                plan.poll_interval.as_micros()
            ));
    }
    let output = command
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "python_rounds.py {which} {} {} failed ({}): {}",
            mode.name(),
            era_name(era),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let report: Value = serde_json::from_slice(&output.stdout)?;
    let numbers = |key: &str| -> Vec<f64> {
        report[key]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    let periods_ms = numbers("period_ms");
    let seconds = report["seconds"].as_f64().unwrap_or(0.0);
    if periods_ms.len() != rounds || seconds <= 0.0 {
        return Err(format!("python_rounds.py {which} reported {report}").into());
    }
    Ok(Run {
        rounds_per_s: rounds as f64 / seconds,
        periods_ms,
        to_pending_ms: numbers("to_pending_ms"),
        to_result_ms: numbers("to_result_ms"),
    })
}

// ---------------------------------------------------------------------------------------------
// Results

/// The runs of one era, measure and contender.
struct Cell {
    era: McpEra,
    mode: Mode,
    contender: Contender,
    runs: Vec<Run>,
}

impl Cell {
    fn pooled(&self, pick: fn(&Run) -> &Vec<f64>) -> Vec<f64> {
        self.runs
            .iter()
            .flat_map(|r| pick(r).iter().copied())
            .collect()
    }

    fn periods(&self) -> Option<Stats> {
        Stats::of(&self.pooled(|r| &r.periods_ms))
    }

    fn p95(&self) -> Option<f64> {
        quantile(&self.pooled(|r| &r.periods_ms), 0.95)
    }

    fn rates(&self) -> Option<Stats> {
        Stats::of(&self.runs.iter().map(|r| r.rounds_per_s).collect::<Vec<_>>())
    }
}

/// `contender`'s p50 period over the Rust kit's, in `era` and `mode`: of the pooled periods, and
/// per repetition (run p50 over run p50).
fn ratio(cells: &[Cell], era: McpEra, mode: Mode, contender: Contender) -> Option<(f64, Stats)> {
    let find = |c: Contender| {
        cells
            .iter()
            .find(|x| x.era == era && x.mode == mode && x.contender == c)
    };
    let rust = find(Contender::RustKit)?;
    let other = find(contender)?;
    let headline = other.periods()?.p50 / rust.periods()?.p50;
    let pairs: Vec<f64> = other
        .runs
        .iter()
        .zip(&rust.runs)
        .map(|(o, r)| o.p50() / r.p50())
        .collect();
    Some((headline, Stats::of(&pairs)?))
}

fn goal_text(ratio: f64) -> String {
    if ratio <= GOAL_RATIO {
        format!("met (<= {GOAL_RATIO}x)")
    } else {
        format!("MISSED (<= {GOAL_RATIO}x)")
    }
}

fn print_tables(cells: &[Cell], plan: &Plan) {
    for mode in Mode::ALL {
        let (rounds, warmup) = plan.rounds(mode);
        let title = match mode {
            Mode::Execution => format!(
                "Rounds as executions (submit, pending, respond, result; the kits start the \
                 server each time), booking_server.py; {} runs x {rounds} rounds ({warmup} \
                 warm-up)   goal: python kit period <= {GOAL_RATIO}x the rust kit's",
                plan.reps
            ),
            Mode::Steady => format!(
                "Rounds in one execution (period between elicitations seen), booking_server.py; \
                 {} runs x {rounds} rounds ({warmup} warm-up)",
                plan.reps
            ),
        };
        // The kits' parts of a round are measured in the execution measure only.
        let parts = mode == Mode::Execution;
        let mut header = vec![
            "era",
            "contender",
            "rounds/s median (min..max)",
            "period p50",
            "p95",
        ];
        if parts {
            header.extend(["submit->pending p50", "answer->result p50"]);
        }
        header.extend(["period / rust kit (pairs)", "goal"]);
        let mut table = Table::new(&title, &header);
        for cell in cells.iter().filter(|c| c.mode == mode) {
            let ms = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.2} ms"));
            let rates = cell.rates().map_or_else(
                || "-".into(),
                |s| format!("{:.1} ({:.1}..{:.1})", s.p50, s.min, s.max),
            );
            let part = |pick: fn(&Run) -> &Vec<f64>| {
                let values = cell.pooled(pick);
                if values.is_empty() {
                    String::new()
                } else {
                    ms(quantile(&values, 0.5))
                }
            };
            let (versus, goal) = match cell.contender {
                Contender::RustKit => ("(baseline)".to_string(), String::new()),
                other => match ratio(cells, cell.era, mode, other) {
                    Some((headline, pairs)) => (
                        format!("{headline:.2}x ({:.2}..{:.2})", pairs.min, pairs.max),
                        if other == Contender::PythonKit {
                            goal_text(headline)
                        } else {
                            String::new()
                        },
                    ),
                    None => ("-".into(), String::new()),
                },
            };
            let mut row = vec![
                era_name(cell.era).into(),
                cell.contender.name().into(),
                rates,
                ms(cell.periods().map(|s| s.p50)),
                ms(cell.p95()),
            ];
            if parts {
                row.extend([part(|r| &r.to_pending_ms), part(|r| &r.to_result_ms)]);
            }
            row.extend([versus, goal]);
            table.row(row);
        }
        table.print();
    }
    println!(
        "   kits: SQLite store with the defaults, scripted harness, managed input, the answerer \
         polling pending_elicitation() {}; python sdk: mcp's Client on the server object \
         (in-process), the callback answering at once",
        if plan.poll_interval.is_zero() {
            "in a tight loop".to_string()
        } else {
            format!("every {:?}", plan.poll_interval)
        }
    );
}

fn cells_json(cells: &[Cell]) -> Value {
    let mut modes = serde_json::Map::new();
    for mode in Mode::ALL {
        let mut eras = serde_json::Map::new();
        for era in ERAS {
            let mut entry = serde_json::Map::new();
            for cell in cells.iter().filter(|c| c.mode == mode && c.era == era) {
                let mut value = json!({
                    "contender": cell.contender.name(),
                    "rounds_per_second": stats_json(cell.rates(), "1/s"),
                    "period_ms": stats_json(cell.periods(), "ms"),
                    "period_p95_ms": cell.p95(),
                    "runs": cell.runs.iter().map(|r| json!({
                        "rounds": r.periods_ms.len(),
                        "rounds_per_second": r.rounds_per_s,
                        "period_p50_ms": r.p50(),
                    })).collect::<Vec<_>>(),
                });
                for (key, pick) in [
                    (
                        "submit_to_pending_ms",
                        (|r: &Run| &r.to_pending_ms) as fn(&Run) -> &Vec<f64>,
                    ),
                    ("answer_to_result_ms", |r: &Run| &r.to_result_ms),
                ] {
                    let values = cell.pooled(pick);
                    if !values.is_empty() {
                        value[key] = stats_json(Stats::of(&values), "ms");
                    }
                }
                if cell.contender != Contender::RustKit
                    && let Some((headline, pairs)) = ratio(cells, era, mode, cell.contender)
                {
                    value["period_p50_over_rust_kit"] = json!(headline);
                    value["period_p50_over_rust_kit_per_repetition"] = pairs.to_json("ratio");
                    if cell.contender == Contender::PythonKit {
                        value["goal"] = json!({
                            "max_ratio": GOAL_RATIO,
                            "met": headline <= GOAL_RATIO,
                        });
                    }
                }
                entry.insert(cell.contender.key().into(), value);
            }
            eras.insert(era_name(era).into(), Value::Object(entry));
        }
        modes.insert(mode.name().into(), Value::Object(eras));
    }
    Value::Object(modes)
}

// ---------------------------------------------------------------------------------------------
// Main

fn main() -> BenchResult<()> {
    let started = Instant::now();
    let load_at_start = loadavg();
    let plan = Plan::from_args();
    let target = target_dir();
    // The component's compiled artifact is cached under the target directory (the Python
    // children inherit the variable), never in the user's cache.
    if std::env::var_os("M3_CACHE_DIR").is_none() {
        // SAFETY: set before this process starts any thread.
        unsafe { std::env::set_var("M3_CACHE_DIR", target.join("bench").join("component-cache")) };
    }
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "m3 python rounds benchmark ({}; {cpus} CPUs)",
        if plan.full { "full run" } else { "smoke pass" }
    );
    let scratch = tempfile::Builder::new()
        .prefix("m3-bench-python-rounds-")
        .tempdir()?;
    eprintln!(
        "installing the m3 package and the SDK (once; the first release build takes minutes) ..."
    );
    let setup = Setup::install(scratch.path())?;
    let mcp_version = peers::installed_python_mcp_version(&setup.sdk_python)?;
    eprintln!(
        "package: {} ({} build); SDK: {} (mcp {mcp_version})",
        setup.package_python.display(),
        setup.package_profile,
        setup.sdk_python.display()
    );

    let mut cells: Vec<Cell> = Mode::ALL
        .iter()
        .flat_map(|mode| {
            ERAS.iter().flat_map(move |era| {
                Contender::ALL.iter().map(move |c| Cell {
                    era: *era,
                    mode: *mode,
                    contender: *c,
                    runs: Vec::new(),
                })
            })
        })
        .collect();
    let mut file = 0;
    for rep in 0..plan.reps {
        // The measures, the eras and the contenders rotate between repetitions.
        for m in 0..Mode::ALL.len() {
            let mode = Mode::ALL[(rep + m) % Mode::ALL.len()];
            for e in 0..ERAS.len() {
                let era = ERAS[(rep + e) % ERAS.len()];
                for turn in 0..Contender::ALL.len() {
                    let contender = Contender::ALL[(rep + turn) % Contender::ALL.len()];
                    eprintln!(
                        "  rep {}/{}: {} {} {} ...",
                        rep + 1,
                        plan.reps,
                        mode.name(),
                        era_name(era),
                        contender.name()
                    );
                    file += 1;
                    let database = setup.scratch.join(format!("run-{file}.sqlite"));
                    let run = match contender {
                        Contender::RustKit => rust_kit(&setup, &plan, era, mode, &database)?,
                        _ => python_run(&setup, &plan, contender, era, mode, &database)?,
                    };
                    eprintln!(
                        "    {:.1} rounds/s, period p50 {:.2} ms",
                        run.rounds_per_s,
                        run.p50()
                    );
                    if let Some(cell) = cells
                        .iter_mut()
                        .find(|c| c.era == era && c.mode == mode && c.contender == contender)
                    {
                        cell.runs.push(run);
                    }
                }
            }
        }
    }
    print_tables(&cells, &plan);
    let total = started.elapsed();
    println!(
        "\ntotal: {:.1} s (load average at start {}, now {})",
        secs(total),
        load_at_start.as_deref().unwrap_or("-"),
        loadavg().as_deref().unwrap_or("-")
    );

    if plan.full {
        let python_version = Command::new(&setup.package_python)
            .args(["-c", "import platform; print(platform.python_version())"])
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        let document = json!({
            "benchmark": "python_rounds",
            "created_at": Utc::now().to_rfc3339(),
            "machine": {
                "cpus": cpus,
                "os": std::env::consts::OS,
                "arch": std::env::consts::ARCH,
                "loadavg_at_start": load_at_start,
                "loadavg_at_end": loadavg(),
            },
            "server": format!("tests/peers/booking_server.py on mcp {mcp_version} (tool book_table, one form elicitation per call)"),
            "python": python_version,
            "package_build": setup.package_profile,
            "plan": plan.to_json(),
            "total_seconds": secs(total),
            "definitions": {
                "execution": "one round = one execution: the kits submit (a new stdio server \
                              process and session), wait for the pending round, respond, \
                              result(); the SDK opens a client session on the in-process \
                              server and calls the tool (the callback answers); period = start \
                              to result",
                "steady": "one execution (one session) of many calls; period = from the \
                           answerer seeing one elicitation to it seeing the next",
                "rounds_per_second": "per run: reported rounds / their wall time",
                "period_p50_over_rust_kit": "pooled p50 period / the Rust kit's, same era and \
                                             measure; per repetition: run p50 / run p50",
            },
            "results": cells_json(&cells),
        });
        write_report("python_rounds", &document)?;
    } else {
        println!(
            "smoke pass: no JSON written (run `cargo bench -p m3-tests --bench python_rounds`)"
        );
    }
    Ok(())
}

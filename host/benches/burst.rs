//! A burst of answers: many parked executions answered at the same instant by many processes.
//!
//! One host process (this binary again, `M3_BENCH_ROLE=burst-host`) parks `N` executions (the
//! scripted harness, the bundled shipping server, managed input, `synchronous=FULL`) on their
//! pending rounds and writes the round ids to a file. Then `P` answering processes
//! (`M3_BENCH_ROLE=burst-answerer`) each take their share of the rounds, start one thread per
//! answer, and release every thread at one agreed instant: `N` calls of
//! `Executions::respond` (what `m3 respond` runs) hit the database together. Each answerer
//! reports its calls: acknowledged, refused `storage_busy`, or any other error. The host waits
//! for every execution's result and reads each round's record: the answer-to-server latency is
//! `delivered_at - response_validated_at` (the answer committed, to its line written to the
//! server's stdin and marked delivered).
//!
//! `cargo bench -p m3 --bench burst` runs 1,000 executions and 16 processes and writes
//! `target/bench/burst.json`; `--executions=N` and `--processes=P` change the counts (no JSON).
//! Without `--bench` (as `cargo test` runs it) or with `--smoke` it runs a smoke pass
//! (20 executions, 2 processes) and writes no JSON. Nothing here fails on a time; a `storage_busy`
//! or any other failed call is reported (and makes the run exit non-zero), since the goal is
//! none at the default settings.

use chrono::Utc;
use m3::{
    AsyncExecutionHandle, AsyncMcpTestKit, ErrorCode, ExecutionStore, OutcomeKind,
    SqliteExecutionStore,
};
use m3_bench::fixture::{
    address, booking_agent, booking_server as server_binding, booking_submission as submission,
};
use m3_bench::stats::{Stats, stats_json};
use m3_bench::{BenchResult, RunArgs, Table, shipping_server_binary, write_report};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const ROLE_VAR: &str = "M3_BENCH_ROLE";
/// The longest any one wait of the benchmark may take.
const WAIT_LIMIT: Duration = Duration::from_secs(600);
/// Submissions in flight while parking.
const PARK_CONCURRENCY: usize = 16;
/// How long after the answerers are started the burst begins (all of them must be ready).
const START_DELAY: Duration = Duration::from_secs(3);

fn main() -> BenchResult<()> {
    match std::env::var(ROLE_VAR).as_deref() {
        Ok("burst-host") => host_main(),
        Ok("burst-answerer") => answerer_main(),
        _ => orchestrate(),
    }
}

fn orchestrate() -> BenchResult<()> {
    let run = RunArgs::from_env();
    let number = |name: &str| run.number(name).map(|n| n as usize);
    let (executions_arg, processes_arg) = (number("executions"), number("processes"));
    let (executions, processes) = if run.full { (1_000, 16) } else { (20, 2) };
    let executions = executions_arg.unwrap_or(executions);
    let processes = processes_arg.unwrap_or(processes).max(1);
    let write_json = run.full && executions_arg.is_none() && processes_arg.is_none();

    let server = shipping_server_binary()?;
    let scratch = tempfile::tempdir()?;
    let database = scratch.path().join("burst.sqlite");
    let ready = scratch.path().join("rounds.txt");
    // Compile the component once (into the cache) so no process pays for it during the burst.
    SqliteExecutionStore::open(&database)?.executions()?;

    let mut host = Command::new(std::env::current_exe()?)
        .env(ROLE_VAR, "burst-host")
        .arg(&server)
        .arg(executions.to_string())
        .arg(&database)
        .arg(&ready)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let started = Instant::now();
    while !ready.exists() {
        if started.elapsed() > WAIT_LIMIT {
            let _ = host.kill();
            return Err("the host process did not park its executions in time".into());
        }
        if let Some(status) = host.try_wait()? {
            return Err(format!("the host process ended early: {status}").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let park_seconds = started.elapsed().as_secs_f64();
    let rounds: Vec<String> = std::fs::read_to_string(&ready)?
        .lines()
        .map(str::to_string)
        .collect();

    // Shares, one file each; every answerer releases its calls at the same instant.
    let start_at = SystemTime::now() + START_DELAY;
    let start_ms = start_at.duration_since(UNIX_EPOCH)?.as_millis();
    let mut answerers = Vec::new();
    for p in 0..processes {
        let share: Vec<&str> = rounds
            .iter()
            .skip(p)
            .step_by(processes)
            .map(String::as_str)
            .collect();
        let file = scratch.path().join(format!("share-{p}.txt"));
        std::fs::write(&file, share.join("\n"))?;
        answerers.push(
            Command::new(std::env::current_exe()?)
                .env(ROLE_VAR, "burst-answerer")
                .arg(&database)
                .arg(start_ms.to_string())
                .arg(&file)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()?,
        );
    }
    let mut calls = Vec::new();
    let (mut acknowledged, mut busy, mut other) = (0usize, 0usize, Vec::new());
    let mut last_return_ms: f64 = 0.0;
    for answerer in answerers {
        let output = answerer.wait_with_output()?;
        if !output.status.success() {
            return Err(format!("an answering process failed: {}", output.status).into());
        }
        let report: AnswererReport = serde_json::from_slice(&output.stdout)?;
        acknowledged += report.acknowledged;
        busy += report.busy;
        other.extend(report.other);
        calls.extend(report.call_ms);
        last_return_ms = last_return_ms.max(report.last_return_after_start_ms);
    }
    let output = host.wait_with_output()?;
    if !output.status.success() {
        return Err(format!("the host process failed: {}", output.status).into());
    }
    let host_report: HostReport = serde_json::from_slice(&output.stdout)?;

    let call = Stats::of(&calls);
    let to_server = Stats::of(&host_report.answer_to_server_ms);
    let mut table = Table::new(
        &format!(
            "A burst of answers: {executions} parked executions answered at one instant by \
             {processes} processes (synchronous=FULL, default busy timeout)"
        ),
        &["figure", "value"],
    );
    table.row(vec!["park all".into(), format!("{park_seconds:.1} s")]);
    table.row(vec![
        "acknowledged / storage_busy / other errors".into(),
        format!("{acknowledged} / {busy} / {}", other.len()),
    ]);
    table.row(vec![
        "all answers acknowledged after".into(),
        format!("{:.0} ms", last_return_ms),
    ]);
    let pair = |s: &Option<Stats>| {
        s.map_or("-".into(), |s| {
            format!("{:.1} / {:.1} / {:.1} ms", s.p50, s.p99, s.max)
        })
    };
    table.row(vec!["respond call p50 / p99 / max".into(), pair(&call)]);
    table.row(vec![
        "answer to server p50 / p99 / max".into(),
        pair(&to_server),
    ]);
    table.row(vec![
        "outcomes".into(),
        format!("{:?}", host_report.outcomes),
    ]);
    table.print();
    for message in other.iter().take(5) {
        eprintln!("error: {message}");
    }

    if write_json {
        let document = json!({
            "benchmark": "burst",
            "date": Utc::now().to_rfc3339(),
            "command": "cargo bench -p m3 --bench burst",
            "executions": executions,
            "processes": processes,
            "synchronous": "FULL",
            "busy_timeout_ms": 5000,
            "park_seconds": park_seconds,
            "acknowledged": acknowledged,
            "storage_busy": busy,
            "other_errors": other.len(),
            "all_acknowledged_after_ms": last_return_ms,
            "respond_call_ms": stats_json(call, "ms"),
            "answer_to_server_ms": stats_json(to_server, "ms"),
            "answer_to_server_definition": "delivered_at - response_validated_at of each round",
            "outcomes": host_report.outcomes,
            "goal": {"storage_busy": 0, "met": busy == 0},
        });
        write_report("burst", &document)?;
    }
    if busy > 0 || !other.is_empty() || acknowledged != executions {
        return Err(format!(
            "{busy} answers failed storage_busy and {} otherwise",
            other.len()
        )
        .into());
    }
    Ok(())
}

/// What the host process reports once every execution finished.
#[derive(Debug, Serialize, Deserialize)]
struct HostReport {
    outcomes: BTreeMap<String, usize>,
    answer_to_server_ms: Vec<f64>,
}

/// What one answering process reports.
#[derive(Debug, Default, Serialize, Deserialize)]
struct AnswererReport {
    acknowledged: usize,
    busy: usize,
    other: Vec<String>,
    call_ms: Vec<f64>,
    last_return_after_start_ms: f64,
}

/// `burst-host <server> <executions> <database> <ready-file>`.
fn host_main() -> BenchResult<()> {
    raise_fd_limit();
    let mut args = std::env::args_os().skip(1);
    let mut next = |what: &str| args.next().ok_or(format!("burst-host: no {what}"));
    let server = PathBuf::from(next("server")?);
    let executions: usize = next("count")?.into_string().map_err(|_| "count")?.parse()?;
    let database = PathBuf::from(next("database")?);
    let ready = PathBuf::from(next("ready file")?);
    let store = Arc::new(SqliteExecutionStore::open(&database)?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(async {
        let kit = AsyncMcpTestKit::new(store.clone(), BTreeMap::<String, String>::new());
        let agent = kit.agents([booking_agent()])?.remove(0);
        let binding = server_binding(&server)?;
        let gate = Arc::new(tokio::sync::Semaphore::new(PARK_CONCURRENCY));
        let mut submits = tokio::task::JoinSet::new();
        for _ in 0..executions {
            let (agent, submission, gate) =
                (agent.clone(), submission(binding.clone()), gate.clone());
            submits.spawn(async move {
                let _permit = gate.acquire_owned().await;
                agent.submit(submission).await
            });
        }
        let mut handles: Vec<AsyncExecutionHandle> = Vec::new();
        while let Some(done) = submits.join_next().await {
            handles.push(done??);
        }
        let mut lines = Vec::new();
        let started = Instant::now();
        for handle in &handles {
            loop {
                if let Some(round) = handle.pending_elicitation().await? {
                    lines.push(format!("{} {}", handle.execution_id(), round.round_id));
                    break;
                }
                if started.elapsed() > WAIT_LIMIT {
                    return Err("an execution never parked".into());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let partial = ready.with_extension("partial");
        std::fs::write(&partial, lines.join("\n"))?;
        std::fs::rename(&partial, &ready)?;

        let mut outcomes = BTreeMap::new();
        let mut waits = tokio::task::JoinSet::new();
        for handle in handles {
            waits.spawn(async move { handle.result(Some(WAIT_LIMIT)).await });
        }
        while let Some(done) = waits.join_next().await {
            let name = match done?.map(|r| r.outcome.kind) {
                Ok(OutcomeKind::Succeeded) => "succeeded",
                Ok(OutcomeKind::Failed) => "failed",
                Ok(OutcomeKind::Cancelled) => "cancelled",
                Err(_) => "error",
            };
            *outcomes.entry(name.to_string()).or_insert(0usize) += 1;
        }
        BenchResult::Ok((outcomes, lines))
    });
    let (outcomes, lines) = report?;
    let managed = store
        .managed_input_store()?
        .ok_or("the store has no managed input")?;
    let mut answer_to_server_ms = Vec::new();
    for line in &lines {
        let round_id = line.split(' ').nth(1).unwrap_or_default();
        let Some(record) = managed.get_round(round_id)? else {
            continue;
        };
        let t = &record.timestamps;
        if let (Some(validated), Some(delivered)) = (t.response_validated_at, t.delivered_at) {
            answer_to_server_ms
                .push((delivered - validated).num_microseconds().unwrap_or(0) as f64 / 1e3);
        }
    }
    store.close();
    println!(
        "{}",
        serde_json::to_string(&HostReport {
            outcomes,
            answer_to_server_ms
        })?
    );
    Ok(())
}

/// `burst-answerer <database> <start-unix-ms> <share-file>`.
fn answerer_main() -> BenchResult<()> {
    let mut args = std::env::args_os().skip(1);
    let mut next = |what: &str| args.next().ok_or(format!("burst-answerer: no {what}"));
    let database = PathBuf::from(next("database")?);
    let start_ms: u64 = next("start")?.into_string().map_err(|_| "start")?.parse()?;
    let share = std::fs::read_to_string(PathBuf::from(next("share")?))?;
    let store = SqliteExecutionStore::open(&database)?;
    let executions = store.executions()?;
    let answer = serde_json::to_string(&address())?;
    let start = UNIX_EPOCH + Duration::from_millis(start_ms);
    let threads: Vec<_> = share
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let (execution_id, round_id) = line.split_once(' ').unwrap_or((line, ""));
            let (execution_id, round_id) = (execution_id.to_string(), round_id.to_string());
            let (executions, answer) = (executions.clone(), answer.clone());
            std::thread::spawn(move || {
                if let Ok(wait) = start.duration_since(SystemTime::now()) {
                    std::thread::sleep(wait);
                }
                let call = Instant::now();
                let key = format!("burst-{round_id}");
                let result = executions.respond(&execution_id, &round_id, &answer, &key);
                (call.elapsed(), SystemTime::now(), result)
            })
        })
        .collect();
    let mut report = AnswererReport::default();
    for thread in threads {
        let (took, returned, result) = thread.join().map_err(|_| "an answer thread panicked")?;
        report.call_ms.push(took.as_secs_f64() * 1e3);
        let after = returned
            .duration_since(start)
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3;
        report.last_return_after_start_ms = report.last_return_after_start_ms.max(after);
        match result {
            Ok(()) => report.acknowledged += 1,
            Err(e) if e.code() == Some(ErrorCode::StorageBusy) => report.busy += 1,
            Err(e) => report.other.push(e.to_string()),
        }
    }
    store.close();
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// Raises the soft limit of open files to the hard limit (each parked execution holds its
/// server's pipes).
fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit`/`setrlimit` read and write the struct they are given, which lives for
    // the call; raising the soft limit up to the hard limit needs no privilege.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

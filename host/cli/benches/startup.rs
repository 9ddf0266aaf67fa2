//! The command's start-up benchmark (`cargo bench -p m3-cli --bench startup`; `just bench` runs
//! it too): the wall time of `m3 pending` on an existing database holding pending rounds, once
//! the compiled component is in the cache and has settled (the first run fills the cache and is
//! reported apart, and so are the runs in the first seconds after it, which read and check the
//! whole artifact because it is too fresh for its identity to be recorded). The goals are under
//! 50 ms and under 10 ms (issue 20); the figures are reported, never asserted. Prints a table and
//! writes
//! `target/bench/cli.json` (under `$CARGO_TARGET_DIR` when set). Without `--bench` (as
//! `cargo test` runs it) or with `--smoke` it makes a short smoke pass and writes nothing.

use m3::{ManagedInputStore, SqliteManagedInputStore};
use m3_bench::fixture::address_round;
use m3_bench::stats::{quantile, timed};
use m3_bench::{BenchResult, RunArgs, write_report};
use std::path::Path;
use std::process::Command;

const M3: &str = env!("CARGO_BIN_EXE_m3");

fn m3(db: &Path, cache: &Path, args: &[&str]) -> std::process::Output {
    let output = Command::new(M3)
        .arg("--db")
        .arg(db)
        .args(args)
        .env("M3_CACHE_DIR", cache)
        .output()
        .expect("run m3");
    assert!(
        output.status.success(),
        "m3 {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn main() -> BenchResult<()> {
    let run = RunArgs::from_env();
    let runs = if run.full { 100 } else { 3 };
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("executions.sqlite");
    let cache = dir.path().join("cache");
    make_rounds(&db, 3)?;
    let (cold_seconds, _) = timed(|| m3(&db, &cache, &["pending"]));
    let cold_ms = cold_seconds * 1e3;
    let fresh_runs = runs.min(10);
    let fresh = timed_runs(&db, &cache, fresh_runs);
    // The artifact settles (its identity can be recorded) 2 s after it was written; the first
    // run after that reads it once more and records it.
    std::thread::sleep(std::time::Duration::from_millis(2_100));
    m3(&db, &cache, &["pending", "--json"]);
    let times = timed_runs(&db, &cache, runs);
    let ms = |samples: &[f64], q| quantile(samples, q).unwrap_or(f64::NAN);
    let (p50, p99) = (ms(&times, 0.5), ms(&times, 0.99));
    let (fresh_p50, fresh_p99) = (ms(&fresh, 0.5), ms(&fresh, 0.99));
    println!(
        "m3 start-up (`m3 pending --json` on a database with 3 pending rounds, {runs} runs; {})",
        run.mode()
    );
    println!("  first run (compiles the component into an empty cache): {cold_ms:.1} ms");
    println!(
        "  within 2 s of that ({fresh_runs} runs; the artifact read and checked): p50 \
         {fresh_p50:.1} ms, p99 {fresh_p99:.1} ms"
    );
    println!("  warm cache: p50 {p50:.1} ms, p99 {p99:.1} ms   goals: < 50 ms, < 10 ms");
    if !run.full {
        println!("smoke pass: no JSON written (run `cargo bench -p m3-cli --bench startup`)");
        return Ok(());
    }
    let report = serde_json::json!({
        "benchmark": "cli-startup",
        "command": "m3 pending --json",
        "pending_rounds": 3,
        "runs": runs,
        "cold_cache_ms": cold_ms,
        "fresh_runs": fresh_runs,
        "fresh_p50_ms": fresh_p50,
        "fresh_p99_ms": fresh_p99,
        "warm_p50_ms": p50,
        "warm_p99_ms": p99,
        "goal_ms": 50.0,
        "goal_met": p50 < 50.0,
        "issue_20_goal_ms": 10.0,
        "issue_20_goal_met": p50 < 10.0,
    });
    write_report("cli", &report)?;
    Ok(())
}

/// `runs` runs of `m3 pending --json` (each checked to list the three rounds): their wall times
/// in milliseconds.
fn timed_runs(db: &Path, cache: &Path, runs: usize) -> Vec<f64> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (seconds, output) = timed(|| m3(db, cache, &["pending", "--json"]));
        times.push(seconds * 1e3);
        let rounds: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
        assert_eq!(
            rounds.as_array().map(Vec::len),
            Some(3),
            "three pending rounds"
        );
    }
    times
}

/// `count` pending rounds, made through the store API like a worker would.
fn make_rounds(db: &Path, count: usize) -> BenchResult<()> {
    let store = SqliteManagedInputStore::open(db, m3::StoreOptions::default())?;
    for i in 0..count {
        store.create_round(&address_round(&format!("round-{i}"), &format!("exec-{i}")))?;
    }
    Ok(())
}

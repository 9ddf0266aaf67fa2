//! The helper processes of the tests, one mode each (the bodies are in the support library, so
//! that the binary and the tests that read their output share them):
//!
//! - `m3-test-helper race DB a|b THREADS BARRIER_DIR CHILD`: a racing process of
//!   `concurrency::*::idempotent_submit_race_across_processes` (`m3_tests::race`).
//! - `m3-test-helper kill-worker DB WORKER ROUNDS`: a worker process `random_kills` kills
//!   (`m3_tests::kill_worker`).
//! - `m3-test-helper contend DB WORKER`: a contending worker process of `postgres_faults`
//!   (`m3_tests::contention`).
//! - `m3-test-helper own-postgres`: a process that starts a PostgreSQL server and waits to be
//!   killed (`m3_tests::postgres_server::serve_until_killed`).
//!
//! DB is a SQLite file's path or a PostgreSQL URL. An error is printed on stderr and the exit
//! status is 1; wrong arguments exit with 2.

use anyhow::{Context, Result, bail};
use std::path::Path;

/// What the modes take, for the usage line.
const USAGE: &str = "usage: m3-test-helper race DB a|b THREADS BARRIER_DIR CHILD | \
                     kill-worker DB WORKER ROUNDS | contend DB WORKER | own-postgres";

/// Runs the mode `args` names.
fn run(args: &[String]) -> Result<()> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["race", db, which, threads, barrier_dir, child] => {
            let which = match *which {
                "a" => 'a',
                "b" => 'b',
                other => bail!("the answer is a or b, not {other:?}"),
            };
            let threads = threads.parse().context("THREADS")?;
            m3_tests::race::run_process(db, which, threads, Path::new(barrier_dir), child)
        }
        ["kill-worker", db, worker, rounds] => {
            m3_tests::kill_worker::run(db, worker, rounds.parse().context("ROUNDS")?)
        }
        ["contend", db, worker] => m3_tests::contention::run(db, worker),
        ["own-postgres"] => {
            m3_tests::postgres_server::serve_until_killed();
            Ok(())
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2)
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("m3-test-helper: {e:#}");
        std::process::exit(1);
    }
}

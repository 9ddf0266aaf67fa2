//! `m3 serve --notify` (`cargo bench -p m3-cli --bench notify`; `just bench-serve`): the real
//! binary on a SQLite file notifying a local receiver (the tests' webhook receiver, a loopback
//! HTTP/1.1 server answering 200 at once), the figures reported, never asserted:
//!
//! 1. **Throughput.** A burst of rounds created by this process (another process to the
//!    server) as fast as the store takes them: notifications per second at the receiver, from
//!    the first round's commit to the last notification read.
//! 2. **Delay.** Rounds created one at a time, a fifth of a second apart: the time from each
//!    round's commit (its `create_round` returned) to the receiver reading its notification
//!    (p50/p99). The server's watcher looks at the database every 100 ms, which bounds the
//!    median from below by about half that.
//!
//! Prints a table and writes `target/bench/notify.json` (under `$CARGO_TARGET_DIR` when set).
//! Without `--bench` (as `cargo test` runs it) or with `--smoke` it makes a short smoke pass and
//! writes nothing.

#[path = "../tests/receiving/mod.rs"]
mod receiving;

use m3::{ManagedInputStore, OwnerClaim, SqliteManagedInputStore, StoreOptions};
use m3_bench::fixture::address_round;
use m3_bench::stats::{latency_text, stats_json};
use m3_bench::{RunArgs, Stats, write_report};
use serde_json::json;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const M3: &str = env!("CARGO_BIN_EXE_m3");
/// The longest any one wait may take.
const WAIT: Duration = Duration::from_secs(300);

/// A running `m3 serve`, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(db: &std::path::Path, target: &str) -> Server {
    let mut child = Command::new(M3)
        .arg("--db")
        .arg(db)
        .args(["serve", "--listen", "127.0.0.1:0", "--notify", target])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning m3 serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped stdout"))
        .read_line(&mut line)
        .expect("the bound address");
    Server(child)
}

/// Creates round `name-i`, owned for ten minutes (as a parked worker's would be); when its
/// commit returned.
fn create(rounds: &SqliteManagedInputStore, name: &str, i: usize) -> (String, Instant) {
    let round_id = format!("{name}-{i}");
    let round = address_round(&round_id, &format!("exec-{name}-{i}")).owned_by(OwnerClaim {
        owner_id: "bench".into(),
        lease_ttl: Duration::from_secs(600),
    });
    rounds.create_round(&round).expect("creating a round");
    (round_id, Instant::now())
}

/// When the receiver read each round's `round_waiting` notification, waiting for `count`.
fn arrivals(receiver: &receiving::Receiver, count: usize) -> HashMap<String, Instant> {
    let deliveries = receiver.wait_for(WAIT, "every notification", |d| d.len() >= count);
    deliveries
        .iter()
        .map(|d| {
            let id = d.header("x-m3-event-id");
            (id.trim_start_matches("round_waiting:").to_string(), d.at)
        })
        .collect()
}

fn main() {
    let run = RunArgs::from_env();
    let (burst, paced) = if run.full { (1000, 200) } else { (10, 5) };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("notify.sqlite");
    let rounds = SqliteManagedInputStore::open(&db, StoreOptions::default()).expect("the store");

    // Part 1: a burst.
    let receiver = receiving::Receiver::start(&[]);
    let server = start(&db, &receiver.base);
    std::thread::sleep(Duration::from_millis(500));
    let first = Instant::now();
    for i in 0..burst {
        create(&rounds, "burst", i);
    }
    let created_in = first.elapsed().as_secs_f64();
    let got = arrivals(&receiver, burst);
    let last = got.values().max().copied().unwrap_or(first);
    let elapsed = last.duration_since(first).as_secs_f64();
    let per_second = burst as f64 / elapsed;
    drop(server);

    // Part 2: one at a time.
    let receiver = receiving::Receiver::start(&[]);
    let server = start(&db, &receiver.base);
    std::thread::sleep(Duration::from_millis(500));
    let mut committed = Vec::new();
    for i in 0..paced {
        committed.push(create(&rounds, "paced", i));
        std::thread::sleep(Duration::from_millis(200));
    }
    let got = arrivals(&receiver, paced);
    let delays: Vec<f64> = committed
        .iter()
        .filter_map(|(id, at)| {
            got.get(id)
                .map(|r| r.duration_since(*at).as_secs_f64() * 1e3)
        })
        .collect();
    let delay = Stats::of(&delays);
    let p99 = m3_bench::stats::quantile(&delays, 0.99);
    drop(server);

    println!(
        "m3 serve --notify: {burst} rounds created in {created_in:.2} s by another process; \
         {per_second:.0} notifications/s at the receiver ({elapsed:.2} s from the first commit \
         to the last notification)"
    );
    println!(
        "  commit -> notification ({paced} rounds, 200 ms apart): {}; p99 {:.1} ms",
        latency_text(delay.as_ref(), "ms"),
        p99.unwrap_or(f64::NAN)
    );
    if !run.full {
        println!("smoke pass: no JSON written (run `cargo bench -p m3-cli --bench notify`)");
        return;
    }
    let report = json!({
        "benchmark": "notify",
        "command": "cargo bench -p m3-cli --bench notify",
        "burst": {
            "rounds": burst,
            "created_seconds": created_in,
            "first_commit_to_last_notification_seconds": elapsed,
            "notifications_per_second": per_second,
        },
        "commit_to_notification": {
            "rounds": paced,
            "apart_ms": 200,
            "latency": stats_json(delay, "ms"),
            "p99_ms": p99,
        },
    });
    write_report("notify", &report).expect("writing the report");
}

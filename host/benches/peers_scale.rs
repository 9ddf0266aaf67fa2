//! The scale benchmark of the peer comparison (`cargo bench -p m3 --bench peers_scale`; `just
//! bench-peers` runs it with the others). Issue 7, item 5.
//!
//! **5a. Parked executions.** 1, 100, 1,000 and 10,000 executions, each parked on a pending round, in
//! one host process: [`m3::AsyncMcpTestKit`] on a SQLite file, the scripted harness, human input
//! `managed`, and the bundled shipping server (`shipping-server`, found next to this binary in
//! the target directory and built with cargo if it is missing or older than its sources; one
//! server child per execution). Each count runs in its own child process of the benchmark (this
//! binary again, `M3_BENCH_ROLE=parked`), started once the component is in the cache, so that
//! neither a first compilation nor another count's freed memory shows. The parent raises the
//! hard limit of open files to what the largest count needs where it may (as root), and that
//! process raises its soft limit to the hard limit (each execution holds one descriptor, the
//! socket of its server child's stdin and stdout: decision 82; the parent caps the count at what
//! the hard limits of open files and processes allow, and says so), runs one warm-up execution to
//! its end, then reads its memory, submits the executions (one task each, at most 100 calls in
//! flight: see below), waits until every one has a pending round, leaves them idle for two
//! windows, the first of three lease-renewal periods (15 s) and the second of a minute (1 s
//! each in a smoke pass), and reads its memory again:
//!
//! - `VmRSS` (`/proc/self/status`) and `Pss` (`/proc/self/smaps_rollup`, shared pages split
//!   between the processes that map them) of the host process: `(parked - before) / n`;
//! - the server children's own `VmRSS` and `Pss`, summed over the children of the process,
//!   divided by `n` (reported apart: they are the server's cost, not the kit's);
//! - the open files of the host process per execution, and its CPU time over each of the two
//!   idle periods (what the parked executions cost while nothing happens: their lease renewals,
//!   up to 256 workers per write transaction; the first renewal after a worker parks reads its
//!   rows, the next ones write the expiries alone, so the second period is the steady figure).
//!
//! Then it answers all of them (one task per execution: `respond_elicitation` and then `result`,
//! again at most 100 answer calls in flight) and reports the time from the first
//! `respond_elicitation` call to the last execution finished, with the time until every answer
//! call had returned and each execution's own answer-to-finished time.
//!
//! Why a bound on calls in flight: with every call issued at once (`--concurrency=0`), up to 512
//! blocking threads of the runtime contend for SQLite's write lock at once, which costs more
//! than it gains; `--concurrency=N` changes it. (The `burst` benchmark issues a thousand answers
//! at one instant from 16 processes.)
//!
//! **5b. Rounds in the database.** A store of 10^4 and of 10^6 rounds. Three template rounds
//! come from real executions of the kit (a pending round, the same round once resolved, and a
//! cancelled one, i.e. `failed`); their rows are copied into a fresh database (created by the
//! store, so with its schema and indexes) straight through SQLite, in transactions of 50,000 rows
//! with `synchronous=OFF` and `journal_mode=OFF` during the build (WAL again afterwards). The
//! component reads the row's `document`, so each copy's document is the template's with the ids
//! (round id, execution id, and the ids derived from them) replaced and every timestamp moved by
//! the copy's offset, exactly as its indexed columns are: each copy is created 1 ms after the
//! previous one. Each execution has 10 rounds (kit-style ids: `exec-<32 hex>`, round
//! `<execution>-r<k>`); the first nine are resolved; the last is pending for 10% of the
//! executions, failed for 5%, resolved for the rest: at most one pending round per execution,
//! as the kit keeps it. Then, after 20 warm-up calls each, 200 calls each of:
//!
//! - `list_rounds(RoundFilter { execution_id: Some(x), status: Some(Pending) })` for a random
//!   execution `x` that has a pending round;
//! - `list_rounds` of a status (`Pending`, `Resolved`) with a limit of 100;
//! - `Executions::pending_round(x)` (what `pending_elicitation()` on a kit handle calls, through
//!   `SqliteExecutionStore::executions()`), for an `x` with a pending round and for one without;
//! - `list_rounds(RoundFilter { execution_id: Some(x) })` (all ten rounds of `x`);
//! - the same SQL as the store's, straight through rusqlite (SQLite alone: on one connection
//!   reused, and on a new connection per call as the store makes one per operation), and the
//!   execution-and-status query once more with `INDEXED BY managed_input_rounds_by_execution`
//!   (SQLite's planner picks the status index for it, so it reads every pending round of the
//!   database: the forced plan shows what the execution index would give).
//!
//! The database build is timed apart, and each query's plan (`EXPLAIN QUERY PLAN`) is recorded.
//!
//! It prints tables and writes `target/bench/peers_scale.json` (under `$CARGO_TARGET_DIR` when
//! set). It measures; it never asserts on a time. Run without `--bench` (as `cargo test
//! --workspace` does) or with `--smoke`, it runs a short smoke pass (2 and 5 parked executions,
//! 10^3 and 10^4 rounds, 20 calls) and writes no JSON. `--only=parked` or `--only=rounds` runs
//! one part (no JSON); `--parked=1,100`, `--rounds=10000`, `--concurrency=N` (calls in flight
//! in 5a; 0: all at once) and `--idle-seconds=N` (the idle window, long enough to attach a
//! profiler to the parked process) override the defaults (no JSON).

use chrono::Utc;
use m3::{
    AsyncExecutionHandle, AsyncMcpTestKit, ExecutionHandle, ExecutionStatus, ExecutionStore,
    ManagedInputStatus, ManagedInputStore, McpTestKit, OutcomeKind, PendingElicitationRound,
    RoundFilter, SqliteExecutionStore, SqliteManagedInputStore, StoreOptions,
};
use m3_bench::fixture::{
    address, booking_agent, booking_server as server_binding, booking_submission as submission,
};
use m3_bench::stats::{Stats, stats_json};
use m3_bench::{BenchResult, RunArgs, Table, shipping_server_binary, target_dir, write_report};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The parts of the benchmark, for `--only=`.
const PARTS: [&str; 2] = ["parked", "rounds"];

/// What a re-executed copy of this binary does.
const ROLE_VAR: &str = "M3_BENCH_ROLE";

/// How long any single wait may take before the benchmark gives up (a hang guard, not a
/// measurement).
const WAIT_LIMIT: Duration = Duration::from_secs(300);

/// Rounds per execution in the generated stores.
const ROUNDS_PER_EXECUTION: usize = 10;

/// Rows per transaction of the build.
const BUILD_BATCH: usize = 50_000;

/// Each of the two idle periods the parked executions sit through before the memory is read
/// (the CPU time of the host process over each is reported): three lease-renewal periods (5 s
/// each) with the full counts, so that every worker renews three times in each and the figure
/// does not hang on where the renewals of a period fall (one period's window measured from 3 %
/// to 7 % of a core at 10,000 parked, 2026-12-07); 1 s in a smoke pass. The parked process reads
/// it from `IDLE_VAR` (milliseconds).
const IDLE_WINDOW_FULL: Duration = Duration::from_secs(15);
const IDLE_WINDOW_SMOKE: Duration = Duration::from_secs(1);
const IDLE_VAR: &str = "M3_BENCH_IDLE_MS";
/// The steady (second) idle period of a full run: a minute, a running worker's longest single
/// wait (the component's `MAX_WAIT_MS`). A parked worker waits up to ten minutes (`MAX_PARK_MS`)
/// before it looks by itself, which this window does not reach; BENCHMARKS.md section 13 gives
/// what such a look costs (measured with a one-minute wait).
const LONGEST_WAIT: Duration = Duration::from_secs(60);
/// The steady period's length, for the parked process (milliseconds).
const STEADY_VAR: &str = "M3_BENCH_STEADY_MS";

/// Submissions and answer calls of 5a in flight at once, unless `--concurrency=N` says otherwise
/// (0: all at once; see the module's documentation).
const DEFAULT_CONCURRENCY: usize = 100;

/// Open files the parked process needs beyond its executions' (database, runtime, libraries).
const FD_RESERVE: u64 = 256;

/// Open files one parked execution holds in the host process: the socket of its server child's
/// stdin and stdout (decision 82; the benchmark reports the count it measures).
const FDS_PER_EXECUTION: u64 = 1;

// ---------------------------------------------------------------------------------------------
// Run configuration

#[derive(Debug, Clone)]
struct Plan {
    /// Full run (`--bench`, all parts, default counts): writes the JSON.
    full: bool,
    /// `--only=...`: one part.
    only: Option<&'static str>,
    /// Counts of parked executions (one child process each).
    parked: Vec<usize>,
    /// Round counts of the generated stores.
    rounds: Vec<usize>,
    /// Measured calls per query (after `warmup_calls`).
    calls: usize,
    warmup_calls: usize,
    /// Submissions and answer calls of 5a in flight at once (0: all at once).
    concurrency: usize,
    /// The idle window of 5a.
    idle_window: Duration,
    /// The steady idle window of 5a (the second).
    steady_window: Duration,
    /// Counts were overridden on the command line.
    custom: bool,
}

impl Plan {
    fn from_args() -> Self {
        let run = RunArgs::from_env();
        let (args, full) = (&run.args, run.full);
        let only = run.only(&PARTS, "part");
        let counts = |flag: &str| {
            args.iter().find_map(|a| a.strip_prefix(flag)).map(|list| {
                list.split(',')
                    .map(|n| {
                        n.replace('_', "").parse::<usize>().unwrap_or_else(|_| {
                            eprintln!("{flag} takes counts separated by commas, not `{list}`");
                            std::process::exit(2);
                        })
                    })
                    .collect::<Vec<_>>()
            })
        };
        let (parked_arg, rounds_arg) = (counts("--parked="), counts("--rounds="));
        let concurrency_arg = run.number("concurrency").map(|n| n as usize);
        let idle_arg = run.number("idle-seconds").map(Duration::from_secs);
        let custom = parked_arg.is_some()
            || rounds_arg.is_some()
            || concurrency_arg.is_some()
            || idle_arg.is_some();
        let (parked, rounds, calls, warmup_calls) = if full {
            (
                vec![1, 100, 1_000, 10_000],
                vec![10_000, 1_000_000],
                200,
                20,
            )
        } else {
            (vec![2, 5], vec![1_000, 10_000], 20, 3)
        };
        Self {
            full: full && only.is_none() && !custom,
            only,
            parked: parked_arg.unwrap_or(parked),
            rounds: rounds_arg.unwrap_or(rounds),
            concurrency: concurrency_arg.unwrap_or(DEFAULT_CONCURRENCY),
            idle_window: idle_arg.unwrap_or(if full {
                IDLE_WINDOW_FULL
            } else {
                IDLE_WINDOW_SMOKE
            }),
            steady_window: match (idle_arg, full) {
                (Some(idle), _) => idle,
                (None, true) => IDLE_WINDOW_FULL.max(LONGEST_WAIT),
                (None, false) => IDLE_WINDOW_SMOKE,
            },
            calls,
            warmup_calls,
            custom,
        }
    }

    fn runs(&self, part: &str) -> bool {
        self.only.is_none_or(|only| only == part)
    }

    fn to_json(&self) -> Value {
        json!({
            "full": self.full,
            "only": self.only,
            "parked_executions": self.parked,
            "rounds": self.rounds,
            "rounds_per_execution": ROUNDS_PER_EXECUTION,
            "calls_per_query": self.calls,
            "warmup_calls_per_query": self.warmup_calls,
            "custom_counts": self.custom,
            "calls_in_flight_at_once": self.concurrency,
            "idle_window_seconds": self.idle_window.as_secs_f64(),
            "steady_window_seconds": self.steady_window.as_secs_f64(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics and formatting

/// `p50 / p99` of a sample in milliseconds, printed with a precision that suits it.
fn pair_ms(s: &Option<Stats>) -> String {
    let Some(s) = s else {
        return "-".into();
    };
    let one = |v: f64| {
        if v < 1.0 {
            format!("{v:.3}")
        } else if v < 100.0 {
            format!("{v:.2}")
        } else {
            format!("{v:.0}")
        }
    };
    format!("{} / {} ms", one(s.p50), one(s.p99))
}

/// A small deterministic generator (SplitMix64): the same executions are queried every run.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

// ---------------------------------------------------------------------------------------------
// Fixtures

fn outcome_name(kind: OutcomeKind) -> &'static str {
    match kind {
        OutcomeKind::Succeeded => "succeeded",
        OutcomeKind::Failed => "failed",
        OutcomeKind::Cancelled => "cancelled",
    }
}

// ---------------------------------------------------------------------------------------------
// Locating (and if need be building) the shipping server

// ---------------------------------------------------------------------------------------------
// Process limits and memory

/// A resource limit (`getrlimit`); `u64::MAX` is unlimited.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct Limit {
    soft: u64,
    hard: u64,
}

fn get_limit(resource: libc::__rlimit_resource_t) -> Limit {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes into the struct it is given, which lives for the call.
    let rc = unsafe { libc::getrlimit(resource, &mut limit) };
    if rc != 0 {
        return Limit::default();
    }
    let value = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            v
        }
    };
    Limit {
        soft: value(limit.rlim_cur),
        hard: value(limit.rlim_max),
    }
}

/// Raises the hard limit of open files to `wanted` where the process may (root may, up to the
/// kernel's `fs.nr_open`); otherwise leaves it. Children inherit it.
fn raise_fd_hard_limit(wanted: u64) {
    let current = get_limit(libc::RLIMIT_NOFILE);
    if current.hard >= wanted {
        return;
    }
    let ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(current.hard);
    let limit = libc::rlimit {
        rlim_cur: current.soft as libc::rlim_t,
        rlim_max: wanted.min(ceiling) as libc::rlim_t,
    };
    // SAFETY: `setrlimit` reads the struct it is given, which lives for the call. Without the
    // privilege it fails and nothing changes.
    let _ = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
}

/// Raises the soft limit of open files to the hard limit; the limit before and after.
fn raise_fd_limit() -> (Limit, Limit) {
    let before = get_limit(libc::RLIMIT_NOFILE);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: as in `get_limit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0
        && limit.rlim_cur < limit.rlim_max
    {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: `setrlimit` reads the struct it is given; raising the soft limit up to the
        // hard limit needs no privilege.
        let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
        if rc != 0 {
            eprintln!(
                "could not raise the open-file limit: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    (before, get_limit(libc::RLIMIT_NOFILE))
}

/// How many executions the process limits allow at once: open files (`FDS_PER_EXECUTION` each,
/// after `FD_RESERVE`; the hard limit, since the parked process raises its soft limit) and
/// processes of this user (one server child each, with room for what already runs).
fn executions_allowed() -> (usize, Value) {
    let files = get_limit(libc::RLIMIT_NOFILE);
    let processes = get_limit(libc::RLIMIT_NPROC);
    let by_files = files.hard.saturating_sub(FD_RESERVE) / FDS_PER_EXECUTION;
    let by_processes = processes.soft.saturating_sub(1_024);
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    let allowed = by_files
        .min(by_processes)
        .min(pid_max.saturating_sub(1_024));
    let allowed = usize::try_from(allowed).unwrap_or(usize::MAX);
    let limits = json!({
        "open_files": {"soft": files.soft, "hard": files.hard},
        "processes": {"soft": processes.soft, "hard": processes.hard},
        "pid_max": pid_max,
        "fds_per_execution_assumed": FDS_PER_EXECUTION,
        "executions_allowed": allowed,
    });
    (allowed, limits)
}

/// Reads `key: number ...` lines of a `/proc` file.
fn proc_fields(path: &str, mut each: impl FnMut(&str, u64)) {
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

/// Fields of `/proc/self/status` and `/proc/self/smaps_rollup` (KiB), and the open files.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct ProcStatus {
    vm_rss_kib: u64,
    rss_anon_kib: u64,
    rss_file_kib: u64,
    vm_hwm_kib: u64,
    /// Proportional set size: a page mapped by N processes counts 1/N in each.
    pss_kib: u64,
    pss_anon_kib: u64,
    pss_file_kib: u64,
    threads: u64,
    open_files: u64,
    /// User and system CPU time of the process so far (`/proc/self/stat`), seconds.
    cpu_seconds: f64,
}

impl ProcStatus {
    fn read() -> Self {
        let mut status = Self::default();
        proc_fields("/proc/self/status", |key, number| match key {
            "VmRSS" => status.vm_rss_kib = number,
            "RssAnon" => status.rss_anon_kib = number,
            "RssFile" => status.rss_file_kib = number,
            "VmHWM" => status.vm_hwm_kib = number,
            "Threads" => status.threads = number,
            _ => {}
        });
        proc_fields("/proc/self/smaps_rollup", |key, number| match key {
            "Pss" => status.pss_kib = number,
            "Pss_Anon" => status.pss_anon_kib = number,
            "Pss_File" => status.pss_file_kib = number,
            _ => {}
        });
        status.open_files = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        status.cpu_seconds = cpu_seconds("/proc/self/stat");
        status
    }
}

/// User plus system CPU time in a `/proc/<pid>/stat` file, seconds.
fn cpu_seconds(path: &str) -> f64 {
    // SAFETY: `sysconf` has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    // After `pid (comm)`: state is field 3, utime field 14 and stime field 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field(11) + field(12)) as f64 / ticks
}

/// The memory of this process's children (the server processes), summed.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct ChildrenMemory {
    processes: u64,
    vm_rss_kib: u64,
    pss_kib: u64,
}

impl ChildrenMemory {
    fn read() -> Self {
        let me = std::process::id();
        let mut total = Self::default();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return total;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // `pid (comm) state ppid ...`: the command may hold spaces and parentheses.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid != Some(me) {
                continue;
            }
            total.processes += 1;
            proc_fields(&format!("/proc/{pid}/status"), |key, number| {
                if key == "VmRSS" {
                    total.vm_rss_kib += number;
                }
            });
            proc_fields(&format!("/proc/{pid}/smaps_rollup"), |key, number| {
                if key == "Pss" {
                    total.pss_kib += number;
                }
            });
        }
        total
    }
}

// ---------------------------------------------------------------------------------------------
// 5a. Parked executions (the child process)

#[derive(Debug, Serialize, Deserialize)]
struct ParkedResult {
    executions: usize,
    /// Submissions and answer calls in flight at once (0: all).
    concurrency: usize,
    open_files_limit_before: Limit,
    open_files_limit: Limit,
    before: ProcStatus,
    parked: ProcStatus,
    after: ProcStatus,
    children_before: ChildrenMemory,
    children_parked: ChildrenMemory,
    /// From the first submission to every execution having a pending round.
    park_seconds: f64,
    /// CPU time of the host process while all were parked and idle, per second of wall time
    /// (1.0: one core busy), over the second idle period (every worker renewed once before it).
    idle_cpu_share: f64,
    /// The same over the first idle period, right after all were parked.
    first_idle_cpu_share: f64,
    /// From the first `respond_elicitation` call to the last one returned.
    responds_returned_seconds: f64,
    /// From the first `respond_elicitation` call to the last execution finished.
    answer_all_seconds: f64,
    /// Per execution: its `respond_elicitation` call starting to its `result` returning (ms).
    answer_to_finished_ms: Option<Stats>,
    /// Per execution: its `respond_elicitation` call (ms).
    respond_call_ms: Option<Stats>,
    outcomes: BTreeMap<String, usize>,
}

impl ParkedResult {
    /// `(parked - before) / executions` of one field, in MiB.
    fn per_execution_mib(&self, field: fn(&ProcStatus) -> u64) -> f64 {
        (field(&self.parked) as f64 - field(&self.before) as f64)
            / 1024.0
            / self.executions.max(1) as f64
    }

    fn children_per_execution_mib(&self, field: fn(&ChildrenMemory) -> u64) -> f64 {
        (field(&self.children_parked) as f64 - field(&self.children_before) as f64)
            / 1024.0
            / self.executions.max(1) as f64
    }

    fn answered_per_second(&self) -> f64 {
        self.executions as f64 / self.answer_all_seconds.max(1e-9)
    }

    fn to_json(&self) -> Value {
        json!({
            "executions": self.executions,
            "calls_in_flight_at_once": if self.concurrency == 0 {
                json!("all")
            } else {
                json!(self.concurrency)
            },
            "rss_per_execution_mib": self.per_execution_mib(|s| s.vm_rss_kib),
            "rss_anon_per_execution_mib": self.per_execution_mib(|s| s.rss_anon_kib),
            "rss_file_per_execution_mib": self.per_execution_mib(|s| s.rss_file_kib),
            "pss_per_execution_mib": self.per_execution_mib(|s| s.pss_kib),
            "open_files_per_execution": (self.parked.open_files as f64
                - self.before.open_files as f64) / self.executions.max(1) as f64,
            "threads_parked": self.parked.threads,
            "server_children": {
                "processes_parked": self.children_parked.processes,
                "rss_per_execution_mib": self.children_per_execution_mib(|c| c.vm_rss_kib),
                "pss_per_execution_mib": self.children_per_execution_mib(|c| c.pss_kib),
            },
            "seconds_to_park_all": self.park_seconds,
            "host_cpu_cores_busy_while_parked_idle": self.idle_cpu_share,
            "host_cpu_cores_busy_in_the_first_idle_period": self.first_idle_cpu_share,
            "seconds_until_all_respond_calls_returned": self.responds_returned_seconds,
            "seconds_to_answer_all": self.answer_all_seconds,
            "answered_executions_per_second": self.answered_per_second(),
            "answer_to_finished_ms": stats_json(self.answer_to_finished_ms, "ms"),
            "respond_call_ms": stats_json(self.respond_call_ms, "ms"),
            "outcomes": self.outcomes,
            "open_files_limit_before": self.open_files_limit_before,
            "open_files_limit": self.open_files_limit,
            "before": self.before,
            "parked": self.parked,
            "after_answering": self.after,
            "children_before": self.children_before,
            "children_parked": self.children_parked,
        })
    }
}

/// `M3_BENCH_ROLE=parked`, arguments `<server> <executions> <database>`: parks the executions
/// (after one warm-up execution), measures, answers them all, and prints the result as JSON.
fn parked_main() -> BenchResult<()> {
    let (limit_before, limit) = raise_fd_limit();
    let mut args = std::env::args_os().skip(1);
    let server = PathBuf::from(args.next().ok_or("parked: no server")?);
    let executions: usize = args
        .next()
        .and_then(|n| n.into_string().ok())
        .ok_or("parked: no count")?
        .parse()?;
    let concurrency: usize = args
        .next()
        .and_then(|n| n.into_string().ok())
        .ok_or("parked: no concurrency")?
        .parse()?;
    let database = PathBuf::from(args.next().ok_or("parked: no database")?);
    let idle_window = std::env::var(IDLE_VAR)
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
        .map_or(IDLE_WINDOW_FULL, Duration::from_millis);
    let steady_window = std::env::var(STEADY_VAR)
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
        .map_or(idle_window, Duration::from_millis);
    let mut result = park(
        &server,
        executions,
        concurrency,
        (idle_window, steady_window),
        &database,
    )?;
    result.open_files_limit_before = limit_before;
    result.open_files_limit = limit;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

/// Waits until every handle has a pending round; the rounds, in the handles' order.
async fn wait_parked(
    handles: &[AsyncExecutionHandle],
) -> BenchResult<Vec<PendingElicitationRound>> {
    let started = Instant::now();
    let mut rounds: Vec<Option<PendingElicitationRound>> = vec![None; handles.len()];
    loop {
        let mut missing = 0;
        for (handle, round) in handles.iter().zip(rounds.iter_mut()) {
            if round.is_none() {
                *round = handle.pending_elicitation().await?;
                if round.is_none() {
                    missing += 1;
                }
            }
        }
        if missing == 0 {
            break;
        }
        if started.elapsed() > WAIT_LIMIT {
            // What the missing ones are doing: still running, or finished (and how).
            let mut states: BTreeMap<String, usize> = BTreeMap::new();
            for (handle, round) in handles.iter().zip(&rounds) {
                if round.is_none() {
                    let state = handle.snapshot().await?;
                    let what = match state.outcome {
                        Some(outcome) => format!("finished {outcome}"),
                        None => format!("{:?}", state.lifecycle),
                    };
                    *states.entry(what).or_default() += 1;
                }
            }
            return Err(format!(
                "{missing} of {} executions have no pending round after {WAIT_LIMIT:?}: {states:?}",
                handles.len()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(rounds.into_iter().flatten().collect())
}

fn park(
    server: &Path,
    executions: usize,
    concurrency: usize,
    (idle_window, steady_window): (Duration, Duration),
    database: &Path,
) -> BenchResult<ParkedResult> {
    let gate = Arc::new(tokio::sync::Semaphore::new(if concurrency == 0 {
        tokio::sync::Semaphore::MAX_PERMITS
    } else {
        concurrency
    }));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let store = Arc::new(SqliteExecutionStore::open(database)?);
    let result = runtime.block_on(async {
        let kit = AsyncMcpTestKit::new(store.clone(), BTreeMap::<String, String>::new());
        let agent = kit.agents([booking_agent()])?.remove(0);
        let binding = server_binding(server)?;

        // Warm-up, answered to its end: the component, the pools, the runtime's threads, and
        // the answer path.
        let warmup = agent.submit(submission(binding.clone())).await?;
        let round = wait_parked(std::slice::from_ref(&warmup)).await?.remove(0);
        warmup
            .respond_elicitation(&round.round_id, address(), "address-warmup")
            .await?;
        let done = warmup.result(Some(WAIT_LIMIT)).await?;
        if done.outcome.kind != OutcomeKind::Succeeded {
            return Err(format!("the warm-up execution ended {}", done.outcome).into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = ProcStatus::read();
        let children_before = ChildrenMemory::read();

        let started = Instant::now();
        let mut submits = tokio::task::JoinSet::new();
        for i in 0..executions {
            let (agent, submission) = (agent.clone(), submission(binding.clone()));
            let gate = gate.clone();
            submits.spawn(async move {
                let _permit = gate.acquire_owned().await;
                (i, agent.submit(submission).await)
            });
        }
        let mut handles = Vec::new();
        while let Some(done) = submits.join_next().await {
            let (i, handle) = done?;
            handles.push((
                i,
                handle.map_err(|e| format!("submitting execution {i}: {e}"))?,
            ));
        }
        handles.sort_by_key(|(i, _)| *i);
        let handles: Vec<AsyncExecutionHandle> = handles.into_iter().map(|(_, h)| h).collect();
        let rounds = wait_parked(&handles)
            .await
            .map_err(|e| format!("waiting for the pending rounds: {e}"))?;
        let park_seconds = started.elapsed().as_secs_f64();
        // Nothing answers them yet: all are still parked when measured, after an idle window
        // over which the process's CPU time is measured.
        let first_start = ProcStatus::read();
        let first_started = Instant::now();
        tokio::time::sleep(idle_window).await;
        let idle_start = ProcStatus::read();
        let idle_started = Instant::now();
        let first_idle_cpu_share = (idle_start.cpu_seconds - first_start.cpu_seconds)
            / (idle_started - first_started).as_secs_f64();
        tokio::time::sleep(steady_window).await;
        let parked = ProcStatus::read();
        let idle_cpu_share =
            (parked.cpu_seconds - idle_start.cpu_seconds) / idle_started.elapsed().as_secs_f64();
        let children_parked = ChildrenMemory::read();

        // Answer them all at once: one task per execution.
        let started = Instant::now();
        let mut answers = tokio::task::JoinSet::new();
        for (handle, round) in handles.iter().zip(rounds) {
            let handle = handle.clone();
            let gate = gate.clone();
            answers.spawn(async move {
                let permit = gate.acquire_owned().await;
                let call = Instant::now();
                let key = format!("address-{}", round.round_id);
                handle
                    .respond_elicitation(&round.round_id, address(), &key)
                    .await
                    .map_err(|e| format!("answering round {}: {e}", round.round_id))?;
                let returned = Instant::now();
                drop(permit);
                let result = handle
                    .result(Some(WAIT_LIMIT))
                    .await
                    .map_err(|e| format!("the result of {}: {e}", handle.execution_id()))?;
                BenchResult::Ok((call, returned, Instant::now(), result.outcome.kind))
            });
        }
        let (mut last_returned, mut last_finished) = (started, started);
        let (mut to_finished, mut calls) = (Vec::new(), Vec::new());
        let mut outcomes = BTreeMap::new();
        while let Some(done) = answers.join_next().await {
            let (call, returned, finished, kind) = done??;
            last_returned = last_returned.max(returned);
            last_finished = last_finished.max(finished);
            to_finished.push((finished - call).as_secs_f64() * 1e3);
            calls.push((returned - call).as_secs_f64() * 1e3);
            *outcomes.entry(outcome_name(kind).to_string()).or_insert(0) += 1;
        }
        let after = ProcStatus::read();
        BenchResult::Ok(ParkedResult {
            executions,
            concurrency,
            open_files_limit_before: Limit::default(),
            open_files_limit: Limit::default(),
            before,
            parked,
            after,
            children_before,
            children_parked,
            park_seconds,
            idle_cpu_share,
            first_idle_cpu_share,
            responds_returned_seconds: (last_returned - started).as_secs_f64(),
            answer_all_seconds: (last_finished - started).as_secs_f64(),
            answer_to_finished_ms: Stats::of(&to_finished),
            respond_call_ms: Stats::of(&calls),
            outcomes,
        })
    });
    store.close();
    result
}

/// One count of parked executions, in a child process (the component is already in the cache).
fn parked_run(
    scratch: &Path,
    server: &Path,
    executions: usize,
    concurrency: usize,
    (idle_window, steady_window): (Duration, Duration),
) -> BenchResult<ParkedResult> {
    let output = Command::new(std::env::current_exe()?)
        .env(IDLE_VAR, idle_window.as_millis().to_string())
        .env(STEADY_VAR, steady_window.as_millis().to_string())
        .arg(server)
        .arg(executions.to_string())
        .arg(concurrency.to_string())
        .arg(scratch.join(format!("parked-{executions}.sqlite")))
        .env(ROLE_VAR, "parked")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "the process parking {executions} executions failed: {}",
            output.status
        )
        .into());
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// What 5a produced for one requested count.
struct ParkedOutcome {
    requested: usize,
    result: Result<ParkedResult, String>,
}

fn parked_part(
    plan: &Plan,
    scratch: &Path,
    server: &Path,
) -> BenchResult<(Vec<ParkedOutcome>, Value)> {
    // The component into the cache first, in this process.
    m3::Policy::new()?;
    let most = plan.parked.iter().copied().max().unwrap_or(0) as u64;
    raise_fd_hard_limit(most * FDS_PER_EXECUTION + FD_RESERVE);
    let (allowed, limits) = executions_allowed();
    let mut outcomes = Vec::new();
    for &requested in &plan.parked {
        let executions = requested.min(allowed);
        if executions < requested {
            eprintln!(
                "the process limits allow {allowed} executions at once, not {requested}: \
                 measuring {executions}"
            );
        }
        eprintln!("parking {executions} executions at once, then answering them all ...");
        let result = parked_run(
            scratch,
            server,
            executions,
            plan.concurrency,
            (plan.idle_window, plan.steady_window),
        )
        .map_err(|e| e.to_string());
        if let Err(e) = &result {
            eprintln!("  failed: {e}");
        }
        outcomes.push(ParkedOutcome { requested, result });
    }
    Ok((outcomes, limits))
}

fn print_parked(outcomes: &[ParkedOutcome]) {
    let mut table = Table::new(
        "5a. Executions parked at once in one host process (scripted harness, shipping server, \
         managed input)",
        &[
            "executions",
            "host RSS / exec",
            "host PSS / exec",
            "server child RSS / PSS per exec",
            "fds / exec",
            "park all",
            "CPU while parked (steady)",
            "answer all",
            "answers/s",
            "answer -> finished p50 / p99",
            "outcomes",
        ],
    );
    for outcome in outcomes {
        let r = match &outcome.result {
            Ok(r) => r,
            Err(e) => {
                table.row(vec![outcome.requested.to_string(), format!("FAILED: {e}")]);
                continue;
            }
        };
        let executions = if r.executions == outcome.requested {
            r.executions.to_string()
        } else {
            format!("{} (asked {})", r.executions, outcome.requested)
        };
        table.row(vec![
            executions,
            format!("{:.3} MiB", r.per_execution_mib(|s| s.vm_rss_kib)),
            format!("{:.3} MiB", r.per_execution_mib(|s| s.pss_kib)),
            format!(
                "{:.2} / {:.2} MiB",
                r.children_per_execution_mib(|c| c.vm_rss_kib),
                r.children_per_execution_mib(|c| c.pss_kib)
            ),
            format!(
                "{:.1}",
                (r.parked.open_files as f64 - r.before.open_files as f64)
                    / r.executions.max(1) as f64
            ),
            format!("{:.2} s", r.park_seconds),
            format!(
                "{:.1}% of a core (first period {:.1}%)",
                r.idle_cpu_share * 100.0,
                r.first_idle_cpu_share * 100.0
            ),
            format!(
                "{:.3} s (calls returned {:.3} s)",
                r.answer_all_seconds, r.responds_returned_seconds
            ),
            format!("{:.0}", r.answered_per_second()),
            pair_ms(&r.answer_to_finished_ms),
            r.outcomes
                .iter()
                .map(|(k, v)| format!("{v} {k}"))
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    table.print();
    if let Some(r) = outcomes.iter().rev().find_map(|o| o.result.as_ref().ok()) {
        println!(
            "  ({} executions: host {:.1} -> {:.1} MiB RSS, PSS {:.1} -> {:.1} MiB, {} threads; \
             open-file limit {} (was {}))",
            r.executions,
            r.before.vm_rss_kib as f64 / 1024.0,
            r.parked.vm_rss_kib as f64 / 1024.0,
            r.before.pss_kib as f64 / 1024.0,
            r.parked.pss_kib as f64 / 1024.0,
            r.parked.threads,
            r.open_files_limit.soft,
            r.open_files_limit_before.soft,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 5b. Rounds in the database: templates

/// A round's row of `managed_input_rounds` and its version row, every column.
#[derive(Debug, Clone)]
struct RoundRow {
    round_id: String,
    execution_id: String,
    status: String,
    version: i64,
    owner_id: Option<String>,
    lease_expires_at_ns: Option<i64>,
    deadline_ns: Option<i64>,
    created_at_ns: i64,
    updated_at_ns: i64,
    document: String,
}

/// The round's columns, from its wide row (`r`) and its version row (`v`), as the store reads them.
const SELECT: &str = "SELECT r.round_id, r.execution_id, r.status, v.version, r.owner_id, \
                      v.lease_expires_at_ns, r.deadline_ns, r.created_at_ns, v.updated_at_ns, \
                      r.document FROM managed_input_rounds r \
                      LEFT JOIN managed_input_round_versions v ON v.round_id = r.round_id";

fn read_row(database: &Path, round_id: &str) -> BenchResult<RoundRow> {
    let conn = Connection::open_with_flags(database, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let row = conn
        .query_row(
            &format!("{SELECT} WHERE r.round_id = ?1"),
            [round_id],
            |r| {
                Ok(RoundRow {
                    round_id: r.get(0)?,
                    execution_id: r.get(1)?,
                    status: r.get(2)?,
                    version: r.get(3)?,
                    owner_id: r.get(4)?,
                    lease_expires_at_ns: r.get(5)?,
                    deadline_ns: r.get(6)?,
                    created_at_ns: r.get(7)?,
                    updated_at_ns: r.get(8)?,
                    document: r.get(9)?,
                })
            },
        )
        .optional()?;
    row.ok_or_else(|| format!("round {round_id} has no row").into())
}

/// A piece of a template document.
#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    RoundId,
    ExecutionId,
    /// A timestamp (`{"seconds":S,"nanoseconds":N}`), in nanoseconds.
    Time(i64),
}

/// A template round: its row, and its document cut into pieces so that a copy gets new ids and
/// shifted timestamps.
#[derive(Debug, Clone)]
struct Template {
    row: RoundRow,
    pieces: Vec<Piece>,
}

impl Template {
    fn new(row: RoundRow) -> BenchResult<Self> {
        // Round ids first: a kit round id starts with its execution id.
        let mut pieces = vec![Piece::Text(row.document.clone())];
        pieces = split_pieces(pieces, &row.round_id, || Piece::RoundId);
        pieces = split_pieces(pieces, &row.execution_id, || Piece::ExecutionId);
        let pieces = pieces
            .into_iter()
            .flat_map(|piece| match piece {
                Piece::Text(text) => split_times(&text),
                other => vec![other],
            })
            .collect();
        let template = Self { row, pieces };
        // The template renders its own document back exactly.
        let (document, _) = template.render(&template.row.round_id, &template.row.execution_id, 0);
        if document != template.row.document {
            return Err(format!(
                "the template of round {} does not render back to its document",
                template.row.round_id
            )
            .into());
        }
        if !template.pieces.iter().any(|p| matches!(p, Piece::Time(_))) {
            return Err("the template document holds no timestamp".into());
        }
        Ok(template)
    }

    /// The document of a copy with these ids and every timestamp moved by `shift_ns`, and the
    /// number of timestamps moved.
    fn render(&self, round_id: &str, execution_id: &str, shift_ns: i64) -> (String, usize) {
        let mut out = String::with_capacity(self.row.document.len() + 64);
        let mut times = 0;
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::RoundId => out.push_str(round_id),
                Piece::ExecutionId => out.push_str(execution_id),
                Piece::Time(ns) => {
                    let t = ns + shift_ns;
                    out.push_str(&format!(
                        "{{\"seconds\":{},\"nanoseconds\":{}}}",
                        t.div_euclid(1_000_000_000),
                        t.rem_euclid(1_000_000_000)
                    ));
                    times += 1;
                }
            }
        }
        (out, times)
    }
}

fn split_pieces(pieces: Vec<Piece>, needle: &str, make: impl Fn() -> Piece) -> Vec<Piece> {
    let mut out = Vec::new();
    for piece in pieces {
        let Piece::Text(text) = piece else {
            out.push(piece);
            continue;
        };
        let mut parts = text.split(needle).peekable();
        while let Some(part) = parts.next() {
            if !part.is_empty() {
                out.push(Piece::Text(part.to_string()));
            }
            if parts.peek().is_some() {
                out.push(make());
            }
        }
    }
    out
}

/// Cuts `{"seconds":S,"nanoseconds":N}` out of `text`.
fn split_times(text: &str) -> Vec<Piece> {
    const OPEN: &str = "{\"seconds\":";
    const MIDDLE: &str = ",\"nanoseconds\":";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        let after = &rest[at + OPEN.len()..];
        let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
        let seconds_len = digits(after);
        let parsed = (|| {
            let seconds: i64 = after[..seconds_len].parse().ok()?;
            let tail = after[seconds_len..].strip_prefix(MIDDLE)?;
            let nanos_len = digits(tail);
            let nanos: i64 = tail[..nanos_len].parse().ok()?;
            let tail = tail[nanos_len..].strip_prefix('}')?;
            Some((seconds * 1_000_000_000 + nanos, tail))
        })();
        match parsed {
            Some((ns, tail)) => {
                if at > 0 {
                    out.push(Piece::Text(rest[..at].to_string()));
                }
                out.push(Piece::Time(ns));
                rest = tail;
            }
            None => {
                // Not a timestamp: keep the opening text and look further.
                out.push(Piece::Text(rest[..at + OPEN.len()].to_string()));
                rest = after;
            }
        }
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest.to_string()));
    }
    // Merge neighbouring text.
    let mut merged: Vec<Piece> = Vec::new();
    for piece in out {
        match (merged.last_mut(), piece) {
            (Some(Piece::Text(last)), Piece::Text(text)) => last.push_str(&text),
            (_, piece) => merged.push(piece),
        }
    }
    merged
}

/// The three template rounds, from real executions of the kit: pending, resolved (the same round
/// answered), and failed (a cancelled execution's round).
struct Templates {
    pending: Template,
    resolved: Template,
    failed: Template,
}

fn wait_pending(handle: &ExecutionHandle) -> BenchResult<PendingElicitationRound> {
    let started = Instant::now();
    loop {
        if let Some(round) = handle.pending_elicitation()? {
            return Ok(round);
        }
        if handle.snapshot()?.lifecycle == ExecutionStatus::Finished {
            return Err(format!(
                "execution {} finished without asking",
                handle.execution_id()
            )
            .into());
        }
        if started.elapsed() > WAIT_LIMIT {
            return Err(format!("execution {}: no pending round", handle.execution_id()).into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn make_templates(scratch: &Path, server: &Path) -> BenchResult<Templates> {
    let database = scratch.join("templates.sqlite");
    let store = Arc::new(SqliteExecutionStore::open(&database)?);
    let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
    let agent = kit.agents([booking_agent()])?.remove(0);
    let binding = server_binding(server)?;
    let answered = agent.submit(submission(binding.clone()))?;
    let cancelled = agent.submit(submission(binding))?;
    let round = wait_pending(&answered)?;
    let pending = read_row(&database, &round.round_id)?;
    let cancelled_round = wait_pending(&cancelled)?;

    answered.respond_elicitation(&round.round_id, address(), "address-1")?;
    let result = answered.result(Some(WAIT_LIMIT))?;
    if !result.succeeded() {
        return Err(format!("the template execution ended {}", result.outcome).into());
    }
    cancelled.cancel()?;
    cancelled.result(Some(WAIT_LIMIT))?;
    let resolved = read_row(&database, &round.round_id)?;
    let failed = read_row(&database, &cancelled_round.round_id)?;
    drop(kit);
    store.close();
    for (row, status) in [
        (&pending, "pending"),
        (&resolved, "resolved"),
        (&failed, "failed"),
    ] {
        if row.status != status {
            return Err(format!(
                "template round {} is {}, not {status}",
                row.round_id, row.status
            )
            .into());
        }
    }
    Ok(Templates {
        pending: Template::new(pending)?,
        resolved: Template::new(resolved)?,
        failed: Template::new(failed)?,
    })
}

// ---------------------------------------------------------------------------------------------
// 5b. Building a store

/// The id of generated execution `e`: kit-style, `exec-` and 32 hex digits.
fn execution_id(e: usize) -> String {
    let mut mix = SplitMix(e as u64 ^ 0x05EE_D0F5_CA1E);
    format!("exec-{:016x}{:016x}", mix.next(), mix.next())
}

/// What the last round of execution `e` is: pending for 10% of the executions, failed for 5%.
fn last_round_status(e: usize) -> &'static str {
    match e % 20 {
        0 | 10 => "pending",
        5 => "failed",
        _ => "resolved",
    }
}

#[derive(Debug, Clone, Serialize)]
struct BuiltStore {
    rounds: usize,
    executions: usize,
    by_status: BTreeMap<String, usize>,
    build_seconds: f64,
    bytes: u64,
    /// Executions with a pending round / without one (for the queries).
    #[serde(skip)]
    with_pending: Vec<String>,
    #[serde(skip)]
    without_pending: Vec<String>,
}

/// Builds a store of `rounds` rounds at `path` (see the module's documentation).
fn build_store(path: &Path, rounds: usize, templates: &Templates) -> BenchResult<BuiltStore> {
    let started = Instant::now();
    // The store creates the file: its schema, its indexes, WAL.
    drop(SqliteManagedInputStore::open(
        path,
        StoreOptions::default(),
    )?);
    let mut conn = Connection::open(path)?;
    conn.query_row("PRAGMA journal_mode=OFF", [], |r| r.get::<_, String>(0))?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    conn.pragma_update(None, "cache_size", -512_000)?;
    let executions = rounds.div_ceil(ROUNDS_PER_EXECUTION);
    // Each copy is created 1 ms after the previous one; the last one 1 ms before the templates.
    let step_ns: i64 = 1_000_000;
    let first_shift = -(rounds as i64 + 1) * step_ns;
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    let (mut with_pending, mut without_pending) = (Vec::new(), Vec::new());
    let mut written = 0usize;
    let mut e = 0usize;
    while written < rounds {
        let tx = conn.transaction()?;
        {
            let mut insert = tx.prepare(
                "INSERT INTO managed_input_rounds (round_id, execution_id, status, owner_id, \
                 deadline_ns, created_at_ns, document) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            let mut insert_version = tx.prepare(
                "INSERT INTO managed_input_round_versions (round_id, execution_id, version, \
                 lease_expires_at_ns, updated_at_ns) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            let batch_end = (written + BUILD_BATCH).min(rounds);
            while written < batch_end {
                let exec = execution_id(e);
                let count = ROUNDS_PER_EXECUTION.min(rounds - written);
                let mut pending = false;
                for k in 0..count {
                    let template = if k + 1 < count {
                        &templates.resolved
                    } else {
                        match last_round_status(e) {
                            "pending" => {
                                pending = true;
                                &templates.pending
                            }
                            "failed" => &templates.failed,
                            _ => &templates.resolved,
                        }
                    };
                    let round_id = format!("{exec}-r{}", k + 1);
                    let shift = first_shift + written as i64 * step_ns;
                    let (document, _) = template.render(&round_id, &exec, shift);
                    let t = &template.row;
                    insert.execute(params![
                        round_id,
                        exec,
                        t.status,
                        t.owner_id,
                        t.deadline_ns.map(|v| v + shift),
                        t.created_at_ns + shift,
                        document,
                    ])?;
                    insert_version.execute(params![
                        round_id,
                        exec,
                        t.version,
                        t.lease_expires_at_ns.map(|v| v + shift),
                        t.updated_at_ns + shift,
                    ])?;
                    *by_status.entry(t.status.clone()).or_insert(0) += 1;
                    written += 1;
                }
                if pending {
                    with_pending.push(exec);
                } else {
                    without_pending.push(exec);
                }
                e += 1;
            }
        }
        tx.commit()?;
    }
    conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))?;
    drop(conn);
    let build_seconds = started.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(path).map_or(0, |m| m.len());
    Ok(BuiltStore {
        rounds,
        executions,
        by_status,
        build_seconds,
        bytes,
        with_pending,
        without_pending,
    })
}

// ---------------------------------------------------------------------------------------------
// 5b. Measuring

/// The figures of one store.
#[derive(Debug, Serialize)]
struct RoundsResult {
    store: BuiltStore,
    /// The first call on a newly opened store (`SqliteExecutionStore::open`, `executions()`,
    /// `pending_round`), ms.
    first_call_ms: f64,
    /// Per query: name, what it returned per call, and its latency.
    queries: Vec<QueryResult>,
    plans: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Serialize)]
struct QueryResult {
    name: String,
    /// Through the store and the component, or SQLite alone.
    path: String,
    returned_per_call: f64,
    ms: Option<Stats>,
}

/// The store's SQL for a filter (as `host/src/store/sqlite/transaction.rs` builds it).
fn store_sql(execution: bool, status: bool, limit: bool) -> String {
    let mut sql = format!("{SELECT} WHERE 1 = 1");
    let mut n = 0;
    if execution {
        n += 1;
        sql.push_str(&format!(" AND r.execution_id = ?{n}"));
    }
    if status {
        n += 1;
        sql.push_str(&format!(" AND r.status = ?{n}"));
    }
    sql.push_str(" ORDER BY r.created_at_ns, r.round_id");
    if limit {
        n += 1;
        sql.push_str(&format!(" LIMIT ?{n}"));
    }
    sql
}

fn query_plan(conn: &Connection, sql: &str) -> BenchResult<Vec<String>> {
    let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
    let rows = statement
        .query_map(
            rusqlite::params_from_iter(std::iter::repeat_n(
                rusqlite::types::Value::Null,
                statement.parameter_count(),
            )),
            |r| r.get::<_, String>(3),
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Times `calls` calls of `f` (after `warmup` more); the latencies in ms and the mean of what
/// each call returned.
fn time_calls(
    warmup: usize,
    calls: usize,
    mut f: impl FnMut(usize) -> BenchResult<usize>,
) -> BenchResult<(Option<Stats>, f64)> {
    for i in 0..warmup {
        f(i)?;
    }
    let mut samples = Vec::with_capacity(calls);
    let mut returned = 0usize;
    for i in 0..calls {
        let started = Instant::now();
        let n = f(warmup + i)?;
        samples.push(started.elapsed().as_secs_f64() * 1e3);
        returned += n;
    }
    Ok((Stats::of(&samples), returned as f64 / calls.max(1) as f64))
}

fn measure_store(plan: &Plan, path: &Path, built: BuiltStore) -> BenchResult<RoundsResult> {
    let (warmup, calls) = (plan.warmup_calls, plan.calls);
    let mut rng = SplitMix(0x00C0_FFEE);
    let with: Vec<String> = (0..warmup + calls)
        .map(|_| built.with_pending[rng.below(built.with_pending.len())].clone())
        .collect();
    let without: Vec<String> = (0..warmup + calls)
        .map(|_| built.without_pending[rng.below(built.without_pending.len())].clone())
        .collect();
    let pending_total = built.by_status.get("pending").copied().unwrap_or(0);

    let started = Instant::now();
    let execution_store = SqliteExecutionStore::open(path)?;
    let executions: Arc<m3::Executions> = execution_store.executions()?;
    let first = executions.pending_round(&with[0])?;
    let first_call_ms = started.elapsed().as_secs_f64() * 1e3;
    if first.is_none() {
        return Err(format!("execution {} has no pending round", with[0]).into());
    }
    let store: Arc<m3::DatabaseStore> = executions.store().clone();

    let mut queries = Vec::new();
    let mut push = |name: &str, path: &str, (ms, returned): (Option<Stats>, f64)| {
        queries.push(QueryResult {
            name: name.to_string(),
            path: path.to_string(),
            returned_per_call: returned,
            ms,
        });
    };
    let expect = |what: &str, got: usize, want: usize| -> BenchResult<usize> {
        if got == want {
            Ok(got)
        } else {
            Err(format!("{what} returned {got}, expected {want}").into())
        }
    };

    // Through the store and the component.
    push(
        "list_rounds(execution, pending)",
        "store",
        time_calls(warmup, calls, |i| {
            let records = store.list_rounds(&RoundFilter {
                execution_id: Some(with[i].clone()),
                status: Some(ManagedInputStatus::Pending),
                limit: None,
            })?;
            if records
                .first()
                .is_none_or(|r| r.pending.execution_id != with[i])
            {
                return Err(format!("no pending round listed for {}", with[i]).into());
            }
            expect("list_rounds(execution, pending)", records.len(), 1)
        })?,
    );
    push(
        "list_rounds(execution), all its rounds",
        "store",
        time_calls(warmup, calls, |i| {
            let records = store.list_rounds(&RoundFilter {
                execution_id: Some(with[i].clone()),
                status: None,
                limit: None,
            })?;
            expect(
                "list_rounds(execution)",
                records.len(),
                ROUNDS_PER_EXECUTION.min(built.rounds),
            )
        })?,
    );
    for (status, name) in [
        (
            ManagedInputStatus::Pending,
            "list_rounds(pending, limit 100)",
        ),
        (
            ManagedInputStatus::Resolved,
            "list_rounds(resolved, limit 100)",
        ),
    ] {
        let want = if status == ManagedInputStatus::Pending {
            pending_total.min(100)
        } else {
            100
        };
        push(
            name,
            "store",
            time_calls(warmup, calls, |_| {
                let records = store.list_rounds(&RoundFilter {
                    execution_id: None,
                    status: Some(status),
                    limit: Some(100),
                })?;
                expect(name, records.len(), want)
            })?,
        );
    }
    push(
        "pending_elicitation (one pending)",
        "store",
        time_calls(warmup, calls, |i| {
            let round = executions
                .pending_round(&with[i])?
                .ok_or_else(|| format!("no pending round for {}", with[i]))?;
            expect(
                "pending_round",
                usize::from(round.execution_id == with[i]),
                1,
            )
        })?,
    );
    push(
        "pending_elicitation (none pending)",
        "store",
        time_calls(warmup, calls, |i| {
            let round = executions.pending_round(&without[i])?;
            expect("pending_round (none)", usize::from(round.is_some()), 0)
        })?,
    );

    // SQLite alone: the store's SQL, on one connection reused and on a new one per call.
    let by_execution = store_sql(true, true, true);
    let by_status = store_sql(false, true, true);
    let count_rows = |statement: &mut rusqlite::Statement<'_>,
                      args: &[&dyn rusqlite::ToSql]|
     -> BenchResult<usize> {
        let mut rows = statement.query(args)?;
        let mut n = 0;
        while let Some(row) = rows.next()? {
            // Read the document, as the store does.
            let document: String = row.get(9)?;
            n += usize::from(!document.is_empty());
        }
        Ok(n)
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let open = || -> BenchResult<Connection> {
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        Ok(conn)
    };
    let conn = open()?;
    let mut plans = BTreeMap::new();
    plans.insert(
        "execution_id = ? AND status = ?".to_string(),
        query_plan(&conn, &by_execution)?,
    );
    plans.insert("status = ?".to_string(), query_plan(&conn, &by_status)?);
    {
        let mut statement = conn.prepare(&by_execution)?;
        push(
            "list_rounds(execution, pending)",
            "sqlite, one connection",
            time_calls(warmup, calls, |i| {
                count_rows(&mut statement, &[&with[i], &"pending", &2])
            })?,
        );
        let mut statement = conn.prepare(&by_status)?;
        for status in ["pending", "resolved"] {
            push(
                &format!("list_rounds({status}, limit 100)"),
                "sqlite, one connection",
                time_calls(warmup, calls, |_| {
                    count_rows(&mut statement, &[&status, &100])
                })?,
            );
        }
    }
    {
        // What the execution index would give the same query (the planner picks the status
        // index; see the plans).
        let forced = by_execution.replace(
            "FROM managed_input_rounds r ",
            "FROM managed_input_rounds r INDEXED BY managed_input_rounds_by_execution ",
        );
        plans.insert(
            "execution_id = ? AND status = ?, INDEXED BY by_execution".to_string(),
            query_plan(&conn, &forced)?,
        );
        let mut statement = conn.prepare(&forced)?;
        push(
            "list_rounds(execution, pending)",
            "sqlite, one connection, INDEXED BY by_execution",
            time_calls(warmup, calls, |i| {
                count_rows(&mut statement, &[&with[i], &"pending", &2])
            })?,
        );
    }
    push(
        "list_rounds(execution, pending)",
        "sqlite, new connection per call",
        time_calls(warmup, calls, |i| {
            let conn = open()?;
            let mut statement = conn.prepare(&by_execution)?;
            count_rows(&mut statement, &[&with[i], &"pending", &2])
        })?,
    );
    drop(conn);
    drop(store);
    drop(executions);
    execution_store.close();
    Ok(RoundsResult {
        store: built,
        first_call_ms,
        queries,
        plans,
    })
}

fn rounds_part(plan: &Plan, scratch: &Path, server: &Path) -> BenchResult<Vec<RoundsResult>> {
    eprintln!("template rounds from two executions of the kit ...");
    let templates = make_templates(scratch, server)?;
    let mut results = Vec::new();
    for &rounds in &plan.rounds {
        let path = scratch.join(format!("rounds-{rounds}.sqlite"));
        eprintln!("building a store of {rounds} rounds ...");
        let built = build_store(&path, rounds, &templates)?;
        eprintln!(
            "  built in {:.1} s ({:.0} MiB); measuring ...",
            built.build_seconds,
            built.bytes as f64 / (1024.0 * 1024.0)
        );
        results.push(measure_store(plan, &path, built)?);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(scratch.join(format!("rounds-{rounds}.sqlite{suffix}")));
        }
    }
    Ok(results)
}

fn print_rounds(results: &[RoundsResult]) {
    let mut build = Table::new(
        "5b. Stores of generated rounds (10 rounds per execution; the last pending for 10% of \
         the executions, failed for 5%)",
        &[
            "rounds",
            "executions",
            "pending / resolved / failed",
            "file",
            "build",
            "first call",
        ],
    );
    for r in results {
        let s = &r.store;
        let count = |k: &str| s.by_status.get(k).copied().unwrap_or(0);
        build.row(vec![
            s.rounds.to_string(),
            s.executions.to_string(),
            format!(
                "{} / {} / {}",
                count("pending"),
                count("resolved"),
                count("failed")
            ),
            format!("{:.0} MiB", s.bytes as f64 / (1024.0 * 1024.0)),
            format!("{:.1} s", s.build_seconds),
            format!("{:.1} ms", r.first_call_ms),
        ]);
    }
    build.print();

    let mut header = vec!["query (p50 / p99)", "path", "returns"];
    let names: Vec<String> = results
        .iter()
        .map(|r| format!("{} rounds", r.store.rounds))
        .collect();
    header.extend(names.iter().map(String::as_str));
    let mut table = Table::new("   Query latency", &header);
    if let Some(last) = results.last() {
        for (i, q) in last.queries.iter().enumerate() {
            let mut row = vec![
                q.name.clone(),
                q.path.clone(),
                format!("{:.0}", q.returned_per_call),
            ];
            for r in results {
                row.push(pair_ms(&r.queries.get(i).and_then(|q| q.ms)));
            }
            table.row(row);
        }
    }
    table.print();
    if let Some(last) = results.last() {
        for (query, plan) in &last.plans {
            println!("  plan of `{query}`: {}", plan.join("; "));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Main

fn bench_main() -> BenchResult<()> {
    let started = Instant::now();
    let plan = Plan::from_args();
    let target = target_dir();
    let scratch = tempfile::Builder::new()
        .prefix("m3-bench-peers-scale-")
        .tempdir()?;
    // The component's compiled artifact is cached under the target directory, never in the
    // user's cache (the parked processes inherit this).
    if std::env::var_os("M3_CACHE_DIR").is_none() {
        // SAFETY: set before this process starts any thread.
        unsafe { std::env::set_var("M3_CACHE_DIR", target.join("bench").join("component-cache")) };
    }
    println!(
        "m3 scale benchmark ({}; {} CPUs)",
        if plan.full {
            "full run"
        } else {
            "smoke or partial pass"
        },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let server = shipping_server_binary()?;
    eprintln!("shipping server: {}", server.display());

    let parked = if plan.runs("parked") {
        Some(parked_part(&plan, scratch.path(), &server)?)
    } else {
        None
    };
    let rounds = if plan.runs("rounds") {
        Some(rounds_part(&plan, scratch.path(), &server)?)
    } else {
        None
    };

    if let Some((outcomes, _)) = &parked {
        print_parked(outcomes);
    }
    if let Some(results) = &rounds {
        print_rounds(results);
    }
    let total = started.elapsed();
    println!("\ntotal: {:.1} s", total.as_secs_f64());

    if plan.full {
        let parked_json = parked.as_ref().map_or(Value::Null, |(outcomes, limits)| {
            json!({
                "definition": "one child process per count (warm component cache, one warm-up \
                    execution answered first); rss/pss_per_execution = (host process VmRSS/Pss \
                    with all parked - before submitting) / executions; server_children = the \
                    shipping-server processes' own VmRSS/Pss summed / executions; \
                    host_cpu_cores_busy_while_parked_idle = the host process's CPU time over \
                    the idle window / its length; seconds_to_answer_all = first \
                    respond_elicitation call to the last execution's result (one task per \
                    execution, calls_in_flight_at_once submissions or answer calls at a time)",
                "limits": limits,
                "runs": outcomes.iter().map(|o| match &o.result {
                    Ok(r) => json!({"requested": o.requested, "result": r.to_json()}),
                    Err(e) => json!({"requested": o.requested, "error": e}),
                }).collect::<Vec<_>>(),
            })
        });
        let rounds_json = rounds.as_ref().map_or(Value::Null, |results| {
            json!({
                "definition": "rounds cloned from three kit-made template rows (pending, \
                    resolved, failed) with new ids and shifted timestamps in both the columns \
                    and the document; 10 rounds per execution, the last pending for 10% of the \
                    executions and failed for 5%; latencies over the measured calls after \
                    warm-up; 'store' goes through SqliteManagedInputStore::list_rounds or \
                    Executions::pending_round (the component), 'sqlite' runs the store's SQL \
                    through rusqlite",
                "stores": results.iter().map(|r| json!({
                    "rounds": r.store.rounds,
                    "executions": r.store.executions,
                    "by_status": r.store.by_status,
                    "file_bytes": r.store.bytes,
                    "build_seconds": r.store.build_seconds,
                    "first_call_ms": r.first_call_ms,
                    "queries": r.queries.iter().map(|q| json!({
                        "name": q.name,
                        "path": q.path,
                        "returned_per_call": q.returned_per_call,
                        "ms": stats_json(q.ms, "ms"),
                    })).collect::<Vec<_>>(),
                    "query_plans": r.plans,
                })).collect::<Vec<_>>(),
            })
        });
        let document = json!({
            "benchmark": "m3 peers scale (issue 7, item 5)",
            "created_at": Utc::now().to_rfc3339(),
            "machine": {
                "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
                "os": std::env::consts::OS,
                "arch": std::env::consts::ARCH,
            },
            "plan": plan.to_json(),
            "shipping_server": server.display().to_string(),
            "total_seconds": total.as_secs_f64(),
            "parked": parked_json,
            "rounds": rounds_json,
        });
        write_report("peers_scale", &document)?;
    } else {
        println!(
            "smoke or partial run: no JSON written (run `cargo bench -p m3 --bench peers_scale`)"
        );
    }
    Ok(())
}

fn main() -> BenchResult<()> {
    match std::env::var(ROLE_VAR).as_deref() {
        Ok("parked") => parked_main(),
        _ => bench_main(),
    }
}

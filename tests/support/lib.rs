//! Test support: temporary database files, stores on them, and request fixtures.
//!
//! # Files
//!
//! - `workspace.rs`: where the workspace and its target directory are, and which cargo builds
//!   it (the paths are `m3_bench`'s).
//! - `python_package.rs`: the package built into the ignored venv
//!   `tests/.peers/python-package/venv/` on first use (once per test process, under a file lock):
//!   the pinned requirements, then `pip install ./host/python` (maturin fetched by pip) with
//!   `MATURIN_PEP517_ARGS="--profile dev --locked"` and the workspace's target directory, again whenever a
//!   file it is built from changes (a marker holding each source file's hash); a failed build fails
//!   the tests with its log. The same in release, maturin's default, into
//!   `tests/.peers/python-package-release/venv/` for the benchmark
//!   `tests/benches/python_rounds.rs`. Also the `m3` command, built as the `m3` command's own tests
//!   build it (`cargo test --workspace --locked --no-run --test readme`: the same features, nothing built
//!   twice) in this binary's profile.
//! - `shipping_server_main.rs`: the bundled server as a binary of the test package
//!   (`CARGO_BIN_EXE_m3-test-shipping-server`).
//! - `write_fixture_main.rs`: `m3-test-write-fixture`, which wrote that fixture through the public
//!   API (rounds in every status, executions in every lifecycle and outcome); run once per stored
//!   format.
//! - `lib.rs`: temporary databases, stores on them and request fixtures; it holds `fake_model.rs`
//!   (the loopback Responses API for Codex), `fake_anthropic.rs` (the loopback Messages API for
//!   Claude Code: scripted turns, every request kept), `harnesses.rs` (`AgentHarness`, a kit
//!   with one agent of either harness with a model and its loopback model, and
//!   `on_both_harnesses!`, one body as a test per harness), `peers.rs`, `fixture.rs` (what the API reads back from a database, as JSON), `rng.rs` (the
//!   one seeded generator of every random test, here and in `host/cli/tests/`) and `replay.rs`
//!   (the registry of random tests, `RandomTest`: their seeds, from `M3_SEED` or fresh, and the
//!   replay command that names exactly one test) as modules, and
//!   `backends.rs` (`Db`, a fresh database of either backend, and `on_both_backends!`, one body as
//!   a test per backend) and `postgres_server.rs` (a throwaway PostgreSQL server per test process:
//!   `initdb` into a temporary directory as an unprivileged user, a Unix socket only, a database of
//!   its own per test, stopped by a sentinel when the test process ends in any way; the Debian
//!   package installed first when the binaries are missing), `http_server.rs` (a peer started in
//!   its HTTP mode on a free loopback port, waited for, killed with its process group, restartable
//!   on the same port) and `http_probe.rs` (a loopback HTTP/1.1 witness that records every request
//!   and answers as told, and can hold a stream open, stay silent, or reset the connection: a
//!   hostile server's parts), `integrity.rs` (what `backends::integrity` checks: SQLite's
//!   `integrity_check` and `foreign_key_check`, or amcheck's `bt_index_check` on every btree index
//!   on PostgreSQL, then the store's own invariants over the same rows on both), and the bodies of
//!   the helper processes: `race.rs` (one process of `concurrency`'s idempotent submit race),
//!   `kill_worker.rs` (the worker `random_kills` kills: its steps and acknowledgement lines) and
//!   `contention.rs` (a contending worker of `postgres_faults`).
//! - `helper_main.rs`: `m3-test-helper`, the tests' helper processes, one mode each (`race`,
//!   `kill-worker`, `contend`, `own-postgres`, the last owning a throwaway PostgreSQL server for
//!   `tests/all/postgres_server.rs`), so that no helper is a test of its own.
//! - `fault_worker_main.rs`: `m3-test-fault-worker`, the worker process `tests/all/crash.rs` kills
//!   at each named fault point (built with `fault-points`); its `kit` mode waits on a managed
//!   round until killed, its `ask` mode runs one withdrawing server's round, for a worker paused at
//!   a fault point (`M3_FAULT_PAUSE`). `fault_worker.rs` (a module) reads the line both modes
//!   print once their round is pending, `pending ROUND EXECUTION` (`Pending`).
//! - `fake_model_main.rs`: `m3-test-fake-model`, the loopback model of `fake_model.rs` as a binary,
//!   for the Codex tests.
//! - `fake_codex_main.rs`: `m3-test-fake-codex`, a fake Codex app-server that replays error paths
//!   for `tests/all/codex_transcripts.rs`.
//! - `second_process_main.rs`: `m3-test-second-process`, a second process on the same store: it
//!   attaches a handle to an execution another process submitted, runs the specification's Codex
//!   example with `env={}`, or loads the policy engine as any dependent does (its notices on).

use chrono::{DateTime, TimeZone, Utc};
use m3::{
    ElicitationRequest, ManagedInputStore, ManualClock, NewRound, OwnerClaim,
    SqliteManagedInputStore, StoreOptions,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub mod backends;
pub mod contention;
pub mod fake_anthropic;
pub mod fake_model;
pub mod fault_worker;
pub mod fixture;
pub mod harnesses;
pub mod http_probe;
pub mod http_server;
pub mod integrity;
pub mod kill_worker;
pub mod peers;
pub mod postgres_server;
pub mod python_package;
pub mod race;
pub mod replay;
pub mod rng;
pub mod workspace;

/// A temporary directory holding one database file.
pub struct TempDb {
    /// Keeps the directory alive.
    pub dir: tempfile::TempDir,
    /// The database file (not created until a store opens it).
    pub path: PathBuf,
}

impl TempDb {
    /// A new directory with a database path in it.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("executions.sqlite");
        Self { dir, path }
    }

    /// A store on this file with the system clock.
    pub fn store(&self) -> SqliteManagedInputStore {
        open(&self.path, StoreOptions::default())
    }

    /// A store on this file with `clock`.
    pub fn store_with_clock(&self, clock: Arc<ManualClock>) -> SqliteManagedInputStore {
        open(
            &self.path,
            StoreOptions {
                clock,
                ..StoreOptions::default()
            },
        )
    }
}

impl Default for TempDb {
    fn default() -> Self {
        Self::new()
    }
}

/// Opens a store, panicking with the error if it cannot.
pub fn open(path: &Path, options: StoreOptions) -> SqliteManagedInputStore {
    SqliteManagedInputStore::open(path, options)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// A fixed instant for manual clocks.
pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
}

/// A manual clock at [`t0`].
pub fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(t0()))
}

/// The spec example's address form.
pub fn address_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "street": {"type": "string", "minLength": 1, "maxLength": 100},
            "city": {"type": "string", "minLength": 1}
        },
        "required": ["street", "city"]
    })
}

pub use m3_bench::fixture::{every_kind_answer, every_kind_schema};

/// One form request keyed `shipping_address`.
pub fn address_requests() -> BTreeMap<String, ElicitationRequest> {
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationRequest::form("Where should we ship?", address_schema()),
    )])
}

/// A first-round tool call asking for the address, owned by `worker-1`.
pub fn address_round(round_id: &str) -> NewRound {
    address_round_in(round_id, "exec-1")
}

/// [`address_round`] in execution `execution_id`.
pub fn address_round_in(round_id: &str, execution_id: &str) -> NewRound {
    NewRound::new(
        round_id,
        execution_id,
        "shipping",
        "book_shipment",
        address_requests(),
    )
    .owned_by(OwnerClaim::new("worker-1"))
}

/// A worker claim with a lease of `ttl`.
pub fn claim(owner: &str, ttl: Duration) -> OwnerClaim {
    OwnerClaim {
        owner_id: owner.to_string(),
        lease_ttl: ttl,
    }
}

/// Creates `round` and returns its lease (panics on error).
pub fn create(store: &dyn ManagedInputStore, round: &NewRound) -> m3::ManagedInputLease {
    store
        .create_round(round)
        .unwrap_or_else(|e| panic!("create_round: {e}"))
        .lease
        .expect("owned round has a lease")
}

/// `PRAGMA integrity_check` of a database file.
pub fn integrity_check(path: &Path) -> String {
    let conn = rusqlite::Connection::open(path).expect("open for integrity check");
    conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check")
}

/// How many times the default iterations a reliability test runs: `M3_SOAK` (default 1; `just
/// soak` sets 10 to 100).
pub fn soak_factor() -> usize {
    std::env::var("M3_SOAK")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(1)
}

/// Asserts that `result` failed with the typed error `kind` (its specification name, for example
/// `ManagedInputStateError`) carrying `code`, as the rejection table promises.
#[track_caller]
pub fn assert_refused<T: std::fmt::Debug>(
    result: Result<T, &m3::ManagedInputError>,
    kind: &str,
    code: m3::ErrorCode,
) {
    match result {
        Ok(value) => panic!("expected {kind}({code:?}), got Ok({value:?})"),
        Err(err) => assert!(
            err.kind_name() == kind && err.code() == Some(code),
            "expected {kind}({code:?}), got {}({:?}): {err}",
            err.kind_name(),
            err.code()
        ),
    }
}

/// [`assert_refused`] for an execution handle's errors: the managed-input error inside.
#[track_caller]
pub fn assert_execution_refused<T: std::fmt::Debug>(
    result: Result<T, m3::ExecutionError>,
    kind: &str,
    code: m3::ErrorCode,
) {
    match result {
        Err(m3::ExecutionError::ManagedInput(err)) => assert_refused::<T>(Err(&err), kind, code),
        other => panic!("expected {kind}({code:?}), got {other:?}"),
    }
}

/// The kernel's id of the calling thread (Linux), so another thread can watch what it waits on.
pub fn thread_id() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .expect("a thread id")
}

/// The system calls of a timed sleep (`nanosleep`, `clock_nanosleep`): SQLite's busy handler
/// waits for a lock that way, while a lock of the process (a mutex) waits in `futex`.
#[cfg(target_arch = "x86_64")]
const SLEEP_SYSCALLS: [u64; 2] = [35, 230];
#[cfg(target_arch = "aarch64")]
const SLEEP_SYSCALLS: [u64; 2] = [101, 115];

/// Whether thread `tid` of this process is blocked in a timed sleep right now (read from
/// `/proc/self/task/<tid>/syscall`).
pub fn is_in_timed_sleep(tid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .is_some_and(|n| SLEEP_SYSCALLS.contains(&n))
}

/// Waits (up to `limit`) until thread `tid` has been seen in a timed sleep: for a thread that
/// writes to SQLite while another connection holds the write lock, that is SQLite's busy wait.
pub fn wait_until_in_timed_sleep(tid: u32, limit: Duration) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if is_in_timed_sleep(tid) {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

/// Whether process `pid` is alive and not a zombie (Linux `/proc`).
pub fn process_is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("State:"))
            .is_some_and(|l| !l.contains('Z') && !l.contains('X'))
    })
}

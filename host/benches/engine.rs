//! The engine benchmark (`just bench`, or `cargo bench -p m3 --bench engine`).
//!
//! In one run on one machine it measures, with warm-up and several repetitions:
//!
//! 1. round lifecycle throughput through the component and SQLite (`create_round` owned,
//!    `submit_responses`, `start_delivery`, `mark_delivered`, `resolve`: five commits) against the
//!    raw-SQLite limit (the same number of one-row `UPDATE`s, each in its own `BEGIN IMMEDIATE`
//!    transaction on a fresh connection with the store's pragmas and an idle keeper connection),
//!    for `synchronous=FULL` and `NORMAL`, the contenders interleaved; goal: ratio >= 0.7. A third
//!    contender replays the store's own SQL through `m3::sqlite` without the component, which
//!    splits the gap into the component's share and the share of the store's table shape;
//! 2. validating a typical form answer from its JSON text through the component
//!    ([`m3::Policy::validate_responses_json`]) against serde_json plus a cached compiled
//!    `jsonschema` validator natively; goal: component / native <= 2;
//! 3. cold start: compiling the component, loading its cached compiled artifact, and
//!    instantiating it from the `InstancePre`.
//!
//! It prints a table and writes `target/bench/engine.json` (under `$CARGO_TARGET_DIR` when set).
//! It measures and reports; it never asserts on a time. Run without `--bench` (as `cargo test
//! --workspace` does) or with `--smoke`, it runs a short smoke pass; `--only=lifecycle`,
//! `--only=validation` or `--only=cold-start` runs one section (for profiling). Only a full run
//! of every section writes the JSON.

use chrono::Utc;
use m3::testing::internals::backend::StoreError;
use m3::testing::internals::backend::rows::{Mode as TransactionMode, RoundRow};
use m3::testing::internals::backend::{Backend, Transaction};
use m3::testing::internals::component_cache::{self, CacheOutcome};
use m3::testing::internals::engine::{
    ComponentRuntime, GUEST_WASM, GUEST_WASM_SHA256, engine_config,
};
use m3::testing::internals::guest_imports::HostState;
use m3::testing::internals::sqlite::database::Database;
use m3::{
    ElicitationRequest, GuestLimits, ManagedInputStatus, ManagedInputStore, NewRound,
    OperationKind, OwnerClaim, PendingElicitationRound, Policy, SqliteManagedInputStore,
    StoreOptions, Synchronous, SystemClock,
};
use m3_bench::fixture::{every_kind_answer, every_kind_schema};
use m3_bench::stats::{Stats, fmt_rate, fmt_time, secs, sync_name, timed};
use m3_bench::{BenchResult, RunArgs, Table, target_dir, write_report};
use rusqlite::{Connection, OpenFlags};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::component::Component;
use wasmtime::{Engine, Store};

/// The sections of the benchmark, for `--only=`.
const SECTIONS: [&str; 3] = ["lifecycle", "validation", "cold-start"];

/// Commits per round lifecycle: create, submit, start delivery, mark delivered, resolve.
const COMMITS_PER_LIFECYCLE: usize = 5;
/// The store's default busy timeout, used by both contenders.
const BUSY_TIMEOUT: Duration = Duration::from_millis(5000);

// ---------------------------------------------------------------------------------------------
// Run configuration

#[derive(Debug, Clone, Copy)]
struct Plan {
    /// Full run (`--bench`) or smoke pass.
    full: bool,
    /// `--only=lifecycle|validation|cold-start`: run one section (for profiling); no JSON.
    only: Option<&'static str>,
    lifecycle_reps: usize,
    lifecycle_warmup: Duration,
    /// Wall time one component batch should take; the raw batch has the same commit count.
    lifecycle_batch_target: Duration,
    validation_rounds: usize,
    validation_batch: usize,
    validation_warmup: usize,
    compile_warmup: usize,
    compile_reps: usize,
    load_warmup: usize,
    load_reps: usize,
    instantiate_warmup: usize,
    instantiate_reps: usize,
}

impl Plan {
    fn from_args() -> Self {
        let run = RunArgs::from_env();
        let full = run.full;
        let only = run.only(&SECTIONS, "section");
        if full {
            Self {
                full,
                only,
                lifecycle_reps: 7,
                lifecycle_warmup: Duration::from_millis(400),
                lifecycle_batch_target: Duration::from_millis(700),
                validation_rounds: 9,
                validation_batch: 400,
                validation_warmup: 300,
                compile_warmup: 1,
                compile_reps: 3,
                load_warmup: 2,
                load_reps: 15,
                instantiate_warmup: 50,
                instantiate_reps: 300,
            }
        } else {
            Self {
                full,
                only,
                lifecycle_reps: 2,
                lifecycle_warmup: Duration::from_millis(50),
                lifecycle_batch_target: Duration::from_millis(80),
                validation_rounds: 2,
                validation_batch: 50,
                validation_warmup: 20,
                compile_warmup: 0,
                compile_reps: 1,
                load_warmup: 0,
                load_reps: 3,
                instantiate_warmup: 5,
                instantiate_reps: 20,
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
            "lifecycle_reps": self.lifecycle_reps,
            "lifecycle_warmup_ms": self.lifecycle_warmup.as_millis() as u64,
            "lifecycle_batch_target_ms": self.lifecycle_batch_target.as_millis() as u64,
            "validation_rounds": self.validation_rounds,
            "validation_batch": self.validation_batch,
            "validation_warmup": self.validation_warmup,
            "compile_warmup": self.compile_warmup,
            "compile_reps": self.compile_reps,
            "load_warmup": self.load_warmup,
            "load_reps": self.load_reps,
            "instantiate_warmup": self.instantiate_warmup,
            "instantiate_reps": self.instantiate_reps,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics and formatting

fn time_range(s: &Stats) -> String {
    format!("{} .. {}", fmt_time(s.min), fmt_time(s.max))
}

fn rate_range(s: &Stats) -> String {
    format!("{} .. {}", fmt_rate(s.min), fmt_rate(s.max))
}

// ---------------------------------------------------------------------------------------------
// Fixtures (the shapes of tests/support)

fn address_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "street": {"type": "string", "minLength": 1, "maxLength": 100},
            "city": {"type": "string", "minLength": 1}
        },
        "required": ["street", "city"]
    })
}

fn address_answer() -> Value {
    json!({"street": "1 Main Street", "city": "Springfield"})
}

/// One form of the validation benchmark.
struct Form {
    name: &'static str,
    request_key: &'static str,
    schema: Value,
    /// The whole response map as JSON text, as a caller submits it.
    answer_text: String,
}

impl Form {
    fn new(name: &'static str, request_key: &'static str, schema: Value, content: Value) -> Self {
        let answer_text =
            json!({ request_key: {"action": "accept", "content": content} }).to_string();
        Self {
            name,
            request_key,
            schema,
            answer_text,
        }
    }

    fn requests(&self) -> BTreeMap<String, ElicitationRequest> {
        BTreeMap::from([(
            self.request_key.to_string(),
            ElicitationRequest::form("Please fill in the form", self.schema.clone()),
        )])
    }

    fn pending_round(&self) -> PendingElicitationRound {
        PendingElicitationRound {
            round_id: format!("bench-{}", self.name),
            execution_id: "exec-bench".into(),
            logical_operation_id: "op-bench".into(),
            server: "shipping".into(),
            operation_kind: OperationKind::Tool,
            operation_name: "book_shipment".into(),
            requests: self.requests(),
            created_at: Utc::now(),
            request_state: None,
            deadline: None,
        }
    }
}

fn forms() -> Vec<Form> {
    vec![
        Form::new(
            "address",
            "shipping_address",
            address_schema(),
            address_answer(),
        ),
        Form::new(
            "every_kind",
            "profile",
            every_kind_schema(),
            every_kind_answer(),
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// 1. Round lifecycle throughput vs the raw-SQLite limit

/// Raw SQLite: one row, updated once per transaction on a fresh connection.
struct RawDb {
    path: PathBuf,
    synchronous: Synchronous,
    /// Held open for the database's life, like the store's keeper, so that closing the last
    /// per-operation connection does not checkpoint and delete the WAL each time.
    _keeper: Connection,
}

fn raw_flags() -> OpenFlags {
    // The store's flags: no URI, no mutex (each connection is used by one thread).
    OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

fn raw_connect(path: &Path, synchronous: Synchronous) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(path, raw_flags())?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "synchronous", sync_name(synchronous))?;
    Ok(conn)
}

impl RawDb {
    fn open(path: &Path, synchronous: Synchronous) -> BenchResult<Self> {
        let keeper = raw_connect(path, synchronous)?;
        let mode: String = keeper.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(format!("journal mode stays {mode}").into());
        }
        keeper.execute_batch(
            "CREATE TABLE IF NOT EXISTS bench (id INTEGER PRIMARY KEY, n INTEGER NOT NULL) STRICT;
             INSERT OR IGNORE INTO bench (id, n) VALUES (1, 0);",
        )?;
        Ok(Self {
            path: path.to_path_buf(),
            synchronous,
            _keeper: keeper,
        })
    }

    /// One commit: a fresh connection, `BEGIN IMMEDIATE`, a one-row `UPDATE`, `COMMIT`.
    fn commit_one(&self) -> BenchResult<()> {
        let conn = raw_connect(&self.path, self.synchronous)?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let changed = conn
            .prepare_cached("UPDATE bench SET n = n + 1 WHERE id = 1")?
            .execute([])?;
        if changed != 1 {
            return Err(format!("the raw update changed {changed} rows").into());
        }
        conn.execute_batch("COMMIT")?;
        Ok(())
    }

    fn batch(&self, commits: usize) -> BenchResult<Duration> {
        let started = Instant::now();
        for _ in 0..commits {
            self.commit_one()?;
        }
        Ok(started.elapsed())
    }
}

/// The store's own SQL without the component: the rows a real lifecycle wrote, written again
/// through the host's `store` import implementation (`m3::sqlite`), one transaction per step on
/// the store's connection (reused while idle): `insert` for the create, then `get` + `compare_and_set` for each later
/// step, exactly as the component drives it. Store minus replay is the component's share;
/// replay minus raw is the share of the store's table shape (indexes, row size, the read).
struct Replay {
    db: Backend,
    /// The row after each step of one captured lifecycle.
    rows: Vec<RoundRow>,
    next: u64,
}

impl Replay {
    fn open(path: &Path, synchronous: Synchronous, rows: Vec<RoundRow>) -> BenchResult<Self> {
        if rows.len() != COMMITS_PER_LIFECYCLE {
            return Err(format!("captured {} rows, expected 5", rows.len()).into());
        }
        Ok(Self {
            db: Backend::Sqlite(Database::open(path, BUSY_TIMEOUT, synchronous)?),
            rows,
            next: 0,
        })
    }

    fn batch(&mut self, count: usize) -> BenchResult<Duration> {
        let ids: Vec<String> = (0..count)
            .map(|_| {
                self.next += 1;
                format!("replay-{}", self.next)
            })
            .collect();
        let rows: Vec<Vec<RoundRow>> = ids
            .iter()
            .map(|id| {
                self.rows
                    .iter()
                    .map(|r| RoundRow {
                        round_id: id.clone(),
                        ..r.clone()
                    })
                    .collect()
            })
            .collect();
        let fail = |what: &str, e: StoreError| format!("replay {what}: {e:?}");
        let started = Instant::now();
        for (id, rows) in ids.iter().zip(rows) {
            let mut steps = rows.into_iter();
            let first = steps.next().ok_or("replay: no rows")?;
            let mut previous = first.version;
            let mut tx = Transaction::begin(&self.db, TransactionMode::Write)
                .map_err(|e| fail("begin", e))?;
            if !tx.insert(first).map_err(|e| fail("insert", e))? {
                return Err(format!("replay: {id} exists").into());
            }
            tx.commit().map_err(|e| fail("commit", e))?;
            drop(tx);
            for next in steps {
                let mut tx = Transaction::begin(&self.db, TransactionMode::Write)
                    .map_err(|e| fail("begin", e))?;
                let current = tx.get(id).map_err(|e| fail("get", e))?;
                let expected = current.map(|r| r.version).ok_or("replay: row vanished")?;
                let version = next.version;
                if expected != previous
                    || !tx
                        .compare_and_set(next, expected)
                        .map_err(|e| fail("compare_and_set", e))?
                {
                    return Err(format!("replay: compare-and-set on {id} failed").into());
                }
                previous = version;
                tx.commit().map_err(|e| fail("commit", e))?;
            }
        }
        Ok(started.elapsed())
    }
}

/// The five steps of a lifecycle, in order.
const STEPS: [&str; COMMITS_PER_LIFECYCLE] = [
    "create_round",
    "submit_responses",
    "start_delivery",
    "mark_delivered",
    "resolve",
];

/// The store under test and what it needs to run lifecycles.
struct Lifecycles {
    store: SqliteManagedInputStore,
    answer_text: String,
    requests: BTreeMap<String, ElicitationRequest>,
    prefix: String,
    next: u64,
}

struct Prepared {
    round: NewRound,
    submit_key: String,
    delivery_key: String,
}

impl Lifecycles {
    fn prepare(&mut self, count: usize) -> Vec<Prepared> {
        (0..count)
            .map(|_| {
                self.next += 1;
                let id = format!("{}-{}", self.prefix, self.next);
                Prepared {
                    round: NewRound::new(
                        &id,
                        "exec-bench",
                        "shipping",
                        "book_shipment",
                        self.requests.clone(),
                    )
                    .owned_by(OwnerClaim::new("worker-bench")),
                    submit_key: format!("submit-{id}"),
                    delivery_key: format!("deliver-{id}"),
                }
            })
            .collect()
    }

    /// Runs one lifecycle and reads its row after each step (for [`Replay`]).
    fn capture_rows(
        &mut self,
        path: &Path,
        synchronous: Synchronous,
    ) -> BenchResult<Vec<RoundRow>> {
        let reader = Backend::Sqlite(Database::open(path, BUSY_TIMEOUT, synchronous)?);
        let read = |id: &str| -> BenchResult<RoundRow> {
            let tx = Transaction::begin(&reader, TransactionMode::Read)
                .map_err(|e| format!("capture begin: {e:?}"))?;
            let row = tx.get(id).map_err(|e| format!("capture get: {e:?}"))?;
            Ok(row.ok_or("capture: no row")?)
        };
        let p = self.prepare(1).pop().ok_or("no round")?;
        let id = p.round.round_id.as_str();
        let mut rows = Vec::new();
        let lease = self
            .store
            .create_round(&p.round)?
            .lease
            .ok_or("an owned round has no lease")?;
        rows.push(read(id)?);
        self.store
            .submit_responses_json(id, &self.answer_text, &p.submit_key)?;
        rows.push(read(id)?);
        self.store.start_delivery(id, &lease, &p.delivery_key)?;
        rows.push(read(id)?);
        self.store.mark_delivered(id, &lease)?;
        rows.push(read(id)?);
        self.store.resolve(id, &lease)?;
        rows.push(read(id)?);
        Ok(rows)
    }

    /// Runs `count` full lifecycles; returns the wall time and the time spent in each step.
    fn batch(
        &mut self,
        count: usize,
    ) -> BenchResult<(Duration, [Duration; COMMITS_PER_LIFECYCLE])> {
        let prepared = self.prepare(count);
        let mut steps = [Duration::ZERO; COMMITS_PER_LIFECYCLE];
        let started = Instant::now();
        for p in &prepared {
            let id = p.round.round_id.as_str();
            let t0 = Instant::now();
            let created = self.store.create_round(&p.round)?;
            let t1 = Instant::now();
            let lease = created.lease.ok_or("an owned round has no lease")?;
            self.store
                .submit_responses_json(id, &self.answer_text, &p.submit_key)?;
            let t2 = Instant::now();
            self.store.start_delivery(id, &lease, &p.delivery_key)?;
            let t3 = Instant::now();
            self.store.mark_delivered(id, &lease)?;
            let t4 = Instant::now();
            let resolved = self.store.resolve(id, &lease)?;
            let t5 = Instant::now();
            if resolved.status != ManagedInputStatus::Resolved {
                return Err(format!("round {id} ended {}", resolved.status).into());
            }
            for (i, (a, b)) in [(t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5)]
                .into_iter()
                .enumerate()
            {
                steps[i] += b - a;
            }
        }
        Ok((started.elapsed(), steps))
    }
}

/// Results of one synchronous mode.
struct LifecycleResult {
    synchronous: Synchronous,
    lifecycles_per_batch: usize,
    lifecycles_per_s: Stats,
    raw_commits_per_s: Stats,
    /// Headline: (median lifecycles/s * 5) / median raw commits/s.
    ratio: f64,
    /// Per interleaved pair of batches.
    pair_ratios: Stats,
    /// Mean time of each step, per repetition (seconds).
    steps: Vec<Stats>,
    /// Median raw commit time (seconds).
    raw_commit_time: f64,
    /// The store's own SQL replayed without the component (see [`Replay`]).
    replay_per_s: Stats,
    /// (median replayed lifecycles/s * 5) / median raw commits/s.
    replay_ratio: f64,
    /// Bytes of the round's stored document, after each step.
    document_bytes: Vec<usize>,
    /// Mean time of one store operation and of one replayed operation (seconds).
    op_time: f64,
    replay_op_time: f64,
}

fn lifecycle_bench(
    plan: &Plan,
    runtime: &Arc<ComponentRuntime>,
    scratch: &Path,
) -> BenchResult<Vec<LifecycleResult>> {
    let answer_text =
        json!({"shipping_address": {"action": "accept", "content": address_answer()}}).to_string();
    let requests = BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationRequest::form("Where should we ship?", address_schema()),
    )]);

    struct Contenders {
        sync: Synchronous,
        lifecycles: Lifecycles,
        replay: Replay,
        raw: RawDb,
        count: usize,
        lc_rates: Vec<f64>,
        replay_rates: Vec<f64>,
        raw_rates: Vec<f64>,
        pair_ratios: Vec<f64>,
        steps: Vec<Vec<f64>>,
    }

    let mut all = Vec::new();
    for sync in [Synchronous::Full, Synchronous::Normal] {
        let dir = scratch.join(format!("lifecycle-{}", sync_name(sync).to_lowercase()));
        std::fs::create_dir_all(&dir)?;
        let store_path = dir.join("store.sqlite");
        let store = m3::testing::internals::open_with_runtime(
            &store_path,
            StoreOptions {
                busy_timeout_ms: BUSY_TIMEOUT.as_millis() as u64,
                synchronous: sync,
                ..StoreOptions::default()
            },
            runtime.clone(),
        )?;
        let raw = RawDb::open(&dir.join("raw.sqlite"), sync)?;
        let mut lifecycles = Lifecycles {
            store,
            answer_text: answer_text.clone(),
            requests: requests.clone(),
            prefix: format!("round-{}", sync_name(sync).to_lowercase()),
            next: 0,
        };
        let rows = lifecycles.capture_rows(&store_path, sync)?;
        let mut replay = Replay::open(&dir.join("replay.sqlite"), sync, rows)?;

        // Warm-up every contender, and size the batches from the component's warm-up rate.
        let mut done = 0usize;
        let started = Instant::now();
        while started.elapsed() < plan.lifecycle_warmup || done < 5 {
            lifecycles.batch(5)?;
            done += 5;
        }
        let rate = done as f64 / secs(started.elapsed());
        let started = Instant::now();
        while started.elapsed() < plan.lifecycle_warmup {
            replay.batch(5)?;
            raw.batch(COMMITS_PER_LIFECYCLE * 5)?;
        }
        let count = ((rate * secs(plan.lifecycle_batch_target)).round() as usize).clamp(10, 5000);
        all.push(Contenders {
            sync,
            lifecycles,
            replay,
            raw,
            count,
            lc_rates: Vec::new(),
            replay_rates: Vec::new(),
            raw_rates: Vec::new(),
            pair_ratios: Vec::new(),
            steps: vec![Vec::new(); COMMITS_PER_LIFECYCLE],
        });
    }

    // Interleave: each repetition runs both modes; within a mode the order of the contenders
    // rotates between repetitions.
    for rep in 0..plan.lifecycle_reps {
        for c in &mut all {
            for turn in 0..3 {
                match (rep + turn) % 3 {
                    0 => {
                        let (wall, steps) = c.lifecycles.batch(c.count)?;
                        c.lc_rates.push(c.count as f64 / secs(wall));
                        for (i, s) in steps.iter().enumerate() {
                            c.steps[i].push(secs(*s) / c.count as f64);
                        }
                    }
                    1 => {
                        let wall = c.replay.batch(c.count)?;
                        c.replay_rates.push(c.count as f64 / secs(wall));
                    }
                    _ => {
                        let commits = c.count * COMMITS_PER_LIFECYCLE;
                        let wall = c.raw.batch(commits)?;
                        c.raw_rates.push(commits as f64 / secs(wall));
                    }
                }
            }
            let (lc, raw) = (c.lc_rates[rep], c.raw_rates[rep]);
            c.pair_ratios.push(lc * COMMITS_PER_LIFECYCLE as f64 / raw);
        }
    }

    Ok(all
        .into_iter()
        .map(|c| {
            let lifecycles_per_s = Stats::of_nonempty(&c.lc_rates);
            let replay_per_s = Stats::of_nonempty(&c.replay_rates);
            let raw_commits_per_s = Stats::of_nonempty(&c.raw_rates);
            let per_commit = |rate: f64| 1.0 / (rate * COMMITS_PER_LIFECYCLE as f64);
            LifecycleResult {
                synchronous: c.sync,
                lifecycles_per_batch: c.count,
                document_bytes: c.replay.rows.iter().map(|r| r.document.len()).collect(),
                ratio: lifecycles_per_s.p50 * COMMITS_PER_LIFECYCLE as f64 / raw_commits_per_s.p50,
                replay_ratio: replay_per_s.p50 * COMMITS_PER_LIFECYCLE as f64
                    / raw_commits_per_s.p50,
                pair_ratios: Stats::of_nonempty(&c.pair_ratios),
                steps: c.steps.iter().map(|s| Stats::of_nonempty(s)).collect(),
                op_time: per_commit(lifecycles_per_s.p50),
                replay_op_time: per_commit(replay_per_s.p50),
                raw_commit_time: 1.0 / raw_commits_per_s.p50,
                lifecycles_per_s,
                replay_per_s,
                raw_commits_per_s,
            }
        })
        .collect())
}

// ---------------------------------------------------------------------------------------------
// 2. Validation: component vs native jsonschema

/// Native: parse the response map, check its shape, validate the content with a compiled
/// validator. `true` when the answer is valid.
fn native_validate(text: &str, request_key: &str, validator: &jsonschema::Validator) -> bool {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    if map.len() != 1 {
        return false;
    }
    let Some(Value::Object(response)) = map.get(request_key) else {
        return false;
    };
    if response.keys().any(|k| k != "action" && k != "content") {
        return false;
    }
    if response.get("action").and_then(Value::as_str) != Some("accept") {
        return false;
    }
    match response.get("content") {
        Some(content @ Value::Object(_)) => validator.validate(content).is_ok(),
        _ => false,
    }
}

struct ValidationResult {
    form: &'static str,
    answer_bytes: usize,
    component: Stats,
    native: Stats,
    ratio: f64,
    breakdown: Breakdown,
}

/// Where the time of a component validation goes (each part timed on its own).
struct Breakdown {
    /// `m3::convert::pending_round`: the round to WIT (serialises each `requestedSchema`).
    to_wit: Stats,
    /// The typed `validate-responses` call on a live instance, the round already converted:
    /// lowering, the guest's work, lifting.
    call: Stats,
    /// `m3::convert::responses_back`: parses the canonical content back into `serde_json`.
    from_wit: Stats,
    /// `same-responses([], [])`: the fixed cost of a call into the component.
    empty_call: Stats,
}

impl Breakdown {
    fn to_json(&self) -> Value {
        json!({
            "convert_round_to_wit_seconds": self.to_wit.spread_json("s"),
            "component_call_seconds": self.call.spread_json("s"),
            "convert_responses_back_seconds": self.from_wit.spread_json("s"),
            "empty_component_call_seconds": self.empty_call.spread_json("s"),
        })
    }
}

fn validation_breakdown(
    plan: &Plan,
    runtime: &ComponentRuntime,
    form: &Form,
) -> BenchResult<Breakdown> {
    let round = form.pending_round();
    let mut store = new_store(&runtime.engine, GuestLimits::default());
    let instance = runtime.pre.instantiate(&mut store)?;
    let policy = instance.m3_managed_input_policy();
    let samples = plan.validation_rounds * plan.validation_batch;
    let (mut to_wit, mut call, mut from_wit, mut empty_call) = (
        Vec::with_capacity(samples),
        Vec::with_capacity(samples),
        Vec::with_capacity(samples),
        Vec::with_capacity(samples),
    );
    for i in 0..plan.validation_warmup + samples {
        let (t_to, wit_round) =
            timed(|| m3::testing::internals::convert::pending_round(black_box(&round)));
        let (t_call, validated) = timed(|| {
            policy.call_validate_responses(&mut store, &wit_round, black_box(&form.answer_text))
        });
        let validated = validated?.map_err(|e| format!("validation failed: {e:?}"))?;
        let (t_from, back) =
            timed(|| m3::testing::internals::convert::responses_back(black_box(validated)));
        black_box(back.map_err(|e| e.to_string())?);
        let (t_empty, same) = timed(|| policy.call_same_responses(&mut store, &[], &[]));
        black_box(same?);
        if i >= plan.validation_warmup {
            to_wit.push(t_to);
            call.push(t_call);
            from_wit.push(t_from);
            empty_call.push(t_empty);
        }
    }
    Ok(Breakdown {
        to_wit: Stats::of_nonempty(&to_wit),
        call: Stats::of_nonempty(&call),
        from_wit: Stats::of_nonempty(&from_wit),
        empty_call: Stats::of_nonempty(&empty_call),
    })
}

fn validation_bench(
    plan: &Plan,
    policy: &Policy,
    runtime: &ComponentRuntime,
) -> BenchResult<Vec<ValidationResult>> {
    let mut results = Vec::new();
    for form in forms() {
        let round = policy.prepare(&form.pending_round());
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(&m3_guest::schema::enforced_schema(&form.schema))
            .map_err(|e| format!("native validator for {}: {e}", form.name))?;
        let text = form.answer_text.as_str();

        // Both contenders must accept the answer (and the component must reject a bad one,
        // so that the baseline is not measuring a no-op).
        policy.validate_prepared_json(&round, text)?;
        if !native_validate(text, form.request_key, &validator) {
            return Err(format!("the native validator rejects the {} answer", form.name).into());
        }
        let bad = text.replacen("\"accept\"", "\"accept\",\"extra\":1", 1);
        if policy.validate_prepared_json(&round, &bad).is_ok()
            || native_validate(&bad, form.request_key, &validator)
        {
            return Err(format!("a malformed {} answer was accepted", form.name).into());
        }

        for _ in 0..plan.validation_warmup {
            black_box(policy.validate_prepared_json(&round, black_box(text))?);
            black_box(native_validate(
                black_box(text),
                form.request_key,
                &validator,
            ));
        }

        let mut component = Vec::with_capacity(plan.validation_rounds * plan.validation_batch);
        let mut native = Vec::with_capacity(plan.validation_rounds * plan.validation_batch);
        for rep in 0..plan.validation_rounds {
            let run_component = |out: &mut Vec<f64>| -> BenchResult<()> {
                for _ in 0..plan.validation_batch {
                    let t = Instant::now();
                    let validated = policy.validate_prepared_json(&round, black_box(text))?;
                    out.push(secs(t.elapsed()));
                    black_box(validated);
                }
                Ok(())
            };
            let run_native = |out: &mut Vec<f64>| -> BenchResult<()> {
                for _ in 0..plan.validation_batch {
                    let t = Instant::now();
                    let ok = native_validate(black_box(text), form.request_key, &validator);
                    out.push(secs(t.elapsed()));
                    if !black_box(ok) {
                        return Err("the native validator changed its mind".into());
                    }
                }
                Ok(())
            };
            if rep % 2 == 0 {
                run_component(&mut component)?;
                run_native(&mut native)?;
            } else {
                run_native(&mut native)?;
                run_component(&mut component)?;
            }
        }
        let (component, native) = (Stats::of_nonempty(&component), Stats::of_nonempty(&native));
        results.push(ValidationResult {
            form: form.name,
            answer_bytes: text.len(),
            ratio: component.p50 / native.p50,
            component,
            native,
            breakdown: validation_breakdown(plan, runtime, &form)?,
        });
    }
    Ok(results)
}

// ---------------------------------------------------------------------------------------------
// 3. Cold start

struct ColdStartResult {
    wasm_bytes: usize,
    compile: Stats,
    cache_store: f64,
    cache_hit: Stats,
    /// Parts of a hit: naming the artifact (hashes the wasm), then checking and loading it.
    artifact_name: Stats,
    load_artifact: Stats,
    store_new: Stats,
    instantiate: Stats,
    first_validation: Stats,
    warm_validation: Stats,
}

/// A store for one instance, made exactly as `m3::instance` makes it.
fn new_store(engine: &Engine, limits: GuestLimits) -> Store<HostState> {
    let state = HostState::new(Arc::new(SystemClock), None, limits.max_memory);
    m3::testing::internals::instance::bounded_store(engine, state, limits)
}

fn cold_start_bench(plan: &Plan, scratch: &Path) -> BenchResult<ColdStartResult> {
    let engine = Engine::new(&engine_config())?;

    let mut compile = Vec::new();
    for i in 0..plan.compile_warmup + plan.compile_reps {
        let (t, component) = timed(|| Component::new(&engine, GUEST_WASM));
        black_box(component?);
        if i >= plan.compile_warmup {
            compile.push(t);
        }
    }

    let cache_dir = scratch.join("component-cache");
    let (cache_store, first) = timed(|| {
        component_cache::load(
            &engine,
            GUEST_WASM,
            GUEST_WASM_SHA256,
            Some(&cache_dir),
            &|| {},
        )
    });
    let (component, outcome) = first?;
    drop(component);
    if !matches!(outcome, CacheOutcome::Stored(_)) {
        return Err(format!("the first cache load did not store: {outcome:?}").into());
    }
    let mut cache_hit = Vec::new();
    let mut artifact_name = Vec::new();
    let mut load_artifact = Vec::new();
    for i in 0..plan.load_warmup + plan.load_reps {
        let (t, loaded) = timed(|| {
            component_cache::load(
                &engine,
                GUEST_WASM,
                GUEST_WASM_SHA256,
                Some(&cache_dir),
                &|| {},
            )
        });
        let (component, outcome) = loaded?;
        if !matches!(outcome, CacheOutcome::Hit(_)) {
            return Err(format!("a later cache load missed: {outcome:?}").into());
        }
        black_box(component);
        let (t_name, name) = timed(|| component_cache::artifact_name(&engine, GUEST_WASM_SHA256));
        black_box(name);
        let (t_map, mapped) =
            timed(|| component_cache::load_artifact(&engine, &cache_dir, GUEST_WASM_SHA256));
        black_box(mapped.map_err(|why| format!("the cached artifact did not load: {why}"))?);
        if i >= plan.load_warmup {
            cache_hit.push(t);
            artifact_name.push(t_name);
            load_artifact.push(t_map);
        }
    }

    // Instantiation from the `InstancePre` of a runtime loaded from that cache.
    let runtime = ComponentRuntime::new(GUEST_WASM, GUEST_WASM_SHA256, Some(&cache_dir))?;
    let limits = GuestLimits::default();
    let form = &forms()[0];
    let wit_round = m3::testing::internals::convert::pending_round(&form.pending_round());
    let mut store_new = Vec::new();
    let mut instantiate = Vec::new();
    let mut first_validation = Vec::new();
    let mut warm_validation = Vec::new();
    for i in 0..plan.instantiate_warmup + plan.instantiate_reps {
        let (t_store, mut store) = timed(|| new_store(&runtime.engine, limits));
        let (t_inst, instance) = timed(|| runtime.pre.instantiate(&mut store));
        let instance = instance?;
        // The first call on a fresh instance also compiles the form's validator in the guest.
        let validate = |store: &mut Store<HostState>| -> BenchResult<f64> {
            let (t, out) = timed(|| {
                instance.m3_managed_input_policy().call_validate_responses(
                    &mut *store,
                    &wit_round,
                    &form.answer_text,
                )
            });
            out?.map_err(|e| format!("validation failed: {e:?}"))?;
            Ok(t)
        };
        let t_first = validate(&mut store)?;
        let t_warm = validate(&mut store)?;
        if i >= plan.instantiate_warmup {
            store_new.push(t_store);
            instantiate.push(t_inst);
            first_validation.push(t_first);
            warm_validation.push(t_warm);
        }
    }

    Ok(ColdStartResult {
        wasm_bytes: GUEST_WASM.len(),
        compile: Stats::of_nonempty(&compile),
        cache_store,
        cache_hit: Stats::of_nonempty(&cache_hit),
        artifact_name: Stats::of_nonempty(&artifact_name),
        load_artifact: Stats::of_nonempty(&load_artifact),
        store_new: Stats::of_nonempty(&store_new),
        instantiate: Stats::of_nonempty(&instantiate),
        first_validation: Stats::of_nonempty(&first_validation),
        warm_validation: Stats::of_nonempty(&warm_validation),
    })
}

// ---------------------------------------------------------------------------------------------
// Output

fn print_lifecycles(results: &[LifecycleResult]) {
    let mut table = Table::new(
        "1. Round lifecycle throughput (5 commits each) vs raw SQLite commits   goal: ratio >= 0.70",
        &[
            "synchronous",
            "lifecycles/s (min..max)",
            "raw commits/s (min..max)",
            "ratio",
            "pair ratios min..max",
            "goal",
        ],
    );
    for r in results {
        table.row(vec![
            sync_name(r.synchronous).into(),
            format!(
                "{} ({})",
                fmt_rate(r.lifecycles_per_s.p50),
                rate_range(&r.lifecycles_per_s)
            ),
            format!(
                "{} ({})",
                fmt_rate(r.raw_commits_per_s.p50),
                rate_range(&r.raw_commits_per_s)
            ),
            format!("{:.3}", r.ratio),
            format!("{:.3} .. {:.3}", r.pair_ratios.min, r.pair_ratios.max),
            if r.ratio >= 0.7 { "met" } else { "MISSED" }.into(),
        ]);
    }
    table.print();

    let mut header = vec!["synchronous"];
    header.extend(STEPS);
    header.push("raw commit");
    let mut steps = Table::new("   Mean time per step (median over repetitions)", &header);
    for r in results {
        let mut row = vec![sync_name(r.synchronous).to_string()];
        row.extend(r.steps.iter().map(|s| fmt_time(s.p50)));
        row.push(fmt_time(r.raw_commit_time));
        steps.row(row);
    }
    steps.print();

    let mut split = Table::new(
        "   Where a store operation goes: the same SQL replayed through m3::sqlite without the component",
        &[
            "synchronous",
            "replayed lifecycles/s (min..max)",
            "replay ratio",
            "store op",
            "replayed op",
            "raw commit",
            "component share",
            "table-shape share",
            "document bytes",
        ],
    );
    for r in results {
        split.row(vec![
            sync_name(r.synchronous).into(),
            format!(
                "{} ({})",
                fmt_rate(r.replay_per_s.p50),
                rate_range(&r.replay_per_s)
            ),
            format!("{:.3}", r.replay_ratio),
            fmt_time(r.op_time),
            fmt_time(r.replay_op_time),
            fmt_time(r.raw_commit_time),
            fmt_time(r.op_time - r.replay_op_time),
            fmt_time(r.replay_op_time - r.raw_commit_time),
            format!(
                "{}..{}",
                r.document_bytes.iter().min().unwrap_or(&0),
                r.document_bytes.iter().max().unwrap_or(&0)
            ),
        ]);
    }
    split.print();
}

fn print_validation(results: &[ValidationResult]) {
    let mut table = Table::new(
        "2. Validating a form answer from its JSON text, per validation   goal: component/native <= 2.0",
        &[
            "form",
            "bytes",
            "component median (p10..p90)",
            "native median (p10..p90)",
            "ratio",
            "goal",
        ],
    );
    for r in results {
        table.row(vec![
            r.form.into(),
            r.answer_bytes.to_string(),
            format!(
                "{} ({} .. {})",
                fmt_time(r.component.p50),
                fmt_time(r.component.p10),
                fmt_time(r.component.p90)
            ),
            format!(
                "{} ({} .. {})",
                fmt_time(r.native.p50),
                fmt_time(r.native.p10),
                fmt_time(r.native.p90)
            ),
            format!("{:.2}x", r.ratio),
            if r.ratio <= 2.0 { "met" } else { "MISSED" }.into(),
        ]);
    }
    table.print();

    let mut parts = Table::new(
        "   Where a component validation goes (medians, each part timed on its own)",
        &[
            "form",
            "round to WIT",
            "validate-responses call",
            "responses back",
            "empty call",
            "native",
        ],
    );
    for r in results {
        let b = &r.breakdown;
        parts.row(vec![
            r.form.into(),
            fmt_time(b.to_wit.p50),
            fmt_time(b.call.p50),
            fmt_time(b.from_wit.p50),
            fmt_time(b.empty_call.p50),
            fmt_time(r.native.p50),
        ]);
    }
    parts.print();
}

fn print_cold_start(c: &ColdStartResult) {
    let mut table = Table::new(
        &format!(
            "3. Cold start (component of {:.2} MB)",
            c.wasm_bytes as f64 / 1e6
        ),
        &["step", "median", "min .. max", "n"],
    );
    let mut row = |name: &str, s: &Stats| {
        table.row(vec![
            name.into(),
            fmt_time(s.p50),
            time_range(s),
            s.n.to_string(),
        ]);
    };
    row("compile (Component::new)", &c.compile);
    row(
        "load cached artifact (component_cache::load, hit)",
        &c.cache_hit,
    );
    row(
        "  of which artifact_name (SHA-256 of the wasm)",
        &c.artifact_name,
    );
    row(
        "  of which the artifact checked and loaded (component_cache::load_artifact)",
        &c.load_artifact,
    );
    row("new Store<HostState>", &c.store_new);
    row("instantiate from InstancePre", &c.instantiate);
    row("first validation on a new instance", &c.first_validation);
    row("second validation on that instance", &c.warm_validation);
    table.row(vec![
        "compile + store in cache (first load, once)".into(),
        fmt_time(c.cache_store),
        "-".into(),
        "1".into(),
    ]);
    table.print();
}

fn to_json(
    plan: &Plan,
    lifecycles: &[LifecycleResult],
    validation: &[ValidationResult],
    cold: &ColdStartResult,
    total: Duration,
) -> Value {
    json!({
        "benchmark": "m3 engine",
        "created_at": Utc::now().to_rfc3339(),
        "machine": {
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "os": std::env::consts::OS,
            "arch": std::env::consts::ARCH,
        },
        "plan": plan.to_json(),
        "total_seconds": secs(total),
        "lifecycle": lifecycles.iter().map(|r| json!({
            "synchronous": sync_name(r.synchronous),
            "commits_per_lifecycle": COMMITS_PER_LIFECYCLE,
            "lifecycles_per_batch": r.lifecycles_per_batch,
            "raw_commits_per_batch": r.lifecycles_per_batch * COMMITS_PER_LIFECYCLE,
            "lifecycles_per_second": r.lifecycles_per_s.spread_json("1/s"),
            "raw_commits_per_second": r.raw_commits_per_s.spread_json("1/s"),
            "ratio": r.ratio,
            "pair_ratios": r.pair_ratios.spread_json("ratio"),
            "replayed_sql_lifecycles_per_second": r.replay_per_s.spread_json("1/s"),
            "replayed_sql_ratio": r.replay_ratio,
            "document_bytes_per_step": r.document_bytes,
            "store_operation_seconds": r.op_time,
            "replayed_operation_seconds": r.replay_op_time,
            "raw_commit_seconds": r.raw_commit_time,
            "goal": {"min_ratio": 0.7, "met": r.ratio >= 0.7},
            "step_seconds": STEPS.iter().zip(&r.steps)
                .map(|(name, s)| ((*name).to_string(), s.spread_json("s")))
                .collect::<serde_json::Map<_, _>>(),
        })).collect::<Vec<_>>(),
        "validation": validation.iter().map(|r| json!({
            "form": r.form,
            "answer_bytes": r.answer_bytes,
            "component_seconds": r.component.spread_json("s"),
            "native_seconds": r.native.spread_json("s"),
            "ratio": r.ratio,
            "goal": {"max_ratio": 2.0, "met": r.ratio <= 2.0},
            "breakdown": r.breakdown.to_json(),
        })).collect::<Vec<_>>(),
        "cold_start": {
            "wasm_bytes": cold.wasm_bytes,
            "compile_seconds": cold.compile.spread_json("s"),
            "cache_store_seconds": cold.cache_store,
            "cache_hit_seconds": cold.cache_hit.spread_json("s"),
            "artifact_name_seconds": cold.artifact_name.spread_json("s"),
            "load_artifact_seconds": cold.load_artifact.spread_json("s"),
            "store_new_seconds": cold.store_new.spread_json("s"),
            "instantiate_seconds": cold.instantiate.spread_json("s"),
            "first_validation_seconds": cold.first_validation.spread_json("s"),
            "warm_validation_seconds": cold.warm_validation.spread_json("s"),
        },
    })
}

fn main() -> BenchResult<()> {
    let started = Instant::now();
    let plan = Plan::from_args();
    let target = target_dir();
    let scratch = tempfile::Builder::new().prefix("m3-bench-").tempdir()?;

    // The shared runtime (used by `Policy`) caches its compiled component under the target
    // directory, never in the user's cache.
    if std::env::var_os("M3_CACHE_DIR").is_none() {
        // SAFETY: set before this process starts any thread.
        unsafe { std::env::set_var("M3_CACHE_DIR", target.join("bench").join("component-cache")) };
    }

    println!(
        "m3 engine benchmark ({}; {} CPUs)",
        if plan.full { "full run" } else { "smoke pass" },
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let cold = if plan.runs("cold-start") {
        eprintln!("cold start: compiling, loading and instantiating the component ...");
        Some(cold_start_bench(&plan, scratch.path())?)
    } else {
        None
    };
    let runtime = ComponentRuntime::shared()?;
    let validation = if plan.runs("validation") {
        eprintln!("validation: component vs native ...");
        Some(validation_bench(&plan, &Policy::new()?, &runtime)?)
    } else {
        None
    };
    let lifecycles = if plan.runs("lifecycle") {
        eprintln!("round lifecycles vs raw SQLite commits (FULL and NORMAL, interleaved) ...");
        Some(lifecycle_bench(&plan, &runtime, scratch.path())?)
    } else {
        None
    };

    if let Some(lifecycles) = &lifecycles {
        print_lifecycles(lifecycles);
    }
    if let Some(validation) = &validation {
        print_validation(validation);
    }
    if let Some(cold) = &cold {
        print_cold_start(cold);
    }

    let total = started.elapsed();
    println!("\ntotal: {}", fmt_time(secs(total)));
    match (plan.full, &lifecycles, &validation, &cold) {
        (true, Some(lifecycles), Some(validation), Some(cold)) => {
            let document = to_json(&plan, lifecycles, validation, cold, total);
            write_report("engine", &document)?;
        }
        _ => println!(
            "partial or smoke run: no JSON written (run `cargo bench -p m3 --bench engine`)"
        ),
    }
    Ok(())
}

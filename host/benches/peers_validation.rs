//! Side-by-side benchmark, items 3 and 4 of `just bench-peers`
//! (`cargo bench -p m3 --bench peers_validation`).
//!
//! 3. **Validation.** One MCP form schema (the every-kind form of `tests/support`: string
//!    bounds, email/uri/date/date-time formats, integer and number bounds, boolean, enum,
//!    `oneOf` consts, a multi-select array) and one fixed list of answers, half valid and half
//!    invalid, the same for every contender. Each contender starts from the response map's JSON
//!    text and reuses a compiled validator:
//!    (a) the guest's policy through the component ([`m3::Policy::validate_prepared_json`] on a
//!    [`m3::PreparedRound`]); (b) the same validation natively in Rust (serde_json, the
//!    response-map checks, a `jsonschema` validator of the guest's own enforced schema, as the
//!    engine benchmark does); (c) Python `jsonschema` (`peers/validate_py.py`); (d) AJV under
//!    Node as the MCP TypeScript SDK configures it (`peers/validate_ajv.mjs`). The two peers
//!    run as long-lived processes that time their own batches; every repetition runs one batch
//!    of each contender (the mix, then the valid and the invalid halves), the order rotating,
//!    after a warm-up. Goals: component / native <= 2; Python / component >= 10.
//! 4. **The storage limit.** Raw SQLite commits per second on this disk with the store's
//!    pragmas and connection strategy (a connection per operation through
//!    `m3::sqlite::database::Database::connect`, reused while idle, a keeper connection, WAL,
//!    `BEGIN IMMEDIATE`, one one-row `UPDATE`, `COMMIT`), at `synchronous=FULL` and `NORMAL`,
//!    interleaved with the kit's round lifecycle (create owned, submit, start delivery, mark
//!    delivered, resolve: five commits). Goal: lifecycles/s >= 0.7 x (commits/s / 5).
//!
//! The peers are installed by `peers/install.sh` into `<target>/bench-peers` (a full run runs
//! it; it returns at once when the pins have not changed). Prints tables and writes
//! `target/bench/peers_validation.json` (under `$CARGO_TARGET_DIR` when set). It measures; it
//! never fails on a time. Without `--bench` (as `cargo test` runs it) or with
//! `--smoke` it makes a short smoke pass, using the peers only when they are already installed,
//! and writes no JSON.

use chrono::Utc;
use m3::testing::internals::sqlite::database::Database;
use m3::{
    ElicitationRequest, ErrorCode, ManagedInputError, ManagedInputStatus, ManagedInputStore,
    NewRound, OperationKind, OwnerClaim, PendingElicitationRound, Policy, PreparedRound,
    SqliteManagedInputStore, StoreOptions, Synchronous,
};
use m3_bench::fixture::{every_kind_answer, every_kind_schema};
use m3_bench::stats::{Stats, fmt_rate, fmt_time, secs, sync_name};
use m3_bench::{BenchResult, RunArgs, Table, target_dir, write_report};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// Commits per round lifecycle: create, submit, start delivery, mark delivered, resolve.
const COMMITS_PER_LIFECYCLE: usize = 5;
/// The store's default busy timeout.
const BUSY_TIMEOUT: Duration = Duration::from_millis(5000);
/// The request key of the benchmark's form.
const REQUEST_KEY: &str = "profile";
/// Goals of the issue.
const GOAL_MAX_COMPONENT_VS_NATIVE: f64 = 2.0;
const GOAL_MIN_PYTHON_VS_COMPONENT: f64 = 10.0;
const GOAL_MIN_STORAGE_FRACTION: f64 = 0.7;

// ---------------------------------------------------------------------------------------------
// Run configuration

#[derive(Debug, Clone, Copy)]
struct Plan {
    full: bool,
    /// Validations per timed batch (every contender, every subset).
    batch: usize,
    /// Untimed batches of each subset per contender before the first repetition.
    warmup_batches: usize,
    validation_reps: usize,
    storage_reps: usize,
    storage_warmup: Duration,
    /// Wall time one lifecycle batch should take; the raw batch has the same commit count.
    storage_batch_target: Duration,
    /// Fewest lifecycles in a timed batch.
    storage_min_batch: usize,
}

impl Plan {
    fn from_args() -> Self {
        if RunArgs::from_env().full {
            Self {
                full: true,
                batch: 512,
                warmup_batches: 4,
                validation_reps: 31,
                storage_reps: 11,
                storage_warmup: Duration::from_millis(400),
                storage_batch_target: Duration::from_millis(700),
                storage_min_batch: 10,
            }
        } else {
            Self {
                full: false,
                batch: 32,
                warmup_batches: 1,
                validation_reps: 2,
                storage_reps: 2,
                storage_warmup: Duration::from_millis(30),
                storage_batch_target: Duration::from_millis(60),
                storage_min_batch: 2,
            }
        }
    }

    fn to_json(self) -> Value {
        json!({
            "full": self.full,
            "validations_per_batch": self.batch,
            "warmup_batches": self.warmup_batches,
            "validation_reps": self.validation_reps,
            "storage_reps": self.storage_reps,
            "storage_warmup_ms": self.storage_warmup.as_millis() as u64,
            "storage_batch_target_ms": self.storage_batch_target.as_millis() as u64,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics and formatting (as in engine.rs)

fn peers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("benches")
        .join("peers")
}

// ---------------------------------------------------------------------------------------------
// 3. Validation: the fixture

/// `every_kind_answer` with `changes` applied (`null` removes a field).
fn answer_with(changes: Value) -> Value {
    let mut answer = every_kind_answer();
    if let (Some(map), Value::Object(changes)) = (answer.as_object_mut(), changes) {
        for (k, v) in changes {
            if v.is_null() {
                map.remove(&k);
            } else {
                map.insert(k, v);
            }
        }
    }
    answer
}

/// The fixed mix: eight valid answers and eight invalid ones, each invalid one breaking one
/// rule. Invalid formats are only `email` and `date`: Python `jsonschema` asserts `uri` and
/// `date-time` only with optional packages that the pinned peers do not install.
fn answers() -> Vec<(&'static str, Value, bool)> {
    vec![
        ("every field", every_kind_answer(), true),
        ("required only", json!({"name": "Al", "age": 0}), true),
        (
            "upper bounds",
            json!({"name": "Maximilian", "age": 150, "score": 9.5, "agree": false,
                   "color": "green", "size": "l", "tags": ["c"]}),
            true,
        ),
        (
            "other formats",
            answer_with(json!({"email": "first.last+tag@sub.example.org",
                               "site": "http://example.org:8080/a/b?q=1#frag",
                               "day": "2024-02-29", "at": "2026-01-02T03:04:05.123+02:00"})),
            true,
        ),
        (
            "non-ASCII name",
            answer_with(json!({"name": "Zoë Ünal", "tags": ["b"]})),
            true,
        ),
        (
            "integral score",
            answer_with(json!({"score": 5, "age": 42, "size": null})),
            true,
        ),
        (
            "a few fields",
            json!({"name": "Ravi", "age": 7, "email": "ravi@example.net", "tags": ["a", "c"]}),
            true,
        ),
        (
            "lower bounds",
            answer_with(json!({"score": 0.5, "age": 0, "name": "Bo", "agree": false})),
            true,
        ),
        ("name too short", answer_with(json!({"name": "A"})), false),
        (
            "bad email",
            answer_with(json!({"email": "not-an-email"})),
            false,
        ),
        ("bad date", answer_with(json!({"day": "2026-13-45"})), false),
        ("age too high", answer_with(json!({"age": 151})), false),
        ("fractional age", answer_with(json!({"age": 30.5})), false),
        (
            "color not in enum",
            answer_with(json!({"color": "blue"})),
            false,
        ),
        (
            "too many tags",
            answer_with(json!({"tags": ["a", "b", "c"]})),
            false,
        ),
        (
            "unknown field",
            answer_with(json!({"nickname": "Ash"})),
            false,
        ),
    ]
}

/// One answer of the mix: the response map's JSON text, as a caller submits it.
struct Answer {
    label: &'static str,
    text: String,
    valid: bool,
}

struct Fixture {
    schema: Value,
    /// The schema the guest enforces (`m3_guest::schema::enforced_schema`), given to every
    /// contender but the component (which derives it itself).
    enforced: Value,
    answers: Vec<Answer>,
}

impl Fixture {
    fn new() -> Self {
        let schema = every_kind_schema();
        let enforced = m3_guest::schema::enforced_schema(&schema);
        let answers = answers()
            .into_iter()
            .map(|(label, content, valid)| Answer {
                label,
                text: json!({ REQUEST_KEY: {"action": "accept", "content": content} }).to_string(),
                valid,
            })
            .collect();
        Self {
            schema,
            enforced,
            answers,
        }
    }

    fn pending_round(&self) -> PendingElicitationRound {
        PendingElicitationRound {
            round_id: "bench-every-kind".into(),
            execution_id: "exec-bench".into(),
            logical_operation_id: "op-bench".into(),
            server: "profiles".into(),
            operation_kind: OperationKind::Tool,
            operation_name: "register".into(),
            requests: BTreeMap::from([(
                REQUEST_KEY.to_string(),
                ElicitationRequest::form("Please fill in your profile", self.schema.clone()),
            )]),
            created_at: Utc::now(),
            request_state: None,
            deadline: None,
        }
    }

    /// The file the peer scripts read.
    fn to_json(&self) -> Value {
        json!({
            "request_key": REQUEST_KEY,
            "schema": self.enforced,
            "answers": self.answers.iter()
                .map(|a| json!({"label": a.label, "text": a.text, "valid": a.valid}))
                .collect::<Vec<_>>(),
        })
    }

    fn subset(&self, subset: Subset) -> Vec<&str> {
        self.answers
            .iter()
            .filter(|a| match subset {
                Subset::All => true,
                Subset::Valid => a.valid,
                Subset::Invalid => !a.valid,
            })
            .map(|a| a.text.as_str())
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subset {
    All,
    Valid,
    Invalid,
}

const SUBSETS: [Subset; 3] = [Subset::All, Subset::Valid, Subset::Invalid];

impl Subset {
    fn name(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Valid => "valid",
            Self::Invalid => "invalid",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Validation: the contenders

/// Native: parse the response map, check its shape as the guest does, validate the content
/// with the compiled validator; the first error, like the guest, named by keyword and path.
fn native_validate(text: &str, validator: &jsonschema::Validator) -> Result<(), String> {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) else {
        return Err("responses must be a JSON object".into());
    };
    if map.len() != 1 {
        return Err("responses must have exactly the pending request keys".into());
    }
    let Some(Value::Object(response)) = map.get(REQUEST_KEY) else {
        return Err("the response must be an object".into());
    };
    if response.keys().any(|k| k != "action" && k != "content") {
        return Err("a response has only `action` and `content`".into());
    }
    if response.get("action").and_then(Value::as_str) != Some("accept") {
        return Err("not accepted".into());
    }
    match response.get("content") {
        Some(content @ Value::Object(_)) => validator.validate(content).map_err(|e| {
            format!(
                "`{}` does not satisfy `{}`",
                e.instance_path().as_str(),
                e.kind().keyword()
            )
        }),
        _ => Err("content required".into()),
    }
}

/// A peer in its own process, serving timed batches (see the scripts in `benches/peers/`).
struct PeerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The script's first line: runtime, validator, verdicts.
    hello: Value,
}

impl PeerProcess {
    fn spawn(mut command: Command, what: &str) -> BenchResult<Self> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting {what}: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut peer = Self {
            child,
            stdin: Some(stdin),
            stdout,
            hello: Value::Null,
        };
        peer.hello = peer
            .read_line()
            .map_err(|e| format!("{what} did not start: {e}"))?;
        Ok(peer)
    }

    fn read_line(&mut self) -> BenchResult<Value> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            return Err("the peer exited".into());
        }
        Ok(serde_json::from_str(&line)?)
    }

    /// One batch: `passes` passes over `subset`, timed by the peer. Returns (seconds, valid).
    fn batch(&mut self, subset: Subset, passes: usize) -> BenchResult<(f64, usize)> {
        let stdin = self.stdin.as_mut().ok_or("the peer's stdin is closed")?;
        writeln!(stdin, "{} {passes}", subset.name())?;
        stdin.flush()?;
        let reply = self.read_line()?;
        let ns = reply["ns"].as_f64().ok_or("no `ns` in the peer's reply")?;
        let valid = reply["valid"].as_u64().ok_or("no `valid` in the reply")? as usize;
        Ok((ns / 1e9, valid))
    }

    fn text(&self, field: &str) -> String {
        self.hello[field].as_str().unwrap_or("?").to_string()
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        // Closing stdin ends the serve loop.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

enum Engine {
    Component {
        policy: Policy,
        round: Box<PreparedRound>,
    },
    Native(jsonschema::Validator),
    Peer(PeerProcess),
}

struct Contender {
    name: &'static str,
    runtime: String,
    validator: String,
    engine: Engine,
    /// Per-validation seconds, one sample per repetition, by subset.
    samples: [Vec<f64>; 3],
}

impl Contender {
    /// Whether the contender accepts `text`; the component must refuse an invalid answer with
    /// a schema violation (not some other error).
    fn verdict(&self, text: &str) -> BenchResult<bool> {
        match &self.engine {
            Engine::Component { policy, round } => {
                match policy.validate_prepared_json(round, text) {
                    Ok(_) => Ok(true),
                    Err(ManagedInputError::Validation(e))
                        if e.code() == ErrorCode::SchemaViolation =>
                    {
                        Ok(false)
                    }
                    Err(e) => Err(format!("the component failed otherwise: {e}").into()),
                }
            }
            Engine::Native(validator) => Ok(native_validate(text, validator).is_ok()),
            Engine::Peer(_) => Err("a peer gives its verdicts when it starts".into()),
        }
    }

    fn verdicts(&self, fixture: &Fixture) -> BenchResult<Vec<bool>> {
        if let Engine::Peer(peer) = &self.engine {
            return Ok(peer.hello["verdicts"]
                .as_array()
                .map(|v| v.iter().map(|b| b.as_bool() == Some(true)).collect())
                .unwrap_or_default());
        }
        fixture
            .answers
            .iter()
            .map(|a| self.verdict(&a.text))
            .collect()
    }

    /// One batch of `passes` passes over `texts`; returns (seconds, valid answers).
    fn batch(
        &mut self,
        subset: Subset,
        texts: &[&str],
        passes: usize,
    ) -> BenchResult<(f64, usize)> {
        let mut valid = 0usize;
        let started = Instant::now();
        match &mut self.engine {
            Engine::Component { policy, round } => {
                for _ in 0..passes {
                    for text in texts {
                        if black_box(policy.validate_prepared_json(round, black_box(text))).is_ok()
                        {
                            valid += 1;
                        }
                    }
                }
            }
            Engine::Native(validator) => {
                for _ in 0..passes {
                    for text in texts {
                        if black_box(native_validate(black_box(text), validator)).is_ok() {
                            valid += 1;
                        }
                    }
                }
            }
            Engine::Peer(peer) => return peer.batch(subset, passes),
        }
        Ok((secs(started.elapsed()), valid))
    }
}

/// Where install.sh puts the peers: `<target>/bench-peers`. A full run runs install.sh (it
/// returns at once when the pins are installed); a smoke pass uses what is already there.
fn peers_install(plan: &Plan, target: &Path) -> BenchResult<Option<PathBuf>> {
    let installed = |dir: &Path| {
        dir.join("venv/bin/python").exists() && dir.join("npm/node_modules/ajv").exists()
    };
    if !plan.full {
        let dir = target.join("bench-peers");
        return Ok(installed(&dir).then_some(dir));
    }
    eprintln!("peers: bash host/benches/peers/install.sh ...");
    let out = Command::new("bash")
        .arg(peers_dir().join("install.sh"))
        .env("CARGO_TARGET_DIR", target)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running install.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!("install.sh failed: {}", out.status).into());
    }
    let text = String::from_utf8(out.stdout)?;
    let dir = PathBuf::from(
        text.lines()
            .last()
            .ok_or("install.sh printed nothing")?
            .trim(),
    );
    if !installed(&dir) {
        return Err(format!("install.sh left no peers in {}", dir.display()).into());
    }
    Ok(Some(dir))
}

struct ValidationResult {
    contenders: Vec<Contender>,
    formats_checked_by_python: Value,
    answer_bytes: (usize, usize),
}

impl ValidationResult {
    fn find(&self, name: &str) -> Option<&Contender> {
        self.contenders.iter().find(|c| c.name == name)
    }

    /// Median of `slow` / median of `fast` on the mix, and the same per repetition.
    fn ratio(&self, slow: &str, fast: &str) -> Option<(f64, Stats)> {
        let (s, f) = (&self.find(slow)?.samples[0], &self.find(fast)?.samples[0]);
        let pairs: Vec<f64> = s.iter().zip(f).map(|(a, b)| a / b).collect();
        Some((
            Stats::of_nonempty(s).p50 / Stats::of_nonempty(f).p50,
            Stats::of_nonempty(&pairs),
        ))
    }
}

fn validation_bench(
    plan: &Plan,
    fixture: &Fixture,
    fixture_path: &Path,
    peers: Option<&Path>,
) -> BenchResult<ValidationResult> {
    let policy = Policy::new()?;
    let round = policy.prepare(&fixture.pending_round());
    let native = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(true)
        .build(&fixture.enforced)
        .map_err(|e| format!("native validator: {e}"))?;
    let mut contenders = vec![
        Contender {
            name: "component",
            runtime: "wasmtime (m3 guest)".into(),
            validator: "guest policy: jsonschema 0.61 in wasm".into(),
            engine: Engine::Component {
                policy,
                round: Box::new(round),
            },
            samples: Default::default(),
        },
        Contender {
            name: "native",
            runtime: "Rust (native)".into(),
            validator: "serde_json + jsonschema 0.61".into(),
            engine: Engine::Native(native),
            samples: Default::default(),
        },
    ];
    let mut formats_checked_by_python = Value::Null;
    if let Some(peers) = peers {
        let mut python = Command::new(peers.join("venv/bin/python"));
        python
            .arg(peers_dir().join("validate_py.py"))
            .arg(fixture_path)
            .arg("--serve");
        let python = PeerProcess::spawn(python, "Python jsonschema")?;
        formats_checked_by_python = python.hello["formats_checked"].clone();
        let mut node = Command::new("node");
        node.arg(peers_dir().join("validate_ajv.mjs"))
            .arg(fixture_path)
            .arg(peers.join("npm"))
            .arg("--serve");
        let node = PeerProcess::spawn(node, "AJV under Node")?;
        for (name, peer) in [("python", python), ("ajv", node)] {
            contenders.push(Contender {
                name,
                runtime: peer.text("runtime"),
                validator: peer.text("validator"),
                engine: Engine::Peer(peer),
                samples: Default::default(),
            });
        }
    } else {
        eprintln!("peers not installed: Python jsonschema and AJV skipped (smoke pass)");
    }

    // Every contender must give the expected verdict on every answer.
    let expected: Vec<bool> = fixture.answers.iter().map(|a| a.valid).collect();
    for c in &contenders {
        let verdicts = c.verdicts(fixture)?;
        if verdicts != expected {
            let wrong: Vec<&str> = fixture
                .answers
                .iter()
                .zip(&verdicts)
                .filter(|(a, v)| a.valid != **v)
                .map(|(a, _)| a.label)
                .collect();
            return Err(format!("{} disagrees on {wrong:?} ({verdicts:?})", c.name).into());
        }
    }

    let texts: Vec<Vec<&str>> = SUBSETS.iter().map(|s| fixture.subset(*s)).collect();
    let passes: Vec<usize> = texts
        .iter()
        .map(|t| (plan.batch / t.len()).max(1))
        .collect();
    let valid_per_pass: Vec<usize> = SUBSETS
        .iter()
        .map(|s| match s {
            Subset::All | Subset::Valid => fixture.subset(Subset::Valid).len(),
            Subset::Invalid => 0,
        })
        .collect();

    // Warm-up: every contender, every subset.
    for c in &mut contenders {
        for _ in 0..plan.warmup_batches {
            for (i, subset) in SUBSETS.iter().enumerate() {
                c.batch(*subset, &texts[i], passes[i])?;
            }
        }
    }

    // Repetitions: one batch per contender and subset, the order of the contenders rotating.
    let count = contenders.len();
    for rep in 0..plan.validation_reps {
        for (i, subset) in SUBSETS.iter().enumerate() {
            for turn in 0..count {
                let c = &mut contenders[(rep + turn) % count];
                let (seconds, valid) = c.batch(*subset, &texts[i], passes[i])?;
                if valid != valid_per_pass[i] * passes[i] {
                    return Err(format!(
                        "{} accepted {valid} of {} {} answers; expected {}",
                        c.name,
                        passes[i] * texts[i].len(),
                        subset.name(),
                        valid_per_pass[i] * passes[i]
                    )
                    .into());
                }
                c.samples[i].push(seconds / (passes[i] * texts[i].len()) as f64);
            }
        }
    }

    let sizes: Vec<usize> = fixture.answers.iter().map(|a| a.text.len()).collect();
    Ok(ValidationResult {
        contenders,
        formats_checked_by_python,
        answer_bytes: (
            sizes.iter().copied().min().unwrap_or(0),
            sizes.iter().copied().max().unwrap_or(0),
        ),
    })
}

// ---------------------------------------------------------------------------------------------
// 4. The storage limit

/// Raw SQLite through the store's own connection code: one row, updated once per transaction
/// on the connection an operation of the store gets (`Database::connect`: an idle one reused,
/// the store's flags, busy timeout and `synchronous`), the database in WAL with the store's
/// keeper connection held open.
struct RawDb {
    db: Database,
}

impl RawDb {
    fn open(path: &Path, synchronous: Synchronous) -> BenchResult<Self> {
        let db = Database::open(path, BUSY_TIMEOUT, synchronous)?;
        let conn = db.connect()?;
        let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(format!("journal mode is {mode}").into());
        }
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS bench (id INTEGER PRIMARY KEY, n INTEGER NOT NULL) STRICT;
             INSERT OR IGNORE INTO bench (id, n) VALUES (1, 0);",
        )?;
        Ok(Self { db })
    }

    /// One commit: the store's connection, `BEGIN IMMEDIATE`, a one-row `UPDATE`, `COMMIT`.
    fn commit_one(&self) -> BenchResult<()> {
        let conn = self.db.connect()?;
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

/// The kit's round lifecycle on a store file (as engine.rs).
struct Lifecycles {
    store: SqliteManagedInputStore,
    answer_text: String,
    requests: BTreeMap<String, ElicitationRequest>,
    prefix: String,
    next: u64,
}

impl Lifecycles {
    /// Runs `count` full lifecycles (five commits each); returns the wall time.
    fn batch(&mut self, count: usize) -> BenchResult<Duration> {
        let rounds: Vec<(NewRound, String, String)> = (0..count)
            .map(|_| {
                self.next += 1;
                let id = format!("{}-{}", self.prefix, self.next);
                let round = NewRound::new(
                    &id,
                    "exec-bench",
                    "profiles",
                    "register",
                    self.requests.clone(),
                )
                .owned_by(OwnerClaim::new("worker-bench"));
                (round, format!("submit-{id}"), format!("deliver-{id}"))
            })
            .collect();
        let started = Instant::now();
        for (round, submit_key, delivery_key) in &rounds {
            let id = round.round_id.as_str();
            let lease = self
                .store
                .create_round(round)?
                .lease
                .ok_or("an owned round has no lease")?;
            self.store
                .submit_responses_json(id, &self.answer_text, submit_key)?;
            self.store.start_delivery(id, &lease, delivery_key)?;
            self.store.mark_delivered(id, &lease)?;
            let resolved = self.store.resolve(id, &lease)?;
            if resolved.status != ManagedInputStatus::Resolved {
                return Err(format!("round {id} ended {}", resolved.status).into());
            }
        }
        Ok(started.elapsed())
    }
}

struct StorageResult {
    synchronous: Synchronous,
    lifecycles_per_batch: usize,
    raw_commits_per_s: Stats,
    lifecycles_per_s: Stats,
    /// Median lifecycles/s / (median raw commits/s / 5).
    fraction: f64,
    /// The same, per interleaved pair of batches.
    pair_fractions: Stats,
}

fn storage_bench(
    plan: &Plan,
    fixture: &Fixture,
    scratch: &Path,
) -> BenchResult<Vec<StorageResult>> {
    struct Mode {
        sync: Synchronous,
        lifecycles: Lifecycles,
        raw: RawDb,
        count: usize,
        lc_rates: Vec<f64>,
        raw_rates: Vec<f64>,
    }
    let answer_text = fixture.answers[0].text.clone();
    let requests = fixture.pending_round().requests;
    let mut modes = Vec::new();
    for sync in [Synchronous::Full, Synchronous::Normal] {
        let dir = scratch.join(format!("storage-{}", sync_name(sync).to_lowercase()));
        std::fs::create_dir_all(&dir)?;
        let store = m3::testing::internals::open_with_runtime(
            dir.join("store.sqlite"),
            StoreOptions {
                busy_timeout_ms: BUSY_TIMEOUT.as_millis() as u64,
                synchronous: sync,
                ..StoreOptions::default()
            },
            m3::testing::internals::engine::ComponentRuntime::shared()?,
        )?;
        let mut lifecycles = Lifecycles {
            store,
            answer_text: answer_text.clone(),
            requests: requests.clone(),
            prefix: format!("round-{}", sync_name(sync).to_lowercase()),
            next: 0,
        };
        let raw = RawDb::open(&dir.join("raw.sqlite"), sync)?;

        // Warm both up; size the batches from the lifecycle's warm-up rate.
        let (mut done, started) = (0usize, Instant::now());
        while started.elapsed() < plan.storage_warmup || done < 2 {
            lifecycles.batch(2)?;
            done += 2;
        }
        let rate = done as f64 / secs(started.elapsed());
        let started = Instant::now();
        while started.elapsed() < plan.storage_warmup {
            raw.batch(COMMITS_PER_LIFECYCLE * 2)?;
        }
        let count = ((rate * secs(plan.storage_batch_target)).round() as usize)
            .clamp(plan.storage_min_batch, 5000);
        modes.push(Mode {
            sync,
            lifecycles,
            raw,
            count,
            lc_rates: Vec::new(),
            raw_rates: Vec::new(),
        });
    }

    // Interleaved: each repetition runs both modes; the contenders' order alternates.
    for rep in 0..plan.storage_reps {
        for m in &mut modes {
            for turn in 0..2 {
                if (rep + turn) % 2 == 0 {
                    let wall = m.lifecycles.batch(m.count)?;
                    m.lc_rates.push(m.count as f64 / secs(wall));
                } else {
                    let commits = m.count * COMMITS_PER_LIFECYCLE;
                    let wall = m.raw.batch(commits)?;
                    m.raw_rates.push(commits as f64 / secs(wall));
                }
            }
        }
    }

    let per_lifecycle = COMMITS_PER_LIFECYCLE as f64;
    Ok(modes
        .into_iter()
        .map(|m| {
            let pairs: Vec<f64> = m
                .lc_rates
                .iter()
                .zip(&m.raw_rates)
                .map(|(lc, raw)| lc / (raw / per_lifecycle))
                .collect();
            let (lc, raw) = (
                Stats::of_nonempty(&m.lc_rates),
                Stats::of_nonempty(&m.raw_rates),
            );
            StorageResult {
                synchronous: m.sync,
                lifecycles_per_batch: m.count,
                fraction: lc.p50 / (raw.p50 / per_lifecycle),
                pair_fractions: Stats::of_nonempty(&pairs),
                raw_commits_per_s: raw,
                lifecycles_per_s: lc,
            }
        })
        .collect())
}

// ---------------------------------------------------------------------------------------------
// Output

fn met(ok: bool) -> String {
    if ok { "met" } else { "MISSED" }.into()
}

fn print_validation(v: &ValidationResult) {
    let mut table = Table::new(
        "3. Validating a form answer from its JSON text (every-kind form, 8 valid + 8 invalid answers), per validation",
        &[
            "contender",
            "runtime / validator",
            "mix median",
            "p10 .. p90 (reps)",
            "valid only",
            "invalid only",
            "vs component",
        ],
    );
    let component = v
        .find("component")
        .map(|c| Stats::of_nonempty(&c.samples[0]).p50);
    for c in &v.contenders {
        let [all, valid, invalid] = c.samples.each_ref().map(|s| Stats::of_nonempty(s));
        table.row(vec![
            c.name.into(),
            format!("{} / {}", c.runtime, c.validator),
            fmt_time(all.p50),
            format!("{} .. {}", fmt_time(all.p10), fmt_time(all.p90)),
            fmt_time(valid.p50),
            fmt_time(invalid.p50),
            component.map_or("-".into(), |comp| format!("{:.2}x", all.p50 / comp)),
        ]);
    }
    table.print();

    let mut goals = Table::new(
        "   Goals (medians on the mix; the ratio per repetition p10 .. p90)",
        &["ratio", "value", "per repetition", "goal", ""],
    );
    if let Some((r, pairs)) = v.ratio("component", "native") {
        goals.row(vec![
            "component / native Rust".into(),
            format!("{r:.2}x"),
            format!("{:.2} .. {:.2}", pairs.p10, pairs.p90),
            format!("<= {GOAL_MAX_COMPONENT_VS_NATIVE:.1}x"),
            met(r <= GOAL_MAX_COMPONENT_VS_NATIVE),
        ]);
    }
    if let Some((r, pairs)) = v.ratio("python", "component") {
        goals.row(vec![
            "Python jsonschema / component".into(),
            format!("{r:.1}x"),
            format!("{:.1} .. {:.1}", pairs.p10, pairs.p90),
            format!(">= {GOAL_MIN_PYTHON_VS_COMPONENT:.0}x"),
            met(r >= GOAL_MIN_PYTHON_VS_COMPONENT),
        ]);
    }
    if let Some((r, pairs)) = v.ratio("component", "ajv") {
        goals.row(vec![
            "component / AJV".into(),
            format!("{r:.2}x"),
            format!("{:.2} .. {:.2}", pairs.p10, pairs.p90),
            "(no goal)".into(),
            String::new(),
        ]);
    }
    goals.print();
}

fn print_storage(results: &[StorageResult]) {
    let mut table = Table::new(
        "4. The storage limit: raw SQLite commits/s (store's pragmas, connection per operation) vs round lifecycles (5 commits)",
        &[
            "synchronous",
            "raw commits/s (min .. max)",
            "limit: lifecycles/s = commits/s / 5",
            "kit lifecycles/s (min .. max)",
            "fraction",
            "per pair p10 .. p90",
            "goal >= 0.70",
        ],
    );
    for r in results {
        table.row(vec![
            sync_name(r.synchronous).into(),
            format!(
                "{} ({} .. {})",
                fmt_rate(r.raw_commits_per_s.p50),
                fmt_rate(r.raw_commits_per_s.min),
                fmt_rate(r.raw_commits_per_s.max)
            ),
            fmt_rate(r.raw_commits_per_s.p50 / COMMITS_PER_LIFECYCLE as f64),
            format!(
                "{} ({} .. {})",
                fmt_rate(r.lifecycles_per_s.p50),
                fmt_rate(r.lifecycles_per_s.min),
                fmt_rate(r.lifecycles_per_s.max)
            ),
            format!("{:.3}", r.fraction),
            format!("{:.3} .. {:.3}", r.pair_fractions.p10, r.pair_fractions.p90),
            met(r.fraction >= GOAL_MIN_STORAGE_FRACTION),
        ]);
    }
    table.print();
}

fn to_json(
    plan: &Plan,
    fixture: &Fixture,
    v: &ValidationResult,
    storage: &[StorageResult],
    scratch: &Path,
    total: Duration,
) -> Value {
    let ratio = |slow: &str, fast: &str, goal: Value| {
        v.ratio(slow, fast).map(|(r, pairs)| {
            json!({"median_ratio": r, "per_repetition": pairs.spread_json("ratio"), "goal": goal})
        })
    };
    let component_native = ratio(
        "component",
        "native",
        json!({"max": GOAL_MAX_COMPONENT_VS_NATIVE,
               "met": v.ratio("component", "native").is_some_and(|r| r.0 <= GOAL_MAX_COMPONENT_VS_NATIVE)}),
    );
    let python_component = ratio(
        "python",
        "component",
        json!({"min": GOAL_MIN_PYTHON_VS_COMPONENT,
               "met": v.ratio("python", "component").is_some_and(|r| r.0 >= GOAL_MIN_PYTHON_VS_COMPONENT)}),
    );
    json!({
        "benchmark": "m3 peers: validation and the storage limit",
        "created_at": Utc::now().to_rfc3339(),
        "machine": {
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "os": std::env::consts::OS,
            "arch": std::env::consts::ARCH,
        },
        "plan": plan.to_json(),
        "total_seconds": secs(total),
        "validation": {
            "form": "every_kind (tests/support)",
            "requested_schema": fixture.schema,
            "enforced_schema": fixture.enforced,
            "answers": fixture.answers.iter()
                .map(|a| json!({"label": a.label, "valid": a.valid, "text": a.text}))
                .collect::<Vec<_>>(),
            "answer_bytes": {"min": v.answer_bytes.0, "max": v.answer_bytes.1},
            "python_formats_checked": v.formats_checked_by_python,
            "timing": "per validation = batch time / validations in the batch; one batch per contender, subset and repetition",
            "contenders": v.contenders.iter().map(|c| json!({
                "name": c.name,
                "runtime": c.runtime,
                "validator": c.validator,
                "seconds_per_validation": SUBSETS.iter().zip(&c.samples)
                    .map(|(s, x)| (s.name().to_string(), Stats::of_nonempty(x).spread_json("s")))
                    .collect::<serde_json::Map<_, _>>(),
            })).collect::<Vec<_>>(),
            "component_vs_native": component_native,
            "python_vs_component": python_component,
            "component_vs_ajv": ratio("component", "ajv", Value::Null),
        },
        "storage": {
            "scratch_directory": scratch.display().to_string(),
            "commits_per_lifecycle": COMMITS_PER_LIFECYCLE,
            "modes": storage.iter().map(|r| json!({
                "synchronous": sync_name(r.synchronous),
                "lifecycles_per_batch": r.lifecycles_per_batch,
                "raw_commits_per_batch": r.lifecycles_per_batch * COMMITS_PER_LIFECYCLE,
                "raw_commits_per_second": r.raw_commits_per_s.spread_json("1/s"),
                "limit_lifecycles_per_second": r.raw_commits_per_s.p50 / COMMITS_PER_LIFECYCLE as f64,
                "lifecycles_per_second": r.lifecycles_per_s.spread_json("1/s"),
                "fraction": r.fraction,
                "per_pair_fraction": r.pair_fractions.spread_json("ratio"),
                "goal": {"min": GOAL_MIN_STORAGE_FRACTION, "met": r.fraction >= GOAL_MIN_STORAGE_FRACTION},
            })).collect::<Vec<_>>(),
        },
    })
}

fn main() -> BenchResult<()> {
    let started = Instant::now();
    let plan = Plan::from_args();
    let target = target_dir();
    let bench_dir = target.join("bench");
    std::fs::create_dir_all(&bench_dir)?;
    // The databases live on the disk of the target directory (not a tmpfs /tmp).
    let scratch = tempfile::Builder::new()
        .prefix("peers-validation-")
        .tempdir_in(&bench_dir)?;
    if std::env::var_os("M3_CACHE_DIR").is_none() {
        // SAFETY: set before this process starts any thread.
        unsafe { std::env::set_var("M3_CACHE_DIR", bench_dir.join("component-cache")) };
    }
    println!(
        "m3 peers benchmark: validation and the storage limit ({}; {} CPUs)",
        if plan.full { "full run" } else { "smoke pass" },
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let fixture = Fixture::new();
    let fixture_path = scratch.path().join("validation-fixture.json");
    std::fs::write(
        &fixture_path,
        serde_json::to_string_pretty(&fixture.to_json())?,
    )?;
    let peers = peers_install(&plan, &target)?;

    eprintln!("validation: component, native Rust, Python jsonschema, AJV (interleaved) ...");
    let validation = validation_bench(&plan, &fixture, &fixture_path, peers.as_deref())?;
    eprintln!("storage: raw SQLite commits vs round lifecycles (FULL and NORMAL, interleaved) ...");
    let storage = storage_bench(&plan, &fixture, scratch.path())?;

    print_validation(&validation);
    print_storage(&storage);
    let total = started.elapsed();
    println!("\ntotal: {}", fmt_time(secs(total)));
    if plan.full && peers.is_some() {
        let document = to_json(
            &plan,
            &fixture,
            &validation,
            &storage,
            scratch.path(),
            total,
        );
        write_report("peers_validation", &document)?;
    } else {
        println!("smoke pass: no JSON written (run `cargo bench -p m3 --bench peers_validation`)");
    }
    Ok(())
}

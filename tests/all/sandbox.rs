//! The sandbox (architecture invariants 2 and 3) and the size limits at the host's edge.
//!
//! The component gets `wasi:random` and the m3 imports, and every other import traps; every
//! call is bounded in memory and CPU time; a trapped instance is discarded and the next call
//! works; payloads too large for the store are refused before they are copied into the guest.

use anyhow::{Context, Result, bail, ensure};
use m3::sandbox::DEFAULT_COMPUTE_BUDGET;
use m3::sandbox::ImportProvider;
use m3::sandbox::SandboxProbe as Probe;
use m3::{
    ElicitationRequest, EngineError, EngineErrorKind, ErrorCode, GuestLimits, ManagedInputError,
    ManagedInputStatus, ManagedInputStore, NewRound, OperationKind, PendingElicitationRound,
    Policy, RoundFilter, SqliteManagedInputStore, StoreOptions, Synchronous,
};
use m3_tests::{TempDb, address_round, address_schema, claim, create, open};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const MIB: usize = 1024 * 1024;

fn fast_options() -> StoreOptions {
    StoreOptions {
        synchronous: Synchronous::Normal,
        ..StoreOptions::default()
    }
}

/// A round whose worker lease outlives the test.
fn live_round(round_id: &str) -> NewRound {
    let mut round = address_round(round_id);
    round.owner = Some(claim("worker-1", Duration::from_secs(3600)));
    round
}

/// The policy's ordinary work still succeeds (a fresh instance after a trap).
fn check_policy_works(policy: &Policy) -> Result<()> {
    policy
        .check_requested_schema(&address_schema())
        .context("check_requested_schema after a trap")?;
    let random = policy
        .probe(Probe::Random, 0)
        .context("the random probe after a trap")?;
    ensure!(random == "random: true", "random probe saw {random:?}");
    Ok(())
}

/// What the test itself expects an import to be bound to, written independently of the host's
/// `provider_for`.
fn expected_provider(name: &str) -> ImportProvider {
    let package = name.split('/').next().unwrap_or_default();
    match package {
        "m3:managed-input" => ImportProvider::M3Host,
        "wasi:random" => ImportProvider::WasiRandom,
        "wasi:http" => ImportProvider::WasiHttp,
        "wasi:io" => ImportProvider::WasiIo,
        _ => ImportProvider::Trap,
    }
}

#[test]
fn linker_gives_the_guest_only_m3_imports_wasi_random_and_granted_wasi_http() -> Result<()> {
    let policy = Policy::new()?;
    let imports = policy.imports();
    println!("imports of the component ({}):", imports.len());
    for binding in &imports {
        println!("  {} -> {:?}", binding.name, binding.provider);
    }
    let names: BTreeSet<&str> = imports.iter().map(|b| b.name.as_str()).collect();
    ensure!(names.len() == imports.len(), "an import is listed twice");
    for binding in &imports {
        ensure!(
            binding.provider == expected_provider(&binding.name),
            "{} is bound to {:?}, expected {:?}",
            binding.name,
            binding.provider,
            expected_provider(&binding.name)
        );
    }
    let interface = |name: &str| name.split('@').next().unwrap_or(name).to_string();
    let m3: BTreeSet<String> = imports
        .iter()
        .filter(|b| b.provider == ImportProvider::M3Host)
        .map(|b| interface(&b.name))
        .collect();
    for needed in ["m3:managed-input/clock", "m3:managed-input/store"] {
        ensure!(
            m3.contains(needed),
            "the component does not import {needed}"
        );
    }
    let allowed_m3: BTreeSet<String> = [
        "m3:managed-input/types",
        "m3:managed-input/clock",
        "m3:managed-input/store",
        "m3:managed-input/process",
        "m3:managed-input/events",
    ]
    .map(String::from)
    .into();
    ensure!(
        m3.is_subset(&allowed_m3),
        "the component imports m3 interfaces it should only export: {:?}",
        m3.difference(&allowed_m3).collect::<Vec<_>>()
    );
    ensure!(
        imports
            .iter()
            .any(|b| b.name.starts_with("wasi:random/") && b.provider == ImportProvider::WasiRandom),
        "the component should import wasi:random (jsonschema's hashing needs it)"
    );
    for family in ["wasi:cli/", "wasi:clocks/", "wasi:filesystem/"] {
        ensure!(
            imports
                .iter()
                .any(|b| b.name.starts_with(family) && b.provider == ImportProvider::Trap),
            "expected the component to import some {family}* (bound to a trap)"
        );
    }
    // `wasi:http` (for servers reached over HTTP, limited by each execution's grant) with its
    // `wasi:io`; anything else ambient is a trap.
    for interface in ["wasi:http/outgoing-handler", "wasi:io/poll"] {
        ensure!(
            imports.iter().any(|b| b.name.starts_with(interface)),
            "the component should import {interface}"
        );
    }
    for binding in &imports {
        let granted = ["wasi:random/", "wasi:http/", "wasi:io/"]
            .iter()
            .any(|p| binding.name.starts_with(p));
        if binding.name.starts_with("wasi:") && !granted {
            ensure!(binding.provider == ImportProvider::Trap, "{}", binding.name);
        }
    }
    Ok(())
}

#[test]
fn every_other_wasi_import_traps() -> Result<()> {
    let policy = Policy::new()?;
    let random = policy.probe(Probe::Random, 0)?;
    ensure!(random == "random: true", "random probe saw {random:?}");
    for (probe, interface) in [
        (Probe::Environment, "wasi:cli/environment"),
        (Probe::WallClock, "wasi:clocks/wall-clock"),
        (Probe::Stdout, "wasi:cli/stdout"),
        (Probe::Filesystem, "wasi:filesystem/"),
        // No network outside an execution granted its server's origin.
        (Probe::Network, "wasi:http/"),
    ] {
        match policy.probe(probe, 0) {
            Ok(seen) => bail!("probe {probe:?} returned normally: {seen}"),
            Err(EngineError { kind, message }) => {
                println!("{probe:?}: {kind:?}: {message}");
                ensure!(
                    kind == EngineErrorKind::ForbiddenImport,
                    "probe {probe:?} should hit a forbidden import, got {kind:?}: {message}"
                );
                ensure!(
                    message.contains(interface),
                    "probe {probe:?}: the error should name the {interface} import: {message}"
                );
            }
        }
        check_policy_works(&policy)?;
    }
    Ok(())
}

#[test]
fn a_guest_that_loops_forever_traps_within_its_compute_budget() -> Result<()> {
    let policy = Policy::with_limits(GuestLimits {
        compute_budget: 50_000_000,
        ..GuestLimits::default()
    })?;
    check_policy_works(&policy)?;
    let started = Instant::now();
    let result = policy.probe(Probe::Spin, 1);
    let elapsed = started.elapsed();
    let error = match result {
        Ok(seen) => bail!("an endless loop returned: {seen}"),
        Err(e) => e,
    };
    println!("spin trapped after {elapsed:?}: {error}");
    // The budget is fuel, not time: the trap itself is the proof (how long it took depends on
    // the machine and its load, and is only printed).
    ensure!(
        error.kind == EngineErrorKind::ComputeBudgetExceeded,
        "expected ComputeBudgetExceeded, got {error}"
    );
    // The default budget holds a runaway loop too, within seconds.
    let started = Instant::now();
    let default = Policy::new()?.probe(Probe::Spin, 3).map_err(|e| e.kind);
    ensure!(
        default == Err(EngineErrorKind::ComputeBudgetExceeded),
        "{default:?}"
    );
    println!("default budget: spin trapped after {:?}", started.elapsed());
    check_policy_works(&policy)?;
    // And again: the fresh instance is bounded too.
    let again = policy.probe(Probe::Spin, 2).map_err(|e| e.kind);
    ensure!(
        again == Err(EngineErrorKind::ComputeBudgetExceeded),
        "{again:?}"
    );
    check_policy_works(&policy)
}

/// The budget counts guest computation between host calls: a store operation that waits in the
/// host (here for SQLite's write lock) for long still completes under a small budget.
#[test]
fn time_spent_in_host_imports_does_not_count_against_the_compute_budget() -> Result<()> {
    let db = TempDb::new();
    let store = open(
        &db.path,
        StoreOptions {
            guest_limits: GuestLimits {
                compute_budget: 50_000_000,
                ..GuestLimits::default()
            },
            ..fast_options()
        },
    );
    create(&store, &live_round("slow"));
    let raw = rusqlite::Connection::open(&db.path)?;
    raw.execute_batch("BEGIN IMMEDIATE")?;
    let held = Duration::from_millis(500);
    let release = std::thread::spawn(move || -> rusqlite::Result<()> {
        std::thread::sleep(held);
        raw.execute_batch("COMMIT")
    });
    let started = Instant::now();
    let record = store.submit_responses_json(
        "slow",
        r#"{"shipping_address":{"action":"accept","content":{"street":"1 Main Street","city":"Pune"}}}"#,
        "k",
    )?;
    let waited = started.elapsed();
    release.join().expect("release thread")?;
    ensure!(record.status == ManagedInputStatus::ResponseValidated);
    ensure!(
        waited >= held - Duration::from_millis(50),
        "the submit did not wait for the lock ({waited:?}), so this test proves nothing"
    );
    Ok(())
}

#[test]
fn guest_memory_is_bounded() -> Result<()> {
    let limit = 16 * MIB;
    let policy = Policy::with_limits(GuestLimits {
        max_memory: limit,
        ..GuestLimits::default()
    })?;
    let error = match policy.probe(Probe::Allocate, 64 * MIB as u64) {
        Ok(seen) => bail!("allocating 64 MiB under a 16 MiB limit returned: {seen}"),
        Err(e) => e,
    };
    println!("64 MiB allocation: {error}");
    ensure!(
        error.kind == EngineErrorKind::MemoryLimitExceeded,
        "expected MemoryLimitExceeded, got {error}"
    );
    check_policy_works(&policy)?;
    let small = policy.probe(Probe::Allocate, MIB as u64)?;
    ensure!(small == format!("allocated {MIB} bytes"), "{small}");
    // Just over the limit also fails: the limit is the limit, not a round number near it.
    let over = policy
        .probe(Probe::Allocate, limit as u64)
        .map_err(|e| e.kind);
    ensure!(
        over == Err(EngineErrorKind::MemoryLimitExceeded),
        "{over:?}"
    );
    check_policy_works(&policy)
}

/// A valid answer to the address form whose `city` makes it `bytes` long (the address schema
/// bounds `street` only), as JSON text.
fn padded_answer(bytes: usize) -> String {
    let head =
        r#"{"shipping_address":{"action":"accept","content":{"street":"1 Main Street","city":""#;
    let tail = r#""}}}"#;
    let pad = bytes.saturating_sub(head.len() + tail.len()).max(1);
    let mut text = String::with_capacity(bytes);
    text.push_str(head);
    text.extend(std::iter::repeat_n('x', pad));
    text.push_str(tail);
    text
}

/// Asserts `result` is the host's `PayloadTooLarge` and the round is untouched.
fn assert_refused_at_the_edge(
    store: &SqliteManagedInputStore,
    round_id: &str,
    result: Result<m3::ManagedInputRecord, ManagedInputError>,
    limit: usize,
) -> Result<()> {
    match result {
        Err(ManagedInputError::Validation(e)) => {
            ensure!(e.code() == ErrorCode::PayloadTooLarge, "{e}");
            ensure!(
                e.detail.message.contains(&format!("the limit is {limit}")),
                "the refusal should state the store's limit {limit}: {}",
                e.detail.message
            );
            ensure!(
                !e.detail.message.contains("xxxx"),
                "the error carries content"
            );
        }
        Err(other) => bail!("expected a validation error, got {other}"),
        Ok(_) => bail!("an oversized answer was stored"),
    }
    let record = store.get_round(round_id)?.context("round missing")?;
    ensure!(record.status == ManagedInputStatus::Pending);
    ensure!(record.responses.is_none() && record.idempotency_key.is_none());
    Ok(())
}

const SMALL_ANSWER: &str = r#"{"shipping_address":{"action":"accept","content":{"street":"1 Main Street","city":"Pune"}}}"#;

#[test]
fn an_oversized_answer_is_refused_before_it_reaches_the_guest() -> Result<()> {
    let db = TempDb::new();

    // 1. A store limit of 64 KiB and a 200 KiB answer that the component's own rules accept
    //    (shown on a second store with the default 1 MiB limit): the refusal can only come from
    //    the host's edge.
    let limit = 64 * 1024;
    let strict = open(
        &db.path,
        StoreOptions {
            max_responses_bytes: limit,
            ..fast_options()
        },
    );
    create(&strict, &live_round("strict"));
    let big = padded_answer(200 * 1024);
    let refused = strict.submit_responses_json("strict", &big, "key-1");
    assert_refused_at_the_edge(&strict, "strict", refused, limit)?;
    // A 1 MiB answer too.
    let refused = strict.submit_responses_json("strict", &padded_answer(MIB), "key-1");
    assert_refused_at_the_edge(&strict, "strict", refused, limit)?;
    // The key was not consumed: a valid answer with the same key succeeds.
    let record = strict.submit_responses_json("strict", SMALL_ANSWER, "key-1")?;
    ensure!(record.status == ManagedInputStatus::ResponseValidated);
    let lenient = open(&db.path, fast_options());
    create(&lenient, &live_round("lenient"));
    let accepted = lenient.submit_responses_json("lenient", &big, "key-1")?;
    ensure!(
        accepted.status == ManagedInputStatus::ResponseValidated,
        "the component accepts the 200 KiB answer, so the refusal above was the host's"
    );

    // 2. A 100 MiB answer with the default 1 MiB limit. Copied into a guest bounded at 64 MiB it
    //    would trap (an EngineError); a validation error means it never got there.
    let default_store = open(&db.path, fast_options());
    create(&default_store, &live_round("huge"));
    let refused = default_store.submit_responses_json("huge", &padded_answer(100 * MIB), "key-2");
    assert_refused_at_the_edge(&default_store, "huge", refused, MIB)?;
    default_store.submit_responses_json("huge", SMALL_ANSWER, "key-2")?;

    // 3. A guest whose memory cannot even hold the payload: 8 MiB of memory, a 16 MiB answer.
    let tiny_memory = GuestLimits {
        max_memory: 8 * MIB,
        ..GuestLimits::default()
    };
    let probe = Policy::with_limits(tiny_memory)?
        .probe(Probe::Allocate, 16 * MIB as u64)
        .map_err(|e| e.kind);
    ensure!(
        probe == Err(EngineErrorKind::MemoryLimitExceeded),
        "a guest with 8 MiB cannot hold 16 MiB ({probe:?})"
    );
    let small_guest = open(
        &db.path,
        StoreOptions {
            guest_limits: tiny_memory,
            ..fast_options()
        },
    );
    create(&small_guest, &live_round("tiny"));
    let refused = small_guest.submit_responses_json("tiny", &padded_answer(16 * MIB), "key-3");
    assert_refused_at_the_edge(&small_guest, "tiny", refused, MIB)?;
    let record = small_guest.submit_responses_json("tiny", SMALL_ANSWER, "key-3")?;
    ensure!(record.status == ManagedInputStatus::ResponseValidated);
    Ok(())
}

/// A round whose only request is a form with `schema`.
fn schema_round(round_id: &str, schema: Value) -> NewRound {
    NewRound::new(
        round_id,
        "exec-hostile",
        "hostile-server",
        "tool",
        BTreeMap::from([("q".to_string(), ElicitationRequest::form("hostile", schema))]),
    )
}

#[test]
fn hostile_schemas_are_refused_at_create_round() -> Result<()> {
    let db = TempDb::new();
    let store = open(&db.path, fast_options());
    let string = json!({"type": "string"});
    let many_properties: Map<String, Value> = (0..10_000)
        .map(|i| (format!("p{i:05}"), string.clone()))
        .collect();
    let huge_properties: Map<String, Value> = (0..150_000)
        .map(|i| (format!("property-{i:07}"), string.clone()))
        .collect();
    let enum_2000: Vec<String> = (0..2000).map(|i| format!("choice-{i}")).collect();
    let description = "d".repeat(100 * 1024);
    // Each case with the code and the words of the one refusal it must get: the component's,
    // or (only for the round over the host's size limit) the host's edge.
    let component = |code: ErrorCode, words: &'static str| (code, words, false);
    let edge = |code: ErrorCode, words: &'static str| (code, words, true);
    let cases: Vec<(&str, Value, (ErrorCode, &str, bool))> = vec![
        (
            "$ref",
            json!({"type": "object", "properties": {
                "a": {"$ref": "#/properties/b"}, "b": {"type": "string"}}}),
            component(
                ErrorCode::UnsupportedSchema,
                "must declare a primitive `type`",
            ),
        ),
        (
            "$ref with $defs",
            json!({"type": "object", "$defs": {"x": {"type": "string"}},
                   "properties": {"a": {"type": "string", "$ref": "#/$defs/x"}}}),
            component(
                ErrorCode::UnsupportedSchema,
                "keyword `$defs` is not in the MCP form subset",
            ),
        ),
        (
            "nested object",
            json!({"type": "object", "properties": {"address": {"type": "object",
                   "properties": {"street": {"type": "string"}}}}}),
            component(ErrorCode::UnsupportedSchema, "has type `object`"),
        ),
        (
            "pattern",
            json!({"type": "object", "properties": {"code": {"type": "string",
                   "pattern": "^(a+)+$"}}}),
            component(
                ErrorCode::UnsupportedSchema,
                "keyword `pattern` is not in the MCP form subset",
            ),
        ),
        (
            "2,000-entry enum",
            json!({"type": "object", "properties": {"pick": {"type": "string",
                   "enum": enum_2000}}}),
            component(ErrorCode::UnsupportedSchema, "`enum` is not valid"),
        ),
        (
            "100 KiB description",
            json!({"type": "object", "description": description,
                   "properties": {"a": {"type": "string"}}}),
            component(
                ErrorCode::UnsupportedSchema,
                "annotation `description` is 102400 bytes",
            ),
        ),
        (
            "100 KiB property description",
            json!({"type": "object", "properties": {"a": {"type": "string",
                   "description": description}}}),
            component(
                ErrorCode::UnsupportedSchema,
                "annotation `description` is 102400 bytes",
            ),
        ),
        (
            "10,000 properties",
            json!({"type": "object", "properties": many_properties}),
            component(ErrorCode::PayloadTooLarge, "requestedSchema is"),
        ),
        (
            "150,000 properties (over the host's round size limit)",
            json!({"type": "object", "properties": huge_properties}),
            edge(ErrorCode::PayloadTooLarge, "the round is"),
        ),
    ];
    let policy = Policy::new()?;
    let mut most_fuel = 0;
    for (i, (what, schema, (code, words, at_the_edge))) in cases.into_iter().enumerate() {
        let round_id = format!("hostile-{i}");
        let started = Instant::now();
        let result = store.create_round(&schema_round(&round_id, schema.clone()));
        let elapsed = started.elapsed();
        match result {
            Err(ManagedInputError::Validation(e)) => {
                println!("{what}: {} in {elapsed:?}: {}", e.code(), e.detail.message);
                ensure!(
                    e.code() == code && e.detail.message.contains(words),
                    "{what}: expected {code} ({words:?}), got {}: {}",
                    e.code(),
                    e.detail.message
                );
            }
            Err(other) => bail!("{what}: expected a validation error, got {other}"),
            Ok(_) => bail!("{what}: a hostile schema was accepted"),
        }
        if !at_the_edge {
            // The component's refusal costs a bounded amount of computation, counted in fuel:
            // the same on every machine, however loaded.
            let refused = policy.check_requested_schema(&schema);
            ensure!(
                refused.as_ref().err().and_then(ManagedInputError::code) == Some(code),
                "{what}: the policy said {refused:?}"
            );
            let fuel = policy.last_fuel_used();
            println!("{what}: {fuel} fuel");
            ensure!(fuel > 0, "{what}: the component never ran");
            most_fuel = most_fuel.max(fuel);
        }
        ensure!(
            store.get_round(&round_id)?.is_none(),
            "{what}: something was stored"
        );
    }
    // Every refusal stays under a fiftieth of the default budget (the largest is printed).
    println!(
        "hostile schemas: at most {most_fuel} fuel, {:.2}% of the default budget",
        most_fuel as f64 * 100.0 / DEFAULT_COMPUTE_BUDGET as f64
    );
    ensure!(most_fuel < DEFAULT_COMPUTE_BUDGET / 50, "{most_fuel} fuel");
    ensure!(
        store.list_rounds(&RoundFilter::default())?.is_empty(),
        "a refused round was stored"
    );
    // The ids were not consumed and the store still works.
    let record = store.create_round(&schema_round("hostile-0", address_schema()))?;
    ensure!(record.status == ManagedInputStatus::Pending);
    Ok(())
}

/// Regression: the budget was measured in time (first wall-clock, then the thread's CPU time),
/// so the same valid input trapped on a slower or busier machine (a ~1 MiB answer took 107-144
/// ms against a 100 ms budget on one machine, 40-55 ms on another). It is counted in fuel now:
/// the same call costs the same fuel on every machine and under any load, and the largest input
/// the edge limits allow stays well inside the default budget.
#[test]
fn regression_the_compute_budget_is_the_same_on_every_machine() -> Result<()> {
    // The exact fuel a validation costs, twice, and once while other threads hog the CPU.
    let measure = || -> Result<u64> {
        // A fresh policy each time: the same work (compiling the schema's validator included).
        let policy = Policy::new()?;
        policy.check_requested_schema(&m3_tests::every_kind_schema())?;
        Ok(policy.last_fuel_used())
    };
    let quiet = measure()?;
    let hogs: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                let wall = Instant::now();
                let mut y = 0u64;
                while wall.elapsed() < Duration::from_millis(800) {
                    y = std::hint::black_box(y.wrapping_add(1));
                }
            })
        })
        .collect();
    let busy = measure()?;
    for hog in hogs {
        hog.join().expect("hog");
    }
    ensure!(
        quiet > 0 && quiet == busy,
        "fuel {quiet} quiet, {busy} busy"
    );
    // A budget well below a call's cost traps it, one above lets it through, on any machine.
    for (budget, traps) in [(quiet / 2, true), (quiet * 2, false)] {
        let policy = Policy::with_limits(GuestLimits {
            compute_budget: budget,
            ..GuestLimits::default()
        })?;
        let result = policy.check_requested_schema(&m3_tests::every_kind_schema());
        ensure!(
            result.is_err() == traps,
            "budget {budget} (cost {quiet}): {result:?}"
        );
    }
    Ok(())
}

/// The largest answers the edge limits let through (1 MiB: ~96,000 fields, valid or invalid at
/// their very end) cost a bounded, machine-independent amount of fuel, under an eighth of the
/// default compute budget (656 million of 6,000 million: the budget is more than nine times
/// their cost; not ten), so they get their typed answer on any machine. Fuel counts the guest's
/// WebAssembly operations, not time: the figure is the same however loaded the machine is.
#[test]
fn the_largest_answers_stay_well_inside_the_default_compute_budget() -> Result<()> {
    let policy = Policy::new()?;
    let round = PendingElicitationRound {
        round_id: "big".into(),
        execution_id: "exec-1".into(),
        logical_operation_id: "op-1".into(),
        server: "shipping".into(),
        operation_kind: OperationKind::Tool,
        operation_name: "book_shipment".into(),
        requests: m3_tests::address_requests(),
        created_at: chrono::Utc::now(),
        request_state: None,
        deadline: None,
    };
    let limit = 1024 * 1024 - 100;
    let mut fields = String::new();
    let mut n = 0;
    while fields.len() < limit - 200 {
        fields.push_str(&format!("\"k{n}\":0,"));
        n += 1;
    }
    let cases = [
        // Invalid at its very end: parsed in full before the error.
        format!("{{\"shipping_address\":{{\"action\":\"decline\",\"content\":{{{fields}"),
        // Valid JSON, refused for its unknown fields after a full parse and a schema check.
        format!(
            "{{\"shipping_address\":{{\"action\":\"accept\",\"content\":{{{fields}\"street\":\"s\",\"city\":\"c\"}}}}}}"
        ),
    ];
    let mut most = 0;
    for text in &cases {
        ensure!(text.len() <= 1024 * 1024, "{} bytes", text.len());
        let result = policy.validate_responses_json(&round, text);
        ensure!(
            matches!(result, Err(ManagedInputError::Validation(_))),
            "{:?}",
            result.map(|_| ())
        );
        most = most.max(policy.last_fuel_used());
    }
    println!(
        "largest answers ({n} fields): {most} fuel, {:.1}% of the default budget",
        most as f64 * 100.0 / DEFAULT_COMPUTE_BUDGET as f64
    );
    ensure!(
        most > 0 && most < DEFAULT_COMPUTE_BUDGET / 8,
        "the largest answers cost {most} fuel, not under an eighth of the default budget ({})",
        DEFAULT_COMPUTE_BUDGET / 8
    );
    Ok(())
}

/// Regression (found by the contention test at 16 x 1,000 writes): listing thousands of rounds in
/// one component call outgrew the CPU budget and trapped. Listings are paged through the
/// component (and recovery pages inside it), so each call stays bounded however large the store.
#[test]
fn regression_listing_thousands_of_rounds_stays_within_the_guest_budget() -> Result<()> {
    let db = TempDb::new();
    let store = SqliteManagedInputStore::open(&db.path, fast_options())?;
    const ROUNDS: usize = 3_000;
    for i in 0..ROUNDS {
        let mut round = live_round(&format!("r{i:05}"));
        round.execution_id = format!("exec-{}", i % 7);
        store.create_round(&round)?;
    }
    let all = store.list_rounds(&RoundFilter::default())?;
    ensure!(all.len() == ROUNDS, "listed {}", all.len());
    let ids: Vec<&str> = all.iter().map(|r| r.pending.round_id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    ensure!(sorted.len() == ROUNDS, "a page repeated or skipped rounds");
    let limited = store.list_rounds(&RoundFilter {
        limit: Some(450),
        ..RoundFilter::default()
    })?;
    ensure!(
        limited.len() == 450,
        "a limit across pages: {}",
        limited.len()
    );
    ensure!(
        limited
            .iter()
            .map(|r| &r.pending.round_id)
            .eq(all[..450].iter().map(|r| &r.pending.round_id)),
        "the limited listing is the start of the full one"
    );
    let one_execution = store.list_rounds(&RoundFilter {
        execution_id: Some("exec-3".into()),
        ..RoundFilter::default()
    })?;
    ensure!(one_execution.len() == (0..ROUNDS).filter(|i| i % 7 == 3).count());
    // Recovery walks every non-terminal round too (none has expired: it fails nothing).
    let executions = m3::ExecutionStore::executions(&m3::SqliteExecutionStore::open(&db.path)?)?;
    let report = executions.recover()?;
    ensure!(report.rounds_failed == 0);
    Ok(())
}

/// Regression (found by `malformed_input`): a multi-select answer with ~136,000 invalid items
/// (272 KiB, well under the edge limit) made the component collect one error per item and trap
/// at its memory limit. Only the first error is computed now: a typed `schema_violation` on the
/// field, the round unchanged.
#[test]
fn regression_a_huge_invalid_multi_select_answer_is_a_typed_error_not_a_trap() -> Result<()> {
    let db = TempDb::new();
    let store = SqliteManagedInputStore::open(&db.path, fast_options())?;
    let mut round = live_round("r1");
    round.requests = BTreeMap::from([(
        "profile".to_string(),
        ElicitationRequest::form("Who are you?", m3_tests::every_kind_schema()),
    )]);
    store.create_round(&round)?;
    for item in ["1", "[]", "{}", "null", "\"\""] {
        let items = vec![item; 140_000].join(",");
        let text = format!(
            r#"{{"profile":{{"action":"accept","content":{{"name":"Asha","age":30,"tags":[{items}]}}}}}}"#
        );
        match store.submit_responses_json("r1", &text, "k") {
            Err(ManagedInputError::Validation(e)) => {
                ensure!(e.code() == ErrorCode::SchemaViolation, "{item}: {e}");
                ensure!(e.detail.field.as_deref() == Some("tags"), "{item}: {e}");
            }
            other => bail!("{item} x 140,000: expected a schema violation, got {other:?}"),
        }
    }
    let record = store.get_round("r1")?.context("the round")?;
    ensure!(record.status == ManagedInputStatus::Pending && record.responses.is_none());
    Ok(())
}

/// The default limits are the documented ones (64 MiB of memory, a compute budget of 6e9 fuel)
/// and they hold: a default instance can allocate 32 MiB but not 64.
#[test]
fn the_default_limits_are_64_mib_and_6e9_fuel_and_hold() -> Result<()> {
    let limits = GuestLimits::default();
    ensure!(limits.max_memory == 64 * MIB, "{limits:?}");
    ensure!(limits.compute_budget == 6_000_000_000, "{limits:?}");
    ensure!(DEFAULT_COMPUTE_BUDGET == limits.compute_budget);
    ensure!(StoreOptions::default().guest_limits == limits);
    let policy = Policy::new()?;
    let half = policy.probe(Probe::Allocate, 32 * MIB as u64)?;
    ensure!(half == format!("allocated {} bytes", 32 * MIB), "{half}");
    let all = policy
        .probe(Probe::Allocate, 64 * MIB as u64)
        .map_err(|e| e.kind);
    ensure!(all == Err(EngineErrorKind::MemoryLimitExceeded), "{all:?}");
    check_policy_works(&policy)
}

/// An answer of about 1 MiB with `fields` unknown fields: valid JSON the component must parse
/// in full (costly in memory and fuel) before refusing it.
fn many_field_answer(fields: usize) -> String {
    let body: Vec<String> = (0..fields).map(|n| format!("\"k{n}\":0")).collect();
    format!(
        "{{\"shipping_address\":{{\"action\":\"accept\",\"content\":{{{},\"street\":\"s\",\"city\":\"c\"}}}}}}",
        body.join(",")
    )
}

/// The store's own instances are bounded like the policy's: an answer that needs more fuel or
/// memory than the store's limits is a typed `EngineError` that changes nothing, the trapped
/// instance is discarded, and the next call on the same store object works.
#[test]
fn a_store_instance_past_its_limits_traps_typed_and_changes_nothing() -> Result<()> {
    let cases = [
        (
            "compute",
            GuestLimits {
                compute_budget: 50_000_000,
                ..GuestLimits::default()
            },
            EngineErrorKind::ComputeBudgetExceeded,
        ),
        (
            "memory",
            GuestLimits {
                max_memory: 8 * MIB,
                ..GuestLimits::default()
            },
            EngineErrorKind::MemoryLimitExceeded,
        ),
    ];
    let heavy = many_field_answer(90_000);
    ensure!(heavy.len() < MIB, "{} bytes", heavy.len());
    for (what, limits, kind) in cases {
        let db = TempDb::new();
        let store = open(
            &db.path,
            StoreOptions {
                guest_limits: limits,
                ..fast_options()
            },
        );
        create(&store, &live_round("r1"));
        let before = store.get_round("r1")?.context("the round")?;
        match store.submit_responses_json("r1", &heavy, "k") {
            Err(ManagedInputError::Engine(EngineError { kind: seen, .. })) if seen == kind => {}
            other => bail!(
                "{what}: expected EngineError {kind:?}, got {:?}",
                other.map(|_| ())
            ),
        }
        ensure!(
            store.get_round("r1")?.as_ref() == Some(&before),
            "{what}: the trapped call changed the round"
        );
        let answered = store.submit_responses_json("r1", SMALL_ANSWER, "k")?;
        ensure!(
            answered.status == ManagedInputStatus::ResponseValidated,
            "{what}: the store does not work after the trap"
        );
        ensure!(m3_tests::integrity_check(&db.path) == "ok");
    }
    Ok(())
}

/// A `run-execution` instance is bounded too, and one that traps (a server's 7 MiB message
/// while a round is open, past the store's compute budget or memory) fails its execution and
/// its open round at once (`recovery_unavailable`: the request died with the instance), so the
/// round is never left answerable without a worker; the server is reaped.
#[test]
fn a_worker_instance_past_its_limits_fails_its_execution_and_round_at_once() -> Result<()> {
    use m3::{
        AgentSpec, ElicitationResponse, ExecutionStatus, FailureCode, FailureKind, HumanInput,
        McpTestKit, OutcomeKind, Script, SqliteExecutionStore, StdioServer, Submission,
    };
    let cases = [
        (
            "compute",
            GuestLimits {
                compute_budget: 50_000_000,
                ..GuestLimits::default()
            },
            "guest compute budget exceeded",
        ),
        (
            "memory",
            GuestLimits {
                max_memory: 12 * MIB,
                ..GuestLimits::default()
            },
            "guest memory limit exceeded",
        ),
    ];
    for (what, limits, words) in cases {
        let db = TempDb::new();
        let store = std::sync::Arc::new(SqliteExecutionStore::open_with(
            &db.path,
            StoreOptions {
                guest_limits: limits,
                ..fast_options()
            },
        )?);
        let kit = McpTestKit::new(store.clone(), BTreeMap::<String, String>::new())?;
        let agent = kit
            .agents([AgentSpec::scripted(Script::call(
                "shipping:book_shipment",
                json!({"item": "book", "quantity": 1}),
            ))])?
            .remove(0);
        let server = StdioServer::new("shipping", env!("CARGO_BIN_EXE_m3-test-shipping-server"))
            .args(["--era", "legacy", "--note-after-ask", "7000000"]);
        let handle = agent.submit(
            Submission::new("Book a shipment.", server)
                .tools(["shipping:book_shipment"])
                .human_input(HumanInput::Managed),
        )?;
        let result = handle.result(Some(Duration::from_secs(120)))?;
        ensure!(
            result.outcome.kind == OutcomeKind::Failed,
            "{what}: {}",
            result.outcome
        );
        let failure = result.outcome.failure.clone().context("a failure")?;
        ensure!(
            failure.kind == FailureKind::RoundFailed
                && failure.code == Some(FailureCode::RecoveryUnavailable)
                && failure.message.contains(words),
            "{what}: {failure:?}"
        );
        let rounds = db.store().list_rounds(&RoundFilter::default())?;
        ensure!(rounds.len() == 1, "{what}: {} rounds", rounds.len());
        let round = &rounds[0];
        ensure!(
            round.status == ManagedInputStatus::Failed
                && round.failure.as_ref().map(|f| f.code) == Some(FailureCode::RecoveryUnavailable),
            "{what}: the round is {} {:?}",
            round.status,
            round.failure
        );
        ensure!(handle.pending_elicitation()?.is_none());
        ensure!(handle.snapshot()?.lifecycle == ExecutionStatus::Finished);
        let late = handle.respond_elicitation(
            &round.pending.round_id,
            BTreeMap::from([(
                "shipping_address".to_string(),
                ElicitationResponse::accept(json!({"street": "1 Main Street", "city": "Pune"})),
            )]),
            "late",
        );
        m3_tests::assert_execution_refused(
            late,
            "ManagedInputRecoveryError",
            ErrorCode::RecoveryUnavailable,
        );
    }
    Ok(())
}

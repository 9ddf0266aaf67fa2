//! The idempotent submit race of `concurrency`: every racer answers [`RACE_ROUND`] with answer
//! `a` or `b` and the key [`RACE_KEY`], and reports its [`Outcome`]. A racing process
//! (`m3-test-helper race <db> <a|b> <threads> <barrier-dir> <child>`, [`run_process`]) runs
//! several racers that wait at a file barrier and prints one [`OUTCOME_LINE`] per racer.

use anyhow::{Context, Result, anyhow, bail, ensure};
use m3::{
    DatabaseStore, ElicitationResponse, ManagedInputError, ManagedInputRecord, ManagedInputStore,
    StoreOptions,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

/// The idempotency key every racer presents.
pub const RACE_KEY: &str = "race-key";
/// The round every racer answers.
pub const RACE_ROUND: &str = "race-round";
/// Starts each line a racing process prints: one racer's outcome as JSON follows.
pub const OUTCOME_LINE: &str = "M3-RACE-OUTCOME ";

/// Response `a` or `b`: two different valid answers to the address form.
pub fn answer(which: char) -> BTreeMap<String, ElicitationResponse> {
    let city = match which {
        'a' => "Pune",
        'b' => "Lyon",
        other => panic!("no answer {other:?}"),
    };
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": city})),
    )])
}

/// One racer's outcome, as the parent of a process race sees it.
#[derive(Debug)]
pub enum Outcome {
    /// `Ok`, with the record serialised.
    Ok(Value),
    /// `ManagedInputConflict` with this code.
    Conflict(String),
    /// Anything else: kind, code, message.
    Other(String),
}

impl Outcome {
    /// The outcome of one submission.
    pub fn from_result(result: &Result<ManagedInputRecord, ManagedInputError>) -> Self {
        match result {
            Ok(record) => Outcome::Ok(serde_json::to_value(record).expect("record serialises")),
            Err(ManagedInputError::Conflict(c)) => Outcome::Conflict(c.code().to_string()),
            Err(e) => Outcome::Other(format!("{} ({:?}): {e}", e.kind_name(), e.code())),
        }
    }

    /// The outcome as a racing process prints it.
    pub fn to_json(&self) -> Value {
        match self {
            Outcome::Ok(record) => json!({"outcome": "ok", "record": record}),
            Outcome::Conflict(code) => json!({"outcome": "conflict", "code": code}),
            Outcome::Other(message) => json!({"outcome": "other", "message": message}),
        }
    }

    /// The outcome a racing process printed.
    pub fn from_json(value: &Value) -> Result<Self> {
        let field = |name: &str| {
            value
                .get(name)
                .cloned()
                .ok_or_else(|| anyhow!("outcome line without `{name}`: {value}"))
        };
        Ok(match field("outcome")?.as_str() {
            Some("ok") => Outcome::Ok(field("record")?),
            Some("conflict") => Outcome::Conflict(
                field("code")?
                    .as_str()
                    .context("conflict code is a string")?
                    .to_string(),
            ),
            Some("other") => Outcome::Other(field("message")?.to_string()),
            _ => bail!("unknown outcome line: {value}"),
        })
    }
}

/// Racing process number `child` on the database `db` names: `threads` racers sending answer
/// `which`, each with its own store object warmed on the round. Once all are ready it writes
/// `ready-<child>` into `barrier_dir`; the racers submit when the parent writes `go` there; then
/// it prints each racer's outcome.
pub fn run_process(
    db: &str,
    which: char,
    threads: usize,
    barrier_dir: &Path,
    child: &str,
) -> Result<()> {
    let ready = Arc::new(Barrier::new(threads + 1));
    let go = barrier_dir.join("go");
    let racers: Vec<_> = (0..threads)
        .map(|_| {
            let (name, ready, go) = (db.to_string(), ready.clone(), go.clone());
            thread::spawn(move || -> Result<Outcome> {
                // Whatever happens, the racer reaches the barrier: one that failed to open its
                // store says why (below) instead of leaving the others waiting for ever.
                let prepared = (|| -> Result<DatabaseStore> {
                    let store = DatabaseStore::open(&name, StoreOptions::default())?;
                    store.get_round(RACE_ROUND)?.context("round missing")?;
                    Ok(store)
                })();
                ready.wait();
                let store = prepared?;
                let deadline = Instant::now() + Duration::from_secs(120);
                while !go.exists() {
                    ensure!(Instant::now() < deadline, "the parent never said go");
                    thread::sleep(Duration::from_micros(100));
                }
                let result = store.submit_responses(RACE_ROUND, &answer(which), RACE_KEY);
                Ok(Outcome::from_result(&result))
            })
        })
        .collect();
    ready.wait();
    std::fs::write(barrier_dir.join(format!("ready-{child}")), b"")?;
    for racer in racers {
        let outcome = racer.join().map_err(|_| anyhow!("racer panicked"))??;
        println!("{OUTCOME_LINE}{}", outcome.to_json());
    }
    Ok(())
}

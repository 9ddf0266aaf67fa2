//! Random kills under load (reliability catalogue item 3, second half: "kill -9 the worker
//! process ... at random times under load").
//!
//! Several worker processes (`m3-test-helper kill-worker`, the body is
//! `m3_tests::kill_worker`) loop over many rounds on one database file: `create_round` (owned by the worker, short lease),
//! `submit_responses` with an idempotency key, `renew`, `start_delivery`, `mark_delivered`,
//! `resolve`. A child prints `M3-RK-ACK <round> <step>` after each step the store acknowledged.
//! The parent kills children with SIGKILL at random times drawn from a seeded generator (a fresh
//! seed each run, printed; `M3_SEED` replays a schedule) and starts replacements with new worker
//! ids, so the load continues while others die. Slots go on killing (up to [`EXTRA_KILLS`] more
//! each) until kills have landed in every place of [`PLACES`]. The last generation of each slot
//! runs a few rounds to the end and exits cleanly.
//!
//! Afterwards, on a fresh store: `integrity_check` is ok; every acknowledged step is still there
//! (an acknowledged answer is stored with its key and its retry returns the stored record);
//! nothing went backwards; no round was delivered twice; then, once the dead workers' leases
//! have lapsed, each of their unresolved rounds refuses a replacement's claim
//! (`reclaim_unsafe`) and a late answer, is failed by `fail_recovery` with
//! `recovery_unavailable` exactly once, and still refuses claims and late answers afterwards.

use anyhow::{Context, Result, anyhow, bail, ensure};
use m3::{
    DatabaseStore, ErrorCode, FailureCode, ManagedInputError, ManagedInputRecord,
    ManagedInputStatus, ManagedInputStore, OwnerClaim, RoundFilter,
};
use m3_tests::backends::{Db, integrity, open_named};
use m3_tests::kill_worker::{
    ACK, ERROR, LEASE, READY, Step, answer, delivery_key, fast_options, round_id, submit_key,
};
use m3_tests::replay::RandomTest;
use m3_tests::rng::Rng;
use m3_tests::soak_factor;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// The helper binary whose `kill-worker` mode is one worker process.
const HELPER: &str = env!("CARGO_BIN_EXE_m3-test-helper");

/// Worker processes running at the same time.
const SLOTS: usize = 4;
/// Kill-and-restart cycles per slot in the default run (times `soak_factor()`).
const KILLS_PER_SLOT: usize = 3;
/// Rounds the last, never-killed, generation of each slot runs to the end.
const FINAL_ROUNDS: usize = 4;
/// A killed generation is told to run this many rounds: it is always killed long before.
const UNBOUNDED_ROUNDS: usize = 1_000_000;
/// A kill lands this long (uniformly drawn, in ms) after the child said it is ready.
const KILL_DELAY_MS: std::ops::Range<u64> = 20..1200;
/// Kills a slot may add to its share until every place of [`PLACES`] has been hit.
const EXTRA_KILLS: usize = 12;
/// Where a kill must land at least once a run: between two rounds and in each status a live
/// worker's round passes through.
const PLACES: [&str; 5] = [
    "between rounds",
    "in a pending round",
    "in a response_validated round",
    "in a delivery_started round",
    "in a delivered round",
];
/// How long a child may take to open its store.
const STARTUP_LIMIT: Duration = Duration::from_secs(120);

/// Position in the lifecycle (`failed` has none: nothing but recovery fails a round here).
fn rank(status: ManagedInputStatus) -> Option<usize> {
    match status {
        ManagedInputStatus::Failed => None,
        other => ManagedInputStatus::ALL.iter().position(|s| *s == other),
    }
}

/// A child that is killed and reaped if the parent gives up on it (no orphans on failure).
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// One worker process's life, as the parent saw it.
#[derive(Debug)]
struct Life {
    worker: String,
    /// `Some(delay after ready)` if the parent killed it.
    killed_after: Option<Duration>,
    /// Acknowledged steps, in the order printed.
    acks: Vec<(String, Step)>,
}

fn spawn_worker(exe: &Path, db: &str, worker: &str, rounds: usize) -> Result<Worker> {
    let child = Command::new(exe)
        .args(["kill-worker", db, worker, &rounds.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning {}", exe.display()))?;
    Ok(Worker(child))
}

/// Where a killed worker's kill landed: the status of its last round (read from the database).
fn place_of(store: &DatabaseStore, worker: &str) -> Result<String> {
    let mut last = None;
    for i in 0.. {
        match store.get_round(&round_id(worker, i))? {
            Some(record) => last = Some(record),
            None => break,
        }
    }
    Ok(match last {
        None => "before the first round".to_string(),
        Some(r) if r.status == ManagedInputStatus::Resolved => "between rounds".to_string(),
        Some(r) => format!("in a {} round", r.status),
    })
}

/// Runs one slot: `kills` generations killed at random times (more, up to [`EXTRA_KILLS`], while
/// some place of [`PLACES`] has no kill yet), then one that runs to the end.
fn run_slot(
    exe: &Path,
    db: &str,
    slot: usize,
    kills: usize,
    seed: u64,
    landed: &std::sync::Mutex<BTreeSet<String>>,
) -> Result<Vec<Life>> {
    let mut rng = Rng::for_case(seed, slot as u64);
    let mut lives = Vec::new();
    let reader = open_named(db, fast_options());
    for generation in 0.. {
        let worker = format!("w{slot}-g{generation}");
        let every_place_hit = {
            let landed = landed.lock().unwrap_or_else(|e| e.into_inner());
            PLACES.iter().all(|p| landed.contains(*p))
        };
        let last = generation >= kills && (every_place_hit || generation >= kills + EXTRA_KILLS);
        let rounds = if last { FINAL_ROUNDS } else { UNBOUNDED_ROUNDS };
        let mut child = spawn_worker(exe, db, &worker, rounds)?;
        let stdout = child.0.stdout.take().context("child stdout")?;
        let mut stderr = child.0.stderr.take().context("child stderr")?;
        let (tx, rx) = mpsc::channel::<String>();
        let out_reader = thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    // Only whole lines count: a line without its newline was not fully written.
                    Ok(_) if buf.ends_with(b"\n") => {
                        let line = String::from_utf8_lossy(&buf).trim_end().to_string();
                        if tx.send(line).is_err() {
                            return;
                        }
                    }
                    _ => return,
                }
            }
        });
        let err_reader = thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut lines = Vec::new();
        let started = Instant::now();
        loop {
            let left = STARTUP_LIMIT.saturating_sub(started.elapsed());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let ready = line.contains(READY);
                    lines.push(line);
                    if ready {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!("worker {worker} was not ready after {STARTUP_LIMIT:?}")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = child.0.wait()?;
                    let stderr = err_reader.join().unwrap_or_default();
                    bail!(
                        "worker {worker} exited before it was ready ({status}):\n{}\n{stderr}",
                        lines.join("\n")
                    );
                }
            }
        }
        let killed_after = if last {
            None
        } else {
            let spread = (KILL_DELAY_MS.end - KILL_DELAY_MS.start) as usize;
            let delay = Duration::from_millis(KILL_DELAY_MS.start + rng.below(spread) as u64);
            thread::sleep(delay);
            if let Some(status) = child.0.try_wait()? {
                lines.extend(rx.iter());
                let stderr = err_reader.join().unwrap_or_default();
                bail!(
                    "worker {worker} exited on its own before its kill ({status}):\n{}\n{stderr}",
                    lines.join("\n")
                );
            }
            // `Child::kill` is SIGKILL on Unix: no destructor, no flush, no rollback runs.
            child.0.kill()?;
            Some(delay)
        };
        let status = child.0.wait()?;
        // The reader sees the end of the pipe once the process is gone.
        lines.extend(rx.iter());
        out_reader
            .join()
            .map_err(|_| anyhow!("stdout reader panicked"))?;
        let stderr = err_reader.join().unwrap_or_default();
        let errors: Vec<&String> = lines.iter().filter(|l| l.contains(ERROR)).collect();
        ensure!(
            errors.is_empty(),
            "worker {worker} saw an error from the store: {errors:#?}\n{stderr}"
        );
        match killed_after {
            Some(_) => ensure!(
                status.signal() == Some(9),
                "worker {worker} was not killed by SIGKILL: {status}\n{stderr}"
            ),
            None => ensure!(
                status.success(),
                "worker {worker} failed ({status}):\n{}\n{stderr}",
                lines.join("\n")
            ),
        }
        if killed_after.is_some() {
            let place = place_of(&reader, &worker)?;
            landed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(place);
        }
        let mut acks = Vec::new();
        for line in &lines {
            let Some(at) = line.find(ACK) else { continue };
            let rest = &line[at + ACK.len()..];
            let (round, step) = rest
                .split_once(' ')
                .with_context(|| format!("bad ack line {line:?}"))?;
            let step = Step::parse(step).with_context(|| format!("bad step in {line:?}"))?;
            acks.push((round.to_string(), step));
        }
        lives.push(Life {
            worker,
            killed_after,
            acks,
        });
        if last {
            break;
        }
    }
    Ok(lives)
}

fn is_code(
    result: &Result<impl std::fmt::Debug, ManagedInputError>,
    kind: fn(&ManagedInputError) -> bool,
    code: ErrorCode,
) -> bool {
    matches!(result, Err(e) if kind(e) && e.code() == Some(code))
}

fn recovery_error(e: &ManagedInputError) -> bool {
    matches!(e, ManagedInputError::Recovery(_))
}

fn state_error(e: &ManagedInputError) -> bool {
    matches!(e, ManagedInputError::State(_))
}

/// Outcome text for failure messages.
fn show<T>(result: &Result<T, ManagedInputError>) -> String {
    match result {
        Ok(_) => "Ok".to_string(),
        Err(e) => format!("{} ({:?}): {e}", e.kind_name(), e.code()),
    }
}

/// The run on `db`.
fn random_kills_on(db: &Db) -> Result<()> {
    let seed = RandomTest::RandomKills.seed_on(db);
    let kills_per_slot = KILLS_PER_SLOT * soak_factor();
    println!(
        "random kills: {SLOTS} slots x {kills_per_slot} kills (or more, until every place is hit), lease {LEASE:?}"
    );
    let landed_places = std::sync::Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    // Create the file and schema before the crowd arrives.
    drop(db.open(fast_options()));
    let exe = PathBuf::from(HELPER);
    let started = Instant::now();

    let slots: Vec<_> = (0..SLOTS)
        .map(|slot| {
            let (exe, name): (PathBuf, String) = (exe.clone(), db.name());
            let landed = landed_places.clone();
            thread::spawn(move || run_slot(&exe, &name, slot, kills_per_slot, seed, &landed))
        })
        .collect();
    let mut lives = Vec::new();
    let mut failures = Vec::new();
    for (slot, handle) in slots.into_iter().enumerate() {
        match handle.join() {
            Ok(Ok(slot_lives)) => lives.extend(slot_lives),
            Ok(Err(e)) => failures.push(format!("slot {slot}: {e:#}")),
            Err(_) => failures.push(format!("slot {slot}: panicked")),
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n\n"));
    let load_time = started.elapsed();

    // --- What the store holds, on a fresh store object.
    assert_eq!(integrity(db), "ok", "after the kills");
    let store = db.open(fast_options());
    let records: BTreeMap<String, ManagedInputRecord> = store
        .list_rounds(&RoundFilter::default())?
        .into_iter()
        .map(|r| (r.pending.round_id.clone(), r))
        .collect();
    let owner_of = |r: &ManagedInputRecord| r.lease.as_ref().map(|l| l.owner_id.clone());

    // Every round is one some worker created, with the answer of that round if any.
    let workers: BTreeSet<&str> = lives.iter().map(|l| l.worker.as_str()).collect();
    for (id, record) in &records {
        let owner = owner_of(record).with_context(|| format!("{id} has no owner"))?;
        ensure!(
            workers.contains(owner.as_str()) && id.starts_with(&format!("{owner}-r")),
            "{id} is owned by {owner}, which did not create it"
        );
        ensure!(
            record.status != ManagedInputStatus::Failed,
            "{id} failed before any recovery ran: {:?}",
            record.failure
        );
        let validated = record.status != ManagedInputStatus::Pending;
        if validated {
            ensure!(
                record.responses.as_ref() == Some(&answer(id))
                    && record.idempotency_key.as_deref() == Some(submit_key(id).as_str()),
                "{id} is {} but does not hold its own answer and key",
                record.status
            );
        } else {
            ensure!(
                record.responses.is_none() && record.idempotency_key.is_none(),
                "{id} is pending but holds an answer"
            );
        }
        // Nothing duplicated: delivery started at most once, and exactly once if it started.
        let started_delivery = rank(record.status) >= rank(ManagedInputStatus::DeliveryStarted);
        ensure!(
            record.delivery_attempts == u32::from(started_delivery),
            "{id} is {} with delivery_attempts {}",
            record.status,
            record.delivery_attempts
        );
        if started_delivery {
            ensure!(
                record.delivery_idempotency_key.as_deref() == Some(delivery_key(id).as_str()),
                "{id}: wrong delivery key"
            );
        }
    }

    // Every acknowledged step survived, nothing went backwards, and an acknowledged answer's
    // retry (same key, same answer) returns the stored record.
    let mut acknowledged_steps = 0;
    let mut acknowledged_submits = 0;
    let mut last_ack: BTreeMap<&str, Step> = BTreeMap::new();
    for life in &lives {
        for (round, step) in &life.acks {
            acknowledged_steps += 1;
            ensure!(
                round.starts_with(&format!("{}-r", life.worker)),
                "{} acknowledged a step of {round}",
                life.worker
            );
            let previous = last_ack.insert(round, *step);
            ensure!(
                previous < Some(*step),
                "{round}: {} acknowledged after {previous:?}",
                step.name()
            );
        }
    }
    for (round, step) in &last_ack {
        let record = records
            .get(*round)
            .with_context(|| format!("LOST: {round} acknowledged {} but is gone", step.name()))?;
        ensure!(
            rank(record.status) >= rank(step.status()),
            "WENT BACKWARDS: {round} acknowledged {} but is {}",
            step.name(),
            record.status
        );
        if *step >= Step::Submit {
            acknowledged_submits += 1;
            let retried = store.submit_responses(round, &answer(round), &submit_key(round));
            ensure!(
                retried.as_ref().ok() == Some(record),
                "{round}: the retry of an acknowledged answer did not return the stored record: {}",
                show(&retried)
            );
        }
    }
    let committed_unacknowledged = records
        .iter()
        .filter(|(id, r)| match last_ack.get(id.as_str()) {
            None => true,
            Some(step) => rank(r.status) > rank(step.status()),
        })
        .count();

    // The clean last generations finished every round.
    for life in lives.iter().filter(|l| l.killed_after.is_none()) {
        for i in 0..FINAL_ROUNDS {
            let id = round_id(&life.worker, i);
            let status = records.get(&id).map(|r| r.status);
            ensure!(
                status == Some(ManagedInputStatus::Resolved),
                "{id} of the clean worker {} is {status:?}",
                life.worker
            );
        }
    }

    // Where the kills landed: the status of each dead worker's last round.
    let dead: BTreeSet<&str> = lives
        .iter()
        .filter(|l| l.killed_after.is_some())
        .map(|l| l.worker.as_str())
        .collect();
    let mut landed: BTreeMap<String, usize> = BTreeMap::new();
    for worker in &dead {
        let last = records
            .iter()
            .filter_map(|(id, r)| {
                let index = id
                    .strip_prefix(&format!("{worker}-r"))?
                    .parse::<usize>()
                    .ok()?;
                Some((index, r))
            })
            .max_by_key(|(index, _)| *index);
        let place = match last {
            None => "before the first round".to_string(),
            Some((_, r)) if r.status == ManagedInputStatus::Resolved => "between rounds".into(),
            Some((_, r)) => format!("in a {} round", r.status),
        };
        *landed.entry(place).or_default() += 1;
    }

    let missed: Vec<&str> = PLACES
        .iter()
        .copied()
        .filter(|p| !landed.contains_key(*p))
        .collect();
    ensure!(
        missed.is_empty(),
        "no kill landed {missed:?} (kills landed {landed:?}): the run proves nothing about those"
    );

    // --- Recovery of the dead workers' unresolved rounds, once their leases have lapsed.
    let orphans: Vec<&ManagedInputRecord> = records
        .values()
        .filter(|r| {
            r.status != ManagedInputStatus::Resolved
                && owner_of(r).is_some_and(|o| dead.contains(o.as_str()))
        })
        .collect();
    ensure!(
        records
            .values()
            .all(|r| r.status == ManagedInputStatus::Resolved
                || owner_of(r).is_some_and(|o| dead.contains(o.as_str()))),
        "a round of a clean worker is unresolved"
    );
    if let Some(latest) = orphans
        .iter()
        .filter_map(|r| r.lease.as_ref().map(|l| l.expires_at))
        .max()
    {
        let wait = (latest - chrono::Utc::now()).to_std().unwrap_or_default();
        thread::sleep(wait + Duration::from_millis(200));
    }
    for (n, before) in orphans.iter().enumerate() {
        let id = before.pending.round_id.as_str();
        let replacement = OwnerClaim {
            owner_id: format!("replacement-{n}"),
            lease_ttl: LEASE,
        };
        let claimed = store.claim_round(id, &replacement);
        ensure!(
            is_code(&claimed, recovery_error, ErrorCode::ReclaimUnsafe),
            "{id}: a replacement's claim of a dead worker's round: {}",
            show(&claimed)
        );
        let late_key = format!("late-{id}");
        let late_answer = answer("late");
        let late = store.submit_responses(id, &late_answer, &late_key);
        let refused = if before.status == ManagedInputStatus::Pending {
            is_code(&late, recovery_error, ErrorCode::RecoveryUnavailable)
        } else {
            is_code(&late, state_error, ErrorCode::InvalidTransition)
        };
        ensure!(
            refused,
            "{id} ({}): a late answer: {}",
            before.status,
            show(&late)
        );
        let unchanged = store.get_round(id)?.context("round gone")?;
        ensure!(
            &unchanged == *before,
            "{id}: a refused claim or answer changed the round"
        );

        let failed = store.fail_recovery(id, None, "random kills: the worker was killed")?;
        ensure!(
            failed.status == ManagedInputStatus::Failed
                && failed.failure.as_ref().map(|f| f.code)
                    == Some(FailureCode::RecoveryUnavailable),
            "{id}: recovery left {} {:?}",
            failed.status,
            failed.failure
        );
        ensure!(
            failed.delivery_attempts == before.delivery_attempts
                && failed.responses == before.responses
                && failed.idempotency_key == before.idempotency_key,
            "{id}: recovery changed the answer or the delivery count"
        );
        let again = store.fail_recovery(id, None, "again");
        ensure!(
            is_code(&again, state_error, ErrorCode::RoundTerminal),
            "{id}: a second fail_recovery: {}",
            show(&again)
        );
        let claimed = store.claim_round(id, &replacement);
        ensure!(
            is_code(&claimed, recovery_error, ErrorCode::RecoveryUnavailable),
            "{id}: a claim after recovery: {}",
            show(&claimed)
        );
        let late = store.submit_responses(id, &late_answer, &late_key);
        ensure!(
            is_code(&late, recovery_error, ErrorCode::RecoveryUnavailable),
            "{id}: a late answer after recovery: {}",
            show(&late)
        );
        ensure!(
            store.get_round(id)?.as_ref() == Some(&failed),
            "{id}: a refused call after recovery changed the round"
        );
    }
    // Recovery leaves resolved rounds of dead workers alone.
    for record in records.values().filter(|r| {
        r.status == ManagedInputStatus::Resolved
            && owner_of(r).is_some_and(|o| dead.contains(o.as_str()))
    }) {
        let id = record.pending.round_id.as_str();
        let refused = store.fail_recovery(id, None, "");
        ensure!(
            is_code(&refused, state_error, ErrorCode::RoundTerminal),
            "{id}: fail_recovery of a resolved round: {}",
            show(&refused)
        );
    }

    // --- The end state: resolved or failed closed, each exactly as often as counted above.
    let after = store.list_rounds(&RoundFilter::default())?;
    ensure!(after.len() == records.len(), "rounds appeared or vanished");
    let failed = after
        .iter()
        .filter(|r| r.status == ManagedInputStatus::Failed)
        .count();
    let resolved = after
        .iter()
        .filter(|r| r.status == ManagedInputStatus::Resolved)
        .count();
    ensure!(
        failed == orphans.len() && failed + resolved == after.len(),
        "{failed} failed and {resolved} resolved of {} rounds, {} recovered",
        after.len(),
        orphans.len()
    );
    ensure!(
        after.iter().all(|r| r.delivery_attempts <= 1),
        "a round was delivered twice"
    );
    assert_eq!(integrity(db), "ok", "after recovery");

    let kill_delays: Vec<u128> = lives
        .iter()
        .filter_map(|l| l.killed_after.map(|d| d.as_millis()))
        .collect();
    println!(
        "random kills: seed {seed:#x}; {} processes started, {} killed with SIGKILL (after {kill_delays:?} ms), {:?} under load",
        lives.len(),
        dead.len(),
        load_time
    );
    println!(
        "random kills: kills landed {landed:?}; {} rounds created, {acknowledged_steps} acknowledged steps ({acknowledged_submits} acknowledged answers), {committed_unacknowledged} rounds with a committed but unacknowledged step",
        records.len()
    );
    println!(
        "random kills: {resolved} rounds resolved, {} rounds of dead workers recovered (failed recovery_unavailable exactly once, claim and late answers refused); integrity ok; nothing lost, nothing duplicated; {:?} in all",
        orphans.len(),
        started.elapsed()
    );
    Ok(())
}

// The run on SQLite and on PostgreSQL alike.
m3_tests::on_both_backends! {
    fn random_kills_under_load(db) {
        random_kills_on(db).unwrap();
    }
}

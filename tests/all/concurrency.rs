//! Concurrency: many store objects, threads and processes on one database file.
//!
//! The store's contract is "one connection per operation" with SQLite's own locking as the only
//! serialisation (architecture invariant 4). These tests race real store objects against each
//! other on one real file and check the outcome the specification promises: one answer stored,
//! every identical submission gets the same record, every other one a `ManagedInputConflict`, and
//! nobody ever sees `SQLITE_BUSY`.

use anyhow::{Context, Result, anyhow, bail, ensure};
use m3::{
    ErrorCode, ManagedInputError, ManagedInputRecord, ManagedInputStatus, ManagedInputStore,
    NewRound, RoundFilter, SqliteManagedInputStore, StoreOptions, Synchronous,
};
use m3_tests::backends::{Db, integrity, open_named};
use m3_tests::race::{OUTCOME_LINE, Outcome, RACE_KEY, RACE_ROUND, answer};
use m3_tests::{TempDb, address_round, claim, create, integrity_check, open};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// The helper binary whose `race` mode is one racing process.
const HELPER: &str = env!("CARGO_BIN_EXE_m3-test-helper");

/// A round owned by a worker whose lease outlives any test run.
fn long_lease_round(round_id: &str) -> NewRound {
    let mut round = address_round(round_id);
    round.owner = Some(claim("worker-1", Duration::from_secs(3600)));
    round
}

/// Options for tests where durability is not the point (FULL fsyncs are slow here).
fn fast_options() -> StoreOptions {
    StoreOptions {
        synchronous: Synchronous::Normal,
        ..StoreOptions::default()
    }
}

/// Is this a storage failure (busy or otherwise)?
fn is_storage(e: &ManagedInputError) -> bool {
    matches!(e, ManagedInputError::Storage(_))
}

/// Checks the promises of an idempotent race: `attempts` holds, for every caller, which answer
/// it sent and what it got. `stored` is the round as read afterwards.
fn check_race(stored: &ManagedInputRecord, attempts: &[(char, Outcome)]) -> Result<()> {
    ensure!(
        stored.status == ManagedInputStatus::ResponseValidated,
        "the round should hold one validated answer, it is {}",
        stored.status
    );
    ensure!(
        stored.idempotency_key.as_deref() == Some(RACE_KEY),
        "the stored key is not the racers' key"
    );
    let stored_responses = stored
        .responses
        .as_ref()
        .context("no responses stored after the race")?;
    let winner = ['a', 'b']
        .into_iter()
        .find(|w| &answer(*w) == stored_responses)
        .context("the stored responses are neither answer a nor answer b")?;
    let stored_json = serde_json::to_value(stored)?;

    let others: Vec<&String> = attempts
        .iter()
        .filter_map(|(_, o)| match o {
            Outcome::Other(m) => Some(m),
            _ => None,
        })
        .collect();
    ensure!(
        others.is_empty(),
        "{} callers saw an error that is neither success nor conflict (storage/busy?): {others:#?}",
        others.len()
    );
    let mut first_ok: Option<&Value> = None;
    for (i, (which, outcome)) in attempts.iter().enumerate() {
        if *which == winner {
            let Outcome::Ok(record) = outcome else {
                bail!("caller {i} sent the stored answer {which} but got {outcome:?}");
            };
            // The same record for every caller: same round, same stored answers, same key,
            // same lifecycle timestamps. It is also exactly what a later read returns.
            let first = *first_ok.get_or_insert(record);
            ensure!(
                record == first,
                "caller {i} got a different record from the first successful caller:\n{record:#}\nvs\n{first:#}"
            );
            ensure!(
                record == &stored_json,
                "caller {i} got a record that differs from the stored one:\n{record:#}\nvs\n{stored_json:#}"
            );
        } else {
            ensure!(
                matches!(outcome, Outcome::Conflict(code) if code == ErrorCode::IdempotencyConflict.as_str()),
                "caller {i} sent answer {which} (not the stored one) but got {outcome:?}"
            );
        }
    }
    let oks = attempts
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Ok(_)))
        .count();
    let conflicts = attempts.len() - oks;
    println!(
        "race: {} callers, winner answer {winner}, {oks} ok, {conflicts} conflicts",
        attempts.len()
    );
    ensure!(oks > 0 && conflicts > 0, "both answers must be in the race");
    Ok(())
}

/// Racers in threads of this process, each with its own store object.
fn race_across_threads(db: &Db) -> Result<()> {
    const THREADS: usize = 64;
    let setup = db.store();
    create(&setup, &long_lease_round(RACE_ROUND));

    let barrier = Arc::new(Barrier::new(THREADS));
    let racers: Vec<_> = (0..THREADS)
        .map(|i| {
            let name = db.name();
            let barrier = barrier.clone();
            thread::spawn(move || {
                // Every racer has its own store object (its own instances and connections).
                let store = open_named(&name, StoreOptions::default());
                // Warm the instance so the race is about the database, not instantiation.
                let warm = store.get_round(RACE_ROUND);
                let which = if i % 2 == 0 { 'a' } else { 'b' };
                barrier.wait();
                let result = store.submit_responses(RACE_ROUND, &answer(which), RACE_KEY);
                (which, warm.map(|_| ()), result)
            })
        })
        .collect();

    let mut attempts = Vec::new();
    for racer in racers {
        let (which, warm, result) = racer.join().map_err(|_| anyhow!("racer panicked"))?;
        warm.context("warm-up read")?;
        if let Err(e) = &result {
            ensure!(!is_storage(e), "a racer saw a storage error: {e}");
        }
        attempts.push((which, Outcome::from_result(&result)));
    }
    let stored = setup
        .get_round(RACE_ROUND)?
        .context("the round disappeared")?;
    check_race(&stored, &attempts)?;
    assert_eq!(integrity(db), "ok");
    Ok(())
}

/// Racers in processes, several threads each.
fn race_across_processes(db: &Db) -> Result<()> {
    const PROCESSES: usize = 6;
    const THREADS_EACH: usize = 8;
    let setup = db.store();
    create(&setup, &long_lease_round(RACE_ROUND));
    let scratch = tempfile::tempdir()?;
    let barrier_dir = scratch.path().join("barrier");
    std::fs::create_dir(&barrier_dir)?;

    let mut children = Vec::new();
    for child in 0..PROCESSES {
        let which = if child % 2 == 0 { "a" } else { "b" };
        let process = Command::new(HELPER)
            .args(["race", &db.name(), which, &THREADS_EACH.to_string()])
            .arg(&barrier_dir)
            .arg(child.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawning {HELPER}"))?;
        children.push((which.chars().next().unwrap_or('a'), process));
    }

    // Every process has opened its stores and warmed its instances: release them together.
    let deadline = Instant::now() + Duration::from_secs(120);
    let all_ready = |dir: &Path| (0..PROCESSES).all(|c| dir.join(format!("ready-{c}")).exists());
    while !all_ready(&barrier_dir) {
        for (_, process) in &mut children {
            if let Some(status) = process.try_wait()? {
                bail!("a racing process exited before the start: {status}");
            }
        }
        if Instant::now() >= deadline {
            let mut said = String::new();
            for (_, mut process) in children {
                let _ = process.kill();
                if let Ok(output) = process.wait_with_output() {
                    said.push_str(&String::from_utf8_lossy(&output.stderr));
                }
            }
            bail!("racing processes never got ready; they said:\n{said}");
        }
        thread::sleep(Duration::from_millis(5));
    }
    std::fs::write(barrier_dir.join("go"), b"")?;

    let mut attempts = Vec::new();
    for (child, (which, process)) in children.into_iter().enumerate() {
        let output = process.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        ensure!(
            output.status.success(),
            "racing process {child} failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let lines: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.find(OUTCOME_LINE).map(|at| &l[at + OUTCOME_LINE.len()..]))
            .collect();
        ensure!(
            lines.len() == THREADS_EACH,
            "racing process {child} reported {} outcomes, expected {THREADS_EACH}:\n{stdout}",
            lines.len()
        );
        for line in lines {
            attempts.push((which, Outcome::from_json(&serde_json::from_str(line)?)?));
        }
    }
    let stored = setup
        .get_round(RACE_ROUND)?
        .context("the round disappeared")?;
    check_race(&stored, &attempts)?;
    assert_eq!(integrity(db), "ok");
    Ok(())
}

/// How long the tests below wait for something that must not be blocked.
const PROMPT: Duration = Duration::from_secs(5);

/// Why this proves there is no process-wide (or per-store, or per-file) lock in the host:
///
/// A raw connection takes SQLite's write lock (`BEGIN IMMEDIATE`). Writer W then calls
/// `submit_responses` through a store object; W is now *inside* a store operation (inside the
/// component call, inside the host's `store` import, in the host's own retries for SQLite's
/// write lock: `BEGIN IMMEDIATE` with SQLite's busy timeout at zero, short sleeps between
/// tries), and stays there until the raw connection lets go. While W is stuck mid-operation, we run reads through
/// another store object on the same file, through W's *own* store object, and a full write
/// through a store on a different file. If the host serialised operations with a lock of its own
/// (a global mutex, a mutex per store object or per file), those calls would queue behind W, and
/// W cannot finish until we commit the raw connection, which we only do after they return: the
/// test would time out. They complete promptly instead, and W still has not finished, so W and
/// they were mid-operation at the same time.
///
/// A second writer on the same file, on the other hand, does wait: that is SQLite's own lock
/// (WAL allows one writer), the only thing that serialises writers. Once the raw connection
/// commits, both writers finish without a busy error (the busy timeout is generous).
#[test]
fn no_process_wide_lock_serialises_the_store() -> Result<()> {
    let db = TempDb::new();
    let other_db = TempDb::new();
    let options = StoreOptions {
        busy_timeout_ms: 60_000,
        ..fast_options()
    };
    let writer_store = Arc::new(open(&db.path, options.clone()));
    let second_writer_store = open(&db.path, options.clone());
    let reader_store = open(&db.path, options.clone());
    let other_file_store = open(&other_db.path, options.clone());
    create(writer_store.as_ref(), &long_lease_round("held"));
    create(writer_store.as_ref(), &long_lease_round("second"));
    create(writer_store.as_ref(), &long_lease_round("other"));

    let raw = rusqlite::Connection::open(&db.path)?;
    raw.execute_batch("BEGIN IMMEDIATE")?;

    let spawn_writer = |store: Arc<SqliteManagedInputStore>, round: &'static str| {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let (tid_tx, tid_rx) = mpsc::channel();
        let handle = thread::spawn(move || {
            tid_tx
                .send(m3_tests::thread_id())
                .expect("the test waits for it");
            let result = store.submit_responses(round, &answer('a'), "k");
            flag.store(true, Ordering::SeqCst);
            result
        });
        let tid = tid_rx.recv().expect("the writer's thread id");
        (done, handle, tid)
    };
    let (writer_done, writer, writer_tid) = spawn_writer(writer_store.clone(), "held");
    let (second_done, second, second_tid) = spawn_writer(Arc::new(second_writer_store), "second");
    // Both writers are in the host's retries for SQLite's write lock (seen sleeping between two
    // tries, not merely started), so whatever the host might hold across a write is held now.
    for (name, tid) in [("first", writer_tid), ("second", second_tid)] {
        ensure!(
            m3_tests::wait_until_in_timed_sleep(tid, Duration::from_secs(30)),
            "the {name} writer never reached the wait for SQLite's write lock"
        );
    }
    ensure!(
        !writer_done.load(Ordering::SeqCst) && !second_done.load(Ordering::SeqCst),
        "the writers should be waiting for the raw connection's write lock"
    );

    // While they wait: reads through another store object and through the writer's own object,
    // and a write on another file, each on its own thread, must all complete.
    let (tx, rx) = mpsc::channel::<(&'static str, Result<()>)>();
    let writer_for_read = writer_store.clone();
    let tx1 = tx.clone();
    thread::spawn(move || {
        let r = reader_store
            .get_round("other")
            .map_err(anyhow::Error::from)
            .and_then(|r| {
                let r = r.context("round missing")?;
                ensure!(r.status == ManagedInputStatus::Pending);
                Ok(())
            })
            .and_then(|()| {
                let all = reader_store.list_rounds(&RoundFilter::default())?;
                ensure!(all.len() == 3, "expected 3 rounds, got {}", all.len());
                Ok(())
            });
        let _ = tx1.send(("read through another store object", r));
    });
    let tx2 = tx.clone();
    thread::spawn(move || {
        let r = writer_for_read
            .get_round("held")
            .map_err(anyhow::Error::from)
            .and_then(|r| {
                ensure!(r.context("round missing")?.status == ManagedInputStatus::Pending);
                Ok(())
            });
        let _ = tx2.send(("read through the blocked writer's own store object", r));
    });
    let tx3 = tx;
    thread::spawn(move || {
        let r = (|| -> Result<()> {
            create(&other_file_store, &long_lease_round("elsewhere"));
            let rec = other_file_store.submit_responses("elsewhere", &answer('b'), "k")?;
            ensure!(rec.status == ManagedInputStatus::ResponseValidated);
            Ok(())
        })();
        let _ = tx3.send(("create + submit on another database file", r));
    });
    for _ in 0..3 {
        let (what, result) = rx
            .recv_timeout(PROMPT)
            .context("an operation was serialised behind a writer that waits for SQLite's lock")?;
        result.with_context(|| what.to_string())?;
        println!("completed while a writer was mid-operation: {what}");
    }
    ensure!(
        !writer_done.load(Ordering::SeqCst) && !second_done.load(Ordering::SeqCst),
        "the writers must still be waiting: SQLite's lock is the only thing holding them"
    );

    raw.execute_batch("COMMIT")?;
    for (name, handle) in [("first writer", writer), ("second writer", second)] {
        let rec = handle
            .join()
            .map_err(|_| anyhow!("{name} panicked"))?
            .with_context(|| format!("{name} after the lock was released"))?;
        ensure!(rec.status == ManagedInputStatus::ResponseValidated);
    }
    assert_eq!(integrity_check(&db.path), "ok");
    Ok(())
}

/// A write lock held longer than the busy timeout is a typed `StorageError` with the code
/// `storage_busy`, and it changes nothing: the round stays pending, the key is not consumed, and
/// the same answer succeeds once the lock is released.
#[test]
fn a_write_lock_held_past_the_busy_timeout_is_a_typed_storage_busy_that_changes_nothing()
-> Result<()> {
    let db = TempDb::new();
    let store = open(
        &db.path,
        StoreOptions {
            busy_timeout_ms: 200,
            ..fast_options()
        },
    );
    create(&store, &long_lease_round("r1"));
    let before = store.get_round("r1")?.context("the round")?;
    let raw = rusqlite::Connection::open(&db.path)?;
    raw.execute_batch("BEGIN IMMEDIATE")?;
    let started = Instant::now();
    let err = store
        .submit_responses("r1", &answer('a'), "k")
        .expect_err("the write lock is held");
    ensure!(
        started.elapsed() >= Duration::from_millis(200),
        "it waited out the busy timeout first"
    );
    m3_tests::assert_refused::<()>(Err(&err), "StorageError", ErrorCode::StorageBusy);
    ensure!(
        err.to_string().to_lowercase().contains("busy"),
        "the error says what happened: {err}"
    );
    raw.execute_batch("ROLLBACK")?;
    ensure!(
        store.get_round("r1")?.context("the round")? == before,
        "the refused write changed the round"
    );
    let answered = store.submit_responses("r1", &answer('a'), "k")?;
    ensure!(answered.status == ManagedInputStatus::ResponseValidated);
    assert_eq!(integrity_check(&db.path), "ok");
    Ok(())
}

#[test]
fn contention_writers_and_long_readers_never_see_busy() -> Result<()> {
    // 16 writers x 1,000 write transactions (500 rounds created and answered each), 4 long
    // readers (x M3_SOAK).
    const WRITERS: usize = 16;
    const READERS: usize = 4;
    let rounds_each: usize = 500 * m3_tests::soak_factor();
    let db = TempDb::new();
    // Create the file and schema before the crowd arrives.
    drop(open(&db.path, fast_options()));

    let writers_left = Arc::new(AtomicUsize::new(WRITERS));
    let start = Arc::new(Barrier::new(WRITERS + READERS));
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let (path, left, start) = (db.path.clone(), writers_left.clone(), start.clone());
            thread::spawn(move || -> Result<usize> {
                let conn = rusqlite::Connection::open(&path)?;
                let count = |c: &rusqlite::Connection| -> rusqlite::Result<i64> {
                    c.query_row("SELECT count(*) FROM managed_input_rounds", [], |r| {
                        r.get(0)
                    })
                };
                start.wait();
                let mut held = 0;
                loop {
                    let writers_running = left.load(Ordering::SeqCst) > 0;
                    // A long read transaction: one snapshot held while the writers commit.
                    conn.execute_batch("BEGIN")?;
                    let before = count(&conn)?;
                    thread::sleep(Duration::from_millis(200));
                    let after = count(&conn)?;
                    conn.execute_batch("COMMIT")?;
                    ensure!(
                        before == after,
                        "a read transaction's snapshot changed under it"
                    );
                    held += 1;
                    if !writers_running {
                        return Ok(held);
                    }
                }
            })
        })
        .collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (path, left, start) = (db.path.clone(), writers_left.clone(), start.clone());
            thread::spawn(move || -> Result<Vec<String>> {
                let store = open(&path, fast_options());
                let mut errors = Vec::new();
                start.wait();
                for i in 0..rounds_each {
                    let id = format!("w{w}-r{i}");
                    let mut round = long_lease_round(&id);
                    round.execution_id = format!("exec-{w}");
                    if let Err(e) = store.create_round(&round) {
                        errors.push(format!("create {id}: {} {e}", e.kind_name()));
                        continue;
                    }
                    let which = if i % 2 == 0 { 'a' } else { 'b' };
                    if let Err(e) = store.submit_responses(&id, &answer(which), "k") {
                        errors.push(format!("submit {id}: {} {e}", e.kind_name()));
                    }
                }
                left.fetch_sub(1, Ordering::SeqCst);
                Ok(errors)
            })
        })
        .collect();

    let started = Instant::now();
    let mut errors = Vec::new();
    for writer in writers {
        errors.extend(writer.join().map_err(|_| anyhow!("writer panicked"))??);
    }
    let elapsed = started.elapsed();
    for reader in readers {
        let held = reader.join().map_err(|_| anyhow!("reader panicked"))??;
        ensure!(held >= 1, "a reader never held its transaction");
    }
    println!(
        "{} writes by {WRITERS} writers in {elapsed:?} under {READERS} long readers",
        2 * WRITERS * rounds_each
    );
    ensure!(
        errors.is_empty(),
        "{} operations failed (none may see busy): {errors:#?}",
        errors.len()
    );

    let store = open(&db.path, fast_options());
    let all = store.list_rounds(&RoundFilter::default())?;
    ensure!(all.len() == WRITERS * rounds_each, "{} rounds", all.len());
    ensure!(
        all.iter()
            .all(|r| r.status == ManagedInputStatus::ResponseValidated),
        "every round should hold its answer"
    );
    assert_eq!(integrity_check(&db.path), "ok");
    Ok(())
}

// The idempotency races, on SQLite and on PostgreSQL alike.
m3_tests::on_both_backends! {
    fn idempotent_submit_race_across_threads(db) {
        race_across_threads(db).unwrap();
    }

    fn idempotent_submit_race_across_processes(db) {
        race_across_processes(db).unwrap();
    }
}

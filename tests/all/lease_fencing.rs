//! Catalogue item 2 of `reliability.md`: lease compare-and-set on an injected clock, with no
//! sleeps.
//!
//! Eight workers, each a thread with its own store object on one real SQLite file, all reading
//! one shared [`ManualClock`], contend for 100 rounds (x `M3_SOAK`). The rounds are created
//! unowned and answered through the API first, so the only way to advance one is to win its
//! lease with `claim_round` and then present that lease to `start_delivery`, `mark_delivered` and
//! `resolve` (with an occasional `renew`).
//!
//! The run is cut into epochs separated by a barrier. In each epoch every worker tries to claim
//! every round of that epoch's wave, in its own shuffled order (so all eight race for the same
//! rounds), plus a few random earlier rounds. A worker that wins a round usually drives it to
//! `resolved` within the epoch; sometimes (seeded at random) it "pauses" before one of its
//! steps. At the barrier the clock moves forward past every lease granted so far (it only ever
//! moves forward, and only there), so in the next epoch the paused worker resumes with a dead
//! lease: each of its writes (the step it was about to take, `renew`, `fail`) must be a
//! `ManagedInputConflict(lease_expired)`, its own re-claim a `ManagedInputRecoveryError
//! (reclaim_unsafe)`, and the record must be exactly as before. A supervisor then fails the
//! abandoned round with `fail_recovery`; the paused worker's later write gets
//! `recovery_unavailable`. Along the way workers also present forged leases (their own owner id,
//! or the holder's, with a random token) and, after rotating their own token by re-claiming, the
//! superseded one: all `lease_mismatch`, nothing written.
//!
//! Every successful call is logged with the worker that made it. At the end: each round was
//! claimed by exactly one worker and every logged transition of it was that worker's; the
//! record's lease owner is that worker; `delivery_attempts` equals the logged `start_delivery`
//! calls (at most 1); a round is `resolved` exactly when its owner never paused, otherwise
//! `failed` with `recovery_unavailable` and lifecycle timestamps matching the steps its owner
//! took; terminal rounds absorb every further write; `PRAGMA integrity_check` is `ok`.
//!
//! A fresh seed each run, printed (`M3_SEED` replays its choices; the interleaving of threads is
//! the operating system's); no sleeps.

use chrono::TimeDelta;
use m3::*;
use m3_tests::replay::RandomTest;
use m3_tests::rng::Rng;
use m3_tests::*;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

/// Contending workers.
const WORKERS: usize = 8;
/// Rounds at soak factor 1.
const ROUNDS: usize = 100;
/// Epochs in which new rounds are offered (two more follow, for the paused workers).
const WAVES: usize = 20;
/// Every lease granted or renewed in this test lasts this long.
const LEASE_TTL: Duration = Duration::from_secs(30);
/// Chance (percent) that the winner of a round pauses before one of its steps.
const PAUSE_PERCENT: u64 = 15;
/// Chance (percent) of a `renew` before a step.
const RENEW_PERCENT: u64 = 25;
/// Chance (percent) that a winner re-claims its round (rotating its token) and then tries the
/// superseded token.
const ROTATE_PERCENT: u64 = 10;
/// Chance (percent) that a refused claimer tries forged leases on the round.
const FORGE_PERCENT: u64 = 50;
/// Earlier rounds each worker revisits per epoch.
const REVISITS: usize = 2;
/// The owner index the supervisor's `fail_recovery` is logged under.
const SUPERVISOR: usize = usize::MAX;

/// A successful write (or claim) of one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Claim,
    Rotate,
    Renew,
    StartDelivery,
    MarkDelivered,
    Resolve,
    Recovered,
}

/// The lifecycle steps a lease holder takes, in order.
const LIFECYCLE: [Step; 3] = [Step::StartDelivery, Step::MarkDelivered, Step::Resolve];

/// One successful call, with who made it.
#[derive(Debug, Clone)]
struct Event {
    round: usize,
    owner: usize,
    step: Step,
}

/// A round whose owner stopped before `next`, holding `lease`.
#[derive(Debug, Clone)]
struct Paused {
    round: usize,
    lease: ManagedInputLease,
    next: Step,
    epoch: usize,
}

/// One worker's (or the supervisor's) figures.
#[derive(Debug, Default)]
struct Stats {
    claim_attempts: usize,
    claims_won: usize,
    claims_refused: BTreeMap<String, usize>,
    rotations: usize,
    renewals: usize,
    transitions: usize,
    paused: usize,
    /// Writes with a lease that expired during a pause: `lease_expired`.
    expired_writes_rejected: usize,
    /// A paused worker's own re-claim: `reclaim_unsafe`.
    own_reclaims_rejected: usize,
    /// Writes with a token superseded by the worker's own re-claim: `lease_mismatch`.
    superseded_writes_rejected: usize,
    /// Writes with forged leases: `lease_mismatch` (or `round_terminal`, when the holder
    /// finished first).
    forged_writes_rejected: usize,
    /// A paused worker's write after the supervisor failed its round.
    writes_after_recovery_rejected: usize,
    recovered: usize,
}

impl Stats {
    fn add(&mut self, other: &Stats) {
        self.claim_attempts += other.claim_attempts;
        self.claims_won += other.claims_won;
        for (code, n) in &other.claims_refused {
            *self.claims_refused.entry(code.clone()).or_default() += n;
        }
        self.rotations += other.rotations;
        self.renewals += other.renewals;
        self.transitions += other.transitions;
        self.paused += other.paused;
        self.expired_writes_rejected += other.expired_writes_rejected;
        self.own_reclaims_rejected += other.own_reclaims_rejected;
        self.superseded_writes_rejected += other.superseded_writes_rejected;
        self.forged_writes_rejected += other.forged_writes_rejected;
        self.writes_after_recovery_rejected += other.writes_after_recovery_rejected;
        self.recovered += other.recovered;
    }

    fn fenced_total(&self) -> usize {
        self.expired_writes_rejected
            + self.own_reclaims_rejected
            + self.superseded_writes_rejected
            + self.forged_writes_rejected
            + self.writes_after_recovery_rejected
    }
}

/// What every thread shares.
struct Shared {
    db: TempDb,
    clock: Arc<ManualClock>,
    round_ids: Vec<String>,
    /// The rounds offered in each epoch.
    waves: Vec<Vec<usize>>,
    epochs: usize,
    barrier: Barrier,
    log: Mutex<Vec<Event>>,
    /// Rounds whose paused owner has made its stale writes: the supervisor fails them.
    abandoned: Mutex<Vec<usize>>,
    supervisor: SqliteManagedInputStore,
    supervisor_stats: Mutex<Stats>,
    failures: Mutex<Vec<String>>,
    poisoned: AtomicBool,
}

impl Shared {
    fn log(&self, round: usize, owner: usize, step: Step) {
        self.log.lock().unwrap().push(Event { round, owner, step });
    }

    fn store(&self) -> SqliteManagedInputStore {
        open(
            &self.db.path,
            StoreOptions {
                clock: self.clock.clone(),
                // Durability is not the point here (crash.rs covers it); FULL fsyncs are slow.
                synchronous: Synchronous::Normal,
                ..StoreOptions::default()
            },
        )
    }

    fn ttl() -> TimeDelta {
        TimeDelta::from_std(LEASE_TTL).unwrap()
    }
}

fn owner_name(w: usize) -> String {
    format!("worker-{w}")
}

fn get(store: &SqliteManagedInputStore, id: &str) -> ManagedInputRecord {
    store
        .get_round(id)
        .unwrap_or_else(|e| panic!("get_round {id}: {e}"))
        .unwrap_or_else(|| panic!("round {id} is missing"))
}

/// The kind and code of a refusal, panicking on success or on an engine fault.
fn refusal<T: std::fmt::Debug>(result: StoreResult<T>, what: &str) -> (&'static str, ErrorCode) {
    match result {
        Ok(value) => panic!("{what}: accepted ({value:?}), expected a refusal"),
        Err(e) => (
            e.kind_name(),
            e.code()
                .unwrap_or_else(|| panic!("{what}: engine fault {e}")),
        ),
    }
}

/// Asserts `result` is refused as `kind(code)`.
fn assert_refused<T: std::fmt::Debug>(
    result: StoreResult<T>,
    kind: &str,
    code: ErrorCode,
    what: &str,
) {
    let (got_kind, got_code) = refusal(result, what);
    assert_eq!((got_kind, got_code), (kind, code), "{what}");
}

const CONFLICT: &str = "ManagedInputConflict";
const RECOVERY: &str = "ManagedInputRecoveryError";
const STATE: &str = "ManagedInputStateError";

/// One lifecycle step with `lease`.
fn do_step(
    store: &SqliteManagedInputStore,
    id: &str,
    lease: &ManagedInputLease,
    step: Step,
    delivery_key: &str,
) -> StoreResult<ManagedInputRecord> {
    match step {
        Step::StartDelivery => store.start_delivery(id, lease, delivery_key),
        Step::MarkDelivered => store.mark_delivered(id, lease),
        Step::Resolve => store.resolve(id, lease),
        other => panic!("{other:?} is not a lifecycle step"),
    }
}

fn status_after(step: Step) -> ManagedInputStatus {
    match step {
        Step::StartDelivery => ManagedInputStatus::DeliveryStarted,
        Step::MarkDelivered => ManagedInputStatus::Delivered,
        Step::Resolve => ManagedInputStatus::Resolved,
        other => panic!("{other:?} is not a lifecycle step"),
    }
}

/// One worker's state across epochs.
struct Worker<'a> {
    shared: &'a Shared,
    w: usize,
    owner: String,
    store: SqliteManagedInputStore,
    rng: Rng,
    paused: Vec<Paused>,
    stats: Stats,
    /// The epoch in progress.
    epoch: usize,
}

impl Worker<'_> {
    fn run_epoch(&mut self, epoch: usize) {
        self.epoch = epoch;
        self.resume_paused(epoch);
        let mut attempts: Vec<usize> = self.shared.waves.get(epoch).cloned().unwrap_or_default();
        self.rng.shuffle(&mut attempts);
        if let Some(first) = self.shared.waves.get(epoch).and_then(|w| w.first()) {
            for _ in 0..REVISITS.min(*first) {
                let earlier = self.rng.below(*first);
                let at = self.rng.below(attempts.len() + 1);
                attempts.insert(at, earlier);
            }
        }
        for round in attempts {
            self.try_round(round);
        }
    }

    /// A paused worker wakes up: one epoch later its lease is dead; two epochs later the
    /// supervisor has failed its round.
    fn resume_paused(&mut self, epoch: usize) {
        let shared = self.shared;
        for p in self.paused.clone() {
            let id = &shared.round_ids[p.round];
            if p.epoch + 1 == epoch {
                let now = shared.clock.now();
                assert!(
                    now > p.lease.expires_at,
                    "{id}: the clock did not pass the paused lease"
                );
                let before = get(&self.store, id);
                assert_eq!(before.lease.as_ref(), Some(&p.lease), "{id}");
                let what = format!("{id}: {:?} after a pause past the lease", p.next);
                assert_refused(
                    do_step(&self.store, id, &p.lease, p.next, "late-delivery"),
                    CONFLICT,
                    ErrorCode::LeaseExpired,
                    &what,
                );
                assert_refused(
                    self.store.renew(id, &p.lease, LEASE_TTL),
                    CONFLICT,
                    ErrorCode::LeaseExpired,
                    &format!("{id}: renew after a pause"),
                );
                assert_refused(
                    self.store
                        .fail(id, &p.lease, FailureCode::Cancelled, "late cancel"),
                    CONFLICT,
                    ErrorCode::LeaseExpired,
                    &format!("{id}: fail after a pause"),
                );
                self.stats.expired_writes_rejected += 3;
                assert_refused(
                    self.store.claim_round(id, &claim(&self.owner, LEASE_TTL)),
                    RECOVERY,
                    ErrorCode::ReclaimUnsafe,
                    &format!("{id}: own re-claim after a pause"),
                );
                self.stats.own_reclaims_rejected += 1;
                let after = get(&self.store, id);
                assert_eq!(before, after, "{id}: a fenced write changed the record");
                shared.abandoned.lock().unwrap().push(p.round);
            } else if p.epoch + 2 == epoch {
                let before = get(&self.store, id);
                assert_eq!(before.status, ManagedInputStatus::Failed, "{id}");
                assert_refused(
                    do_step(&self.store, id, &p.lease, p.next, "late-delivery"),
                    RECOVERY,
                    ErrorCode::RecoveryUnavailable,
                    &format!("{id}: {:?} after recovery", p.next),
                );
                self.stats.writes_after_recovery_rejected += 1;
                assert_eq!(before, get(&self.store, id), "{id}: changed after recovery");
            }
        }
    }

    fn try_round(&mut self, round: usize) {
        let shared = self.shared;
        let id = shared.round_ids[round].clone();
        self.stats.claim_attempts += 1;
        match self.store.claim_round(&id, &claim(&self.owner, LEASE_TTL)) {
            Ok(lease) => {
                shared.log(round, self.w, Step::Claim);
                self.stats.claims_won += 1;
                assert_eq!(lease.owner_id, self.owner, "{id}");
                assert_eq!(
                    lease.expires_at,
                    shared.clock.now() + Shared::ttl(),
                    "{id}: the lease is not on the injected clock"
                );
                self.drive(round, &id, lease);
            }
            Err(e) => {
                let allowed = matches!(
                    (e.kind_name(), e.code()),
                    (CONFLICT, Some(ErrorCode::LeaseHeld))
                        | (RECOVERY, Some(ErrorCode::ReclaimUnsafe))
                        | (RECOVERY, Some(ErrorCode::RecoveryUnavailable))
                        | (STATE, Some(ErrorCode::RoundTerminal))
                );
                assert!(allowed, "{id}: claim refused unexpectedly: {e}");
                let code = e.code().expect("typed").to_string();
                *self.stats.claims_refused.entry(code).or_default() += 1;
                if e.code() == Some(ErrorCode::LeaseHeld) && self.rng.chance(FORGE_PERCENT) {
                    self.forge(&id);
                }
            }
        }
    }

    /// Writes with leases this worker does not hold: its own owner id with a random token, and
    /// the holder's owner id with a random token.
    fn forge(&mut self, id: &str) {
        let holder = get(&self.store, id)
            .lease
            .map(|l| l.owner_id)
            .unwrap_or_else(|| "nobody".into());
        for owner_id in [self.owner.clone(), holder] {
            let forged = ManagedInputLease {
                owner_id,
                lease_token: self.rng.hex_token(),
                expires_at: self.shared.clock.now() + TimeDelta::hours(1),
            };
            let step = LIFECYCLE[self.rng.below(LIFECYCLE.len())];
            let got = refusal(
                do_step(&self.store, id, &forged, step, "forged-delivery"),
                &format!("{id}: {step:?} with a forged lease"),
            );
            // The holder may have finished the round between the claim and this write.
            assert!(
                matches!(
                    got,
                    (CONFLICT, ErrorCode::LeaseMismatch) | (STATE, ErrorCode::RoundTerminal)
                ),
                "{id}: forged {step:?}: {got:?}"
            );
            self.stats.forged_writes_rejected += 1;
        }
    }

    /// Drives a won round to `resolved`, or pauses before one of its steps.
    fn drive(&mut self, round: usize, id: &str, mut lease: ManagedInputLease) {
        let shared = self.shared;
        if self.rng.chance(ROTATE_PERCENT) {
            let rotated = self
                .store
                .claim_round(id, &claim(&self.owner, LEASE_TTL))
                .unwrap_or_else(|e| panic!("{id}: re-claim of a live own lease: {e}"));
            shared.log(round, self.w, Step::Rotate);
            self.stats.rotations += 1;
            assert_ne!(rotated.lease_token, lease.lease_token, "{id}: not rotated");
            let before = get(&self.store, id);
            assert_refused(
                do_step(&self.store, id, &lease, Step::StartDelivery, "stale-token"),
                CONFLICT,
                ErrorCode::LeaseMismatch,
                &format!("{id}: write with a superseded token"),
            );
            self.stats.superseded_writes_rejected += 1;
            assert_eq!(before, get(&self.store, id), "{id}: superseded token wrote");
            lease = rotated;
        }
        let pause_before = self
            .rng
            .chance(PAUSE_PERCENT)
            .then(|| LIFECYCLE[self.rng.below(LIFECYCLE.len())]);
        let delivery_key = format!("delivery-{id}-{}", self.owner);
        for step in LIFECYCLE {
            if pause_before == Some(step) {
                self.stats.paused += 1;
                self.paused.push(Paused {
                    round,
                    lease,
                    next: step,
                    epoch: self.epoch,
                });
                return;
            }
            if self.rng.chance(RENEW_PERCENT) {
                let renewed = self
                    .store
                    .renew(id, &lease, LEASE_TTL)
                    .unwrap_or_else(|e| panic!("{id}: renew of a live lease: {e}"));
                shared.log(round, self.w, Step::Renew);
                self.stats.renewals += 1;
                assert_eq!(renewed.lease_token, lease.lease_token, "{id}");
                assert_eq!(renewed.expires_at, shared.clock.now() + Shared::ttl());
                lease = renewed;
            }
            let record = do_step(&self.store, id, &lease, step, &delivery_key)
                .unwrap_or_else(|e| panic!("{id}: {step:?} by its live owner: {e}"));
            shared.log(round, self.w, step);
            self.stats.transitions += 1;
            assert_eq!(record.status, status_after(step), "{id}");
            assert!(record.delivery_attempts <= 1, "{id}: delivered twice");
        }
    }
}

/// Between epochs: the clock passes every lease granted so far, and the rounds abandoned by
/// paused workers (whose stale writes were refused) are failed with `fail_recovery`.
fn supervise(shared: &Shared) {
    shared
        .clock
        .advance(Shared::ttl() + TimeDelta::milliseconds(1));
    let abandoned: Vec<usize> = std::mem::take(&mut *shared.abandoned.lock().unwrap());
    let mut stats = shared.supervisor_stats.lock().unwrap();
    for round in abandoned {
        let id = &shared.round_ids[round];
        let before = get(&shared.supervisor, id);
        let held = before.lease.clone().expect("a paused round has a lease");
        assert!(shared.clock.now() > held.expires_at, "{id}");
        let record = shared
            .supervisor
            .fail_recovery(id, None, "the worker paused past its lease")
            .unwrap_or_else(|e| panic!("{id}: fail_recovery of an expired lease: {e}"));
        shared.log(round, SUPERVISOR, Step::Recovered);
        stats.recovered += 1;
        assert_eq!(record.status, ManagedInputStatus::Failed, "{id}");
        assert_eq!(
            record.failure.as_ref().map(|f| f.code),
            Some(FailureCode::RecoveryUnavailable),
            "{id}"
        );
        assert_eq!(record.lease, Some(held), "{id}: recovery changed the lease");
        assert_eq!(record.delivery_attempts, before.delivery_attempts, "{id}");
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

/// Runs `f`, turning a panic into a recorded failure so that no thread leaves the barrier
/// protocol (a missing thread would hang the others).
fn guarded(shared: &Shared, who: &str, f: impl FnOnce()) {
    if shared.poisoned.load(Ordering::SeqCst) {
        return;
    }
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        shared
            .failures
            .lock()
            .unwrap()
            .push(format!("{who}: {}", panic_text(payload.as_ref())));
        shared.poisoned.store(true, Ordering::SeqCst);
    }
}

/// Attempts every write a terminal round could be offered; all must be refused, nothing
/// written.
fn assert_absorbs(
    store: &SqliteManagedInputStore,
    id: &str,
    last_lease: Option<&ManagedInputLease>,
) -> usize {
    let before = get(store, id);
    let (kind, code) = match before.failure.as_ref().map(|f| f.code) {
        Some(FailureCode::RecoveryUnavailable) => (RECOVERY, ErrorCode::RecoveryUnavailable),
        _ => (STATE, ErrorCode::RoundTerminal),
    };
    let mut probes = 0;
    assert_refused(
        store.claim_round(id, &claim("late-worker", LEASE_TTL)),
        kind,
        code,
        &format!("{id}: claim of a terminal round"),
    );
    let answer = BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "2 Late Lane", "city": "Oslo"})),
    )]);
    assert_refused(
        store.submit_responses(id, &answer, "late-key"),
        kind,
        code,
        &format!("{id}: submit to a terminal round"),
    );
    assert_refused(
        store.fail_recovery(id, None, "again"),
        STATE,
        ErrorCode::RoundTerminal,
        &format!("{id}: second fail_recovery"),
    );
    probes += 3;
    if let Some(lease) = last_lease {
        for step in LIFECYCLE {
            assert_refused(
                do_step(store, id, lease, step, "late-delivery"),
                kind,
                code,
                &format!("{id}: {step:?} on a terminal round"),
            );
        }
        assert_refused(
            store.renew(id, lease, LEASE_TTL),
            kind,
            code,
            &format!("{id}: renew on a terminal round"),
        );
        probes += 4;
    }
    assert_eq!(before, get(store, id), "{id}: a terminal round changed");
    probes
}

#[test]
fn eight_workers_contend_for_rounds_and_paused_workers_are_fenced_off() {
    let seed = RandomTest::LeaseFencing.seed();
    let rounds = ROUNDS * soak_factor();
    let db = TempDb::new();
    let clock = manual_clock();
    let setup = {
        let options = StoreOptions {
            clock: clock.clone(),
            synchronous: Synchronous::Normal,
            ..StoreOptions::default()
        };
        open(&db.path, options)
    };
    let round_ids: Vec<String> = (0..rounds).map(|i| format!("fence-{i:05}")).collect();
    for (i, id) in round_ids.iter().enumerate() {
        let round = NewRound::new(
            id.as_str(),
            "exec-fencing",
            "shipping",
            "book_shipment",
            address_requests(),
        );
        let created = setup
            .create_round(&round)
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        assert!(created.lease.is_none(), "{id}: created unowned");
        let answer = BTreeMap::from([(
            "shipping_address".to_string(),
            ElicitationResponse::accept(
                json!({"street": format!("{i} Main Street"), "city": "Pune"}),
            ),
        )]);
        let answered = setup
            .submit_responses(id, &answer, &format!("answer-{i}"))
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(answered.status, ManagedInputStatus::ResponseValidated);
        assert!(answered.lease.is_none());
    }
    drop(setup);

    let per_wave = rounds.div_ceil(WAVES);
    let waves: Vec<Vec<usize>> = (0..rounds)
        .collect::<Vec<_>>()
        .chunks(per_wave)
        .map(<[usize]>::to_vec)
        .collect();
    // Two more epochs: paused workers find their lease dead, then their round recovered.
    let epochs = waves.len() + 2;
    let supervisor = open(
        &db.path,
        StoreOptions {
            clock: clock.clone(),
            synchronous: Synchronous::Normal,
            ..StoreOptions::default()
        },
    );
    let shared = Shared {
        db,
        clock,
        round_ids,
        waves,
        epochs,
        barrier: Barrier::new(WORKERS),
        log: Mutex::new(Vec::new()),
        abandoned: Mutex::new(Vec::new()),
        supervisor,
        supervisor_stats: Mutex::new(Stats::default()),
        failures: Mutex::new(Vec::new()),
        poisoned: AtomicBool::new(false),
    };
    let started = std::time::Instant::now();
    let start_clock = shared.clock.now();

    let worker_results: Vec<(Stats, Vec<Paused>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..WORKERS)
            .map(|w| {
                let shared = &shared;
                scope.spawn(move || {
                    let mut worker = Worker {
                        shared,
                        w,
                        owner: owner_name(w),
                        store: shared.store(),
                        rng: Rng::new(seed ^ ((w as u64 + 1) * 0x1000_0000_01b3)),
                        paused: Vec::new(),
                        stats: Stats::default(),
                        epoch: 0,
                    };
                    for epoch in 0..shared.epochs {
                        let who = worker.owner.clone();
                        guarded(shared, &who, || worker.run_epoch(epoch));
                        if shared.barrier.wait().is_leader() {
                            guarded(shared, "supervisor", || supervise(shared));
                        }
                        shared.barrier.wait();
                    }
                    (worker.stats, worker.paused)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker thread"))
            .collect()
    });
    let failures = shared.failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));

    let mut stats = Stats::default();
    let mut paused_rounds: BTreeMap<usize, Paused> = BTreeMap::new();
    for (s, paused) in &worker_results {
        stats.add(s);
        for p in paused {
            assert!(paused_rounds.insert(p.round, p.clone()).is_none());
        }
    }
    stats.add(&shared.supervisor_stats.lock().unwrap());
    let log = shared.log.lock().unwrap().clone();

    // Per round: who did what, in the order they did it.
    let mut by_round: BTreeMap<usize, Vec<&Event>> = BTreeMap::new();
    for e in &log {
        by_round.entry(e.round).or_default().push(e);
    }
    let mut last_lease: BTreeMap<usize, ManagedInputLease> = BTreeMap::new();
    let store = shared.store();
    let mut resolved = 0;
    let mut failed = 0;
    for (round, id) in shared.round_ids.iter().enumerate() {
        let events = by_round.get(&round).cloned().unwrap_or_default();
        let claims: Vec<&&Event> = events.iter().filter(|e| e.step == Step::Claim).collect();
        assert_eq!(claims.len(), 1, "{id}: claimed {} times", claims.len());
        let owner = claims[0].owner;
        let owners: BTreeSet<usize> = events
            .iter()
            .filter(|e| e.step != Step::Recovered)
            .map(|e| e.owner)
            .collect();
        assert_eq!(
            owners,
            BTreeSet::from([owner]),
            "{id}: advanced by more than one owner"
        );
        assert_eq!(
            events[0].step,
            Step::Claim,
            "{id}: a write before the claim"
        );
        let record = get(&store, id);
        let lease = record.lease.clone().expect("a claimed round has a lease");
        assert_eq!(lease.owner_id, owner_name(owner), "{id}: lease owner");
        let steps: Vec<Step> = events
            .iter()
            .map(|e| e.step)
            .filter(|s| LIFECYCLE.contains(s))
            .collect();
        let starts = steps.iter().filter(|s| **s == Step::StartDelivery).count();
        assert!(record.delivery_attempts <= 1, "{id}: delivered twice");
        assert_eq!(record.delivery_attempts as usize, starts, "{id}");
        assert_eq!(
            steps,
            LIFECYCLE[..steps.len()].to_vec(),
            "{id}: steps out of order"
        );
        let t = &record.timestamps;
        assert_eq!(t.delivery_started_at.is_some(), !steps.is_empty(), "{id}");
        assert_eq!(t.delivered_at.is_some(), steps.len() >= 2, "{id}");
        match paused_rounds.get(&round) {
            Some(p) => {
                assert_eq!(p.lease.owner_id, owner_name(owner), "{id}");
                assert_eq!(lease, p.lease, "{id}: the paused lease was replaced");
                assert_eq!(record.status, ManagedInputStatus::Failed, "{id}");
                assert_eq!(
                    record.failure.as_ref().map(|f| f.code),
                    Some(FailureCode::RecoveryUnavailable),
                    "{id}"
                );
                assert_eq!(
                    LIFECYCLE.get(steps.len()),
                    Some(&p.next),
                    "{id}: the paused worker wrote after its pause"
                );
                let recoveries = events.iter().filter(|e| e.step == Step::Recovered).count();
                assert_eq!(recoveries, 1, "{id}: recovered {recoveries} times");
                assert!(t.resolved_at.is_none() && t.failed_at.is_some(), "{id}");
                failed += 1;
            }
            None => {
                assert_eq!(record.status, ManagedInputStatus::Resolved, "{id}");
                assert_eq!(steps, LIFECYCLE.to_vec(), "{id}");
                assert!(t.resolved_at.is_some() && t.failed_at.is_none(), "{id}");
                assert!(record.failure.is_none(), "{id}");
                resolved += 1;
            }
        }
        last_lease.insert(round, lease);
    }

    // Terminal states absorb: every further write is refused and changes nothing.
    let mut absorb_probes = 0;
    for (round, id) in shared.round_ids.iter().enumerate() {
        absorb_probes += assert_absorbs(&store, id, last_lease.get(&round));
    }
    let integrity = integrity_check(&shared.db.path);
    assert_eq!(integrity, "ok");

    // The scenario really exercised what it claims to.
    assert_eq!(stats.claims_won, rounds);
    assert_eq!(
        stats.claim_attempts,
        stats.claims_won + stats.claims_refused.values().sum::<usize>()
    );
    assert_eq!(stats.paused, paused_rounds.len());
    assert!(
        stats.paused > 0,
        "no worker paused: the seeds exercise nothing"
    );
    assert_eq!(stats.recovered, stats.paused);
    assert_eq!(stats.expired_writes_rejected, 3 * stats.paused);
    assert_eq!(stats.own_reclaims_rejected, stats.paused);
    assert_eq!(stats.writes_after_recovery_rejected, stats.paused);
    assert!(stats.rotations > 0 && stats.superseded_writes_rejected == stats.rotations);
    assert!(
        stats.claims_refused.get("lease_held").copied().unwrap_or(0) > 0,
        "no claim ever met a live lease: there was no contention"
    );
    assert_eq!(resolved + failed, rounds);

    println!(
        "lease fencing: {rounds} rounds, {WORKERS} workers, {} epochs, \
         clock moved {} s (no sleeps), {:.2} s wall",
        shared.epochs,
        (shared.clock.now() - start_clock).num_seconds(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "  claims: {} attempts, {} won, refused {:?}; {} rotations, {} renewals, {} transitions",
        stats.claim_attempts,
        stats.claims_won,
        stats.claims_refused,
        stats.rotations,
        stats.renewals,
        stats.transitions
    );
    println!(
        "  paused {} workers past their lease: {} expired-lease writes and {} own re-claims \
         rejected, {} rounds recovered, {} writes after recovery rejected",
        stats.paused,
        stats.expired_writes_rejected,
        stats.own_reclaims_rejected,
        stats.recovered,
        stats.writes_after_recovery_rejected
    );
    println!(
        "  fenced writes rejected: {} in total ({} superseded-token, {} forged); \
         {resolved} resolved, {failed} failed recovery_unavailable; {absorb_probes} writes to \
         terminal rounds refused; no round advanced by two owners; integrity_check {integrity}",
        stats.fenced_total(),
        stats.superseded_writes_rejected,
        stats.forged_writes_rejected
    );
}

//! Model-based test of the round lifecycle: random sequences of operations run against the real
//! store (component + SQLite file) and against a reference model written here, independently of
//! the component: a table of allowed transitions and the precedence of checks stated in the
//! specification and architecture.md. After every step the outcome (its kind and code, as the
//! rejection table names them) and the stored record must match the model, no status may move
//! backwards, terminal statuses absorb, and delivery starts at most once. Each run draws a fresh
//! seed (printed; `M3_SEED` replays one), runs 96 x `M3_SOAK` sequences, and checks that they
//! reached every status.

use chrono::{DateTime, TimeDelta, Utc};
use m3::*;
use m3_tests::replay::RandomTest;
use m3_tests::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

/// Sequences at soak factor 1.
const CASES: u32 = 96;

const LEASE_TTL_SECS: i64 = 10;
const DEADLINE_SECS: i64 = 90;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    A,
    B,
    Invalid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    K1,
    K2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    /// The lease the store last handed out.
    Current,
    /// A lease the store never handed out (a replaced or impostor worker).
    Stale,
}

#[derive(Debug, Clone)]
enum Op {
    Submit(Answer, Key),
    Claim(&'static str),
    Renew(Who),
    StartDelivery(Who),
    MarkDelivered(Who),
    Resolve(Who),
    Fail(Who),
    FailRecovery,
    Advance(i64),
}

fn op() -> impl Strategy<Value = Op> {
    let answer = prop_oneof![Just(Answer::A), Just(Answer::B), Just(Answer::Invalid)];
    let key = prop_oneof![Just(Key::K1), Just(Key::K2)];
    let who = prop_oneof![4 => Just(Who::Current), 1 => Just(Who::Stale)];
    prop_oneof![
        3 => (answer, key).prop_map(|(a, k)| Op::Submit(a, k)),
        1 => prop_oneof![Just("worker-1"), Just("worker-2")].prop_map(Op::Claim),
        2 => who.clone().prop_map(Op::Renew),
        3 => who.clone().prop_map(Op::StartDelivery),
        3 => who.clone().prop_map(Op::MarkDelivered),
        3 => who.clone().prop_map(Op::Resolve),
        1 => who.prop_map(Op::Fail),
        1 => Just(Op::FailRecovery),
        2 => (1i64..=12).prop_map(Op::Advance),
    ]
}

/// The error kinds the specification names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Validation,
    Conflict,
    State,
    Recovery,
}

/// An operation's outcome: done, or refused with a kind and a code.
type Outcome = Result<(), (Kind, ErrorCode)>;

const OK: Outcome = Ok(());

fn refused(kind: Kind, code: ErrorCode) -> Outcome {
    Err((kind, code))
}

fn outcome_of<T>(r: &Result<T, ManagedInputError>) -> Outcome {
    let kind = match r {
        Ok(_) => return OK,
        Err(ManagedInputError::Validation(_)) => Kind::Validation,
        Err(ManagedInputError::Conflict(_)) => Kind::Conflict,
        Err(ManagedInputError::State(_)) => Kind::State,
        Err(ManagedInputError::Recovery(_)) => Kind::Recovery,
        Err(e) => panic!("unexpected error kind: {e}"),
    };
    let err = r.as_ref().err().expect("an error");
    Err((
        kind,
        err.code().expect("every kind but engine errors has a code"),
    ))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Status {
    Pending,
    ResponseValidated,
    DeliveryStarted,
    Delivered,
    Resolved,
    Failed,
}

/// The allowed transitions, as a table.
const TRANSITIONS: &[(Status, Status)] = &[
    (Status::Pending, Status::ResponseValidated),
    (Status::ResponseValidated, Status::DeliveryStarted),
    (Status::DeliveryStarted, Status::Delivered),
    (Status::Delivered, Status::Resolved),
    (Status::Pending, Status::Failed),
    (Status::ResponseValidated, Status::Failed),
    (Status::DeliveryStarted, Status::Failed),
    (Status::Delivered, Status::Failed),
];

fn allowed(from: Status, to: Status) -> bool {
    TRANSITIONS.contains(&(from, to))
}

fn rank(s: Status) -> u8 {
    match s {
        Status::Pending => 0,
        Status::ResponseValidated => 1,
        Status::DeliveryStarted => 2,
        Status::Delivered => 3,
        Status::Resolved | Status::Failed => 4,
    }
}

fn from_store(s: ManagedInputStatus) -> Status {
    match s {
        ManagedInputStatus::Pending => Status::Pending,
        ManagedInputStatus::ResponseValidated => Status::ResponseValidated,
        ManagedInputStatus::DeliveryStarted => Status::DeliveryStarted,
        ManagedInputStatus::Delivered => Status::Delivered,
        ManagedInputStatus::Resolved => Status::Resolved,
        ManagedInputStatus::Failed => Status::Failed,
    }
}

#[derive(Debug, Clone)]
struct Model {
    now: DateTime<Utc>,
    status: Status,
    answer: Option<(Answer, Key)>,
    owner: &'static str,
    lease_expires: DateTime<Utc>,
    deadline: DateTime<Utc>,
    delivery_attempts: u32,
    recovered: bool,
}

impl Model {
    fn terminal(&self) -> bool {
        matches!(self.status, Status::Resolved | Status::Failed)
    }

    fn lease_live(&self) -> bool {
        self.now < self.lease_expires
    }

    /// A round that ended refuses every change: for good after recovery, else as terminal.
    fn open_check(&self) -> Outcome {
        if self.recovered {
            return refused(Kind::Recovery, ErrorCode::RecoveryUnavailable);
        }
        if self.terminal() {
            return refused(Kind::State, ErrorCode::RoundTerminal);
        }
        OK
    }

    /// Checks shared by every write of the lease holder: an open round, then the lease (the
    /// token before its expiry).
    fn worker_check(&self, who: Who) -> Outcome {
        self.open_check()?;
        if who == Who::Stale {
            return refused(Kind::Conflict, ErrorCode::LeaseMismatch);
        }
        if !self.lease_live() {
            return refused(Kind::Conflict, ErrorCode::LeaseExpired);
        }
        OK
    }

    fn advance(&mut self, who: Who, to: Status) -> Outcome {
        self.worker_check(who)?;
        if !allowed(self.status, to) {
            return refused(Kind::State, ErrorCode::InvalidTransition);
        }
        if to == Status::DeliveryStarted {
            self.delivery_attempts += 1;
        }
        self.status = to;
        OK
    }

    fn apply(&mut self, op: &Op) -> Outcome {
        match *op {
            Op::Submit(answer, key) => {
                if let Some((stored, stored_key)) = self.answer
                    && stored_key == key
                {
                    return match answer {
                        Answer::Invalid => refused(Kind::Validation, ErrorCode::SchemaViolation),
                        a if a == stored => OK,
                        _ => refused(Kind::Conflict, ErrorCode::IdempotencyConflict),
                    };
                }
                self.open_check()?;
                if self.status != Status::Pending {
                    return refused(Kind::State, ErrorCode::InvalidTransition);
                }
                if !self.lease_live() {
                    return refused(Kind::Recovery, ErrorCode::RecoveryUnavailable);
                }
                if self.now >= self.deadline {
                    return refused(Kind::State, ErrorCode::DeadlineExceeded);
                }
                if answer == Answer::Invalid {
                    return refused(Kind::Validation, ErrorCode::SchemaViolation);
                }
                self.status = Status::ResponseValidated;
                self.answer = Some((answer, key));
                OK
            }
            Op::Claim(owner) => {
                self.open_check()?;
                if !self.lease_live() {
                    return refused(Kind::Recovery, ErrorCode::ReclaimUnsafe);
                }
                if owner != self.owner {
                    return refused(Kind::Conflict, ErrorCode::LeaseHeld);
                }
                self.lease_expires = self.now + TimeDelta::seconds(LEASE_TTL_SECS);
                OK
            }
            Op::Renew(who) => {
                self.worker_check(who)?;
                self.lease_expires = self.now + TimeDelta::seconds(LEASE_TTL_SECS);
                OK
            }
            Op::StartDelivery(who) => self.advance(who, Status::DeliveryStarted),
            Op::MarkDelivered(who) => self.advance(who, Status::Delivered),
            Op::Resolve(who) => self.advance(who, Status::Resolved),
            Op::Fail(who) => self.advance(who, Status::Failed),
            Op::FailRecovery => {
                if self.terminal() {
                    return refused(Kind::State, ErrorCode::RoundTerminal);
                }
                if self.lease_live() {
                    return refused(Kind::Conflict, ErrorCode::LeaseHeld);
                }
                self.status = Status::Failed;
                self.recovered = true;
                OK
            }
            Op::Advance(secs) => {
                self.now += TimeDelta::seconds(secs);
                OK
            }
        }
    }
}

fn answer_map(answer: Answer) -> BTreeMap<String, ElicitationResponse> {
    let content = match answer {
        Answer::A => json!({"street": "1 Main Street", "city": "Pune"}),
        Answer::B => json!({"street": "2 Side Road", "city": "Delhi"}),
        Answer::Invalid => json!({"street": "", "city": 7}),
    };
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(content),
    )])
}

fn key_text(key: Key) -> &'static str {
    match key {
        Key::K1 => "key-1",
        Key::K2 => "key-2",
    }
}

/// Runs `ops` against the store and the model; returns every status the round was in.
fn run(db: &backends::Db, ops: &[Op]) -> BTreeSet<Status> {
    let clock = manual_clock();
    let store = db.open(StoreOptions {
        clock: clock.clone(),
        synchronous: Synchronous::Normal,
        ..Default::default()
    });
    // A round of its own per sequence: sequences of one test share its database.
    static SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let round_id = format!(
        "r{}",
        SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let round = NewRound {
        deadline: Deadline::At(t0() + TimeDelta::seconds(DEADLINE_SECS)),
        owner: Some(claim(
            "worker-1",
            Duration::from_secs(LEASE_TTL_SECS as u64),
        )),
        ..address_round(&round_id)
    };
    let mut current = store.create_round(&round).unwrap().lease.unwrap();
    let stale = ManagedInputLease {
        lease_token: "f".repeat(32),
        ..current.clone()
    };
    let ttl = Duration::from_secs(LEASE_TTL_SECS as u64);
    let mut model = Model {
        now: t0(),
        status: Status::Pending,
        answer: None,
        owner: "worker-1",
        lease_expires: t0() + TimeDelta::seconds(LEASE_TTL_SECS),
        deadline: t0() + TimeDelta::seconds(DEADLINE_SECS),
        delivery_attempts: 0,
        recovered: false,
    };
    let mut previous = Status::Pending;
    let mut reached = BTreeSet::from([Status::Pending]);
    for (step, op) in ops.iter().enumerate() {
        let lease = |who: Who| {
            if who == Who::Current {
                current.clone()
            } else {
                stale.clone()
            }
        };
        let actual = match op {
            Op::Submit(answer, key) => {
                outcome_of(&store.submit_responses(&round_id, &answer_map(*answer), key_text(*key)))
            }
            Op::Claim(owner) => {
                let result = store.claim_round(&round_id, &claim(owner, ttl));
                let outcome = outcome_of(&result);
                if let Ok(granted) = result {
                    current = granted;
                }
                outcome
            }
            Op::Renew(who) => {
                let result = store.renew(&round_id, &lease(*who), ttl);
                let outcome = outcome_of(&result);
                if let Ok(renewed) = result {
                    current = renewed;
                }
                outcome
            }
            Op::StartDelivery(who) => {
                outcome_of(&store.start_delivery(&round_id, &lease(*who), "delivery"))
            }
            Op::MarkDelivered(who) => outcome_of(&store.mark_delivered(&round_id, &lease(*who))),
            Op::Resolve(who) => outcome_of(&store.resolve(&round_id, &lease(*who))),
            Op::Fail(who) => {
                outcome_of(&store.fail(&round_id, &lease(*who), FailureCode::ServerError, "model"))
            }
            Op::FailRecovery => outcome_of(&store.fail_recovery(&round_id, None, "")),
            Op::Advance(secs) => {
                clock.advance(TimeDelta::seconds(*secs));
                OK
            }
        };
        let expected = model.apply(op);
        assert_eq!(
            actual, expected,
            "step {step} {op:?}\nops: {ops:?}\nmodel: {model:?}"
        );
        let record = store.get_round(&round_id).unwrap().unwrap();
        let status = from_store(record.status);
        assert_eq!(status, model.status, "step {step} {op:?}: status");
        assert!(
            rank(status) >= rank(previous),
            "step {step}: {previous:?} -> {status:?} moved backwards"
        );
        if matches!(previous, Status::Resolved | Status::Failed) {
            assert_eq!(status, previous, "terminal statuses absorb");
        }
        assert!(record.delivery_attempts <= 1, "delivery started twice");
        assert_eq!(
            record.delivery_attempts, model.delivery_attempts,
            "step {step}: attempts"
        );
        let stored = record.responses.clone();
        assert_eq!(
            stored,
            model.answer.map(|(a, _)| answer_map(a)),
            "step {step}: stored answer"
        );
        assert_eq!(
            record.idempotency_key.as_deref(),
            model.answer.map(|(_, k)| key_text(k))
        );
        let recovered = record
            .failure
            .as_ref()
            .is_some_and(|f| f.code == FailureCode::RecoveryUnavailable);
        assert_eq!(recovered, model.recovered, "step {step}: recovery");
        previous = status;
        reached.insert(status);
    }
    reached
}

#[test]
fn the_model_itself_allows_only_forward_transitions() {
    for (from, to) in TRANSITIONS {
        assert!(rank(*to) > rank(*from), "{from:?} -> {to:?}");
    }
    for terminal in [Status::Resolved, Status::Failed] {
        assert!(TRANSITIONS.iter().all(|(from, _)| *from != terminal));
    }
}

// The model's tests, on SQLite and on PostgreSQL alike.
m3_tests::on_both_backends! {
    fn the_store_follows_the_reference_lifecycle_model(db) {
        let seed = RandomTest::LifecycleModel.seed_on(db);
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        let cases = CASES * soak_factor() as u32;
        let config = Config {
            cases,
            // A failure is reported with its seed (above), never written into the source tree.
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
        let reached = Mutex::new(BTreeMap::<Status, usize>::new());
        let result = runner.run(&prop::collection::vec(op(), 1..40), |ops| {
            for status in run(db, &ops) {
                *reached.lock().unwrap().entry(status).or_default() += 1;
            }
            Ok(())
        });
        if let Err(failure) = result {
            panic!("{failure}");
        }
        let reached = reached.into_inner().unwrap();
        println!("lifecycle model: {cases} sequences; sequences reaching each status: {reached:?}");
        for status in [
            Status::Pending,
            Status::ResponseValidated,
            Status::DeliveryStarted,
            Status::Delivered,
            Status::Resolved,
            Status::Failed,
        ] {
            assert!(
                reached.contains_key(&status),
                "no sequence reached {status:?}: the run proves nothing about it ({reached:?})"
            );
        }
    }

    /// The sequences proptest once found (they were its saved regressions), run every time.
    fn regression_sequences_the_model_once_caught(db) {
        run(db, &[Op::Submit(Answer::A, Key::K1)]);
        run(db, &[
            Op::Submit(Answer::A, Key::K1),
            Op::StartDelivery(Who::Current),
            Op::MarkDelivered(Who::Current),
            Op::Resolve(Who::Current),
            Op::Submit(Answer::A, Key::K1),
            Op::Submit(Answer::B, Key::K1),
            Op::Submit(Answer::A, Key::K2),
            Op::FailRecovery,
        ]);
    }
}

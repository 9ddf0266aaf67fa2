//! Model-based test of the round lifecycle: random sequences of operations run against the real
//! store (component + SQLite file) and against a reference model written here, independently of
//! the component: a table of allowed transitions and the precedence of checks stated in the
//! specification and architecture.md. After every step the outcome kind and the stored record
//! must match the model, no status may move backwards, terminal statuses absorb, and delivery
//! starts at most once.

use chrono::{DateTime, TimeDelta, Utc};
use m3::*;
use m3_tests::*;
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

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

/// The outcome kinds the specification names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Validation,
    Conflict,
    State,
    Recovery,
}

fn outcome_of<T>(r: &Result<T, ManagedInputError>) -> Outcome {
    match r {
        Ok(_) => Outcome::Ok,
        Err(ManagedInputError::Validation(_)) => Outcome::Validation,
        Err(ManagedInputError::Conflict(_)) => Outcome::Conflict,
        Err(ManagedInputError::State(_)) => Outcome::State,
        Err(ManagedInputError::Recovery(_)) => Outcome::Recovery,
        Err(e) => panic!("unexpected error kind: {e}"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

    /// Checks shared by every write of the lease holder.
    fn worker_check(&self, who: Who) -> Option<Outcome> {
        if self.recovered {
            return Some(Outcome::Recovery);
        }
        if self.terminal() {
            return Some(Outcome::State);
        }
        if who == Who::Stale || !self.lease_live() {
            return Some(Outcome::Conflict);
        }
        None
    }

    fn advance(&mut self, who: Who, to: Status) -> Outcome {
        if let Some(refused) = self.worker_check(who) {
            return refused;
        }
        if !allowed(self.status, to) {
            return Outcome::State;
        }
        if to == Status::DeliveryStarted {
            self.delivery_attempts += 1;
        }
        self.status = to;
        Outcome::Ok
    }

    fn apply(&mut self, op: &Op) -> Outcome {
        match *op {
            Op::Submit(answer, key) => {
                if let Some((stored, stored_key)) = self.answer
                    && stored_key == key
                {
                    return match answer {
                        Answer::Invalid => Outcome::Validation,
                        a if a == stored => Outcome::Ok,
                        _ => Outcome::Conflict,
                    };
                }
                if self.recovered {
                    return Outcome::Recovery;
                }
                if self.status != Status::Pending {
                    return Outcome::State;
                }
                if !self.lease_live() {
                    return Outcome::Recovery;
                }
                if self.now >= self.deadline {
                    return Outcome::State;
                }
                if answer == Answer::Invalid {
                    return Outcome::Validation;
                }
                self.status = Status::ResponseValidated;
                self.answer = Some((answer, key));
                Outcome::Ok
            }
            Op::Claim(owner) => {
                if self.recovered {
                    return Outcome::Recovery;
                }
                if self.terminal() {
                    return Outcome::State;
                }
                if !self.lease_live() {
                    return Outcome::Recovery;
                }
                if owner != self.owner {
                    return Outcome::Conflict;
                }
                self.lease_expires = self.now + TimeDelta::seconds(LEASE_TTL_SECS);
                Outcome::Ok
            }
            Op::Renew(who) => {
                if let Some(refused) = self.worker_check(who) {
                    return refused;
                }
                self.lease_expires = self.now + TimeDelta::seconds(LEASE_TTL_SECS);
                Outcome::Ok
            }
            Op::StartDelivery(who) => self.advance(who, Status::DeliveryStarted),
            Op::MarkDelivered(who) => self.advance(who, Status::Delivered),
            Op::Resolve(who) => self.advance(who, Status::Resolved),
            Op::Fail(who) => self.advance(who, Status::Failed),
            Op::FailRecovery => {
                if self.terminal() {
                    return Outcome::State;
                }
                if self.lease_live() {
                    return Outcome::Conflict;
                }
                self.status = Status::Failed;
                self.recovered = true;
                Outcome::Ok
            }
            Op::Advance(secs) => {
                self.now += TimeDelta::seconds(secs);
                Outcome::Ok
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

fn run(ops: &[Op]) {
    let db = TempDb::new();
    let clock = manual_clock();
    let store = open(
        &db.path,
        StoreOptions {
            clock: clock.clone(),
            synchronous: Synchronous::Normal,
            ..Default::default()
        },
    );
    let round = NewRound {
        deadline: Deadline::At(t0() + TimeDelta::seconds(DEADLINE_SECS)),
        owner: Some(claim(
            "worker-1",
            Duration::from_secs(LEASE_TTL_SECS as u64),
        )),
        ..address_round("r1")
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
                outcome_of(&store.submit_responses("r1", &answer_map(*answer), key_text(*key)))
            }
            Op::Claim(owner) => {
                let result = store.claim_round("r1", &claim(owner, ttl));
                let outcome = outcome_of(&result);
                if let Ok(granted) = result {
                    current = granted;
                }
                outcome
            }
            Op::Renew(who) => {
                let result = store.renew("r1", &lease(*who), ttl);
                let outcome = outcome_of(&result);
                if let Ok(renewed) = result {
                    current = renewed;
                }
                outcome
            }
            Op::StartDelivery(who) => {
                outcome_of(&store.start_delivery("r1", &lease(*who), "delivery"))
            }
            Op::MarkDelivered(who) => outcome_of(&store.mark_delivered("r1", &lease(*who))),
            Op::Resolve(who) => outcome_of(&store.resolve("r1", &lease(*who))),
            Op::Fail(who) => {
                outcome_of(&store.fail("r1", &lease(*who), FailureCode::ServerError, "model"))
            }
            Op::FailRecovery => outcome_of(&store.fail_recovery("r1", None, "")),
            Op::Advance(secs) => {
                clock.advance(TimeDelta::seconds(*secs));
                Outcome::Ok
            }
        };
        let expected = model.apply(op);
        assert_eq!(
            actual, expected,
            "step {step} {op:?}\nops: {ops:?}\nmodel: {model:?}"
        );
        let record = store.get_round("r1").unwrap().unwrap();
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
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_store_follows_the_reference_lifecycle_model(ops in prop::collection::vec(op(), 1..40)) {
        run(&ops);
    }
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

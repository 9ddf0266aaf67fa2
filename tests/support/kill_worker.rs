//! One worker process of `random_kills` (`m3-test-helper kill-worker <db> <worker> <rounds>`):
//! it loops over rounds on one database (`create_round` owned by the worker with a short lease,
//! `submit_responses` with an idempotency key, `renew`, `start_delivery`, `mark_delivered`,
//! `resolve`) and prints `M3-RK-ACK <round> <step>` after each step the store acknowledged, until
//! its rounds are done or the parent kills it. What the parent checks afterwards follows from the
//! names and answers below, which both sides share.

use crate::address_requests;
use crate::backends::open_named;
use anyhow::{Context, Result, ensure};
use m3::{
    DatabaseStore, ElicitationResponse, ManagedInputError, ManagedInputRecord, ManagedInputStatus,
    ManagedInputStore, NewRound, OwnerClaim, StoreOptions, Synchronous,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

/// Each worker's lease: short, so that recovery can run soon after the last kill.
pub const LEASE: Duration = Duration::from_secs(2);

/// The line a worker prints once its store is open and its instance warm.
pub const READY: &str = "M3-RK-READY";
/// Starts the line a worker prints after each acknowledged step: `<round> <step>` follow.
pub const ACK: &str = "M3-RK-ACK ";
/// Starts the line a worker prints when the store returned an error.
pub const ERROR: &str = "M3-RK-ERROR ";

/// `synchronous=NORMAL`: in WAL mode a commit is durable across a crash of the process (the
/// WAL frames are in the OS page cache once `write` returns, and SIGKILL does not take the
/// kernel down); only a power loss or OS crash can lose the last commits. A SIGKILL is a
/// process crash, so NORMAL is enough here and much faster than FULL's fsyncs.
pub fn fast_options() -> StoreOptions {
    StoreOptions {
        synchronous: Synchronous::Normal,
        ..StoreOptions::default()
    }
}

/// The steps a worker takes per round, in order; each is acknowledged by a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// `create_round`.
    Create,
    /// `submit_responses`.
    Submit,
    /// `renew`.
    Renew,
    /// `start_delivery`.
    StartDelivery,
    /// `mark_delivered`.
    MarkDelivered,
    /// `resolve`.
    Resolve,
}

impl Step {
    /// Every step, in the order a worker takes them.
    pub const ALL: [Step; 6] = [
        Step::Create,
        Step::Submit,
        Step::Renew,
        Step::StartDelivery,
        Step::MarkDelivered,
        Step::Resolve,
    ];

    /// The store method's name, as acknowledged.
    pub fn name(self) -> &'static str {
        match self {
            Step::Create => "create_round",
            Step::Submit => "submit_responses",
            Step::Renew => "renew",
            Step::StartDelivery => "start_delivery",
            Step::MarkDelivered => "mark_delivered",
            Step::Resolve => "resolve",
        }
    }

    /// The step acknowledged as `name`.
    pub fn parse(name: &str) -> Option<Step> {
        Step::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The least status a round must have once this step was acknowledged.
    pub fn status(self) -> ManagedInputStatus {
        match self {
            Step::Create => ManagedInputStatus::Pending,
            Step::Submit | Step::Renew => ManagedInputStatus::ResponseValidated,
            Step::StartDelivery => ManagedInputStatus::DeliveryStarted,
            Step::MarkDelivered => ManagedInputStatus::Delivered,
            Step::Resolve => ManagedInputStatus::Resolved,
        }
    }
}

/// The id of `worker`'s round number `i`.
pub fn round_id(worker: &str, i: usize) -> String {
    format!("{worker}-r{i}")
}

/// The idempotency key of the answer to `round_id`.
pub fn submit_key(round_id: &str) -> String {
    format!("submit-{round_id}")
}

/// The idempotency key of the delivery of `round_id`.
pub fn delivery_key(round_id: &str) -> String {
    format!("deliver-{round_id}")
}

/// The answer to `round_id`: it names the round, so a stored answer can be traced to its round.
pub fn answer(round_id: &str) -> BTreeMap<String, ElicitationResponse> {
    BTreeMap::from([(
        "shipping_address".to_string(),
        ElicitationResponse::accept(json!({"street": "1 Main Street", "city": round_id})),
    )])
}

/// Round `round_id` of `worker`, owned by it with a [`LEASE`].
fn new_round(worker: &str, round_id: &str) -> NewRound {
    NewRound::new(
        round_id,
        format!("exec-{worker}"),
        "shipping",
        "book_shipment",
        address_requests(),
    )
    .owned_by(OwnerClaim {
        owner_id: worker.to_string(),
        lease_ttl: LEASE,
    })
}

/// Prints `line` in one write: a kill cannot leave half an acknowledgement in the pipe.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(format!("{line}\n").as_bytes());
    let _ = out.flush();
}

/// Acknowledges `step` of `round_id`.
fn ack(round_id: &str, step: Step) {
    say(&format!("{ACK}{round_id} {}", step.name()));
}

/// One round of a worker, acknowledging each step as the store returns it.
fn run_round(store: &DatabaseStore, worker: &str, round_id: &str) -> Result<()> {
    let expect = |record: &ManagedInputRecord, status: ManagedInputStatus| {
        ensure!(
            record.status == status,
            "{round_id}: expected {status}, the store returned {}",
            record.status
        );
        Ok(())
    };
    let created = store.create_round(&new_round(worker, round_id))?;
    expect(&created, ManagedInputStatus::Pending)?;
    let lease = created.lease.context("an owned round without a lease")?;
    ack(round_id, Step::Create);
    let submitted = store.submit_responses(round_id, &answer(round_id), &submit_key(round_id))?;
    expect(&submitted, ManagedInputStatus::ResponseValidated)?;
    ack(round_id, Step::Submit);
    let lease = store.renew(round_id, &lease, LEASE)?;
    ack(round_id, Step::Renew);
    let started = store.start_delivery(round_id, &lease, &delivery_key(round_id))?;
    expect(&started, ManagedInputStatus::DeliveryStarted)?;
    ack(round_id, Step::StartDelivery);
    let delivered = store.mark_delivered(round_id, &lease)?;
    expect(&delivered, ManagedInputStatus::Delivered)?;
    ack(round_id, Step::MarkDelivered);
    let resolved = store.resolve(round_id, &lease)?;
    expect(&resolved, ManagedInputStatus::Resolved)?;
    ack(round_id, Step::Resolve);
    Ok(())
}

/// The worker process `worker` on the database `db` names: says it is ready, then runs `rounds`
/// rounds to the end; an error from the store is printed as an [`ERROR`] line and returned.
pub fn run(db: &str, worker: &str, rounds: usize) -> Result<()> {
    let store = open_named(db, fast_options());
    // Instantiate the component before saying ready, so that kills land under load.
    store.get_round("warm-up")?;
    say(READY);
    for i in 0..rounds {
        let id = round_id(worker, i);
        if let Err(e) = run_round(&store, worker, &id) {
            let text = match e.downcast_ref::<ManagedInputError>() {
                Some(m) => format!("{id}: {} ({:?}): {m}", m.kind_name(), m.code()),
                None => format!("{id}: {e:#}"),
            };
            say(&format!("{ERROR}{text}"));
            return Err(e);
        }
    }
    Ok(())
}

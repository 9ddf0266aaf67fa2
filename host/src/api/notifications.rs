//! The notification ledger, for `m3 serve --notify`: what each notification target has been
//! sent, kept in the database so that a restart resumes where it left off and several servers
//! on one database deliver each event once between them. Targets are named by an id their
//! caller derives (a digest: a webhook's address may hold a secret) and a label to show.
//! Times are the store's clock (on PostgreSQL, the server's).

use crate::api::managed_input::{DatabaseStore, StoreResult, store_failure};
use crate::store::statements::notifications::{QueuedRow, Settled};
use chrono::{DateTime, Utc};
use std::time::Duration;

/// One event to queue for a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationEvent {
    /// The event's id: the same event always has the same id, so it is queued once per target
    /// whoever sees it, and a receiver can drop a repeat by it.
    pub event_id: String,
    /// When it happened: a target's queue leaves in this order.
    pub at: DateTime<Utc>,
    /// The round whose events leave in order (an execution's event has none).
    pub round_id: Option<String>,
    /// The event as it is delivered (it holds no secret: it is stored as it is).
    pub document: String,
}

/// An event claimed for delivery by one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedNotification {
    /// The event's id.
    pub event_id: String,
    /// How many deliveries were tried before this one.
    pub attempts: u32,
    /// The event as it is delivered.
    pub document: String,
}

/// How a claimed event's delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotificationOutcome {
    /// The target took it.
    Delivered,
    /// It failed; try again after this long.
    Retry {
        /// Why it failed (no secret: shown by `m3 doctor`).
        error: String,
        /// How long until the next try.
        after: Duration,
    },
    /// It failed for good (too old to try again).
    Abandoned {
        /// Why it failed last.
        error: String,
    },
}

/// What the ledger holds for one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationTargetReport {
    /// The target's id.
    pub target_id: String,
    /// What it is shown as.
    pub label: String,
    /// Events from this time on are sent to it.
    pub since: DateTime<Utc>,
    /// Events waiting for delivery.
    pub queued: u64,
    /// Events delivered (and not yet forgotten).
    pub delivered: u64,
    /// Events given up on.
    pub abandoned: u64,
    /// When the oldest waiting event was queued.
    pub oldest_queued: Option<DateTime<Utc>>,
    /// The most tries a waiting event has had.
    pub most_attempts: u32,
    /// The latest failure's description, if any.
    pub last_error: Option<String>,
}

fn ns(at: DateTime<Utc>) -> i64 {
    at.timestamp_nanos_opt().unwrap_or(i64::MAX)
}

fn time(ns: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_nanos(ns)
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

impl DatabaseStore {
    fn ledger_now(&self) -> i64 {
        ns(self.options().clock.now())
    }

    /// Registers a notification target (its events start at `start` the first time: a
    /// server's start, say; later, the start it has is kept and its label updated); when its
    /// events start.
    pub fn register_notification_target(
        &self,
        target_id: &str,
        label: &str,
        start: DateTime<Utc>,
    ) -> StoreResult<DateTime<Utc>> {
        let start = ns(start);
        self.backend()
            .on_ledger(|l| l.register(target_id, label, start))
            .map(time)
            .map_err(store_failure)
    }

    /// Queues `events` for `target_id` (a few statements for many events); how many were new
    /// (the others were queued before, by this server or another).
    pub fn enqueue_notifications(
        &self,
        target_id: &str,
        events: &[NotificationEvent],
    ) -> StoreResult<u64> {
        let now = self.ledger_now();
        let rows: Vec<QueuedRow> = events
            .iter()
            .map(|event| QueuedRow {
                event_id: event.event_id.clone(),
                seq: ns(event.at),
                round_id: event.round_id.clone(),
                document: event.document.clone(),
            })
            .collect();
        self.backend()
            .on_ledger(|l| l.enqueue(target_id, &rows, now))
            .map_err(store_failure)
    }

    /// Claims up to `limit` due events of `target_id` for `owner` for `lease`, oldest first; an
    /// event waits while an earlier one of its round is queued, and a claim another server holds
    /// is left to it until its lease ends.
    pub fn claim_notifications(
        &self,
        target_id: &str,
        owner: &str,
        lease: Duration,
        limit: u32,
    ) -> StoreResult<Vec<ClaimedNotification>> {
        let now = self.ledger_now();
        let until = now.saturating_add(i64::try_from(lease.as_nanos()).unwrap_or(i64::MAX));
        let rows = self
            .backend()
            .on_ledger(|l| l.claim(target_id, owner, now, until, limit))
            .map_err(store_failure)?;
        Ok(rows
            .into_iter()
            .map(|r| ClaimedNotification {
                event_id: r.event_id,
                attempts: u32::try_from(r.attempts).unwrap_or(u32::MAX),
                document: r.document,
            })
            .collect())
    }

    /// Settles `owner`'s claim on an event; `false` when the claim was no longer `owner`'s
    /// (its lease ended and another server took it).
    pub fn settle_notification(
        &self,
        target_id: &str,
        event_id: &str,
        owner: &str,
        outcome: &NotificationOutcome,
    ) -> StoreResult<bool> {
        let now = self.ledger_now();
        let settled = match outcome {
            NotificationOutcome::Delivered => Settled::Delivered,
            NotificationOutcome::Retry { error, after } => Settled::Retry {
                error,
                due_at_ns: now.saturating_add(i64::try_from(after.as_nanos()).unwrap_or(i64::MAX)),
            },
            NotificationOutcome::Abandoned { error } => Settled::Abandoned { error },
        };
        self.backend()
            .on_ledger(|l| l.settle(target_id, event_id, owner, settled, now))
            .map_err(store_failure)
    }

    /// When `target_id`'s next waiting event is due, if one waits.
    pub fn next_notification_due(&self, target_id: &str) -> StoreResult<Option<DateTime<Utc>>> {
        self.backend()
            .on_ledger(|l| l.next_due(target_id))
            .map(|due| due.map(time))
            .map_err(store_failure)
    }

    /// Forgets `target_id`'s events settled more than `age` ago (and never queues them again);
    /// how many were forgotten.
    pub fn prune_notifications(&self, target_id: &str, age: Duration) -> StoreResult<u64> {
        let before = self
            .ledger_now()
            .saturating_sub(i64::try_from(age.as_nanos()).unwrap_or(i64::MAX));
        self.backend()
            .on_ledger(|l| l.prune(target_id, before))
            .map_err(store_failure)
    }

    /// Every registered target's ledger, for `m3 doctor`.
    pub fn notification_report(&self) -> StoreResult<Vec<NotificationTargetReport>> {
        let rows = self
            .backend()
            .on_ledger(|l| l.report())
            .map_err(store_failure)?;
        Ok(rows
            .into_iter()
            .map(|r| NotificationTargetReport {
                target_id: r.target_id,
                label: r.label,
                since: time(r.since_ns),
                queued: count(r.queued),
                delivered: count(r.delivered),
                abandoned: count(r.abandoned),
                oldest_queued: r.oldest_queued_ns.map(time),
                most_attempts: r
                    .most_attempts
                    .map_or(0, |a| u32::try_from(a).unwrap_or(u32::MAX)),
                last_error: r.last_error,
            })
            .collect())
    }
}

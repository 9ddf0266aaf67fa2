//! The notification ledger of `m3 serve --notify` (tables `notification_targets` and
//! `notifications`): a target's starting time, an event queued once per target (`ON CONFLICT DO
//! NOTHING` on the event's id, so every server that sees it may queue it), claimed by one
//! server at a time for a while (one `UPDATE ... RETURNING`: the oldest due events, each only
//! when no earlier event of its round waits, so a round's events leave in order), and settled
//! by its claimer: delivered, due again later, or abandoned. Every statement runs on its own,
//! outside the rounds' transactions: the ledger never holds an execution's lock.

use super::{On, Sql, int, text};
use crate::store::error::StoreError;

const REGISTER_TARGET: &str = "INSERT INTO notification_targets (target_id, label, since_ns) \
     VALUES (?1, ?2, ?3) ON CONFLICT (target_id) DO UPDATE SET label = excluded.label";
const TARGET_SINCE: &str = "SELECT since_ns FROM notification_targets WHERE target_id = ?1";
/// The head of a queueing statement; each row adds its values (`ENQUEUED_ROW`).
const ENQUEUE: &str = "INSERT INTO notifications (target_id, event_id, seq, round_id, status, \
     attempts, due_at_ns, claimed_by, claimed_until_ns, created_at_ns, updated_at_ns, last_error, \
     document) VALUES ";
/// How many rows one queueing statement takes at most (so a look that finds many events
/// commits a few statements, not one per event).
const ENQUEUE_CHUNK: usize = 64;
const CLAIM: &str = "UPDATE notifications SET claimed_by = ?2, claimed_until_ns = ?4 \
     WHERE target_id = ?1 AND status = 'queued' \
     AND (claimed_until_ns IS NULL OR claimed_until_ns <= ?3) \
     AND event_id IN (SELECT n.event_id FROM notifications n \
         WHERE n.target_id = ?1 AND n.status = 'queued' AND n.due_at_ns <= ?3 \
         AND (n.claimed_until_ns IS NULL OR n.claimed_until_ns <= ?3) \
         AND NOT EXISTS (SELECT 1 FROM notifications o WHERE o.target_id = n.target_id \
             AND o.round_id = n.round_id AND o.status = 'queued' \
             AND (o.seq < n.seq OR (o.seq = n.seq AND o.event_id < n.event_id))) \
         ORDER BY n.seq, n.event_id LIMIT ?5) \
     RETURNING event_id, seq, attempts, document";
const DELIVERED: &str = "UPDATE notifications SET status = 'delivered', claimed_by = NULL, \
     claimed_until_ns = NULL, attempts = attempts + 1, last_error = NULL, updated_at_ns = ?4 \
     WHERE target_id = ?1 AND event_id = ?2 AND claimed_by = ?3 AND status = 'queued'";
const RETRY: &str = "UPDATE notifications SET claimed_by = NULL, claimed_until_ns = NULL, \
     attempts = attempts + 1, last_error = ?4, due_at_ns = ?5, updated_at_ns = ?6 \
     WHERE target_id = ?1 AND event_id = ?2 AND claimed_by = ?3 AND status = 'queued'";
const ABANDONED: &str = "UPDATE notifications SET status = 'abandoned', claimed_by = NULL, \
     claimed_until_ns = NULL, attempts = attempts + 1, last_error = ?4, updated_at_ns = ?5 \
     WHERE target_id = ?1 AND event_id = ?2 AND claimed_by = ?3 AND status = 'queued'";
const NEXT_DUE: &str = "SELECT min(due_at_ns) FROM notifications \
     WHERE target_id = ?1 AND status = 'queued'";
const PRUNE: &str = "DELETE FROM notifications WHERE target_id = ?1 AND status <> 'queued' \
     AND updated_at_ns < ?2";
const ADVANCE_SINCE: &str = "UPDATE notification_targets SET since_ns = ?2 \
     WHERE target_id = ?1 AND since_ns < ?2";
const REPORT: &str = "SELECT t.target_id, t.label, t.since_ns, \
     (SELECT count(*) FROM notifications n WHERE n.target_id = t.target_id \
         AND n.status = 'queued'), \
     (SELECT count(*) FROM notifications n WHERE n.target_id = t.target_id \
         AND n.status = 'delivered'), \
     (SELECT count(*) FROM notifications n WHERE n.target_id = t.target_id \
         AND n.status = 'abandoned'), \
     (SELECT min(n.created_at_ns) FROM notifications n WHERE n.target_id = t.target_id \
         AND n.status = 'queued'), \
     (SELECT max(n.attempts) FROM notifications n WHERE n.target_id = t.target_id \
         AND n.status = 'queued'), \
     (SELECT n.last_error FROM notifications n WHERE n.target_id = t.target_id \
         AND n.last_error IS NOT NULL ORDER BY n.updated_at_ns DESC, n.event_id LIMIT 1) \
     FROM notification_targets t ORDER BY t.target_id";

/// One event for a target's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueuedRow {
    /// The event's id (stable: the same event always has the same id).
    pub event_id: String,
    /// Its place in the queue (the event's time).
    pub seq: i64,
    /// The round whose events leave in order, if it is a round's.
    pub round_id: Option<String>,
    /// The event as delivered.
    pub document: String,
}

/// An event claimed for delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimedRow {
    pub event_id: String,
    pub seq: i64,
    pub attempts: i64,
    pub document: String,
}

/// How a claimed event's delivery ended.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Settled<'a> {
    Delivered,
    Retry { error: &'a str, due_at_ns: i64 },
    Abandoned { error: &'a str },
}

/// What a target's ledger holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TargetRow {
    pub target_id: String,
    pub label: String,
    pub since_ns: i64,
    pub queued: i64,
    pub delivered: i64,
    pub abandoned: i64,
    pub oldest_queued_ns: Option<i64>,
    pub most_attempts: Option<i64>,
    pub last_error: Option<String>,
}

/// Registers `target_id` (its events start at `start_ns` the first time; a later registration
/// keeps that start and updates the label); the time its events start from.
pub(crate) fn register(
    s: &impl Sql,
    target_id: &str,
    label: &str,
    start_ns: i64,
) -> Result<i64, StoreError> {
    s.execute(
        On::Nothing,
        REGISTER_TARGET,
        vec![target_id.into(), label.into(), start_ns.into()],
    )?;
    since(s, target_id)?
        .ok_or_else(|| StoreError::Failure("a registered notification target is missing".into()))
}

/// The time `target_id`'s events start from, if it is registered.
pub(crate) fn since(s: &impl Sql, target_id: &str) -> Result<Option<i64>, StoreError> {
    let rows = s.query(On::Nothing, TARGET_SINCE, vec![target_id.into()], |c| {
        int(c, 0)
    })?;
    Ok(rows.into_iter().next())
}

/// Queues `rows` for `target_id` (each statement all or nothing, at most [`ENQUEUE_CHUNK`]
/// rows); how many were new (the others were queued before).
pub(crate) fn enqueue(
    s: &impl Sql,
    target_id: &str,
    rows: &[QueuedRow],
    now_ns: i64,
) -> Result<u64, StoreError> {
    let mut queued = 0;
    for chunk in rows.chunks(ENQUEUE_CHUNK) {
        let mut sql = ENQUEUE.to_string();
        let mut args: Vec<super::Value> = vec![target_id.into(), now_ns.into()];
        for (i, row) in chunk.iter().enumerate() {
            let at = 3 + 4 * i;
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!(
                "(?1, ?{}, ?{}, ?{}, 'queued', 0, ?2, NULL, NULL, ?2, ?2, NULL, ?{})",
                at,
                at + 1,
                at + 2,
                at + 3
            ));
            args.extend([
                row.event_id.as_str().into(),
                row.seq.into(),
                row.round_id.clone().into(),
                row.document.as_str().into(),
            ]);
        }
        sql.push_str(" ON CONFLICT (target_id, event_id) DO NOTHING");
        queued += s.execute(On::Nothing, &sql, args)?;
    }
    Ok(queued)
}

/// Claims up to `limit` due events of `target_id` for `owner` until `until_ns`.
pub(crate) fn claim(
    s: &impl Sql,
    target_id: &str,
    owner: &str,
    now_ns: i64,
    until_ns: i64,
    limit: u32,
) -> Result<Vec<ClaimedRow>, StoreError> {
    let mut rows = s.query(
        On::Nothing,
        CLAIM,
        vec![
            target_id.into(),
            owner.into(),
            now_ns.into(),
            until_ns.into(),
            i64::from(limit).into(),
        ],
        |c| {
            Ok(ClaimedRow {
                event_id: text(c, 0)?,
                seq: int(c, 1)?,
                attempts: int(c, 2)?,
                document: text(c, 3)?,
            })
        },
    )?;
    // `RETURNING` keeps no order.
    rows.sort_by(|a, b| (a.seq, &a.event_id).cmp(&(b.seq, &b.event_id)));
    Ok(rows)
}

/// Settles `owner`'s claim on an event; `false` when the claim was no longer `owner`'s.
pub(crate) fn settle(
    s: &impl Sql,
    target_id: &str,
    event_id: &str,
    owner: &str,
    settled: Settled<'_>,
    now_ns: i64,
) -> Result<bool, StoreError> {
    let key = vec![target_id.into(), event_id.into(), owner.into()];
    let (sql, more): (&str, Vec<super::Value>) = match settled {
        Settled::Delivered => (DELIVERED, vec![now_ns.into()]),
        Settled::Retry { error, due_at_ns } => {
            (RETRY, vec![error.into(), due_at_ns.into(), now_ns.into()])
        }
        Settled::Abandoned { error } => (ABANDONED, vec![error.into(), now_ns.into()]),
    };
    let args = key.into_iter().chain(more).collect();
    Ok(s.execute(On::Nothing, sql, args)? == 1)
}

/// When `target_id`'s next queued event is due, if any is queued.
pub(crate) fn next_due(s: &impl Sql, target_id: &str) -> Result<Option<i64>, StoreError> {
    let rows = s.query(On::Nothing, NEXT_DUE, vec![target_id.into()], |c| c.int(0))?;
    Ok(rows.into_iter().next().flatten())
}

/// Forgets `target_id`'s settled events settled before `before_ns`, and moves its start there
/// so that they are never queued again; how many were forgotten.
pub(crate) fn prune(s: &impl Sql, target_id: &str, before_ns: i64) -> Result<u64, StoreError> {
    s.execute(
        On::Nothing,
        ADVANCE_SINCE,
        vec![target_id.into(), before_ns.into()],
    )?;
    s.execute(On::Nothing, PRUNE, vec![target_id.into(), before_ns.into()])
}

/// Every registered target's ledger, by target id.
pub(crate) fn report(s: &impl Sql) -> Result<Vec<TargetRow>, StoreError> {
    s.query(On::Nothing, REPORT, Vec::new(), |c| {
        Ok(TargetRow {
            target_id: text(c, 0)?,
            label: text(c, 1)?,
            since_ns: int(c, 2)?,
            queued: int(c, 3)?,
            delivered: int(c, 4)?,
            abandoned: int(c, 5)?,
            oldest_queued_ns: c.int(6)?,
            most_attempts: c.int(7)?,
            last_error: c.text(8)?,
        })
    })
}

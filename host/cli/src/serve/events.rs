//! `/api/events/stream`: the store's changes as Server-Sent Events. ONE watcher task per server
//! looks at [`m3::Executions::data_version`] (cheap, every [`POLL`]), and only when it moved
//! reads the rounds and executions, diffs them with what it saw before and broadcasts each
//! change to every subscriber. A subscriber too slow to keep up misses the oldest changes and
//! gets a `lagged` event instead; nobody else waits for it. A round that went through several
//! statuses between two looks is said in every step it took (`round_answered` before its
//! `round_resolved` or `round_failed` when it was answered), so a stream never skips one.
//! Streams end when the server stops (a graceful stop would otherwise wait for them forever).

use super::Shared;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use futures_util::StreamExt;
use m3::{ExecutionStatus, ManagedInputStatus, RoundFilter};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

/// How many changes wait for a subscriber before it lags (`--event-capacity`, hidden, changes
/// it for tests).
pub const CAPACITY: usize = 256;
/// How often the watcher asks whether the database changed.
const POLL: Duration = Duration::from_millis(100);

/// One change: its kind (the SSE event name) and its data.
#[derive(Debug, Clone)]
pub struct Change {
    /// `round_created`, `round_answered`, `round_resolved`, `round_failed` or
    /// `execution_finished`.
    pub kind: &'static str,
    /// `{round_id?, execution_id, status}` or `{execution_id, outcome}`.
    pub data: Value,
}

/// What the watcher saw last: each round's status and each execution's outcome (once
/// finished).
#[derive(Debug, Default)]
struct Seen {
    rounds: HashMap<String, ManagedInputStatus>,
    finished: HashMap<String, Option<String>>,
}

/// The store as the watcher sees it now.
fn look(executions: &m3::Executions) -> anyhow::Result<(Looked, Seen)> {
    // Executions first, rounds second (two reads, not one snapshot): a worker ends an
    // execution's rounds before the execution, so a finished execution read here has its
    // rounds' ends in the later read, and `execution_finished` never comes before them.
    let (states, _unreadable) = executions.states_reporting()?;
    let (records, _unreadable) = executions
        .store()
        .list_rounds_reporting(&RoundFilter::default())?;
    let mut seen = Seen::default();
    for r in &records {
        seen.rounds.insert(r.pending.round_id.clone(), r.status);
    }
    for state in &states {
        if state.lifecycle == ExecutionStatus::Finished {
            let outcome = state.outcome.as_ref().map(|o| o.kind.as_str().to_string());
            seen.finished.insert(state.execution_id.clone(), outcome);
        }
    }
    Ok(((records, states), seen))
}

/// What one look read: every round's record and every execution's state.
type Looked = (Vec<m3::ManagedInputRecord>, Vec<m3::ExecutionState>);

/// Hands a look to the notifier, if the server has one (on the blocking pool).
fn notify(shared: &Shared, looked: &Looked) {
    if let Some(notifier) = shared.notifier.get() {
        notifier.observe(&looked.0, &looked.1);
    }
}

/// The changes from `before` to `now` (rounds first, then finished executions).
fn diff(before: &Seen, records: &[m3::ManagedInputRecord], now: &Seen) -> Vec<Change> {
    let mut changes = Vec::new();
    for r in records {
        let id = &r.pending.round_id;
        let old = before.rounds.get(id);
        if old == Some(&r.status) {
            continue;
        }
        let data = json!({
            "round_id": id,
            "execution_id": r.pending.execution_id,
            "status": r.status.as_str(),
        });
        if old.is_none() {
            changes.push(Change {
                kind: "round_created",
                data: data.clone(),
            });
        }
        // Answered now (or on the way to its end) and not seen answered before: said once,
        // even when it was resolved or failed before this look.
        let seen_answered = matches!(
            old,
            Some(
                ManagedInputStatus::ResponseValidated
                    | ManagedInputStatus::DeliveryStarted
                    | ManagedInputStatus::Delivered
            )
        );
        if r.timestamps.response_validated_at.is_some() && !seen_answered {
            changes.push(Change {
                kind: "round_answered",
                data: data.clone(),
            });
        }
        let end = match r.status {
            ManagedInputStatus::Resolved => Some("round_resolved"),
            ManagedInputStatus::Failed => Some("round_failed"),
            _ => None,
        };
        if let Some(kind) = end {
            changes.push(Change { kind, data });
        }
    }
    for (id, outcome) in &now.finished {
        if !before.finished.contains_key(id) {
            changes.push(Change {
                kind: "execution_finished",
                data: json!({"execution_id": id, "outcome": outcome}),
            });
        }
    }
    changes
}

/// Takes the watcher's first look (what it sees is no change, unless `from_nothing`: then
/// everything it sees is), then starts the server's one watcher task: every change after this
/// returns is streamed. Called once the database exists.
pub async fn watch(shared: Arc<Shared>, from_nothing: bool) {
    let Some(executions) = shared.executions.get().cloned() else {
        return;
    };
    let first_shared = shared.clone();
    let first_executions = executions.clone();
    let first = tokio::task::spawn_blocking(move || {
        let executions = first_executions;
        let version = executions.data_version()?;
        let (looked, seen) = look(&executions)?;
        notify(&first_shared, &looked);
        Ok::<_, anyhow::Error>((version, seen))
    })
    .await;
    let (mut version, mut seen) = match first {
        _ if from_nothing => (None, Some(Seen::default())),
        Ok(Ok((version, seen))) => (Some(version), Some(seen)),
        _ => (None, None), // Unreadable for now: the first tick looks again.
    };
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(POLL);
        loop {
            // A change this server made itself is looked at at once (its own connection's
            // commits may not move the data version it reads).
            let forced = tokio::select! {
                _ = tick.tick() => false,
                () = shared.nudge.notified() => true,
            };
            let executions = executions.clone();
            let notifying = shared.clone();
            let looked = tokio::task::spawn_blocking(move || {
                let now = executions.data_version()?;
                if version == Some(now) && !forced {
                    return Ok(None);
                }
                let (looked, seen) = look(&executions)?;
                notify(&notifying, &looked);
                Ok::<_, anyhow::Error>(Some((now, (looked.0, seen))))
            })
            .await;
            let Ok(Ok(Some((now, (records, current))))) = looked else {
                continue; // Unchanged, or unreadable for now: look again at the next tick.
            };
            version = Some(now);
            if let Some(before) = &seen {
                for change in diff(before, &records, &current) {
                    // No subscriber is no error: the change is simply not wanted.
                    let _ = shared.changes.send(change);
                }
            }
            seen = Some(current);
        }
    });
}

/// `GET /api/events/stream`.
pub async fn stream(
    State(shared): State<Arc<Shared>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let changes = BroadcastStream::new(shared.changes.subscribe()).map(|change| {
        Ok(match change {
            Ok(change) => Event::default()
                .event(change.kind)
                .data(change.data.to_string()),
            Err(BroadcastStreamRecvError::Lagged(missed)) => Event::default()
                .event("lagged")
                .data(json!({"missed": missed}).to_string()),
        })
    });
    let mut stopping = shared.stopping.subscribe();
    let changes = changes.take_until(async move {
        let _ = stopping.wait_for(|stopping| *stopping).await;
    });
    Sse::new(changes).keep_alive(KeepAlive::new().interval(shared.keep_alive))
}

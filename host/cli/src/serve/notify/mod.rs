//! `m3 serve --notify`: tells people when an answer is needed. The server's watcher
//! (`events.rs`) hands every look at the store to [`Notifier::observe`], which queues each new
//! event for each target in the database's notification ledger (`m3::DatabaseStore`'s
//! `enqueue_notification`: once per target and event id, whichever server sees it first). One
//! task per target claims due events from the ledger (a lease, so several servers on one
//! database deliver each event once between them, and a server that dies mid-delivery leaves
//! its claims to the others when the lease ends), posts them (`post.rs`), and settles them:
//! delivered, due again after a backoff, or abandoned after [`Settings::attempts`] tries. A
//! target that hangs or fails holds only its own task: the inbox, the API and the other
//! targets never wait for it. Delivery is at least once: a receiver drops a repeat by the
//! event id.
//!
//! # Files
//!
//! - `mod.rs`: the settings from the flags, [`Notifier`] (queueing, the per-target tasks,
//!   backoff, logging a failing target once per streak, pruning old deliveries).
//! - `target.rs`: a target's address and format, refused unless `https` or loopback `http`
//!   (or `--notify-insecure`), its ledger id (a digest) and label (its origin).
//! - `event.rs`: the events and their versioned JSON document; the Slack body.
//! - `signature.rs`: `X-M3-Signature` (HMAC-SHA256 of `TIMESTAMP.BODY`) and the secret's
//!   checks.
//! - `post.rs`: the one outbound connection of shipped code: one POST, bounded in time and in
//!   what it reads, no redirects.

pub mod event;
pub mod post;
pub mod signature;
pub mod target;

use event::Kind;
use futures_util::StreamExt;
use m3::operations::{ClaimedNotification, NotificationOutcome};
use m3::{ExecutionState, ManagedInputRecord};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use target::{Format, Target};

/// How long a server keeps delivered events in the ledger before forgetting them.
const KEEP: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often a target's task looks at the ledger when nothing wakes it (events queued by
/// other servers, claims whose lease ended, retries that came due).
const IDLE_LOOK: Duration = Duration::from_secs(1);
/// The longest wait between two tries of one event.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How many events a target's task claims at once (and posts side by side; never two of one
/// round).
const BATCH: u32 = 8;

/// What the flags say.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where events go.
    pub targets: Vec<Target>,
    /// Which events.
    pub kinds: Vec<Kind>,
    /// The signing secret, if any.
    pub secret: Option<Vec<u8>>,
    /// Where people reach the inbox (links start with it).
    pub public_url: String,
    /// How long one POST may take.
    pub timeout: Duration,
    /// The first retry's wait (doubled each time, at most [`MAX_BACKOFF`]).
    pub retry: Duration,
    /// How many tries an event gets before it is abandoned.
    pub attempts: u32,
    /// When this server started: a target registered for the first time gets the events from
    /// then on (a server started before its database hears of the rounds that created it).
    pub started: chrono::DateTime<chrono::Utc>,
}

/// One target's state in this server.
struct Lane {
    target: Target,
    /// Events from this time on are sent to it (the ledger's, shared by every server).
    since: chrono::DateTime<chrono::Utc>,
    /// Wakes its task when something was queued.
    wake: tokio::sync::Notify,
    /// Whether its last delivery failed (a streak is logged at its start and end).
    failing: AtomicBool,
}

/// The notifier of one `m3 serve`.
pub struct Notifier {
    executions: Arc<m3::Executions>,
    settings: Settings,
    lanes: Vec<Arc<Lane>>,
    /// This server's name on its claims.
    owner: String,
    /// The events this server knows are queued (or were), by target: no need to ask again.
    known: Mutex<Vec<HashSet<String>>>,
}

impl Notifier {
    /// Registers the targets in the ledger (blocking).
    pub fn new(executions: Arc<m3::Executions>, settings: Settings) -> anyhow::Result<Self> {
        let mut lanes = Vec::new();
        for target in &settings.targets {
            let since = executions.store().register_notification_target(
                &target.id,
                &target.label,
                settings.started,
            )?;
            lanes.push(Arc::new(Lane {
                target: target.clone(),
                since,
                wake: tokio::sync::Notify::new(),
                failing: AtomicBool::new(false),
            }));
        }
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| anyhow::anyhow!("EngineError: {e}"))?;
        Ok(Self {
            known: Mutex::new(vec![HashSet::new(); lanes.len()]),
            executions,
            settings,
            lanes,
            owner: format!("serve-{}-{}", std::process::id(), hex::encode(random)),
        })
    }

    /// Queues the events of what the watcher sees now (blocking): each new one once per target.
    /// A write the store refuses is said and tried again at the next look.
    pub fn observe(&self, records: &[ManagedInputRecord], states: &[ExecutionState]) {
        let Some(earliest) = self.lanes.iter().map(|l| l.since).min() else {
            return;
        };
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        // An event every target knows is not built again (a look reads every round).
        let everywhere = |id: &str| known.iter().all(|k| k.contains(id));
        let events = event::events(
            records,
            states,
            &self.settings.kinds,
            earliest,
            &self.settings.public_url,
            &everywhere,
        );
        for (lane, known) in self.lanes.iter().zip(known.iter_mut()) {
            let new: Vec<_> = events
                .iter()
                .filter(|e| e.at >= lane.since && !known.contains(&e.event_id))
                .cloned()
                .collect();
            if new.is_empty() {
                continue;
            }
            match self
                .executions
                .store()
                .enqueue_notifications(&lane.target.id, &new)
            {
                Ok(queued) => {
                    known.extend(new.into_iter().map(|e| e.event_id));
                    if queued > 0 {
                        lane.wake.notify_one();
                    }
                }
                Err(error) => eprintln!(
                    "m3 serve: cannot queue notifications for {}: {error} (tried again at the \
                     next change)",
                    lane.target.label
                ),
            }
        }
    }

    /// Starts one delivery task per target.
    pub fn start(self: &Arc<Self>) {
        for lane in &self.lanes {
            let notifier = self.clone();
            let lane = lane.clone();
            tokio::spawn(async move { notifier.deliver(lane).await });
        }
    }

    /// A target's task: claim what is due, post it, settle it; wait when nothing is due.
    async fn deliver(self: Arc<Self>, lane: Arc<Lane>) {
        let lease = self.settings.timeout + Duration::from_secs(5);
        let mut pruned_at: Option<tokio::time::Instant> = None;
        loop {
            if pruned_at.is_none_or(|at| at.elapsed() > Duration::from_secs(3600)) {
                pruned_at = Some(tokio::time::Instant::now());
                let (executions, id) = (self.executions.clone(), lane.target.id.clone());
                let pruned = tokio::task::spawn_blocking(move || {
                    executions.store().prune_notifications(&id, KEEP)
                })
                .await;
                match pruned {
                    Ok(Ok(_)) => {}
                    // Delivered events stay a while longer; nothing is lost. Tried again at
                    // the next hour.
                    Ok(Err(e)) => eprintln!(
                        "m3 serve: cannot prune delivered notifications for {}: {e} (tried \
                         again in an hour)",
                        lane.target.label
                    ),
                    Err(_) => return, // The runtime is stopping.
                }
            }
            let (executions, id, owner) = (
                self.executions.clone(),
                lane.target.id.clone(),
                self.owner.clone(),
            );
            let claimed = tokio::task::spawn_blocking(move || {
                executions
                    .store()
                    .claim_notifications(&id, &owner, lease, BATCH)
            })
            .await;
            let claims = match claimed {
                Ok(Ok(claims)) => claims,
                Ok(Err(e)) => {
                    eprintln!(
                        "m3 serve: cannot read the notification ledger for {}: {e}",
                        lane.target.label
                    );
                    tokio::time::sleep(IDLE_LOOK).await;
                    continue;
                }
                Err(_) => return, // The runtime is stopping.
            };
            if claims.is_empty() {
                tokio::select! {
                    () = lane.wake.notified() => {}
                    () = tokio::time::sleep(IDLE_LOOK) => {}
                }
                continue;
            }
            futures_util::stream::iter(claims)
                .for_each_concurrent(BATCH as usize, |claim| {
                    let (notifier, lane) = (self.clone(), lane.clone());
                    async move { notifier.deliver_one(&lane, claim).await }
                })
                .await;
        }
    }

    /// The headers and body of one event for `lane`'s target.
    fn request(
        &self,
        lane: &Lane,
        claim: &ClaimedNotification,
    ) -> (Vec<(&'static str, String)>, Vec<u8>) {
        let document: serde_json::Value = serde_json::from_str(&claim.document).unwrap_or_default();
        let body = match lane.target.format {
            Format::Json => claim.document.clone().into_bytes(),
            Format::Slack => event::slack(&document).to_string().into_bytes(),
        };
        let timestamp = chrono::Utc::now().timestamp();
        let mut headers = vec![
            ("content-type", "application/json".to_string()),
            ("user-agent", format!("m3/{}", env!("CARGO_PKG_VERSION"))),
            (
                "x-m3-event",
                document["event"].as_str().unwrap_or_default().to_string(),
            ),
            ("x-m3-event-id", claim.event_id.clone()),
            ("x-m3-delivery-attempt", (claim.attempts + 1).to_string()),
            ("x-m3-timestamp", timestamp.to_string()),
        ];
        if let Some(secret) = &self.settings.secret {
            headers.push(("x-m3-signature", signature::sign(secret, timestamp, &body)));
        }
        (headers, body)
    }

    /// Posts one claimed event and settles it.
    async fn deliver_one(&self, lane: &Lane, claim: ClaimedNotification) {
        let (headers, body) = self.request(lane, &claim);
        let posted = post::post(&lane.target, &headers, body, self.settings.timeout).await;
        let attempt = claim.attempts + 1;
        let outcome = match &posted {
            Ok(_) => NotificationOutcome::Delivered,
            Err(e) if attempt >= self.settings.attempts => NotificationOutcome::Abandoned {
                error: e.to_string(),
            },
            Err(e) => NotificationOutcome::Retry {
                error: e.to_string(),
                after: backoff(self.settings.retry, claim.attempts),
            },
        };
        match &outcome {
            NotificationOutcome::Delivered => {
                if lane.failing.swap(false, Ordering::Relaxed) {
                    eprintln!(
                        "m3 serve: notifications to {} are delivered again",
                        lane.target.label
                    );
                }
            }
            NotificationOutcome::Retry { error, after } => {
                if !lane.failing.swap(true, Ordering::Relaxed) || attempt.is_multiple_of(10) {
                    eprintln!(
                        "m3 serve: notification {} to {} failed (attempt {attempt}): {error}; \
                         trying again in {:.1} s",
                        claim.event_id,
                        lane.target.label,
                        after.as_secs_f64()
                    );
                }
            }
            NotificationOutcome::Abandoned { error } => {
                lane.failing.store(true, Ordering::Relaxed);
                eprintln!(
                    "m3 serve: notification {} to {} abandoned after {attempt} attempts: {error}",
                    claim.event_id, lane.target.label
                );
            }
        }
        let (executions, id, owner) = (
            self.executions.clone(),
            lane.target.id.clone(),
            self.owner.clone(),
        );
        let settled = tokio::task::spawn_blocking(move || {
            executions
                .store()
                .settle_notification(&id, &claim.event_id, &owner, &outcome)
        })
        .await;
        if let Ok(Err(e)) = settled {
            // The claim's lease ends and the event is delivered again (at least once).
            eprintln!(
                "m3 serve: cannot record a notification's delivery to {}: {e} (it will be \
                 sent again)",
                lane.target.label
            );
        }
    }
}

/// The wait before the next try of an event tried `attempts` times: `first` doubled each
/// time, at most [`MAX_BACKOFF`].
fn backoff(first: Duration, attempts: u32) -> Duration {
    first
        .saturating_mul(2u32.saturating_pow(attempts.min(20)))
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_five_minutes() {
        let first = Duration::from_secs(1);
        let waits: Vec<u64> = (0..12).map(|a| backoff(first, a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(backoff(first, u32::MAX), MAX_BACKOFF);
    }
}

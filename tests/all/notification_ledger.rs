//! The notification ledger of `m3 serve --notify` (`DatabaseStore`'s notification methods) on
//! both backends: a target's start is kept across registrations; an event is queued once per
//! target; claims are exclusive until their lease ends; a round's events leave in order; only
//! the claimer settles; a retry waits its backoff; pruning forgets settled events for good;
//! the report counts what waits and says the last failure.

use chrono::TimeDelta;
use m3::operations::{ClaimedNotification, NotificationEvent, NotificationOutcome};
use m3::*;
use m3_tests::on_both_backends;
use std::sync::Arc;
use std::time::Duration;

fn event(id: &str, at_ms: i64, round: Option<&str>) -> NotificationEvent {
    NotificationEvent {
        event_id: id.into(),
        at: chrono::DateTime::from_timestamp_millis(1_800_000_000_000 + at_ms).unwrap(),
        round_id: round.map(str::to_string),
        document: format!("{{\"event_id\":\"{id}\"}}"),
    }
}

fn ids(claimed: &[ClaimedNotification]) -> Vec<&str> {
    claimed.iter().map(|c| c.event_id.as_str()).collect()
}

on_both_backends! {
    /// Queued once per target, claimed oldest first, a round's later event only after its
    /// earlier one is settled, a claim exclusive until its lease ends, settled by its claimer
    /// alone.
    fn a_target_s_events_are_claimed_once_in_order_per_round(db) {
        let clock = Arc::new(ManualClock::new(
            chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        ));
        let store = db.store_with_clock(clock.clone());
        let since = store.register_notification_target("t1", "http://a:1", clock.now()).unwrap();
        clock.advance(TimeDelta::seconds(5));
        // A second registration keeps the start, takes the new label.
        assert_eq!(store.register_notification_target("t1", "http://b:2", clock.now()).unwrap(), since);
        assert_eq!(1, store.enqueue_notifications("t1", &[event("r1:waiting", 1, Some("r1"))]).unwrap());
        assert_eq!(1, store.enqueue_notifications("t1", &[event("r1:failed", 2, Some("r1"))]).unwrap());
        assert_eq!(1, store.enqueue_notifications("t1", &[event("r2:waiting", 3, Some("r2"))]).unwrap());
        assert_eq!(1, store.enqueue_notifications("t1", &[event("x:finished", 4, None)]).unwrap());
        // Queued again (another server saw it too): nothing changes.
        assert_eq!(0, store.enqueue_notifications("t1", &[event("r1:waiting", 1, Some("r1"))]).unwrap());
        // Many at once (past one statement's rows), the known ones left as they are.
        let many: Vec<_> = (0..100)
            .map(|i| event(&format!("m{i:03}"), 100 + i, Some("m")))
            .collect();
        assert_eq!(store.enqueue_notifications("t3", &many).unwrap(), 100);
        assert_eq!(store.enqueue_notifications("t3", &many[..70]).unwrap(), 0);
        let one_more = [many[5].clone(), event("m100", 200, Some("m"))];
        assert_eq!(store.enqueue_notifications("t3", &one_more).unwrap(), 1);
        // Another target has its own queue.
        store.register_notification_target("t2", "http://c:3", clock.now()).unwrap();
        assert_eq!(1, store.enqueue_notifications("t2", &[event("r1:waiting", 1, Some("r1"))]).unwrap());

        let lease = Duration::from_secs(10);
        let first = store.claim_notifications("t1", "a", lease, 10).unwrap();
        assert_eq!(ids(&first), ["r1:waiting", "r2:waiting", "x:finished"]);
        assert!(first.iter().all(|c| c.attempts == 0));
        assert_eq!(first[0].document, "{\"event_id\":\"r1:waiting\"}");
        // Held by "a": another server gets nothing, not even r1's later event.
        assert!(store.claim_notifications("t1", "b", lease, 10).unwrap().is_empty());
        // Only the claimer settles.
        assert!(!store.settle_notification("t1", "r1:waiting", "b", &NotificationOutcome::Delivered).unwrap());
        assert!(store.settle_notification("t1", "r1:waiting", "a", &NotificationOutcome::Delivered).unwrap());
        assert!(!store.settle_notification("t1", "r1:waiting", "a", &NotificationOutcome::Delivered).unwrap());
        let next = store.claim_notifications("t1", "b", lease, 10).unwrap();
        assert_eq!(ids(&next), ["r1:failed"]);
        // "a"'s lease ends: its unsettled claims go to another server, counted once more.
        clock.advance(TimeDelta::seconds(11));
        let taken = store.claim_notifications("t1", "c", lease, 10).unwrap();
        assert_eq!(ids(&taken), ["r1:failed", "r2:waiting", "x:finished"]);
        assert!(!store.settle_notification("t1", "r2:waiting", "a", &NotificationOutcome::Delivered).unwrap());
        // The other target was untouched.
        assert_eq!(ids(&store.claim_notifications("t2", "a", lease, 10).unwrap()), ["r1:waiting"]);
    }

    /// A retry waits its backoff and counts its attempt; an abandoned event is never claimed
    /// again; the report counts each state and says the last failure.
    fn a_retry_waits_its_backoff_and_an_abandoned_event_stays_abandoned(db) {
        let clock = Arc::new(ManualClock::new(
            chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        ));
        let store = db.store_with_clock(clock.clone());
        store.register_notification_target("t", "https://hooks.example:443", clock.now()).unwrap();
        store.enqueue_notifications("t", &[event("e1", 1, Some("r1"))]).unwrap();
        store.enqueue_notifications("t", &[event("e2", 2, Some("r2"))]).unwrap();
        let lease = Duration::from_secs(10);
        assert_eq!(store.claim_notifications("t", "a", lease, 1).unwrap().len(), 1);
        let retry = NotificationOutcome::Retry {
            error: "answered 500".into(),
            after: Duration::from_secs(4),
        };
        assert!(store.settle_notification("t", "e1", "a", &retry).unwrap());
        assert_eq!(
            store.next_notification_due("t").unwrap(),
            Some(clock.now()),
            "e2 is due now"
        );
        let e2 = store.claim_notifications("t", "a", lease, 10).unwrap();
        assert_eq!(ids(&e2), ["e2"], "e1 waits its backoff");
        clock.advance(TimeDelta::seconds(1));
        let abandoned = NotificationOutcome::Abandoned { error: "answered 410".into() };
        assert!(store.settle_notification("t", "e2", "a", &abandoned).unwrap());
        clock.advance(TimeDelta::seconds(3));
        let again = store.claim_notifications("t", "a", lease, 10).unwrap();
        assert_eq!(ids(&again), ["e1"]);
        assert_eq!(again[0].attempts, 1);
        let report = store.notification_report().unwrap();
        assert_eq!(report.len(), 1);
        let r = &report[0];
        assert_eq!((r.queued, r.delivered, r.abandoned), (1, 0, 1));
        assert_eq!(r.most_attempts, 1);
        assert_eq!(r.label, "https://hooks.example:443");
        assert!(r.oldest_queued.is_some());
        assert_eq!(r.last_error.as_deref(), Some("answered 410"));
        assert!(store.settle_notification("t", "e1", "a", &NotificationOutcome::Delivered).unwrap());
        assert_eq!(store.next_notification_due("t").unwrap(), None);
    }

    /// Pruning forgets events settled before the age given, and moves the target's start past
    /// them, so that a server seeing them again never queues them again; queued ones stay.
    fn pruned_events_are_never_queued_again(db) {
        let clock = Arc::new(ManualClock::new(
            chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        ));
        let store = db.store_with_clock(clock.clone());
        store.register_notification_target("t", "l", clock.now()).unwrap();
        store.enqueue_notifications("t", &[event("old", 1, None)]).unwrap();
        store.enqueue_notifications("t", &[event("waiting", 2, None)]).unwrap();
        let claimed = store.claim_notifications("t", "a", Duration::from_secs(1), 1).unwrap();
        assert_eq!(ids(&claimed), ["old"]);
        store.settle_notification("t", "old", "a", &NotificationOutcome::Delivered).unwrap();
        clock.advance(TimeDelta::days(8));
        assert_eq!(store.prune_notifications("t", Duration::from_secs(7 * 86_400)).unwrap(), 1);
        let since = store.register_notification_target("t", "l", clock.now()).unwrap();
        assert!(since > event("old", 1, None).at, "the start moved past what was forgotten");
        let report = store.notification_report().unwrap();
        assert_eq!((report[0].queued, report[0].delivered), (1, 0));
    }
}

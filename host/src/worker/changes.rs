//! One watcher per database and process. It notices commits made by any connection or process
//! (`PRAGMA data_version` on the keeper connection, a few microseconds) and then reads which
//! executions those commits woke (`store/sqlite/wakeups.rs`: one indexed range read; on PostgreSQL the ids the notifications carried) and wakes only
//! their waiters: a parked execution sleeps through every commit that does not concern it (lease
//! renewals, other executions' rounds). Subscribers that want every commit (`m3::testing`) get a
//! tokio `watch` tick.

use crate::store::Backend;
use crate::store::waiters::Registration;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// How often the watcher looks at the database while anyone listens.
pub const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// The change signal of one database.
#[derive(Debug)]
pub struct DatabaseChanges {
    db: Arc<Backend>,
    sender: Mutex<Option<Weak<watch::Sender<u64>>>>,
}

impl DatabaseChanges {
    /// Changes of `db`; nothing runs until someone subscribes.
    pub fn new(db: Arc<Backend>) -> Self {
        Self {
            db,
            sender: Mutex::new(None),
        }
    }

    /// Wakes `notify` whenever a committed transaction, in this process or another, asks for
    /// `execution_id` (`wake-execution`), while the returned guard lives. A commit of this
    /// process tells it at once; one of another process, within [`POLL_INTERVAL`].
    pub fn register(&self, execution_id: &str, notify: &Arc<Notify>) -> Waiting {
        // Registered before the watcher's starting point is read (in `subscribe`): a wake-up
        // committed after this call is never behind that point.
        let registration = self.db.waiters().register(execution_id, notify);
        Waiting {
            _registration: registration,
            _subscription: self.subscribe(),
        }
    }

    /// A receiver that sees a new value after every commit by another connection. Starts the
    /// watcher on the current tokio runtime if none runs; it stops when the last subscription
    /// (or registration) is dropped.
    pub fn subscribe(&self) -> Subscription {
        let mut slot = self.sender.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sender) = slot.as_ref().and_then(Weak::upgrade) {
            return Subscription {
                receiver: sender.subscribe(),
                _sender: sender,
            };
        }
        let (sender, receiver) = watch::channel(0u64);
        let sender = Arc::new(sender);
        *slot = Some(Arc::downgrade(&sender));
        let weak = Arc::downgrade(&sender);
        let db = self.db.clone();
        // Read here, not in the task: every wake-up committed from now on is above it.
        let mut seen = db.data_version().unwrap_or_default();
        let mut woken_up_to = db.latest_wakeup().unwrap_or_default();
        tokio::spawn(async move {
            let mut ticks = 0u64;
            loop {
                tokio::time::sleep(POLL_INTERVAL).await;
                let Some(sender) = weak.upgrade() else {
                    return;
                };
                let Ok(now) = db.data_version() else {
                    continue;
                };
                if now == seen {
                    continue;
                }
                // A read that fails leaves `seen` as it was: it is tried again next tick.
                let Ok((woken, highest)) = db.wakeups_since(woken_up_to) else {
                    continue;
                };
                seen = now;
                woken_up_to = highest;
                for execution_id in &woken {
                    db.waiters().wake(execution_id);
                }
                ticks += 1;
                sender.send_replace(ticks);
            }
        });
        Subscription {
            receiver,
            _sender: sender,
        }
    }
}

/// A live subscription: keeps the watcher running.
#[derive(Debug)]
pub struct Subscription {
    /// Signals a commit.
    pub receiver: watch::Receiver<u64>,
    _sender: Arc<watch::Sender<u64>>,
}

/// A waiter registered on one execution: keeps the watcher running and its registration alive.
#[derive(Debug)]
pub struct Waiting {
    _registration: Registration,
    _subscription: Subscription,
}

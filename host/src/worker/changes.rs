//! One poller per database that turns commits made by any connection or process (`PRAGMA
//! data_version` on the keeper connection) into a tokio `watch` signal, so every execution
//! waiting on that database wakes without polling on its own.

use crate::sqlite::database::Database;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::watch;

/// How often the poller looks at the database while anyone listens.
pub const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// The change signal of one database.
#[derive(Debug)]
pub struct DatabaseChanges {
    db: Arc<Database>,
    sender: Mutex<Option<Weak<watch::Sender<u64>>>>,
}

impl DatabaseChanges {
    /// Changes of `db`; nothing runs until someone subscribes.
    pub fn new(db: Arc<Database>) -> Self {
        Self {
            db,
            sender: Mutex::new(None),
        }
    }

    /// A receiver that sees a new value after every commit by another connection. Starts the
    /// poller on the current tokio runtime if none runs; it stops when the last receiver's
    /// subscription is dropped.
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
        tokio::spawn(async move {
            let mut seen = db.data_version().unwrap_or_default();
            let mut ticks = 0u64;
            loop {
                tokio::time::sleep(POLL_INTERVAL).await;
                let Some(sender) = weak.upgrade() else {
                    return;
                };
                // A PRAGMA on the idle keeper connection: microseconds, no I/O wait.
                if let Ok(now) = db.data_version()
                    && now != seen
                {
                    seen = now;
                    ticks += 1;
                    sender.send_replace(ticks);
                }
            }
        });
        Subscription {
            receiver,
            _sender: sender,
        }
    }
}

/// A live subscription: keeps the poller running.
#[derive(Debug)]
pub struct Subscription {
    /// Signals a commit.
    pub receiver: watch::Receiver<u64>,
    _sender: Arc<watch::Sender<u64>>,
}

//! The waiters of this process, registered by execution: a worker's `events.next`, a caller's
//! `result`. A committing write wakes those of the executions it woke at once; the change
//! watcher (`worker/changes.rs`) wakes them for commits of other processes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::Notify;

/// The waiters of this process, by execution: a worker's `events.next`, a caller's `result`.
#[derive(Debug, Default)]
pub struct Waiters {
    by_execution: Mutex<HashMap<String, Vec<Weak<Notify>>>>,
}

impl Waiters {
    /// Registers `notify` as a waiter on `execution_id` while the returned guard lives.
    pub fn register(self: &Arc<Self>, execution_id: &str, notify: &Arc<Notify>) -> Registration {
        let mut map = self.by_execution.lock().unwrap_or_else(|e| e.into_inner());
        let list = map.entry(execution_id.to_string()).or_default();
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(notify));
        Registration {
            waiters: Arc::downgrade(self),
            execution_id: execution_id.to_string(),
            notify: Arc::downgrade(notify),
        }
    }

    /// Wakes every waiter on `execution_id` (a waiter not waiting at that moment finds the
    /// wake-up when it next waits).
    pub fn wake(&self, execution_id: &str) {
        let map = self.by_execution.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(list) = map.get(execution_id) {
            for notify in list.iter().filter_map(Weak::upgrade) {
                notify.notify_one();
            }
        }
    }

    /// The executions anyone in this process waits on.
    pub fn execution_ids(&self) -> Vec<String> {
        self.by_execution
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Whether anyone in this process waits on an execution.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.by_execution
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }
}

/// A waiter's registration; dropping it unregisters the waiter.
#[derive(Debug)]
pub struct Registration {
    waiters: Weak<Waiters>,
    execution_id: String,
    notify: Weak<Notify>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let Some(waiters) = self.waiters.upgrade() else {
            return;
        };
        let mut map = waiters
            .by_execution
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(list) = map.get_mut(&self.execution_id) {
            list.retain(|w| w.strong_count() > 0 && !Weak::ptr_eq(w, &self.notify));
            if list.is_empty() {
                map.remove(&self.execution_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_execution_s_waiters_wake() {
        let waiters = Arc::new(Waiters::default());
        let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let _ra = waiters.register("exec-a", &a);
        let rb = waiters.register("exec-b", &b);
        waiters.wake("exec-a");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(1), a.notified())
                .await
                .expect("a is woken");
            let b_woken =
                tokio::time::timeout(std::time::Duration::from_millis(50), b.notified()).await;
            assert!(b_woken.is_err(), "b must sleep through a's wake-up");
        });
        drop(rb);
        waiters.wake("exec-b");
        assert!(!waiters.is_empty());
        drop(_ra);
        assert!(
            waiters.is_empty(),
            "dropped registrations leave nothing behind"
        );
    }
}

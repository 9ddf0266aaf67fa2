//! Idle connections (of either backend): an operation's connection, once the operation ended, waits here for the
//! next operation of the same store object instead of being closed, so that the next one skips
//! opening the file, setting the pragmas and parsing the schema, and finds its statements
//! prepared. The store's contract stays: no two operations share a connection at the same time
//! (a connection is either lent to one operation or idle here), an idle connection is closed
//! within a second ([`IDLE_FOR`] plus one [`LOOK_EVERY`]) by a reaper thread that runs while any
//! wait, so the store needs no `close()`, and none crosses a `fork`: in a child process the
//! parent's idle connections are left untouched (never used, never closed) and nothing is kept.

use std::ops::Deref;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// How long a connection may wait idle before the reaper closes it.
pub const IDLE_FOR: Duration = Duration::from_millis(500);
/// How often the reaper looks while connections wait.
pub const LOOK_EVERY: Duration = Duration::from_millis(250);
/// The most connections kept idle; more are closed at once.
const MAX_IDLE: usize = 16;

/// A connection that can wait idle: whether it holds nothing of the operation that used it.
pub trait Pooled: Send + 'static {
    /// Whether the next operation may use it (no transaction open, not broken).
    fn reusable(&self) -> bool;
}

impl Pooled for rusqlite::Connection {
    fn reusable(&self) -> bool {
        self.is_autocommit()
    }
}

/// The idle connections of one store object.
#[derive(Debug)]
pub struct Idle<C> {
    /// The process the connections belong to.
    owner: u32,
    waiting: Mutex<Waiting<C>>,
}

#[derive(Debug)]
struct Waiting<C> {
    /// Most recently returned last.
    connections: Vec<(C, Instant)>,
    /// The reaper thread runs.
    reaper: bool,
}

impl<C> Default for Waiting<C> {
    fn default() -> Self {
        Self {
            connections: Vec::new(),
            reaper: false,
        }
    }
}

impl<C: Pooled> Idle<C> {
    /// None idle yet; they belong to this process.
    pub fn new() -> Arc<Self> {
        Self::owned_by(std::process::id())
    }

    fn owned_by(owner: u32) -> Arc<Self> {
        Arc::new(Self {
            owner,
            waiting: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting<C>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn forked(&self) -> bool {
        std::process::id() != self.owner
    }

    /// An idle connection, or `open`'s new one; lent until the returned guard drops.
    pub fn lend<E>(self: &Arc<Self>, open: impl FnOnce() -> Result<C, E>) -> Result<Lent<C>, E> {
        if self.forked() {
            // The parent's connections are its own: neither used nor closed here.
            std::mem::forget(std::mem::take(&mut self.lock().connections));
            return Ok(Lent {
                connection: Some(open()?),
                idle: None,
            });
        }
        // One that broke while it waited (its server closed it, or restarted) is closed here,
        // not lent: an operation never starts on a connection already known to be gone.
        let reused = loop {
            match self.lock().connections.pop() {
                Some((connection, _)) if connection.reusable() => break Some(connection),
                Some(_) => continue,
                None => break None,
            }
        };
        let connection = match reused {
            Some(connection) => connection,
            None => open()?,
        };
        Ok(Lent {
            connection: Some(connection),
            idle: Some(self.clone()),
        })
    }

    /// Takes `connection` back when it holds no transaction (else it is closed, which rolls back).
    fn give_back(self: &Arc<Self>, connection: C) {
        if self.forked() || !connection.reusable() {
            return;
        }
        let start_reaper = {
            let mut waiting = self.lock();
            if waiting.connections.len() >= MAX_IDLE {
                return;
            }
            waiting.connections.push((connection, Instant::now()));
            !std::mem::replace(&mut waiting.reaper, true)
        };
        if start_reaper {
            let idle = Arc::downgrade(self);
            let started = std::thread::Builder::new()
                .name("m3-sqlite-idle".into())
                .spawn(move || reaper(idle));
            if started.is_err() {
                // No thread: keep nothing idle rather than keep it past a second.
                let mut waiting = self.lock();
                waiting.reaper = false;
                let closed = std::mem::take(&mut waiting.connections);
                drop(waiting);
                drop(closed);
            }
        }
    }

    /// Closes the connections idle for [`IDLE_FOR`] at `now`; whether any still wait.
    fn reap(&self, now: Instant) -> bool {
        let mut waiting = self.lock();
        let (stale, fresh): (Vec<_>, Vec<_>) = std::mem::take(&mut waiting.connections)
            .into_iter()
            .partition(|(_, since)| now.saturating_duration_since(*since) >= IDLE_FOR);
        waiting.connections = fresh;
        let any = !waiting.connections.is_empty();
        if !any {
            waiting.reaper = false;
        }
        drop(waiting);
        // Closed outside the lock.
        drop(stale);
        any
    }

    /// How many connections wait idle.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().connections.len()
    }
}

/// Closes idle connections as they age, until none waits (or the store object is gone).
fn reaper<C: Pooled>(idle: Weak<Idle<C>>) {
    loop {
        std::thread::sleep(LOOK_EVERY);
        let Some(idle) = idle.upgrade() else {
            return;
        };
        if !idle.reap(Instant::now()) {
            return;
        }
    }
}

/// A connection lent to one operation; back to the idle ones when dropped.
#[derive(Debug)]
pub struct Lent<C: Pooled> {
    connection: Option<C>,
    idle: Option<Arc<Idle<C>>>,
}

impl<C: Pooled> Deref for Lent<C> {
    type Target = C;

    fn deref(&self) -> &C {
        self.connection
            .as_ref()
            .expect("a lent connection is present until dropped")
    }
}

impl<C: Pooled> Lent<C> {
    /// Closes the connection instead of keeping it idle (for a connection whose state is in
    /// doubt).
    pub fn discard(mut self) {
        self.idle = None;
    }
}

impl<C: Pooled> Drop for Lent<C> {
    fn drop(&mut self) {
        if let (Some(connection), Some(idle)) = (self.connection.take(), self.idle.take()) {
            idle.give_back(connection);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    fn open(dir: &tempfile::TempDir) -> rusqlite::Result<Connection> {
        Connection::open(dir.path().join("db.sqlite"))
    }

    fn handle(c: &Connection) -> usize {
        // SAFETY: only the pointer's value is read, to tell connections apart.
        unsafe { c.handle() as usize }
    }

    #[test]
    fn a_connection_is_reused_by_the_next_operation_never_by_two_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let idle = Idle::<Connection>::new();
        let first = idle.lend(|| open(&dir)).unwrap();
        let first_handle = handle(&first);
        // Lent: a second operation meanwhile gets another connection.
        let second = idle.lend(|| open(&dir)).unwrap();
        assert_ne!(handle(&second), first_handle);
        drop(second);
        drop(first);
        assert_eq!(idle.len(), 2);
        // The most recently returned one first.
        let again = idle
            .lend(|| -> rusqlite::Result<Connection> { panic!("an idle connection was waiting") })
            .unwrap();
        assert_eq!(handle(&again), first_handle);
    }

    #[test]
    fn a_connection_holding_a_transaction_or_discarded_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let idle = Idle::<Connection>::new();
        let lent = idle.lend(|| open(&dir)).unwrap();
        lent.execute_batch("BEGIN").unwrap();
        drop(lent);
        assert_eq!(
            idle.len(),
            0,
            "a connection inside a transaction is not kept"
        );
        let lent = idle.lend(|| open(&dir)).unwrap();
        lent.discard();
        assert_eq!(idle.len(), 0);
    }

    #[test]
    fn idle_connections_are_closed_within_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let idle = Idle::<Connection>::new();
        drop(idle.lend(|| open(&dir)).unwrap());
        let returned = Instant::now();
        // The rule, on a clock of its own: kept before IDLE_FOR, closed from then on.
        assert!(idle.reap(returned + IDLE_FOR / 2));
        assert_eq!(idle.len(), 1);
        assert!(IDLE_FOR + LOOK_EVERY < Duration::from_secs(1));
        // The reaper thread applies it by itself (waited for generously: a loaded machine may
        // run it late, which the bound above does not depend on).
        let deadline = Instant::now() + Duration::from_secs(30);
        while idle.len() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(idle.len(), 0, "the reaper closed the idle connection");
        // And starts again for the next one.
        drop(idle.lend(|| open(&dir)).unwrap());
        let deadline = Instant::now() + Duration::from_secs(30);
        while idle.len() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(idle.len(), 0);
    }

    #[test]
    fn in_a_forked_child_the_parent_s_connections_are_neither_used_nor_kept() {
        let dir = tempfile::tempdir().unwrap();
        // Owned by another process: what this one finds, as a fork's child does.
        let idle = Idle::<Connection>::owned_by(std::process::id().wrapping_add(1));
        idle.lock()
            .connections
            .push((open(&dir).unwrap(), Instant::now()));
        let parents = handle(&idle.lock().connections[0].0);
        let lent = idle.lend(|| open(&dir)).unwrap();
        assert_ne!(handle(&lent), parents, "the parent's connection was used");
        drop(lent);
        assert_eq!(idle.len(), 0, "nothing is kept in the child");
    }

    #[test]
    fn at_most_max_idle_connections_wait() {
        let dir = tempfile::tempdir().unwrap();
        let idle = Idle::<Connection>::new();
        let lent: Vec<Lent<Connection>> = (0..MAX_IDLE + 4)
            .map(|_| idle.lend(|| open(&dir)).unwrap())
            .collect();
        drop(lent);
        assert_eq!(idle.len(), MAX_IDLE);
    }
}

//! Group commit: the write transactions of one store object that wait for each other share one
//! SQLite transaction, so a burst of writes costs one durable commit (one `fsync` at FULL)
//! instead of one each.
//!
//! Writes of one [`Database`] take turns (the *turn*; one holder at a time, never two sharing the
//! connection at once). The first takes SQLite's write lock (`BEGIN IMMEDIATE`) on a connection
//! of its own and opens a *group*; each write runs inside a savepoint of the group's
//! transaction. A write that ends while others are queued for the turn hands the connection on
//! without committing, and waits; the write that ends with nobody queued (or with the group at
//! [`GROUP_MEMBERS_MAX`] members or [`GROUP_AGE_MAX`] old) commits the group, and every member
//! is told the one outcome. So a write's `commit` returns `Ok` only once its changes are durable,
//! and an `Err` means none of them are, as with a transaction of its own. A write that is rolled
//! back undoes only its savepoint. Should the group's transaction be lost under a member (SQLite
//! rolls a transaction back by itself on some I/O errors), the group fails as a whole, before
//! any later write can run outside it.
//!
//! Reads keep their own connections and see only what groups have committed.

use super::control::control;
use super::store_error::{is_busy, store_error};
use crate::store::error::StoreError;
use crate::store::idle::Lent;
use rusqlite::Connection;
use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The most writes one group commits together.
const GROUP_MEMBERS_MAX: usize = 128;
/// How long a group stays open for further writes (the first member waits at most about this
/// long, plus the commit, for its outcome).
const GROUP_AGE_MAX: Duration = Duration::from_millis(20);
/// The shortest and longest pause between two tries for SQLite's write lock.
const LOCK_PAUSE_MIN: Duration = Duration::from_micros(100);
const LOCK_PAUSE_MAX: Duration = Duration::from_millis(4);

/// The write turn of one store object, and its open group.
pub(crate) struct Writer {
    state: Mutex<State>,
    /// Signalled when the turn is released or a group's outcome is known.
    changed: Condvar,
    /// The most writes in one group, and how long a group takes new ones.
    members_max: usize,
    age_max: Duration,
}

impl Default for Writer {
    fn default() -> Self {
        Self::with_limits(GROUP_MEMBERS_MAX, GROUP_AGE_MAX)
    }
}

#[derive(Default)]
struct State {
    /// A write holds the turn (the group's connection is in its hands).
    held: bool,
    /// Writes waiting for the turn.
    queued: usize,
    /// The open group while no write holds the turn.
    group: Option<Group>,
    /// The number the next group gets.
    next_group: u64,
    /// Outcomes of committed (or failed) groups not yet read by all their waiting members:
    /// group number -> (outcome, members still to read it).
    outcomes: HashMap<u64, (Result<(), StoreError>, usize)>,
}

/// An open SQLite write transaction shared by the writes of one group.
pub(crate) struct Group {
    number: u64,
    conn: Lent<Connection>,
    /// Writes that have ended with their changes in the group (they wait for its outcome).
    members: usize,
    opened: Instant,
    /// The process that opened it: a forked child never touches its parent's connection.
    pid: u32,
}

/// A write's hold on the turn: the group's connection with the write's savepoint open.
pub(crate) struct Turn {
    group: Option<Group>,
}

impl Turn {
    /// The group's connection.
    pub(crate) fn connection(&self) -> Option<&Connection> {
        self.group.as_ref().map(|g| &*g.conn)
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

fn busy() -> StoreError {
    StoreError::Busy("database locked past the busy timeout".into())
}

impl Writer {
    fn with_limits(members_max: usize, age_max: Duration) -> Self {
        Self {
            state: Mutex::default(),
            changed: Condvar::new(),
            members_max,
            age_max,
        }
    }

    /// Waits for the turn (up to the busy timeout), joins the open group or opens one, and opens
    /// the write's savepoint.
    /// `connect` gives a connection of the group's own (`Database::connect`: an idle one or a
    /// new one) when a group must be opened.
    pub(crate) fn begin(
        &self,
        connect: impl FnOnce() -> rusqlite::Result<Lent<Connection>>,
        busy_timeout: Duration,
    ) -> Result<Turn, StoreError> {
        let deadline = Instant::now() + busy_timeout;
        let mut state = lock(&self.state);
        state.queued += 1;
        while state.held {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // The holder sees one fewer queued write when it ends, and settles the group.
                state.queued -= 1;
                return Err(busy());
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        state.queued -= 1;
        state.held = true;
        let open = state.group.take();
        drop(state);

        let group = match open {
            Some(group) if group.pid != std::process::id() => {
                // Forked: the parent's connection must not be used or closed here.
                std::mem::forget(group);
                None
            }
            Some(group) if group.conn.is_autocommit() => {
                // Its transaction is gone (rolled back by SQLite): its members fail.
                self.settle_failed(group, "the group's transaction was rolled back by SQLite");
                None
            }
            other => other,
        };
        let group = match group {
            Some(group) => group,
            None => match self.open_group(connect, busy_timeout, deadline) {
                Ok(group) => group,
                Err(e) => {
                    self.release_empty();
                    return Err(e);
                }
            },
        };
        if let Err(e) = control(&group.conn, "SAVEPOINT m3_write") {
            let e = store_error(e);
            self.settle_failed(group, "a savepoint could not be opened");
            return Err(e);
        }
        Ok(Turn { group: Some(group) })
    }

    /// A new group: a connection of its own, with SQLite's write lock taken.
    fn open_group(
        &self,
        connect: impl FnOnce() -> rusqlite::Result<Lent<Connection>>,
        busy_timeout: Duration,
        deadline: Instant,
    ) -> Result<Group, StoreError> {
        let conn = connect().map_err(store_error)?;
        if let Err(e) = begin_immediate(&conn, busy_timeout, deadline) {
            // Its busy timeout may be left at zero: not kept for another operation.
            conn.discard();
            return Err(store_error(e));
        }
        let mut state = lock(&self.state);
        let number = state.next_group;
        state.next_group += 1;
        drop(state);
        Ok(Group {
            number,
            conn,
            members: 0,
            opened: Instant::now(),
            pid: std::process::id(),
        })
    }

    /// Ends the write with its changes kept: returns once the group is committed, with the
    /// group's outcome.
    pub(crate) fn commit(&self, mut turn: Turn) -> Result<(), StoreError> {
        let Some(mut group) = turn.group.take() else {
            return Err(StoreError::Failure("the write has already ended".into()));
        };
        if let Err(e) = control(&group.conn, "RELEASE m3_write") {
            let e = store_error(e);
            self.settle_failed(group, "a write could not be kept");
            return Err(e);
        }
        if group.conn.is_autocommit() {
            let e = StoreError::Failure("the write's transaction was rolled back by SQLite".into());
            self.settle_failed(group, "the group's transaction was rolled back by SQLite");
            return Err(e);
        }
        group.members += 1;
        let number = group.number;
        let mut state = lock(&self.state);
        if self.hand_on(&state, &group) {
            state.group = Some(group);
            state.held = false;
            self.changed.notify_all();
            loop {
                if let Some((outcome, readers)) = state.outcomes.get_mut(&number) {
                    let outcome = outcome.clone();
                    *readers -= 1;
                    if *readers == 0 {
                        state.outcomes.remove(&number);
                    }
                    return outcome;
                }
                state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
            }
        }
        drop(state);
        self.commit_group(group, true)
    }

    /// Ends the write with its changes undone; the group goes on (or is committed for its
    /// members, if this write was the last in it).
    pub(crate) fn roll_back(&self, mut turn: Turn) {
        let Some(group) = turn.group.take() else {
            return;
        };
        if group
            .conn
            .execute_batch("ROLLBACK TO m3_write; RELEASE m3_write")
            .is_err()
            || group.conn.is_autocommit()
        {
            self.settle_failed(group, "a write could not be undone on its own");
            return;
        }
        let mut state = lock(&self.state);
        if self.hand_on(&state, &group) {
            state.group = Some(group);
            state.held = false;
            self.changed.notify_all();
            return;
        }
        drop(state);
        if group.members == 0 {
            // Nothing of anyone's in it.
            let _ = group.conn.execute_batch("ROLLBACK");
            drop(group);
            self.release_empty();
        } else {
            // The others' outcome is theirs to read; this write has none.
            let _ = self.commit_group(group, false);
        }
    }

    /// Commits `group` (the caller holding the turn) and tells its waiting members; when the
    /// caller is a member too (`caller_is_member`), its outcome is returned rather than stored.
    fn commit_group(&self, group: Group, caller_is_member: bool) -> Result<(), StoreError> {
        let outcome = control(&group.conn, "COMMIT").map_err(store_error);
        if outcome.is_err() {
            let _ = group.conn.execute_batch("ROLLBACK");
        }
        let waiting = group.members - usize::from(caller_is_member);
        let number = group.number;
        drop(group);
        let mut state = lock(&self.state);
        if waiting > 0 {
            state.outcomes.insert(number, (outcome.clone(), waiting));
        }
        state.held = false;
        self.changed.notify_all();
        outcome
    }

    /// Fails `group` as a whole (rolled back; its waiting members are told) and releases the
    /// turn.
    fn settle_failed(&self, group: Group, why: &str) {
        let _ = group.conn.execute_batch("ROLLBACK");
        let (number, members) = (group.number, group.members);
        drop(group);
        let mut state = lock(&self.state);
        if members > 0 {
            let failure =
                StoreError::Failure(format!("{why}; the writes committed with it failed"));
            state.outcomes.insert(number, (Err(failure), members));
        }
        state.held = false;
        self.changed.notify_all();
    }

    /// Whether a write ending now hands the open group on to a queued write instead of
    /// committing it.
    fn hand_on(&self, state: &State, group: &Group) -> bool {
        state.queued > 0
            && group.members < self.members_max
            && group.opened.elapsed() < self.age_max
    }

    /// Releases the turn with no group open.
    fn release_empty(&self) {
        let mut state = lock(&self.state);
        state.held = false;
        self.changed.notify_all();
    }
}

/// Takes SQLite's write lock (`BEGIN IMMEDIATE`), trying again after short pauses that grow from
/// [`LOCK_PAUSE_MIN`] to [`LOCK_PAUSE_MAX`], each drawn at random between half and all of its
/// length, until `deadline`. SQLite's own busy handler sleeps up to 100 ms at a time, so under a
/// burst from many processes a writer could sleep through every chance and fail busy although
/// the lock was free most of the time; short jittered pauses keep the processes taking turns
/// (one writer per process tries: the others wait for the turn). Once the lock is held, the
/// statements run with the busy timeout as usual.
fn begin_immediate(
    conn: &Connection,
    busy_timeout: Duration,
    deadline: Instant,
) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::ZERO)?;
    let mut pause = LOCK_PAUSE_MIN;
    let begun = loop {
        match conn.execute_batch("BEGIN IMMEDIATE") {
            Err(e) if is_busy(&e) && Instant::now() < deadline => {
                let half = pause / 2;
                let jitter = Duration::from_nanos(fastrand::u64(0..=half.as_nanos() as u64));
                std::thread::sleep(
                    (half + jitter).min(deadline.saturating_duration_since(Instant::now())),
                );
                pause = (pause * 2).min(LOCK_PAUSE_MAX);
            }
            other => break other,
        }
    };
    conn.busy_timeout(busy_timeout)?;
    begun
}

impl Drop for Turn {
    fn drop(&mut self) {
        // A turn always ends through `Writer::commit` or `Writer::roll_back`, which take the
        // group out; one still here means its transaction was never given back.
        debug_assert!(self.group.is_none(), "a write turn dropped while held");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::database::{Database, Synchronous};
    use std::sync::{Arc, Barrier};

    fn database(busy: Duration) -> (tempfile::TempDir, Arc<Database>) {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(&dir.path().join("m3.db"), busy, Synchronous::Full).unwrap();
        let conn = db.connect().unwrap();
        conn.execute_batch("CREATE TABLE t (v TEXT PRIMARY KEY)")
            .unwrap();
        (dir, Arc::new(db))
    }

    fn insert(turn: &Turn, v: &str) {
        turn.connection()
            .unwrap()
            .execute("INSERT INTO t (v) VALUES (?1)", [v])
            .unwrap();
    }

    fn rows(db: &Database) -> Vec<String> {
        let conn = db.connect().unwrap();
        let mut s = conn.prepare("SELECT v FROM t ORDER BY v").unwrap();
        s.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    impl Writer {
        fn queued(&self) -> usize {
            lock(&self.state).queued
        }
        fn groups(&self) -> u64 {
            lock(&self.state).next_group
        }
    }

    /// Holds the turn, queues `n` writes behind it, and returns once all are queued.
    fn queue_behind(
        writer: &Arc<Writer>,
        db: &Arc<Database>,
        names: &[&'static str],
        roll_back: &'static [&'static str],
    ) -> Vec<std::thread::JoinHandle<Result<(), StoreError>>> {
        let threads: Vec<_> = names
            .iter()
            .map(|&name| {
                let (writer, db) = (writer.clone(), db.clone());
                std::thread::spawn(move || {
                    let turn = writer.begin(|| db.connect(), db.busy_timeout())?;
                    insert(&turn, name);
                    if roll_back.contains(&name) {
                        writer.roll_back(turn);
                        Ok(())
                    } else {
                        writer.commit(turn)
                    }
                })
            })
            .collect();
        while writer.queued() < names.len() {
            std::thread::sleep(Duration::from_millis(1));
        }
        threads
    }

    #[test]
    fn writes_waiting_for_each_other_commit_as_one_group_and_each_is_told() {
        let (_dir, db) = database(Duration::from_secs(30));
        let writer = Arc::new(Writer::with_limits(128, Duration::from_secs(60)));
        let first = writer.begin(|| db.connect(), db.busy_timeout()).unwrap();
        insert(&first, "a");
        let threads = queue_behind(&writer, &db, &["b", "c", "d", "e", "f"], &["d"]);
        writer.commit(first).unwrap();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        // One group for six writes; the rolled-back write left nothing.
        assert_eq!(writer.groups(), 1);
        assert_eq!(rows(&db), ["a", "b", "c", "e", "f"]);
        // The turn is free and the next write opens a new group.
        let next = writer.begin(|| db.connect(), db.busy_timeout()).unwrap();
        insert(&next, "g");
        writer.commit(next).unwrap();
        assert_eq!(writer.groups(), 2);
        assert_eq!(rows(&db).len(), 6);
    }

    #[test]
    fn a_group_at_its_member_limit_commits_and_the_rest_form_the_next() {
        let (_dir, db) = database(Duration::from_secs(30));
        let writer = Arc::new(Writer::with_limits(2, Duration::from_secs(60)));
        let first = writer.begin(|| db.connect(), db.busy_timeout()).unwrap();
        insert(&first, "a");
        let threads = queue_behind(&writer, &db, &["b", "c", "d"], &[]);
        writer.commit(first).unwrap();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        assert_eq!(writer.groups(), 2);
        assert_eq!(rows(&db), ["a", "b", "c", "d"]);
    }

    #[test]
    fn a_group_whose_transaction_is_lost_fails_every_member_and_keeps_nothing() {
        let (_dir, db) = database(Duration::from_secs(30));
        let writer = Arc::new(Writer::with_limits(128, Duration::from_secs(60)));
        let first = writer.begin(|| db.connect(), db.busy_timeout()).unwrap();
        insert(&first, "a");
        let (w, d) = (writer.clone(), db.clone());
        let second = std::thread::spawn(move || {
            let turn = w.begin(|| d.connect(), d.busy_timeout())?;
            insert(&turn, "b");
            // What SQLite does by itself on some I/O errors: the whole transaction is gone.
            turn.connection()
                .unwrap()
                .execute_batch("ROLLBACK")
                .unwrap();
            w.commit(turn)
        });
        while writer.queued() < 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let first_outcome = writer.commit(first);
        assert!(matches!(
            second.join().unwrap(),
            Err(StoreError::Failure(_))
        ));
        assert!(matches!(first_outcome, Err(StoreError::Failure(_))));
        assert!(rows(&db).is_empty());
        // The store goes on.
        let next = writer.begin(|| db.connect(), db.busy_timeout()).unwrap();
        insert(&next, "c");
        writer.commit(next).unwrap();
        assert_eq!(rows(&db), ["c"]);
    }

    #[test]
    fn a_write_that_waits_past_the_busy_timeout_fails_busy_and_the_holder_still_commits() {
        let (_dir, db) = database(Duration::from_millis(300));
        let writer = Arc::new(Writer::default());
        let first = writer.begin(|| db.connect(), db.busy_timeout()).unwrap();
        insert(&first, "a");
        let (w, d) = (writer.clone(), db.clone());
        let waited = std::thread::spawn(move || {
            w.begin(|| d.connect(), d.busy_timeout())
                .map(|turn| w.roll_back(turn))
        });
        assert!(matches!(waited.join().unwrap(), Err(StoreError::Busy(_))));
        assert_eq!(writer.queued(), 0);
        writer.commit(first).unwrap();
        assert_eq!(rows(&db), ["a"]);
    }

    #[test]
    fn many_writers_at_once_all_commit_in_fewer_commits_than_writes() {
        let (_dir, db) = database(Duration::from_secs(30));
        let writer = Arc::new(Writer::with_limits(128, Duration::from_secs(60)));
        let start = Arc::new(Barrier::new(32));
        let threads: Vec<_> = (0..32)
            .map(|i| {
                let (writer, db, start) = (writer.clone(), db.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let turn = writer.begin(|| db.connect(), db.busy_timeout())?;
                    insert(&turn, &format!("{i:02}"));
                    writer.commit(turn)
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        assert_eq!(rows(&db).len(), 32);
    }

    #[test]
    fn the_last_write_of_a_group_rolling_back_still_commits_the_others() {
        let (_dir, db) = database(Duration::from_secs(30));
        let writer = Arc::new(Writer::with_limits(128, Duration::from_secs(60)));
        let first = writer.begin(|| db.connect(), db.busy_timeout()).unwrap();
        insert(&first, "a");
        let threads = queue_behind(&writer, &db, &["b"], &["b"]);
        writer.commit(first).unwrap();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        assert_eq!(writer.groups(), 1);
        assert_eq!(rows(&db), ["a"]);
    }
}

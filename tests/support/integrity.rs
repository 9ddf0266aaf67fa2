//! Whether a store's database is intact: the database's own check, then the store's invariants,
//! the same on both backends ([`check`], entry point `backends::integrity`).
//!
//! The database's own check: on SQLite `PRAGMA integrity_check` and `PRAGMA foreign_key_check`;
//! on PostgreSQL amcheck's `bt_index_check` (with `heapallindexed`) on every btree index of the
//! store's schema (the extension is created first; a server without it is a problem reported,
//! never a check skipped).
//!
//! The store's invariants are read from the schema (`host/src/store/sqlite/migrations.rs`,
//! `host/src/store/postgres/migrations.rs`: no declared foreign keys, so the references are the
//! code's) and from the code that writes the rows (`host/src/store/sqlite/transaction.rs`,
//! `store/sqlite/execution_rows.rs`, `store/postgres/transaction.rs`, the component's `engine/record.rs`,
//! `engine/runtime/execution.rs`): one set of queries, run alike on both backends, and one
//! implementation of the rules over the rows ([`problems`]):
//!
//! - every wide row (`managed_input_rounds`, `executions`) has its version row and every version
//!   row its wide row (both are inserted in one transaction, and a compare-and-set that finds
//!   one without the other is an error); a round's version row names the wide row's execution;
//!   versions start at 1;
//! - statuses are within the vocabulary (six for rounds, three for executions);
//! - a round's document is the component's JSON and agrees with its row (`record::to_row`):
//!   round id, execution, status, lease owner, deadline and creation time; a lease owner has an
//!   expiry and an expiry an owner; `failed` and only `failed` carries a failure; a round past
//!   `pending` that did not fail carries its answer, and a `pending` one none;
//! - an execution's document is JSON with an outcome once `finished` and none before; a queued
//!   or running one is held (owner and expiry), a finished one holds no expiry;
//! - execution items belong to an execution that exists (no orphan), are numbered 1, 2, 3... per
//!   execution (each append takes the next number) and are of a known kind;
//! - wake-up numbers are unique (each stamp takes the next number under the write lock);
//! - no round is open under a finished execution, held by the execution's last holder, when the
//!   execution was finished by its worker (`finish`, `give-up`: the same transaction fails every
//!   open round that worker holds). An execution that recovery ended (its outcome
//!   `recovery_unavailable`) may keep a round a moment longer: recovery ends rounds and
//!   executions in separate transactions, and a round made after its execution's last renewal
//!   outlives the execution's lease (it fails at its own expiry, within two lease periods).
//!
//! What a round's `execution_id` names need not exist: the managed-input store takes rounds for
//! any execution id (rounds made through the store API have no execution row), and wake-ups are
//! stamped for those ids too. A problem names the row (ids, columns) and what is wrong, never a
//! document's content: no answer, lease token or idempotency key.

use crate::backends::Db;
use anyhow::{Context, Result};
use m3::testing::internals::postgres::database::Database as PostgresDatabase;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

/// The statuses of a round, as its row's `status` column writes them.
const ROUND_STATUSES: [&str; 6] = [
    "pending",
    "response_validated",
    "delivery_started",
    "delivered",
    "resolved",
    "failed",
];

/// The statuses of a round that has not ended.
const OPEN_STATUSES: [&str; 4] = [
    "pending",
    "response_validated",
    "delivery_started",
    "delivered",
];

/// The statuses of an execution's row.
const EXECUTION_STATUSES: [&str; 3] = ["queued", "running", "finished"];

/// The kinds of an execution's items.
const ITEM_KINDS: [&str; 1] = ["tool-result"];

/// The queries that read the store's rows, the same text on both backends.
const ROUNDS: &str = "SELECT round_id, execution_id, status, owner_id, deadline_ns, \
                      created_at_ns, document FROM managed_input_rounds";
/// See [`ROUNDS`].
const ROUND_VERSIONS: &str = "SELECT round_id, execution_id, version, lease_expires_at_ns, \
                              updated_at_ns FROM managed_input_round_versions";
/// See [`ROUNDS`].
const EXECUTIONS: &str =
    "SELECT execution_id, status, owner_id, created_at_ns, document FROM executions";
/// See [`ROUNDS`].
const EXECUTION_VERSIONS: &str = "SELECT execution_id, version, lease_expires_at_ns, \
                                  updated_at_ns FROM execution_versions";
/// See [`ROUNDS`].
const ITEMS: &str = "SELECT execution_id, seq, kind FROM execution_items";
/// See [`ROUNDS`].
const WAKEUPS: &str = "SELECT execution_id, seq FROM execution_wakeups";

/// A round's wide row.
#[derive(Debug, Clone)]
pub struct RoundRow {
    /// `round_id`.
    pub round_id: String,
    /// `execution_id`.
    pub execution_id: String,
    /// `status`.
    pub status: String,
    /// `owner_id`.
    pub owner_id: Option<String>,
    /// `deadline_ns`.
    pub deadline_ns: Option<i64>,
    /// `created_at_ns`.
    pub created_at_ns: i64,
    /// `document`.
    pub document: String,
}

/// A version row (of a round or an execution).
#[derive(Debug, Clone)]
pub struct VersionRow {
    /// `round_id` or `execution_id`.
    pub id: String,
    /// A round's `execution_id` (none for an execution's).
    pub execution_id: Option<String>,
    /// `version`.
    pub version: i64,
    /// `lease_expires_at_ns`.
    pub lease_expires_at_ns: Option<i64>,
    /// `updated_at_ns`.
    pub updated_at_ns: i64,
}

/// An execution's wide row.
#[derive(Debug, Clone)]
pub struct ExecutionRow {
    /// `execution_id`.
    pub execution_id: String,
    /// `status`.
    pub status: String,
    /// `owner_id`.
    pub owner_id: Option<String>,
    /// `created_at_ns`.
    pub created_at_ns: i64,
    /// `document`.
    pub document: String,
}

/// Every row of the store that its invariants speak of, read in one snapshot.
#[derive(Debug, Clone, Default)]
pub struct Rows {
    /// `managed_input_rounds`.
    pub rounds: Vec<RoundRow>,
    /// `managed_input_round_versions`.
    pub round_versions: Vec<VersionRow>,
    /// `executions`.
    pub executions: Vec<ExecutionRow>,
    /// `execution_versions`.
    pub execution_versions: Vec<VersionRow>,
    /// `execution_items`: execution, number, kind.
    pub items: Vec<(String, i64, String)>,
    /// `execution_wakeups`: execution, number.
    pub wakeups: Vec<(String, i64)>,
}

/// `ok` when the database of `db` is intact, else every problem found, one per line.
pub fn check(db: &Db) -> String {
    let found = match db {
        Db::Sqlite(file) => sqlite(&file.path),
        Db::Postgres(database) => postgres(&database.url),
    };
    let problems = found.unwrap_or_else(|e| vec![format!("the check could not run: {e:#}")]);
    if problems.is_empty() {
        "ok".into()
    } else {
        problems.join("\n")
    }
}

/// The problems of the SQLite database at `path`.
fn sqlite(path: &Path) -> Result<Vec<String>> {
    let conn = rusqlite::Connection::open(path).context("opening the database")?;
    let mut problems = Vec::new();
    let checked: Vec<String> = conn
        .prepare("PRAGMA integrity_check")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if checked != ["ok"] {
        problems.extend(checked.into_iter().map(|p| format!("integrity_check: {p}")));
    }
    let dangling: Vec<String> = conn
        .prepare("PRAGMA foreign_key_check")?
        .query_map([], |r| {
            Ok(format!(
                "foreign_key_check: a row of {} refers to a missing row of {}",
                r.get::<_, String>(0)?,
                r.get::<_, String>(2)?
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    problems.extend(dangling);
    conn.execute_batch("BEGIN DEFERRED")?;
    let rows = sqlite_rows(&conn);
    conn.execute_batch("COMMIT")?;
    problems.extend(self::problems(&rows?));
    Ok(problems)
}

/// The store's rows of a SQLite database (inside the caller's read transaction).
fn sqlite_rows(conn: &rusqlite::Connection) -> Result<Rows> {
    fn all<T>(
        conn: &rusqlite::Connection,
        sql: &str,
        row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        conn.prepare(sql)
            .and_then(|mut s| s.query_map([], row)?.collect())
            .with_context(|| format!("reading: {sql}"))
    }
    Ok(Rows {
        rounds: all(conn, ROUNDS, |r| {
            Ok(RoundRow {
                round_id: r.get(0)?,
                execution_id: r.get(1)?,
                status: r.get(2)?,
                owner_id: r.get(3)?,
                deadline_ns: r.get(4)?,
                created_at_ns: r.get(5)?,
                document: r.get(6)?,
            })
        })?,
        round_versions: all(conn, ROUND_VERSIONS, |r| {
            Ok(VersionRow {
                id: r.get(0)?,
                execution_id: Some(r.get(1)?),
                version: r.get(2)?,
                lease_expires_at_ns: r.get(3)?,
                updated_at_ns: r.get(4)?,
            })
        })?,
        executions: all(conn, EXECUTIONS, |r| {
            Ok(ExecutionRow {
                execution_id: r.get(0)?,
                status: r.get(1)?,
                owner_id: r.get(2)?,
                created_at_ns: r.get(3)?,
                document: r.get(4)?,
            })
        })?,
        execution_versions: all(conn, EXECUTION_VERSIONS, |r| {
            Ok(VersionRow {
                id: r.get(0)?,
                execution_id: None,
                version: r.get(1)?,
                lease_expires_at_ns: r.get(2)?,
                updated_at_ns: r.get(3)?,
            })
        })?,
        items: all(conn, ITEMS, |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?,
        wakeups: all(conn, WAKEUPS, |r| Ok((r.get(0)?, r.get(1)?)))?,
    })
}

/// The problems of the PostgreSQL database at `url` (connected as the test server's superuser).
fn postgres(url: &str) -> Result<Vec<String>> {
    let database = PostgresDatabase::named(url, Duration::from_secs(10))
        .map_err(|e| anyhow::anyhow!("naming the database: {e}"))?;
    let conn = database.connect().context("connecting")?;
    let mut problems = Vec::new();
    // amcheck: every btree index of the store's schema, its heap included (`heapallindexed`).
    if let Err(e) = conn.batch("CREATE EXTENSION IF NOT EXISTS amcheck") {
        problems.push(format!("amcheck is not available on this server: {e}"));
    } else {
        let indexes: Vec<String> = conn
            .query(
                "SELECT c.relname::text FROM pg_index i \
                 JOIN pg_class c ON c.oid = i.indexrelid \
                 JOIN pg_am a ON a.oid = c.relam \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE a.amname = 'btree' AND n.nspname = current_schema() \
                 ORDER BY 1",
                vec![],
            )
            .context("listing the indexes")?
            .iter()
            .map(|r| r.get(0))
            .collect();
        // The store's tables have 8 primary keys and 6 indexes (and `m3_schema` none); fewer
        // means the walk missed some.
        if indexes.len() < 14 {
            problems.push(format!(
                "amcheck found {} btree indexes in the store's schema, not the 14 it has",
                indexes.len()
            ));
        }
        for index in &indexes {
            let quoted = index.replace('"', "\"\"");
            if let Err(e) = conn.query(
                &format!("SELECT bt_index_check('\"{quoted}\"'::regclass, true)::text"),
                vec![],
            ) {
                problems.push(format!(
                    "bt_index_check({index}): {}",
                    e.as_db_error()
                        .map_or_else(|| e.to_string(), |d| d.message().to_string())
                ));
            }
        }
    }
    conn.batch("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .context("beginning the read")?;
    conn.set_in_transaction(true);
    let rows = postgres_rows(&conn);
    let ended = conn.batch("COMMIT");
    conn.set_in_transaction(false);
    ended.context("ending the read")?;
    problems.extend(self::problems(&rows?));
    Ok(problems)
}

/// The store's rows of a PostgreSQL database (inside the caller's read transaction).
fn postgres_rows(conn: &m3::testing::internals::postgres::connection::Connection) -> Result<Rows> {
    let all = |sql: &str| {
        conn.query(sql, vec![])
            .with_context(|| format!("reading: {sql}"))
    };
    Ok(Rows {
        rounds: all(ROUNDS)?
            .iter()
            .map(|r| RoundRow {
                round_id: r.get(0),
                execution_id: r.get(1),
                status: r.get(2),
                owner_id: r.get(3),
                deadline_ns: r.get(4),
                created_at_ns: r.get(5),
                document: r.get(6),
            })
            .collect(),
        round_versions: all(ROUND_VERSIONS)?
            .iter()
            .map(|r| VersionRow {
                id: r.get(0),
                execution_id: Some(r.get(1)),
                version: r.get(2),
                lease_expires_at_ns: r.get(3),
                updated_at_ns: r.get(4),
            })
            .collect(),
        executions: all(EXECUTIONS)?
            .iter()
            .map(|r| ExecutionRow {
                execution_id: r.get(0),
                status: r.get(1),
                owner_id: r.get(2),
                created_at_ns: r.get(3),
                document: r.get(4),
            })
            .collect(),
        execution_versions: all(EXECUTION_VERSIONS)?
            .iter()
            .map(|r| VersionRow {
                id: r.get(0),
                execution_id: None,
                version: r.get(1),
                lease_expires_at_ns: r.get(2),
                updated_at_ns: r.get(3),
            })
            .collect(),
        items: all(ITEMS)?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect(),
        wakeups: all(WAKEUPS)?.iter().map(|r| (r.get(0), r.get(1))).collect(),
    })
}

/// A value of the database as a problem may show it: ids and statuses, at most 80 characters,
/// escaped.
fn shown(text: &str) -> String {
    let mut shown: String = text.chars().take(80).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    format!("{shown:?}")
}

/// A stored timestamp (`{"seconds", "nanoseconds"}`) in nanoseconds, as the rows' columns
/// hold it; `None` when it is not one.
fn nanoseconds(timestamp: &Value) -> Option<i64> {
    let seconds = timestamp.get("seconds")?.as_i64()?;
    let nanoseconds = timestamp.get("nanoseconds")?.as_i64()?;
    let ns = i128::from(seconds) * 1_000_000_000 + i128::from(nanoseconds);
    Some(ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
}

/// The document's spelling of a round's status (`response_validated`: `ResponseValidated`).
fn document_status(status: &str) -> String {
    status
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Every invariant of the store that `rows` break, each as one sentence naming the row.
pub fn problems(rows: &Rows) -> Vec<String> {
    let mut problems = Vec::new();
    round_problems(rows, &mut problems);
    execution_problems(rows, &mut problems);
    problems
}

/// The rounds' invariants (their rows, versions and documents).
fn round_problems(rows: &Rows, problems: &mut Vec<String>) {
    let versions: BTreeMap<&str, &VersionRow> = rows
        .round_versions
        .iter()
        .map(|v| (v.id.as_str(), v))
        .collect();
    let wide: BTreeSet<&str> = rows.rounds.iter().map(|r| r.round_id.as_str()).collect();
    for version in &rows.round_versions {
        if !wide.contains(version.id.as_str()) {
            problems.push(format!(
                "round {}: a version row without its round (an orphan)",
                shown(&version.id)
            ));
        }
    }
    for round in &rows.rounds {
        let id = shown(&round.round_id);
        let mut problem = |what: String| problems.push(format!("round {id}: {what}"));
        match versions.get(round.round_id.as_str()) {
            None => problem("no version row".into()),
            Some(version) => {
                if version.execution_id.as_deref() != Some(round.execution_id.as_str()) {
                    problem("its version row names another execution".into());
                }
                if version.version < 1 {
                    problem(format!("version {} (versions start at 1)", version.version));
                }
                if round.owner_id.is_some() != version.lease_expires_at_ns.is_some() {
                    problem("a lease owner without an expiry, or an expiry without one".into());
                }
            }
        }
        if !ROUND_STATUSES.contains(&round.status.as_str()) {
            problem(format!("status {} is not a round's", shown(&round.status)));
        }
        let Ok(document) = serde_json::from_str::<Value>(&round.document) else {
            problem("its document is not JSON".into());
            continue;
        };
        let pending = &document["pending"];
        if pending["round_id"].as_str() != Some(round.round_id.as_str()) {
            problem("its document is another round's".into());
        }
        if pending["execution_id"].as_str() != Some(round.execution_id.as_str()) {
            problem("its document names another execution".into());
        }
        if document["status"].as_str() != Some(document_status(&round.status).as_str()) {
            problem("its document's status disagrees with its row's".into());
        }
        let owner = document["lease"]["owner_id"].as_str();
        if owner != round.owner_id.as_deref() {
            problem("its document's lease owner disagrees with its row's".into());
        }
        let deadline = match &pending["deadline"] {
            Value::Null => None,
            at => Some(nanoseconds(at)),
        };
        if deadline != round.deadline_ns.map(Some) {
            problem("its document's deadline disagrees with its row's".into());
        }
        if nanoseconds(&pending["created_at"]) != Some(round.created_at_ns) {
            problem("its document's creation time disagrees with its row's".into());
        }
        let failed = round.status == "failed";
        if failed == document["failure"].is_null() {
            problem(if failed {
                "failed without a failure".into()
            } else {
                "a failure on a round that did not fail".into()
            });
        }
        let answered = !document["responses"].is_null();
        match round.status.as_str() {
            "pending" if answered => problem("pending with an answer".into()),
            "response_validated" | "delivery_started" | "delivered" | "resolved" if !answered => {
                problem(format!("{} without an answer", round.status));
            }
            _ => {}
        }
    }
}

/// The executions' invariants (their rows, versions, documents, items and wake-ups) and the
/// rounds open under finished executions.
fn execution_problems(rows: &Rows, problems: &mut Vec<String>) {
    let versions: BTreeMap<&str, &VersionRow> = rows
        .execution_versions
        .iter()
        .map(|v| (v.id.as_str(), v))
        .collect();
    let executions: BTreeMap<&str, &ExecutionRow> = rows
        .executions
        .iter()
        .map(|e| (e.execution_id.as_str(), e))
        .collect();
    for version in &rows.execution_versions {
        if !executions.contains_key(version.id.as_str()) {
            problems.push(format!(
                "execution {}: a version row without its execution (an orphan)",
                shown(&version.id)
            ));
        }
    }
    // Executions finished by their own worker, with their last holder.
    let mut finished_by_worker: BTreeMap<&str, &str> = BTreeMap::new();
    for execution in &rows.executions {
        let id = shown(&execution.execution_id);
        let mut problem = |what: String| problems.push(format!("execution {id}: {what}"));
        if !EXECUTION_STATUSES.contains(&execution.status.as_str()) {
            problem(format!(
                "status {} is not an execution's",
                shown(&execution.status)
            ));
            continue;
        }
        let expiry = match versions.get(execution.execution_id.as_str()) {
            None => {
                problem("no version row".into());
                None
            }
            Some(version) => {
                if version.version < 1 {
                    problem(format!("version {} (versions start at 1)", version.version));
                }
                version.lease_expires_at_ns
            }
        };
        let finished = execution.status == "finished";
        match (finished, execution.owner_id.is_some(), expiry.is_some()) {
            (true, _, true) => problem("finished, yet its lease has an expiry".into()),
            (false, false, _) | (false, _, false) => {
                problem(format!("{} without a holder and expiry", execution.status))
            }
            _ => {}
        }
        let Ok(document) = serde_json::from_str::<Value>(&execution.document) else {
            problem("its document is not JSON".into());
            continue;
        };
        let outcome = &document["outcome"];
        if finished == outcome.is_null() {
            problem(if finished {
                "finished without an outcome".into()
            } else {
                "an outcome before it finished".into()
            });
        }
        let recovered = outcome["failure"]["code"].as_str() == Some("RecoveryUnavailable");
        if let (true, false, Some(owner)) = (finished, recovered, execution.owner_id.as_deref()) {
            finished_by_worker.insert(execution.execution_id.as_str(), owner);
        }
    }
    for round in &rows.rounds {
        let Some(owner) = finished_by_worker.get(round.execution_id.as_str()) else {
            continue;
        };
        if OPEN_STATUSES.contains(&round.status.as_str())
            && round.owner_id.as_deref() == Some(*owner)
        {
            problems.push(format!(
                "round {}: {} under execution {}, which its worker finished (that finish fails \
                 the rounds it holds)",
                shown(&round.round_id),
                round.status,
                shown(&round.execution_id)
            ));
        }
    }
    let mut numbers: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (execution_id, seq, kind) in &rows.items {
        if !executions.contains_key(execution_id.as_str()) {
            problems.push(format!(
                "execution item {} of execution {}: no such execution (an orphan)",
                seq,
                shown(execution_id)
            ));
        }
        if !ITEM_KINDS.contains(&kind.as_str()) {
            problems.push(format!(
                "execution item {} of execution {}: kind {} is not an item's",
                seq,
                shown(execution_id),
                shown(kind)
            ));
        }
        numbers.entry(execution_id.as_str()).or_default().push(*seq);
    }
    for (execution_id, mut seqs) in numbers {
        seqs.sort_unstable();
        if seqs.iter().zip(1..).any(|(seq, expected)| *seq != expected) {
            problems.push(format!(
                "execution {}: its items are not numbered 1 to {}",
                shown(execution_id),
                seqs.len()
            ));
        }
    }
    let mut stamped: BTreeMap<i64, &str> = BTreeMap::new();
    for (execution_id, seq) in &rows.wakeups {
        if let Some(other) = stamped.insert(*seq, execution_id.as_str()) {
            problems.push(format!(
                "wake-ups of executions {} and {} share the number {seq}",
                shown(other),
                shown(execution_id)
            ));
        }
    }
}

//! One PostgreSQL connection, called synchronously from any thread.
//!
//! The store import's functions are synchronous and run on whatever thread calls the component
//! (a caller's, a tokio worker's); a client library's own blocking wrapper would start a runtime
//! inside the caller's and panic. So every connection is driven on the backend's own small
//! runtime ([`io`]), and a call hands it the statement and waits for the answer on a plain
//! channel, as a SQLite call waits on its file.

use crate::store::idle::Pooled;
use crate::store::statements::Value;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Row, Statement};

/// A statement's parameter, owned so that it can cross to the I/O runtime.
pub type Param = Box<dyn ToSql + Send + Sync>;

/// The runtime that drives every PostgreSQL connection of this process: one thread, started on
/// first use.
fn io() -> &'static tokio::runtime::Runtime {
    static IO: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("m3-postgres")
            .enable_all()
            .build()
            .expect("the PostgreSQL I/O runtime starts")
    })
}

/// Runs `future` on the I/O runtime and waits for its output on this thread.
pub fn block<T: Send + 'static>(future: impl Future<Output = T> + Send + 'static) -> T {
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    io().spawn(async move {
        let _ = sender.send(future.await);
    });
    receiver
        .recv()
        .expect("the PostgreSQL I/O runtime answers every call")
}

/// What a connection hears besides the answers to its statements.
pub type OnNotification = Box<dyn Fn(&str, &str) + Send + Sync>;

/// An open connection: its client, the statements it has prepared, and whether it is broken or
/// inside a transaction (then it is never reused).
pub struct Connection {
    client: Arc<Client>,
    statements: Mutex<HashMap<String, Statement>>,
    /// The driving task ended: the server or the socket went away.
    closed: Arc<AtomicBool>,
    /// A transaction was begun and not yet ended.
    in_transaction: AtomicBool,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

impl Pooled for Connection {
    fn reusable(&self) -> bool {
        !self.closed.load(Ordering::Acquire)
            && !self.client.is_closed()
            && !self.in_transaction.load(Ordering::Acquire)
    }
}

impl Connection {
    /// Connects with `config`; notifications (`LISTEN`) go to `on_notification` (channel,
    /// payload), or are dropped.
    pub fn open(
        config: &Config,
        on_notification: Option<OnNotification>,
    ) -> Result<Self, tokio_postgres::Error> {
        let config = config.clone();
        let (client, mut connection) = block(async move { config.connect(NoTls).await })?;
        let closed = Arc::new(AtomicBool::new(false));
        let ended = closed.clone();
        io().spawn(async move {
            loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(note))) => {
                        if let Some(on) = &on_notification {
                            on(note.channel(), note.payload());
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => break,
                }
            }
            ended.store(true, Ordering::Release);
        });
        Ok(Self {
            client: Arc::new(client),
            statements: Mutex::default(),
            closed,
            in_transaction: AtomicBool::new(false),
        })
    }

    /// Whether the connection is gone.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.client.is_closed()
    }

    /// Marks whether a transaction is open on it (a connection inside one is never reused).
    pub fn set_in_transaction(&self, open: bool) {
        self.in_transaction.store(open, Ordering::Release);
    }

    /// Runs statements without parameters (simple protocol).
    pub fn batch(&self, sql: &str) -> Result<(), tokio_postgres::Error> {
        let client = self.client.clone();
        let sql = sql.to_string();
        block(async move { client.batch_execute(&sql).await })
    }

    /// The statement for `sql`, prepared once per connection (its `?N` placeholders as `$N`).
    fn statement(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self
            .statements
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(sql)
        {
            return Ok(statement.clone());
        }
        let client = self.client.clone();
        let text = numbered(sql);
        let statement = block(async move { client.prepare(&text).await })?;
        self.statements
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(sql.to_string(), statement.clone());
        Ok(statement)
    }

    /// The rows `sql` returns with `params`.
    pub fn query(&self, sql: &str, params: Vec<Param>) -> Result<Vec<Row>, tokio_postgres::Error> {
        let statement = self.statement(sql)?;
        let client = self.client.clone();
        block(async move { client.query(&statement, &references(&params)).await })
    }

    /// How many rows `sql` changed with `params`.
    pub fn execute(&self, sql: &str, params: Vec<Param>) -> Result<u64, tokio_postgres::Error> {
        let statement = self.statement(sql)?;
        let client = self.client.clone();
        block(async move { client.execute(&statement, &references(&params)).await })
    }

    /// Runs `steps` in one flight: every request is written before any answer is awaited (one
    /// round trip), and the server runs them in this order, each after the one before ended
    /// (under `READ COMMITTED` each statement's snapshot is taken then, after a lock an earlier
    /// step waited for was granted). One answer per step, or the first step's failure (the
    /// steps after a failed one inside a transaction fail too, as the transaction is aborted).
    pub fn flight(&self, steps: Vec<Step<'_>>) -> Result<Vec<Answer>, tokio_postgres::Error> {
        self.flight_each(steps)?.into_iter().collect()
    }

    /// [`Connection::flight`], with each step's own outcome.
    pub fn flight_each(
        &self,
        steps: Vec<Step<'_>>,
    ) -> Result<Vec<Result<Answer, tokio_postgres::Error>>, tokio_postgres::Error> {
        let mut prepared = Vec::with_capacity(steps.len());
        for step in steps {
            prepared.push(match step {
                Step::Query(sql, params) => Prepared::Query(self.statement(sql)?, params),
                Step::Execute(sql, params) => Prepared::Execute(self.statement(sql)?, params),
                Step::Batch(sql) => Prepared::Batch(sql.to_string()),
            });
        }
        let client = self.client.clone();
        block(async move {
            let mut running: Vec<AnswerFuture> = prepared
                .into_iter()
                .map(|step| -> AnswerFuture {
                    let client = client.clone();
                    match step {
                        Prepared::Query(statement, params) => Box::pin(async move {
                            let rows = client.query(&statement, &references(&params)).await?;
                            Ok(Answer::Rows(rows))
                        }),
                        Prepared::Execute(statement, params) => Box::pin(async move {
                            let count = client.execute(&statement, &references(&params)).await?;
                            Ok(Answer::Count(count))
                        }),
                        Prepared::Batch(sql) => Box::pin(async move {
                            client.batch_execute(&sql).await?;
                            Ok(Answer::Done)
                        }),
                    }
                })
                .collect();
            // A request is written when its future is first polled: polled in order, they
            // reach the server in order.
            let mut answers: Vec<Option<Result<Answer, tokio_postgres::Error>>> =
                running.iter().map(|_| None).collect();
            std::future::poll_fn(|cx| {
                let mut pending = false;
                for (future, answer) in running.iter_mut().zip(answers.iter_mut()) {
                    if answer.is_none() {
                        match future.as_mut().poll(cx) {
                            std::task::Poll::Ready(done) => *answer = Some(done),
                            std::task::Poll::Pending => pending = true,
                        }
                    }
                }
                if pending {
                    std::task::Poll::Pending
                } else {
                    std::task::Poll::Ready(())
                }
            })
            .await;
            Ok(answers.into_iter().flatten().collect())
        })
    }
}

/// One request of a [`Connection::flight`].
pub enum Step<'a> {
    /// A statement's rows (prepared once per connection).
    Query(&'a str, Vec<Param>),
    /// How many rows a statement changed (prepared once per connection).
    Execute(&'a str, Vec<Param>),
    /// Statements without parameters (simple protocol): `COMMIT`, `SAVEPOINT x`.
    Batch(&'a str),
}

/// What a step of a statement written once (`store/statements/`) asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// Its rows.
    Query,
    /// How many rows it changed.
    Execute,
    /// It ran (no parameters).
    Batch,
}

impl Kind {
    /// The step that runs `sql` with `args`.
    pub(crate) fn step(self, sql: &str, args: Vec<Value>) -> Step<'_> {
        match self {
            Self::Query => Step::Query(sql, args.into_iter().map(param).collect()),
            Self::Execute => Step::Execute(sql, args.into_iter().map(param).collect()),
            Self::Batch => Step::Batch(sql),
        }
    }
}

/// A statement parameter as the client takes it, typed even when null.
fn param(value: Value) -> Param {
    match value {
        Value::Int(v) => Box::new(v),
        Value::Text(v) => Box::new(v),
    }
}

/// `sql` with SQLite's `?N` placeholders written as PostgreSQL's `$N` (outside quoted text; the
/// statements written once use only `?N`, PostgreSQL's own only `$N`).
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => quoted = !quoted,
            '?' if !quoted && chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push('$');
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// The answer to one [`Step`].
#[derive(Debug)]
pub enum Answer {
    /// A [`Step::Query`]'s rows.
    Rows(Vec<Row>),
    /// A [`Step::Execute`]'s count.
    Count(u64),
    /// A [`Step::Batch`] ran.
    Done,
}

impl Answer {
    /// The rows of a query (none for any other step).
    pub fn rows(self) -> Vec<Row> {
        match self {
            Self::Rows(rows) => rows,
            _ => Vec::new(),
        }
    }

    /// Whether a query returned rows.
    pub fn found(&self) -> bool {
        matches!(self, Self::Rows(rows) if !rows.is_empty())
    }

    /// The count of an execute (0 for any other step).
    pub fn count(&self) -> u64 {
        match self {
            Self::Count(count) => *count,
            _ => 0,
        }
    }
}

enum Prepared {
    Query(Statement, Vec<Param>),
    Execute(Statement, Vec<Param>),
    Batch(String),
}

type AnswerFuture =
    std::pin::Pin<Box<dyn Future<Output = Result<Answer, tokio_postgres::Error>> + Send>>;

/// The parameters as the client takes them.
fn references(params: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

/// Owned parameters for a statement: `params![a, b]`.
macro_rules! params {
    ($($value:expr),* $(,)?) => {
        vec![$(Box::new($value) as $crate::store::postgres::connection::Param),*]
    };
}
pub(crate) use params;

#[cfg(test)]
mod tests {
    use super::numbered;

    #[test]
    fn placeholders_are_numbered_outside_quoted_text() {
        assert_eq!(
            numbered("SELECT a FROM t WHERE a = ?1 AND b > ?12 AND c = '?3' AND d = ?"),
            "SELECT a FROM t WHERE a = $1 AND b > $12 AND c = '?3' AND d = ?"
        );
        assert_eq!(numbered("SELECT $1::TEXT"), "SELECT $1::TEXT");
    }
}

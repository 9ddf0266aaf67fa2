//! `m3 serve`: the CLI's contract over HTTP, for a browser or a script on another process. The
//! JSON API (`api.rs`) answers with the same JSON shapes and typed errors as the commands'
//! `--json` (`problem.rs`); `/api/events/stream` streams the store's changes as Server-Sent
//! Events (`events.rs`); the web inbox (`page.rs`, `assets/`) is built from both. Everything is
//! behind the guard (`auth.rs`: token or login cookie, CSRF, loopback-only without a token).
//! Paths and queries are read by `extract.rs` (a bad one is a typed error too); after logging
//! in a browser goes back only to a path of this server (`local_path.rs`).
//! Library calls (SQLite, the component) run on the blocking pool, never on the runtime's
//! threads.
//!
//! # Files
//!
//! `m3 serve`, the CLI's contract over HTTP (axum on tokio).
//!
//! - `mod.rs`: the flags, the refusal of a non-loopback `--listen` without a token
//!   (`token_required`), the runtime, the bound address as the first stdout line, graceful stop on
//!   Ctrl-C/SIGTERM (open event streams end, or the stop would wait for them); on a database that
//!   does not exist yet, serving at once (every call 503 `database_waiting`, naming it) and
//!   opening it once created, the watcher then streaming everything it finds.
//! - `notify/`: `--notify`, the webhooks (its own code map): events queued in the database's
//!   notification ledger, posted to each target by a task of its own, signed, retried.
//! - `connections.rs`: the accept loop (hyper's HTTP/1.1 under the axum router, each connection on
//!   its own task, `TCP_NODELAY`): a connection that does not send a request's head within the
//!   request timeout (30 s; idle keep-alive ones too) is closed, so clients that never finish a
//!   request cannot use up the file descriptors; on stop, the requests in flight finish.
//! - `api.rs`: the routes, each answering with the value its command's `--json` prints (the same
//!   functions: `pending::list_in`, `inspect::round_value` (redacted only),
//!   `inspect::status_value`, `inspect::events_value`, `respond::submit`), every library call on
//!   the blocking pool (one write at a time, in arrival order: many at once starved each other in
//!   SQLite's busy handler before the host took SQLite's lock with retries of its own; BENCHMARKS
//!   section 9), bodies bounded to 8 MiB and to the request timeout (408 `request_timeout`); an
//!   answer's `responses` reach the component as the client wrote them (its strict parser refuses a
//!   key given twice).
//! - `problem.rs`: an error as `host/cli/src/error_report.rs` classifies it, with its HTTP status
//!   (400, 404, 409, 410 `round_terminal`, `delivered_then_failed`, `delivery_unconfirmed` and
//!   `recovery_unavailable`, 401, 403, 405, 408, 413, 503 `storage_busy`, 500) and the
//!   `request_key` and `field` the component named (a page shows the error next to that field); the
//!   router's fallbacks make every refusal typed JSON (`route_not_found`, `method_not_allowed` with
//!   `Allow`), and a browser's GET of a page that does not exist gets `assets/not_found.html`.
//! - `extract.rs`: the path and query extractors, whose refusals are typed (`invalid_path`,
//!   `invalid_query`: a bad percent-encoding, a parameter given twice), never axum's `text/plain`.
//! - `local_path.rs`: `LocalPath`, where a login may lead (`next`): one leading `/` (not `//` or
//!   `/\`), visible ASCII without a backslash or control character, also once percent-decoded, at
//!   most 2048 bytes; the guard's redirect, the login form and the `Location` after a login accept
//!   only it (a bad one is dropped on GET, refused with 400 and no cookie on POST).
//! - `auth.rs`: the guard in front of every page and call (and of every path and method no route
//!   has) but the login form and the assets: the token (bearer header, or the login cookie:
//!   HttpOnly, SameSite=Strict, an HMAC of the token; `Token::parse` refuses an empty, blank or
//!   control-character token from any source), compared in constant time, never logged or quoted;
//!   without a token, only an exact loopback `Host` (an authority of a host and an optional numeric
//!   port, the host compared whole: no DNS rebinding); CSRF for state-changing requests not sent
//!   with the bearer header (same origin by `Origin`/`Sec-Fetch-Site`, and the `X-M3-CSRF` value or
//!   a JSON body).
//! - `page.rs`: the login form, the one HTML shell of every page (`/`, `/rounds/{id}`,
//!   `/executions/{id}`), `GET /api/session` (the CSRF value for same-origin scripts), the security
//!   headers (a Content-Security-Policy allowing this origin only, `nosniff`, no framing,
//!   `no-store`); `assets/` (`index.html`, `login.html`, `not_found.html`, `app.js`, `app.css`) are
//!   embedded with `include_str!`. `assets/app.js`: the inbox (pending rounds newest first,
//!   executions), a round's page (its progress, a form built from each request's `requestedSchema`:
//!   every MCP field kind, checks as the user types, the component's error next to its field,
//!   URL-mode requests as text with a consent box, decline and cancel), an execution's page (facts,
//!   rounds, history, cancel), all kept current by one `EventSource`; elements are built with
//!   `textContent` only.
//! - `events.rs`: the one watcher task (its first look taken before the address is printed, so
//!   every later change is streamed; a round that moved several steps between two looks is said in
//!   each: `round_answered` before its end) and `/api/events/stream` (Server-Sent Events,
//!   keep-alive comments, `lagged` for a slow reader). Hidden test knobs of `m3 serve`:
//!   `--keep-alive-secs`, `--event-capacity`, `--send-buffer-bytes` (the listening socket's send
//!   buffer, which accepted connections inherit, so a stalled reader's buffers fill with little
//!   data), `--request-timeout-secs`.

mod api;
mod auth;
mod connections;
mod events;
mod extract;
mod local_path;
mod notify;
mod page;
mod problem;

use crate::Cli;
use anyhow::{Result, anyhow};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// The seconds `--keep-alive-secs` and `--request-timeout-secs` allow.
const KNOB_RANGE: crate::seconds::Range = crate::seconds::Range {
    min: 0.01,
    max: crate::seconds::DAY,
};

/// Arguments of `m3 serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on (port 0: any free port). The bound address is the first
    /// stdout line. A non-loopback address needs a token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8383")]
    listen: SocketAddr,
    /// Every API call must carry `Authorization: Bearer TOKEN`.
    #[arg(
        long,
        value_name = "TOKEN",
        env = TOKEN_VARIABLE,
        hide_env_values = true
    )]
    token: Option<String>,
    /// Read the token from FILE (its first line).
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// Test knob (hidden): seconds between the keep-alive comments of an idle event stream.
    #[arg(long, hide = true, value_name = "SECS", default_value_t = 15.0)]
    keep_alive_secs: f64,
    /// Test knob (hidden): seconds a client may take to send a request's head, or its body
    /// (then its connection is closed, or the request refused with 408).
    #[arg(long, hide = true, value_name = "SECS", default_value_t = 30.0)]
    request_timeout_secs: f64,
    /// Test knob (hidden): how many changes wait for a subscriber before it lags.
    #[arg(
        long,
        hide = true,
        value_name = "N",
        default_value_t = events::CAPACITY,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000)
    )]
    event_capacity: usize,
    /// Test knob (hidden): each connection's socket send buffer in bytes (default: the
    /// system's, which grows to megabytes), so a stalled reader's buffers fill quickly.
    #[arg(long, hide = true, value_name = "BYTES")]
    send_buffer_bytes: Option<u32>,
    /// POST an event to URL when a round starts waiting for an answer (repeatable; https, or
    /// http to a loopback host). An address that holds a secret (a Slack webhook's) is better
    /// in --notify-file: a command line is visible to other users of the machine.
    #[arg(long = "notify", value_name = "URL")]
    notify: Vec<String>,
    /// Read notification targets from FILE: one per line, `URL` or `json URL` or `slack URL`;
    /// blank lines and lines starting with # are skipped.
    #[arg(long, value_name = "FILE")]
    notify_file: Option<PathBuf>,
    /// The body --notify targets get: the event's JSON document, or a Slack incoming-webhook
    /// message with a button to the round's form.
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "json")]
    notify_format: notify::target::Format,
    /// Which events are sent (comma-separated): waiting (a round starts waiting), failed (a
    /// round failed), finished (an execution finished).
    #[arg(
        long,
        value_enum,
        value_name = "EVENTS",
        value_delimiter = ',',
        default_value = "waiting"
    )]
    notify_on: Vec<notify::event::Kind>,
    /// Sign each notification with the secret on FILE's first line (at least 16 bytes):
    /// `X-M3-Signature: v1=HEX`, an HMAC-SHA256 of `TIMESTAMP.BODY`, with `X-M3-Timestamp`.
    #[arg(long, value_name = "FILE")]
    notify_secret_file: Option<PathBuf>,
    /// The address people reach this inbox at, which notification links start with (default:
    /// the listening address).
    #[arg(long, value_name = "URL")]
    public_url: Option<String>,
    /// Allow notification targets on plain http to hosts other than loopback ones (events
    /// then travel in clear).
    #[arg(long)]
    notify_insecure: bool,
    /// Test knob (hidden): seconds one notification's POST may take.
    #[arg(long, hide = true, value_name = "SECS", default_value_t = 10.0)]
    notify_timeout_secs: f64,
    /// Test knob (hidden): seconds before a failed notification's first retry (doubled each
    /// time, at most five minutes).
    #[arg(long, hide = true, value_name = "SECS", default_value_t = 1.0)]
    notify_retry_secs: f64,
    /// Test knob (hidden): how many tries a notification gets before it is abandoned.
    #[arg(
        long,
        hide = true,
        value_name = "N",
        default_value_t = 30,
        value_parser = clap::builder::RangedU64ValueParser::<u32>::new().range(1..=1000)
    )]
    notify_attempts: u32,
}

/// What every request handler shares.
pub struct Shared {
    /// The executions on `--db`, once its database exists (a server started before it waits).
    pub executions: std::sync::OnceLock<Arc<m3::Executions>>,
    /// The database as it may be shown (a path, or a URL without its password).
    pub database: String,
    /// Who may call: the token (if any), the login cookie's and the CSRF value.
    pub guard: auth::Guard,
    /// The store's changes, for `/api/events/stream`.
    pub changes: tokio::sync::broadcast::Sender<events::Change>,
    /// Wakes the watcher after a change made through the API.
    pub nudge: tokio::sync::Notify,
    /// One write (answer, cancel) at a time from this server, taken in arrival order: many at
    /// once would wait for SQLite's lock in its busy handler's sleeps, which serve no order (one
    /// unlucky writer can wait seconds, up to `storage_busy`, while later ones pass it).
    pub writes: tokio::sync::Semaphore,
    /// How often an idle event stream sends a keep-alive comment.
    pub keep_alive: std::time::Duration,
    /// How long a client may take to send a request's head or body.
    pub request_timeout: std::time::Duration,
    /// Set when the server stops: open event streams end (a graceful stop waits for every
    /// response to end, and a stream's never would).
    pub stopping: tokio::sync::watch::Sender<bool>,
    /// The notifier, with `--notify` or `--notify-file`, once the database exists.
    pub notifier: std::sync::OnceLock<Arc<notify::Notifier>>,
    /// Why a database that appeared could not be opened yet, while the server waits for it.
    pub opening: std::sync::Mutex<Option<String>>,
}

impl Shared {
    /// The executions, or `database_waiting` (503) while the database does not exist yet.
    pub fn executions(&self) -> Result<&Arc<m3::Executions>> {
        self.executions.get().ok_or_else(|| {
            let opening = self.opening.lock().unwrap_or_else(|p| p.into_inner());
            match opening.as_deref() {
                // The file appeared but does not open (yet): said as it is, never as missing.
                Some(why) => anyhow!(
                    "StorageError: the database at {} exists but cannot be opened yet ({why}); \
                     this server keeps trying (database_waiting)",
                    self.database
                ),
                None => anyhow!(
                    "StorageError: there is no database at {} yet; this server waits for the \
                     first execution to create it (`m3 run` does; check --db or M3_DB if none \
                     should be needed) (database_waiting)",
                    self.database
                ),
            }
        })
    }
}

/// The environment variable `--token` is read from when the flag is not given.
const TOKEN_VARIABLE: &str = "M3_SERVE_TOKEN";

/// The token from `--token` (or [`TOKEN_VARIABLE`]) or the first line of `--token-file`, if
/// any; a blank one is refused wherever it came from (an empty variable too, which clap would
/// take for no token at all), its text never quoted.
fn token(args: &ServeArgs) -> Result<Option<auth::Token>> {
    let (text, source) = match (&args.token, &args.token_file) {
        (Some(token), _) => (token.clone(), "--token (or M3_SERVE_TOKEN)"),
        (None, Some(file)) => {
            let text = crate::read_input(file).map_err(crate::invalid_input)?;
            let first = text.lines().next().unwrap_or_default().to_string();
            (first, "the first line of --token-file")
        }
        (None, None) => match std::env::var_os(TOKEN_VARIABLE) {
            Some(value) if value.is_empty() => (String::new(), "M3_SERVE_TOKEN"),
            _ => return Ok(None),
        },
    };
    auth::Token::parse(&text, source)
        .map(Some)
        .map_err(crate::invalid_input)
}

/// `m3 serve`.
pub fn serve(cli: &Cli, args: &ServeArgs) -> Result<ExitCode> {
    let token = token(args)?;
    if !args.listen.ip().is_loopback() && token.is_none() {
        return Err(crate::invalid_input(format!(
            "--listen {} is not a loopback address: give --token or --token-file so that only \
             callers with the token are answered (token_required)",
            args.listen
        )));
    }
    let keep_alive = crate::seconds::seconds("--keep-alive-secs", args.keep_alive_secs, KNOB_RANGE)
        .map_err(crate::invalid_input)?;
    let request_timeout = crate::seconds::seconds(
        "--request-timeout-secs",
        args.request_timeout_secs,
        KNOB_RANGE,
    )
    .map_err(crate::invalid_input)?;
    let notify = notify_settings(args)?;
    let executions = std::sync::OnceLock::new();
    if crate::database_exists(cli) {
        let _ = executions.set(crate::recovered_executions(cli)?);
    } else if let Some(url) = crate::postgres_url(cli) {
        // A server that cannot be reached says so, rather than that nothing is there yet.
        m3::health::postgres_health(url, std::time::Duration::from_secs(5))?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow!("EngineError: cannot start the server's runtime: {e}"))?;
    let shared = Shared {
        executions,
        database: crate::database_shown(cli),
        guard: auth::Guard::new(token)?,
        changes: tokio::sync::broadcast::channel(args.event_capacity).0,
        nudge: tokio::sync::Notify::new(),
        writes: tokio::sync::Semaphore::new(1),
        keep_alive,
        request_timeout,
        stopping: tokio::sync::watch::Sender::new(false),
        notifier: std::sync::OnceLock::new(),
        opening: std::sync::Mutex::new(None),
    };
    runtime.block_on(run(
        cli,
        shared,
        args.listen,
        args.send_buffer_bytes,
        notify,
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// The notification settings of the flags, if any target is given; every refusal says which
/// flag and never quotes a target's address or the secret.
fn notify_settings(args: &ServeArgs) -> Result<Option<notify::Settings>> {
    let insecure = args.notify_insecure;
    let mut targets = Vec::new();
    for address in &args.notify {
        let target = notify::target::Target::parse(address, args.notify_format, insecure)
            .map_err(|e| crate::invalid_input(format!("--notify: {e}")))?;
        targets.push(target);
    }
    if let Some(file) = &args.notify_file {
        let text = crate::read_input(file).map_err(crate::invalid_input)?;
        targets.extend(
            notify::target::parse_file(&text, args.notify_format, insecure)
                .map_err(crate::invalid_input)?,
        );
    }
    let mut seen = std::collections::HashSet::new();
    targets.retain(|t| seen.insert(t.id.clone()));
    let public_url = match &args.public_url {
        None => String::new(),
        Some(url) => public_url(url).map_err(crate::invalid_input)?,
    };
    if targets.is_empty() && args.notify_secret_file.is_some() {
        return Err(crate::invalid_input(
            "--notify-secret-file signs notifications, but no --notify or --notify-file \
             target is given",
        ));
    }
    let secret = match &args.notify_secret_file {
        None => None,
        Some(file) => {
            let text = crate::read_input(file).map_err(crate::invalid_input)?;
            Some(notify::signature::parse_secret(&text).map_err(crate::invalid_input)?)
        }
    };
    if targets.is_empty() {
        return Ok(None);
    }
    let range = crate::seconds::Range {
        min: 0.01,
        max: 3600.0,
    };
    let timeout = crate::seconds::seconds("--notify-timeout-secs", args.notify_timeout_secs, range)
        .map_err(crate::invalid_input)?;
    let retry = crate::seconds::seconds("--notify-retry-secs", args.notify_retry_secs, range)
        .map_err(crate::invalid_input)?;
    let mut kinds = args.notify_on.clone();
    kinds.dedup();
    Ok(Some(notify::Settings {
        targets,
        kinds,
        secret,
        public_url,
        timeout,
        retry,
        attempts: args.notify_attempts,
        started: chrono::Utc::now(),
    }))
}

/// `--public-url`: an http or https address without spaces, control characters, query or
/// fragment; its trailing `/` dropped (links add `/rounds/ID`).
fn public_url(url: &str) -> std::result::Result<String, String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let valid = rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
        && !url
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || c == '?' || c == '#');
    if !valid {
        return Err(
            "--public-url must be an http:// or https:// address without a query or fragment"
                .into(),
        );
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// Binds, takes the watcher's first look (every change after the address is printed is
/// streamed), says where, and serves until Ctrl-C or SIGTERM. Without a database yet, it serves
/// at once (every call answers `database_waiting`, naming the database) and looks for the
/// database every [`DATABASE_LOOK`]; once it exists, the watcher and the notifier start, and
/// every change since it was created is streamed.
async fn run(
    cli: &Cli,
    shared: Shared,
    listen: SocketAddr,
    send_buffer: Option<u32>,
    notify: Option<notify::Settings>,
) -> Result<()> {
    let listener = bind(listen, send_buffer).await.map_err(|e| {
        anyhow!("ManagedInputValidationError: cannot listen on {listen}: {e} (listen_failed)")
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| anyhow!("EngineError: the bound address is unknown: {e}"))?;
    let notify = notify.map(|mut settings| {
        if settings.public_url.is_empty() {
            settings.public_url = format!("http://{bound}");
            if bound.ip().is_unspecified() {
                eprintln!(
                    "m3 serve: notification links lead to {}, which no browser reaches: give \
                     --public-url",
                    settings.public_url
                );
            }
        }
        settings
    });
    // Registered before the address is printed: a SIGTERM sent as soon as it is read stops
    // the server as any other does, never by the signal's default action (killed by it).
    let stop = stop_signals()?;
    let shared = Arc::new(shared);
    let ready = shared.executions.get().is_some();
    let mut notify = Some(notify);
    if ready {
        watch(&shared, notify.take().flatten(), false).await?;
    }
    let app = api::router(shared.clone());
    println!("{bound}");
    if ready {
        eprintln!("m3 serve: listening on http://{bound} (Ctrl-C to stop)");
    } else {
        eprintln!(
            "m3 serve: listening on http://{bound} (Ctrl-C to stop); waiting for the first \
             execution to create the database at {}",
            shared.database
        );
    }
    let head_timeout = shared.request_timeout;
    let stopping = shared.clone();
    let serving = connections::serve(listener, app, head_timeout, async move {
        stop.await;
        stopping.stopping.send_replace(true);
    });
    let opening = async {
        if !ready {
            open_when_created(cli, &shared, notify.take().flatten()).await;
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        () = serving => {}
        () = opening => {}
    }
    Ok(())
}

/// How often a server started before its database looks for it.
const DATABASE_LOOK: std::time::Duration = std::time::Duration::from_millis(250);

/// Waits for the database to exist, opens it (after the same recovery pass as at start) and
/// starts the watcher (from nothing: every round is news) and the notifier.
async fn open_when_created(cli: &Cli, shared: &Arc<Shared>, notify: Option<notify::Settings>) {
    let mut said = false;
    loop {
        tokio::time::sleep(DATABASE_LOOK).await;
        if !tokio::task::block_in_place(|| crate::database_exists(cli)) {
            continue;
        }
        match tokio::task::block_in_place(|| crate::recovered_executions(cli)) {
            Ok(executions) => {
                let _ = shared.executions.set(executions);
                break;
            }
            Err(e) => {
                if !said {
                    said = true;
                    eprintln!("m3 serve: the database cannot be opened yet: {e:#}");
                }
                let why = format!("{e:#}");
                *shared.opening.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
            }
        }
    }
    eprintln!("m3 serve: the database at {} exists now", shared.database);
    if let Err(e) = watch(shared, notify, true).await {
        eprintln!("m3 serve: notifications cannot start: {e:#}");
    }
}

/// Starts the notifier (if any target is given) and the watcher; `from_nothing`: the
/// watcher's first look streams what it sees.
async fn watch(
    shared: &Arc<Shared>,
    notify: Option<notify::Settings>,
    from_nothing: bool,
) -> Result<()> {
    if let Some(settings) = notify {
        let executions = shared.executions()?.clone();
        let count = settings.targets.len();
        let notifier =
            tokio::task::spawn_blocking(move || notify::Notifier::new(executions, settings))
                .await
                .map_err(|e| anyhow!("EngineError: {e}"))??;
        let _ = shared.notifier.set(Arc::new(notifier));
        eprintln!("m3 serve: notifying {count} target(s)");
    }
    events::watch(shared.clone(), from_nothing).await;
    if let Some(notifier) = shared.notifier.get() {
        notifier.start();
    }
    Ok(())
}

/// The listener on `listen`; with `send_buffer`, its socket's send buffer set to that many
/// bytes, which every accepted connection inherits.
async fn bind(
    listen: SocketAddr,
    send_buffer: Option<u32>,
) -> std::io::Result<tokio::net::TcpListener> {
    let Some(bytes) = send_buffer else {
        return tokio::net::TcpListener::bind(listen).await;
    };
    let socket = if listen.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_send_buffer_size(bytes)?;
    socket.bind(listen)?;
    socket.listen(1024)
}

/// Installs the handlers of SIGTERM and SIGINT (Ctrl-C) now; the future resolves on either.
fn stop_signals() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let handler = |kind: SignalKind, name: &str| {
        signal(kind).map_err(|e| anyhow!("EngineError: cannot handle {name}: {e}"))
    };
    let mut term = handler(SignalKind::terminate(), "SIGTERM")?;
    let mut interrupt = handler(SignalKind::interrupt(), "SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

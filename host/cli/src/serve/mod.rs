//! `m3 serve`: the CLI's contract over HTTP, for a browser or a script on another process. The
//! JSON API (`api.rs`) answers with the same JSON shapes and typed errors as the commands'
//! `--json` (`problem.rs`); `/api/events/stream` streams the store's changes as Server-Sent
//! Events (`events.rs`); the web inbox (`page.rs`, `assets/`) is built from both. Everything is
//! behind the guard (`auth.rs`: token or login cookie, CSRF, loopback-only without a token).
//! Library calls (SQLite, the component) run on the blocking pool, never on the runtime's
//! threads.

mod api;
mod auth;
mod events;
mod page;
mod problem;

use crate::Cli;
use anyhow::{Result, anyhow};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

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
        env = "M3_SERVE_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
    /// Read the token from FILE (its first line).
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,
}

/// What every request handler shares.
pub struct Shared {
    /// The executions on `--db`.
    pub executions: Arc<m3::Executions>,
    /// Who may call: the token (if any), the login cookie's and the CSRF value.
    pub guard: auth::Guard,
    /// The store's changes, for `/api/events/stream`.
    pub changes: tokio::sync::broadcast::Sender<events::Change>,
    /// Wakes the watcher after a change made through the API.
    pub nudge: tokio::sync::Notify,
}

/// The token from `--token` or `--token-file`, if any.
fn token(args: &ServeArgs) -> Result<Option<auth::Token>> {
    let text = match (&args.token, &args.token_file) {
        (Some(token), _) => token.clone(),
        (None, Some(file)) => {
            let text = crate::read_input(file).map_err(crate::invalid_input)?;
            text.lines().next().unwrap_or_default().trim().to_string()
        }
        (None, None) => return Ok(None),
    };
    if text.is_empty() {
        return Err(crate::invalid_input(
            "the token is empty; give a non-empty --token or --token-file (empty_token)",
        ));
    }
    Ok(Some(auth::Token::new(text)))
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
    let executions = crate::recovered_executions(cli)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow!("EngineError: cannot start the server's runtime: {e}"))?;
    runtime.block_on(run(executions, token, args.listen))?;
    Ok(ExitCode::SUCCESS)
}

/// Binds, says where, and serves until Ctrl-C or SIGTERM.
async fn run(
    executions: Arc<m3::Executions>,
    token: Option<auth::Token>,
    listen: SocketAddr,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        anyhow!("ManagedInputValidationError: cannot listen on {listen}: {e} (listen_failed)")
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| anyhow!("EngineError: the bound address is unknown: {e}"))?;
    let (changes, _) = tokio::sync::broadcast::channel(events::CAPACITY);
    let shared = Arc::new(Shared {
        executions,
        guard: auth::Guard::new(token)?,
        changes,
        nudge: tokio::sync::Notify::new(),
    });
    events::watch(shared.clone());
    let app = api::router(shared);
    println!("{bound}");
    eprintln!("m3 serve: listening on http://{bound} (Ctrl-C to stop)");
    axum::serve(listener, app)
        .with_graceful_shutdown(stopped())
        .await
        .map_err(|e| anyhow!("EngineError: the server stopped: {e}"))
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stopped() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

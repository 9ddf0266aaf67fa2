//! The JSON API's routes. Each answers as its command's `--json` does (the same functions make
//! the values), with ids accepted by unique prefix (`ids.rs`); answers are never shown (a
//! round is its redacted projection, as `m3 show --redacted`).

use super::Shared;
use super::extract::{Id, Params};
use super::page;
use super::problem::Problem;
use crate::{MAX_INPUT_BYTES, json};
use axum::body::{Body, HttpBody};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde_json::Value;
use std::sync::Arc;

/// An API call's result.
type Answer = Result<Json<Value>, Problem>;

/// The API and the pages, behind the guard (token or login cookie, CSRF; `auth.rs`), with the
/// login form and the assets in front of it, bodies bounded by [`MAX_INPUT_BYTES`] and the
/// security headers on every response. Every refusal is the API's typed JSON error, but where
/// a browser navigates: a `GET` of a page path that is none gets an HTML 404 page, and the
/// login form's refusals its page with the error (`page.rs`). A path or method no route has is
/// behind the guard like the routes (an unknown path is told only to a caller who may call).
pub fn router(shared: Arc<Shared>) -> Router {
    let guarded = Router::new()
        .route("/api/rounds/pending", get(pending))
        .route("/api/rounds/{id}", get(round))
        .route("/api/rounds/{id}/responses", post(respond))
        .route("/api/executions", get(executions))
        .route("/api/executions/{id}", get(status))
        .route("/api/executions/{id}/events", get(events))
        .route("/api/executions/{id}/cancel", post(cancel))
        .route("/api/events/stream", get(super::events::stream))
        .route("/api/session", get(page::session))
        .route("/", get(page::shell))
        .route("/rounds/{id}", get(page::shell))
        .route("/executions/{id}", get(page::shell))
        .route("/logout", post(page::logout))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            super::auth::require,
        ));
    let open = Router::new()
        .route("/login", get(page::login_form).post(page::login))
        .route("/assets/app.js", get(page::script))
        .route("/assets/app.css", get(page::style))
        .method_not_allowed_fallback(method_not_allowed);
    guarded
        .merge(open)
        .layer(DefaultBodyLimit::max(MAX_INPUT_BYTES as usize))
        .layer(axum::middleware::from_fn(page::secure))
        .with_state(shared)
}

/// A path no route has: `route_not_found` (JSON), or for a browser's `GET` of a page path, the
/// HTML page that says so.
async fn not_found(method: Method, uri: Uri) -> Response {
    let navigation = matches!(method, Method::GET | Method::HEAD);
    if navigation && super::auth::is_page(uri.path()) {
        page::not_found()
    } else {
        Problem::route_not_found().into_response()
    }
}

/// A route asked with a method it does not take: `method_not_allowed` (JSON; axum adds the
/// `Allow` header).
async fn method_not_allowed() -> Problem {
    Problem::method_not_allowed()
}

/// Runs `call` with the executions on the blocking pool (SQLite and the component block).
async fn blocking(
    shared: &Arc<Shared>,
    call: impl FnOnce(&m3::Executions) -> anyhow::Result<Value> + Send + 'static,
) -> Answer {
    let pool = shared.clone();
    match tokio::task::spawn_blocking(move || call(pool.executions()?)).await {
        Ok(result) => {
            shared.nudge.notify_one();
            Ok(Json(result?))
        }
        Err(_) => Err(anyhow::anyhow!("EngineError: an API call failed unexpectedly").into()),
    }
}

/// `?execution=ID` of `/api/rounds/pending`.
#[derive(Debug, serde::Deserialize)]
struct PendingQuery {
    execution: Option<String>,
}

/// `GET /api/rounds/pending`: as `m3 pending --json` (after the same recovery pass).
async fn pending(State(shared): State<Arc<Shared>>, Params(query): Params<PendingQuery>) -> Answer {
    blocking(&shared, move |executions| {
        executions.recover()?;
        let execution = crate::ids::execution_filter(executions, query.execution.as_deref())?;
        let rounds = crate::pending::list_in(executions, execution.as_deref())?;
        Ok(Value::Array(
            rounds.iter().map(json::pending_round).collect(),
        ))
    })
    .await
}

/// `GET /api/rounds/{id}`: as `m3 show --redacted --json`.
async fn round(State(shared): State<Arc<Shared>>, Id(id): Id) -> Answer {
    blocking(&shared, move |executions| {
        crate::inspect::round_value(executions, &id, true)
    })
    .await
}

/// `POST /api/rounds/{id}/responses` with `{"responses": {...}, "idempotency_key": "..."}`:
/// as `m3 respond --responses FILE --idempotency-key KEY --json`, the record redacted.
async fn respond(State(shared): State<Arc<Shared>>, Id(id): Id, body: Body) -> Answer {
    let body = match tokio::time::timeout(shared.request_timeout, read_body(body)).await {
        Ok(body) => body?,
        Err(_) => return Err(Problem::too_slow(shared.request_timeout)),
    };
    let (responses, key) = answer_body(&body)?;
    let _turn = shared.writes.acquire().await;
    blocking(&shared, move |executions| {
        let round_id = crate::ids::round(executions, &id)?;
        crate::respond::submit(executions, &round_id, &responses, &key)?;
        let record = crate::inspect::round_value(executions, &round_id, true)?;
        if record["status"] == "failed" {
            // It failed after the answer was taken: the repeat is refused by the component with
            // what became of the answer (delivered and when, unconfirmed, or never delivered).
            crate::respond::submit(executions, &round_id, &responses, &key)?;
            anyhow::bail!("ManagedInputStateError: round {round_id} failed (`m3 show` says how)");
        }
        Ok(record)
    })
    .await
}

/// A request's body, refused (413) at once when its declared length is over
/// [`MAX_INPUT_BYTES`], else as soon as it grows past it.
async fn read_body(body: Body) -> Result<Vec<u8>, Problem> {
    if HttpBody::size_hint(&body).lower() > MAX_INPUT_BYTES {
        return Err(Problem::too_large(MAX_INPUT_BYTES));
    }
    let mut chunks = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|_| {
            Problem::from(crate::invalid_input("the request body could not be read"))
        })?;
        if (bytes.len() + chunk.len()) as u64 > MAX_INPUT_BYTES {
            return Err(Problem::too_large(MAX_INPUT_BYTES));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// An answer's body as sent: `responses` kept as the exact text the client wrote, for the
/// component's strict parser (as `m3 respond --responses` gives it the file's text: a request
/// key given twice is refused, never silently the last one); a field given twice is refused.
#[derive(serde::Deserialize)]
struct AnswerBody<'a> {
    #[serde(borrow)]
    responses: Option<&'a serde_json::value::RawValue>,
    idempotency_key: Option<Value>,
}

/// The response map (as JSON text) and the idempotency key of an answer's body.
fn answer_body(body: &[u8]) -> Result<(String, String), Problem> {
    let value: AnswerBody = serde_json::from_slice(body).map_err(|_| {
        crate::invalid_input(
            "the request body is not a JSON object with each field at most once (malformed_json)",
        )
    })?;
    let responses = match value.responses.map(|raw| raw.get()) {
        Some(text) if text.starts_with('{') => text.to_string(),
        _ => {
            return Err(crate::invalid_input(
                "the body needs `responses`: an object of request key -> {\"action\", \
                 \"content\"} (missing_responses)",
            )
            .into());
        }
    };
    let key = match value.idempotency_key {
        Some(Value::String(key)) if !key.is_empty() => key,
        _ => {
            return Err(crate::invalid_input(
                "the body needs `idempotency_key`, a non-empty string (a retry with the same \
                 key and answers is safe) (missing_idempotency_key)",
            )
            .into());
        }
    };
    Ok((responses, key))
}

/// `GET /api/executions`: as `m3 executions --json`.
async fn executions(State(shared): State<Arc<Shared>>) -> Answer {
    blocking(&shared, |executions| {
        executions.recover()?;
        // One unreadable record hides nothing else (`GET /api/executions/{id}` names it).
        let (states, _unreadable) = executions.states_reporting()?;
        Ok(Value::Array(states.iter().map(json::execution).collect()))
    })
    .await
}

/// `GET /api/executions/{id}`: as `m3 status --json`.
async fn status(State(shared): State<Arc<Shared>>, Id(id): Id) -> Answer {
    blocking(&shared, move |executions| {
        executions.recover()?;
        let id = crate::ids::execution(executions, &id)?;
        crate::inspect::status_value(executions, &id)
    })
    .await
}

/// `GET /api/executions/{id}/events`: as `m3 events --json`.
async fn events(State(shared): State<Arc<Shared>>, Id(id): Id) -> Answer {
    blocking(&shared, move |executions| {
        let id = crate::ids::execution(executions, &id)?;
        crate::inspect::events_value(executions, &id)
    })
    .await
}

/// `POST /api/executions/{id}/cancel`: as `m3 cancel --json`.
async fn cancel(State(shared): State<Arc<Shared>>, Id(id): Id) -> Answer {
    let _turn = shared.writes.acquire().await;
    blocking(&shared, move |executions| {
        let id = crate::ids::execution(executions, &id)?;
        Ok(json::execution(&executions.request_cancel(&id)?))
    })
    .await
}

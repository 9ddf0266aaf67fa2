//! The web inbox of `m3 serve`: the login form, one HTML shell for every page (the inbox `/`, a
//! round `/rounds/{id}`, an execution `/executions/{id}`), the page of a path that is none
//! (404), and the pages' script and style sheet. Every
//! asset is in the binary (`include_str!` of `assets/`): nothing is fetched from elsewhere at run
//! time, and the Content-Security-Policy forbids it. The script renders pages from the JSON API
//! and the event stream; it builds elements with `textContent`, never HTML from data.

use super::Shared;
use super::auth::{self, Guard};
use super::local_path::LocalPath;
use axum::Form;
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use std::sync::Arc;

/// The shell of every page; `{{csrf}}` is replaced by the server's CSRF value.
const SHELL: &str = include_str!("assets/index.html");
/// The login form; `{{next}}` and `{{error}}` are replaced (escaped).
const LOGIN: &str = include_str!("assets/login.html");
/// The page of a path that is no page.
const NOT_FOUND: &str = include_str!("assets/not_found.html");
/// The pages' script.
const SCRIPT: &str = include_str!("assets/app.js");
/// The pages' style sheet.
const STYLE: &str = include_str!("assets/app.css");

/// What every response says about where its content may come from and how it may be kept.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                      connect-src 'self'; img-src 'self' data:; form-action 'self'; \
                      frame-ancestors 'none'; base-uri 'none'";

/// Adds the security headers to every response.
pub async fn secure(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set("content-security-policy", POLICY);
    set("x-content-type-options", "nosniff");
    set("x-frame-options", "DENY");
    // Not `no-referrer`: under it a browser sends `Origin: null` with a form post, and the
    // login form must show its origin.
    set("referrer-policy", "same-origin");
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// `GET /`, `/rounds/{id}`, `/executions/{id}`: the shell; the script reads the path.
pub async fn shell(State(shared): State<Arc<Shared>>) -> Html<String> {
    Html(SHELL.replace("{{csrf}}", shared.guard.csrf()))
}

/// `GET /assets/app.js`.
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /assets/app.css`.
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// An embedded asset (the same for everyone: cacheable for a while).
fn asset(kind: &'static str, text: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        text,
    )
        .into_response()
}

/// `GET /api/session`: the CSRF value, for a page's script after the server restarted (without
/// a token the value is new each start). Other origins cannot read it (no CORS).
pub async fn session(State(shared): State<Arc<Shared>>) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({
        "csrf": shared.guard.csrf(),
        "token_required": shared.guard.has_token(),
    }))
}

/// `?next=` of the login form.
#[derive(Debug, serde::Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// The login form's fields.
#[derive(serde::Deserialize)]
pub struct Login {
    token: String,
    next: Option<String>,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Login(..)")
    }
}

/// `GET /login`: the form (a server without a token has nothing to log in to). A `next` that
/// is not a [`LocalPath`] (or a query that cannot be read) is dropped: the form leads to the
/// inbox.
pub async fn login_form(
    State(shared): State<Arc<Shared>>,
    query: Result<Query<LoginQuery>, QueryRejection>,
) -> Response {
    if !shared.guard.has_token() {
        return Redirect::to("/").into_response();
    }
    let next = query
        .ok()
        .and_then(|Query(query)| query.next)
        .and_then(|next| LocalPath::parse(&next))
        .unwrap_or_else(LocalPath::root);
    login_page(StatusCode::OK, &next, "")
}

/// `POST /login`: sets the session cookie when the token is right, from this server's own
/// form only, and sends the browser to `next`. A form that cannot be read, or whose `next` is
/// not a [`LocalPath`], is refused (the login page with its error, 400) and sets nothing.
pub async fn login(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    form: Result<Form<Login>, FormRejection>,
) -> Response {
    let guard: &Guard = &shared.guard;
    let root = LocalPath::root();
    let form = match form {
        Ok(Form(form)) => form,
        Err(rejection) => {
            let status = match rejection.status() {
                status if status.is_client_error() => status,
                _ => StatusCode::BAD_REQUEST,
            };
            return login_page(status, &root, "The login form could not be read.");
        }
    };
    if !auth::same_origin(&headers) {
        return login_page(
            StatusCode::FORBIDDEN,
            &root,
            "This form must be sent from this server's own login page.",
        );
    }
    let next = match form.next.as_deref().map(LocalPath::parse) {
        None => root,
        Some(Some(next)) => next,
        Some(None) => {
            return login_page(
                StatusCode::BAD_REQUEST,
                &root,
                "The page to return to is not a path on this server, so nothing was done. \
                 Log in here to go to the inbox.",
            );
        }
    };
    match guard.login_cookie() {
        Some(cookie) if guard.token_matches(&form.token) => {
            let mut response =
                (StatusCode::SEE_OTHER, [(header::LOCATION, next.header())]).into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Some(_) => login_page(StatusCode::UNAUTHORIZED, &next, "That is not the token."),
        None => Redirect::to("/").into_response(),
    }
}

/// A page that does not exist, for a browser's `GET` (the API's are `route_not_found`).
pub fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Html(NOT_FOUND)).into_response()
}

/// `POST /logout`: forgets the session cookie.
pub async fn logout() -> Response {
    let mut response = Redirect::to("/login").into_response();
    if let Ok(value) = HeaderValue::from_str(&Guard::logout_cookie()) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// The login page with `next` and `error` filled in.
fn login_page(status: StatusCode, next: &LocalPath, error: &str) -> Response {
    let page = LOGIN
        .replace("{{next}}", &escape(next.as_str()))
        .replace("{{error}}", &escape(error));
    (status, Html(page)).into_response()
}

/// `text` safe inside HTML text and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_values_are_escaped() {
        assert_eq!(
            escape("\"><script>'&"),
            "&quot;&gt;&lt;script&gt;&#39;&amp;"
        );
    }

    #[test]
    fn every_asset_is_embedded_and_nothing_is_fetched_from_elsewhere() {
        for text in [SHELL, LOGIN, NOT_FOUND, SCRIPT, STYLE] {
            assert!(!text.is_empty());
            for remote in ["http://", "https://", "//cdn", "@import"] {
                assert!(!text.contains(remote), "an asset names {remote}");
            }
        }
        assert!(SHELL.contains("{{csrf}}") && SHELL.contains("/assets/app.js"));
        assert!(LOGIN.contains("{{next}}") && LOGIN.contains("{{error}}"));
    }
}

//! The web inbox of `m3 serve`: the login form, one HTML shell for every page (the inbox `/`, a
//! round `/rounds/{id}`, an execution `/executions/{id}`) and its script and style sheet. Every
//! asset is in the binary (`include_str!` of `assets/`): nothing is fetched from elsewhere at run
//! time, and the Content-Security-Policy forbids it. The script renders pages from the JSON API
//! and the event stream; it builds elements with `textContent`, never HTML from data.

use super::Shared;
use super::auth::{self, Guard};
use axum::Form;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use std::sync::Arc;

/// The shell of every page; `{{csrf}}` is replaced by the server's CSRF value.
const SHELL: &str = include_str!("assets/index.html");
/// The login form; `{{next}}` and `{{error}}` are replaced (escaped).
const LOGIN: &str = include_str!("assets/login.html");
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

/// A same-site path to go to after logging in (anything else goes to the inbox).
fn next_path(next: Option<&str>) -> &str {
    match next {
        Some(p) if p.starts_with('/') && !p.starts_with("//") && !p.contains('\\') => p,
        _ => "/",
    }
}

/// `GET /login`: the form (a server without a token has nothing to log in to).
pub async fn login_form(
    State(shared): State<Arc<Shared>>,
    axum::extract::Query(query): axum::extract::Query<LoginQuery>,
) -> Response {
    if !shared.guard.has_token() {
        return Redirect::to("/").into_response();
    }
    login_page(StatusCode::OK, next_path(query.next.as_deref()), "")
}

/// `POST /login`: sets the session cookie when the token is right, from this server's own
/// form only.
pub async fn login(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Form(form): Form<Login>,
) -> Response {
    let guard: &Guard = &shared.guard;
    let next = next_path(form.next.as_deref()).to_string();
    if !auth::same_origin(&headers) {
        return login_page(
            StatusCode::FORBIDDEN,
            &next,
            "This form must be sent from this server's own login page.",
        );
    }
    match guard.login_cookie() {
        Some(cookie) if guard.token_matches(&form.token) => {
            let mut response = Redirect::to(&next).into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Some(_) => login_page(StatusCode::UNAUTHORIZED, &next, "That is not the token."),
        None => Redirect::to("/").into_response(),
    }
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
fn login_page(status: StatusCode, next: &str, error: &str) -> Response {
    let page = LOGIN
        .replace("{{next}}", &escape(next))
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
    fn only_same_site_paths_are_followed_after_login() {
        assert_eq!(next_path(Some("/rounds/abc")), "/rounds/abc");
        for outside in ["//evil.example/", "https://evil.example/", "/\\evil", "x"] {
            assert_eq!(next_path(Some(outside)), "/", "{outside}");
        }
        assert_eq!(next_path(None), "/");
    }

    #[test]
    fn login_values_are_escaped() {
        assert_eq!(
            escape("\"><script>'&"),
            "&quot;&gt;&lt;script&gt;&#39;&amp;"
        );
    }

    #[test]
    fn every_asset_is_embedded_and_nothing_is_fetched_from_elsewhere() {
        for text in [SHELL, LOGIN, SCRIPT, STYLE] {
            assert!(!text.is_empty());
            for remote in ["http://", "https://", "//cdn", "@import"] {
                assert!(!text.contains(remote), "an asset names {remote}");
            }
        }
        assert!(SHELL.contains("{{csrf}}") && SHELL.contains("/assets/app.js"));
        assert!(LOGIN.contains("{{next}}") && LOGIN.contains("{{error}}"));
    }
}

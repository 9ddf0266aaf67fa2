//! Who may call `m3 serve`, and cross-site request forgery.
//!
//! - With a token, every API call and page needs it: an `Authorization: Bearer TOKEN` header, or
//!   the session cookie the login form sets (HttpOnly, SameSite=Strict, its value an HMAC of the
//!   token, so a restart keeps people logged in and a new token logs everyone out). Without one
//!   (loopback only), only requests whose `Host` is a loopback name are answered, so a web page
//!   elsewhere cannot reach the server through DNS rebinding.
//! - A state-changing request that is not authenticated by the header must not come from
//!   another origin (`Origin`, `Sec-Fetch-Site`) and must carry the server's CSRF value in
//!   `X-M3-CSRF` (pages get it in a `<meta>`; `GET /api/session` gives it to same-origin
//!   scripts only) or a JSON body (`Content-Type: application/json`, which a cross-site page
//!   cannot send without a CORS preflight this server never approves). A cross-site form can
//!   set neither, nor, under SameSite=Strict, send the cookie.
//!
//! Tokens, session values and CSRF values are compared in constant time and never logged,
//! printed or quoted in an error.

use super::Shared;
use super::local_path::LocalPath;
use super::problem::Problem;
use axum::extract::{Request, State};
use axum::http::uri::Authority;
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The session cookie's name.
pub const COOKIE: &str = "m3_session";
/// The header that carries the CSRF value.
pub const CSRF_HEADER: &str = "x-m3-csrf";

/// A secret token (its `Debug` hides it).
pub struct Token(String);

impl Token {
    /// The token `text` gives (`source` names where it came from, for the message), without
    /// its surrounding whitespace. Refused, its text never quoted, when nothing is left
    /// (`empty_token`: anyone could log in with a space) or when it holds a control character
    /// (`invalid_token`: no `Authorization` header or login form could carry it).
    pub fn parse(text: &str, source: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err(format!(
                "the token from {source} is empty or only whitespace, which anyone could give; \
                 give a token of visible characters (empty_token)"
            ));
        }
        if text.chars().any(char::is_control) {
            return Err(format!(
                "the token from {source} holds a control character, which no `Authorization` \
                 header can carry; give a token of visible characters (invalid_token)"
            ));
        }
        Ok(Self(text.to_string()))
    }

    /// Whether `given` is the token, in time independent of where they differ.
    fn matches(&self, given: &str) -> bool {
        same(&self.0, given)
    }

    /// A value derived from the token for `purpose` (hex HMAC-SHA256).
    fn derive(&self, purpose: &str) -> String {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(self.0.as_bytes()).expect("HMAC takes any key length");
        mac.update(purpose.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Whether two secrets are equal, in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

/// The server's secrets: the token (if any), the session cookie's value and the CSRF value.
pub struct Guard {
    token: Option<Token>,
    session: Option<String>,
    csrf: String,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guard(..)")
    }
}

impl Guard {
    /// The guard of a server with `token` (or none: loopback only). Without a token the CSRF
    /// value is random for this process.
    pub fn new(token: Option<Token>) -> anyhow::Result<Self> {
        let (session, csrf) = match &token {
            Some(token) => (
                Some(token.derive("m3 serve session v1")),
                token.derive("m3 serve csrf v1"),
            ),
            None => {
                let mut bytes = [0u8; 32];
                getrandom::fill(&mut bytes).map_err(|e| {
                    anyhow::anyhow!("EngineError: no randomness for the CSRF value: {e}")
                })?;
                (None, hex::encode(bytes))
            }
        };
        Ok(Self {
            token,
            session,
            csrf,
        })
    }

    /// Whether a token is needed.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// The CSRF value pages and same-origin scripts send back in [`CSRF_HEADER`].
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Whether `given` is the token.
    pub fn token_matches(&self, given: &str) -> bool {
        self.token.as_ref().is_some_and(|t| t.matches(given))
    }

    /// The `Set-Cookie` value that logs a browser in (for a server with a token).
    pub fn login_cookie(&self) -> Option<String> {
        self.session.as_ref().map(|value| {
            cookie::Cookie::build((COOKIE, value.clone()))
                .http_only(true)
                .same_site(cookie::SameSite::Strict)
                .path("/")
                .build()
                .to_string()
        })
    }

    /// The `Set-Cookie` value that logs a browser out.
    pub fn logout_cookie() -> String {
        cookie::Cookie::build((COOKIE, ""))
            .http_only(true)
            .same_site(cookie::SameSite::Strict)
            .path("/")
            .max_age(cookie::time::Duration::ZERO)
            .build()
            .to_string()
    }

    /// How `headers` authenticate.
    fn authenticate(&self, headers: &HeaderMap) -> Caller {
        let Some(token) = &self.token else {
            return Caller::Anyone;
        };
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            // The scheme's name is case-insensitive (RFC 9110, 11.1).
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim_start());
        if bearer.is_some_and(|given| token.matches(given)) {
            return Caller::Bearer;
        }
        let session = self.session.as_deref().unwrap_or_default();
        let cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(cookie::Cookie::split_parse)
            .filter_map(Result::ok)
            .any(|c| c.name() == COOKIE && same(c.value(), session));
        if cookie {
            Caller::Cookie
        } else {
            Caller::Nobody
        }
    }

    /// Whether a state-changing request not authenticated by the header (a cookie, or no token)
    /// cannot be a cross-site forgery: it comes from no other origin, and it carries the CSRF
    /// value or a JSON body. A cross-site page can send neither: a form cannot set headers or
    /// the JSON content type, and a script doing so needs a CORS preflight this server never
    /// approves.
    fn csrf_holds(&self, headers: &HeaderMap) -> bool {
        let value = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
        same_origin(headers) && (json || value.is_some_and(|v| same(v, &self.csrf)))
    }
}

/// How a request authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// No token is set (loopback only).
    Anyone,
    /// The `Authorization: Bearer` header: a script, never a cross-site form.
    Bearer,
    /// The login cookie: a browser.
    Cookie,
    /// Neither.
    Nobody,
}

/// Whether a browser's request says it comes from the page's own origin (or says nothing).
pub fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name| headers.get(name).and_then(|v: &_| v.to_str().ok());
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site"))
        && !matches!(site, "same-origin" | "none")
    {
        return false;
    }
    match (text(header::ORIGIN), text(header::HOST)) {
        (None, _) => true,
        (Some(origin), Some(host)) => {
            origin.strip_prefix("http://") == Some(host)
                || origin.strip_prefix("https://") == Some(host)
        }
        (Some(_), None) => false,
    }
}

/// Whether `Host` names this machine's loopback (`localhost`, `127.x.y.z`, `[::1]`), with or
/// without a numeric port. The header is parsed as an authority and must be exactly a host and
/// an optional port, the host compared whole: `localhost:1@evil.example` (user information, the
/// host being `evil.example`), `[::1].evil.example`, `localhost.` or `localhost:x` are foreign.
fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(Ok(authority)) = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::parse::<Authority>)
    else {
        return false;
    };
    let name = authority.host();
    let exact = match authority.port_u16() {
        Some(port) => format!("{name}:{port}") == authority.as_str(),
        None => name == authority.as_str(),
    };
    let loopback = match name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        Some(v6) => v6.parse::<Ipv6Addr>().is_ok_and(|ip| ip.is_loopback()),
        None => {
            name.eq_ignore_ascii_case("localhost")
                || name.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
        }
    };
    exact && loopback
}

/// Whether `path` is a page (answered with a redirect to the login form) rather than the API
/// (`/api` and what is under it).
pub fn is_page(path: &str) -> bool {
    !(path == "/api" || path.starts_with("/api/"))
}

/// The guard in front of every API call and page but the login form and the assets.
pub async fn require(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let guard = &shared.guard;
    let headers = request.headers();
    let path = request.uri().path();
    if !guard.has_token() && !loopback_host(headers) {
        return Problem::host_refused().into_response();
    }
    let caller = guard.authenticate(headers);
    if caller == Caller::Nobody {
        if is_page(path) && request.method() == Method::GET {
            // Back here after logging in, when here is a path a login may lead to.
            let back = request
                .uri()
                .path_and_query()
                .and_then(|p| LocalPath::parse(p.as_str()));
            let target = match back {
                Some(back) => format!("/login?next={}", encode_component(back.as_str())),
                None => "/login".to_string(),
            };
            return Redirect::to(&target).into_response();
        }
        return Problem::unauthorized().into_response();
    }
    let safe = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if !safe && caller != Caller::Bearer && !guard.csrf_holds(headers) {
        return Problem::csrf_refused().into_response();
    }
    next.run(request).await
}

/// `text` percent-encoded for a query value.
pub fn encode_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~/".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn only_loopback_hosts_pass_without_a_token() {
        for host in [
            "127.0.0.1:8383",
            "localhost:1",
            "[::1]:9",
            "LOCALHOST",
            "127.9.9.9",
            "[0:0:0:0:0:0:0:1]:80",
        ] {
            assert!(loopback_host(&headers(&[("host", host)])), "{host}");
        }
        for host in [
            "evil.example:8383",
            "10.0.0.1:8383",
            "localhost.evil.example",
            "",
            "localhost:1@evil.example",
            "localhost@evil.example",
            "[::1].evil.example",
            "[::1]evil.example:80",
            "localhost.",
            "localhost:",
            "localhost:x",
            "localhost:65536",
            "127.0.0.1:1:2",
            "127.1",
            "[::2]",
            "::1",
            "localhost/x",
        ] {
            assert!(!loopback_host(&headers(&[("host", host)])), "{host}");
        }
        assert!(!loopback_host(&HeaderMap::new()));
    }

    #[test]
    fn a_blank_token_or_one_with_a_control_character_is_refused_unquoted() {
        for blank in ["", " ", "\t \t", "\n", "\u{a0}\u{3000}"] {
            let error = Token::parse(blank, "--token").unwrap_err();
            assert!(error.ends_with("(empty_token)"), "{blank:?}: {error}");
        }
        for odd in ["k9q\u{7}z", "k9q\nz", "k9q\u{1b}[2Jz", "k9q\u{85}z"] {
            let error = Token::parse(odd, "--token").unwrap_err();
            assert!(error.ends_with("(invalid_token)"), "{odd:?}: {error}");
            assert!(!error.contains("k9q"), "{error}");
        }
        let token = Token::parse("  s3cret x\t\n", "--token").unwrap();
        assert!(token.matches("s3cret x") && !token.matches("  s3cret x\t\n"));
        assert_eq!(format!("{token:?}"), "Token(..)");
    }

    #[test]
    fn other_origins_are_not_the_same_origin() {
        assert!(same_origin(&headers(&[("host", "127.0.0.1:1")])));
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:1"),
            ("origin", "http://127.0.0.1:1"),
            ("sec-fetch-site", "same-origin"),
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:1"),
            ("origin", "http://127.0.0.1:2"),
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:1"),
            ("sec-fetch-site", "cross-site"),
        ])));
        assert!(!same_origin(&headers(&[("origin", "http://127.0.0.1:1")])));
    }

    #[test]
    fn the_cookie_and_the_csrf_value_come_from_the_token_and_say_nothing_of_it() {
        let guard = Guard::new(Some(Token::parse("s3cret", "a test").unwrap())).unwrap();
        let again = Guard::new(Some(Token::parse("s3cret", "a test").unwrap())).unwrap();
        let other = Guard::new(Some(Token::parse("other", "a test").unwrap())).unwrap();
        let cookie = guard.login_cookie().unwrap();
        assert_eq!(Some(cookie.clone()), again.login_cookie());
        assert_ne!(Some(cookie.clone()), other.login_cookie());
        assert!(!cookie.contains("s3cret") && !guard.csrf().contains("s3cret"));
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(cookie.contains(attribute), "{cookie}");
        }
        let value = cookie.split(';').next().unwrap().to_string();
        assert_eq!(
            guard.authenticate(&headers(&[("cookie", &value)])),
            Caller::Cookie
        );
        assert_eq!(
            other.authenticate(&headers(&[("cookie", &value)])),
            Caller::Nobody
        );
        assert_eq!(
            guard.authenticate(&headers(&[("authorization", "Bearer s3cret")])),
            Caller::Bearer
        );
        assert_eq!(
            guard.authenticate(&headers(&[("authorization", "bearer s3cret")])),
            Caller::Bearer
        );
        assert_eq!(
            guard.authenticate(&headers(&[("authorization", "Bearer s3cre")])),
            Caller::Nobody
        );
        assert_eq!(
            guard.authenticate(&headers(&[("authorization", "Basic s3cret")])),
            Caller::Nobody
        );
        let open = Guard::new(None).unwrap();
        assert_ne!(open.csrf(), Guard::new(None).unwrap().csrf());
        assert_eq!(open.authenticate(&HeaderMap::new()), Caller::Anyone);
    }

    #[test]
    fn the_csrf_value_must_come_from_the_same_origin() {
        let guard = Guard::new(None).unwrap();
        let csrf = guard.csrf().to_string();
        assert!(guard.csrf_holds(&headers(&[("host", "h:1"), (CSRF_HEADER, &csrf)])));
        assert!(!guard.csrf_holds(&headers(&[("host", "h:1")])));
        assert!(!guard.csrf_holds(&headers(&[("host", "h:1"), (CSRF_HEADER, "x")])));
        let json = ("content-type", "application/json; charset=utf-8");
        assert!(guard.csrf_holds(&headers(&[("host", "h:1"), json])));
        assert!(!guard.csrf_holds(&headers(&[("host", "h:1"), ("content-type", "text/plain")])));
        assert!(!guard.csrf_holds(&headers(&[
            ("host", "h:1"),
            json,
            ("origin", "http://elsewhere:1"),
        ])));
        assert!(!guard.csrf_holds(&headers(&[
            ("host", "h:1"),
            (CSRF_HEADER, &csrf),
            ("origin", "http://elsewhere:1"),
        ])));
    }
}
